"""What on-call needs to know of every job at a glance, read from the store in a few grouped
queries (never per job): the latest session's labels, the verdict's workers (the culprit),
the streaming detector's state (which ranks are slow now and since when) and when the job
last sent anything. The jobs page, its filters and ``/metrics`` are built from it.

The detector's state is read from the stored events: a rank is slow while its latest
``onset`` (or ``flapping``) event is newer than its latest ``recovery``. "Slow since" is
the wall-clock time of the earliest such open onset: the records' own ``ts`` when it is a
plausible Unix time, else the time the server received the records.
"""

from __future__ import annotations

import fnmatch
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import and_, case, func, select, true

from stragglers.service.rows import JobRow
from stragglers.service.store import Store
from stragglers.service.tables import events, jobs, sessions

#: Events that open (a rank is slow) and close (it recovered) the detector's state.
OPENING = ("onset", "flapping")
CLOSING = ("recovery",)
#: ``ts`` values between these are taken as Unix times (2001 .. 2286); others are another
#: clock (e.g. seconds since the job started) and the receive time is shown instead.
PLAUSIBLE_EPOCH = (1.0e9, 1.0e10)


@dataclass(frozen=True)
class Detection:
    """The streaming detector's state of a job (from its stored events)."""

    slow_ranks: tuple[int, ...]
    slow_since: float | None  # wall-clock time of the earliest open onset
    severity: float | None  # the largest severity among the open onsets
    onsets: int  # onset events ever stored

    @property
    def slow(self) -> bool:
        return bool(self.slow_ranks)


@dataclass(frozen=True)
class JobView:
    job: JobRow
    labels: dict[str, str] = field(default_factory=dict)
    workers: tuple[str, ...] = ()  # the latest verdict's workers
    detection: Detection | None = None  # None: the job never sent records
    last_seen: float = 0.0  # the latest session upload, record batch or event
    alert_since: float | None = None  # first seen of the oldest open alert

    @property
    def slow_since(self) -> float | None:
        """Since when the job is slow: its open onset, else its oldest open alert."""
        if self.detection is not None and self.detection.slow_since is not None:
            return self.detection.slow_since
        return self.alert_since

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def culprit(self) -> str | None:
        """The latest verdict's cause and workers; for a stream-only job the slow ranks."""
        if self.job.last_cause is not None:
            if self.job.last_cause == "none":
                return "none"
            shown = ", ".join(self.workers[:4]) + (" …" if len(self.workers) > 4 else "")
            return f"{self.job.last_cause} {shown}".strip()
        if self.detection is not None and self.detection.slow:
            ranks = self.detection.slow_ranks
            return "rank " + ", ".join(str(r) for r in ranks[:6]) + (
                " …" if len(ranks) > 6 else "")
        return None

    def matches(self, name: str | None, label: tuple[str, str | None] | None) -> bool:
        """``name``: a substring of the job name, or a glob when it has * ? [; ``label``:
        (key, value) — value None: the key is present."""
        if name:
            if any(c in name for c in "*?["):
                if not fnmatch.fnmatchcase(self.name, name):
                    return False
            elif name.lower() not in self.name.lower():
                return False
        if label is not None:
            key, value = label
            if key not in self.labels or (value is not None and self.labels[key] != value):
                return False
        return True


def view_doc(v: JobView) -> dict[str, object]:
    """The on-call fields of a job for the JSON API."""
    d = v.detection
    return {"labels": v.labels, "culprit": v.culprit, "workers": list(v.workers),
            "slow_since": v.slow_since, "last_seen": v.last_seen,
            "detection": None if d is None else {
                "slow": d.slow, "slow_ranks": list(d.slow_ranks),
                "slow_since": d.slow_since, "severity": d.severity, "onsets": d.onsets}}


def wall_clock(ts: float | None, received_at: float) -> float:
    if ts is not None and PLAUSIBLE_EPOCH[0] <= ts <= PLAUSIBLE_EPOCH[1]:
        return float(ts)
    return float(received_at)


class RecordActivity:
    """When each job last sent records: the time stored with its latest records batch
    (``JobRow.last_records_at``, which survives a restart), or the time this process saw the
    job's record count grow, or (the first sight of a job of an older server, whose batches
    carry no time) when its record log was last written (``log_mtime(job_id)``) — the latest
    of these; None: unknown."""

    def __init__(self, log_mtime: Callable[[int], float | None] | None = None) -> None:
        self.log_mtime = log_mtime
        self._seen: dict[int, tuple[int, float | None]] = {}
        self._lock = threading.Lock()

    def __call__(self, job: JobRow) -> float | None:
        with self._lock:
            prev = self._seen.get(job.id)
            if prev is None:
                when = self.log_mtime(job.id) if self.log_mtime is not None else None
                self._seen[job.id] = (job.records, when)
            elif prev[0] != job.records:
                self._seen[job.id] = (job.records, time.time())
            seen = self._seen[job.id][1]
        stored = job.last_records_at
        if stored is None or seen is None:
            return seen if stored is None else stored
        return max(stored, seen)


def job_views(store: Store, rows: Sequence[JobRow],
              records_seen: Callable[[JobRow], float | None] | None = None) -> list[JobView]:
    """The views of ``rows`` (in their order). ``records_seen(job)``: when the job last sent
    records (a :class:`RecordActivity`; None: unknown)."""
    if not rows:
        return []
    ids = [j.id for j in rows]
    # a few jobs: read theirs; many (the jobs page, /metrics): read all, one scan each
    # instead of a long IN list
    of_sessions = sessions.c.job_id.in_(ids) if len(ids) <= 20 else true()
    of_events = events.c.job_id.in_(ids) if len(ids) <= 20 else true()
    with store.engine.connect() as conn:
        latest = (select(sessions.c.job_id, func.max(sessions.c.created_at).label("t"))
                  .where(of_sessions).group_by(sessions.c.job_id).subquery())
        labels: dict[int, str] = {}
        uploaded: dict[int, float] = {}
        for r in conn.execute(select(sessions.c.job_id, sessions.c.labels,
                                     sessions.c.created_at).join(latest, and_(
                                         sessions.c.job_id == latest.c.job_id,
                                         sessions.c.created_at == latest.c.t))):
            labels[r.job_id] = r.labels
            uploaded[r.job_id] = float(r.created_at)
        of_jobs = jobs.c.id.in_(ids) if len(ids) <= 20 else true()
        workers: dict[str, str] = {r.id: r.workers for r in conn.execute(
            select(sessions.c.id, sessions.c.workers)
            .join(jobs, jobs.c.last_session == sessions.c.id).where(of_jobs))}
        # the latest opening and closing event of each (job, rank)
        marks = conn.execute(
            select(events.c.job_id, events.c.rank, events.c.kind,
                   func.max(events.c.id).label("id"))
            .where(and_(of_events, events.c.kind.in_(OPENING + CLOSING)))
            .group_by(events.c.job_id, events.c.rank, events.c.kind)).all()
        stats = {r.job_id: (int(r.n_onsets or 0), float(r.last)) for r in conn.execute(
            select(events.c.job_id,
                   func.sum(case((events.c.kind == "onset", 1), else_=0)).label("n_onsets"),
                   func.max(events.c.received_at).label("last"))
            .where(of_events).group_by(events.c.job_id))}
        opened: dict[tuple[int, int | None], int] = {}
        closed: dict[tuple[int, int | None], int] = {}
        for m in marks:
            target = opened if m.kind in OPENING else closed
            key = (m.job_id, m.rank)
            target[key] = max(target.get(key, 0), int(m.id))
        open_ids = [i for key, i in opened.items() if i > closed.get(key, 0)]
        open_rows = conn.execute(
            select(events.c.id, events.c.job_id, events.c.rank, events.c.ts,
                   events.c.received_at, events.c.severity)
            .where(events.c.id.in_(open_ids))).all() if open_ids else []
    open_by_job: dict[int, list[tuple[int | None, float, float | None]]] = {}
    for o in open_rows:
        open_by_job.setdefault(o.job_id, []).append(
            (o.rank, wall_clock(o.ts, o.received_at), o.severity))
    alert_since: dict[int, float] = {}
    for a in store.open_alerts():
        first = float(a.body.get("first_seen") or a.created_at)
        alert_since[a.job_id] = min(first, alert_since.get(a.job_id, first))
    out = []
    for j in rows:
        mtime = records_seen(j) if records_seen is not None and j.records else None
        n_onsets, last_event = stats.get(j.id, (0, 0.0))
        detection = None
        if j.records > 0 or j.id in stats:
            opens = open_by_job.get(j.id, [])
            sev = [s for _, _, s in opens if s is not None]
            detection = Detection(
                slow_ranks=tuple(sorted(r for r, _, _ in opens if r is not None)),
                slow_since=min((t for _, t, _ in opens), default=None),
                severity=max(sev) if sev else None, onsets=n_onsets)
        seen = max(j.created_at, uploaded.get(j.id, 0.0), j.last_done_at or 0.0, last_event,
                   mtime or 0.0)
        out.append(JobView(
            job=j, labels=json.loads(labels.get(j.id) or "{}"),
            workers=tuple(json.loads(workers.get(j.last_session or "", "") or "[]")),
            detection=detection, last_seen=seen, alert_since=alert_since.get(j.id)))
    return out


def fresh(views: Sequence[JobView], stale_s: float, now: float | None = None
          ) -> list[JobView]:
    """The jobs that sent a session or records within the last ``stale_s`` seconds."""
    t = time.time() if now is None else now
    return [v for v in views if t - v.last_seen <= stale_s]
