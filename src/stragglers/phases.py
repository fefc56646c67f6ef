"""Where an analysis spends its time and memory: named phases, recorded only when asked.

The library marks its phases with :func:`phase` (``with phase("simulate"): ...``); outside
:func:`recording` that costs one check. Inside it each phase records its wall time, CPU time
(user + system of the process) and peak resident memory. Phases nest: a phase entered
inside another is recorded as ``outer/inner``, and the outer one's figures include it.

Peak memory per phase comes from the kernel's high-water mark of the process (``VmHWM``),
reset when a phase starts (``/proc/self/clear_refs``); where that file cannot be written
the high-water mark of the whole process so far is reported instead (``peak_exact`` False).
``bench/bench_whatif.py`` prints the table.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class PhaseRecord:
    """Totals of one phase (summed over its calls; ``peak_mib`` the largest peak)."""

    name: str
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_mib: float = 0.0
    calls: int = 0


@dataclass
class PhaseLog:
    """The phases recorded, in the order they were first entered."""

    records: dict[str, PhaseRecord] = field(default_factory=dict)
    peak_exact: bool = True

    def rows(self) -> list[PhaseRecord]:
        return list(self.records.values())


@dataclass
class _Frame:
    name: str
    wall: float
    cpu: float
    peak: float = 0.0


_LOG: PhaseLog | None = None
_STACK: list[_Frame] = []


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _hwm_mib() -> float:
    """The process's resident high-water mark (MiB), 0 when unknown."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def reset_peak_rss() -> bool:
    """Reset this process's resident-memory high-water mark (``VmHWM``) to its present
    resident size; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


@contextmanager
def recording() -> Iterator[PhaseLog]:
    """Record the phases run inside this block (one recording at a time)."""
    global _LOG
    if _LOG is not None:
        raise RuntimeError("phases are already being recorded")
    _LOG = PhaseLog()
    _STACK.clear()
    try:
        yield _LOG
    finally:
        _LOG = None
        _STACK.clear()


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Mark a phase of the work (recorded only inside :func:`recording`)."""
    log = _LOG
    if log is None:
        yield
        return
    hwm = _hwm_mib()
    if _STACK:  # what the enclosing phase reached so far, before the reset
        _STACK[-1].peak = max(_STACK[-1].peak, hwm)
    if not reset_peak_rss():
        log.peak_exact = False
    full = f"{_STACK[-1].name}/{name}" if _STACK else name
    rec = log.records.setdefault(full, PhaseRecord(full))
    frame = _Frame(full, time.perf_counter(), _cpu())
    _STACK.append(frame)
    try:
        yield
    finally:
        _STACK.pop()
        peak = max(frame.peak, _hwm_mib())
        rec.wall_s += time.perf_counter() - frame.wall
        rec.cpu_s += _cpu() - frame.cpu
        rec.peak_mib = max(rec.peak_mib, peak)
        rec.calls += 1
        if _STACK:
            _STACK[-1].peak = max(_STACK[-1].peak, peak)
