"""Fidelity check (paper §6): inject stragglers into the real example job, compare slowdowns.

For each case the example job runs with the straggler injected, the probes' trace is merged
and analysed, and the row reports the **measured** slowdown (mean step time with the straggler
/ without), the slowdown **S** the analyzer estimates from the trace of the slowed steps, the
simulation **discrepancy** of that trace and what the analyzer **blames** (its verdict, and the
top worker of the exact per-worker slowdown S_w). ``fix_estimate`` is a second estimate of the
same quantity: the mean step time of the no-delay timeline over the one in which only the top 3%
of workers by S_w run at ideal speed (``t_ori / t_rem`` of M_W): S compares with a job in which
*every* op takes the job-wide mean, which, with a handful of workers, includes a good part of
the straggler's own excess; ``fix_estimate`` removes only the blamed worker's.

Measurement design. Slow-worker, sequence-length and GC cases are *paired*: the injection is
switched on and off in alternating blocks of ``inject_period`` steps of one run, so that the
steps with and without it see the same background load (a shared machine's load can change
step times by tens of percent between two runs a minute apart); the measured slowdown is the
mean step time of the injected steps over that of the clean steps, and S is estimated from the
trace of the injected steps alone. The last-stage case changes the model (extra layers), so it
is compared with the separate baseline run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.probe.outdir import claim_out_dir
from stragglers.testbed.job import JobConfig, run_job

DEFAULT_SEVERITIES: tuple[float, ...] = (1.2, 1.5, 2.0)
CASES: tuple[str, ...] = ("baseline", "slow", "last-stage", "seqlen", "gc")


@dataclass
class FidelityRow:
    """One line of the fidelity table."""

    case: str
    measured: float
    estimated: float
    fix_estimate: float | None
    discrepancy: float
    blamed: str
    top_worker: str
    injected: str
    trustworthy: bool
    run_dir: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON row: ``case, measured, estimated, discrepancy, blamed`` and details."""
        return {
            "case": self.case, "measured": self.measured, "estimated": self.estimated,
            "discrepancy": self.discrepancy, "blamed": self.blamed,
            "fix_estimate": self.fix_estimate,
            "top_worker": self.top_worker, "injected": self.injected,
            "trustworthy": self.trustworthy, "run_dir": self.run_dir,
        }


def _analyzer() -> Any:
    try:
        from stragglers.analysis import analyze_files
    except ImportError as exc:  # pragma: no cover - the analyzer ships with the package
        raise InputError(f"the what-if analyzer is not available: {exc}") from exc
    return analyze_files


def subset_trace(trace_path: Path, steps: Sequence[int], out_path: Path) -> Path:
    """Write the rows of ``steps`` of a merged trace to ``out_path``."""
    import pandas as pd

    frame = pd.read_parquet(trace_path)
    part = frame[frame["step"].isin(list(steps))]
    if part.empty:
        raise InputError(f"{trace_path}: none of the steps {list(steps)[:5]}... is in the trace")
    part.to_parquet(out_path, index=False)
    return out_path


def analyse(trace: Path, meta: Path) -> dict[str, Any]:
    """Run the analyzer (exact per-worker attribution) on a trace; its result.json document."""
    doc: dict[str, Any] = _analyzer()(trace, meta, exact_workers=True).to_document()
    return doc


def blamed_of(result: dict[str, Any]) -> tuple[str, str]:
    """``("cause: workers", top worker of exact S_w)`` of an analyzer result."""
    verdict = result.get("verdict") or {}
    cause = verdict.get("cause", "?")
    workers = verdict.get("workers") or []
    blamed = cause + (f" [{' '.join(workers[:4])}]" if workers else "")
    leading = verdict.get("leading")
    if isinstance(leading, dict):
        lead_workers = leading.get("workers") or []
        blamed += f" (leading: {leading.get('cause', '?')}" + (
            f" [{' '.join(lead_workers[:4])}]" if lead_workers else "") + ")"
    attribution = (result.get("attribution") or {}).get("worker") or {}
    scores = {k: v for k, v in attribution.items() if isinstance(v, int | float)}
    top = max(scores, key=lambda k: scores[k]) if scores else "-"
    return blamed, top


def _worker_name(cfg: JobConfig, rank: int) -> str:
    return f"{rank % cfg.dp},{rank // cfg.dp}"


def run_case(case: str, base: JobConfig, out_dir: Path, severity: float = 1.5,
             baseline_mean: float | None = None) -> tuple[FidelityRow, dict[str, Any]]:
    """Run one case; returns its row and the analyzer result of the analysed trace."""
    run_dir = out_dir / (case if case != "slow" else f"slow-{severity:g}")
    paired = replace(base, inject_period=base.inject_period or 2, out_dir=str(run_dir))
    slow_rank = base.slow_rank if base.slow_rank >= 0 else min(1, base.world_size - 1)
    if case == "baseline":
        cfg = replace(base, out_dir=str(run_dir), slow_rank=-1, slow_factor=1.0,
                      last_stage_extra_layers=0, seq_len_dist="fixed", gc_pause_prob=0.0)
        injected = "none"
    elif case == "slow":
        cfg = replace(paired, slow_rank=slow_rank, slow_factor=severity)
        injected = f"worker {_worker_name(cfg, slow_rank)} x{severity:g} ({cfg.slow_mode})"
    elif case == "last-stage":
        extra = base.last_stage_extra_layers or 3
        cfg = replace(base, out_dir=str(run_dir), last_stage_extra_layers=extra)
        injected = f"last stage +{extra} layers"
    elif case == "seqlen":
        cfg = replace(paired, seq_len_dist="longtail")
        injected = "long-tailed sequence lengths"
    elif case == "gc":
        cfg = replace(paired, gc_pause_prob=base.gc_pause_prob or 0.1)
        injected = f"uncoordinated GC pauses p={cfg.gc_pause_prob:g}"
    else:
        raise InputError(f"unknown fidelity case {case!r}; expected one of {CASES}")
    summary = run_job(cfg)
    trace, meta = Path(summary["trace"]), Path(summary["meta"])
    if case in ("baseline", "last-stage"):
        mean = summary["mean_step_s"]
        measured = 1.0 if case == "baseline" or not baseline_mean else mean / baseline_mean
        analysed = trace
    else:
        measured = summary["mean_injected_step_s"] / summary["mean_clean_step_s"]
        analysed = subset_trace(trace, summary["injected_steps"],
                                run_dir / "trace-injected.parquet")
    result = analyse(analysed, meta)
    blamed, top = blamed_of(result)
    m_w = result.get("m_w") or {}
    fix = (m_w["t_ori"] / m_w["t_rem"]) if m_w.get("t_rem") else None
    row = FidelityRow(
        case=case if case != "slow" else f"slow-{severity:g}",
        measured=float(measured), estimated=float(result["slowdown"]),
        fix_estimate=None if fix is None else float(fix),
        discrepancy=float(result["discrepancy"]), blamed=blamed, top_worker=top,
        injected=injected, trustworthy=bool(result.get("trustworthy")), run_dir=str(run_dir),
    )
    write_text(run_dir / "result.json", json.dumps(result, indent=1, default=float))
    return row, {"summary": summary, "result": result}


def check_cases(cases: Sequence[str] | None) -> tuple[str, ...]:
    """The cases to run: ``cases`` (``--cases``), or all of :data:`CASES` when None; an
    unknown name is an :class:`~stragglers.errors.InputError`."""
    unknown = [c for c in cases or () if c not in CASES]
    if unknown:
        raise InputError(f"--cases: unknown case {unknown[0]!r}; expected some of "
                         f"{', '.join(CASES)}")
    return tuple(cases or CASES)


def run_fidelity(base: JobConfig, out_dir: str | Path, cases: Sequence[str] = CASES,
                 severities: Sequence[float] = DEFAULT_SEVERITIES) -> list[FidelityRow]:
    """Run the selected cases (``slow`` once per severity) and return the table rows.

    ``out_dir`` must be new, empty or a folder stragglers created (``base.force`` overrides,
    see :func:`~stragglers.probe.outdir.claim_out_dir`); each case runs in a subfolder.
    """
    check_cases(cases)
    out = claim_out_dir(out_dir, base.force, "--out-dir", ("fidelity.json",))
    rows: list[FidelityRow] = []
    baseline_mean: float | None = None
    for case in cases:
        if case == "slow":
            for sev in severities:
                rows.append(run_case(case, base, out, sev)[0])
            continue
        row, info = run_case(case, base, out, baseline_mean=baseline_mean)
        if case == "baseline":
            baseline_mean = info["summary"]["mean_step_s"]
        rows.append(row)
    write_text(out / "fidelity.json", json.dumps([r.to_dict() for r in rows], indent=1))
    return rows


def format_table(rows: Sequence[FidelityRow]) -> str:
    """The fidelity table as aligned text (markdown-compatible)."""
    head = ("| case | injected | measured | estimated S | |S-meas|/meas | fix top-3% | "
            "discrepancy | blamed (verdict) | top S_w |")
    lines = [head, "|" + " --- |" * 9]
    for r in rows:
        err = abs(r.estimated - r.measured) / r.measured
        fix = "-" if r.fix_estimate is None else f"{r.fix_estimate:.3f}"
        lines.append(
            f"| {r.case} | {r.injected} | {r.measured:.3f} | {r.estimated:.3f} | "
            f"{100 * err:.1f}% | {fix} | {100 * (r.discrepancy - 1):.1f}% | {r.blamed} | "
            f"{r.top_worker} |"
        )
    return "\n".join(lines)
