"""Alert delivery (defect 8 of issue 24): concurrent destinations with their own timeouts (a
webhook that never answers delays no other alert), and a real Alertmanager (Debian's
``prometheus-alertmanager``) taking the alerts through its v2 API and hearing when they
resolve — against a real `stragglers serve` process."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.alertmanager import Alertmanager, alertmanager_bin
from tests.service.helpers import HangingReceiver, Job, Receiver, Server, in_ci, poll

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)


@pytest.fixture
def hanging() -> Iterator[HangingReceiver]:
    h = HangingReceiver()
    yield h
    h.close()


def _push(server: Server, job: Job, name: str, **fields: str) -> dict[str, Any]:
    r = server.upload(job.trace, job.meta, job=name, **fields)
    assert r.status_code == 202, r.text
    doc = server.wait(r.json()["session"])
    assert doc["status"] == "done", doc["error"]
    return doc


def test_a_webhook_that_never_answers_delays_no_other_alert(
        server_factory, receiver: Receiver, hanging: HangingReceiver, slow_job: Job,
        tmp_path: Path):
    """One sender thread used to wait for the hanging webhook (up to its timeout, 3 times)
    before sending anything else: here the timeout is 300 s, and the other job's alert must
    arrive while the hanging webhook still holds its request."""
    rules = tmp_path / "alerts.yaml"
    rules.write_text(f"""
timeout_s: 300
rules:
  - {{name: slow-hang, jobs: "hang-*", slowdown: 1.1, webhook: "{hanging.url}"}}
  - {{name: slow-ok, jobs: "ok-*", slowdown: 1.1, webhook: "{receiver.url}"}}
""")
    server: Server = server_factory(args=("--alerts", str(rules)))
    _push(server, slow_job, "hang-a")
    held = hanging.received.get(timeout=120)  # the hanging webhook has the first alert
    assert held["job"] == "hang-a"
    _push(server, slow_job, "ok-b")
    body = receiver.take(timeout=120)
    assert body["job"] == "ok-b" and body["rule"] == "slow-ok"
    assert not hanging.release.is_set()  # still hanging: the alert did not wait for it
    assert held["status"] == "firing"
    by_job = {a["job"]: a for a in server.get("/api/v1/alerts").json()["alerts"]}
    assert by_job["ok-b"]["status"] == "sent" and by_job["hang-a"]["status"] == "pending"


@pytest.fixture
def alertmanager(receiver: Receiver) -> Iterator[Alertmanager]:
    if alertmanager_bin() is None:
        reason = ("alertmanager not found (install Debian's prometheus-alertmanager: "
                  "`make system-deps`)")
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    am = Alertmanager(receiver.url).start()
    yield am
    am.stop()


def _until(what: str, check: Any, timeout: float = 120.0) -> Any:
    return poll(check, what, timeout, every=0.5)


def _notifications(receiver: Receiver, status: str, job: str, timeout: float = 120.0
                   ) -> dict[str, Any]:
    """The next notification Alertmanager forwards with ``status`` for ``job``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            body = receiver.take(timeout=max(0.1, end - time.monotonic()))
        except queue.Empty:
            break
        if body.get("status") == status and \
                body.get("commonLabels", {}).get("training_job") == job:
            return body
    raise AssertionError(f"no {status} notification of {job} from Alertmanager")


def test_alerts_reach_a_real_alertmanager_and_resolve(
        server_factory, alertmanager: Alertmanager, receiver: Receiver,
        hanging: HangingReceiver, slow_job: Job, healthy_job: Job, tmp_path: Path):
    rules = tmp_path / "alerts.yaml"
    rules.write_text(f"""
alertmanager: {alertmanager.url}
webhook: {hanging.url}
timeout_s: 300
resend_s: 1
rules:
  - {{name: slow-training, jobs: "am-*", slowdown: 1.1}}
""")
    server: Server = server_factory(args=("--alerts", str(rules), "--public-url",
                                          "http://smon.example:8080"))
    doc = _push(server, slow_job, "am-a", labels='{"cluster": "a", "team-name": "ml"}')
    (alert,) = _until("the alert in Alertmanager",
                      lambda: alertmanager.alerts(training_job="am-a"))
    assert alert["labels"] == {"alertname": "slow-training", "training_job": "am-a",
                               "cause": "worker", "kind": "session", "source": "stragglers",
                               "cluster": "a", "team_name": "ml"}
    assert alert["status"]["state"] == "active"
    assert alert["annotations"]["summary"].startswith("job am-a: S = ")
    assert alert["annotations"]["session"] == doc["session"]
    assert alert["generatorURL"] == "http://smon.example:8080/jobs/am-a"
    # an open alert is sent again with its endsAt moved ahead (it would expire by itself if
    # the server stopped)
    _until("the alert refreshed", lambda: [
        a for a in alertmanager.alerts(training_job="am-a") if a["endsAt"] > alert["endsAt"]])
    fired = _notifications(receiver, "firing", "am-a")
    assert fired["alerts"][0]["labels"]["alertname"] == "slow-training"
    # the webhook still hangs on its copy: Alertmanager got it all the same
    assert hanging.received.get(timeout=60)["job"] == "am-a"
    assert not hanging.release.is_set()
    # a healthy session closes the alert: Alertmanager gets its endsAt and resolves it
    _push(server, healthy_job, "am-a")
    _until("the alert resolved in Alertmanager",
           lambda: alertmanager.alerts(training_job="am-a") == [])
    resolved = _notifications(receiver, "resolved", "am-a")
    assert resolved["alerts"][0]["status"] == "resolved"
    assert resolved["alerts"][0]["endsAt"] > resolved["alerts"][0]["startsAt"]


#: Seconds without a session before the alerts of a job close (the server checks every
#: quarter of it, at least every second): a firing notification is queued before its
#: resolution on the one sender of a webhook, so any value keeps their order.
STALE_S = 5


def test_the_alerts_of_a_job_gone_quiet_resolve(server_factory, receiver: Receiver,
                                                  slow_job: Job, tmp_path: Path):
    """A job that ended while slow used to stay alerting forever (its alert closed only with
    a later session); with ``stale_s`` its open alerts close when it sends nothing."""
    rules = tmp_path / "alerts.yaml"
    rules.write_text(f"""
webhook: {receiver.url}
stale_s: {STALE_S}
rules:
  - {{name: slow, jobs: "quiet-*", slowdown: 1.1}}
""")
    server: Server = server_factory(args=("--alerts", str(rules)))
    _push(server, slow_job, "quiet-a")
    fired = receiver.take(timeout=120)
    assert fired["status"] == "firing" and fired["job"] == "quiet-a"
    resolved = receiver.take(timeout=180)  # nothing more from the job for STALE_S
    assert resolved["status"] == "resolved" and resolved["alert"] == fired["alert"]
    (alert,) = server.get("/api/v1/alerts").json()["alerts"]
    job = server.get("/api/v1/jobs/quiet-a").json()
    assert not alert["open"] and alert["resolved_at"] >= job["last_done_at"] + STALE_S


def test_a_server_killed_between_the_post_and_its_record_sends_the_alert_again(
        server_factory, receiver: Receiver, slow_job: Job, tmp_path: Path):
    """At least once, never lost, and recognisable: the server is killed (SIGKILL, the fault
    injection) right after its webhook took a firing notification and before the alert is
    recorded as sent. The next server on the same data folder claims the pending alert when
    the hold expires and sends it again: the same body and the same ``Idempotency-Key``, once
    more only, and the alert is then ``sent``."""
    rules = tmp_path / "alerts.yaml"
    rules.write_text(f"""
rules:
  - {{name: slow, slowdown: 1.1, webhook: "{receiver.url}"}}
""")
    args = ("--alerts", str(rules), "--lease-s", "3")
    data = tmp_path / "data"
    first: Server = server_factory(data=data, args=args,
                                   env={"STRAGGLERS_CRASH_AT": "alert-posted:1"})
    r = first.upload(slow_job.trace, slow_job.meta, job="train-k")
    assert r.status_code == 202, r.text
    body = receiver.take(timeout=180)
    assert first.proc is not None
    assert first.proc.wait(60) == -9  # killed at the crash point, after the POST
    assert body["status"] == "firing" and body["job"] == "train-k"
    assert receiver.keys == [f"stragglers-alert-{body['alert']}-firing"]
    second: Server = server_factory(data=data, args=args)
    again = receiver.take(timeout=120)
    assert again == body
    assert receiver.keys == [f"stragglers-alert-{body['alert']}-firing"] * 2
    assert receiver.drain(quiet=4.0) == []  # once more only
    alerts = _until("the alert recorded as sent", lambda: [
        a for a in second.get("/api/v1/alerts").json()["alerts"]
        if a["status"] == "sent"] or None)
    assert [a["id"] for a in alerts] == [body["alert"]]
    assert second.log is not None
    assert f"alert {body['alert']} claimed" in second.log.read_text()
