"""One rank file's task (what a local parse process or a Dask worker runs: read the file,
turn it into ops) in bounded memory: the same trace pattern at 24 MiB and at 120 MiB of JSON
(gzipped), each parsed in a subprocess whose whole address space is capped at 1 GiB
(``RLIMIT_AS``): the peak resident memory of the larger one is that of the smaller one
(within 48 MiB: holding the 96 MiB more of JSON, let alone its parsed events, would not fit),
and the ops come out exactly as built. (The peak resident memory of a Dask worker on a
1.5 GB rank file is measured by bench/bench_kineto_dask.py, docs/benchmarks/kineto.md.)"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # two parses in subprocesses (`pytest -m "not slow"` skips it)

AS_CAP = 1 << 30
SMALL, LARGE = 24 << 20, 120 << 20
GROWTH_KIB = 48 << 10
STEP_US = 10_000.0


def _step(i: int) -> bytes:
    """Step ``i``: a forward (kernel at +100 us for 50 us) and an optimizer (kernel at
    +200 us for 20 us), each with its annotation and launch."""
    t = i * STEP_US
    x = {"ph": "X", "pid": 1, "tid": 7}
    evs = [
        {**x, "cat": "user_annotation", "name": f"ProfilerStep#{i}", "ts": t, "dur": 9000.0},
        {**x, "cat": "user_annotation", "name": "forward-compute mb=0", "ts": t + 10,
         "dur": 10.0},
        {**x, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t + 12, "dur": 1.0,
         "args": {"correlation": 2 * i + 1}},
        {**x, "tid": 20, "cat": "kernel", "name": "gemm", "ts": t + 100, "dur": 50.0,
         "args": {"correlation": 2 * i + 1, "stream": 20}},
        {**x, "cat": "user_annotation", "name": "optimizer", "ts": t + 30, "dur": 10.0},
        {**x, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t + 32, "dur": 1.0,
         "args": {"correlation": 2 * i + 2}},
        {**x, "tid": 20, "cat": "kernel", "name": "adam", "ts": t + 200, "dur": 20.0,
         "args": {"correlation": 2 * i + 2, "stream": 20}},
    ]
    return b",\n".join(json.dumps(e).encode() for e in evs)


#: what fills each step: CPU ops and flow events, the bulk of a real trace (not used)
PAD = b",\n".join([json.dumps({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1,
                               "tid": 7, "ts": 13.0, "dur": 1.0,
                               "args": {"Input Dims": [[8, 512], [512, 1024]],
                                        "Input type": ["float", "float"]}}).encode(),
                   json.dumps({"ph": "s", "id": 1, "pid": 1, "tid": 7, "ts": 13.0,
                               "cat": "ac2g", "name": "ac2g"}).encode()] * 2500)


def _write(path: Path, json_bytes: int) -> int:
    """The file, gzipped; returns its number of steps."""
    head = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}})
    size, steps = 0, 0
    with gzip.open(path, "wb", compresslevel=1) as fh:
        part = head[:-1].encode() + b', "traceEvents": [\n'
        while size < json_bytes:
            part += (b",\n" if steps else b"") + _step(steps) + b",\n" + PAD
            fh.write(part)
            size += len(part)
            part = b""
            steps += 1
        fh.write(b"\n]}\n")
    return steps


#: the numeric libraries' thread pools reserve address space per core: one thread each, so
#: that the cap does not depend on the machine
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "MALLOC_ARENA_MAX": "2"}


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_CAP, AS_CAP))


CHILD = """
import sys, numpy as np
from stragglers.kineto import _one
from stragglers.kineto.patterns import load_patterns
from stragglers.trace.io import JobMeta
ops = _one(__import__("pathlib").Path(sys.argv[1]), load_patterns(None),
           JobMeta(dp_size=1, pp_size=1, world_size=1))
print(len(ops.start), ops.counts["cpu_op events (a category the importer does not use)"],
      ops.counts["ac2g events (a category the importer does not use)"])
np.save(sys.argv[2], np.stack([ops.start, ops.end]))
import resource
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _parse(tmp_path: Path, json_bytes: int) -> int:
    """Parse a file of ``json_bytes`` in a capped subprocess; check its ops; return the
    child's peak RSS (KiB)."""
    path = tmp_path / f"rank-{json_bytes}.json.gz"
    steps = _write(path, json_bytes)
    out = tmp_path / f"ops-{json_bytes}.npy"
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), str(out)],
                       capture_output=True, text=True, timeout=600, preexec_fn=_cap,
                       env={**os.environ, **ONE_THREAD})
    assert r.returncode == 0, r.stderr[-3000:]
    n_ops, n_cpu, n_flow, peak = (int(x) for x in r.stdout.split())
    assert (n_cpu, n_flow) == (2500 * steps, 2500 * steps)
    start, end = np.load(out)
    t = np.arange(steps) * STEP_US
    assert n_ops == 2 * steps
    np.testing.assert_array_equal(np.sort(start), np.sort(np.r_[t + 100, t + 200]))
    np.testing.assert_array_equal(np.sort(end - start), np.sort(np.r_[[50.0] * steps,
                                                                     [20.0] * steps]))
    return peak


def test_the_memory_of_a_rank_file_does_not_grow_with_its_size(tmp_path: Path) -> None:
    small = _parse(tmp_path, SMALL)
    large = _parse(tmp_path, LARGE)
    assert large - small < GROWTH_KIB, (small, large)
