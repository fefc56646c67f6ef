"""Overlapping causes with a known answer by construction (issue 20).

Every pair of causes that can overlap in one job — sequence length + a heavy last stage, a
slow worker + a heavy last stage, GC + a slow worker, communication (a slow link) + a slow
worker — in two strengths, so that either cause dominates. The *truth* of a case is
measured, not assumed: the job is generated again without each cause (same seed: the
other injections draw the same random numbers) and analysed; the cause whose removal
leaves the smaller slowdown S removes more of it, and is the one the verdict must name.

``python bench/overlap_matrix.py`` prints every case and the confusion matrix
(docs/benchmarks/verdict.md, "Overlapping causes"); ``tests/synth/test_overlap.py`` asserts
the verdict on each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from stragglers.synth.generator import SynthSpec, generate

#: The causes of each pair, as the verdict names them, and how each is taken out of a spec.
_WITHOUT: dict[str, dict[str, Any]] = {
    "sequence_length": {"seq_len_sigma": 0.0},
    "last_stage": {"heavy_last_stage": 1.0},
    "worker": {"slow_workers": []},
    "gc": {"gc_prob": 0.0},
    "communication": {"slow_links": []},
}

_BASE: dict[str, Any] = {"dp": 2, "pp": 4, "steps": 8, "microbatches": 8, "jitter": 0.01,
                         "seed": 11}


@dataclass(frozen=True)
class OverlapCase:
    """One job with two injected causes; ``strong`` is the cause meant to dominate (the
    truth is still measured: :func:`measure`)."""

    name: str
    causes: tuple[str, str]
    strong: str
    spec: SynthSpec

    def without(self, cause: str) -> SynthSpec:
        """The same job without ``cause`` (every other injection and random draw kept)."""
        return replace(self.spec, **_WITHOUT[cause])


def _case(name: str, causes: tuple[str, str], strong: str, **spec: Any) -> OverlapCase:
    return OverlapCase(name, causes, strong, SynthSpec(name=name, **{**_BASE, **spec}))


#: Four pairs × two strengths (the name says which cause is meant to dominate).
CASES: tuple[OverlapCase, ...] = (
    _case("seq>last", ("sequence_length", "last_stage"), "sequence_length",
          seq_len_sigma=0.3, heavy_last_stage=1.5),
    _case("last>seq", ("sequence_length", "last_stage"), "last_stage",
          seq_len_sigma=0.2, heavy_last_stage=2.2),
    _case("worker>last", ("worker", "last_stage"), "worker",
          slow_workers=[(1, 1, 1.8)], heavy_last_stage=1.25),
    _case("last>worker", ("worker", "last_stage"), "last_stage",
          slow_workers=[(1, 3, 1.3)], heavy_last_stage=1.8),
    _case("gc>worker", ("gc", "worker"), "gc",
          gc_prob=0.3, gc_pause=1.0, slow_workers=[(1, 1, 1.3)]),
    _case("worker>gc", ("gc", "worker"), "worker",
          gc_prob=0.1, gc_pause=0.3, slow_workers=[(1, 1, 2.0)]),
    _case("comm>worker", ("communication", "worker"), "communication",
          slow_links=[(0, 1, 100.0)], slow_workers=[(0, 3, 1.3)]),
    _case("worker>comm", ("communication", "worker"), "worker",
          slow_links=[(0, 1, 60.0)], slow_workers=[(0, 3, 1.8)]),
)

#: Cases at the boundary, where the two measures of the removal disagree (no answer by
#: construction): reported, not scored.
BOUNDARY: tuple[OverlapCase, ...] = (
    _case("seq~last", ("sequence_length", "last_stage"), "sequence_length",
          seq_len_sigma=0.3, heavy_last_stage=1.8),
)


@dataclass(frozen=True)
class Timing:
    """S of a generated job, and its mean no-delay and ideal step times (seconds)."""

    slowdown: float
    t_ori: float
    t_ideal: float


@dataclass(frozen=True)
class OverlapTruth:
    """What the generator says about a case: the job, and the job without each cause.

    ``removed(c)``: the share of the slowdown that removing ``c`` removes, (S − S_without)
    / (S − 1), S of each job over its own ideal timeline: the truth. ``removed_time(c)``: the
    same in step time over the full job's ideal, (T − T_without) / (T − T_ideal), as the
    verdict's ``rem`` counts it; removing a heavy last stage also shortens the ideal
    timeline, so the two can disagree near the boundary, and a case where they name
    different causes has no answer by construction (``clear`` is False).
    """

    case: OverlapCase
    full: Timing
    without: Mapping[str, Timing]

    @property
    def slowdown(self) -> float:
        return self.full.slowdown

    def removed(self, cause: str) -> float:
        gap = self.full.slowdown - 1.0
        return (self.full.slowdown - self.without[cause].slowdown) / gap if gap > 0 else 0.0

    def removed_time(self, cause: str) -> float:
        gap = self.full.t_ori - self.full.t_ideal
        return (self.full.t_ori - self.without[cause].t_ori) / gap if gap > 0 else 0.0

    @property
    def truth(self) -> str:
        """The cause whose removal leaves the smaller slowdown."""
        a, b = self.case.causes
        return a if self.removed(a) >= self.removed(b) else b

    @property
    def clear(self) -> bool:
        """Both measures of the removal name the same cause."""
        a, b = self.case.causes
        by_time = a if self.removed_time(a) >= self.removed_time(b) else b
        return by_time == self.truth


def timing_of(spec: SynthSpec) -> Timing:
    """S and step times of a generated job (no verdict, no exact S_w)."""
    from stragglers.analysis.engine import prepare
    from stragglers.analysis.metrics import compute_metrics
    from stragglers.trace import build_table

    trace, meta, _ = generate(spec)
    m = compute_metrics(prepare(build_table(trace, meta)), exact_workers=False)
    return Timing(m.slowdown, float(m.nodelay.mean()), float(m.ideal.mean()))


def measure(case: OverlapCase) -> OverlapTruth:
    """The truth of a case, by generating it with and without each cause."""
    return OverlapTruth(case, timing_of(case.spec),
                        {c: timing_of(case.without(c)) for c in case.causes})


@dataclass(frozen=True)
class OverlapRow:
    """One case: its measured truth and the verdict on the full job."""

    truth: OverlapTruth
    verdict: str
    confidence: float
    shares: Mapping[str, tuple[float | None, float | None]]  # cause -> (rem, add)
    evidence: tuple[str, ...]

    @property
    def right(self) -> bool:
        return self.verdict == self.truth.truth


def evaluate(case: OverlapCase) -> OverlapRow:
    """Measure the truth of a case and analyse the full job."""
    from stragglers.analysis import analyze_table
    from stragglers.trace import build_table

    truth = measure(case)
    trace, meta, _ = generate(case.spec)
    v = analyze_table(build_table(trace, meta)).result.verdict
    shares = {}
    for c in case.causes:
        f = next((f for f in v.findings if f.cause.value == c), None)
        shares[c] = (None, None) if f is None or f.m is None else (f.m.rem, f.m.add)
    return OverlapRow(truth, v.cause.value, v.confidence, shares, v.evidence)


def matrix_markdown(rows: Iterable[OverlapRow]) -> str:
    """The cases and the confusion matrix (truth × verdict) as Markdown tables."""
    rows = list(rows)
    out = ["| case | S | S without … | removed: S (time) | verdict: rem / add "
           "| truth | verdict | conf. |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        t = r.truth
        a, b = t.case.causes

        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:.2f}"

        out.append(
            f"| {t.case.name} | {t.slowdown:.3f} | {a} {t.without[a].slowdown:.3f}, {b} "
            f"{t.without[b].slowdown:.3f} | {a} {t.removed(a):.0%} ({t.removed_time(a):.0%}), "
            f"{b} {t.removed(b):.0%} ({t.removed_time(b):.0%}) | "
            f"{a} {f(r.shares[a][0])} / {f(r.shares[a][1])}, {b} {f(r.shares[b][0])} / "
            f"{f(r.shares[b][1])} | {t.truth} | {r.verdict} | {r.confidence:.2f} |")
    causes = sorted({c for r in rows for c in r.truth.case.causes})
    verdicts = causes + sorted({r.verdict for r in rows} - set(causes))
    out += ["", "| truth \\ verdict | " + " | ".join(verdicts) + " | right |",
            "| --- |" + " ---: |" * (len(verdicts) + 1)]
    for c in causes:
        mine = [r for r in rows if r.truth.truth == c]
        if not mine:
            continue
        counts = [sum(1 for r in mine if r.verdict == v) for v in verdicts]
        out.append(f"| {c} | " + " | ".join(map(str, counts))
                   + f" | {sum(r.right for r in mine)}/{len(mine)} |")
    right = sum(r.right for r in rows)
    out.append(f"\n{right}/{len(rows)} verdicts name the cause whose removal removes more "
               "slowdown.")
    return "\n".join(out)
