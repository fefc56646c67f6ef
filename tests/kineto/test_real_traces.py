"""The importer on real PyTorch profiler traces from elsewhere (read from ../shared/real).

Source: facebookresearch/HolisticTraceAnalysis @ f4d0062,
``tests/data/nccl_parser_config/nccl_data.json.gz`` (here ``hta-ddp-rank0-of-2.json.gz``) and
``tests/data/trace_filter/sampled_rank-{0,1}.json.gz`` (``hta-sampled-rank-{0,1}.json.gz``);
licence MIT. The facts checked are counted from the raw JSON by the test itself (plain
``json``), independently of the importer's streaming reader.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.kineto import import_kineto
from stragglers.kineto.patterns import default_patterns
from stragglers.kineto.rankops import rank_ops
from stragglers.kineto.reader import COMM_CODE, read_rank_file
from stragglers.trace import schema
from stragglers.trace.io import JobMeta
from tests.conftest import SHARED

KINETO = SHARED / "real" / "kineto"
DDP = "hta-ddp-rank0-of-2.json.gz"
SAMPLED = ("hta-sampled-rank-0.json.gz", "hta-sampled-rank-1.json.gz")


@pytest.fixture(scope="module")
def real() -> Path:
    if (KINETO / DDP).exists():
        return KINETO
    reason = f"real profiler traces not found at {KINETO} (../shared beside the checkout)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def raw_events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


@pytest.mark.slow
def test_ddp_rank0_steps_annotations_and_old_nccl_kernels(real: Path) -> None:
    raw = raw_events(real / DDP)
    ev = read_rank_file(real / DDP, default_patterns())
    assert ev.rank == 0 and ev.world_size == 2
    assert ev.pg_config[0]["pg_desc"] == "default_pg"
    steps = sorted(int(e["name"].split("#")[1]) for e in raw
                   if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == [4, 5, 6]
    assert sorted(ev.step_n.tolist()) == steps
    kernels = [e for e in raw if e.get("cat") == "kernel"]
    nccl = Counter(e["name"].split("(")[0] for e in kernels
                   if e["name"].startswith("ncclKernel_"))
    assert nccl["ncclKernel_AllReduce_RING_LL_Sum_float"] == 15
    assert (ev.k_kind == COMM_CODE["allreduce"]).sum() == 15
    assert (ev.k_kind == COMM_CODE["broadcast"]).sum() == nccl[
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t"]
    assert ev.k_ts.size == len(kernels)
    ops = rank_ops(ev)
    code = schema.OPTYPE_CODE
    for optype in (schema.FORWARD_COMPUTE, schema.BACKWARD_COMPUTE, schema.OPTIMIZER):
        per_step = Counter(ops.step[ops.optype == code[optype]].tolist())
        assert per_step == {4: 1, 5: 1, 6: 1}, optype
    # compute times are GPU spans: inside the step, shorter than the CPU ranges' ends allow
    fwd = ops.optype == code[schema.FORWARD_COMPUTE]
    assert (ops.end[fwd] > ops.start[fwd]).all()


def test_ddp_rank0_alone_is_an_incomplete_job(real: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture) -> None:
    meta = tmp_path / "job.yaml"
    meta.write_text("dp_size: 2\npp_size: 1\n")
    code = main(["import", "kineto", str(real / DDP), "--meta", str(meta),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "incomplete job: no trace of 1 of 2 workers" in err
    assert "dp rank 1, stage 0 (rank 1)" in err
    assert not (tmp_path / "out").exists()


def test_sampled_ranks_of_a_128_rank_job(real: Path, tmp_path: Path) -> None:
    for i, name in enumerate(SAMPLED):
        raw = raw_events(real / name)
        ev = read_rank_file(real / name, default_patterns())
        assert ev.rank == i and ev.world_size == 128 and ev.pg_config == []
        assert sorted(ev.step_n.tolist()) == [551, 552]
        sendrecv = sum(e["name"].startswith("ncclKernel_SendRecv") for e in raw
                       if e.get("cat") == "kernel")
        assert sendrecv == 10
        assert (ev.k_kind == COMM_CODE["sendrecv"]).sum() == sendrecv
        backend = Counter(e["name"] for e in raw if e.get("name", "").startswith("nccl:"))
        kinds = Counter(ev.cc_kind[~ev.cc_rpc].tolist())
        assert kinds[COMM_CODE["alltoall"]] == backend["nccl:all_to_all"]
        assert kinds[COMM_CODE["allreduce"]] == backend["nccl:all_reduce"]
        assert kinds[COMM_CODE["allgather"]] == backend["nccl:_all_gather_base"]
        ops = rank_ops(ev)
        opt = ops.optype == schema.OPTYPE_CODE[schema.OPTIMIZER]
        # Optimizer.step#Shampoo.step and Optimizer.step#EMAOptimizer.step in each step
        assert Counter(ops.step[opt].tolist()) == {551: 2, 552: 2}
    folder = tmp_path / "sampled"  # the two ranks of the job (links, not copies)
    folder.mkdir()
    for name in SAMPLED:
        (folder / name).symlink_to(real / name)
    meta = JobMeta(dp_size=128, pp_size=1, world_size=128)
    with pytest.raises(InputError, match=r"incomplete job: no trace of 126 of 128 workers "
                                         r"\(dp_size 128 x pp_size 1\), e.g. dp rank 2"):
        import_kineto(folder, meta)


def test_world_size_must_match_the_metadata(real: Path) -> None:
    meta = JobMeta(dp_size=4, pp_size=1, world_size=4)
    with pytest.raises(InputError, match="distributedInfo field 'world_size' 2 != the "
                                         "metadata's world_size 4"):
        import_kineto(real / DDP, meta)
