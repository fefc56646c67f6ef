"""Probe trace vs imported profiler trace of the same run of the example job.

The example job with ``--torch-profiler`` records, beside its probes, one PyTorch profiler
trace per rank of the same steps. Both are analysed: the verdict, the worker that stands out
(exact S_w) and the slowdown S must agree (S within 5%). A real job (gloo on CPU, 4
processes) with a slow worker: rank 1 (DP rank 1, stage 0) burns 80% more compute time.
The same op count is a precondition: the profiler's ranges are the probe's spans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stragglers import analysis
from stragglers.kineto import import_kineto
from stragglers.trace.io import read_meta, read_trace, write_trace

pytestmark = pytest.mark.slow  # real processes (`pytest -m "not slow"` skips them)

SLOW_RANK = 1


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("torch")
    from stragglers.testbed.job import JobConfig, run_job

    out = tmp_path_factory.mktemp("profiled-run")
    cfg = JobConfig(out_dir=str(out), steps=8, warmup_steps=2, slow_rank=SLOW_RANK,
                    slow_factor=1.8, slow_mode="spin", gc_interval=1000, hidden=128,
                    torch_profiler=True)
    summary = run_job(cfg)
    return {"cfg": cfg, "summary": summary, "out": Path(out)}


def test_one_profiler_trace_per_rank(profiled_run: dict[str, Any]) -> None:
    names = sorted(p.name for p in (profiled_run["out"] / "profiler").iterdir())
    assert names == [f"rank-{r:05d}.json" for r in range(4)]


def test_probe_and_profiler_traces_agree(profiled_run: dict[str, Any], tmp_path: Path) -> None:
    summary, cfg, out = profiled_run["summary"], profiled_run["cfg"], profiled_run["out"]
    meta = read_meta(summary["meta"])
    trace, report = import_kineto(out / "profiler", meta)
    assert report.steps == list(range(cfg.warmup_steps, cfg.steps))
    assert report.dropped_steps == {cfg.steps: [0, 1, 2, 3]}  # the end of profiling
    probe_trace = read_trace(summary["trace"])
    assert len(trace) == len(probe_trace)
    imported = write_trace(trace, tmp_path / "imported.parquet")
    probe = analysis.analyze_files(summary["trace"], summary["meta"],
                                   exact_workers=True).to_document()
    prof = analysis.analyze_files(imported, summary["meta"], exact_workers=True).to_document()
    assert prof["verdict"]["cause"] == probe["verdict"]["cause"]
    top = {name: max(d["attribution"]["worker"], key=d["attribution"]["worker"].get)
           for name, d in (("probe", probe), ("profiler", prof))}
    # (which worker that is depends on the machine's load as well as on the injection: the
    # last stage is heavier; the probe tests check the blame itself)
    assert top["probe"] == top["profiler"]
    assert prof["slowdown"] == pytest.approx(probe["slowdown"], rel=0.05)
