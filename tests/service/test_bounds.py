"""Bounded by construction (issue 24, item 2), against real `stragglers serve` processes: a
huge multipart field never enters memory, a request without the token is refused before its
body is read, records batches are capped by count and bytes, the analysis queue is bounded,
and no response carries a server path."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stragglers.service.datadir import DOWNLOADS
from tests.service.helpers import TOKEN, Job, Server, named_children, peak_rss_bytes, poll

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

MB = 2**20


def _multipart_with_huge_meta(trace: Path, meta_bytes: int) -> tuple[str, int, Iterator[bytes]]:
    boundary = "smon-test-boundary-7f3a"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"trace\"; "
            f"filename=\"t.parquet\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            ).encode() + trace.read_bytes() + (
            f"\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"meta\"; "
            f"filename=\"meta.yaml\"\r\nContent-Type: application/yaml\r\n\r\n").encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    chunk = b"# " + b"x" * (MB - 3) + b"\n"

    def body() -> Iterator[bytes]:
        yield head
        left = meta_bytes
        while left > 0:
            yield chunk[:left]
            left -= len(chunk)
        yield tail

    return boundary, len(head) + meta_bytes + len(tail), body()


def test_a_huge_meta_part_is_refused_with_flat_memory(server_factory, slow_job: Job):
    """Defect 4: a 1 GB `meta` part was read whole into memory (581 -> 1,557 MB)."""
    server = server_factory()
    assert server.proc is not None
    before = peak_rss_bytes(server.proc.pid)
    boundary, length, body = _multipart_with_huge_meta(slow_job.trace, 1024 * MB)
    r = httpx.post(f"{server.url}/api/v1/sessions", content=body, timeout=600,
                   headers={**server.headers(), "Content-Length": str(length),
                            "Content-Type": f"multipart/form-data; boundary={boundary}"})
    grown = peak_rss_bytes(server.proc.pid) - before
    assert grown < 100 * MB, f"peak RSS grew by {grown / MB:.0f} MB"
    assert r.status_code == 413, r.text
    message = r.json()["error"]
    assert "meta.yaml" in message and "STRAGGLERS_MAX_YAML_BYTES" in message
    assert "more than 1,048,576" in message  # refused at the limit, while it streamed
    assert server.get("/api/v1/jobs").json()["jobs"] == []
    assert list((server.data / "uploads").iterdir()) == []


def _send_until_closed(server: Server, head: bytes, budget: int) -> tuple[bytes, int]:
    """Send ``head`` and 4 KiB of body, read the answer, then go on sending the body (up to
    ``budget`` bytes) until the server closes the connection; returns (answer, bytes sent)."""
    host, port = server.url.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head + b"a" * 4096)
        chunk = b"a" * MB
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < int(
                answer.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]):
            got = sock.recv(65536)
            if not got:
                break
            answer += got
        sent = 4096
        try:
            while sent < budget:
                sock.sendall(chunk)
                sent += MB
        except OSError:
            pass
    return answer, sent


def test_a_request_without_the_token_is_refused_before_its_body_is_read(server_factory):
    """Defect 4: a body without a token was read to the end before the 401."""
    server = server_factory()
    for path, token in (("/api/v1/sessions", None), ("/api/v1/jobs/x/records", None),
                        ("/api/v1/sessions", "wrong-token-0123456789")):
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}"
                f"Content-Type: application/octet-stream\r\nContent-Length: {1024 * MB}\r\n\r\n"
                ).encode()
        answer, sent = _send_until_closed(server, head, 512 * MB)
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert b"bearer token" in answer
        # socket buffers hold a few MiB: the server read no more than that
        assert sent < 64 * MB, f"{path}: the server took {sent / MB:.0f} MiB after the 401"
    assert server.get("/api/v1/jobs").json()["jobs"] == []


def test_a_body_over_its_limit_is_refused_before_it_is_read(server_factory):
    server = server_factory(env={"STRAGGLERS_MAX_RECORDS_BYTES": str(MB)})
    head = (f"POST /api/v1/jobs/x/records HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Length: {1024 * MB}\r\n\r\n").encode()
    answer, sent = _send_until_closed(server, head, 512 * MB)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"STRAGGLERS_MAX_RECORDS_BYTES" in answer
    assert sent < 64 * MB


def _records(n: int) -> bytes:
    return "".join(f'{{"rank": 0, "iter": {i}, "duration": 1.0}}\n' for i in range(n)).encode()


def test_records_batches_are_capped_by_count_and_bytes(server_factory):
    """Defect 4: a 60 MiB batch cost 124 s of CPU; batches are now capped by count and bytes,
    and the 413 names the limit."""
    server = server_factory(env={"STRAGGLERS_MAX_RECORDS_BATCH": "100",
                                 "STRAGGLERS_MAX_RECORDS_BYTES": "8000"})
    url = f"{server.url}/api/v1/jobs/capped/records"
    ok = httpx.post(url, content=_records(100), headers=server.headers(), timeout=60)
    assert ok.status_code == 200 and ok.json()["records"] == 100
    r = httpx.post(url, content=_records(101), headers=server.headers(), timeout=60)
    assert r.status_code == 413
    assert "101" in r.json()["error"] and "STRAGGLERS_MAX_RECORDS_BATCH" in r.json()["error"]
    big = _records(90) + b" " * 6000
    r = httpx.post(url, content=big, headers=server.headers(), timeout=60)
    assert r.status_code == 413
    message = r.json()["error"]
    assert "STRAGGLERS_MAX_RECORDS_BYTES" in message and "8,000" in message
    assert "UPLOAD" not in message
    assert server.get("/api/v1/jobs/capped").json()["records"] == 100


def test_a_full_analysis_queue_answers_503_with_retry_after(server_factory, slow_job: Job):
    """No backpressure before: 400 sessions queued, never a 429/503."""
    server = server_factory(env={"STRAGGLERS_MAX_QUEUED_SESSIONS": "1",
                                 "STRAGGLERS_CRASH_AT": "analysis-started:1:stop"})
    assert server.proc is not None
    running = server.upload(slow_job.trace, slow_job.meta, job="q").json()["session"]
    poll(lambda: server.get(f"/api/v1/sessions/{running}").json()["status"] == "running",
         "the first session is claimed")
    assert server.upload(slow_job.trace, slow_job.meta, job="q").status_code == 202
    r = server.upload(slow_job.trace, slow_job.meta, job="q")
    assert r.status_code == 503, r.text
    assert int(r.headers["retry-after"]) > 0
    assert "STRAGGLERS_MAX_QUEUED_SESSIONS" in r.json()["error"]
    assert len(server.get("/api/v1/jobs/q").json()["session_list"]) == 2
    assert list((server.data / "uploads").iterdir()) == []
    assert len(named_children(server.proc.pid, "smon-analysis")) == 1


def test_no_response_carries_a_server_path(server_factory, slow_job: Job):
    """Defect 5: result.json (readable without a token) carried the server's `source`
    path."""
    server = server_factory()
    r = server.upload(slow_job.trace, slow_job.meta, job="paths")
    session = r.json()["session"]
    doc = server.wait(session)
    assert doc["status"] == "done"
    assert doc["result"]["source"] == slow_job.trace.name
    root = str(server.data)
    texts = {"session": json.dumps(doc)}
    for name in DOWNLOADS:
        got = server.get(f"/sessions/{session}/files/{name}")
        if got.status_code == 200 and not name.endswith(".png"):
            texts[name] = got.text
    assert "result.json" in texts
    assert json.loads(texts["result.json"])["source"] == slow_job.trace.name
    for path in ("/", "/jobs/paths", f"/sessions/{session}", "/alerts", "/metrics",
                 "/api/v1/jobs", "/api/v1/jobs/paths", "/healthz"):
        texts[path] = server.get(path).text
    for where, text in texts.items():
        assert root not in text and "/tmp" not in text, where
