"""Alerts: rules checked on each analysed session and each detection onset, deduplicated per
culprit — (job, rule, cause) for a session rule, (job, rule, rank) for an onset rule — with a
re-alert interval, stored, logged, POSTed to a webhook and sent to an Alertmanager (its v2
API), with a ``resolved`` notification when an alert closes.

Webhook body (JSON, ``Content-Type: application/json``)::

    {"status": "firing" | "resolved", "alert": 7, "rule": "slow-training",
     "job": "train-a", "cause": "worker", "kind": "session" | "onset",
     "message": "job train-a: S = 1.973 ...", "session": "ID" | null,
     "slowdown": 1.973 | null, "waste": 0.493 | null, "labels": {"cluster": "a"},
     "verdict": {"cause": "worker", "confidence": 0.93, "workers": ["3,1"]} | null,
     "rank": 3 | null,
     "event": {"rank": 3, "iteration": 120, "severity": 0.31, ...} | null,
     "repeat": 0, "first_seen": 1767225600.0, "time": 1767225600.0,
     "resolved_at": null | 1767229200.0, "url": "http://127.0.0.1:8080/jobs/train-a"}

An onset alert's body also has ``"rank"`` (the slow rank; ``null`` for a session alert).
``repeat`` counts the notifications sent for the same culprit while it stayed open; an alert
closes when a later session of the job no longer matches the rule (or, for onset rules, when
the detector reports the recovery *of that rank* — another rank's recovery leaves it open),
or when the job sent no session and no records for ``stale_s`` (1 h by default), and the
webhook then gets the same body with ``"status": "resolved"``.

Alertmanager (``alertmanager: URL`` in the rules file): ``POST URL/api/v2/alerts`` with
``[{"labels": {"alertname": RULE, "training_job": JOB, "cause": …, "kind": …, "rank": …
(onset alerts), <the session's labels>}, "annotations": {"summary": MESSAGE, "url": …},
"startsAt", "endsAt", "generatorURL": <the job's page>}]``. Open alerts are sent again
every ``resend_s`` with ``endsAt`` four intervals ahead (as Prometheus does), so an alert
whose server stopped expires by itself; a closed one is sent with ``endsAt`` = the time it
closed. Grouping, silences, inhibition and routing are Alertmanager's.

Delivery is concurrent: each destination (every webhook URL, the Alertmanager) has its own
sender thread and queue, and each request its timeout (``timeout_s``), so a destination
that never answers delays only its own notifications. A notification is stored as
``pending`` before it is sent, held by the server that raised it (``sender``, renewed every
third of the store's lease while it sends); a pending alert whose hold expired (its server
stopped or was killed before sending it) is claimed by one server (a conditional UPDATE in
the store) and sent then, so several servers on one database send each alert once — but
one whose server was killed between its POST and recording it as sent: the server that claims
it sends it again (at least once, never lost), with the same ``alert`` id and the same
``Idempotency-Key: stragglers-alert-ID-KIND`` header (KIND ``firing`` or ``resolved``), by
which a receiver drops the repeat. Each
destination is tried 3 times (1 s, 2 s apart); the alert is ``sent`` when every destination
took it, else ``failed`` with the destination's error.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from stragglers.service.alert_rules import AlertConfig, Rule
from stragglers.service.crash import crashpoint
from stragglers.service.overview import job_views
from stragglers.service.prometheus import JOB_LABEL, label_name
from stragglers.service.rows import AlertRow, EventRow, JobRow, SessionRow
from stragglers.service.store import Store

log = logging.getLogger("stragglers.service.alerts")

ATTEMPTS = 3
FIRING, RESOLVED, REFRESH = "firing", "resolved", "refresh"


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def alertmanager_alert(row: AlertRow, ends_at: float) -> dict[str, Any]:
    """One alert of Alertmanager's v2 API (``postableAlert``) for a stored alert."""
    body = row.body
    labels = {"alertname": row.rule, JOB_LABEL: row.job, "cause": row.cause,
              "kind": str(body.get("kind") or "session"), "source": "stragglers"}
    if row.rank is not None:  # one alert per slow rank (Alertmanager tells them by labels)
        labels["rank"] = str(row.rank)
    for key, value in sorted((body.get("labels") or {}).items()):
        if value:
            labels.setdefault(label_name(key), str(value))
    annotations = {"summary": str(body.get("message", "")), "url": str(body.get("url", ""))}
    for key in ("session", "slowdown", "waste"):
        if body.get(key) is not None:
            annotations[key] = str(body[key])
    return {"labels": labels, "annotations": annotations,
            "startsAt": rfc3339(float(body.get("first_seen") or row.created_at)),
            "endsAt": rfc3339(ends_at), "generatorURL": str(body.get("url", ""))}


@dataclass(frozen=True)
class _Delivery:
    kind: str  # firing | resolved | refresh
    alert_id: int = 0
    resolved_at: float | None = None


class _Destination:
    """One receiver (a webhook URL or an Alertmanager) with its own queue and thread."""

    def __init__(self, alerter: Alerter, url: str, alertmanager: bool) -> None:
        self.alerter = alerter
        self.url = url
        self.alertmanager = alertmanager
        self.post_url = url.rstrip("/") + "/api/v2/alerts" if alertmanager else url
        self.queue: queue.Queue[_Delivery | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"stragglers-alerts {url[:60]}")
        self.thread.start()

    @property
    def name(self) -> str:
        return f"{'alertmanager' if self.alertmanager else 'webhook'} {self.url}"

    def _run(self) -> None:
        with httpx.Client(timeout=self.alerter.config.timeout_s) as client:
            while True:
                item = self.queue.get()
                if item is None:
                    return
                try:
                    self._handle(client, item)
                except Exception:  # a store or encoding error must not end the thread
                    log.exception("alert delivery to %s failed", self.name)

    def _payload(self, item: _Delivery) -> Any:
        store, resend = self.alerter.store, self.alerter.config.resend_s
        now = time.time()
        if item.kind == REFRESH:
            return [alertmanager_alert(r, now + 4 * resend) for r in store.open_alerts()]
        row = store.alert(item.alert_id)
        if row is None:
            return None
        if self.alertmanager:
            ends = item.resolved_at if item.kind == RESOLVED else now + 4 * resend
            return [alertmanager_alert(row, float(ends or now))]
        return {**row.body, "status": item.kind, "resolved_at": item.resolved_at}

    @staticmethod
    def _headers(item: _Delivery) -> dict[str, str]:
        """``Idempotency-Key: stragglers-alert-ID-KIND``: the same for every try of one
        notification, by any server (a server killed between the POST and recording it as
        sent: the server that claims the alert sends it again with the same key)."""
        if item.kind == REFRESH:
            return {}
        return {"Idempotency-Key": f"stragglers-alert-{item.alert_id}-{item.kind}"}

    def _handle(self, client: httpx.Client, item: _Delivery) -> None:
        payload = self._payload(item)
        if payload is None or payload == []:
            return
        tries = 1 if item.kind == REFRESH else ATTEMPTS
        error: str | None = None
        status: int | None = None
        attempt = 0
        for attempt in range(1, tries + 1):
            try:
                resp = client.post(self.post_url, json=payload, headers=self._headers(item))
                status = resp.status_code
                if resp.is_success:
                    error = None
                    if item.kind == FIRING:
                        crashpoint("alert-posted")
                    break
                error = f"HTTP {status}: {resp.text[:200]}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt < tries:
                time.sleep(float(attempt))
        if error is not None:
            log.error("alert %s %s: %s failed after %d attempts: %s", item.alert_id or "",
                      item.kind, self.name, tries, error)
        if item.kind == FIRING:
            self.alerter._delivered(item.alert_id, self, status, error, attempt)


class Alerter:
    """Checks the rules and delivers the notifications (one sender thread per
    destination)."""

    def __init__(self, store: Store, config: AlertConfig, public_url: str,
                 records_seen: Callable[[JobRow], float | None] | None = None) -> None:
        self.store = store
        self.config = config
        self.public_url = public_url.rstrip("/")
        self.records_seen = records_seen
        self._destinations: dict[tuple[str, bool], _Destination] = {}
        self._outstanding: dict[int, tuple[int, list[str], int | None, int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None
        self._started = False
        self._last_refresh = time.monotonic()
        #: (when, failed rounds) of the current outage of the housekeeping, None when it works
        self._outage: tuple[float, int] | None = None

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
                self._resolve(s.job_id, rule.name)
                continue
            self._resolve(s.job_id, rule.name, keep_cause=s.cause)
            workers = list(s.workers[:16])
            body = self._body(rule, s.job, s.cause, "session", _session_message(rule, s), {
                "session": s.id, "slowdown": s.slowdown, "waste": s.waste,
                "labels": dict(s.labels),
                "verdict": {"cause": s.cause, "confidence": s.confidence, "workers": workers},
                "rank": None, "event": None})
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
                if e.kind == "recovery":  # this rank recovered: its alert only
                    self._resolve(row.job_id, rule.name, rank=e.rank)
                if (e.kind not in ("onset", "flapping") or e.severity is None
                        or e.severity < rule.onset):
                    continue
                how = "slowed down" if e.kind == "onset" else "is flapping, slowed down"
                msg = (f"job {job}: rank {e.rank} {how} by {100 * e.severity:.0f}% at "
                       f"iteration {e.iteration} (rule {rule.name}: onset >= "
                       f"{100 * rule.onset:.0f}%)")
                body = self._body(rule, job, "onset", "onset", msg, {
                    "session": None, "slowdown": None, "waste": None, "verdict": None,
                    "labels": {}, "rank": e.rank,
                    "event": {"id": row.id, "rank": e.rank, "iteration": e.iteration,
                              "ts": e.ts, "severity": e.severity, "level_s": e.level_s,
                              "previous_s": e.previous_s}})
                found = self._raise(rule, row.job_id, "onset", body, event_id=row.id,
                                    rank=e.rank)
                if found is not None:
                    raised.append(found)
        return raised

    def _body(self, rule: Rule, job: str, cause: str, kind: str, message: str,
              extra: dict[str, Any]) -> dict[str, Any]:
        return {"rule": rule.name, "job": job, "cause": cause, "kind": kind,
                "message": message, "time": time.time(),
                "url": f"{self.public_url}/jobs/{job}", **extra}

    def _raise(self, rule: Rule, job_id: int, cause: str, body: dict[str, Any],
               session_id: str | None = None, event_id: int | None = None,
               rank: int | None = None) -> AlertRow | None:
        row = self.store.raise_alert(job_id, rule.name, cause, session_id, event_id,
                                     rule.webhook, body, rule.realert_s, rank=rank)
        shown = cause if rank is None else f"{cause} rank={rank}"
        if row is None:
            log.info("alert suppressed (re-alert interval): job %s rule %s cause %s",
                     body["job"], rule.name, shown)
            return None
        log.warning("ALERT %d rule=%s job=%s cause=%s: %s", row.id, rule.name, body["job"],
                    shown, body["message"])
        self._send(row, FIRING)
        return row

    def _resolve(self, job_id: int, rule: str, keep_cause: str | None = None,
                 rank: int | None = None) -> int:
        """Close the open alerts of (job, rule) — of ``rank`` only when given — but
        ``keep_cause``'s, and notify their destinations."""
        closing = [a for a in self.store.open_alerts(job_id, rule, rank)
                   if keep_cause is None or a.cause != keep_cause]
        if not closing:
            return 0
        closed = set(self.store.close_alerts([a.id for a in closing]))
        closing = [a for a in closing if a.id in closed]  # another server may close some
        now = time.time()
        for a in closing:
            log.warning("RESOLVED %d rule=%s job=%s cause=%s%s", a.id, a.rule, a.job, a.cause,
                        "" if a.rank is None else f" rank={a.rank}")
            self._send(a, RESOLVED, now)
        return len(closing)

    # -- delivery -------------------------------------------------------------------------
    def _targets(self, row: AlertRow) -> list[_Destination]:
        wanted = [(url, am) for url, am in ((row.webhook, False),
                                            (self.config.alertmanager, True)) if url]
        with self._lock:
            for key in wanted:
                if key not in self._destinations:
                    self._destinations[key] = _Destination(self, *key)
            return [self._destinations[k] for k in wanted]

    def _send(self, row: AlertRow, kind: str, resolved_at: float | None = None) -> None:
        if not self._started:
            return  # start() sends what is pending
        targets = self._targets(row)
        if kind == FIRING:
            if not targets:
                self.store.mark_alert(row.id, "logged", 0, None, None)
                return
            with self._lock:
                self._outstanding[row.id] = (len(targets), [], None, 0)
        elif row.status == "logged":
            return
        for d in targets:
            d.queue.put(_Delivery(kind, row.id, resolved_at))

    def _delivered(self, alert_id: int, dest: _Destination, status: int | None,
                   error: str | None, attempts: int) -> None:
        """A destination is done with a firing notification; the last one marks it (its
        attempts: the most any destination took; its HTTP status: the first one's)."""
        with self._lock:
            left, errors, first_status, most = self._outstanding.get(
                alert_id, (1, [], None, 0))
            if error is not None:
                errors.append(f"{dest.name}: {error}")
            first_status = first_status if first_status is not None else status
            most = max(most, attempts)
            if left > 1:
                self._outstanding[alert_id] = (left - 1, errors, first_status, most)
                return
            self._outstanding.pop(alert_id, None)
        self.store.mark_alert(alert_id, "failed" if errors else "sent", most,
                              first_status, "; ".join(errors) or None)

    def start(self) -> None:
        self._started = True
        self.send_unclaimed()
        self._refresher = threading.Thread(target=self._housekeeping, daemon=True,
                                           name="stragglers-alerts-housekeeping")
        self._refresher.start()

    def send_unclaimed(self) -> int:
        """Send the pending alerts no server holds (a server stopped or killed before
        sending them): each is claimed in the store by one server only."""
        rows = self.store.claim_pending_alerts()
        for row in rows:
            log.warning("alert %d claimed (its server stopped holding it): sending it",
                        row.id)
            self._send(row, FIRING)
        return len(rows)

    def _housekeeping(self) -> None:
        """Send the open alerts to the Alertmanager again every ``resend_s``; close the
        open alerts of jobs quiet for ``stale_s``."""
        cfg = self.config
        # every third of the store's lease: renew the hold on the alerts being sent, take
        # the pending alerts of a server that stopped holding them
        periods = [max(0.05, self.store.lease_s / 3)]
        if cfg.alertmanager:
            periods.append(cfg.resend_s)
        if cfg.stale_s > 0:
            periods.append(min(60.0, max(1.0, cfg.stale_s / 4)))
        tick = min(periods)
        self._last_refresh = time.monotonic()
        while not self._stop.wait(tick):
            self.housekeeping_round()

    def housekeeping_round(self) -> bool:
        """One round of housekeeping; False when it failed. A failure (the database down for
        a while) is logged once per outage, one line without a traceback, and the recovery
        once: a round every few seconds must not flood the log while the database is
        away."""
        try:
            self._housekeep()
        except Exception as exc:  # the database may be down for a while: try again later
            if self._outage is None:
                self._outage = (time.monotonic(), 0)
                why = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [""])[0]
                log.warning("alert housekeeping failed (%s: %s); retrying every round, "
                            "logged again once it works", type(exc).__name__, why[:200])
            self._outage = (self._outage[0], self._outage[1] + 1)
            return False
        if self._outage is not None:
            since, rounds = self._outage
            self._outage = None
            log.warning("alert housekeeping works again after %.0f s (%d failed round(s))",
                        time.monotonic() - since, rounds)
        return True

    def _housekeep(self) -> None:
        cfg = self.config
        with self._lock:
            sending = list(self._outstanding)
        self.store.renew_alerts(sending)
        self.send_unclaimed()
        if cfg.stale_s > 0:
            self.expire_stale()
        if cfg.alertmanager and time.monotonic() - self._last_refresh >= cfg.resend_s:
            self._last_refresh = time.monotonic()
            with self._lock:
                key = (cfg.alertmanager, True)
                d = self._destinations.get(key) or self._destinations.setdefault(
                    key, _Destination(self, cfg.alertmanager, True))
            d.queue.put(_Delivery(REFRESH))

    def expire_stale(self, now: float | None = None) -> int:
        """Close (and notify) the open alerts of jobs that sent no session and no records
        for ``stale_s``: a job that ended while slow does not stay alerting forever."""
        open_ = self.store.open_alerts()
        if not open_:
            return 0
        t = time.time() if now is None else now
        ids = {a.job_id for a in open_}
        quiet = {v.job.id for v in job_views(self.store, [j for j in self.store.jobs()
                                                          if j.id in ids], self.records_seen)
                 if t - v.last_seen > self.config.stale_s}
        closed = 0
        for job_id, rule in sorted({(a.job_id, a.rule) for a in open_ if a.job_id in quiet}):
            log.info("job %d quiet for more than %g s: closing its alerts of rule %s", job_id,
                     self.config.stale_s, rule)
            closed += self._resolve(job_id, rule)
        return closed

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            dests = list(self._destinations.values())
        for d in dests:
            d.queue.put(None)
        end = time.monotonic() + 10
        for d in dests:
            d.thread.join(timeout=max(0.0, end - time.monotonic()))


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
