"""Communication inside compute annotations (issue 23 item 2): an all-to-all launched inside
``## forward ##`` is an op of its own, the forward annotation is cut there into compute ops
of its compute kernels only, and the rank that arrives last at the all-to-all is blamed,
never the rank that waited for it (model extension E2, docs/model-extensions.md).

Hand-built traces of a dp 2 DLRM-like job, two steps, as torch.profiler writes them (no
process-group information, like TorchRec's traces). Per step, on the GPU (microseconds from
the step's start): forward kernels 100-600 on rank 0 but 100-2000 on rank 1 (slow); the
all-to-all (a SendRecv kernel) runs 600-2100 on rank 0 (it waits for rank 1) and 2000-2100
on rank 1; then forward kernels 2100-2600, backward 2600-3600 and the optimizer 3600-3800 on
both. Before the change the forward op was the span 100-2600 on both ranks (the wait counted
as compute): nobody stood out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stragglers.analysis import analyze_table
from stragglers.kineto import import_kineto
from stragglers.trace import build_table, schema
from stragglers.trace.io import JobMeta

MAIN, AUTOGRAD = 100, 200
A2A_KERNEL = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"


class Events:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN,
             "args": {"name": "thread 100 (python3.8)"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": AUTOGRAD,
             "args": {"name": "thread 200 (pt_autograd_0)"}}]
        self.corr = 0

    def cpu(self, cat: str, name: str, ts: float, dur: float, tid: int = MAIN,
            args: dict | None = None) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid,
                            "ts": ts, "dur": dur, "args": args or {}})

    def kernel(self, name: str, launch: float, start: float, end: float, tid: int = MAIN,
               stream: int = 7) -> None:
        self.corr += 1
        self.cpu("cuda_runtime", "cudaLaunchKernel", launch, 0.1, tid,
                 {"correlation": self.corr})
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
                            "ts": start, "dur": end - start,
                            "args": {"correlation": self.corr, "stream": stream}})


def rank_file(folder: Path, rank: int, slow_until: float) -> None:
    e = Events()
    for step in range(2):
        o = 10_000.0 * step + 1_000_000.0
        e.cpu("user_annotation", f"ProfilerStep#{step}", o, 9000)
        e.cpu("user_annotation", "## forward ##", o + 1, 10)
        e.kernel("gemm_a", o + 2, o + 100, o + 350)
        e.kernel("gemm_b", o + 3, o + 350, o + slow_until)
        e.cpu("cpu_op", "record_param_comms", o + 5, 1, args={"Collective name": "all_to_all"})
        e.cpu("user_annotation", "nccl:all_to_all", o + 5.1, 0.8)
        a2a_start = o + (600 if rank == 0 else slow_until)
        e.kernel(A2A_KERNEL, o + 5.5, a2a_start, o + 2100, stream=21)
        e.kernel("gemm_c", o + 7, o + 2100, o + 2350)
        e.kernel("gemm_d", o + 8, o + 2350, o + 2600)
        e.cpu("user_annotation", "## backward ##", o + 12, 5, tid=AUTOGRAD)
        e.kernel("gemm_bwd", o + 13, o + 2600, o + 3600, tid=AUTOGRAD)
        e.cpu("user_annotation", "Optimizer.step#SGD.step", o + 20, 5)
        e.kernel("sgd", o + 21, o + 3600, o + 3800)
    doc = {"schemaVersion": 1,
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
           "traceEvents": e.events}
    (folder / f"rank-{rank}.json").write_text(json.dumps(doc))


@pytest.fixture()
def dlrm(tmp_path: Path) -> Path:
    folder = tmp_path / "prof"
    folder.mkdir()
    rank_file(folder, 0, slow_until=600)
    rank_file(folder, 1, slow_until=2000)
    return folder


META = JobMeta(dp_size=2, pp_size=1, world_size=2, trial_name="dlrm")


def test_all_to_all_inside_forward_is_an_op_and_forward_is_its_kernels(dlrm: Path) -> None:
    trace, report = import_kineto(dlrm, META, jobs=1)
    code = schema.OPTYPE_CODE
    for rank, first_end in ((0, 600), (1, 2000)):
        mine = (trace.rank == rank) & (trace.step == 0)
        fwd = mine & (trace.optype == code[schema.FORWARD_COMPUTE])
        o = np.argsort(trace.start_ts[fwd])
        start_us = (trace.start_ts[fwd][o] - 1.0) * 1e6
        end_us = start_us + trace.duration[fwd][o] * 1e6
        np.testing.assert_allclose(start_us, [100, 2100], atol=1e-3)
        np.testing.assert_allclose(end_us, [first_end, 2600], atol=1e-3)
        a2a = mine & (trace.optype == code[schema.ALL_TO_ALL])
        assert a2a.sum() == 1
        assert trace.start_ts[a2a][0] * 1e6 - 1e6 == pytest.approx(first_end, abs=1e-3)
    assert report.counts["compute annotations as a whole (cut at the all-to-all calls inside "
                         "them into compute ops of their kernels)"] == 4
    assert not any("alltoall" in what for what in report.counts)


def test_the_rank_late_at_the_all_to_all_is_blamed_not_its_waiter(dlrm: Path) -> None:
    trace, _ = import_kineto(dlrm, META, jobs=1)
    a = analyze_table(build_table(trace, META)).result
    doc = a.to_document()
    assert abs(doc["discrepancy"] - 1.0) < 1e-6  # the simulation reproduces the trace
    sw = a.metrics.worker_slowdown
    assert sw[1, 0] > 1.2  # rank 1 computes 1.4 ms longer before the all-to-all
    assert sw[0, 0] == pytest.approx(1.0, abs=1e-6)  # rank 0 only waited
    assert doc["worker_score"]["0,0"] < doc["worker_score"]["1,0"]
    scores = doc["attribution"]["worker"]
    assert max(scores, key=scores.get) == "1,0"
