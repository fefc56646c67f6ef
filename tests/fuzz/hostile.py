"""Running the command line on a hostile input in a fresh process, under the contract of
issue 31: exit 2 and one line naming the input, no traceback, within a time limit (a command
that waits on a named pipe or reads /dev/zero without end fails the test instead of hanging
it) and within 1 GiB of memory above what the process holds once its modules are imported
(``RLIMIT_AS``: beyond it an allocation fails, and the MemoryError is a traceback, exit 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: Memory a command may take on top of the process after its imports (MiB).
MEM_MIB = 1024
#: Seconds a command may take (a loaded 2-core machine starts one in 2-5 s).
TIMEOUT_S = 90.0

_CHILD = """
import io, resource, sys
import numpy, pyarrow as pa, pyarrow.parquet as pq, yaml  # noqa: F401  (before the cap)
import stragglers.analysis, stragglers.hang.flight_recorder  # noqa: F401
import stragglers.logs.megatron, stragglers.mitigate.microbatch  # noqa: F401
from stragglers.cli import main

# Arrow's allocator reserves its arenas (about 1.3 GiB of address space) on first use:
# reserved before the cap, which then bounds what the command itself takes.
buf = io.BytesIO()
pq.write_table(pa.table({"a": list(range(1000))}), buf)
pq.read_table(io.BytesIO(buf.getvalue()))
del buf

def vm_kib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1])
    return 0

size = vm_kib() * 1024
if size:
    budget = int(sys.argv[1]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (size + budget, resource.RLIM_INFINITY))
sys.exit(main(sys.argv[2:]))
"""


@dataclass
class Run:
    argv: list[str]
    code: int | None  # None: ran past the time limit (killed)
    stdout: str
    stderr: str

    def explain(self) -> str:
        return f"{' '.join(self.argv)}: exit {self.code}\n{self.stderr[-3000:]}"


def run_cli(argv: list[str], cwd: Path | None = None, timeout: float = TIMEOUT_S,
            mem_mib: int = MEM_MIB, env: dict[str, str] | None = None) -> Run:
    """``stragglers ARGV`` in a fresh process with its memory capped; a run past ``timeout``
    is killed and comes back with ``code`` None."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    full_env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
                **(env or {})}
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, str(mem_mib), *argv],
                              capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=full_env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Run(argv, None, out, err + f"\n(killed after {timeout:.0f} s)")
    return Run(argv, done.returncode, done.stdout, done.stderr)


def assert_refused(run: Run, *needles: str) -> str:
    """The run ended with exit 2 and one line ``stragglers ...: error: ...`` holding every
    needle; returns that line."""
    assert run.code == 2, run.explain()
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.explain()
    assert lines[0].startswith("stragglers ") and ": error: " in lines[0], run.explain()
    assert "Traceback" not in run.stderr, run.explain()
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in: {lines[0]}"
    return lines[0]
