"""Speed and peak memory of one rank file's task (what a parse process or a Dask worker
runs for one file: ``read_rank_file`` then ``rank_ops``), each run in a fresh process.

    python bench/bench_kineto_rank.py FILE [FILE ...] [--reps 3] [--src SRC ...]
        [--budget BYTES ...] [--partial]

For each file and each source tree (``--src``: a ``src`` folder, e.g. of a ``git worktree``
of an older commit, to compare before and after; default: this checkout's) and each memory
budget (``--budget``: ``$STRAGGLERS_KINETO_MEMORY`` of the task, e.g. one the file fits, for
one pass, and a smaller one, for windows; default: the environment's), runs the task
``--reps`` times, alternating the trees and budgets, and prints the best CPU time (user +
system of the child), MB of JSON per CPU-second, the child's peak resident memory
(``ru_maxrss``) and the load average when the runs of that file ended; then checks that
every tree and budget gave the same ops, array by array (byte-equal; the arrays are saved
by each run under a temporary folder). ``--partial``: the task of the partial import
(``read_partial_rank``: the ops and the per-step table, whose arrays are compared too).
Files are generated with ``bench/bench_kineto_dask.py generate --dp 1 --pp 1 --gb G`` (one
kernel-dense rank file).
"""

from __future__ import annotations

import argparse
import gzip
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TASK = """
import sys
import numpy as np
from stragglers.kineto import load_patterns
from stragglers.kineto.rankops import rank_ops
from stragglers.kineto.reader import read_rank_file
try:  # in windows of whole steps past $STRAGGLERS_KINETO_MEMORY bytes (where it exists)
    from stragglers.kineto.windowed import read_rank_ops
    ops = read_rank_ops(sys.argv[1], load_patterns(None))
except ImportError:
    ops = rank_ops(read_rank_file(sys.argv[1], load_patterns(None)))
np.savez(sys.argv[2], **{k: v for k, v in vars(ops).items() if isinstance(v, np.ndarray)})
print(ops.start.size)
"""
#: The partial import's task: the ops and the per-step table of one rank file.
PARTIAL_TASK = """
import sys
import numpy as np
from stragglers.kineto import load_patterns
from stragglers.kineto.partial import read_partial_rank
pr = read_partial_rank(sys.argv[1], load_patterns(None))
arrays = {k: v for k, v in vars(pr.ops).items() if isinstance(v, np.ndarray)}
arrays |= {"table_" + k: v for k, v in vars(pr.table).items() if isinstance(v, np.ndarray)}
np.savez(sys.argv[2], **arrays)
print(pr.ops.start.size)
"""


def run(path: Path, src: Path, out: Path, budget: str = "",
        partial: bool = False) -> tuple[float, float, float, int]:
    """CPU seconds, wall seconds, peak RSS (MiB) and the op count of one task (its ops'
    arrays saved to ``out``; ``budget``: ``$STRAGGLERS_KINETO_MEMORY``, if not empty)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    if budget:
        env["STRAGGLERS_KINETO_MEMORY"] = budget
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PARTIAL_TASK if partial else TASK,
                           str(path), str(out)], env=env,
                          check=True, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, after.ru_maxrss / 1024, int(done.stdout.split()[-1])


def json_bytes(path: Path) -> int:
    """Bytes of JSON in ``path`` (uncompressed, for a gzipped file)."""
    if path.suffix != ".gz":
        return path.stat().st_size
    total = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            total += len(chunk)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--src", type=Path, action="append")
    ap.add_argument("--budget", action="append")
    ap.add_argument("--partial", action="store_true")
    args = ap.parse_args()
    runs = [(src, budget) for src in args.src or [ROOT / "src"]
            for budget in args.budget or [""]]
    print("| file | JSON MB | src | budget | best CPU s | MB per CPU-s | peak RSS MiB | ops | "
          "load avg |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    tmp = Path(tempfile.mkdtemp(prefix="bench_kineto_rank_"))
    for path in args.files:
        mb = json_bytes(path) / 1e6
        best: dict[int, tuple[float, float, int]] = {}
        for _ in range(args.reps):
            for k, (src, budget) in enumerate(runs):  # alternating: the load weighs alike
                # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: one process per
                # measurement keeps it that of this run
                out = subprocess.run(
                    [sys.executable, __file__, "--one", str(path), str(src),
                     str(tmp / f"ops{k}.npz"), budget, "partial" if args.partial else ""],
                    check=True, capture_output=True, text=True).stdout.split()
                cpu, rss, n_ops = float(out[0]), float(out[2]), int(out[3])
                old = best.get(k)
                best[k] = (min(cpu, old[0]) if old else cpu,
                           max(rss, old[1]) if old else rss, n_ops)
        load = os.getloadavg()[0]
        for k, (src, budget) in enumerate(runs):
            cpu, rss, n_ops = best[k]
            print(f"| {path.name} | {mb:,.0f} | {src} | {budget or '-'} | {cpu:.2f} | "
                  f"{mb / cpu:.0f} | {rss:.0f} | {n_ops:,} | {load:.1f} |", flush=True)
        first = np.load(tmp / "ops0.npz")
        for k in range(1, len(runs)):
            other = np.load(tmp / f"ops{k}.npz")
            same = sorted(first.files) == sorted(other.files) and all(
                first[f].dtype == other[f].dtype and first[f].tobytes() == other[f].tobytes()
                for f in first.files)
            if not same:
                raise SystemExit(f"{path}: the arrays of {runs[k]} differ from those of "
                                 f"{runs[0]}")
    shutil.rmtree(tmp)
    if len(runs) > 1:
        print("every tree and budget gave the same arrays (byte-equal)")


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--one":
        cpu, wall, rss, n = run(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]),
                                sys.argv[5], sys.argv[6] == "partial")
        print(cpu, wall, rss, n)
    else:
        main()
