"""The plain-loop recipe end to end: docs/snippets/ddp_loop.py (the docs' own snippet) under
``torchrun`` (2 processes, DDP over gloo on CPU), its trace analysed by ``stragglers analyze``.

The slowed rank sleeps 0.1 s in every forward (``SLOW_RANK=1``), several times its compute
time, so the straggler stands far above the noise of a loaded 2-core machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from stragglers.probe.check import check_trace
from stragglers.probe.merge import load_meta

from .integration import SNIPPETS, analyze, torchrun

pytest.importorskip("torch")

SNIPPET = SNIPPETS / "ddp_loop.py"


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("ddp-slow") / "run"
    torchrun(SNIPPET, str(out), env={"SLOW_RANK": "1"})
    return out, analyze(out)


def test_the_trace_has_the_loop_layout(slow_run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = slow_run
    meta = load_meta(out / "meta.yaml")
    assert (meta["dp_size"], meta["pp_size"], meta["world_size"]) == (2, 1, 2)
    trace = pd.read_parquet(out / "trace.parquet")
    assert check_trace(trace, meta) == []
    assert sorted(trace["step"].unique()) == list(range(2, 12))  # steps 0-1: warm-up
    per_step = trace.groupby(["dp_rank", "step", "optype"], observed=True).size()
    assert (per_step == 1).all()  # one op of each type per rank and step
    assert set(trace["optype"].astype(str)) == {
        "forward-compute", "backward-compute", "gc", "layernorm-grads-all-reduce",
        "embedding-grads-all-reduce", "grads-reduce-scatter", "optimizer"}
    fwd = trace[trace["optype"] == "forward-compute"].groupby("dp_rank")["duration"].min()
    assert fwd[1] >= 0.1 > fwd[0]  # the sleep is inside rank 1's forward span


def test_the_slowed_rank_is_the_verdicts_worker(slow_run: tuple[Path, dict[str, Any]]) -> None:
    _, result = slow_run
    verdict = result["verdict"]
    assert verdict["cause"] == "worker", verdict["evidence"]
    assert verdict["workers"] == ["1,0"]  # (dp_rank, stage) of rank 1
    scores = result["attribution"]["worker"]
    assert scores["1,0"] > scores["0,0"] + 0.3, scores
    assert result["slowdown"] > 1.3


def test_a_healthy_run_has_no_worker_verdict(tmp_path: Path,
                                             slow_run: tuple[Path, dict[str, Any]]) -> None:
    out = tmp_path / "run"
    torchrun(SNIPPET, str(out))
    result = analyze(out)
    assert result["verdict"]["cause"] != "worker", result["verdict"]["evidence"]
    scores = result["attribution"]["worker"]
    slow = slow_run[1]["attribution"]["worker"]
    assert abs(scores["1,0"] - scores["0,0"]) < 0.5 * (slow["1,0"] - slow["0,0"]), scores
