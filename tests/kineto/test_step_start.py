"""A rank that starts its step late on the host (issue 28 item 2): its lateness must show as
the late start of its first op on the job's clock (the model's launch delay of that op: its
start − the step's earliest start over all ranks), and the ranks that wait for it must wait
in a communication op, whose transfer time the model computes from the latest member start,
so that nobody but the late rank is charged for it.

Hand-built traces of a dp-4 DLRM-like job (no process-group information in the all-to-all,
like TorchRec's traces), three steps, as torch.profiler writes them. Per step, in
microseconds from the step's start on the host (``ProfilerStep#N``, the same on every rank):
the data loader ``enumerate(DataLoader)#...__next__`` 1-51, then ``## forward ##`` whose
kernels run 100-500, an all-to-all called inside it (its kernel from 500 until the last rank
arrives, + 100), one 20 us compute kernel launched after the call that runs beside the
all-to-all, compute kernels after it (400 us), backward (900 us), the gradient all-reduce
(200 us) and the optimizer (200 us). The late rank does all of it ``LATE`` later: its data
loading takes ``LATE`` longer, or its ``ProfilerStep`` itself starts ``LATE`` later. Its
waiters' all-to-all kernels run until it arrives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stragglers.analysis import analyze_table
from stragglers.cli import main
from stragglers.kineto import import_kineto
from stragglers.trace import build_table, schema
from stragglers.trace.io import JobMeta, TraceColumns, read_trace
from tests.kineto.test_all_to_all_import import A2A_KERNEL, AUTOGRAD, Events

DP = 4
LATE_RANK = 2
LATE = 1500.0  # us
AR_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
META = JobMeta(dp_size=DP, pp_size=1, world_size=DP, trial_name="late-host")
#: Kineto's rounding period of baseTimeNanoseconds (about three months), in ns
TRIMESTER_NS = 7_889_238 * 1_000_000_000


def rank_events(rank: int, late: str) -> list[dict[str, Any]]:
    """One rank's events; ``late``: "data" (its data loading takes LATE longer), "step" (its
    ProfilerStep starts LATE later) or "" (nobody is late)."""
    e = Events()
    mine = LATE if rank == LATE_RANK and late else 0.0
    arrive = 500.0 + (LATE if late else 0.0)  # the last rank's all-to-all start
    for step in range(3):
        o = 1_000_000.0 + 20_000.0 * step
        h = o + (mine if late == "step" else 0.0)  # this rank's step start on the host
        e.cpu("user_annotation", f"ProfilerStep#{step}", h, 19_000 - (h - o))
        e.cpu("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
              h + 1, 50 + (mine if late == "data" else 0.0))
        f = o + mine  # after the data: forward, on the host and on the GPU
        e.cpu("user_annotation", "## forward ##", f + 60, 20)
        e.kernel("gemm_a", f + 61, f + 100, f + 300)
        e.kernel("gemm_b", f + 62, f + 300, f + 500)
        e.cpu("cpu_op", "record_param_comms", f + 65, 1, args={"Collective name": "all_to_all"})
        e.cpu("user_annotation", "nccl:all_to_all", f + 65.1, 0.8)
        e.kernel(A2A_KERNEL, f + 65.5, f + 500, o + arrive + 100, stream=21)
        e.kernel("embedding_bag", f + 66, f + 520, f + 540, stream=9)  # beside the all-to-all
        a = o + arrive + 100  # the all-to-all ends on every rank
        e.kernel("gemm_c", f + 70, a, a + 400)
        e.cpu("user_annotation", "## backward ##", f + 80, 10, tid=AUTOGRAD)
        e.kernel("gemm_bwd", f + 81, a + 400, a + 1300, tid=AUTOGRAD)
        e.cpu("cpu_op", "record_param_comms", f + 85, 1, tid=AUTOGRAD,
              args={"Collective name": "allreduce", "Process Group Ranks": str(list(range(DP))),
                    "Group size": DP})
        e.kernel(AR_KERNEL, f + 85.5, a + 1300, a + 1500, tid=AUTOGRAD, stream=21)
        e.cpu("user_annotation", "Optimizer.step#SGD.step", f + 95, 5)
        e.kernel("sgd", f + 96, a + 1500, a + 1700)
    return e.events


def write_job(folder: Path, late: str, *, base_ns: dict[int, int] | None = None,
              host_offset_us: dict[int, float] | None = None) -> Path:
    """One file per rank. ``base_ns``: a rank's baseTimeNanoseconds (its times written as
    microseconds after it, as Kineto does; the events happen just after the latest base);
    ``host_offset_us``: a rank on another host whose clock is ahead."""
    folder.mkdir(parents=True, exist_ok=True)
    latest = max((base_ns or {0: 0}).values())
    for rank in range(DP):
        events = rank_events(rank, late)
        shift = (host_offset_us or {}).get(rank, 0.0) \
            + (latest - (base_ns or {}).get(rank, 0)) / 1000
        for ev in events:
            if "ts" in ev:
                ev["ts"] += shift
        doc: dict[str, Any] = {"schemaVersion": 1,
                               "distributedInfo": {"backend": "nccl", "rank": rank,
                                                   "world_size": DP}}
        if host_offset_us is not None:
            doc["host_name"] = f"host{int(rank in host_offset_us)}"
        doc["traceEvents"] = events
        if base_ns is not None:  # after the events, where Kineto writes it
            doc["baseTimeNanoseconds"] = base_ns.get(rank, 0)
        (folder / f"rank-{rank}.json").write_text(json.dumps(doc))
    return folder


def first_op_delays(trace: TraceColumns) -> np.ndarray:
    """Per (step, rank): the start of the rank's first op − the step's earliest start over
    all ranks (the launch delay of an op without dependencies), in us."""
    steps = np.unique(trace.step)
    out = np.zeros((steps.size, DP))
    for i, st in enumerate(steps.tolist()):  # a few steps and ranks: the test's truth
        mine = trace.step == st
        t0 = trace.start_ts[mine].min()
        for r in range(DP):
            out[i, r] = (trace.start_ts[mine & (trace.rank == r)].min() - t0) * 1e6
    return out


def expected_delays() -> np.ndarray:
    want = np.zeros((3, DP))
    want[:, LATE_RANK] = LATE
    return want


def _check_trace(trace: TraceColumns) -> None:
    np.testing.assert_allclose(first_op_delays(trace), expected_delays(), atol=0.01)
    code = schema.OPTYPE_CODE
    first = trace.start_ts == np.array([trace.start_ts[(trace.step == s) & (trace.rank == r)]
                                        .min() for s, r in zip(trace.step, trace.rank,
                                                               strict=True)])
    # the first op of every rank is its first forward compute
    assert set(trace.optype[first].tolist()) == {code[schema.FORWARD_COMPUTE]}
    # the waiters wait in the all-to-all: it ends 100 us after the late rank arrived
    a2a = trace.optype == code[schema.ALL_TO_ALL]
    end = (trace.start_ts[a2a] + trace.duration[a2a]) % 0.02
    np.testing.assert_allclose(end * 1e6, 500 + LATE + 100, atol=0.01)
    # and their forward compute is their kernels only: 400 us before it, 400 us after it
    fwd = trace.optype == code[schema.FORWARD_COMPUTE]
    np.testing.assert_allclose(trace.duration[fwd] * 1e6, 400.0, atol=0.01)


def _check_blame(trace: TraceColumns) -> None:
    result = analyze_table(build_table(trace, META)).result
    sw = result.metrics.worker_slowdown[:, 0]
    waiters = [r for r in range(DP) if r != LATE_RANK]
    np.testing.assert_allclose(sw[waiters], 1.0, atol=1e-6)  # nobody charged for waiting
    assert sw[LATE_RANK] >= sw[waiters].max() - 1e-6


@pytest.mark.parametrize("late", ["data", "step"])
def test_a_late_rank_starts_its_first_op_late_and_its_waiters_are_not_blamed(
        tmp_path: Path, late: str) -> None:
    trace, _ = import_kineto(write_job(tmp_path / "prof", late), META, jobs=1)
    _check_trace(trace)
    _check_blame(trace)


def test_nobody_late_nobody_delayed(tmp_path: Path) -> None:
    trace, _ = import_kineto(write_job(tmp_path / "prof", ""), META, jobs=1)
    np.testing.assert_allclose(first_op_delays(trace), 0.0, atol=1e-3)


def test_files_with_different_base_times_are_put_on_one_clock(tmp_path: Path) -> None:
    # ranks 1 and 2 started their profiler after Kineto's rounding boundary: their times are
    # written after a base one period later (before, they were 91 days apart)
    base = {0: 5 * TRIMESTER_NS, 1: 6 * TRIMESTER_NS, 2: 6 * TRIMESTER_NS, 3: 5 * TRIMESTER_NS}
    folder = write_job(tmp_path / "prof", "data", base_ns=base)
    trace, report = import_kineto(folder, META, jobs=1)
    _check_trace(trace)
    _check_blame(trace)
    assert report.base_shift_s == {1: pytest.approx(7_889_238.0), 2: pytest.approx(7_889_238.0)}
    assert any("times of rank(s) 1-2 put on the job's clock: +7889238.000000 s" in line
               for line in report.lines())


def test_a_late_rank_on_a_host_with_another_clock(tmp_path: Path) -> None:
    # the late rank and rank 3 on a second host whose clock is 0.25 s ahead
    folder = write_job(tmp_path / "prof", "data", host_offset_us={LATE_RANK: 250_000.0,
                                                                  3: 250_000.0})
    trace, report = import_kineto(folder, META, jobs=1)
    assert report.clock_shift_s == {"host1": pytest.approx(0.25)}
    _check_trace(trace)
    _check_blame(trace)


def test_a_host_sharing_no_collective_is_reported(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "prof", "", host_offset_us={1: 0.0})
    for rank in range(DP):  # no all-reduce and no all-to-all: nothing to align the clocks
        path = folder / f"rank-{rank}.json"
        doc = json.loads(path.read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"]
                              if e.get("name") not in ("record_param_comms", "nccl:all_to_all")
                              and "nccl" not in str(e.get("name"))]
        path.write_text(json.dumps(doc))
    _, report = import_kineto(folder, META, jobs=1)
    assert report.unaligned_hosts == ["host1"]
    assert any(line.startswith("clock of host host1 not aligned") for line in report.lines())


def test_cli_import_then_analyze_does_not_blame_the_waiters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_job(tmp_path / "prof", "data")
    (tmp_path / "job.yaml").write_text(f"dp_size: {DP}\npp_size: 1\n")
    out = tmp_path / "imported"
    assert main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                 "--out", str(out), "--jobs", "1"]) == 0
    capsys.readouterr()
    trace = read_trace(out / "trace.parquet")  # the launch delays from the written trace
    np.testing.assert_allclose(first_op_delays(trace), expected_delays(), atol=1e-3)
    assert main(["analyze", str(out / "trace.parquet"), "--meta", str(out / "meta.yaml"),
                 "--out", str(tmp_path / "a"), "--no-timelines", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    scores = doc["worker_score"]
    waiters = [f"{r},0" for r in range(DP) if r != LATE_RANK]
    assert all(scores[w] == pytest.approx(1.0, abs=1e-6) for w in waiters)
    assert scores[f"{LATE_RANK},0"] >= max(scores[w] for w in waiters) - 1e-6
