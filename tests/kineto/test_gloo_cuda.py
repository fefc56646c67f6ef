"""Collectives without NCCL kernels on CUDA tensors (gloo) are timed on the GPU clock from
their data (issue 30): they arrive when their copies to the host have ended and end when the
copies back have.

Hand-built traces of a dp-2 DDP job over gloo with CUDA tensors, as torch.profiler (PyTorch
2.11, Kineto) writes them, checked against two real traces of ``bench/bench_gpu_host.py``
(profile mode, one H200 shared by both ranks). Rank 1's data loader takes ``LATE`` longer
before each step's forward (unrecorded). Per step: the forward kernels (``FWD``), then the
backward kernels (``BWD``) launched by the autograd thread; the CPU runs far ahead of the GPU.
DDP launches each gradient bucket's all-reduce from the autograd thread as soon as the
backward is *launched*: ``c10d::allreduce_`` (a CPU op) launches a ``cudaMemcpyAsync`` of
the bucket to the host (``Memcpy DtoH``) on a fresh stream of the pool, which runs on the
GPU once the gradients are computed; a gloo worker thread runs the collective in a
``gloo:all_reduce`` range that opens at once, waits for that copy
(``cudaStreamSynchronize``), runs the ring on the CPU (waiting for the late rank), and
copies the result back to the GPU on the same stream (``Memcpy HtoD``, launched inside the
range); then DDP copies it into ``.grad`` (``Memcpy DtoD``). Two buckets: the first ready
halfway through the backward kernels, the second at their end.

Known answer: each all-reduce arrives when its bucket's copy to the host ends (the rank's
gradients are ready: ``READY`` + ``COPY`` on the rank's GPU clock) and ends when its copy
back ends (``XFER`` after the late rank's copy ended); the late rank's transfer is short, the
waiter's holds the wait. The step is ``LATE`` longer than its GPU work: the simulation
discrepancy is about (``LATE`` + ``FWD`` + ``BWD``) / (``FWD`` + ``BWD``), the launch
attribution names DP rank 1, and the verdict is ``host`` on worker 1,0.

Before the change the all-reduces were timed from the CPU range of ``gloo:all_reduce``: it
opens long before the gradients exist (on the late rank too), so the late rank's "transfer"
held the whole of its forward and backward, the late start vanished in it, and the real
traces gave discrepancy 0.95, S 1.003, verdict ``none``. The GPU gloo guard of
``test_comm_in_compute.py`` did not see it: it checks compute, first-op delays and the
waiter's S_w only (1.0 in any job whose steps are identical), never the collective's time,
the discrepancy or the launch attribution; and its copies are all named ``DtoD``.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stragglers.analysis import analyze_table
from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.kineto import import_kineto
from stragglers.kineto.patterns import default_patterns
from stragglers.kineto.rankops import rank_ops
from stragglers.kineto.reader import COMM_CODE, read_rank_file
from stragglers.trace import build_table, schema
from stragglers.trace.io import JobMeta, TraceColumns
from tests.kineto.test_all_to_all_import import AUTOGRAD, MAIN, Events

DP = 2
LATE_RANK = 1
LATE = 40_000.0  # us: rank 1's slow data loader, per step
FWD, BWD = 12_000.0, 20_000.0  # GPU time of the forward and backward kernels
COPY, XFER = 100.0, 2_000.0  # a copy to or from the host; the ring on the CPU
CALL = 200.0  # c10d::allreduce_ on the autograd thread
STEP = 100_000.0
N_STEPS = 3
GLOO = (300, 301)  # gloo worker threads (one per bucket, as DDP's two buckets ran)
META = JobMeta(dp_size=DP, pp_size=1, world_size=DP, trial_name="ddp-gloo-cuda")


def _thread(e: Events, tid: int, name: str) -> None:
    e.events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid,
                     "args": {"name": name}})


def copy(e: Events, kind: str, launch: float, start: float, tid: int, stream: int) -> None:
    """A ``cudaMemcpyAsync`` on thread ``tid`` and its copy on the GPU (``DtoH``, ``HtoD``
    or ``DtoD``), as Kineto writes them."""
    names = {"DtoH": "Memcpy DtoH (Device -> Pinned)", "HtoD": "Memcpy HtoD (Pinned -> Device)",
             "DtoD": "Memcpy DtoD (Device -> Device)"}
    e.corr += 1
    e.cpu("cuda_runtime", "cudaMemcpyAsync", launch, 10, tid, {"correlation": e.corr})
    e.events.append({"ph": "X", "cat": "gpu_memcpy", "name": names[kind], "pid": 0,
                     "tid": stream, "ts": start, "dur": COPY,
                     "args": {"correlation": e.corr, "stream": stream, "device": 0}})


def ready(rank: int, step: int, bucket: int) -> float:
    """The GPU time at which the bucket's gradients are computed on ``rank``."""
    o = 1_000_000.0 + STEP * step
    mine = LATE if rank == LATE_RANK else 0.0
    return o + 10 + mine + 100 + FWD + BWD * (bucket + 1) / 2


def done(step: int, bucket: int) -> float:
    """The CPU time at which the ring ends (on both ranks): XFER after the late rank's
    copy to the host ended."""
    return ready(LATE_RANK, step, bucket) + COPY + XFER


def stream_of(step: int, bucket: int, pool: int) -> int:
    """gloo takes a stream of the pool per collective (round robin over ``pool``)."""
    return 60 + 4 * ((2 * step + bucket) % pool)


def rank_events(rank: int, collective: str = "all_reduce", pool: int = 32,
                item: bool = False) -> list[dict[str, Any]]:
    """One rank's events. ``pool``: the streams gloo takes in turn (2: every step reuses
    the streams of the step before); ``item``: the training thread also copies the loss to
    the host on the compute stream (``loss.item()``), before the backward."""
    e = Events()
    for i, tid in enumerate(GLOO):
        _thread(e, tid, f"thread {tid} (pt_gloo_runloop{i})")
    mine = LATE if rank == LATE_RANK else 0.0
    for step in range(N_STEPS):
        o = 1_000_000.0 + STEP * step
        e.cpu("user_annotation", f"ProfilerStep#{step}", o, STEP - 1_000)
        f = o + 10 + mine  # after the data
        e.cpu("user_annotation", "## forward ##", f, 400)
        e.kernel("gemm_fwd", f + 20, f + 100, f + 100 + FWD)
        b = f + 500
        g = f + 100 + FWD  # the backward kernels run after the forward ones
        if item:
            copy(e, "DtoH", f + 450, g - COPY - 1, MAIN, 7)
        for k in range(2):
            e.kernel(f"gemm_bwd_{k}", b + 20 + 1000 * k, g + BWD * k / 2, g + BWD * (k + 1) / 2,
                     tid=AUTOGRAD)
            launch = b + 500 + 1000 * k  # DDP's hook: the bucket is launched on the CPU
            s = stream_of(step, k, pool)
            e.cpu("cpu_op", "c10d::allreduce_", launch, CALL, AUTOGRAD)
            copy(e, "DtoH", launch + 50, ready(rank, step, k), AUTOGRAD, s)
            gt = GLOO[k]
            end = done(step, k) + 100
            e.cpu("user_annotation", f"gloo:{collective}", launch + CALL + 10,
                  end - (launch + CALL + 10), gt)
            e.corr += 1  # the wait for the copy to the host (no GPU event)
            e.cpu("cuda_runtime", "cudaStreamSynchronize", launch + CALL + 20,
                  ready(rank, step, k) + COPY + 5 - (launch + CALL + 20), gt,
                  {"correlation": e.corr})
            copy(e, "HtoD", done(step, k) + 10, done(step, k) + 20, gt, s)
            copy(e, "DtoD", done(step, k) + 150, done(step, k) + 200, AUTOGRAD, 7)  # .grad
        e.cpu("user_annotation", "## backward ##", b, done(step, 1) + 300 - b)
        opt = done(step, 1) + 310
        e.cpu("user_annotation", "Optimizer.step#SGD.step", opt, 50)
        e.kernel("sgd", opt + 10, opt + 60, opt + 260)
    return e.events


def write_job(folder: Path, **kw: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(DP):
        doc = {"schemaVersion": 1,
               "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": DP},
               "traceEvents": rank_events(rank, **kw)}
        (folder / f"rank-{rank}.json").write_text(json.dumps(doc))
    return folder


def op_times(trace: TraceColumns, optype: str) -> tuple[np.ndarray, np.ndarray]:
    """Per (step, rank, seq_id): the op's start and end in us."""
    sel = trace.optype == schema.OPTYPE_CODE[optype]
    n = int(trace.seq_id[sel].max()) + 1
    start, end = np.full((N_STEPS, DP, n), np.nan), np.full((N_STEPS, DP, n), np.nan)
    at = (trace.step[sel], trace.rank[sel], trace.seq_id[sel])
    start[at] = trace.start_ts[sel] * 1e6
    end[at] = (trace.start_ts[sel] + trace.duration[sel]) * 1e6
    return start, end


def expected_collectives() -> tuple[np.ndarray, np.ndarray]:
    """Per (step, rank, bucket): the end of the copy to the host (arrival), the end of the
    copy back (end)."""
    arrive = np.array([[[ready(r, s, k) + COPY for k in range(2)] for r in range(DP)]
                       for s in range(N_STEPS)])
    end = np.array([[[done(s, k) + 20 + COPY for k in range(2)] for r in range(DP)]
                    for s in range(N_STEPS)])
    return arrive, end


@pytest.mark.parametrize(("pool", "item"), [(32, False), (2, False), (2, True)])
def test_ddp_over_gloo_cuda_all_reduce_is_timed_by_its_copies(tmp_path: Path, pool: int,
                                                              item: bool) -> None:
    folder = write_job(tmp_path / "prof", pool=pool, item=item)
    trace, report = import_kineto(folder, META, jobs=1)
    start, end = op_times(trace, schema.GRADS_REDUCE_SCATTER)
    arrive, finish = expected_collectives()
    np.testing.assert_allclose(start, arrive, atol=0.01, rtol=0)
    np.testing.assert_allclose(end, finish, atol=0.01, rtol=0)
    # compute is the kernels' span on both ranks: the wait is in the all-reduce
    for optype, want in ((schema.FORWARD_COMPUTE, FWD), (schema.BACKWARD_COMPUTE, BWD)):
        s, e = op_times(trace, optype)
        np.testing.assert_allclose(e - s, want, atol=0.01, rtol=0)
    assert report.copy_timed == {0: 2 * N_STEPS, 1: 2 * N_STEPS}
    assert any(line.startswith("communication without NCCL kernels on rank(s) 0-1: 12 calls "
                               "timed on the GPU") for line in report.lines())
    result = analyze_table(build_table(trace, META)).result
    # the step is LATE longer than its GPU work: rank 1's late start is a launch delay
    step_gpu = FWD + BWD + COPY + XFER
    assert result.metrics.discrepancy > 0.9 * (LATE + step_gpu) / step_gpu
    launch = result.metrics.launch
    assert launch is not None
    by_dp = launch.dp.mean(axis=1)
    assert int(np.argmax(by_dp)) == LATE_RANK
    assert by_dp[LATE_RANK] / launch.nodelay.mean() > 1.5
    assert by_dp[1 - LATE_RANK] / launch.nodelay.mean() == pytest.approx(1.0, abs=0.01)
    assert result.verdict.cause == "host"
    assert [tuple(w) for w in result.verdict.workers] == [(LATE_RANK, 0)]
    sw = result.metrics.worker_slowdown[:, 0]
    np.testing.assert_allclose(sw[1 - LATE_RANK], 1.0, atol=1e-3)


def test_cli_names_the_late_rank_of_a_gloo_cuda_job(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_job(tmp_path / "prof")
    (tmp_path / "job.yaml").write_text(f"dp_size: {DP}\npp_size: 1\n")
    out = tmp_path / "imported"
    assert main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                 "--out", str(out), "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    assert main(["analyze", str(out / "trace.parquet"), "--meta", str(out / "meta.yaml"),
                 "--out", str(tmp_path / "a"), "--no-timelines", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["cause"] == "host"  # before: none (discrepancy 0.85)
    assert doc["verdict"]["workers"] == [f"{LATE_RANK},0"]
    assert "12 calls timed on the GPU by their device<->host copies" in printed
    assert "not used: 12 gpu_memcpy events other than device<->host copies" in printed


def _one_call(tmp_path: Path, *, dtoh: float | None, htod: float | None,
              name: str = "gloo:broadcast", other_stream: bool = False) -> tuple[float, float]:
    """One rank, one step, one gloo call [1000, 9000] on a worker thread (CPU), launched by
    the training thread at 900; its copy to the host (launched at 950 by the caller, ending
    at ``dtoh``) and back (launched inside the call, ending at ``htod``) on stream 60 (the
    copy to the host on stream 64 with ``other_stream``), None: no such copy. Returns the
    communication op's start and end."""
    e = Events()
    o = 0.0
    e.cpu("user_annotation", "ProfilerStep#1", o, 20_000)
    e.cpu("user_annotation", "## forward ##", o + 10, 100)
    e.kernel("gemm", o + 20, o + 100, o + 500)
    e.cpu("cpu_op", "c10d::broadcast_", o + 900, 80)
    if dtoh is not None:
        copy(e, "DtoH", o + 950, dtoh - COPY, MAIN, 64 if other_stream else 60)
    e.cpu("user_annotation", name, o + 1000, 8000, GLOO[0])
    if htod is not None:
        copy(e, "HtoD", o + 8500, htod - COPY, GLOO[0], 60)
    e.cpu("user_annotation", "Optimizer.step#SGD.step", o + 10_000, 50)
    e.kernel("sgd", o + 10_010, o + 12_000, o + 12_100)
    path = tmp_path / "rank.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1},
                                "traceEvents": e.events}))
    ops = rank_ops(read_rank_file(path, default_patterns()))
    comm = np.flatnonzero(ops.comm >= 0)
    assert comm.size == 1
    return float(ops.start[comm[0]]), float(ops.end[comm[0]])


@pytest.mark.parametrize("name", ["gloo:broadcast", "gloo:all_gather", "gloo:reduce_scatter",
                                  "gloo:all_to_all", "gloo:all_reduce"])
def test_any_gloo_collective_on_cuda_tensors_is_timed_by_its_copies(tmp_path: Path,
                                                                   name: str) -> None:
    # the GPU behind the CPU: the data reaches the host at 5000, inside the call
    assert _one_call(tmp_path, dtoh=5000.0, htod=8700.0, name=name) == (5000.0, 8700.0)
    # the GPU ahead: the data is on the host before the call opens; it arrives with the call
    assert _one_call(tmp_path, dtoh=980.0, htod=8700.0, name=name) == (1000.0, 8700.0)


def test_copies_missing_on_one_side(tmp_path: Path) -> None:
    # a broadcast's receiver copies nothing to the host: it arrives with its call
    assert _one_call(tmp_path, dtoh=None, htod=8700.0) == (1000.0, 8700.0)
    # no copy back inside the call: its CPU end is kept
    assert _one_call(tmp_path, dtoh=5000.0, htod=None) == (1000.0, 9000.0)
    # the copy to the host on another stream than the call's own copies is not its data
    assert _one_call(tmp_path, dtoh=5000.0, htod=8700.0, other_stream=True) == (1000.0, 8700.0)
    # no copy at all (CPU tensors): the CPU range, as before
    assert _one_call(tmp_path, dtoh=None, htod=None) == (1000.0, 9000.0)


def test_nccl_calls_keep_their_kernels(tmp_path: Path) -> None:
    """A call with an NCCL kernel is timed by its kernel, whatever copies it launches."""
    e = Events()
    e.cpu("user_annotation", "ProfilerStep#1", 0, 20_000)
    e.cpu("user_annotation", "## forward ##", 10, 100)
    e.kernel("gemm", 20, 100, 500)
    copy(e, "DtoH", 900, 4000, MAIN, 60)
    e.cpu("cpu_op", "record_param_comms", 1000, 100,
          args={"Collective name": "allreduce", "Process Group Ranks": "[0]", "Group size": 1})
    copy(e, "HtoD", 1010, 8000, MAIN, 60)
    e.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
             1050, 6000, 7000, stream=21)
    e.cpu("user_annotation", "Optimizer.step#SGD.step", 10_000, 50)
    e.kernel("sgd", 10_010, 12_000, 12_100)
    path = tmp_path / "rank.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1},
                                "traceEvents": e.events}))
    ops = rank_ops(read_rank_file(path, default_patterns()))
    comm = np.flatnonzero(ops.comm == COMM_CODE["allreduce"])
    assert (ops.start[comm].tolist(), ops.end[comm].tolist()) == ([6000.0], [7000.0])
    assert ops.copy_timed == 0


def test_a_bad_memory_copy_is_refused(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "prof")
    path = folder / "rank-1.json"
    doc = json.loads(path.read_text())
    i = next(i for i, ev in enumerate(doc["traceEvents"]) if ev.get("cat") == "gpu_memcpy")
    doc["traceEvents"][i]["args"]["stream"] = "60"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=rf"rank-1.json: traceEvents\[{i}\]: field "
                                         r"'args.stream' must be an integer, got '60'"):
        import_kineto(folder, META, jobs=1)


# -- the real traces (an H200, PyTorch 2.11): not in the repository, nor in CI ------------
GPU_RUN = Path(os.environ.get("STRAGGLERS_GPU_RUN", "/work/runs/gpu1/keep"))
GPU_FILES = ("gpu-rank0.json.gz", "gpu-rank1.json.gz")


@pytest.fixture(scope="module")
def gpu_run() -> Path:
    if not all((GPU_RUN / f).exists() for f in GPU_FILES):
        pytest.skip(f"real gloo-on-CUDA traces not found at {GPU_RUN} (a local GPU run of "
                    "bench/bench_gpu_host.py; never in the repository or in CI; "
                    "STRAGGLERS_GPU_RUN points elsewhere)")
    return GPU_RUN


def _raw_gloo_calls(path: Path) -> tuple[list[float], list[float]]:
    """From the raw JSON (plain ``json``): per ``gloo:all_reduce`` range, the end of the last
    copy to the host on its stream before it (the stream of its ``gpu_user_annotation``,
    same External id) and the end of that GPU-side range; sorted by arrival."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    gpu_ann = {e["args"]["External id"]: e for e in events
               if e.get("cat") == "gpu_user_annotation" and e["name"] == "gloo:all_reduce"}
    dtoh = [e for e in events if e.get("cat") == "gpu_memcpy" and "DtoH" in e["name"]]
    arrive, end = [], []
    for e in events:
        if e.get("cat") == "user_annotation" and e["name"] == "gloo:all_reduce":
            g = gpu_ann[e["args"]["External id"]]
            before = [c["ts"] + c["dur"] for c in dtoh
                      if c["args"]["stream"] == g["tid"] and c["ts"] < g["ts"]]
            arrive.append(max(max(before), e["ts"]))
            end.append(g["ts"] + g["dur"])
    order = np.argsort(arrive)
    return [arrive[i] for i in order], [end[i] for i in order]


def test_real_gloo_cuda_job_with_a_late_rank(gpu_run: Path, tmp_path: Path) -> None:
    """The two real files: rank 1's loader sleeps 40 ms per step (6 steps of ~80 ms)."""
    meta = JobMeta(dp_size=2, pp_size=1, world_size=2, trial_name="x")
    trace, report = import_kineto(gpu_run, meta, jobs=1)
    rs = trace.optype == schema.OPTYPE_CODE[schema.GRADS_REDUCE_SCATTER]
    for rank, name in enumerate(GPU_FILES):
        arrive, end = _raw_gloo_calls(gpu_run / name)
        mine = rs & (trace.rank == rank)
        o = np.argsort(trace.start_ts[mine])
        np.testing.assert_allclose(trace.start_ts[mine][o] * 1e6, arrive, atol=0.01, rtol=0)
        np.testing.assert_allclose((trace.start_ts[mine] + trace.duration[mine])[o] * 1e6,
                                   end, atol=0.01, rtol=0)
    # rank 0 waits in the all-reduce, not in compute
    bw = trace.optype == schema.OPTYPE_CODE[schema.BACKWARD_COMPUTE]
    b0, b1 = (trace.duration[bw & (trace.rank == r)].mean() for r in range(2))
    assert abs(b0 - b1) < 0.1 * b1
    w0, w1 = (trace.duration[rs & (trace.rank == r)].sum() for r in range(2))
    assert w0 - w1 > 6 * 2 * 0.030  # two buckets per step, each waiting > 30 ms
    result = analyze_table(build_table(trace, meta)).result
    assert result.metrics.discrepancy > 1.5
    launch = result.metrics.launch
    assert launch is not None and int(np.argmax(launch.dp.mean(axis=1))) == 1
    assert result.verdict.cause == "host"
    assert [tuple(w) for w in result.verdict.workers] == [(1, 0)]
    assert report.copy_timed == {0: 12, 1: 12}
