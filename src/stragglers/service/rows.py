"""Typed rows of the service's store and the analysis summary that a worker hands back.

These are what flows between the store, the queue, the alerts, the metrics and the pages;
dicts with string keys appear only at the HTTP edge (:mod:`stragglers.service.api`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: Session statuses; ``queued`` and ``running`` are the durable queue.
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
STATUSES = (QUEUED, RUNNING, DONE, FAILED)


@dataclass(frozen=True)
class AnalysisSummary:
    """The figures of one analysed session kept in the database (the whole result document
    stays in ``result.json`` in the session's folder)."""

    result_dir: str
    n_workers: int
    n_steps: int
    n_ops: int
    slowdown: float
    waste: float
    discrepancy: float
    trustworthy: bool
    cause: str
    confidence: float
    workers: tuple[str, ...]
    step_time: float
    analysis_s: float


@dataclass(frozen=True)
class NewSession:
    """An upload that passed validation, about to be queued."""

    id: str
    job: str
    trace_file: str
    upload_name: str
    upload_bytes: int
    labels: dict[str, str] = field(default_factory=dict)
    client_key: str | None = None


@dataclass(frozen=True)
class JobRow:
    id: int
    name: str
    created_at: float
    sessions: int
    failed: int
    records: int
    last_session: str | None
    last_done_at: float | None
    last_slowdown: float | None
    last_waste: float | None
    last_cause: str | None
    last_confidence: float | None
    last_step_time: float | None
    last_records_at: float | None = None  # when the job last sent a records batch
    open_alerts: int = 0


@dataclass(frozen=True)
class SessionRow:
    id: str
    job: str
    job_id: int
    status: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    attempts: int
    runs: int
    error: str | None
    labels: dict[str, str]
    client_key: str | None
    trace_file: str
    upload_name: str
    upload_bytes: int
    result_dir: str | None
    n_workers: int | None
    n_steps: int | None
    n_ops: int | None
    slowdown: float | None
    waste: float | None
    discrepancy: float | None
    trustworthy: bool | None
    cause: str | None
    confidence: float | None
    workers: tuple[str, ...]
    step_time: float | None
    analysis_s: float | None

    @classmethod
    def of(cls, row: Any, job: str) -> SessionRow:
        m = row._mapping
        return cls(
            id=m["id"], job=job, job_id=m["job_id"], status=m["status"],
            created_at=m["created_at"], started_at=m["started_at"],
            finished_at=m["finished_at"], attempts=m["attempts"], runs=m["runs"],
            error=m["error"],
            labels=json.loads(m["labels"] or "{}"), client_key=m["client_key"],
            trace_file=m["trace_file"], upload_name=m["upload_name"],
            upload_bytes=m["upload_bytes"], result_dir=m["result_dir"],
            n_workers=m["n_workers"], n_steps=m["n_steps"], n_ops=m["n_ops"],
            slowdown=m["slowdown"], waste=m["waste"], discrepancy=m["discrepancy"],
            trustworthy=m["trustworthy"], cause=m["cause"], confidence=m["confidence"],
            workers=tuple(json.loads(m["workers"] or "[]")), step_time=m["step_time"],
            analysis_s=m["analysis_s"])


@dataclass(frozen=True)
class DetectionEvent:
    """One event of the streaming detector, as the adapter hands it over."""

    kind: str
    rank: int | None
    iteration: int | None
    ts: float | None
    severity: float | None
    level_s: float | None
    previous_s: float | None
    detail: dict[str, Any]


@dataclass(frozen=True)
class StreamPosition:
    """How far a job's record stream has come: the lines fed to its detector and each rank's
    stream position (iteration times given so far). Stored with every records batch (the
    ranks it moved) so that a detector rebuilt from the batches kept goes on numbering where
    the stream was, however many earlier batches were trimmed and however often the server
    restarted."""

    line: int = 0
    ranks: dict[int, int] = field(default_factory=dict)

    def moved_from(self, before: StreamPosition) -> StreamPosition:
        """This position with only the ranks that moved since ``before``."""
        return StreamPosition(self.line, {r: p for r, p in self.ranks.items()
                                          if before.ranks.get(r) != p})

    def then(self, later: StreamPosition) -> StreamPosition:
        """This position followed by ``later`` (the ranks it moved)."""
        return StreamPosition(later.line, {**self.ranks, **later.ranks})

    def to_json(self) -> str:
        return json.dumps({"line": self.line, "ranks": {str(r): p for r, p in
                                                        sorted(self.ranks.items())}})

    @classmethod
    def from_json(cls, text: str | None) -> StreamPosition | None:
        if not text:
            return None
        doc = json.loads(text)
        return cls(int(doc["line"]), {int(r): int(p) for r, p in doc["ranks"].items()})


@dataclass(frozen=True)
class EventRow:
    id: int
    job_id: int
    received_at: float
    event: DetectionEvent


@dataclass(frozen=True)
class AlertRow:
    id: int
    job: str
    job_id: int
    rule: str
    cause: str
    session_id: str | None
    event_id: int | None
    created_at: float
    status: str
    attempts: int
    sent_at: float | None
    http_status: int | None
    error: str | None
    webhook: str | None
    body: dict[str, Any]
    repeat: int
    suppressed: int
    open: bool
    resolved_at: float | None
    sender: str | None = None  # the server sending it (a store's owner), while pending
    send_until: float | None = None  # until when (renewed while it sends)
    rank: int | None = None  # the culprit of an onset alert: its rank (None: the job)


@dataclass(frozen=True)
class Totals:
    """Counters over the whole store (for /metrics)."""

    sessions: int
    failed: int
    queued: int
    running: int
    done: int
    alerts_sent: int
    alerts_failed: int
    events: int
    records: int
