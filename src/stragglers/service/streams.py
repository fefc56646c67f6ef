"""Record streams: ``POST /api/v1/jobs/{job}/records`` bodies go through here.

A batch is checked whole first (a bad line rejects it with nothing stored), fed to the job's
detector, and committed **in one transaction** with the events it produced and the job's
record count (the batch's lines are the detector's replay log, in the database). A
``kill -9`` at any point leaves all of it or none. A batch sent with an idempotency key that
the job already has is not applied again: its answer (records, events) is returned as
stored, so a client that retries a batch whose answer it never got gets exactly what an
uninterrupted run gives.

One lock per job keeps a job's batches in order; jobs run in parallel. After a restart, or
when a commit failed (the detector had already seen the batch), the detector of a job is
rebuilt from the batches kept (the latest ``replay_lines`` records at least, whole batches)
the first time the job sends records again. Every batch is stored with the stream position
it reached (:class:`~stragglers.service.rows.StreamPosition`), so the rebuilt detector
numbers iterations as the stream did: from the position where the kept batches begin (the
stream's start when nothing was trimmed), aligned after the replay with the position the
last batch reached. Events carry the job's iteration number when the records have one, else
that position — never a count from the start of the replay. A job's legacy log file
``DIR/records/JOB_ID.jsonl`` (servers before the replay log moved into the database) is
replayed first.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from stragglers.detect.robust import RobustSettings
from stragglers.limits import check_limit
from stragglers.service.crash import crashpoint
from stragglers.service.datadir import DataDir
from stragglers.service.detection import JobDetector, check_records
from stragglers.service.rows import EventRow, StreamPosition
from stragglers.service.store import Store


@dataclass(frozen=True)
class BatchAnswer:
    records: int
    events: list[EventRow]
    duplicate: bool = False


class RecordStreams:
    def __init__(self, store: Store, data: DataDir, replay_lines: int = 200_000,
                 detector: RobustSettings | None = None) -> None:
        self.store = store
        self.detector = detector or RobustSettings()
        self.data = data
        self.replay_lines = replay_lines
        self._detectors: dict[int, JobDetector] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, job_id: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(job_id, threading.Lock())

    def _detector(self, job: str, job_id: int) -> JobDetector:
        detector = self._detectors.get(job_id)
        if detector is None:
            detector = JobDetector(source=f"records of job {job}", settings=self.detector)
            legacy = _tail(self.data.records(job_id), self.replay_lines)
            base, kept = self.store.replay_log(job_id)
            if legacy:
                detector.replay(legacy)
            if base is not None:
                detector.resume(base)
            reached = base or StreamPosition()
            for lines, position in kept:
                detector.replay(lines)
                if position is not None:
                    reached = reached.then(position)
            if base is not None or any(p is not None for _, p in kept):
                detector.resume(reached)
            self._detectors[job_id] = detector
        return detector

    def ingest(self, job: str, text: str, key: str | None = None) -> BatchAnswer:
        """Check, detect and commit a batch of JSON-lines records of ``job``."""
        lines = [ln for ln in text.splitlines() if ln.strip()]
        check_limit("records_batch", len(lines), f"records of job {job}")
        known = self.store.job(job) if key is not None else None
        if known is not None and key is not None:  # a replay is answered without parsing
            found = self.store.batch_answer(known.id, key)
            if found is not None:
                return BatchAnswer(found[0], found[1], duplicate=True)
        n = check_records(lines, f"records of job {job}")
        job_id = self.store.ensure_job(job)
        with self._lock(job_id):
            if key is not None:
                found = self.store.batch_answer(job_id, key)
                if found is not None:
                    return BatchAnswer(found[0], found[1], duplicate=True)
            detector = self._detector(job, job_id)
            before = detector.position()
            events = detector.feed(lines)
            moved = detector.position().moved_from(before)
            try:
                stored = self.store.add_batch(job_id, key, lines, n, events,
                                              self.replay_lines, moved)
            except BaseException:
                # the detector saw a batch that is not stored: rebuild it from the store
                self._detectors.pop(job_id, None)
                raise
            if stored is None:  # the same key committed meanwhile (another server)
                self._detectors.pop(job_id, None)
                again = self.store.batch_answer(job_id, key or "")
                assert again is not None
                return BatchAnswer(again[0], again[1], duplicate=True)
            crashpoint("records-stored")
            return BatchAnswer(n, stored)


def _tail(path: Path, n: int) -> list[str]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8", errors="replace") as fh:
        return [ln.rstrip("\n") for ln in deque(fh, maxlen=n) if ln.strip()]
