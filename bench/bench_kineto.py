"""``stragglers import kineto`` throughput and peak memory per trace size.

Writes a synthetic job's profiler traces (dp 2 x pp 2: four rank files, Kineto's event mix:
per kernel a ``cpu_op``, a ``cudaLaunchKernel``, the kernel and its two flow events; each
compute op 24 kernels inside a ``record_function`` range; communication through
``record_param_comms`` and NCCL kernels) of about SIZE MB of JSON in all, then times the
import in a fresh process (``--jobs 2``) and samples the resident memory of its whole process
tree (parent and parse workers; proportional set size, so pages the forked workers share
are counted once) every 20 ms, and the CPU time of the tree. Median of ``--reps`` runs; the
load average at the end of each size is printed (the machine is shared).

    python bench/bench_kineto.py --sizes 256,1024 --reps 3     # table of docs/benchmarks/kineto.md
    python bench/bench_kineto.py --sizes 64 --gzip              # gzipped rank files
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

KERNELS_PER_COMPUTE = 24


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(x) for x in fh.read().split()]
    except OSError:
        pass
    return out


def _pss_kib(pid: int) -> int:
    """Proportional set size: pages shared by the forked workers are counted once."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_pss_kib(pid: int) -> int:
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += _pss_kib(p)
        todo += _children(p)
    return total


def write_rank(fh: IO[bytes], trace: Any, meta: Any, dp: int, stage: int) -> None:
    from stragglers.trace import schema

    rank = dp + meta.dp_size * stage
    head = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank,
                                                     "world_size": meta.world_size}}
    fh.write(json.dumps(head)[:-1].encode() + b', "traceEvents": [\n')
    sel = np.flatnonzero((trace.dp_rank == dp) & (trace.stage == stage))
    order = sel[np.lexsort((trace.optype[sel], trace.start_ts[sel]))]
    corr, first = 0, True
    buf: list[str] = []

    def emit(ev: dict[str, Any]) -> None:
        nonlocal first
        buf.append(("" if first else ",\n") + json.dumps(ev))
        first = False

    for step in np.unique(trace.step[order]):
        ops = order[trace.step[order] == step]
        s0 = trace.start_ts[ops].min() * 1e6 - 200.0
        s1 = (trace.start_ts[ops] + trace.duration[ops]).max() * 1e6 + 1.0
        emit({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1,
              "tid": 1, "ts": s0, "dur": s1 - s0, "args": {"External id": 1}})
        for i in ops:
            optype = schema.OPTYPES[trace.optype[i]]
            start, dur = trace.start_ts[i] * 1e6, trace.duration[i] * 1e6
            compute = optype in schema.COMPUTE_TYPES or optype == schema.OPTIMIZER
            n_k = KERNELS_PER_COMPUTE if compute else 1
            cpu = start - 100.0
            emit({"ph": "X", "cat": "user_annotation", "name":
                  f"{optype} mb={trace.mb_id[i]}" if compute else optype, "pid": 1, "tid": 1,
                  "ts": cpu, "dur": 90.0, "args": {"External id": corr, "Ev Idx": corr}})
            for k in range(n_k):
                corr += 1
                t = cpu + 1 + k * 80.0 / n_k
                emit({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1,
                      "ts": t, "dur": 2.5, "args": {"External id": corr, "Ev Idx": corr,
                                                    "Input Dims": [[8, 512, 1024], [1024, 1024]],
                                                    "Input type": ["float", "float"]}})
                emit({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                      "tid": 1, "ts": t + 0.5, "dur": 1.5,
                      "args": {"External id": corr, "cbid": 211, "correlation": corr}})
                emit({"ph": "X", "cat": "kernel", "name":
                      "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn>"
                      "(Params)", "pid": 0, "tid": 7, "ts": start + k * dur / n_k,
                      "dur": dur / n_k, "args": {"External id": corr, "queued": 0,
                                                 "device": 0, "context": 1, "stream": 7,
                                                 "correlation": corr, "registers per thread":
                                                 128, "shared memory": 49152, "grid": [64, 1, 1],
                                                 "block": [256, 1, 1]}})
                emit({"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": t + 0.5,
                      "cat": "ac2g", "name": "ac2g"})
                emit({"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": start, "cat": "ac2g",
                      "name": "ac2g", "bp": "e"})
            if len(buf) > 4096:
                fh.write("".join(buf).encode())
                buf.clear()
    fh.write("".join(buf).encode())
    fh.write(b'\n], "traceName": "bench"}\n')


def make_traces(folder: Path, size_mb: float, use_gzip: bool) -> Path:
    """Rank files of about ``size_mb`` MB of JSON together; returns the metadata file."""
    from stragglers.synth import SynthSpec
    from stragglers.synth.generator import generate
    from stragglers.trace.io import write_meta

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.kineto.chrome import spread_steps

    probe_spec = SynthSpec(dp=2, pp=2, microbatches=8, steps=2, seed=1, jitter=0.01)
    trace, meta, _ = generate(probe_spec)
    probe = folder / "probe.json"
    with probe.open("wb") as fh:
        write_rank(fh, spread_steps(trace), meta, 0, 0)
    per_step = probe.stat().st_size / 2 * meta.n_workers
    probe.unlink()
    steps = max(2, round(size_mb * 1e6 / per_step))
    spec = SynthSpec(dp=2, pp=2, microbatches=8, steps=steps, seed=1, jitter=0.01)
    trace, meta, _ = generate(spec)
    trace = spread_steps(trace)
    ranks = folder / "ranks"
    ranks.mkdir()
    for stage in range(meta.pp_size):
        for dp in range(meta.dp_size):
            name = ranks / f"rank-{dp + meta.dp_size * stage}.json"
            if use_gzip:
                with gzip.open(str(name) + ".gz", "wb", compresslevel=1) as fh:
                    write_rank(fh, trace, meta, dp, stage)  # type: ignore[arg-type]
            else:
                with name.open("wb") as fh:
                    write_rank(fh, trace, meta, dp, stage)
    return write_meta(meta, folder / "job.yaml")


def json_bytes(ranks: Path) -> int:
    total = 0
    for p in ranks.iterdir():
        if p.name.endswith(".gz"):
            with gzip.open(p, "rb") as fh:
                while chunk := fh.read(1 << 24):
                    total += len(chunk)
        else:
            total += p.stat().st_size
    return total


def run_import(ranks: Path, meta: Path, out: Path, jobs: int) -> tuple[float, float, float]:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-c", "import sys; from stragglers.cli import main; sys.exit(main())",
           "import", "kineto", str(ranks), "--meta",
           str(meta), "--out", str(out), "--jobs", str(jobs)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_pss_kib(proc.pid))
        time.sleep(0.02)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.read().decode() if proc.stderr else "import failed")
    return dt, peak / 1024, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,1024", help="total JSON MB, comma-separated")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--gzip", action="store_true", help="gzipped rank files")
    args = ap.parse_args()
    print("| JSON MB | files | wall s | MB/s (wall) | CPU s | MB per CPU-s | peak MiB (PSS, all "
          "processes) | peak / JSON size | load avg |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in [float(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-kineto-") as tmp:
            folder = Path(tmp)
            meta = make_traces(folder, size, args.gzip)
            ranks = folder / "ranks"
            mb = json_bytes(ranks) / 1e6
            runs = [run_import(ranks, meta, folder / "out", args.jobs) for _ in range(args.reps)]
            t = statistics.median(r[0] for r in runs)
            peak = statistics.median(r[1] for r in runs)
            cpu = statistics.median(r[2] for r in runs)
            kind = " gz" if args.gzip else ""
            print(f"| {mb:,.0f}{kind} | {len(list(ranks.iterdir()))} | {t:.1f} | {mb / t:.0f} | "
                  f"{cpu:.1f} | {mb / cpu:.0f} | {peak:,.0f} | {peak * 1.048576 / mb:.2f} | "
                  f"{os.getloadavg()[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
