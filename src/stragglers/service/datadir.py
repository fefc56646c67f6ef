"""The data folder of a server: the database (SQLite by default), uploaded traces and the
analysis outputs, and the record logs of the streaming detector.

::

    DIR/smon.sqlite3            the database (unless --db names another)
    DIR/.lock                   held by the running server: exclusively with SQLite (one
                                server per folder); shared by the servers of one
                                PostgreSQL database (see :meth:`DataDir.lock`)
    DIR/uploads/ID/             an upload being received and validated (removed at start)
    DIR/sessions/ID/trace.*     an accepted upload: the trace and meta.yaml
    DIR/sessions/ID/out-N/      the outputs of attempt N (result.json, heatmaps, timelines)
    DIR/records/JOB_ID.jsonl    the records received for a job (the detector's replay log)

Paths are made from session ids the server generates and from job *ids*, never from job
names or file names sent by a client, so nothing a client sends can name a path outside
DIR.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
from pathlib import Path

from stragglers.errors import InputError

#: A session id: 32 lowercase hex digits (uuid4).
SESSION_ID = re.compile(r"^[0-9a-f]{32}$")
#: A job name: letters, digits, ``.``, ``_``, ``-``; starts with a letter or digit.
JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
#: Output files a client may download from a session's folder.
DOWNLOADS = ("report.html", "result.json", "timeline-original.json", "timeline-ideal.json",
             "heatmap.png", "heatmap-steps-dp-rank.png", "heatmap-steps-stage.png")


def check_job_name(name: str, source: str = "job") -> str:
    if not JOB_NAME.match(name):
        raise InputError(f"{source}: job name {name[:80]!r} is not allowed (1-128 letters, "
                         "digits, '.', '_' or '-', starting with a letter or digit)")
    return name


class DataDir:
    """Paths inside a server's data folder."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self._lock_fd: int | None = None
        #: True when this server started alone on the folder (it may remove leftovers)
        self.alone = True
        self._shared = False

    def create(self) -> DataDir:
        for sub in ("uploads", "sessions", "records"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self

    def lock(self, shared: bool = False, wait_s: float = 30.0) -> None:
        """Hold DIR/.lock for this process's lifetime (released by the OS even on kill -9).

        ``shared=False`` (SQLite): an exclusive lock; a second server on the folder is
        refused. ``shared=True`` (servers of one PostgreSQL database sharing the folder):
        the first server takes the lock exclusively (:attr:`alone`: it may remove the
        leftovers of earlier servers, then calls :meth:`share`); later ones take it shared
        (waiting up to ``wait_s`` for the first one's start) and remove nothing. A server on
        SQLite and one on PostgreSQL never share a folder.
        """
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.alone = True
        except BlockingIOError:
            if not shared or not self._lock_shared(fd, wait_s):
                os.close(fd)
                raise InputError(f"--data {self.root}: another server is using this folder"
                                 + ("" if shared else " (servers share a folder only on "
                                    "one PostgreSQL database: --db postgresql://...)")
                                 ) from None
            self.alone = False
        self._lock_fd = fd
        self._shared = shared

    @staticmethod
    def _lock_shared(fd: int, wait_s: float) -> bool:
        end = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() > end:
                    return False
                time.sleep(0.2)

    def share(self) -> None:
        """Let other servers of the same database use the folder (the first server calls
        it once its leftovers are removed)."""
        if self._lock_fd is not None and self._shared and self.alone:
            fcntl.flock(self._lock_fd, fcntl.LOCK_SH)

    def clear_uploads(self) -> int:
        """Remove partial uploads left by a server that was stopped while receiving them."""
        n = 0
        for p in (self.root / "uploads").iterdir():
            shutil.rmtree(p, ignore_errors=True)
            n += 1
        return n

    def upload(self, session_id: str) -> Path:
        return self.root / "uploads" / self._checked(session_id)

    def session(self, session_id: str) -> Path:
        return self.root / "sessions" / self._checked(session_id)

    def records(self, job_id: int) -> Path:
        return self.root / "records" / f"{int(job_id)}.jsonl"

    def records_mtime(self, job_id: int) -> float | None:
        """When the job's record log was last written (None: it has none)."""
        try:
            return self.records(job_id).stat().st_mtime
        except OSError:
            return None

    def download(self, session_id: str, result_dir: str, name: str) -> Path | None:
        """The path of a downloadable output, or None when ``name`` is not one."""
        if name not in DOWNLOADS or not re.fullmatch(r"out-\d+", result_dir):
            return None
        return self.session(session_id) / result_dir / name

    @staticmethod
    def _checked(session_id: str) -> str:
        if not SESSION_ID.match(session_id):
            raise ValueError(f"not a session id: {session_id!r}")
        return session_id
