"""End-to-end cost of ``stragglers watch``: read, parse, validate, detect, print events.

    python bench/bench_watch.py [--records 200000] [--runs 3]

Writes three JSON-lines inputs into a temporary folder and runs ``stragglers watch FILE
--once`` on each in a fresh process (``--runs`` times, median reported):

* ``iter``: iteration records ``{rank, iter, ts}`` of 8 ranks, one rank slow for a while
  (every record is one detector update);
* ``calls``: call records ``{rank, type, size, ts, group, duration, wait}`` of 4 ranks, 4
  calls per iteration (period tracking; one detector update per 4 records);
* ``ranks``: iteration records of many ranks with 10 records each (memory per rank);
* ``iter-files``: the ``iter`` records of 8 ranks, one JSON-lines file per rank, in a folder
  (``watch FOLDER``: the multi-file path, files followed in turn, job-level grouping across
  files);
* ``megatron-logs``: 8 Megatron-LM training logs (one per rank, ``train_rankN.log``, the
  exact line format of Megatron-LM's ``training_log``) in a folder, ranks 0 and 1 1.4x slow
  for a while.

Columns: records, records per second and microseconds per record of the watch command itself
(timed inside the process, from the first read to the summary; modules imported before), the
CPU time of the process per record over the same span (not counting waits for a core on a
loaded machine), process wall time with interpreter start and imports, and peak RSS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import os, resource, sys, time
from stragglers.cli import main
import stragglers.logs.follow, stragglers.detect.watch  # imported before the clock starts
sys.stdout = open(os.devnull, "w")
t0 = time.perf_counter()
c0 = time.process_time()
rc = main(["watch", sys.argv[1], "--once", "--max-ranks", "100000"])
dt = time.perf_counter() - t0
cpu = time.process_time() - c0
print(dt, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(rc)
"""


def write_iter(path: Path, n_records: int, n_ranks: int = 8, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    n_iters = n_records // n_ranks
    d = 0.5 * np.exp(rng.normal(0, 0.02, (n_iters, n_ranks)))
    d[n_iters // 2 : n_iters // 2 + 2000, 3] *= 1.4
    ts = np.cumsum(d, axis=0)
    with path.open("w") as fh:
        for i in range(n_iters):
            fh.write("".join(f'{{"rank": {r}, "iter": {i}, "ts": {ts[i, r]:.6f}}}\n'
                             for r in range(n_ranks)))
    return n_iters * n_ranks


def write_calls(path: Path, n_records: int, n_ranks: int = 4, seed: int = 1) -> int:
    rng = np.random.default_rng(seed)
    motif = [("reduce_scatter", 4096, 0.10), ("allgather", 2048, 0.05),
             ("allgather", 2048, 0.05), ("allreduce", 8, 0.02)]
    n_iters = n_records // (n_ranks * len(motif))
    start = 0.0
    with path.open("w") as fh:
        for it in range(n_iters):
            slow = n_iters // 2 <= it < n_iters // 2 + 500
            t_iter = (1.4 if slow else 1.0) * float(np.exp(rng.normal(0, 0.01)))
            rows = []
            for r in range(n_ranks):
                g = "dp0" if r < n_ranks // 2 else "dp1"
                for j, (k, s, dur) in enumerate(motif):
                    t = start + 0.2 * j * t_iter + 0.001 * r
                    rows.append(f'{{"rank": {r}, "type": "{k}", "size": {s}, "ts": {t:.6f}, '
                                f'"group": "{g}", "duration": {dur:.6f}, "wait": 0.001}}\n')
            fh.write("".join(rows))
            start += t_iter
    return n_iters * n_ranks * len(motif)


def write_ranks(path: Path, n_records: int, per_rank: int = 10) -> int:
    n_ranks = n_records // per_rank
    with path.open("w") as fh:
        for i in range(per_rank):
            fh.write("".join(f'{{"rank": {r}, "iter": {i}, "duration": '
                             f'{1.0 + 0.01 * ((r + i) % 7):.3f}}}\n' for r in range(n_ranks)))
    return n_ranks * per_rank


def write_iter_files(folder: Path, n_records: int, n_ranks: int = 8, seed: int = 0) -> int:
    """The records of :func:`write_iter`, one file per rank."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    n_iters = n_records // n_ranks
    d = 0.5 * np.exp(rng.normal(0, 0.02, (n_iters, n_ranks)))
    d[n_iters // 2 : n_iters // 2 + 2000, 3] *= 1.4
    ts = np.cumsum(d, axis=0)
    for r in range(n_ranks):
        with (folder / f"rank{r}.jsonl").open("w") as fh:
            fh.write("".join(f'{{"rank": {r}, "iter": {i}, "ts": {ts[i, r]:.6f}}}\n'
                             for i in range(n_iters)))
    return n_iters * n_ranks


def write_megatron_logs(folder: Path, n_records: int, n_ranks: int = 8, seed: int = 2) -> int:
    """One Megatron-LM log per rank: start-up text, then one ``training_log`` line per
    iteration (about 1 s, 1 % jitter; ranks 0 and 1 1.4x slower for 1,000 iterations)."""
    import time

    folder.mkdir()
    rng = np.random.default_rng(seed)
    n_iters = n_records // n_ranks
    d = np.exp(rng.normal(0, 0.01, (n_iters, n_ranks)))
    d[n_iters // 2 : n_iters // 2 + 1000, :2] *= 1.4
    ts = 1.7e9 + np.cumsum(d, axis=0)
    for r in range(n_ranks):
        rows = ["> building GPT model ...\n", "> loading checkpoint ... done\n"]
        for i in range(n_iters):
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts[i, r]))
            ms = 1000.0 * d[i, r]
            rows.append(
                f" [{stamp}] iteration {i + 1:8d}/{n_iters:8d} | consumed samples: "
                f"{(i + 1) * 256:12d} | elapsed time per iteration (ms): {ms:.1f} | "
                f"throughput per GPU (TFLOP/s/GPU): {400000.0 / ms:.1f} | learning rate: "
                "2.999999E-04 | global batch size:   256 | lm loss: 3.123456E+00 | loss "
                "scale: 1.0 | grad norm: 0.812 | number of skipped iterations:   0 | number "
                "of nan iterations:   0 |\n")
        (folder / f"train_rank{r}.log").write_text("".join(rows))
    return n_iters * n_ranks


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir())
    return path.stat().st_size


def run_once(path: Path) -> tuple[float, float, float, float]:
    """(seconds inside watch, CPU seconds inside watch, process wall seconds, peak RSS MiB)
    of one fresh process."""
    import time

    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - t0
    inner, cpu, rss_kib = done.stderr.split()
    return float(inner), float(cpu), wall, int(rss_kib) / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None,
                    help="run only these inputs (iter, calls, ranks, iter-files, megatron-logs)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        cases = []
        for name, writer, note in (("iter", write_iter, "8 ranks"),
                                   ("calls", write_calls, "4 ranks, 4 calls/iteration"),
                                   ("ranks", write_ranks, "10 records per rank"),
                                   ("iter-files", write_iter_files,
                                    "8 ranks, one JSON-lines file each"),
                                   ("megatron-logs", write_megatron_logs,
                                    "8 ranks, one Megatron-LM log each")):
            if args.only and name not in args.only:
                continue
            path = Path(tmp) / (name if name.endswith(("files", "logs")) else f"{name}.jsonl")
            n = writer(path, args.records)
            if name == "ranks":
                note = f"{n // 10:,} ranks, 10 records each"
            runs = [run_once(path) for _ in range(args.runs)]
            inner = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            wall = statistics.median(r[2] for r in runs)
            rss = statistics.median(r[3] for r in runs)
            cases.append((name, note, n, _size(path), inner, cpu, wall, rss))
    print(f"stragglers watch FILE --once, median of {args.runs} runs, "
          f"{os.cpu_count()} CPUs, load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print("| input | records | MB | records/s | µs/record | CPU µs/record | process wall s "
          "| peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, note, n, size, inner, cpu, wall, rss in cases:
        print(f"| {name} ({note}) | {n:,} | {size / 1e6:.1f} | {n / inner:,.0f} | "
              f"{1e6 * inner / n:.1f} | {1e6 * cpu / n:.1f} | {wall:.2f} | {rss:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
