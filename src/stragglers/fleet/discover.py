"""Fleet inputs -> job folders.

An input is a folder or a glob pattern. A *job folder* holds ``meta.yaml`` and a trace
(``trace.parquet`` or ``trace.jsonl``; ``truth.json`` when synthetic); a folder that is not
one is searched recursively for job folders. A folder with ``meta.yaml`` but no trace is
still a job (its task fails with the reason, and is counted). An SMon data folder (``stragglers
serve --data DIR``: ``DIR/sessions/ID/`` holds each accepted upload's trace and
``meta.yaml``) is searched in ``sessions/`` only, never in ``uploads/`` (uploads being
received). Inputs that name nothing
(a missing path, a pattern without a match, a folder without any job) are user errors.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

from stragglers.errors import InputError
from stragglers.limits import check_limit

META_NAME = "meta.yaml"
TRACE_NAMES = ("trace.parquet", "trace.jsonl")
TRUTH_NAME = "truth.json"
#: Files that mark an SMon data folder (its database, its server lock, its uploads).
SMON_MARKERS = ("smon.sqlite3", ".lock", "uploads")


@dataclass(frozen=True)
class JobInput:
    """One job of the fleet: its name (its folder as found from the input) and its files."""

    name: str
    folder: Path
    meta: Path
    trace: Path | None
    truth: Path | None


def _job(folder: Path, name: str) -> JobInput:
    trace = next((folder / t for t in TRACE_NAMES if (folder / t).is_file()), None)
    truth = folder / TRUTH_NAME
    return JobInput(name=name, folder=folder, meta=folder / META_NAME, trace=trace,
                    truth=truth if truth.is_file() else None)


def _is_smon_data(root: Path) -> bool:
    return (root / "sessions").is_dir() and any(
        (root / n).exists() for n in SMON_MARKERS)


def _jobs_in(root: Path) -> list[JobInput]:
    if (root / META_NAME).is_file():
        return [_job(root, root.as_posix())]
    if _is_smon_data(root):
        root = root / "sessions"
    found = sorted(p.parent for p in root.rglob(META_NAME) if p.is_file())
    return [_job(f, f.as_posix()) for f in found]


def discover(inputs: list[str]) -> list[JobInput]:
    """Every job folder named by ``inputs``, in input order then path order; a folder
    reached twice is kept once. Raises :class:`InputError` for an input that names no job."""
    jobs: list[JobInput] = []
    seen: set[Path] = set()
    for text in inputs:
        if glob.has_magic(text):
            roots = [Path(p) for p in sorted(glob.glob(text)) if Path(p).is_dir()]
            if not roots:
                raise InputError(f"{text}: the pattern matches no folder")
        else:
            p = Path(text)
            if not p.exists():
                raise InputError(f"{text}: no such folder")
            if not p.is_dir():
                raise InputError(f"{text}: not a folder (give job folders, or folders of "
                                 f"them, holding {META_NAME} and a trace)")
            roots = [p]
        found = [j for r in roots for j in _jobs_in(r)]
        if not found:
            raise InputError(f"{text}: no job folder ({META_NAME} with "
                             f"{' or '.join(TRACE_NAMES)}) in it")
        for j in found:
            key = j.folder.resolve()
            if key not in seen:
                seen.add(key)
                jobs.append(j)
            check_limit("fleet_jobs", len(jobs), "fleet inputs")
    return jobs
