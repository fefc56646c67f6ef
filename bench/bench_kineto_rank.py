"""Speed and peak memory of one rank file's task (what a parse process or a Dask worker
runs for one file: ``read_rank_file`` then ``rank_ops``), each run in a fresh process.

    python bench/bench_kineto_rank.py FILE [FILE ...] [--reps 3] [--src SRC ...]

For each file and each source tree (``--src``: a ``src`` folder, e.g. of a ``git worktree``
of an older commit, to compare before and after; default: this checkout's), runs the task
``--reps`` times, alternating the trees, and prints the best CPU time (user + system of
the child), MB of JSON per CPU-second, the child's peak resident memory (``ru_maxrss``)
and the load average when the runs of that file ended. Files are generated with
``bench/bench_kineto_dask.py generate --dp 1 --pp 1 --gb G`` (one kernel-dense rank file).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = """
import sys
from stragglers.kineto import load_patterns
from stragglers.kineto.rankops import rank_ops
from stragglers.kineto.reader import read_rank_file
ops = rank_ops(read_rank_file(sys.argv[1], load_patterns(None)))
print(ops.start.size)
"""


def run(path: Path, src: Path) -> tuple[float, float, float, int]:
    """CPU seconds, wall seconds, peak RSS (MiB) and the op count of one task."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", TASK, str(path)], env=env, check=True,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, after.ru_maxrss / 1024, int(done.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--src", type=Path, action="append")
    args = ap.parse_args()
    srcs = args.src or [ROOT / "src"]
    print("| file | JSON MB | src | best CPU s | MB per CPU-s | peak RSS MiB | ops | load avg |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for path in args.files:
        mb = path.stat().st_size / 1e6
        best: dict[Path, tuple[float, float, int]] = {}
        for _ in range(args.reps):
            for src in srcs:  # alternating: the machine's load weighs on both alike
                # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: one process per
                # measurement keeps it that of this run
                out = subprocess.run(
                    [sys.executable, __file__, "--one", str(path), str(src)],
                    check=True, capture_output=True, text=True).stdout.split()
                cpu, rss, n_ops = float(out[0]), float(out[2]), int(out[3])
                old = best.get(src)
                best[src] = (min(cpu, old[0]) if old else cpu,
                             max(rss, old[1]) if old else rss, n_ops)
        load = os.getloadavg()[0]
        for src in srcs:
            cpu, rss, n_ops = best[src]
            print(f"| {path.name} | {mb:,.0f} | {src} | {cpu:.2f} | {mb / cpu:.0f} | "
                  f"{rss:.0f} | {n_ops:,} | {load:.1f} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        cpu, wall, rss, n = run(Path(sys.argv[2]), Path(sys.argv[3]))
        print(cpu, wall, rss, n)
    else:
        main()
