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
from stragglers.trace.io import JobMeta, TraceColumns

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


def rank_file(folder: Path, rank: int, slow_until: float,
              beside: tuple[float, float] | None = None) -> None:
    """``beside``: one more compute kernel [start, end] (us from the step's start), launched
    after the all-to-all call on a second stream, running while the all-to-all waits."""
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
        if beside is not None:
            e.kernel("embedding_bag", o + 6, o + beside[0], o + beside[1], stream=9)
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


# --- issue 28 item 1: a compute kernel beside the all-to-all. One 20 us kernel, launched
# after the all-to-all call, runs while the all-to-all waits (rank 0: 700-720 inside its
# all-to-all 600-2100; rank 1: 2020-2040 inside 2000-2100). Before, the compute piece after
# the cut was its kernels' span, 700-2600 on rank 0: the wait for rank 1 became rank 0's
# compute and rank 0 was blamed.


@pytest.fixture()
def dlrm_beside(tmp_path: Path) -> Path:
    folder = tmp_path / "prof"
    folder.mkdir()
    rank_file(folder, 0, slow_until=600, beside=(700, 720))
    rank_file(folder, 1, slow_until=2000, beside=(2020, 2040))
    return folder


def _forward_us(trace: TraceColumns, rank: int) -> list[tuple[float, float]]:
    """(start, end) of the forward compute ops of ``rank`` in step 0, us from the step."""
    fwd = (trace.rank == rank) & (trace.step == 0) & (
        trace.optype == schema.OPTYPE_CODE[schema.FORWARD_COMPUTE])
    o = np.argsort(trace.start_ts[fwd])
    start = (trace.start_ts[fwd][o] - 1.0) * 1e6
    return [(round(s, 3), round(s + d * 1e6, 3))
            for s, d in zip(start.tolist(), trace.duration[fwd][o].tolist(), strict=True)]


def test_a_compute_kernel_beside_the_all_to_all_is_not_its_wait(dlrm_beside: Path) -> None:
    trace, _ = import_kineto(dlrm_beside, META, jobs=1)
    # the 20 us run inside the all-to-all: the piece after it is 2100-2600 on both ranks
    assert _forward_us(trace, 0) == [(100.0, 600.0), (2100.0, 2600.0)]
    assert _forward_us(trace, 1) == [(100.0, 2000.0), (2100.0, 2600.0)]


def test_a_compute_kernel_beside_the_all_to_all_does_not_flip_the_blame(
        dlrm_beside: Path) -> None:
    trace, _ = import_kineto(dlrm_beside, META, jobs=1)
    a = analyze_table(build_table(trace, META)).result
    doc = a.to_document()
    assert abs(doc["discrepancy"] - 1.0) < 1e-6
    sw = a.metrics.worker_slowdown
    assert sw[1, 0] > 1.2
    assert sw[0, 0] == pytest.approx(1.0, abs=1e-6)
    scores = doc["attribution"]["worker"]
    assert max(scores, key=scores.get) == "1,0"


def _one_rank(folder: Path, kernels: list[tuple[str, float, float, float, int]],
              a2a: tuple[float, float] | None) -> None:
    """One rank of a dp-2 job, one step: a forward annotation (CPU 1-40) launching
    ``kernels`` (name, launch, start, end, stream) and, at CPU time 10, an all-to-all whose
    kernel runs ``a2a``; then backward and the optimizer. The second rank is the same."""
    for rank in (0, 1):
        e = Events()
        o = 1_000_000.0
        e.cpu("user_annotation", "ProfilerStep#0", o, 9000)
        e.cpu("user_annotation", "## forward ##", o + 1, 39)
        for name, launch, start, end, stream in kernels:
            e.kernel(name, o + launch, o + start, o + end, stream=stream)
        if a2a is not None:
            e.cpu("cpu_op", "record_param_comms", o + 10, 1,
                  args={"Collective name": "all_to_all"})
            e.kernel(A2A_KERNEL, o + 10.5, o + a2a[0], o + a2a[1], stream=21)
        e.cpu("user_annotation", "## backward ##", o + 50, 5, tid=AUTOGRAD)
        e.kernel("gemm_bwd", o + 51, o + 3000, o + 3500, tid=AUTOGRAD)
        e.cpu("user_annotation", "Optimizer.step#SGD.step", o + 60, 5)
        e.kernel("sgd", o + 61, o + 3500, o + 3600)
        doc = {"schemaVersion": 1,
               "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
               "traceEvents": e.events}
        (folder / f"rank-{rank}.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(("kernels", "a2a", "forward"), [
    # no all-to-all: the forward is the span of its kernels, two streams overlapping and an
    # idle gap included (the gap is the rank's own CPU-side time, as in a host-timed span)
    ([("a", 2, 100, 400, 7), ("b", 3, 300, 500, 9), ("c", 4, 800, 900, 7)], None,
     [(100, 900)]),
    # before the all-to-all: 100-500; after it: a kernel beside it (1200-1300, inside
    # 600-2000) and one that outlasts it (1900-2300): 2000-2300 is compute, and the piece
    # starts when the all-to-all ends
    ([("a", 2, 100, 500, 7), ("b", 12, 1200, 1300, 9), ("c", 13, 1900, 2300, 7)],
     (600, 2000), [(100, 500), (2000, 2300)]),
    # a kernel launched before the call that runs into the all-to-all: only its part
    # before the all-to-all is compute; after it, one kernel 2500-2600 (the piece is its
    # kernels' span: the gap after the all-to-all is the next op's launch delay)
    ([("a", 2, 100, 500, 7), ("b", 3, 450, 700, 9), ("c", 13, 2500, 2600, 7)],
     (600, 2000), [(100, 600), (2500, 2600)]),
    # every kernel after the call runs inside the all-to-all: a piece of length 0 at its end
    ([("a", 2, 100, 500, 7), ("b", 12, 900, 1000, 9)], (600, 2000),
     [(100, 500), (2000, 2000)]),
])
def test_compute_pieces_exclude_the_all_to_all_time(
        tmp_path: Path, kernels: list[tuple[str, float, float, float, int]],
        a2a: tuple[float, float] | None, forward: list[tuple[float, float]]) -> None:
    _one_rank(tmp_path, kernels, a2a)
    trace, _ = import_kineto(tmp_path, META, jobs=1)
    for rank in (0, 1):
        assert _forward_us(trace, rank) == [(float(a), float(b)) for a, b in forward]
