"""One straight line from a trace to its analysis: load → engine → metrics → verdict →
:class:`~stragglers.analysis.result.AnalysisResult`."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from stragglers.analysis.engine import WhatIfEngine, prepare
from stragglers.analysis.metrics import compute_metrics
from stragglers.analysis.result import AnalysisResult, Counts, untrustworthy_reasons
from stragglers.analysis.verdict import VerdictConfig, decide
from stragglers.phases import phase
from stragglers.trace import build_table, parse_steps, read_meta, read_trace, select_steps
from stragglers.trace.table import OpTable


@dataclass(frozen=True)
class Analysis:
    """An analysis and the engine it ran on (the engine also draws the timelines)."""

    engine: WhatIfEngine
    result: AnalysisResult


def analyze_table(table: OpTable, exact_workers: bool = True,
                  config: VerdictConfig | None = None,
                  timing: dict[str, float] | None = None) -> Analysis:
    """Run every analysis of whatif-model.md §5 and the verdict on an op table."""
    timing = dict(timing or {})
    config = config or VerdictConfig()
    t0 = time.perf_counter()
    with phase("model"):
        engine = prepare(table)
    t1 = time.perf_counter()
    with phase("metrics"):
        metrics = compute_metrics(engine, exact_workers=exact_workers)
    t2 = time.perf_counter()
    caveats = tuple(getattr(table, "caveats", ()) or ())
    trusted = not untrustworthy_reasons(metrics, caveats)
    with phase("verdict"):
        verdict = decide(engine, metrics, config, trusted=trusted)
    t3 = time.perf_counter()
    timing.update({"model": t1 - t0, "metrics": t2 - t1, "verdict": t3 - t2})
    result = AnalysisResult(job=table.meta, source=table.source, metrics=metrics,
                            verdict=verdict, counts=Counts.of(engine), caveats=caveats,
                            timing=timing, worker_names=table.worker_names())
    return Analysis(engine, result)


def load_table(trace_path: str | Path, meta_path: str | Path,
               steps: str | tuple[int, int] | None = None) -> OpTable:
    """Read, select steps, validate and build the op table."""
    rng = parse_steps(steps) if isinstance(steps, str) else steps
    with phase("read"):
        trace = select_steps(read_trace(trace_path), rng)
        meta = read_meta(meta_path)
    return build_table(trace, meta)


def analyze_files(trace_path: str | Path, meta_path: str | Path,
                  steps: str | tuple[int, int] | None = None, exact_workers: bool = True,
                  config: VerdictConfig | None = None, out: str | Path | None = None,
                  timelines: tuple[str, ...] = ("original", "ideal")) -> AnalysisResult:
    """Analyse a trace file with its metadata; with ``out``, also write result.json, the
    heatmaps, ``timelines`` and report.html there
    (:func:`~stragglers.analysis.outputs.write_outputs`)."""
    t0 = time.perf_counter()
    with phase("load"):
        table = load_table(trace_path, meta_path, steps)
    load = time.perf_counter() - t0
    analysis = analyze_table(table, exact_workers, config, {"load": load})
    if out is None:
        return analysis.result
    with phase("outputs"):
        from stragglers.analysis.outputs import write_outputs  # matplotlib, jinja2: to write

        return write_outputs(analysis.engine, analysis.result, out, timelines)
