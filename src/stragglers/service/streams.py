"""Record streams: ``POST /api/v1/jobs/{job}/records`` bodies go through here.

A batch is checked whole first (a bad line rejects it with nothing stored), then appended
to the job's record log (``DIR/records/JOB_ID.jsonl``, fsynced), fed to the job's detector
and its events stored. One lock per job keeps a job's records in order; jobs run in
parallel. After a restart the detector of a job is rebuilt from the tail of its log (at
most ``replay_lines`` records) the first time the job sends records again. A log larger than
``log_bytes`` is rotated (one previous generation kept).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path

from stragglers.service.crash import crashpoint
from stragglers.service.datadir import DataDir
from stragglers.service.detection import JobDetector, check_records
from stragglers.service.records import EventRow
from stragglers.service.store import Store


class RecordStreams:
    def __init__(self, store: Store, data: DataDir, replay_lines: int = 200_000,
                 log_bytes: int = 64 * 2**20) -> None:
        self.store = store
        self.data = data
        self.replay_lines = replay_lines
        self.log_bytes = log_bytes
        self._detectors: dict[int, JobDetector] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, job_id: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(job_id, threading.Lock())

    def ingest(self, job: str, text: str) -> tuple[int, list[EventRow]]:
        """Check, log and detect a batch of JSON-lines records of ``job``."""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        n = check_records(lines, f"records of job {job}")
        job_id = self.store.ensure_job(job)
        with self._lock(job_id):
            detector = self._detectors.get(job_id)
            log_path = self.data.records(job_id)
            if detector is None:
                detector = JobDetector(source=f"records of job {job}")
                detector.replay(_tail(log_path, self.replay_lines))
                self._detectors[job_id] = detector
            _append(log_path, lines, self.log_bytes)
            found = detector.feed(lines)
            crashpoint("records-logged")
            stored = self.store.add_events(job_id, n, found)
            crashpoint("records-stored")
            return n, stored


def _tail(path: Path, n: int) -> list[str]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8", errors="replace") as fh:
        return list(deque(fh, maxlen=n))


def _append(path: Path, lines: list[str], max_bytes: int) -> None:
    if path.exists() and path.stat().st_size > max_bytes:
        os.replace(path, path.with_suffix(".jsonl.1"))
    with path.open("a", encoding="utf-8") as fh:
        fh.write("".join(ln.rstrip("\n") + "\n" for ln in lines))
        fh.flush()
        os.fsync(fh.fileno())
