"""Alerts: rules checked on each analysed session and each detection onset, deduplicated per
(job, rule, cause) with a re-alert interval, stored, logged and POSTed to a webhook.

Webhook body (JSON, ``Content-Type: application/json``)::

    {"alert": 7, "rule": "slow-training", "job": "train-a", "cause": "worker",
     "kind": "session" | "onset", "message": "job train-a: S = 1.973 ...",
     "session": "ID" | null, "slowdown": 1.973 | null, "waste": 0.493 | null,
     "verdict": {"cause": "worker", "confidence": 0.93, "workers": ["3,1"]} | null,
     "event": {"rank": 3, "iteration": 120, "severity": 0.31, ...} | null,
     "repeat": 0, "first_seen": 1767225600.0, "time": 1767225600.0,
     "url": "http://127.0.0.1:8080/jobs/train-a"}

``repeat`` counts the notifications sent for the same (job, rule, cause) while it stayed
open; an alert closes when a later session of the job no longer matches the rule (or, for
onset rules, when the detector reports a recovery). A notification is stored as
``pending`` before it is sent, so one not yet delivered when the server stops is sent after
it starts again; delivery is tried 3 times (1 s, 2 s apart), then marked ``failed``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

import httpx

from stragglers.service.alert_rules import AlertConfig, Rule
from stragglers.service.records import AlertRow, EventRow, SessionRow
from stragglers.service.store import Store

log = logging.getLogger("stragglers.service.alerts")

ATTEMPTS = 3


class Alerter:
    """Checks the rules and delivers the notifications (one sender thread)."""

    def __init__(self, store: Store, config: AlertConfig, public_url: str) -> None:
        self.store = store
        self.config = config
        self.public_url = public_url.rstrip("/")
        self._outbox: queue.Queue[int | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    # -- checking -------------------------------------------------------------------------
    def session_done(self, s: SessionRow) -> list[AlertRow]:
        """Check the session rules against an analysed session."""
        if s.slowdown is None or s.cause is None or s.confidence is None:
            return []
        raised = []
        for rule in self.config.rules:
            if not (rule.on_sessions and rule.matches_job(s.job)):
                continue
            if not rule.matches_session(s.slowdown, s.cause, s.confidence):
                self.store.resolve_alerts(s.job_id, rule.name)
                continue
            self.store.resolve_alerts(s.job_id, rule.name, keep_cause=s.cause)
            workers = list(s.workers[:16])
            body = self._body(rule, s.job, s.cause, "session", _session_message(rule, s), {
                "session": s.id, "slowdown": s.slowdown, "waste": s.waste,
                "verdict": {"cause": s.cause, "confidence": s.confidence, "workers": workers},
                "event": None})
            found = self._raise(rule, s.job_id, s.cause, body, session_id=s.id)
            if found is not None:
                raised.append(found)
        return raised

    def events_stored(self, job: str, stored: list[EventRow]) -> list[AlertRow]:
        """Check the onset rules against new detection events of a job."""
        raised = []
        for row in stored:
            e = row.event
            for rule in self.config.rules:
                if rule.onset is None or not rule.matches_job(job):
                    continue
                if e.kind == "recovery":
                    self.store.resolve_alerts(row.job_id, rule.name)
                if (e.kind not in ("onset", "flapping") or e.severity is None
                        or e.severity < rule.onset):
                    continue
                how = "slowed down" if e.kind == "onset" else "is flapping, slowed down"
                msg = (f"job {job}: rank {e.rank} {how} by {100 * e.severity:.0f}% at "
                       f"iteration {e.iteration} (rule {rule.name}: onset >= "
                       f"{100 * rule.onset:.0f}%)")
                body = self._body(rule, job, "onset", "onset", msg, {
                    "session": None, "slowdown": None, "waste": None, "verdict": None,
                    "event": {"id": row.id, "rank": e.rank, "iteration": e.iteration,
                              "ts": e.ts, "severity": e.severity, "level_s": e.level_s,
                              "previous_s": e.previous_s}})
                found = self._raise(rule, row.job_id, "onset", body, event_id=row.id)
                if found is not None:
                    raised.append(found)
        return raised

    def _body(self, rule: Rule, job: str, cause: str, kind: str, message: str,
              extra: dict[str, Any]) -> dict[str, Any]:
        return {"rule": rule.name, "job": job, "cause": cause, "kind": kind,
                "message": message, "time": time.time(),
                "url": f"{self.public_url}/jobs/{job}", **extra}

    def _raise(self, rule: Rule, job_id: int, cause: str, body: dict[str, Any],
               session_id: str | None = None, event_id: int | None = None) -> AlertRow | None:
        row = self.store.raise_alert(job_id, rule.name, cause, session_id, event_id,
                                     rule.webhook, body, rule.realert_s)
        if row is None:
            log.info("alert suppressed (re-alert interval): job %s rule %s cause %s",
                     body["job"], rule.name, cause)
            return None
        log.warning("ALERT %d rule=%s job=%s cause=%s: %s", row.id, rule.name, body["job"],
                    cause, body["message"])
        self._outbox.put(row.id)
        return row

    # -- delivery -------------------------------------------------------------------------
    def start(self) -> None:
        for row in self.store.pending_alerts():
            self._outbox.put(row.id)
        self._thread = threading.Thread(target=self._send_forever, name="stragglers-alerts",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._outbox.put(None)
            self._thread.join(timeout=10)

    def _send_forever(self) -> None:
        with httpx.Client(timeout=self.config.timeout_s) as client:
            while True:
                alert_id = self._outbox.get()
                if alert_id is None:
                    return
                row = self.store.alert(alert_id)
                if row is not None and row.status == "pending":
                    self._deliver(client, row)

    def _deliver(self, client: httpx.Client, row: AlertRow) -> None:
        if row.webhook is None:
            self.store.mark_alert(row.id, "logged", 0, None, None)
            return
        error: str | None = None
        status: int | None = None
        for attempt in range(1, ATTEMPTS + 1):
            try:
                resp = client.post(row.webhook, json=row.body)
                status = resp.status_code
                if resp.is_success:
                    self.store.mark_alert(row.id, "sent", attempt, status, None)
                    return
                error = f"HTTP {status}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt < ATTEMPTS:
                time.sleep(float(attempt))
        log.error("alert %d: webhook %s failed after %d attempts: %s", row.id, row.webhook,
                  ATTEMPTS, error)
        self.store.mark_alert(row.id, "failed", ATTEMPTS, status, error)


def _session_message(rule: Rule, s: SessionRow) -> str:
    parts = [f"job {s.job}: S = {s.slowdown:.3f}"]
    if s.waste is not None:
        parts.append(f"({100 * s.waste:.1f}% of GPU time wasted)")
    parts.append(f"verdict {s.cause}")
    if s.workers:
        parts.append(f"({', '.join(s.workers[:4])}{' ...' if len(s.workers) > 4 else ''})")
    parts.append(f"confidence {s.confidence:.2f}")
    cond = [f"S >= {rule.slowdown:g}" if rule.slowdown is not None else "",
            f"cause {rule.cause}" if rule.cause is not None else "",
            f"confidence >= {rule.confidence:g}" if rule.confidence is not None else ""]
    return " ".join(parts) + f" [rule {rule.name}: {', '.join(c for c in cond if c)}]"
