"""The memory one rank file's ops need beyond its kept events (``rank_ops``): in the usual
file (launches in correlation order, every kernel with its launch) the launch and kernel
columns are used as they are, not copied. Measured with tracemalloc (bytes allocated,
deterministic), on a trace of 40,000 kernels built step by step: ``rank_ops`` peaks at
2.85 times the bytes of the kept columns, 3.54 when it copied them (the bound is between)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np

from stragglers.kineto import load_patterns
from stragglers.kineto.rankops import rank_ops
from stragglers.kineto.reader import read_rank_file
from tests.kineto.test_bounded_memory import _step

STEPS = 20_000  # two kernels each
BOUND = 3.2


def test_rank_ops_does_not_copy_the_kernel_columns(tmp_path: Path) -> None:
    body = b",\n".join(_step(i) for i in range(STEPS))
    path = tmp_path / "rank-0.json"
    path.write_bytes(b'{"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": ['
                     + body + b"]}")
    ev = read_rank_file(path, load_patterns(None))
    kept = sum(v.nbytes for v in vars(ev).values() if isinstance(v, np.ndarray))
    tracemalloc.start()
    try:
        ops = rank_ops(ev)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ev.k_ts.size == 2 * STEPS and ops.start.size == 2 * STEPS  # forward + optimizer
    assert np.array_equal(ops.end - ops.start, np.tile([50.0, 20.0], STEPS))
    assert peak <= BOUND * kept, peak / kept
