"""``stragglers import kineto`` of a large many-rank job: local processes against Dask.

``generate`` writes a synthetic job's profiler traces (``--dp`` x ``--pp`` ranks, 256 by
default; Kineto's indented layout and event mix: per kernel a ``cpu_op``, a
``cudaLaunchKernel``, the kernel and two flow events, see ``kineto_gen.py``) of about
``--gb`` GB of JSON in all, under ``--data`` (outside the repository: it is large). Every
rank file is written from its own ops, vectorised (no Python loop over events), ranks in
``--jobs`` processes.

``run`` imports the job, timing each run in a fresh process tree and sampling the resident
memory (RSS) of every process of the tree every 0.2 s:

* ``local``: ``stragglers import kineto --jobs N`` (local parse processes, forked);
* ``dask``: a real ``dask scheduler`` and ``dask worker --nworkers N --nthreads 1
  --memory-limit M`` on loopback, then ``stragglers import kineto --scheduler ADDRESS``.

It prints one table row per run (wall time, CPU time of the tree, MB/s of wall time and per
CPU-second, the peak RSS of each parse worker and of the importing process) and checks that
both runs wrote the same ``trace.parquet``.

    python bench/bench_kineto_dask.py generate --data /tmp/k256 --gb 2
    python bench/bench_kineto_dask.py run --data /tmp/k256 --workers 2 --memory-limit 1GiB
    # one large rank file (bounded memory per worker whatever the file size)
    python bench/bench_kineto_dask.py generate --data /tmp/k1 --dp 1 --pp 1 --gb 2
    python bench/bench_kineto_dask.py run --data /tmp/k1 --workers 1 --memory-limit 1GiB
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: The dask command line of this interpreter (no console script needed on PATH).
DASK = [sys.executable, "-m", "dask"]
DATA = Path(tempfile.gettempdir()) / "stragglers-bench-kineto-dask"
_JOB: dict[str, Any] = {}
#: The workers' Dask configuration: no MALLOC_TRIM_THRESHOLD_ (the nannies' default turns
#: off glibc's dynamic mmap threshold: each large array of the scan would be mapped and
#: unmapped afresh; see docs/guides/fleet.md), as bench_fleet.py does.
WORKER_CONFIG = """\
distributed:
  nanny:
    pre-spawn-environ:
      MALLOC_TRIM_THRESHOLD_: null
"""


def _write_one(args: tuple[int, int]) -> int:
    from kineto_gen import write_job_rank

    dp, stage = args
    return write_job_rank(_JOB["folder"], _JOB["ops"], _JOB["dp"], _JOB["world"], dp, stage)


def generate(data: Path, dp: int, pp: int, gb: float, jobs: int) -> None:
    from kineto_gen import job_ops, rank_slice, write_rank

    from stragglers.synth import SynthSpec
    from stragglers.synth.generator import generate as synth
    from stragglers.trace.io import write_meta
    from tests.kineto.chrome import spread_steps

    data.mkdir(parents=True, exist_ok=True)
    ranks = data / "ranks"
    shutil.rmtree(ranks, ignore_errors=True)
    ranks.mkdir()
    t0 = time.perf_counter()
    probe, meta, _ = synth(SynthSpec(dp=dp, pp=pp, microbatches=8, steps=2, seed=1,
                                     jitter=0.01))
    sizes = [write_rank(io.BytesIO(), rank_slice(job_ops(spread_steps(probe)), 0, s), s * dp,
                        meta.world_size) for s in range(pp)]
    per_step = sum(sizes) / 2 * dp  # bytes of one step, all ranks
    steps = max(2, round(gb * 1e9 / per_step))
    trace, meta, _ = synth(SynthSpec(dp=dp, pp=pp, microbatches=8, steps=steps, seed=1,
                                     jitter=0.01))
    write_meta(meta, data / "job.yaml")
    _JOB.update(folder=ranks, ops=job_ops(spread_steps(trace)), dp=dp,
                world=meta.world_size)
    work = [(d, s) for s in range(pp) for d in range(dp)]
    with ProcessPoolExecutor(max(1, min(jobs, len(work)))) as pool:  # forked: _JOB shared
        total = sum(pool.map(_write_one, work))
    print(f"{dp * pp} rank files, {steps} steps, {total / 1e9:.2f} GB of JSON in {ranks} "
          f"({time.perf_counter() - t0:.0f} s)")


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _tree(pid: int) -> list[int]:
    from bench_kineto import _children  # the /proc reader of the local benchmark

    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (from /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError):
        return 0.0


class Sampler:
    """Peak RSS and last CPU time of every process under the given roots."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.peak: dict[int, float] = {}
        self.cpu: dict[int, float] = {}
        self.cmd: dict[int, str] = {}

    def sample(self) -> None:
        for root in self.roots:
            for pid in _tree(root):
                self.peak[pid] = max(self.peak.get(pid, 0.0), _rss_mib(pid))
                cpu = _cpu_s(pid)
                if cpu:
                    self.cpu[pid] = cpu
                if pid not in self.cmd:
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as fh:
                            self.cmd[pid] = fh.read().replace(b"\0", b" ").decode()[:200]
                    except OSError:
                        self.cmd[pid] = "?"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from stragglers.cli import main; "
            "sys.exit(main())", "import", "kineto", *args]


def run_import(cmd: list[str], watch: list[int]) -> tuple[float, Sampler, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sampler = Sampler([proc.pid, *watch])
    cpu0 = {}
    for root in watch:
        for pid in _tree(root):
            cpu0[pid] = _cpu_s(pid)
    while proc.poll() is None:
        sampler.sample()
        time.sleep(0.2)
    dt = time.perf_counter() - t0
    for pid in cpu0:  # long-lived processes (Dask workers): the CPU of this run only
        if pid in sampler.cpu:
            sampler.cpu[pid] -= cpu0[pid]
    out = proc.stdout.read().decode() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"import failed ({proc.returncode}):\n{out}")
    return dt, sampler, proc.pid


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout="60s") as client:
        client.wait_for_workers(n, timeout=180)


def row(kind: str, mb: float, dt: float, s: Sampler, main_pid: int, workers: list[int]
        ) -> str:
    cpu = sum(s.cpu.values())
    peaks = ", ".join(f"{s.peak[p]:,.0f}" for p in workers)
    return (f"| {kind} | {mb / 1e3:,.1f} | {dt:,.0f} | {mb / dt:,.0f} | {cpu:,.0f} | "
            f"{mb / cpu:,.0f} | {peaks} | {s.peak.get(main_pid, 0):,.0f} | "
            f"{os.getloadavg()[0]:.1f} |")


def run(data: Path, workers: int, memory_limit: str, which: list[str]) -> None:
    import pyarrow.parquet as pq

    ranks, meta = data / "ranks", data / "job.yaml"
    mb = sum(p.stat().st_size for p in ranks.iterdir()) / 1e6
    print(f"{len(list(ranks.iterdir()))} rank files, {mb / 1e3:,.2f} GB; load before "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print("| run | GB | wall s | MB/s (wall) | CPU s | MB per CPU-s | peak RSS per parse "
          "worker (MiB) | peak RSS importing process (MiB) | load avg (1 min, at end) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |", flush=True)
    outs = {}
    with tempfile.TemporaryDirectory(prefix="bench-kineto-dask-", dir=data) as tmp:
        if "local" in which:
            out = Path(tmp) / "local"
            dt, s, pid = run_import(_cli(str(ranks), "--meta", str(meta), "--out", str(out),
                                         "--jobs", str(workers)), [])
            pool = [p for p in s.peak if p != pid
                    and "resource_tracker" not in s.cmd.get(p, "")]
            print(row(f"local `--jobs {workers}`", mb, dt, s, pid, pool), flush=True)
            outs["local"] = out
        if "dask" in which:
            port = _free_port()
            address = f"tcp://127.0.0.1:{port}"
            log = open(Path(tmp) / "dask.log", "wb")  # noqa: SIM115
            procs = [subprocess.Popen([*DASK, "scheduler", "--host", "127.0.0.1",
                                       "--port", str(port), "--no-dashboard"],
                                      stdout=log, stderr=log)]
            try:
                conf = Path(tmp) / "dask-config"
                conf.mkdir()
                (conf / "workers.yaml").write_text(WORKER_CONFIG)
                procs.append(subprocess.Popen(
                    [*DASK, "worker", address, "--nworkers", str(workers),
                     "--nthreads", "1", "--memory-limit", memory_limit, "--no-dashboard"],
                    stdout=log, stderr=log, env=dict(os.environ, DASK_CONFIG=str(conf))))
                _wait_workers(address, workers)
                out = Path(tmp) / "dask"
                nanny = procs[1].pid
                dt, s, pid = run_import(_cli(str(ranks), "--meta", str(meta), "--out",
                                             str(out), "--scheduler", address),
                                        [nanny])
                wk = [p for p in s.peak if "spawn_main" in s.cmd.get(p, "")
                      and "resource_tracker" not in s.cmd.get(p, "")]
                print(row(f"Dask, {workers} workers x 1 thread, memory limit {memory_limit}",
                          mb, dt, s, pid, wk), flush=True)
                outs["dask"] = out
            finally:
                for p in reversed(procs):
                    p.terminate()
                    p.wait(timeout=60)
                log.close()
        if len(outs) == 2:
            a = pq.read_table(outs["local"] / "trace.parquet")
            b = pq.read_table(outs["dask"] / "trace.parquet")
            same = a.equals(b)
            raw = (outs["local"] / "trace.parquet").read_bytes() == \
                (outs["dask"] / "trace.parquet").read_bytes()
            print(f"\ntrace.parquet: {a.num_rows:,} rows; local == Dask: row-equal {same}, "
                  f"byte-equal {raw}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--data", type=Path, default=DATA)
    g.add_argument("--dp", type=int, default=64)
    g.add_argument("--pp", type=int, default=4)
    g.add_argument("--gb", type=float, default=2.0, help="GB of JSON in all")
    g.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="rank files written in parallel")
    r = sub.add_parser("run")
    r.add_argument("--data", type=Path, default=DATA)
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--memory-limit", default="1GiB")
    r.add_argument("--only", choices=["local", "dask"], action="append")
    args = ap.parse_args()
    if args.cmd == "generate":
        generate(args.data, args.dp, args.pp, args.gb, args.jobs)
    else:
        run(args.data, args.workers, args.memory_limit, args.only or ["local", "dask"])


if __name__ == "__main__":
    main()
