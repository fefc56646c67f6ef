"""Slow, stalled and disconnecting clients, a client that retries through a restart, and data
errors, against real `stragglers serve` processes (issue 31, items 3 and 6): connections
that never finish their headers or their body are closed after the timeouts with a 408,
connections over the limit are closed when accepted, `/healthz` answers meanwhile; none of
it floods the log or leaves a traceback; one upload whose validation hangs holds up no
other; `stragglers push` outlasts a restart and a rerun stores nothing twice; a value that
PostgreSQL refuses is a 400 and leaves no upload folder."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.helpers import CLI, TOKEN, Job, Server, poll
from tests.service.postgres import running_postgres

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)


def _address(server: Server) -> tuple[str, int]:
    host, port = server.url.split("//")[1].rsplit(":", 1)
    return host, int(port)


def _read_all(sock: socket.socket) -> bytes | None:
    """Everything the server sends until it closes; None when it reset the connection."""
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        return None if not got else got
    return got


def _multipart_head(boundary: str, trace_name: bytes) -> bytes:
    return (f"--{boundary}\r\nContent-Disposition: form-data; name=\"trace\"; ".encode()
            + b'filename="' + trace_name + b'"\r\nContent-Type: application/octet-stream'
            b"\r\n\r\n")


def test_stalled_connections_neither_hold_the_server_nor_flood_its_log(server_factory):
    """Defect: no header or body timeout and no connection limit: 1,500 stalled requests
    were still held after 70 s, 20,000 exhausted the file descriptors (/healthz timed
    out), and clients gone mid-upload left a traceback each in the log."""
    server = server_factory(args=("--header-timeout-s", "6", "--body-timeout-s", "4",
                                  "--max-connections", "320"))
    addr = _address(server)
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()

    def stalled(kind: str) -> tuple[str, socket.socket]:
        s = socket.create_connection(addr, timeout=60)
        if kind == "headers":  # headers begun, never finished
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        elif kind == "body":  # headers done, the body stops after 10 of 1,000 bytes
            s.sendall(b"POST /api/v1/jobs/stall/records HTTP/1.1\r\nHost: x\r\n" + auth +
                      b"Content-Length: 1000\r\n\r\n" + b'{"rank": 0')
        return kind, s

    # 300 stalled connections: 100 silent, 100 with half their headers, 100 with half a body
    conns = [stalled(("silent", "headers", "body")[i % 3]) for i in range(300)]
    t0 = time.monotonic()
    r = httpx.get(f"{server.url}/healthz", timeout=60)
    took = time.monotonic() - t0
    assert r.status_code == 200 and r.json()["ok"] is True
    assert took < 2.0, f"/healthz took {took:.2f} s beside 300 stalled connections"
    # 240 more with half a body: past the limit of 320, each takes the place of the oldest
    # connection waiting for its headers (for a second at least) while there is one, then
    # is closed unanswered
    time.sleep(1.5)
    conns += [stalled("body") for _ in range(240)]
    # a client that goes away in the middle of an upload
    with socket.create_connection(addr, timeout=60) as s:
        s.sendall(b"POST /api/v1/sessions HTTP/1.1\r\nHost: x\r\n" + auth +
                  b"Content-Type: multipart/form-data; boundary=b0\r\n"
                  b"Content-Length: 10000000\r\n\r\n" + _multipart_head("b0", b"t.parquet") +
                  b"x" * 200_000)
    outcome: dict[tuple[str, str], int] = {}
    for kind, s in conns:
        with s:
            got = _read_all(s)
        what = ("refused" if not got else "late" if b"within the timeout" in got else
                "evicted" if b"another client" in got else "body" if b"--body-timeout-s" in
                got else got[:40].decode())
        if got and what != "refused":
            assert got.startswith(b"HTTP/1.1 408 "), got[:80]
        outcome[(kind, what)] = outcome.get((kind, what), 0) + 1
    assert set(outcome) <= {("silent", "late"), ("silent", "evicted"), ("headers", "late"),
                            ("headers", "evicted"), ("body", "body"), ("body", "refused")}, \
        outcome
    assert outcome.get(("silent", "evicted"), 0) > 0 and outcome[("body", "refused")] > 0
    assert outcome[("body", "body")] + outcome[("body", "refused")] == 340
    assert server.get("/healthz").status_code == 200
    assert server.get("/api/v1/jobs").json()["jobs"] == []  # nothing of the bodies stored
    assert server.log is not None
    log = server.log.read_text()
    assert "Traceback" not in log and len(log) < 20_000, log[-3000:]
    assert log.count("connection(s) that had not sent their request headers") == 1
    assert log.count("refused ") == 1 and list((server.data / "uploads").iterdir()) == []


def test_a_hung_validation_holds_up_no_other_upload(server_factory, slow_job: Job,
                                                    tmp_path: Path):
    """Defect: one validation process for all uploads: an upload slow to validate (a 60 MiB
    metadata file, 12-22 s) held every other upload. Here the validation of `hang.parquet`
    stops for good (its process is stopped); another upload is validated meanwhile."""
    server = server_factory(env={"STRAGGLERS_CRASH_AT": "check-hang:1:stop"})
    hung = tmp_path / "hang.parquet"
    hung.write_bytes(slow_job.trace.read_bytes())
    outcome: list[Any] = []

    def upload_hung() -> None:
        try:
            outcome.append(server.upload(hung, slow_job.meta, job="hung"))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    t = threading.Thread(target=upload_hung, daemon=True)
    t.start()
    assert server.proc is not None
    poll(lambda: _stopped_child(server.proc.pid), "the validation of hang.parquet hangs")
    with slow_job.trace.open("rb") as fh:
        r = httpx.post(f"{server.url}/api/v1/sessions", headers=server.headers(), timeout=60,
                       data={"job": "other"}, files={"trace": ("t.parquet", fh),
                                                     "meta": ("m.yaml",
                                                              slow_job.meta.read_bytes())})
    assert r.status_code == 202, r.text
    assert outcome == []  # the hung upload is still waiting for its validation
    server.kill9()  # its stopped validation process dies with it
    t.join(60)


def _stopped_child(pid: int) -> bool:
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(ln.split(":\t", 1) for ln in text.splitlines() if ":\t" in ln)
        if fields.get("PPid", "").strip() == str(pid) and \
                fields.get("State", "").startswith("T"):
            return True
    return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_push_outlasts_a_restart_and_a_rerun_stores_nothing_twice(
        server_factory, token_file: Path, slow_job: Job, tmp_path: Path):
    """Defect: `stragglers push` gave up after ~1.5 s of retries (a restart takes several
    seconds) and each run made a new idempotency key, so a rerun stored the upload twice."""
    port = str(_free_port())
    data = tmp_path / "data"
    server = server_factory(data=data, args=("--port", port))
    url = server.url
    server.stop()
    cmd = [sys.executable, "-c", CLI, "push", str(slow_job.trace), "--meta",
           str(slow_job.meta), "--server", url, "--token-file", str(token_file),
           "--job", "pushed"]
    push = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server = server_factory(data=data, args=("--port", port))  # back after a while
        out, err = push.communicate(timeout=120)
    finally:
        if push.poll() is None:
            push.kill()
    assert push.returncode == 0, err
    first = out.strip()
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # a rerun
    assert again.returncode == 0 and again.stdout.strip() == first, again.stderr
    job = server.get("/api/v1/jobs/pushed").json()
    assert job["sessions"] == 1 and len(job["session_list"]) == 1


def test_database_data_errors_are_400_and_leave_no_folder(server_factory, slow_job: Job):
    """Defect: a value PostgreSQL refuses (a NUL in the trace's file name) was answered as a
    retryable 503 while /healthz said ok, and left the upload's folder behind; a rank id
    beyond the events' column did the same to a records batch."""
    with running_postgres("PostgreSQL data-error tests") as pg:
        server = server_factory(args=("--db", pg.url))
        try:
            _refused_values(server, slow_job)
        finally:
            server.stop()  # before its database


def _refused_values(server: Server, slow_job: Job) -> None:
    if True:
        boundary = "nul-boundary"
        body = (_multipart_head(boundary, b"a\x00b.parquet") + slow_job.trace.read_bytes() +
                f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"meta\"; "
                f"filename=\"m.yaml\"\r\n\r\n".encode() + slow_job.meta.read_bytes() +
                f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"job\"\r\n\r\n"
                f"nul\r\n--{boundary}--\r\n".encode())
        r = httpx.post(f"{server.url}/api/v1/sessions", content=body, timeout=60,
                       headers={**server.headers(),
                                "Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert r.status_code == 400 and "retry-after" not in r.headers, r.text
        assert "NUL" in r.json()["error"] and "\n" not in r.json()["error"]
        assert list((server.data / "sessions").iterdir()) == []
        assert list((server.data / "uploads").iterdir()) == []
        # iteration 5 after 6: an out-of-order event of rank 3,000,000,000 (the events'
        # rank column holds 32 bits)
        lines = "".join(f'{{"rank": 3000000000, "iter": {i}, "duration": 1.0}}\n'
                        for i in (5, 6, 4, 7)).encode()
        r = httpx.post(f"{server.url}/api/v1/jobs/big-rank/records", content=lines,
                       headers=server.headers(), timeout=60)
        assert r.status_code == 400 and "retry-after" not in r.headers, r.text
        assert server.get("/healthz").json()["ok"] is True
        # refused as the batch is parsed (rank ids are 32-bit): nothing stored, no job made
        job = server.get("/api/v1/jobs/big-rank")
        assert job.status_code == 404 or job.json()["records"] == 0, job.text
        ok = server.upload(slow_job.trace, slow_job.meta, job="after")
        assert ok.status_code == 202, ok.text
