"""Communication inside a compute annotation is not compute (issue 28): a rank late on the
host (a slow data loader) is named, the ranks that wait for it are not blamed.

Hand-built traces of a dp-2 DDP job, three steps, as torch.profiler writes them. Rank 1's
data loader takes ``LATE`` longer before each forward (unrecorded, as ``time.sleep`` in a
loader is). Per step, in microseconds from the step's start: ``## forward ##`` (``FWD``),
then ``## backward ##`` on the same thread: ``BWD`` of backward ops, the gradient
all-reduce, and after it ``TAIL`` of gradient copies
(``torch.distributed.ddp.reducer::copy_bucket_to_grad``) that end the range; then the
optimizer. The all-reduce cannot complete before the late rank arrives, so rank 0 waits in it
for ``LATE``: inside its ``## backward ##`` range.

CPU-only (gloo, no GPU kernels: compute timed by the annotations' CPU ranges), as PyTorch
2.x records it (``c10d::allreduce_`` on the calling thread, ``gloo:all_reduce`` on a gloo
worker thread, and DDP's wait for it recorded by no CPU op at all; checked against a real
2-rank run of ``bench/bench_gpu_host.py --device cpu``):

* ``gloo``: one bucket, launched at the end of the backward ops;
* ``functional``: functional collectives (FSDP2, DTensor, compiled code): the launch
  ``_c10d_functional::all_reduce`` and the wait recorded, ``_c10d_functional::wait_tensor``;
* ``buckets``: a first bucket launched in the middle of the backward ops, which on the late
  rank completes while its thread is still running a backward op (busy: not a wait), and a
  last one at the end.

Known answer: every rank's backward-compute is its own compute: the annotation less the
collective calls and the wait (``BWD`` + ``TAIL`` less the calls), the same on both ranks,
whatever the wait. Before the change, rank 0's was longer by the wait (``LATE``), which
blamed it (``worker (0,0)`` on the real run). The late rank's first op starts ``LATE`` late.

GPU (guards of what already held): DDP over gloo with CUDA tensors (compute kernels, the
gradients copied to and from the host by ``cudaMemcpyAsync`` on the gloo thread, and copied
into ``.grad`` after the wait) and DDP over NCCL (the all-reduce kernel on another stream,
waiting for the late rank): compute is the compute kernels' span, memory copies are not
compute kernels and the wait is in the all-reduce. They check compute only: the time of the
gloo all-reduce itself (from its copies, not its CPU range), the discrepancy and the late
rank's launch delays are checked in ``test_gloo_cuda.py``, on the pattern PyTorch 2.11
records.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stragglers.analysis import analyze_table
from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.kineto import import_kineto
from stragglers.kineto.rankops import _range_argmax
from stragglers.trace import build_table, schema
from stragglers.trace.io import JobMeta, TraceColumns
from tests.kineto.test_all_to_all_import import MAIN, Events

DP = 2
LATE_RANK = 1
LATE = 40_000.0  # us: the slow data loader, per step
FWD, BWD, TAIL, XFER = 3_000.0, 4_000.0, 400.0, 300.0
CALL = 50.0  # a collective call (its launch) on the calling thread
GLOO, GLOO2 = 300, 301  # gloo worker threads
STEP = 100_000.0
META = JobMeta(dp_size=DP, pp_size=1, world_size=DP, trial_name="ddp-cpu")
AR_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
PG = {"Process Group Ranks": "[0, 1]", "Group size": 2}


def _thread(e: Events, tid: int, name: str) -> None:
    e.events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid,
                     "args": {"name": name}})


def cpu_rank_events(rank: int, variant: str, late: float = LATE) -> list[dict[str, Any]]:
    """One rank's events, CPU only; ``variant``: gloo, functional or buckets."""
    e = Events()
    _thread(e, GLOO, "gloo worker 0")
    _thread(e, GLOO2, "gloo worker 1")
    mine = late if rank == LATE_RANK else 0.0
    for step in range(3):
        o = 1_000_000.0 + STEP * step
        e.cpu("user_annotation", f"ProfilerStep#{step}", o, STEP - 1_000)
        f = o + 10 + mine  # after the data
        e.cpu("user_annotation", "## forward ##", f, FWD)
        e.cpu("cpu_op", "aten::linear", f + 5, FWD / 2 - 10)
        e.cpu("cpu_op", "aten::relu", f + FWD / 2, FWD / 2 - 10)
        b = f + FWD + 10
        launch = b + BWD  # the (last) bucket's launch, after the backward ops
        # the all-reduce completes XFER after the late rank's launch (same on every rank)
        done = o + 10 + late + FWD + 10 + BWD + CALL + 10 + XFER
        if variant == "buckets":  # a first bucket at half of the backward ops
            first = b + BWD / 2
            e.cpu("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", b + 5,
                  BWD / 2 - 10)
            e.cpu("cpu_op", "c10d::allreduce_", first, CALL)
            # the late rank's backward op runs across the first bucket's end
            e.cpu("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0",
                  first + CALL + 5, BWD / 2 - CALL - 10)
            first_done = o + 10 + late + FWD + 10 + BWD / 2 + CALL + 10 + XFER
            e.cpu("user_annotation", "gloo:all_reduce", first + CALL + 10,
                  first_done - (first + CALL + 10), tid=GLOO2)
        else:
            e.cpu("cpu_op", "autograd::engine::evaluate_function: AddmmBackward0", b + 5,
                  BWD - 10)
        e.cpu("user_annotation", "## backward ##", b, done + TAIL - b)
        if variant == "functional":
            e.cpu("cpu_op", "_c10d_functional::all_reduce", launch, CALL)
        else:
            e.cpu("cpu_op", "c10d::allreduce_", launch, CALL)
        e.cpu("user_annotation", "gloo:all_reduce", launch + CALL + 10,
              done - (launch + CALL + 10), tid=GLOO)
        if variant == "functional":  # the wait, recorded: from the launch's end to done
            e.cpu("cpu_op", "_c10d_functional::wait_tensor", launch + CALL,
                  done + 5 - (launch + CALL))
        e.cpu("cpu_op", "torch.distributed.ddp.reducer::copy_bucket_to_grad", done + 40,
              TAIL - 60)
        e.cpu("user_annotation", "Optimizer.step#SGD.step", done + TAIL + 50, 400)
        e.cpu("cpu_op", "aten::add_", done + TAIL + 60, 300)
    return e.events


def gpu_rank_events(rank: int, backend: str) -> list[dict[str, Any]]:
    """One rank's events with CUDA tensors; ``backend``: gloo (the all-reduce on the host,
    its data copied by cudaMemcpyAsync) or nccl (an all-reduce kernel on stream 21)."""
    e = Events()
    _thread(e, GLOO, "gloo worker 0")
    mine = LATE if rank == LATE_RANK else 0.0
    for step in range(3):
        o = 1_000_000.0 + STEP * step
        e.cpu("user_annotation", f"ProfilerStep#{step}", o, STEP - 1_000)
        f = o + 10 + mine
        e.cpu("user_annotation", "## forward ##", f, 100)
        e.kernel("gemm_fwd", f + 10, f + 50, f + 50 + FWD)
        b = f + 110
        e.cpu("user_annotation", "## backward ##", b, 0)  # its end: below
        g = f + 50 + FWD  # the backward kernels run after the forward ones
        e.kernel("gemm_bwd", b + 10, g, g + BWD)
        launch = b + 20
        done = o + 10 + LATE + 50 + FWD + BWD + XFER  # the all-reduce completes
        if backend == "nccl":
            e.cpu("cpu_op", "record_param_comms", launch, CALL,
                  args={"Collective name": "allreduce", **PG})
            e.cpu("user_annotation", "nccl:all_reduce", launch + 1, CALL - 2)
            e.kernel(AR_KERNEL, launch + 10, g + BWD, done, stream=21)
            # the gradients copied into .grad after the all-reduce (on the GPU)
            memcpy(e, launch + CALL + 10, done, done + TAIL)
            end = launch + CALL + 20
        else:  # gloo: the host waits for the all-reduce (no CPU op records the wait)
            e.cpu("cpu_op", "c10d::allreduce_", launch, CALL)
            memcpy(e, launch + CALL + 5, g + BWD, g + BWD + 100, tid=GLOO)  # to the host
            e.cpu("user_annotation", "gloo:all_reduce", launch + CALL + 10,
                  done - (launch + CALL + 10), tid=GLOO)
            memcpy(e, done + 5, done + 10, done + 110, tid=GLOO)  # back to the GPU
            memcpy(e, done + 120, done + 130, done + TAIL)  # into .grad
            end = done + 140
        bwd = next(ev for ev in reversed(e.events) if ev.get("name") == "## backward ##")
        bwd["dur"] = end - b
        e.cpu("user_annotation", "Optimizer.step#SGD.step", end + 10, 50)
        e.kernel("sgd", end + 20, max(end, done + TAIL) + 10, max(end, done + TAIL) + 210)
    return e.events


def memcpy(e: Events, launch: float, start: float, end: float, tid: int = MAIN) -> None:
    """A cudaMemcpyAsync and its copy on the GPU (``gpu_memcpy``, not a kernel)."""
    e.corr += 1
    e.cpu("cuda_runtime", "cudaMemcpyAsync", launch, 2, tid, {"correlation": e.corr})
    e.events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)",
                     "pid": 0, "tid": 7, "ts": start, "dur": end - start,
                     "args": {"correlation": e.corr, "stream": 7}})


def write_job(folder: Path, events: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(DP):
        doc = {"schemaVersion": 1,
               "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": DP},
               "traceEvents": events(rank)}
        (folder / f"rank-{rank}.json").write_text(json.dumps(doc))
    return folder


def durations(trace: TraceColumns, optype: str) -> np.ndarray:
    """Per (step, rank): the op's duration in us (one per rank and step)."""
    sel = trace.optype == schema.OPTYPE_CODE[optype]
    out = np.full((3, DP), np.nan)
    out[trace.step[sel], trace.rank[sel]] = trace.duration[sel] * 1e6
    return out


def first_op_delays(trace: TraceColumns) -> np.ndarray:
    """Per (step, rank): the rank's first op's start − the step's earliest start, in us."""
    t0 = np.full(3, np.inf)
    np.minimum.at(t0, trace.step, trace.start_ts)
    first = np.full((3, DP), np.inf)
    np.minimum.at(first, (trace.step, trace.rank), trace.start_ts)
    return (first - t0[:, None]) * 1e6


def _check_no_waiter_blamed(trace: TraceColumns) -> None:
    result = analyze_table(build_table(trace, META)).result
    sw = result.metrics.worker_slowdown[:, 0]
    np.testing.assert_allclose(sw[1 - LATE_RANK], 1.0, atol=1e-3)  # the waiter: not charged
    assert sw[LATE_RANK] >= sw[1 - LATE_RANK] - 1e-6
    assert (0, 0) not in [tuple(w) for w in result.verdict.workers]


@pytest.mark.parametrize("variant", ["gloo", "functional", "buckets"])
def test_cpu_ddp_wait_for_a_late_rank_is_not_backward_compute(tmp_path: Path,
                                                             variant: str) -> None:
    folder = write_job(tmp_path / "prof", lambda r: cpu_rank_events(r, variant))
    trace, report = import_kineto(folder, META, jobs=1)
    # every rank's backward is its own compute: the annotation less its collective calls
    # and the wait (rank 0's wait, LATE, was in it before): the backward ops (BWD, less the
    # first bucket's call made among them) and the gradient copies after the wait (TAIL,
    # less the 5 us that the recorded wait lasts after the all-reduce)
    calls = CALL if variant == "buckets" else 5.0 if variant == "functional" else 0.0
    np.testing.assert_allclose(durations(trace, schema.BACKWARD_COMPUTE), BWD + TAIL - calls,
                               atol=0.01)
    np.testing.assert_allclose(durations(trace, schema.FORWARD_COMPUTE), FWD, atol=0.01)
    # the late rank starts each step's first op LATE late; the wait is in the all-reduce,
    # which ends at the same moment on both ranks
    want = np.zeros((3, DP))
    want[:, LATE_RANK] = LATE
    np.testing.assert_allclose(first_op_delays(trace), want, atol=0.01)
    rs = trace.optype == schema.OPTYPE_CODE[schema.GRADS_REDUCE_SCATTER]
    last = np.zeros((3, DP))
    np.maximum.at(last, (trace.step[rs], trace.rank[rs]),
                  (trace.start_ts[rs] + trace.duration[rs]) % (STEP / 1e6) * 1e6)
    np.testing.assert_allclose(last[:, 0], last[:, 1], atol=0.01)
    # the backward op starts where its annotation starts; the waiter's ends before the late
    # rank has even started its forward
    bw = trace.optype == schema.OPTYPE_CODE[schema.BACKWARD_COMPUTE]
    start = trace.start_ts[bw] % (STEP / 1e6) * 1e6
    np.testing.assert_allclose(start, 10 + FWD + 10 + LATE * (trace.rank[bw] == LATE_RANK),
                               atol=0.01)
    waiter = bw & (trace.rank != LATE_RANK)
    assert ((trace.start_ts[waiter] + trace.duration[waiter]) % (STEP / 1e6) * 1e6
            < 10 + LATE).all()
    assert report.comm_in_compute_s[0] > report.comm_in_compute_s[1]
    assert any(line.startswith("CPU-timed compute on rank(s) 0-1: ")
               for line in report.lines())
    _check_no_waiter_blamed(trace)


def test_cpu_ddp_nobody_late_nothing_waits(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "prof", lambda r: cpu_rank_events(r, "gloo", late=0.0))
    trace, _ = import_kineto(folder, META, jobs=1)
    np.testing.assert_allclose(durations(trace, schema.BACKWARD_COMPUTE), BWD + TAIL,
                               atol=0.01)
    np.testing.assert_allclose(first_op_delays(trace), 0.0, atol=0.01)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_gpu_ddp_compute_is_the_compute_kernels(tmp_path: Path, backend: str) -> None:
    folder = write_job(tmp_path / "prof", lambda r: gpu_rank_events(r, backend))
    trace, _ = import_kineto(folder, META, jobs=1)
    np.testing.assert_allclose(durations(trace, schema.BACKWARD_COMPUTE), BWD, atol=0.01)
    np.testing.assert_allclose(durations(trace, schema.FORWARD_COMPUTE), FWD, atol=0.01)
    want = np.zeros((3, DP))
    want[:, LATE_RANK] = LATE
    np.testing.assert_allclose(first_op_delays(trace), want, atol=0.01)
    _check_no_waiter_blamed(trace)


def test_cli_names_the_late_rank_of_a_cpu_ddp_job(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_job(tmp_path / "prof", lambda r: cpu_rank_events(r, "gloo"))
    (tmp_path / "job.yaml").write_text(f"dp_size: {DP}\npp_size: 1\n")
    out = tmp_path / "imported"
    assert main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                 "--out", str(out), "--jobs", "1"]) == 0
    assert "CPU-timed compute on rank(s) 0-1: " in capsys.readouterr().out
    assert main(["analyze", str(out / "trace.parquet"), "--meta", str(out / "meta.yaml"),
                 "--out", str(tmp_path / "a"), "--no-timelines", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["cause"] == "host"
    assert doc["verdict"]["workers"] == [f"{LATE_RANK},0"]
    assert doc["worker_score"]["0,0"] == pytest.approx(1.0, abs=1e-3)


def test_a_bad_cpu_op_read_for_the_compute_time_is_refused(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "prof", lambda r: cpu_rank_events(r, "gloo"))
    path = folder / "rank-0.json"
    doc = json.loads(path.read_text())
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("name") == "aten::relu")
    doc["traceEvents"][i]["dur"] = "12"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=rf"rank-0.json: traceEvents\[{i}\]: field 'dur' must "
                                         r"be a number, got '12'"):
        import_kineto(folder, META, jobs=1)


def test_range_argmax_against_a_loop() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 8, 9, 100):
        values = rng.integers(0, 20, n).astype(float)
        lo = rng.integers(0, n, 200)
        hi = np.minimum(lo + rng.integers(0, n, 200), n - 1)
        got = _range_argmax(values, lo, hi)
        assert ((got >= lo) & (got <= hi)).all()
        assert (values[got] == [values[a: b + 1].max() for a, b in zip(lo, hi, strict=True)]).all()
