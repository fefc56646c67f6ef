"""The pipeline recipe end to end, as docs/integrations.md shows it: its snippet
(docs/snippets/pipeline_1f1b.py, torch.distributed.pipelining's Schedule1F1B, 2 stages,
4 microbatches) under ``torchrun`` on CPU with gloo, merged by rank 0, analysed by
``stragglers analyze``, with the page's own command lines.

The known answers: the 1F1B order of torch's schedule (stage s of p runs p - s warm-up
forwards, then one backward and one forward in turn, then the cool-down backwards), the P2P
ops each stage has a peer for, and the rank slowed on purpose (``SLOW_RANK``: a 50 ms sleep
in every microbatch's forward, a hundred times its compute)."""

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

RUN = ("SLOW_RANK=0 torchrun --standalone --nproc-per-node 2 docs/snippets/pipeline_1f1b.py "
       "runs/pp")
ANALYZE = "stragglers analyze runs/pp/trace.parquet --meta runs/pp/meta.yaml --out runs/pp/analysis"
RUN_DP = ("SLOW_RANK=3 torchrun --standalone --nproc-per-node 4 docs/snippets/pipeline_1f1b.py "
          "runs/dp-pp")
ANALYZE_DP = ("stragglers analyze runs/dp-pp/trace.parquet --meta runs/dp-pp/meta.yaml "
              "--out runs/dp-pp/analysis")
RUN_HEALTHY = ("torchrun --standalone --nproc-per-node 2 docs/snippets/pipeline_1f1b.py "
               "runs/pp-healthy")
ANALYZE_HEALTHY = ("stragglers analyze runs/pp-healthy/trace.parquet --meta "
                   "runs/pp-healthy/meta.yaml --out runs/pp-healthy/analysis")

#: torch 2.13's Schedule1F1B with 2 stages and 4 microbatches, written out by hand.
ORDER_1F1B = {
    0: [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("B", 3)],
    1: [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)],
}
#: The P2P ops of a step per stage: a stage has no receive or send where it has no peer.
P2P = {0: {"forward-send": 4, "backward-recv": 4, "forward-recv": 0, "backward-send": 0},
       1: {"forward-send": 0, "backward-recv": 0, "forward-recv": 4, "backward-send": 4}}


def _run(runs: Path, command: str, analyze: str, name: str
         ) -> tuple[pd.DataFrame, Any, dict[str, Any]]:
    run_doc(command, runs)
    run_doc(analyze, runs)
    out = runs / name
    trace = pd.read_parquet(out / "trace.parquet")
    trace = trace.assign(optype=trace["optype"].astype(str))
    return trace, load_meta(out / "meta.yaml"), result(out / "analysis")


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[pd.DataFrame, Any, dict[str, Any]]:
    return _run(tmp_path_factory.mktemp("runs"), RUN, ANALYZE, "pp")


def _check_pipeline(trace: pd.DataFrame, meta: Any, dp: int) -> None:
    """Every worker and step of a 2-stage, 4-microbatch 1F1B run as the schedule ran it."""
    assert (meta.trial_name, meta.dp_size, meta.pp_size, meta.world_size) == (
        "pipeline", dp, 2, 2 * dp)
    assert check_trace(trace, meta) == []
    assert sorted(trace["step"].unique()) == list(range(2, 20))  # steps 0-1: warm-up
    counts = trace.groupby(["dp_rank", "stage", "step", "optype"]).size()
    for (_, stage, _), per_type in counts.groupby(level=[0, 1, 2]):
        have = per_type.droplevel([0, 1, 2]).to_dict()
        assert have["forward-compute"] == have["backward-compute"] == 4
        assert {t: have.get(t, 0) for t in P2P[stage]} == P2P[stage]
        for once in ("gc", "layernorm-grads-all-reduce", "embedding-grads-all-reduce",
                     "optimizer"):
            assert have[once] == 1
        assert have.get("grads-reduce-scatter", 0) == (1 if dp > 1 else 0)
    compute = trace[trace["optype"].isin(["forward-compute", "backward-compute"])]
    compute = compute.sort_values(["dp_rank", "stage", "step", "start_ts"])
    for (_, stage, _), ops in compute.groupby(["dp_rank", "stage", "step"]):
        order = [(t[0].upper(), mb) for t, mb in zip(ops["optype"], ops["mb_id"], strict=True)]
        assert order == ORDER_1F1B[stage]


def test_each_stage_records_its_1f1b_order_and_p2p_ops(
        slow_run: tuple[pd.DataFrame, Any, dict[str, Any]]) -> None:
    trace, meta, _ = slow_run
    _check_pipeline(trace, meta, dp=1)
    fwd = trace[trace["optype"] == "forward-compute"].groupby("stage")["duration"].min()
    assert fwd[0] >= 0.05 > fwd[1]  # the sleep is inside stage 0's forward spans


def test_the_slowed_stage_has_the_largest_stage_attribution(
        slow_run: tuple[pd.DataFrame, Any, dict[str, Any]]) -> None:
    _, _, res = slow_run
    stage = res["attribution"]["stage"]
    assert stage["0"] > stage["1"] + 0.3, stage
    assert res["slowdown"] > 1.2


def test_data_parallel_replicas_of_the_pipeline(tmp_path: Path) -> None:
    trace, meta, res = _run(tmp_path, RUN_DP, ANALYZE_DP, "dp-pp")
    _check_pipeline(trace, meta, dp=2)
    worker = res["attribution"]["worker"]
    assert max(worker, key=worker.get) == "1,1", worker  # rank 3: DP rank 1 of stage 1
    attribution = res["attribution"]
    assert attribution["stage"]["1"] > attribution["stage"]["0"] + 0.3, attribution
    assert attribution["dp_rank"]["1"] > attribution["dp_rank"]["0"] + 0.3, attribution


def test_a_healthy_run_records_the_same_pipeline(tmp_path: Path) -> None:
    trace, meta, res = _run(tmp_path, RUN_HEALTHY, ANALYZE_HEALTHY, "pp-healthy")
    _check_pipeline(trace, meta, dp=1)
    assert set(res["attribution"]["stage"]) == {"0", "1"}
