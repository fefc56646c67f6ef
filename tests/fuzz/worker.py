"""A long-lived process that runs ``stragglers`` commands for the fuzz tests.

Started by :class:`tests.fuzz.harness.CliWorker`; reads one JSON request per line on stdin
(``{"argv": [...]}``), runs :func:`stragglers.cli.main` in-process with stdout and stderr
captured, and answers one JSON line: the exit code, the captured output, the traceback of an
exception that escaped ``main`` (a contract violation), the peak resident memory of the call
above the memory before it, and the seconds it took.

Its address space is capped (``RLIMIT_AS``) at its size after the imports plus
``FUZZ_MEM_BUDGET_MIB``: an input that makes a command allocate beyond that ends in a
MemoryError traceback (reported) instead of exhausting the machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import time
import traceback


def _status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main() -> None:
    import stragglers.analysis  # noqa: F401  (warm imports before the cap)
    import stragglers.probe.merge  # noqa: F401
    from stragglers.cli import main as cli_main
    from stragglers.phases import reset_peak_rss

    budget = int(os.environ.get("FUZZ_MEM_BUDGET_MIB", "2048")) * 2**20
    size = (_status_kib("VmSize:") or 0) * 1024
    if size:
        resource.setrlimit(resource.RLIMIT_AS, (size + budget, resource.RLIM_INFINITY))
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    for line in sys.stdin:
        request = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        tb = None
        code: int | None = None
        measured = reset_peak_rss()
        before = _status_kib("VmRSS:") or 0
        t0 = time.perf_counter()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli_main(request["argv"])
        except SystemExit as exc:  # --help
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
            tb = traceback.format_exc()
        seconds = time.perf_counter() - t0
        peak = (_status_kib("VmHWM:") or 0) if measured else 0
        answer.write(json.dumps({
            "code": code, "stdout": out.getvalue()[-4000:], "stderr": err.getvalue()[-4000:],
            "traceback": tb, "peak_mib": max(peak - before, 0) / 1024 if measured else None,
            "seconds": seconds}) + "\n")
        answer.flush()


if __name__ == "__main__":
    main()
