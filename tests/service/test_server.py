"""`stragglers serve` as a real process: the AR reference through `stragglers push`, the
401, malformed uploads, limits, idempotent retries and `kill -9` at any moment."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from stragglers.analysis import analyze_files
from tests.conftest import reference_dir
from tests.service.helpers import CLI, TOKEN, Job, make_job

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)


def _files(data: Path, sub: str) -> list[str]:
    folder = data / sub
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_push_ar_reference_gives_the_reference_slowdown(server_factory, token_file, tmp_path):
    ref = reference_dir()
    expected = json.loads((ref / "result-AR.json").read_text())["blocking_slowdown"]
    server = server_factory()
    out = subprocess.run(
        [sys.executable, "-c", CLI, "push", str(ref / "trace-AR.parquet"), "--meta",
         str(ref / "meta-AR.yaml"), "--server", server.url, "--token-file", str(token_file),
         "--job", "ar-reference", "--label", "run=test"],
        capture_output=True, text=True, timeout=300, check=True)
    session = json.loads(out.stdout)["session"]
    doc = server.wait(session)
    assert doc["status"] == "done", doc["error"]
    assert doc["job"] == "ar-reference" and doc["labels"] == {"run": "test"}
    s = doc["result"]["slowdown"]
    assert round(s, 5) == 1.97305
    assert s == pytest.approx(expected, rel=1e-6)
    assert doc["result"]["verdict"]["cause"] == "worker"
    assert doc["result"]["verdict"]["workers"] == ["0,0"]
    # visible on the dashboard: the jobs page, the job page and the session page
    assert "1.9730" in server.get("/").text
    page = server.get("/jobs/ar-reference").text
    assert "1.97305" in page and 'id="worker-heatmap"' in page
    assert page.count('class="cell') >= 16 + 2 * 44 * 4  # worker map + two per-step maps
    assert "1.97305" in server.get(f"/sessions/{session}").text
    got = server.get(f"/sessions/{session}/files/result.json")
    assert got.status_code == 200 and json.loads(got.text)["slowdown"] == s


def test_writes_without_the_token_get_401_and_store_nothing(server_factory, slow_job: Job):
    server = server_factory()
    data = server.data
    for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"},
                    {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}):
        with slow_job.trace.open("rb") as fh:
            r = httpx.post(f"{server.url}/api/v1/sessions", headers=headers, timeout=60,
                           files={"trace": ("t.parquet", fh),
                                  "meta": ("m.yaml", slow_job.meta.read_bytes())})
        assert r.status_code == 401, headers
        assert "bearer token" in r.json()["error"]
        r = httpx.post(f"{server.url}/api/v1/jobs/x/records", headers=headers, timeout=60,
                       content=b'{"rank": 0, "iter": 1, "duration": 1.0}\n')
        assert r.status_code == 401
    assert server.get("/api/v1/jobs").json()["jobs"] == []
    assert _files(data, "sessions") == [] and _files(data, "uploads") == []
    assert _files(data, "records") == []
    # the dashboard and the API stay readable without a token; the dashboard takes no
    # writes even with it; with it, an upload works
    assert server.get("/").status_code == 200
    for path in ("/", "/jobs/x", "/alerts", "/metrics"):
        assert httpx.post(f"{server.url}{path}", headers=server.headers()).status_code == 405
    assert server.upload(slow_job.trace, slow_job.meta).status_code == 202


def test_malformed_uploads_get_the_validators_message_and_change_nothing(
        server_factory, slow_job: Job, tmp_path: Path):
    server = server_factory()
    table = pq.read_table(slow_job.trace)
    no_duration = tmp_path / "no-duration.parquet"
    pq.write_table(table.drop_columns(["duration"]) if "duration" in table.column_names
                   else table.drop_columns([table.column_names[-1]]), no_duration)
    missing = sorted(set(table.column_names) - set(pq.read_table(no_duration).column_names))
    not_parquet = tmp_path / "garbage.parquet"
    not_parquet.write_bytes(b"PAR1 this is not a parquet file")
    bad_meta = tmp_path / "bad-meta.yaml"
    bad_meta.write_text("dp_size: 2\npp_size: 3\n")  # the trace has 2 stages
    cases = [
        (no_duration, slow_job.meta, ["no-duration.parquet", missing[0]]),
        (not_parquet, slow_job.meta, ["garbage.parquet", "parquet"]),
        (slow_job.trace, bad_meta, []),
        (slow_job.meta, slow_job.meta, ["parquet or .jsonl"]),
    ]
    for trace, meta, words in cases:
        r = server.upload(trace, meta)
        assert r.status_code == 400, (trace, r.text)
        message = r.json()["error"]
        assert "\n" not in message and all(w in message for w in words), message
        assert str(server.data) not in message  # the server's paths are not shown
    r = server.upload(slow_job.trace, slow_job.meta, job="../../etc")
    assert r.status_code == 400 and "job name" in r.json()["error"]
    r = httpx.post(f"{server.url}/api/v1/sessions", headers=server.headers(), timeout=60,
                   content=b"not multipart")
    assert r.status_code == 400
    assert server.get("/api/v1/jobs").json()["jobs"] == []
    assert _files(server.data, "sessions") == [] and _files(server.data, "uploads") == []


def test_upload_limit_and_idempotent_retries(server_factory, slow_job: Job, tmp_path: Path):
    size = slow_job.trace.stat().st_size + slow_job.meta.stat().st_size
    server = server_factory(env={"STRAGGLERS_MAX_UPLOAD_BYTES": str(size + 4096)})
    big = tmp_path / "big.parquet"
    big.write_bytes(slow_job.trace.read_bytes() + b"\0" * 8192)
    r = server.upload(big, slow_job.meta)
    assert r.status_code == 413 and "limit" in r.json()["error"]
    assert _files(server.data, "sessions") == []
    first = server.upload(slow_job.trace, slow_job.meta, job="retry", key="k-1")
    again = server.upload(slow_job.trace, slow_job.meta, job="retry", key="k-1")
    assert first.status_code == 202 and again.status_code == 200
    assert again.json() == {"session": first.json()["session"], "duplicate": True}
    assert len(server.get("/api/v1/jobs/retry").json()["session_list"]) == 1
    assert len(_files(server.data, "sessions")) == 1


def test_kill_9_loses_and_duplicates_no_acknowledged_session(server_factory, tmp_path: Path):
    jobs = [make_job(tmp_path / "jobs", f"k{i}", slow=1.2 + 0.1 * i, seed=i, steps=6)
            for i in range(6)]
    truth = {}
    for j in jobs:
        r = analyze_files(j.trace, j.meta)
        truth[j.meta.parent.name] = r.slowdown
    data = tmp_path / "data"
    server = server_factory(data=data)
    acked: dict[str, str] = {}
    for j in jobs[:3]:
        r = server.upload(j.trace, j.meta)
        assert r.status_code == 202
        acked[r.json()["session"]] = j.meta.parent.name
    # kill while an analysis is running (or just after it, if the machine is fast)
    first = next(iter(acked))
    end = time.monotonic() + 60
    while server.get(f"/api/v1/sessions/{first}").json()["status"] == "queued" \
            and time.monotonic() < end:
        time.sleep(0.02)
    server.kill9()
    server = server_factory(data=data)
    for j in jobs[3:]:  # acknowledged, then killed at once: still queued
        r = server.upload(j.trace, j.meta)
        assert r.status_code == 202
        acked[r.json()["session"]] = j.meta.parent.name
    server.kill9()
    server = server_factory(data=data)
    for session, name in acked.items():
        doc = server.wait(session)
        assert doc["status"] == "done", doc["error"]
        assert doc["result"]["slowdown"] == pytest.approx(truth[name], rel=1e-9)
    listed = [s["session"] for j in server.get("/api/v1/jobs").json()["jobs"]
              for s in server.get(f"/api/v1/jobs/{j['name']}").json()["session_list"]]
    assert sorted(listed) == sorted(acked)
    assert sorted(_files(data, "sessions")) == sorted(acked)
    for session in acked:  # one output folder per session: the interrupted ones are gone
        outs = [p.name for p in (data / "sessions" / session).iterdir() if p.is_dir()]
        assert len(outs) == 1, outs


def _worker_pids(server_pid: int) -> list[int]:
    """The server's worker processes (multiprocessing spawn children)."""
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(next(ln for ln in text.splitlines() if ln.startswith("PPid:")).split()[1])
        if ppid == server_pid and b"spawn_main" in cmdline:
            out.append(int(status.parent.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_a_killed_worker_process_sends_its_session_back_to_the_queue(
        server_factory, slow_job: Job, tmp_path: Path):
    import os
    import signal

    server = server_factory()
    assert server.proc is not None
    pids = _worker_pids(server.proc.pid)
    assert len(pids) == 2  # one analysis worker, one validation worker
    for pid in pids:  # both die, as if the machine had run out of memory
        os.kill(pid, signal.SIGKILL)
    r = server.upload(slow_job.trace, slow_job.meta, job="crash")
    assert r.status_code == 202, r.text
    doc = server.wait(r.json()["session"])
    assert doc["status"] == "done" and doc["attempts"] == 2  # the 1st found the pool dead
    assert doc["result"]["verdict"]["workers"] == ["1,1"]
    assert server.proc.poll() is None  # the server itself lives on


def test_push_failures_are_one_line_with_exit_2(server_factory, token_file: Path,
                                                slow_job: Job, tmp_path: Path):
    server = server_factory()
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-right-token-at-all\n")
    good = token_file
    closed = f"http://127.0.0.1:{_closed_port()}"
    cases = [
        (server.url, wrong, slow_job.trace, ["HTTP 401", "bearer token"]),
        (server.url, good, slow_job.meta, ["HTTP 400", "parquet or .jsonl"]),
        (closed, good, slow_job.trace, ["cannot reach the server", closed]),
    ]
    for url, token, trace, words in cases:
        out = subprocess.run(
            [sys.executable, "-c", CLI, "push", str(trace), "--meta", str(slow_job.meta),
             "--server", url, "--token-file", str(token), "--retry-s", "1"],
            capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and out.stdout == ""
        line = out.stderr.strip()
        assert line.startswith("stragglers push: error: ") and "\n" not in line, line
        assert all(w in line for w in words), line
    assert server.get("/api/v1/jobs").json()["jobs"] == []


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_private_dashboard_needs_the_token_too(server_factory):
    server = server_factory(args=("--private",))
    for path in ("/", "/metrics", "/api/v1/jobs", "/alerts"):
        assert server.get(path).status_code == 401
        r = httpx.get(f"{server.url}{path}", headers=server.headers(), timeout=60)
        assert r.status_code == 200, path


def test_one_server_per_data_folder(server_factory, token_file: Path):
    server = server_factory()
    out = subprocess.run(
        [sys.executable, "-c", CLI, "serve", "--data", str(server.data), "--token-file",
         str(token_file), "--port", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == (f"stragglers serve: error: --data {server.data}: another "
                                  "server is using this folder (servers share a folder only "
                                  "on one PostgreSQL database: --db postgresql://...)")
    assert server.get("/healthz").status_code == 200
