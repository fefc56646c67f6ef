"""The plain-loop recipe end to end, as docs/integrations.md shows it: its snippet
(docs/snippets/ddp_loop.py) under ``torchrun`` (2 processes, DDP over gloo on CPU), its trace
analysed by ``stragglers analyze``, with the page's own command lines.

The slowed rank sleeps 0.3 s in every forward (``SLOW_RANK=1``), many times its compute
time, so the straggler stands far above the noise of a loaded 2-core machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from stragglers.probe.check import check_trace
from stragglers.probe.merge import load_meta

from .integration import result, run_doc

pytestmark = pytest.mark.slow  # real processes (`pytest -m "not slow"` skips them)

pytest.importorskip("torch")

RUN = "SLOW_RANK=1 torchrun --standalone --nproc-per-node 2 docs/snippets/ddp_loop.py runs/ddp"
ANALYZE = ("stragglers analyze runs/ddp/trace.parquet --meta runs/ddp/meta.yaml "
           "--out runs/ddp/analysis")
RUN_HEALTHY = "torchrun --standalone --nproc-per-node 2 docs/snippets/ddp_loop.py runs/ddp-healthy"
ANALYZE_HEALTHY = ("stragglers analyze runs/ddp-healthy/trace.parquet --meta "
                   "runs/ddp-healthy/meta.yaml --out runs/ddp-healthy/analysis")


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    runs = tmp_path_factory.mktemp("runs")
    run_doc(RUN, runs)
    run_doc(ANALYZE, runs)
    return runs / "ddp", result(runs / "ddp" / "analysis")


def test_the_trace_has_the_loop_layout(slow_run: tuple[Path, dict[str, Any]]) -> None:
    out, _ = slow_run
    meta = load_meta(out / "meta.yaml")
    assert (meta.dp_size, meta.pp_size, meta.world_size) == (2, 1, 2)
    trace = pd.read_parquet(out / "trace.parquet")
    assert check_trace(trace, meta) == []
    assert sorted(trace["step"].unique()) == list(range(2, 20))  # steps 0-1: warm-up
    per_step = trace.groupby(["dp_rank", "step", "optype"], observed=True).size()
    assert (per_step == 1).all()  # one op of each type per rank and step
    assert set(trace["optype"].astype(str)) == {
        "forward-compute", "backward-compute", "gc", "layernorm-grads-all-reduce",
        "embedding-grads-all-reduce", "grads-reduce-scatter", "optimizer"}
    fwd = trace[trace["optype"] == "forward-compute"].groupby("dp_rank")["duration"].min()
    assert fwd[1] >= 0.3 > fwd[0]  # the sleep is inside rank 1's forward span


def test_the_slowed_rank_is_the_verdicts_worker(slow_run: tuple[Path, dict[str, Any]]) -> None:
    _, res = slow_run
    verdict = res["verdict"]
    assert verdict["cause"] == "worker", verdict["evidence"]
    assert verdict["workers"] == ["1,0"]  # (dp_rank, stage) of rank 1
    scores = res["attribution"]["worker"]
    assert scores["1,0"] > scores["0,0"] + 0.3, scores
    assert res["slowdown"] > 1.3


def test_a_healthy_run_has_no_worker_verdict(tmp_path: Path,
                                             slow_run: tuple[Path, dict[str, Any]]) -> None:
    run_doc(RUN_HEALTHY, tmp_path)
    run_doc(ANALYZE_HEALTHY, tmp_path)
    res = result(tmp_path / "ddp-healthy" / "analysis")
    assert res["verdict"]["cause"] != "worker", res["verdict"]["evidence"]
    scores = res["attribution"]["worker"]
    slow = slow_run[1]["attribution"]["worker"]
    assert abs(scores["1,0"] - scores["0,0"]) < 0.5 * (slow["1,0"] - slow["0,0"]), scores
