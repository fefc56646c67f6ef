"""Shared pieces of the fuzz tests: the Hypothesis settings, the CLI worker process and the
contract every command must keep on any input.

Profiles (environment variable ``HYPOTHESIS_PROFILE``):

* ``fuzz-ci`` (default, what ``make test`` runs): 50 examples per test (``FUZZ_EXAMPLES``),
  derandomized (the same examples on every run), no deadline;
* ``long``: many more random examples, for a soak run
  (``HYPOTHESIS_PROFILE=long .venv/bin/python -m pytest tests/fuzz``).

The contract: the command ends with exit 0 (and a sane result) or exit 2 with exactly one
line on stderr; no exception escapes (no traceback); the call's peak memory stays below
``MEM_BOUND_MIB`` (the worker process also has a hard address-space cap), and it ends within
``TIMEOUT_S``.
"""

from __future__ import annotations

import json
import math
import os
import select
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, settings

_PROFILES = {
    "fuzz-ci": settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "50")),
                        derandomize=True, deadline=None, database=None, print_blob=True,
                        suppress_health_check=list(HealthCheck)),
    "long": settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "500")),
                     derandomize=False, deadline=None, print_blob=True,
                     suppress_health_check=list(HealthCheck)),
}
FUZZ = _PROFILES.get(os.environ.get("HYPOTHESIS_PROFILE", "fuzz-ci"), _PROFILES["fuzz-ci"])

#: Peak memory one command may take above its start (MiB). The worker runs with lowered
#: size limits (``WORKER_ENV``), so any input that passes them stays far below this.
MEM_BOUND_MIB = 600
TIMEOUT_S = 120.0
#: Lower size limits inside the worker: inputs beyond them must be refused before anything
#: is allocated, inputs within them are small.
WORKER_ENV = {
    "STRAGGLERS_MAX_TRACE_ROWS": "200000",
    "STRAGGLERS_MAX_TABLE_CELLS": "400000",
    "STRAGGLERS_MAX_WORKERS": "4096",
    "STRAGGLERS_MAX_SYNTH_OPS": "200000",
    "FUZZ_MEM_BUDGET_MIB": "2048",
}
WORKER = Path(__file__).with_name("worker.py")
#: Lowest slowdown a result may report without being marked untrustworthy.
S_FLOOR = 0.98


@dataclass
class Outcome:
    argv: list[str]
    code: int | None
    stdout: str
    stderr: str
    traceback: str | None
    peak_mib: float | None
    seconds: float
    crashed: str | None = None


class CliWorker:
    """One worker process (:mod:`tests.fuzz.worker`), restarted after a crash or timeout."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        env = {**os.environ, **WORKER_ENV}
        return subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=env, cwd=Path(__file__).resolve().parents[2])

    def run(self, argv: list[str], timeout: float = TIMEOUT_S) -> Outcome:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"argv": argv}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            reason = (f"ran past {timeout:.0f} s" if not ready
                      else f"worker died (exit {proc.wait()})")
            proc.kill()
            proc.wait()
            self.proc = None
            return Outcome(argv, None, "", "", None, None, timeout, crashed=reason)
        return Outcome(argv=argv, **json.loads(line))

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _reason(stderr: str) -> str:
    """The kind of an error message, for Hypothesis' statistics (paths and values cut)."""
    words = stderr.split(": error: ", 1)[-1].split(": ", 1)[-1]
    return " ".join(w for w in words.split()[:5] if not any(ch.isdigit() for ch in w))


def check_contract(out: Outcome, result_json: Path | None = None) -> dict[str, Any] | None:
    """Assert the error contract; returns the result document of a successful analysis."""
    what = " ".join(out.argv)
    event(f"exit {out.code}" + (f": {_reason(out.stderr)}" if out.code == 2 else ""))
    assert out.crashed is None, f"{what}: {out.crashed}"
    assert out.traceback is None, f"{what}: traceback\n{out.traceback}"
    if out.peak_mib is not None:
        assert out.peak_mib < MEM_BOUND_MIB, f"{what}: peak {out.peak_mib:.0f} MiB"
    assert out.code in (0, 2), f"{what}: exit {out.code}\n{out.stderr}"
    if out.code == 2:
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, f"{what}: {len(lines)} lines on stderr:\n{out.stderr}"
        assert lines[0].startswith("stragglers "), lines[0]
        assert ": error: " in lines[0], lines[0]
        return None
    if result_json is None:
        return None
    doc = json.loads(result_json.read_text())
    s, disc = doc["slowdown"], doc["discrepancy"]
    assert math.isfinite(s) and math.isfinite(disc), f"{what}: S {s}, discrepancy {disc}"
    # S clearly below 1 (faster than ideal) must be flagged. Slightly below 1 is a property
    # of the model, not an input error: pauses off the critical path cost the real job less
    # than their mean costs every worker in the ideal one (synth --dp 1 --gc 0.3:0.01 gives
    # S = 0.996). A huge S can be true (one op of 20 minutes among 0.1 s ops: S ~ 1000).
    if s < S_FLOOR:
        assert doc["trustworthy"] is False, f"{what}: S = {s} marked trustworthy"
    return doc
