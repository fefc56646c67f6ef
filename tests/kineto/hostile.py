"""A one-rank profiler trace with known ops, written byte by byte, for the hostile-input
tests: each test changes one part of it (a value, a key, the nesting, the bytes around the
document) and knows what the import must do."""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

META = "dp_size: 1\npp_size: 1\n"
CLI = [sys.executable, "-c", "import sys; from stragglers.cli import main; sys.exit(main())"]
#: the address-space cap of a CLI run in a subprocess (bytes)
AS_CAP = 1 << 30


def events() -> list[dict[str, Any]]:
    """Step 1 with a forward (kernel 100-150 us), an optimizer (kernel 200-220 us) and a DP
    all-reduce (NCCL kernel 300-400 us): three ops."""
    x = {"ph": "X", "pid": 1, "tid": 7}
    return [
        {**x, "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0.0, "dur": 1000.0,
         "args": {}},
        {**x, "cat": "user_annotation", "name": "forward-compute mb=0", "ts": 10.0,
         "dur": 10.0, "args": {}},
        {**x, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 12.0, "dur": 1.0,
         "args": {"correlation": 1}},
        {**x, "tid": 20, "cat": "kernel", "name": "gemm", "ts": 100.0, "dur": 50.0,
         "args": {"correlation": 1, "stream": 20}},
        {**x, "cat": "user_annotation", "name": "optimizer", "ts": 30.0, "dur": 10.0,
         "args": {}},
        {**x, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 32.0, "dur": 1.0,
         "args": {"correlation": 2}},
        {**x, "tid": 20, "cat": "kernel", "name": "adam", "ts": 200.0, "dur": 20.0,
         "args": {"correlation": 2, "stream": 20}},
        {**x, "cat": "cpu_op", "name": "record_param_comms", "ts": 50.0, "dur": 5.0,
         "args": {"Collective name": "allreduce", "Group size": 1}},
        {**x, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 52.0, "dur": 1.0,
         "args": {"correlation": 3}},
        {**x, "tid": 21, "cat": "kernel",
         "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "ts": 300.0, "dur": 100.0, "args": {"correlation": 3, "stream": 21}},
        {**x, "cat": "cpu_op", "name": "aten::mm", "ts": 13.0, "dur": 1.0,
         "args": {"Input Dims": [[2, 3], [3, 4]]}},
    ]


#: what the import gives of :func:`events`: (optype, start s, duration s)
OPS = [("forward-compute", 100e-6, 50e-6), ("optimizer", 200e-6, 20e-6),
       ("grads-reduce-scatter", 300e-6, 100e-6)]


def dumps(value: Any) -> bytes:
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def document(evs: list[Any] | None = None, *, head: bytes = b"", tail: bytes = b"",
             info: Any = None) -> bytes:
    """The trace file: ``head`` (keys ending in a comma) and ``distributedInfo`` before the
    events, ``tail`` (keys starting with a comma) after them; events as dicts or bytes."""
    evs = events() if evs is None else evs
    info = {"rank": 0, "world_size": 1} if info is None else info
    body = b",\n".join(dumps(e) for e in evs)
    return (b'{"schemaVersion": 1, ' + head + b'"distributedInfo": ' + dumps(info)
            + b', "traceEvents": [\n' + body + b'\n]' + tail + b"}\n")


def write(folder: Path, data: bytes, *, gz: bool = False, name: str = "rank-0.json") -> Path:
    """``folder`` with one rank file and ``job.yaml``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.yaml").write_text(META)
    if gz:
        (folder / (name + ".gz")).write_bytes(gzip.compress(data))
    else:
        (folder / name).write_bytes(data)
    return folder


def _cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_CAP, AS_CAP))


def run(traces: Path, meta: Path, out: Path, *, timeout: float = 120,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``stragglers import kineto`` in a subprocess with a 1 GiB address space and a
    timeout (a hang or a memory blow-up fails the test, it does not take the suite)."""
    return subprocess.run([*CLI, "import", "kineto", str(traces), "--meta", str(meta),
                           "--out", str(out), "--jobs", "1"], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_cap, env={**os.environ, **(env or {})})
