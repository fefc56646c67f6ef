"""From the hypotheses' findings to one verdict, with a confidence that means something.

**Choice.** Every hypothesis is tested. The size of the problem is S, or the exact S_w of
the workers the ``worker`` hypothesis blames when that is larger (S compares with every op
at the job-wide mean, which in a small job carries part of one straggler's own excess: a
slow middle stage of three had S_w 1.19 at S 1.04). Below ``threshold`` the verdict is
``none``, and the hypothesis that would win is still named as ``leading`` when the problem
size reaches 1.03 (where the paper attributes) and it explains at least ``explain`` of it
(a GC that costs 8% today is worth knowing about, but not worth paging anyone). Otherwise,
of the hypotheses that apply, the one that explains the largest share of the slowdown is
the cause (``weak`` when even that share is below ``explain``); the others with at least
``contribute`` are listed as contributing. A hypothesis applies when its gates hold **and**
its ops explain some of the slowdown (a share above :data:`~.base.NONE_SHARE`, the share
printed as "none"): one that explains none is listed as not applicable, with that reason.
When no hypothesis applies, or when the chosen cause's confidence is 0 (it would print as
0.00), the verdict is ``unexplained`` with confidence 0: a verdict never names a cause its
own evidence contradicts (the heatmaps and attribution still say where the time went).

**Ranking.** A hypothesis's share is its *removal* share ``rem`` (Eq. 5, as the study's M_W
and M_S): the part of the slowdown that disappears when only its ops are fixed, bounded to
[0, 1] (``rem`` above 1: fixing them alone leaves the job faster than the ideal timeline;
they explain all of it). ``add`` (the slowdown its ops cause alone in the ideal timeline) is
evidence, and breaks ties: of the hypotheses whose shares lie within ``tie_margin`` of the
largest, the one with the largest ``add`` wins. When two or more causes each explain at
least ``explain`` of the slowdown, one evidence line names them all.

**Confidence** = agreement × strength × trust:

* *agreement*: the steps are resampled with replacement ``bootstrap`` times; in each
  resample S and every applicable hypothesis's share are recomputed from the per-step times
  of their what-ifs (no new simulation), and the same rule picks a cause. Agreement is the
  share of resamples that pick the same cause (for ``none``: that keep the problem size
  below the threshold). It is low when the evidence rests on a few steps or when two
  causes are close.
* *strength*: min(1, share / explain): a cause that explains less than ``explain`` of the
  slowdown is not a confident answer even when it is stable.
* *trust*: ``untrustworthy_factor`` when the result is untrustworthy (simulation
  discrepancy above 5%, or caveats about the trace), else 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from stragglers.analysis.engine import WhatIfEngine
from stragglers.analysis.metrics import ATTRIBUTION_THRESHOLD, Metrics
from stragglers.analysis.verdict.base import NONE_SHARE, Cause, Finding, Hypothesis, portion
from stragglers.analysis.verdict.config import VerdictConfig
from stragglers.analysis.verdict.context import VerdictContext
from stragglers.analysis.verdict.hypotheses import ALL
from stragglers.analysis.verdict.hypotheses.host import HostEvidence, test_host
from stragglers.analysis.workers import Worker, names
from stragglers.phases import phase


@dataclass(frozen=True)
class Verdict:
    """The root cause of one trace's slowdown, with its evidence.

    ``findings``: every hypothesis tested, in :data:`~stragglers.analysis.verdict.hypotheses.
    ALL` order; ``contributing``: applicable findings other than the cause with at least
    ``contribute`` share; ``agreement``: the bootstrap agreement behind ``confidence``;
    ``leading``: for a ``none`` verdict (problem below ``threshold``), the applicable
    hypothesis that explains the largest share of the small slowdown there is (what the cause
    would be if the problem grew past the threshold), else None.
    """

    cause: Cause
    workers: tuple[Worker, ...]
    confidence: float
    evidence: tuple[str, ...]
    findings: tuple[Finding, ...]
    contributing: tuple[Finding, ...]
    weak: bool
    agreement: float
    strength: float
    trusted: bool
    config: VerdictConfig
    signals: Mapping[str, Any]
    leading: Finding | None = None

    @property
    def finding(self) -> Finding | None:
        """The finding of the chosen cause (None for ``none`` / ``unexplained``)."""
        return next((f for f in self.findings if f.cause == self.cause), None)

    def finding_of(self, cause: Cause) -> Finding | None:
        return next((f for f in self.findings if f.cause == cause), None)


def _problem_size(metrics: Metrics, lead: tuple[Worker, ...], index: np.ndarray | None
                  ) -> np.ndarray:
    """The size of the straggler problem: S, or the largest exact S_w of the ``lead``
    workers when it is larger (over the steps of each row of ``index``, or all steps)."""
    if index is None:
        index = np.arange(len(metrics.steps))[None, :]
    ideal = metrics.ideal[index].mean(axis=1)
    size = metrics.nodelay[index].mean(axis=1) / ideal
    exact = metrics.worker_exact
    if exact is not None:
        for w in lead:
            size = np.maximum(size, exact[w.dp_rank, w.stage][index].mean(axis=1) / ideal)
    return np.asarray(size)


def _winner(share: np.ndarray, add: np.ndarray, margin: float) -> np.ndarray:
    """The rule on (candidates, B) shares and adds (NaN: no add what-if): of the candidates
    whose share is within ``margin`` of the largest, the one with the largest add (its share
    where it has none); ties go to the first. Returns (B,) positions."""
    near = share >= share.max(axis=0, keepdims=True) - margin - 1e-12
    key = np.where(np.isnan(add), share, add)
    return np.asarray(np.argmax(np.where(near, key, -np.inf), axis=0))


def _choose(candidates: Sequence[Finding], cfg: VerdictConfig) -> Finding:
    """The candidate the rule picks on the whole trace."""
    share = np.array([[f.share] for f in candidates])
    add = np.array([[np.nan if f.m is None or f.m.add is None else f.m.add]
                    for f in candidates])
    return candidates[int(_winner(share, add, cfg.tie_margin)[0])]


@dataclass(frozen=True)
class _Resamples:
    """The rule applied to each resample of the steps: ``below`` (B,) the blocking problem
    stays below the threshold; ``winner`` (B,) the position of the blocking candidate the
    rule picks; ``host`` (B,) the host cause wins (its time beats the blocking winner's, or
    the blocking problem is below the threshold, and the discrepancy reaches it)."""

    below: np.ndarray
    winner: np.ndarray
    host: np.ndarray


def _resample(metrics: Metrics, candidates: Sequence[Finding], cfg: VerdictConfig,
              lead: tuple[Worker, ...], host: HostEvidence | None) -> _Resamples | None:
    """The rule on ``bootstrap`` resamples of the steps (None when there are none)."""
    n = len(metrics.steps)
    if cfg.bootstrap == 0 or n == 0:
        return None
    rng = np.random.default_rng(cfg.seed)
    index = rng.integers(0, n, size=(cfg.bootstrap, n))
    below = _problem_size(metrics, lead, index) < cfg.threshold
    winner = np.zeros(cfg.bootstrap, dtype=np.int64)
    best_time = np.zeros(cfg.bootstrap)
    if candidates:
        parts = [f.m.resampled(index) if f.m is not None else
                 (np.zeros(cfg.bootstrap), np.full(cfg.bootstrap, np.nan)) for f in candidates]
        shares = np.stack([p[0] for p in parts])
        winner = _winner(shares, np.stack([p[1] for p in parts]), cfg.tie_margin)
        gap = metrics.nodelay[index].mean(axis=1) - metrics.ideal[index].mean(axis=1)
        best_time = shares[winner, np.arange(cfg.bootstrap)] * np.maximum(gap, 0.0)
    host_wins = np.zeros(cfg.bootstrap, dtype=bool)
    if host is not None and host.finding.applicable:
        disc = metrics.actual[index].mean(axis=1) / metrics.nodelay[index].mean(axis=1)
        host_wins = (disc >= cfg.threshold) & (below | (host.explained(metrics, index)
                                                        > best_time))
    return _Resamples(below, winner, host_wins)


def _agreement(r: _Resamples | None, chosen: Cause, candidates: Sequence[Finding]) -> float:
    """Share of the resamples in which the rule picks ``chosen`` again."""
    if r is None:
        return 1.0
    if chosen == Cause.NONE:
        return float((r.below & ~r.host).mean())
    if chosen == Cause.HOST:
        return float(r.host.mean())
    if not candidates:
        return float((~r.below & ~r.host).mean())
    pos = next(i for i, f in enumerate(candidates) if f.cause == chosen)
    return float(((~r.below) & (r.winner == pos) & ~r.host).mean())


#: How the evidence names each cause in a sentence about several.
_LABELS = {Cause.WORKER: "", Cause.LAST_STAGE: "the last stage",
           Cause.SEQUENCE_LENGTH: "sequence length", Cause.GC: "garbage collection",
           Cause.PAUSES: "pauses", Cause.COMMUNICATION: "communication",
           Cause.HOST: "host time"}


def label(f: Finding) -> str:
    """A cause in words ("sequence length", "the last stage", "worker 2,1")."""
    if f.cause == Cause.WORKER:
        return f"worker{'s' if len(f.workers) > 1 else ''} {names(f.workers, 3)}"
    if f.cause == Cause.HOST:
        return f"host time on {names(f.workers, 3)}"
    return _LABELS.get(f.cause, f.cause.value)


def _overlap_line(chosen: Finding, others: Sequence[Finding], cfg: VerdictConfig
                  ) -> str | None:
    """One line naming every cause that explains most of the slowdown, when there are two or
    more ("sequence length (73% removed) and the last stage (69%)")."""
    most = [f for f in others if f.share >= cfg.explain]
    if chosen.share < cfg.explain or not most:
        return None
    most.sort(key=lambda f: -f.share)
    parts = [f"{label(chosen)} ({portion(chosen.share)} removed)"]
    parts += [f"{label(f)} ({portion(f.share)})" for f in most]
    listed = ", ".join(parts[:-1]) + " and " + parts[-1]
    return (f"{len(parts)} causes each explain most of the slowdown (the share that "
            f"disappears when only that cause is fixed): {listed}")


def _tie_line(chosen: Finding, candidates: Sequence[Finding], cfg: VerdictConfig
              ) -> str | None:
    """Why ``chosen`` won a tie: other shares within ``tie_margin`` of the largest (None
    when it has the largest share by more than the margin)."""
    top = max(f.share for f in candidates)
    tied = [f for f in candidates if f is not chosen and f.share >= top - cfg.tie_margin - 1e-12]
    if not tied:
        return None
    other = max(tied, key=lambda f: f.share)

    def add(f: Finding) -> str:
        return "-" if f.m is None or f.m.add is None else f"{f.m.add:.2f}"

    return (f"{label(chosen)} and {label(other)} remove about as much of the slowdown "
            f"({portion(chosen.share)} and {portion(other.share)}, within "
            f"{cfg.tie_margin:.0%}): {label(chosen)} is named because its ops cause more "
            f"alone (add {add(chosen)} against {add(other)})")


def _signals(ctx: VerdictContext, findings: Sequence[Finding]) -> dict[str, Any]:
    """The figures the verdict was decided on (result.json ``verdict.signals``)."""
    m = ctx.metrics
    by = {f.cause: f for f in findings}

    def rem(c: Cause) -> float | None:
        f = by.get(c)
        return None if f is None or f.m is None else f.m.rem

    def add(c: Cause) -> float | None:
        f = by.get(c)
        return None if f is None or f.m is None else f.m.add

    fb = ctx.fb_signal
    return {
        "slowdown": m.slowdown, "m_w": m.m_w.rem, "m_s": m.m_s.rem, "m_s_add": m.m_s.add,
        "m_comm": rem(Cause.COMMUNICATION), "m_comm_add": add(Cause.COMMUNICATION),
        "m_gc": rem(Cause.GC), "m_gc_add": add(Cause.GC),
        "m_seq": rem(Cause.SEQUENCE_LENGTH),
        "m_pause": None if ctx.pause_whatif is None else ctx.pause_whatif.rem,
        "m_pause_add": None if ctx.pause_whatif is None else ctx.pause_whatif.add,
        "pauses": ctx.pauses.to_dict(),
        "m_suspects": rem(Cause.WORKER), "m_suspects_add": add(Cause.WORKER),
        "last_stage_compute_ratio": ctx.last_stage_ratio,
        "fb_correlation": fb["correlation"], "fb_correlation_within": fb["correlation_within"],
        "fb_log_correlation_within": fb["log_correlation_within"],
        "forward_spread_within": fb["forward_spread_within"],
        "fb_signal": dict(fb),
    }


def decide(engine: WhatIfEngine, metrics: Metrics, config: VerdictConfig | None = None,
           trusted: bool = True, hypotheses: Sequence[Hypothesis] = ALL) -> Verdict:
    """Test every hypothesis and pick the root cause (see the module docstring)."""
    cfg = config or VerdictConfig()
    ctx = VerdictContext(engine, metrics, cfg)
    s = metrics.slowdown
    trust = 1.0 if trusted else cfg.untrustworthy_factor
    head = f"slowdown S = {s:.3f} ({100 * metrics.waste:.1f}% of GPU time wasted)"
    blocking = tuple(_explains_some(_tested(h, ctx)) for h in hypotheses)
    with phase("host"):
        host = test_host(metrics, cfg)
    findings = (*blocking, host.finding)
    # S compares with every op at the job-wide mean, which in a small job carries a good
    # part of one straggler's own excess; a worker that stands out with S_w above the
    # threshold is a problem even when S is not.
    worker = next((f for f in blocking if f.cause == Cause.WORKER and f.applicable), None)
    lead = worker.workers if worker is not None else ()
    size = float(_problem_size(metrics, lead, None)[0])
    with phase("signals"):
        signals = MappingProxyType(_signals(ctx, findings))
    candidates = [f for f in blocking if f.applicable and f.m is not None]
    host_on = host.finding.applicable and metrics.discrepancy >= cfg.threshold
    with phase("bootstrap"):
        resamples = _resample(metrics, candidates, cfg, lead, host)
    chosen = _choose(candidates, cfg) if candidates else None
    gap = float(metrics.nodelay.mean() - metrics.ideal.mean())
    blocking_time = 0.0 if chosen is None or size < cfg.threshold else chosen.share * gap
    host_time = float(host.explained(metrics)[0])
    if host_on and host_time > blocking_time:
        return _host_verdict(host.finding, chosen if blocking_time > 0 else None, metrics,
                             findings, signals, cfg, trusted,
                             _agreement(resamples, Cause.HOST, candidates))
    host_line = _host_line(host, metrics)
    if size < cfg.threshold:
        agreement = _agreement(resamples, Cause.NONE, candidates)
        if trusted:
            first = (f"slowdown S = {s:.3f} is below the threshold {cfg.threshold:.2f}: no "
                     f"straggler problem worth acting on ({100 * (1 - 1 / max(s, 1e-12)):.1f}% "
                     "of GPU time)")
        else:
            first = (f"slowdown S = {s:.3f} is below the threshold {cfg.threshold:.2f} in the "
                     "recorded ops, but the result is untrustworthy (see why): time the trace "
                     "does not show may hide a straggler")
        below: list[str] = [first]
        # Named only where the paper would attribute (problem size >= 1.03) and the
        # hypothesis explains most of it: the jitter of a healthy job has no cause.
        top = chosen
        leading = (top if top is not None and size >= ATTRIBUTION_THRESHOLD
                   and top.share >= cfg.explain else None)
        if leading is None and host.finding.applicable:
            leading = host.finding
        if leading is not None:
            below.append(f"below the threshold, the largest part is '{leading.cause.value}' "
                         f"(fixing it alone removes {portion(leading.share)} of the "
                         f"{'discrepancy' if leading.cause == Cause.HOST else 'slowdown'}): "
                         f"{leading.evidence}")
        elif host_line:
            below.append(host_line)
        below.append(_confidence_line(Cause.NONE, agreement, 1.0, trusted, cfg))
        return Verdict(Cause.NONE, (), agreement * trust, tuple(below), findings, (), False,
                       agreement, 1.0, trusted, cfg, signals, leading=leading)
    if s < cfg.threshold:
        head += (f"; below the threshold {cfg.threshold:.2f}, but worker(s) "
                 f"{', '.join(w.key for w in lead)} alone slow the ideal job by "
                 f"{100 * (size - 1):.1f}% (exact S_w)")
    if chosen is None:
        return _unexplained(head, "no hypothesis applies: " + "; ".join(
            f"{f.cause.value}: {f.why_not}" for f in findings if f.why_not), findings, trusted,
            cfg, signals)
    weak = chosen.share < cfg.explain
    strength = min(1.0, max(0.0, chosen.share / cfg.explain)) if cfg.explain > 0 else 1.0
    agreement = _agreement(resamples, chosen.cause, candidates)
    contributing = tuple(f for f in candidates
                         if f is not chosen and f.share >= cfg.contribute)
    total = float(metrics.actual.mean() - metrics.ideal.mean())
    if host.finding.applicable and total > 0 and host_time / total >= cfg.contribute:
        contributing += (host.finding,)
    lines = [head]
    lines += [x for x in (_overlap_line(chosen, [f for f in contributing
                                                 if f.cause != Cause.HOST], cfg),
                          _tie_line(chosen, candidates, cfg)) if x]
    lines.append(chosen.evidence)
    lines += ["also: " + f.evidence for f in contributing]
    if host_line and host.finding not in contributing:
        lines.append(host_line)
    if weak:
        lines.append(f"no hypothesis explains {cfg.explain:.0%} of the slowdown: weak verdict")
    lines.append(_confidence_line(chosen.cause, agreement, strength, trusted, cfg))
    confidence = max(0.0, min(1.0, agreement * strength * trust))
    if confidence < ZERO_CONFIDENCE:
        who = f" ({', '.join(w.key for w in chosen.workers[:8])})" if chosen.workers else ""
        return _unexplained(head, (
            f"'{chosen.cause.value}'{who} would explain {portion(chosen.share)} of the slowdown, "
            f"but its confidence is 0 (agreement {agreement:.2f} x strength {strength:.2f} x "
            f"trust {trust:g}): {chosen.evidence}"), findings, trusted, cfg, signals)
    return Verdict(chosen.cause, chosen.workers, confidence, tuple(lines), findings,
                   contributing, weak, agreement, strength, trusted, cfg, signals)


def _tested(h: Hypothesis, ctx: VerdictContext) -> Finding:
    with phase(h.cause.value):
        return h.test(ctx)


def _host_line(host: HostEvidence, metrics: Metrics) -> str | None:
    """One line on the host time when the discrepancy is large and no group explains it (the
    host finding does not apply): where it is not, so that nobody reads it as a worker."""
    f = host.finding
    if f.applicable or metrics.launch is None:
        return None
    return f"host time (simulation discrepancy {metrics.discrepancy:.3f}): {f.why_not}"


def _host_verdict(host: Finding, blocking: Finding | None, metrics: Metrics,
                  findings: tuple[Finding, ...], signals: Mapping[str, Any],
                  cfg: VerdictConfig, trusted: bool, agreement: float) -> Verdict:
    """The ``host`` verdict: launch delays of one group make the job slower than anything
    in its recorded ops; the blocking cause, if any, is listed as contributing."""
    trust = 1.0 if trusted else cfg.untrustworthy_factor
    disc = metrics.discrepancy
    strength = min(1.0, max(0.0, host.share / cfg.explain)) if cfg.explain > 0 else 1.0
    lines = [f"host time: the job runs {disc:.3f}x slower than its recorded work explains "
             f"(simulation discrepancy; S = {metrics.slowdown:.3f} in the recorded ops)",
             host.evidence]
    contributing: tuple[Finding, ...] = ()
    if blocking is not None and blocking.share >= cfg.contribute:
        contributing = (blocking,)
        lines.append("also, in the recorded ops: " + blocking.evidence)
    lines.append(_confidence_line(Cause.HOST, agreement, strength, trusted, cfg))
    confidence = max(0.0, min(1.0, agreement * strength * trust))
    return Verdict(Cause.HOST, host.workers, confidence, tuple(lines), findings, contributing,
                   host.share < cfg.explain, agreement, strength, trusted, cfg, signals)


#: A confidence below this prints as 0.00: the verdict names no cause then.
ZERO_CONFIDENCE = 0.005


def _explains_some(f: Finding) -> Finding:
    """``f``, or, when its gates hold but its ops explain none of the slowdown (share at
    most :data:`NONE_SHARE`), ``f`` as not applicable with that reason (and nobody blamed)."""
    if not f.applicable or f.m is None or f.share > NONE_SHARE:
        return f
    return replace(f, applicable=False, workers=(),
                   why_not=f"its ops explain none of the slowdown (share {f.share:.4f})")


def _unexplained(head: str, why: str, findings: tuple[Finding, ...], trusted: bool,
                 cfg: VerdictConfig, signals: Mapping[str, Any]) -> Verdict:
    """The ``unexplained`` verdict: no cause, nobody blamed, confidence 0."""
    evidence = (head, why,
                "confidence 0: the cause is unexplained (see the attribution and heatmaps)")
    return Verdict(Cause.UNEXPLAINED, (), 0.0, evidence, findings, (), True, 0.0, 0.0, trusted,
                   cfg, signals)


def _confidence_line(cause: Cause, agreement: float, strength: float, trusted: bool,
                     cfg: VerdictConfig) -> str:
    parts = [f"the same verdict in {agreement:.0%} of {cfg.bootstrap} resamples of the steps"]
    if strength < 1.0:
        parts.append(f"it explains only {strength * cfg.explain:.0%} of the slowdown")
    if not trusted:
        parts.append(f"the result is untrustworthy (x{cfg.untrustworthy_factor:g})")
    return f"confidence in '{cause.value}': " + "; ".join(parts)
