"""Solve time and peak memory of the exact S2 micro-batch assignment (docs/benchmarks/mitigate.md).

For each number of DP groups D: times drawn uniformly in [0.5, 2] s per micro-batch with one
group slowed x3 (seed 0), M = 8 D micro-batches; the median of REPEATS solves (the solve
alone, as ``solve_s`` reports it; and the whole call with its input checks), and the peak
of memory allocated during one solve (tracemalloc, numpy's buffers included). Falcon's
Table 6 (cvxpy QP) is printed beside it.

    python bench/bench_mitigate.py          # a few seconds on 2 cores
"""

from __future__ import annotations

import statistics
import time
import tracemalloc

import numpy as np

from stragglers.mitigate.microbatch import solve_microbatches

SIZES = (16, 32, 64, 128, 256, 512, 4096, 16384, 131072)
FALCON_TABLE6 = {16: 0.01, 32: 0.01, 64: 0.01, 128: 0.11, 256: 6.78, 512: 35.93}
REPEATS = 21


def main() -> None:
    print("| DP groups | M | solve (median) | call (median) | peak memory | Falcon Table 6 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for d in SIZES:
        rng = np.random.default_rng(0)
        t = rng.uniform(0.5, 2.0, d)
        t[d // 3] *= 3.0
        m = 8 * d
        solves, calls = [], []
        for _ in range(REPEATS):
            start = time.perf_counter()
            res = solve_microbatches(t, m)
            calls.append(time.perf_counter() - start)
            solves.append(res.solve_s)
        tracemalloc.start()
        solve_microbatches(t, m)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        falcon = f"{FALCON_TABLE6[d]:.2f} s" if d in FALCON_TABLE6 else "-"
        print(f"| {d:,} | {m:,} | {statistics.median(solves) * 1e3:.2f} ms | "
              f"{statistics.median(calls) * 1e3:.2f} ms | {peak / 2**20:.2f} MiB | {falcon} |")


if __name__ == "__main__":
    main()
