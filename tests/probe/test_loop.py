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

from stragglers.evaluation.verdict_eval import CONFIDENT
from stragglers.probe.check import check_trace
from stragglers.probe.merge import load_meta

from .integration import check_slow_loader, result, run_doc

pytestmark = pytest.mark.slow  # real processes (`pytest -m "not slow"` skips them)

pytest.importorskip("torch")

RUN = "SLOW_RANK=1 torchrun --standalone --nproc-per-node 2 docs/snippets/ddp_loop.py runs/ddp"
ANALYZE = ("stragglers analyze runs/ddp/trace.parquet --meta runs/ddp/meta.yaml "
           "--out runs/ddp/analysis")
RUN_HEALTHY = "torchrun --standalone --nproc-per-node 2 docs/snippets/ddp_loop.py runs/ddp-healthy"
RUN_LOADER = ("SLOW_LOADER_RANK=1 SLOW_LOADER_MS=130 torchrun --standalone --nproc-per-node 2 "
              "docs/snippets/ddp_loop.py runs/ddp-loader")
ANALYZE_LOADER = ("stragglers analyze runs/ddp-loader/trace.parquet --meta "
                  "runs/ddp-loader/meta.yaml --out runs/ddp-loader/analysis")
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
    # On a loaded machine the other load can really slow one rank for a while: a "worker"
    # verdict may then come, but never a confident one (the verdict evaluation's bar:
    # CONFIDENT; at load 5-6 one run gave "worker" at 0.75)
    verdict = res["verdict"]
    assert verdict["cause"] != "worker" or verdict["confidence"] < CONFIDENT, verdict["evidence"]
    scores = res["attribution"]["worker"]
    slow = slow_run[1]["attribution"]["worker"]
    assert abs(scores["1,0"] - scores["0,0"]) < 0.5 * (slow["1,0"] - slow["0,0"]), scores


def test_a_slow_loader_is_the_late_start_of_its_rank(tmp_path: Path) -> None:
    """Rank 1 loads each batch 130 ms late (outside ``with probe.step():``): on the common
    clock its first op starts that much after rank 0's, and rank 0 waits in the gradient
    synchronisation; the page's analysis command runs on the trace."""
    run_doc(RUN_LOADER, tmp_path)
    out = tmp_path / "ddp-loader"
    meta = load_meta(out / "meta.yaml")
    assert check_trace(pd.read_parquet(out / "trace.parquet"), meta) == []
    check_slow_loader(out / "trace.parquet", "grads-reduce-scatter")
    run_doc(ANALYZE_LOADER, tmp_path)
    assert result(out / "analysis")["slowdown"] >= 1.0
