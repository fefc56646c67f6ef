"""One rank file's task (what a local parse process or a Dask worker runs: read the file,
turn it into ops) in bounded memory: a gzipped file of 1.1 GiB of JSON is parsed in a
subprocess whose whole address space is capped at 1 GiB (``RLIMIT_AS``), so it could not
hold the file, let alone its parsed events; the ops come out as built."""

from __future__ import annotations

import gzip
import json
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # a 1.1 GiB parse (`pytest -m "not slow"` skips it)

AS_CAP = 1 << 30
JSON_BYTES = int(1.1 * 2**30)
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


def _write(path: Path) -> int:
    """The file, gzipped; returns its number of steps."""
    head = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}})
    size, steps = 0, 0
    with gzip.open(path, "wb", compresslevel=1) as fh:
        part = head[:-1].encode() + b', "traceEvents": [\n'
        while size < JSON_BYTES:
            part += (b",\n" if steps else b"") + _step(steps) + b",\n" + PAD
            fh.write(part)
            size += len(part)
            part = b""
            steps += 1
        fh.write(b"\n]}\n")
    return steps


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
"""


def test_a_rank_file_larger_than_the_address_space_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.json.gz"
    steps = _write(path)
    assert path.stat().st_size < AS_CAP // 4  # small on disk, 1.1 GiB of JSON
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tmp_path / "ops.npy")],
                       capture_output=True, text=True, timeout=1200, preexec_fn=_cap)
    assert r.returncode == 0, r.stderr[-3000:]
    n_ops, n_cpu, n_flow = (int(x) for x in r.stdout.split())
    assert (n_cpu, n_flow) == (2500 * steps, 2500 * steps)
    start, end = np.load(tmp_path / "ops.npy")
    t = np.arange(steps) * STEP_US
    want = np.sort(np.r_[t + 100, t + 200])
    assert n_ops == 2 * steps
    np.testing.assert_array_equal(np.sort(start), want)
    np.testing.assert_array_equal(np.sort(end - start), np.sort(np.r_[[50.0] * steps,
                                                                     [20.0] * steps]))
