"""Fixtures for the probe tests: real runs of the example job, shared per session.

Each run spawns the job's processes (gloo on CPU) and takes 10-20 s on two cores, so the runs
are session-scoped and shared by the tests that read them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stragglers.probe.examples.job import JobConfig, run_job

#: The paired slow-worker run: rank 1 (DP rank 1, stage 0) burns CPU for another 30% of its
#: compute time in alternating blocks of two steps. The severity is moderate on purpose: with
#: 4 workers the ideal timeline of S takes the job-wide mean, a quarter of which is the slow
#: worker's own excess, so S falls short of the measured slowdown by roughly half the excess
#: (see README); at this severity the gap stays well inside the 10% the test allows.
SLOW_RANK = 1
SLOW_FACTOR = 1.3


@pytest.fixture(scope="session")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """dp 2 x pp 2, 4 microbatches, 1F1B; a slow worker in alternating step blocks."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("slow-run")
    cfg = JobConfig(out_dir=str(out), steps=27, warmup_steps=3, slow_rank=SLOW_RANK,
                    slow_factor=SLOW_FACTOR, slow_mode="spin", inject_period=2,
                    gc_interval=1000, comm_hooks=True)
    summary = run_job(cfg)
    return {"cfg": cfg, "summary": summary, "out": Path(out)}


@pytest.fixture(scope="session")
def last_stage_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """dp 2 x pp 2 with three extra transformer blocks on the last stage."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("last-stage-run")
    cfg = JobConfig(out_dir=str(out), steps=13, warmup_steps=3, last_stage_extra_layers=3)
    summary = run_job(cfg)
    return {"cfg": cfg, "summary": summary, "out": Path(out)}
