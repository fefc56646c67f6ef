"""Nothing lost, nothing doubled (issue 24, item 1), with real `stragglers serve` processes:
restarts during an analysis, analyses whose worker dies, the retry endpoint, records
batches cut by `kill -9` and replayed with their idempotency keys, and a database that goes
away (a real PostgreSQL server stopped and started again).

Processes are cut at exact steps with ``STRAGGLERS_CRASH_AT`` (the process kills or stops
itself there, see ``stragglers.service.crash``); nothing waits on time.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.service.helpers import TOKEN, Job, Receiver, Server, named_children, poll
from tests.service.postgres import PostgresServer, running_postgres

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

CRASH = "STRAGGLERS_CRASH_AT"


def _status(server: Server, session: str) -> str:
    return str(server.get(f"/api/v1/sessions/{session}?result=0").json()["status"])


def _stopped(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return any(ln.startswith("State:") and "T" in ln.split()[1] for ln in text.splitlines())


def _analysis_hung(server: Server) -> bool:
    assert server.proc is not None
    return any(_stopped(p) for p in named_children(server.proc.pid, "smon-analysis"))


def test_restarts_during_an_analysis_do_not_use_up_its_attempts(server_factory, slow_job: Job,
                                                                 tmp_path: Path):
    """Defect 1: four stops (SIGTERM and kill -9) while a valid session is analysed; before,
    each claim counted an attempt and the session was failed for good after three."""
    data = tmp_path / "data"
    hang = {CRASH: "analysis-started:1:stop"}  # each server's analysis worker hangs
    server = server_factory(data=data, env=hang)
    r = server.upload(slow_job.trace, slow_job.meta, job="restarts")
    assert r.status_code == 202, r.text
    session = r.json()["session"]
    for how in ("term", "kill", "term", "kill"):
        poll(lambda s=server: _analysis_hung(s) or _status(s, session) in ("done", "failed"),
             "the analysis worker reaches its hang point")
        doc = server.get(f"/api/v1/sessions/{session}?result=0").json()
        assert doc["status"] == "running", doc["error"]
        if how == "term":
            server.stop()  # uvicorn exits by the signal it caught, after its shutdown
            assert server.proc is not None and server.proc.returncode in (0, -15)
            assert server.log is not None
            assert "gave 1 running session(s) back to the queue" in server.log.read_text()
        else:
            server.kill9()
        server = server_factory(data=data, env=hang)
    server.stop()
    server = server_factory(data=data)
    doc = server.wait(session)
    assert doc["status"] == "done", doc["error"]
    assert doc["attempts"] == 1
    assert doc["result"]["verdict"]["workers"] == ["1,1"]


def test_a_session_whose_worker_always_dies_fails_and_can_be_retried(server_factory,
                                                                     slow_job: Job,
                                                                     tmp_path: Path):
    """An attempt counts when the worker dies; after three the session fails with the reason;
    ``POST /api/v1/sessions/ID/retry`` (token needed) queues it again."""
    data = tmp_path / "data"
    server = server_factory(data=data, env={CRASH: "analysis-started:1"})  # every worker dies
    r = server.upload(slow_job.trace, slow_job.meta, job="dies")
    session = r.json()["session"]
    doc = server.wait(session)
    assert doc["status"] == "failed" and doc["attempts"] == 3
    assert "worker process died" in doc["error"] and str(data) not in doc["error"]
    assert server.get("/api/v1/jobs/dies").json()["failed"] == 1
    server.stop()
    server = server_factory(data=data)
    url = f"{server.url}/api/v1/sessions/{session}/retry"
    r = httpx.post(url, timeout=60)
    assert r.status_code == 401 and _status(server, session) == "failed"
    r = httpx.post(url, headers=server.headers(), timeout=60)
    assert r.status_code == 200 and r.json() == {"session": session, "status": "queued"}
    doc = server.wait(session)
    assert doc["status"] == "done" and doc["error"] is None
    assert doc["result"]["verdict"]["workers"] == ["1,1"]
    assert server.get("/api/v1/jobs/dies").json()["failed"] == 0
    r = httpx.post(url, headers=server.headers(), timeout=60)
    assert r.status_code == 409 and "done" in r.json()["error"]
    r = httpx.post(f"{server.url}/api/v1/sessions/{'0' * 32}/retry", headers=server.headers(),
                   timeout=60)
    assert r.status_code == 404


# -- records batches ---------------------------------------------------------------------

N_BATCHES, ITERS, RANKS = 50, 30, 4


def _batches(seed: int = 7) -> list[bytes]:
    """50 batches of 4 ranks × 30 iterations: rank 2 slows down ×1.4 during batches 15-29
    and ×1.25 during 38-44 (onsets, changes, recoveries)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(N_BATCHES):
        lines = []
        for i in range(b * ITERS, (b + 1) * ITERS):
            for rank in range(RANKS):
                level = 1.0
                if rank == 2 and 15 * ITERS <= i < 30 * ITERS:
                    level = 1.4
                if rank == 2 and 38 * ITERS <= i < 45 * ITERS:
                    level = 1.25
                d = level * (1 + 0.01 * rng.standard_normal())
                lines.append(f'{{"rank": {rank}, "iter": {i}, "duration": {d:.6f}}}\n')
        out.append("".join(lines).encode())
    return out


def _post(server: Server, job: str, i: int, body: bytes) -> httpx.Response:
    return httpx.post(f"{server.url}/api/v1/jobs/{job}/records", content=body, timeout=120,
                      headers={**server.headers(), "Idempotency-Key": f"batch-{i}"})


def _plain(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k not in ("id", "received_at")} for e in events]


def test_records_cut_by_kill_9_and_replayed_give_exactly_the_events_of_an_uninterrupted_run(
        server_factory, tmp_path: Path):
    """Defect 2: batches cut by kill -9 (after the batch was written, before its commit; or
    after the commit, before the answer) and sent again with the same key."""
    batches = _batches()
    clean = server_factory(data=tmp_path / "clean")
    answers_clean = []
    for i, body in enumerate(batches):
        r = _post(clean, "stream", i, body)
        assert r.status_code == 200, r.text
        answers_clean.append(_plain(r.json()["events"]))
    expected = _plain(clean.get("/api/v1/jobs/stream/events").json()["events"])
    kinds = {e["event"] for e in expected}
    assert {"onset", "recovery"} <= kinds, kinds
    clean.stop()

    rng = random.Random(2024)
    targets = sorted(rng.sample(range(N_BATCHES), 6))
    points = [rng.choice(["records-logged", "records-stored"]) for _ in targets]
    data = tmp_path / "cut"

    def crash_env(k: int, first: int) -> dict[str, str]:
        # the batches this process handles anew up to target k, counting from `first`
        return {CRASH: f"{points[k]}:{targets[k] - first + 1}"} if k < len(targets) else {}

    server = server_factory(data=data, env=crash_env(0, 0))
    answers: list[list[dict[str, Any]]] = []
    k, i, kills = 0, 0, 0
    while i < N_BATCHES:
        try:
            r = _post(server, "stream", i, batches[i])
        except httpx.TransportError:
            assert server.proc is not None and server.proc.wait(60) == -9
            kills += 1
            # a batch cut after its commit is a duplicate when sent again (not handled anew)
            first = i + 1 if points[k] == "records-stored" else i
            k += 1
            server = server_factory(data=data, env=crash_env(k, first))
            continue
        assert r.status_code == 200, r.text
        assert r.json()["records"] == ITERS * RANKS
        answers.append(_plain(r.json()["events"]))
        i += 1
    assert kills == len(targets)
    got = _plain(server.get("/api/v1/jobs/stream/events").json()["events"])
    assert got == expected
    assert answers == answers_clean  # a replayed batch is answered with its own events
    assert server.get("/api/v1/jobs/stream").json()["records"] == N_BATCHES * ITERS * RANKS


def test_a_records_retry_with_the_same_key_is_not_applied_twice(server_factory):
    server = server_factory()
    body = b"".join(f'{{"rank": 0, "iter": {i}, "duration": 1.0}}\n'.encode()
                    for i in range(10))
    first = _post(server, "dup", 1, body)
    again = _post(server, "dup", 1, body)
    assert first.status_code == again.status_code == 200
    assert again.json() == {**first.json(), "duplicate": True}
    assert server.get("/api/v1/jobs/dup").json()["records"] == 10
    r = httpx.post(f"{server.url}/api/v1/jobs/dup/records", content=body, timeout=60,
                   headers={**server.headers(), "Idempotency-Key": "bad key!"})
    assert r.status_code == 400 and "Idempotency-Key" in r.json()["error"]


def test_the_push_client_sends_records_with_a_key_and_retries(server_factory):
    from stragglers.service.client import push_records

    server = server_factory()
    lines = [f'{{"rank": 0, "iter": {i}, "duration": 1.0}}' for i in range(20)]
    doc = push_records(lines, "pushed", server.url, TOKEN, key="k-1")
    again = push_records(lines, "pushed", server.url, TOKEN, key="k-1")
    assert doc["records"] == 20 and again["duplicate"] is True
    assert server.get("/api/v1/jobs/pushed").json()["records"] == 20


# -- the database going away -------------------------------------------------------------

@pytest.fixture
def pg() -> Iterator[PostgresServer]:
    with running_postgres("PostgreSQL tests") as server:
        yield server


def test_database_down_gives_json_503_and_healthz_says_so(pg: PostgresServer, server_factory,
                                                          slow_job: Job):
    """Defect 3: with the database down the API answered a plain-text 500 and /healthz ok."""
    url = f"postgresql://smon@127.0.0.1:{pg.port}/postgres"
    server = server_factory(args=("--db", url))
    assert server.get("/healthz").json()["ok"] is True
    pg.halt()
    try:
        h = server.get("/healthz")
        assert h.status_code == 503 and h.json()["ok"] is False and "database" in h.json()[
            "error"]
        for method, path in (("GET", "/api/v1/jobs"), ("GET", "/"), ("GET", "/metrics"),
                             ("POST", "/api/v1/jobs/x/records")):
            r = httpx.request(method, f"{server.url}{path}", headers=server.headers(),
                              content=b'{"rank": 0, "iter": 1, "duration": 1.0}\n'
                              if method == "POST" else None, timeout=60)
            assert r.status_code == 503, (path, r.text)
            assert r.headers["content-type"].startswith("application/json")
            assert "database" in r.json()["error"] and "\n" not in r.json()["error"]
            assert int(r.headers["retry-after"]) > 0
    finally:
        pg.resume()
    poll(lambda: server.get("/healthz").status_code == 200, "healthz after the database is back")
    r = server.upload(slow_job.trace, slow_job.meta, job="after-outage")
    assert r.status_code == 202, r.text
    assert server.wait(r.json()["session"])["status"] == "done"


def test_sqlite_store_is_checked_by_healthz(server_factory):
    server = server_factory()
    doc = server.get("/healthz").json()
    assert doc["ok"] is True and doc["database"] == "sqlite"


def test_an_onset_alert_cut_by_kill_9_is_sent_when_the_batch_is_replayed(
        server_factory, receiver: Receiver, tmp_path: Path):
    """The server killed after committing a batch with an onset, before its alert was
    stored: the client's replay of the batch raises it."""
    rules = tmp_path / "alerts.yaml"
    rules.write_text(f"webhook: {receiver.url}\nrules:\n  - {{name: fail-slow, onset: 0.15}}\n")
    data = tmp_path / "data"
    server = server_factory(data=data, args=("--alerts", str(rules)),
                            env={CRASH: "records-stored:2"})
    rng = np.random.default_rng(3)
    healthy = "".join(f'{{"rank": 0, "iter": {i}, "duration": {1 + 0.01 * x:.6f}}}\n'
                      for i, x in enumerate(rng.standard_normal(250))).encode()
    slow = "".join(f'{{"rank": 0, "iter": {250 + i}, "duration": {1.4 + 0.014 * x:.6f}}}\n'
                   for i, x in enumerate(rng.standard_normal(60))).encode()
    assert _post(server, "cut-alert", 0, healthy).status_code == 200
    with pytest.raises(httpx.TransportError):
        _post(server, "cut-alert", 1, slow)
    assert server.proc is not None and server.proc.wait(60) == -9
    server = server_factory(data=data, args=("--alerts", str(rules)))
    r = _post(server, "cut-alert", 1, slow)
    assert r.status_code == 200 and r.json()["duplicate"] is True
    assert [e["event"] for e in r.json()["events"]] == ["onset"]
    body = receiver.take()
    assert body["rule"] == "fail-slow" and body["event"]["iteration"] is not None
    again = _post(server, "cut-alert", 1, slow)  # a second replay: deduplicated
    assert again.json()["duplicate"] is True
    assert len(server.get("/api/v1/alerts").json()["alerts"]) == 1
