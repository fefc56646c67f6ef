"""The end of a profiling session pushed to a ``stragglers serve`` server.

When :class:`~stragglers.probe.ProbeConfig` names a ``push_server``, every rank's
:meth:`Probe.close <stragglers.probe.Probe.close>` writes its rank file, waits for the others
(a barrier on the probes' gloo group) and rank 0 calls :func:`merge_and_push`: the rank files
are merged into ``OUT_DIR/session/`` (``trace.parquet`` + ``meta.yaml``) and uploaded with
:func:`stragglers.service.client.push_session`. The outcome is written to
``OUT_DIR/session/push.json`` (``{"session": ID}`` or ``{"error": "..."}``).

While the job runs (``ProbeConfig.live`` and ``push_live``, both on by default), every rank
also posts its live step records (:mod:`stragglers.probe.recorder`) to the server's record
stream of the job (``POST /api/v1/jobs/JOB/records``, JOB = ``push_job``, else the job's trial
name) from a thread of its own (:class:`LivePusher`): the flusher hands it the lines it wrote
to ``steps-rank-NNNNN.jsonl``, and it posts what has gathered every ``flush_interval_s``
(at most :data:`BATCH_LINES` lines a request, each with an idempotency key, retried by
:func:`stragglers.service.client.push_records`). The server's streaming detector then names
the rank whose busy time rose (the dashboard's culprit, ``/metrics``).

A training job must not die because a monitoring server is down or a trace is odd: every
failure of the merge or the push is logged as one line (logger ``stragglers.probe``) and
recorded in ``push.json``; the job goes on. Live records that could not be posted are
counted and logged (the first failure, and the totals when the probe closes); they stay in
the rank's file, and at most :data:`BACKLOG_LINES` wait in memory (the oldest beyond are
dropped, counted).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.probe.settings import ProbeConfig

log = logging.getLogger("stragglers.probe")

#: Sub-folder of the probe's output folder that receives the merged session.
SESSION_DIR = "session"


@dataclass(frozen=True)
class PushOutcome:
    """What :func:`merge_and_push` did: the server's session id, or the one-line error."""

    session: str | None
    error: str | None
    folder: Path


def merge_and_push(probe_dir: str | Path, config: ProbeConfig) -> PushOutcome:
    """Merge the rank files of ``probe_dir`` and push them to ``config.push_server``."""
    if config.push_server is None:
        raise ValueError("merge_and_push needs ProbeConfig.push_server")
    src = Path(probe_dir)
    dest = src / SESSION_DIR
    session: str | None = None
    error: str | None = None
    try:
        # Imported here: the service client needs httpx, which only pushing sessions use.
        from stragglers.probe.merge import merge_dir
        from stragglers.service.auth import load_token
        from stragglers.service.client import push_session

        token = load_token(config.push_token_file, "ProbeConfig.push_token_file")
        merge_dir(src, None, dest)
        session = push_session(dest / "trace.parquet", dest / "meta.yaml", config.push_server,
                               token, job=config.push_job)
    except (InputError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)
    dest.mkdir(parents=True, exist_ok=True)
    body = {"session": session} if error is None else {"error": error}
    write_text(dest / "push.json", json.dumps(body) + "\n")
    if error is None:
        log.info("probe session pushed to %s as session %s", config.push_server, session)
    else:
        log.warning("probe session not pushed to %s: %s", config.push_server, error)
    return PushOutcome(session=session, error=error, folder=dest)


#: Live step records posted in one request, at most.
BATCH_LINES = 5000
#: Live step records waiting for the server, at most (beyond: the oldest are dropped).
BACKLOG_LINES = 200_000
#: Seconds one live post may take (the client retries a few times), and that closing the
#: probe waits for the last posts.
POST_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 30.0


class LivePusher:
    """Posts one rank's live step records to ``config.push_server`` from its own thread
    (module docstring). :meth:`put` is called by the probe's flusher; :meth:`close` posts
    what is left (waiting at most :data:`CLOSE_TIMEOUT_S`) and logs the totals."""

    def __init__(self, config: ProbeConfig, job: str, rank: int) -> None:
        if config.push_server is None:
            raise ValueError("LivePusher needs ProbeConfig.push_server")
        self.server = config.push_server
        self.config = config
        self.job = job
        self.rank = rank
        self.posted = 0
        self.failed = 0  # lines whose post failed
        self.dropped = 0  # lines dropped from a full backlog
        self.error: str | None = None
        self._token: str | None = None
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._post: Any = None

    def start(self) -> LivePusher:
        """Read the token and start the thread; a missing token or client library is
        logged, and nothing is posted."""
        try:
            from stragglers.service.auth import load_token
            from stragglers.service.client import push_records
            from stragglers.service.datadir import check_job_name

            check_job_name(self.job, "ProbeConfig.push_job")
            self._token = load_token(self.config.push_token_file, "ProbeConfig.push_token_file")
        except (InputError, OSError, ImportError) as exc:
            self.error = str(exc)
            log.warning("stragglers: live step records not pushed to %s: %s", self.server, exc)
            return self
        self._post = push_records
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"stragglers-push-{self.rank}")
        self._thread.start()
        return self

    def put(self, lines: list[str]) -> None:
        """Hand over lines written to the rank's file (the flusher's thread)."""
        if self._thread is None:
            self.failed += len(lines)
            return
        with self._lock:
            self._lines.extend(lines)
            extra = len(self._lines) - BACKLOG_LINES
            if extra > 0:
                del self._lines[:extra]
                self.dropped += extra

    def _take(self) -> list[str]:
        with self._lock:
            batch, self._lines = self._lines[:BATCH_LINES], self._lines[BATCH_LINES:]
        return batch

    def _run(self) -> None:
        while True:
            stopping = self._stop.is_set()
            batch = self._take()
            while batch:
                self._send(batch)
                batch = self._take()
            if stopping:
                return
            self._wake.wait(self.config.flush_interval_s)
            self._wake.clear()

    def _send(self, batch: list[str]) -> None:
        try:
            self._post(batch, self.job, self.server, self._token, timeout=POST_TIMEOUT_S)
        except (InputError, OSError) as exc:
            self.failed += len(batch)
            if self.error is None:
                log.warning("stragglers: live step records not pushed to %s (job %s): %s",
                            self.server, self.job, exc)
            self.error = str(exc)
        else:
            self.posted += len(batch)

    def close(self) -> None:
        """Post what is left (at most :data:`CLOSE_TIMEOUT_S`), stop and log the totals."""
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join(CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("stragglers: live step records: the server %s did not answer "
                            "within %g s; the last records are not pushed", self.server,
                            CLOSE_TIMEOUT_S)
            self._thread = None
        with self._lock:
            left = len(self._lines)
        if self.failed or self.dropped or left:
            log.warning("stragglers: live step records of rank %d: %d pushed to %s, %d not "
                        "(%d failed, %d dropped from a full backlog, %d left at the end); "
                        "every record is in the rank's steps file", self.rank, self.posted,
                        self.server, self.failed + self.dropped + left, self.failed,
                        self.dropped, left)
