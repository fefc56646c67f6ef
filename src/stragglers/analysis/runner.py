"""One call from a trace to the full what-if result."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stragglers.analysis.metrics import (
    Metrics,
    characterise_workers,
    compute_metrics,
    exact_worker_times,
)
from stragglers.analysis.model import WhatIfModel, prepare
from stragglers.analysis.result import build_result
from stragglers.analysis.verdict import DEFAULT_THRESHOLD, Verdict, decide, suspect_workers
from stragglers.trace import build_table, parse_steps, read_meta, read_trace, select_steps
from stragglers.trace.table import OpTable


@dataclass
class Analysis:
    model: WhatIfModel
    metrics: Metrics
    verdict: Verdict
    result: dict[str, Any]


def analyze_table(table: OpTable, exact_workers: bool = True,
                  threshold: float = DEFAULT_THRESHOLD,
                  timing: dict[str, float] | None = None) -> Analysis:
    """Run every analysis of whatif-model.md §5 and the verdict on an op table."""
    timing = dict(timing or {})
    t0 = time.perf_counter()
    model = prepare(table)
    t1 = time.perf_counter()
    metrics = compute_metrics(model, exact_workers=False)
    t2 = time.perf_counter()
    if exact_workers:
        metrics.worker_exact = exact_worker_times(model)
    t3 = time.perf_counter()
    suspects = suspect_workers(metrics)
    m_susp = characterise_workers(model, metrics, suspects) if suspects else None
    verdict = decide(metrics, m_susp, suspects, threshold)
    t4 = time.perf_counter()
    timing.update({"model": t1 - t0, "metrics": t2 - t1, "exact_workers": t3 - t2,
                   "verdict": t4 - t3})
    result = build_result(model, metrics, verdict, m_susp, threshold, timing)
    return Analysis(model, metrics, verdict, result)


def load_table(trace_path: str | Path, meta_path: str | Path,
               steps: str | tuple[int, int] | None = None) -> OpTable:
    """Read, select steps, validate and build the op table."""
    rng = parse_steps(steps) if isinstance(steps, str) else steps
    trace = select_steps(read_trace(trace_path), rng)
    return build_table(trace, read_meta(meta_path))


def analyze_files(trace_path: str | Path, meta_path: str | Path,
                  steps: str | tuple[int, int] | None = None, exact_workers: bool = True,
                  threshold: float = DEFAULT_THRESHOLD) -> dict[str, Any]:
    """Analyse a trace file with its metadata and return the result document."""
    t0 = time.perf_counter()
    table = load_table(trace_path, meta_path, steps)
    load = time.perf_counter() - t0
    return analyze_table(table, exact_workers, threshold, {"load": load}).result
