"""Past one machine (issue 24, item 4), with real processes: `stragglers serve --scheduler`
against a separately started `dask scheduler` and `dask worker` (the analyses run in the
Dask worker's process), and two `stragglers serve` processes on one real PostgreSQL and one
shared data folder (each session analysed once, none lost when one server is killed with
-9, each alert delivered once).

Skipped outside CI when dask or PostgreSQL is missing; under CI=true they fail instead.
Bounded loops with generous deadlines; nothing asserts on time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stragglers.analysis import analyze_files
from stragglers.service.rows import AnalysisSummary, NewSession
from stragglers.service.store import Store, sqlite_url
from tests.service.helpers import CLI, Job, Receiver, Server, in_ci, make_job, poll
from tests.service.postgres import PostgresServer

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

BIN = Path(sys.executable).parent
RAN_ON = re.compile(r"analyse_session (\w+) ran on dask worker (\S+) \(host \S+, pid (\d+)\)")


def _need(what: str, ok: bool) -> None:
    if not ok:
        if in_ci():
            pytest.fail(f"{what} is needed in CI")
        pytest.skip(f"{what} not found")


@pytest.fixture
def pg() -> Iterator[PostgresServer]:
    try:
        server = PostgresServer()
    except FileNotFoundError as exc:
        _need(f"PostgreSQL ({exc})", False)
        raise
    server.start()
    yield server
    server.stop()


def _pg_url(pg: PostgresServer) -> str:
    return f"postgresql://smon@127.0.0.1:{pg.port}/postgres"


class DaskCluster:
    """`dask scheduler` and one `dask worker` (one process, one thread) on loopback."""

    def __init__(self, folder: Path, scheduler_env: dict[str, str] | None = None,
                 worker_env: dict[str, str] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.scheduler_env = {**os.environ, **(scheduler_env or {})}
        self.worker_env = {**os.environ, **(worker_env or {})}
        self.file = folder / "scheduler.json"
        self.log = folder / "dask.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.address = ""

    def start(self) -> DaskCluster:
        out = open(self.log, "wb")  # noqa: SIM115 - closed with the processes
        self._out = out
        self.procs.append(subprocess.Popen(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
             "--scheduler-file", str(self.file), "--no-dashboard"], stdout=out, stderr=out,
            env=self.scheduler_env))
        poll(lambda: self.file.exists() and self.file.stat().st_size > 0, "scheduler file",
             timeout=120, every=0.2)
        self.address = json.loads(self.file.read_text())["address"]
        self.procs.append(subprocess.Popen(
            [str(BIN / "dask"), "worker", "--scheduler-file", str(self.file), "--nworkers",
             "1", "--nthreads", "1", "--no-dashboard"], stdout=out, stderr=out,
            env=self.worker_env))
        return self

    @property
    def worker_pid(self) -> int:
        """The `dask worker` command's process (the nanny; the worker is its child)."""
        return self.procs[1].pid

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)
        self._out.close()


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskCluster]:
    _need("dask (the `dask` command of dask[distributed])", (BIN / "dask").exists())
    cluster = DaskCluster(tmp_path_factory.mktemp("dask")).start()
    yield cluster
    cluster.stop()


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        out.append(pid)
    return out


# -- one server on a Dask cluster ---------------------------------------------------------

def test_scheduler_runs_validation_and_analyses_in_dask_workers(
        dask_cluster: DaskCluster, server_factory: Any, tmp_path: Path) -> None:
    jobs = [make_job(tmp_path / "jobs", f"d{i}", slow=1.2 + 0.2 * i, seed=i) for i in range(3)]
    truth = {j.meta.parent.name: analyze_files(j.trace, j.meta).slowdown for j in jobs}
    server = server_factory(args=("--scheduler", dask_cluster.address, "--workers", "2"))
    sessions = {}
    for j in jobs:
        r = server.upload(j.trace, j.meta, job=j.meta.parent.name)
        assert r.status_code == 202, r.text
        sessions[r.json()["session"]] = j.meta.parent.name
    for sid, name in sessions.items():
        doc = server.wait(sid, timeout=300)
        assert doc["status"] == "done", doc["error"]
        assert doc["summary"]["slowdown"] == pytest.approx(truth[name], rel=1e-9)
    assert server.log is not None
    text = server.log.read_text()
    ran = {m.group(1): int(m.group(3)) for m in RAN_ON.finditer(text)}
    assert set(ran) == set(sessions), text[-3000:]
    for pid in ran.values():  # the Dask worker process, a child of `dask worker`
        assert pid != server.proc.pid and dask_cluster.worker_pid in _ancestors(pid)
    # the uploads were validated there too, and no local worker process was started
    validated = re.findall(r"check_upload \w+/trace\.parquet ran on dask worker", text)
    assert len(validated) == len(jobs)
    assert "local smon-analysis" not in text


def test_unreachable_scheduler_exits_2_with_one_line(tmp_path: Path, token_file: Path
                                                     ) -> None:
    _need("dask", (BIN / "dask").exists())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address in (f"tcp://127.0.0.1:{port}", "not-an-address:x"):
        r = subprocess.run([sys.executable, "-c", CLI, "serve", "--data", str(tmp_path / "d"),
                            "--token-file", str(token_file), "--port", "0", "--scheduler",
                            address], capture_output=True, text=True, timeout=180,
                           env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"})
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "--scheduler" in lines[0], r.stderr
        assert "cannot connect" in lines[0] or "not a Dask scheduler address" in lines[0]
        # the wait for a scheduler is Dask's own setting (docs/guides/service.md)
        assert address.startswith("not-") or "after 3 s" in lines[0], lines[0]


def test_a_dask_worker_that_dies_counts_an_attempt(server_factory: Any, slow_job: Job,
                                                    tmp_path: Path) -> None:
    """Every Dask worker process kills itself (-9) at its first analysis; the nanny starts
    a new one. With Dask's own retries off (allowed-failures 0) each death is a
    KilledWorker: one attempt each, and the session fails after 3 with the reason."""
    _need("dask", (BIN / "dask").exists())
    cluster = DaskCluster(tmp_path / "dying",
                          {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"},
                          {"STRAGGLERS_CRASH_AT": "analysis-started:1"}).start()
    try:
        server = server_factory(args=("--scheduler", cluster.address))
        r = server.upload(slow_job.trace, slow_job.meta, job="dying")
        assert r.status_code == 202, r.text
        doc = server.wait(r.json()["session"], timeout=600)
        assert doc["status"] == "failed" and doc["attempts"] == 3, doc
        assert "3 attempts" in doc["error"] and "died" in doc["error"]
        assert server.log is not None
        assert server.log.read_text().count("the Dask workers running it died") == 3
    finally:
        cluster.stop()


# -- several servers on one PostgreSQL ----------------------------------------------------

def test_outcome_of_a_lost_lease_is_not_recorded(pg: PostgresServer) -> None:
    """Server A's lease expired (A stalled), B took the session again: A's late outcome must
    not overwrite B's (before: it did, and the session counted two attempts)."""
    a, b = Store.open(_pg_url(pg), lease_s=0.2), Store.open(_pg_url(pg), lease_s=60)
    try:
        sid, _ = a.add_session(NewSession(id="a" * 32, job="j", trace_file="t.parquet",
                                          upload_name="t", upload_bytes=1))
        assert [s.id for s in a.claim(1, 3)] == [sid]
        time.sleep(0.5)  # A's lease expires
        assert [s.id for s in b.claim(1, 3)] == [sid]
        summary = AnalysisSummary(
            result_dir="out-1", n_workers=4, n_steps=3, n_ops=10, slowdown=1.5, waste=0.3,
            discrepancy=1.0, trustworthy=True, cause="worker", confidence=0.9,
            workers=("1,1",), step_time=0.5, analysis_s=0.1)
        assert a.finish_done(sid, summary) is None
        assert a.finish_failed(sid, "late") is None
        assert a.task_died(sid, 3) is False
        row = b.finish_done(sid, summary)
        assert row is not None and row.status == "done" and row.attempts == 1
        assert a.session(sid).attempts == 1
    finally:
        a.close()
        b.close()


def test_pending_alert_is_claimed_by_one_server(pg: PostgresServer) -> None:
    """A pending alert whose sender stopped is taken by exactly one of the other servers
    (before: every server starting sent every pending alert)."""
    a = Store.open(_pg_url(pg), lease_s=0.2)
    others = [Store.open(_pg_url(pg), lease_s=60) for _ in range(3)]
    try:
        job_id = a.ensure_job("j")
        alert = a.raise_alert(job_id, "r", "worker", None, None, "http://x", {}, 0)
        assert alert is not None
        assert all(o.claim_pending_alerts() == [] for o in others)  # A holds it
        time.sleep(0.5)  # A stopped renewing its hold
        taken = [[r.id for r in o.claim_pending_alerts()] for o in others]
        assert sorted(taken) == [[], [], [alert.id]]
    finally:
        for s in (a, *others):
            s.close()


def test_concurrent_alerts_of_one_job_on_two_servers_raise_one(pg: PostgresServer) -> None:
    """Two servers finishing sessions of one job at once: one alert is raised, the others
    are suppressed by the re-alert interval (the raise is serialised per job)."""
    stores = [Store.open(_pg_url(pg)) for _ in range(2)]
    try:
        job_id = stores[0].ensure_job("j")
        for rnd in range(5):
            gate = threading.Barrier(8)

            def raise_one(store: Store, rule: str = f"r{rnd}",
                          gate: threading.Barrier = gate) -> bool:
                gate.wait()
                return store.raise_alert(job_id, rule, "worker", None, None, None, {},
                                         3600) is not None

            with ThreadPoolExecutor(8) as pool:
                raised = list(pool.map(raise_one, [stores[i % 2] for i in range(8)]))
            assert sum(raised) == 1, (rnd, raised)
    finally:
        for s in stores:
            s.close()


def _alert_rules(tmp_path: Path, receiver: Receiver) -> Path:
    rules = tmp_path / "alerts.yaml"
    rules.write_text(f"webhook: {receiver.url}\nrules:\n"
                     "  - {name: every-session, slowdown: 1.0}\n")
    return rules


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_two_servers_share_the_queue_and_survive_a_kill_9(
        engine: str, pg: PostgresServer, server_factory: Any, tmp_path: Path,
        receiver: Receiver, request: pytest.FixtureRequest) -> None:
    """Local: each server analyses in its own worker process. Dask: both servers send their
    analyses to one Dask cluster (the killed server's task may still finish there; its
    outcome is not recorded: the session is the other server's by then)."""
    jobs = [make_job(tmp_path / "jobs", f"m{i}", slow=1.2 + 0.05 * i, seed=i)
            for i in range(4)]
    data = tmp_path / "shared-data"  # one data folder for both servers
    args: tuple[str, ...] = ("--db", _pg_url(pg), "--lease-s", "3", "--alerts",
                             str(_alert_rules(tmp_path, receiver)))
    if engine == "dask":
        cluster: DaskCluster = request.getfixturevalue("dask_cluster")
        args += ("--scheduler", cluster.address)
    # local: server A's worker process hangs at its 3rd analysis, so that A is killed while
    # it holds a leased, running session. Dask (one cluster for both servers): the first
    # ten sessions are pushed four at a time, so that a backlog builds up and A is killed
    # while one of its analyses runs (if it has one within 30 s).
    hang = {} if engine == "dask" else {"STRAGGLERS_CRASH_AT": "analysis-started:3:stop"}
    servers = [server_factory(data=data, args=args, env=hang),
               server_factory(data=data, args=args)]
    sessions: dict[str, int] = {}  # session -> job index

    def push(i: int, target: Server) -> None:
        j = jobs[i % len(jobs)]
        r = target.upload(j.trace, j.meta, job=f"job-{i:02d}")
        assert r.status_code == 202, r.text
        sessions[r.json()["session"]] = i % len(jobs)

    with ThreadPoolExecutor(4) as pool:  # pushed alternately to both servers
        list(pool.map(lambda i: push(i, servers[i % 2]), range(10)))
    end = time.monotonic() + (30 if engine == "dask" else 300)
    while not _running_on(servers[0]) and time.monotonic() < end:
        time.sleep(0.02)
    servers[0].kill9()  # mid-way, while it is analysing
    for i in range(10, 20):
        push(i, servers[1])
    truth = [analyze_files(j.trace, j.meta).slowdown for j in jobs]
    for sid, k in sessions.items():
        doc = servers[1].wait(sid, timeout=600)
        assert doc["status"] == "done", doc["error"]
        assert doc["summary"]["slowdown"] == pytest.approx(truth[k], rel=1e-9)
        assert doc["attempts"] == 1  # one outcome recorded, no attempt for the kill
    # each session's outcome was recorded once, by one server (A may have been killed
    # between a commit and its log line: then it is in no log)
    logs = "".join(s.log.read_text() for s in servers if s.log is not None)
    done = Counter(re.findall(r"session (\w+) \(job [\w-]+\): done in", logs))
    assert set(done) <= set(sessions) and all(n == 1 for n in done.values()), done
    # both servers took sessions from the shared queue
    per_server = [len(re.findall(r": analysis started", s.log.read_text())) for s in servers
                  if s.log is not None]
    assert len(per_server) == 2 and all(n > 0 for n in per_server), per_server
    # every alert delivered, once: one firing notification per session, but the one A may
    # have POSTed and not yet recorded as sent when it was killed: B claims it when A's hold
    # expires and sends it again, with the same alert id and Idempotency-Key (A's sender
    # thread POSTs one notification at a time: at most one repeat, an alert A raised or
    # claimed)
    firing = poll(lambda: _firing(receiver, len(sessions)), "20 alerts at the webhook",
                  timeout=300, every=0.5)
    firing += receiver.drain(quiet=3.0 * 2)
    assert len(receiver.keys) == len(firing)
    fired = Counter(b["session"] for b in firing if b.get("status") == "firing")
    assert set(fired) == set(sessions) and all(n >= 1 for n in fired.values()), fired
    ids = Counter(b["alert"] for b in firing if b.get("status") == "firing")
    repeated = [a for a, n in ids.items() if n > 1]
    assert len(repeated) <= 1 and all(ids[a] == 2 for a in repeated), ids
    assert len(ids) == len(sessions), ids  # one alert per session
    keys = Counter(receiver.keys)
    assert set(keys) == {f"stragglers-alert-{a}-firing" for a in ids}, keys
    assert all(keys[f"stragglers-alert-{a}-firing"] == n for a, n in ids.items()), keys
    assert servers[0].log is not None
    a_log = servers[0].log.read_text()
    for a in repeated:  # raised or claimed by the killed server
        assert re.search(rf"(ALERT {a} rule=|alert {a} claimed)", a_log), (a, ids)
    store = Store.open(_pg_url(pg))
    try:
        # analysed once each: a second run only for what A was analysing when killed
        # (one worker: at most one session)
        runs = sum(store.session(sid).runs for sid in sessions)
        assert runs == 21 if engine == "local" else 20 <= runs <= 21, runs
        t = store.totals()
        assert (t.sessions, t.done, t.queued, t.running, t.alerts_sent) == (20, 20, 0, 0, 20)
    finally:
        store.close()


_seen: list[dict[str, Any]] = []


def _firing(receiver: Receiver, n: int) -> list[dict[str, Any]] | None:
    while not receiver.bodies.empty():
        _seen.append(receiver.bodies.get())
    if len({b["session"] for b in _seen if b.get("status") == "firing"}) >= n:
        out = list(_seen)
        _seen.clear()
        return out
    return None


def _running_on(server: Server) -> bool:
    """Server A has an analysis running (its log says so and it is not done yet)."""
    assert server.log is not None
    text = server.log.read_text()
    started = set(re.findall(r"session (\w+) \(job [\w-]+\): analysis started", text))
    finished = set(re.findall(r"session (\w+) \(job [\w-]+\): done in", text))
    return bool(started - finished)


def test_sqlite_servers_do_not_share_a_folder(server_factory: Any, tmp_path: Path,
                                              token_file: Path) -> None:
    server_factory(data=tmp_path / "d")
    r = subprocess.run([sys.executable, "-c", CLI, "serve", "--data", str(tmp_path / "d"),
                        "--token-file", str(token_file), "--port", "0"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ})
    assert r.returncode == 2 and "another server is using this folder" in r.stderr


@contextlib.contextmanager
def _hung_dask_analysis(server_factory: Any, job: Job, folder: Path, name: str
                        ) -> Iterator[tuple[DaskCluster, Any, Path, str]]:
    """A server on a Dask cluster whose worker hangs (stops itself) in the analysis of the
    session just uploaded: ``(cluster, server, data folder, session id)``; the hung process
    is killed and the cluster stopped at the end."""
    _need("dask", (BIN / "dask").exists())
    cluster = DaskCluster(folder / name, None,
                          {"STRAGGLERS_CRASH_AT": "analysis-started:1:stop"}).start()
    data = folder / "data"
    try:
        server = server_factory(data=data, args=("--scheduler", cluster.address))
        r = server.upload(job.trace, job.meta, job=name)
        assert r.status_code == 202, r.text
        sid = r.json()["session"]
        poll(lambda: _hung_children(cluster.worker_pid), "the Dask worker hung", timeout=300,
             every=0.1)
        yield cluster, server, data, sid
    finally:
        for pid in _hung_children(cluster.worker_pid):
            os.kill(pid, signal.SIGKILL)
        cluster.stop()


def test_a_server_stop_during_a_dask_analysis_is_no_attempt(server_factory: Any,
                                                            slow_job: Job,
                                                            tmp_path: Path) -> None:
    """The Dask worker hangs (stops itself) in the analysis; the server is stopped
    gracefully: the session goes back to the queue without an attempt."""
    with _hung_dask_analysis(server_factory, slow_job, tmp_path, "hung") as (_, server, data,
                                                                             sid):
        assert server.get(f"/api/v1/sessions/{sid}").json()["status"] == "running"
        server.stop()
        assert server.log is not None
        assert "gave 1 running session(s) back to the queue" in server.log.read_text()
        store = Store.open(sqlite_url(data))
        try:
            row = store.session(sid)
            assert row is not None and row.status == "queued" and row.attempts == 0, row
        finally:
            store.close()


def test_a_lost_scheduler_gives_the_session_back_without_an_attempt(
        server_factory: Any, slow_job: Job, tmp_path: Path) -> None:
    """The scheduler is killed while its worker analyses a session: the task is cancelled
    by the client, and the session goes back to the queue without an attempt."""
    with _hung_dask_analysis(server_factory, slow_job, tmp_path, "lost") as (cluster, server,
                                                                             _, sid):
        cluster.procs[0].kill()  # the scheduler
        cluster.procs[0].wait(60)
        assert server.log is not None
        log = server.log
        poll(lambda: "queued again (not an attempt)" in log.read_text(),
             "the session given back", timeout=300, every=0.2)
        doc = server.get(f"/api/v1/sessions/{sid}").json()
        assert doc["status"] in ("queued", "running") and doc["attempts"] == 0, doc
        assert server.get("/healthz").status_code == 200


def _hung_children(parent: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == str(parent) and fields[0] == "T":
            out.append(int(stat.parent.name))
    return out
