"""What runs in the service's task processes: checking an upload and analysing a
session. Nothing here runs on the server's event loop; both functions take and return
plain picklable values (paths as strings, frozen dataclasses)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from stragglers.analysis import analyze_table, load_table
from stragglers.analysis.outputs import write_outputs
from stragglers.errors import InputError
from stragglers.service.crash import crashpoint
from stragglers.service.rows import AnalysisSummary

META_FILE = "meta.yaml"
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def init_task_process(role: str = "smon-worker") -> None:
    """Task process start: die with the server (Linux: the kernel sends SIGKILL when the
    parent exits, even by kill -9), so that an analysis never outlives the server that
    claimed it; draw without a display. The process is named ``role`` (``ps -o comm``:
    ``smon-analysis`` or ``smon-validate``)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(role.encode()[:15]), 0, 0, 0)
        if os.getppid() == 1:  # the server died before prctl took effect
            os._exit(1)


def warm_up() -> int:
    """A no-op task that makes the pool start its processes (and import numpy & co.)."""
    return os.getpid()


@dataclass(frozen=True)
class UploadCheck:
    """What validation learnt about an upload."""

    trial_name: str
    n_ops: int
    n_workers: int
    n_steps: int


def check_upload(trace: str, meta: str, trace_name: str, meta_name: str) -> UploadCheck:
    """Read and validate a trace with its metadata exactly as the analysis will (the
    validator of :func:`stragglers.analysis.load_table`).

    Raises :class:`InputError` with the validator's one-line message, in which the server's
    paths are replaced by the names the client uploaded.
    """
    crashpoint(f"check-{Path(trace_name).stem}")  # tests: an upload whose check hangs
    try:
        table = load_table(trace, meta)
    except InputError as exc:
        msg = str(exc).replace(trace, trace_name).replace(meta, meta_name)
        raise InputError(msg) from None
    n_steps = len(table.steps)
    return UploadCheck(trial_name=table.meta.trial_name,
                       n_ops=table.n_nodes * table.meta.dp_size * n_steps,
                       n_workers=table.meta.n_workers, n_steps=n_steps)


def analyse_session(folder: str, trace_file: str, attempt: int,
                    upload_name: str = "trace") -> AnalysisSummary:
    """Analyse a session's trace and write its outputs into ``folder/out-ATTEMPT`` (all
    together, result.json last; its ``source`` is the uploaded file's name, not the server's
    path). A user error found only now (say, a dependency cycle) raises
    :class:`InputError`, its message naming the uploaded file, not the server's paths."""
    crashpoint("analysis-started")
    t0 = time.perf_counter()
    base = Path(folder)
    out = base / f"out-{attempt}"
    try:
        table = load_table(base / trace_file, base / META_FILE)
        timing = {"load": time.perf_counter() - t0}
        analysis = analyze_table(table, timing=timing)
    except InputError as exc:
        msg = (str(exc).replace(str(base / trace_file), upload_name)
               .replace(str(base / META_FILE), META_FILE).replace(str(base), "session"))
        raise InputError(msg) from None
    result = write_outputs(analysis.engine, replace(analysis.result, source=upload_name), out)
    m, v = result.metrics, result.verdict
    return AnalysisSummary(
        result_dir=out.name, n_workers=int(m.dp * m.pp), n_steps=int(result.counts.steps),
        n_ops=int(result.counts.ops), slowdown=float(m.slowdown), waste=float(m.waste),
        discrepancy=float(m.discrepancy), trustworthy=result.trustworthy,
        cause=v.cause.value, confidence=float(v.confidence),
        workers=tuple(w.key for w in v.workers), step_time=float(np.mean(m.actual)),
        analysis_s=time.perf_counter() - t0)
