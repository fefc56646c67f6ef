"""Helpers of the service tests: a `stragglers serve` process, small synthetic jobs, a webhook
receiver."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from stragglers.synth.generator import SynthSpec, write_synth

TOKEN = "test-token-0123456789abcdef"
START_TIMEOUT = 120.0  # a loaded 2-core machine may take long to spawn the worker pools
CLI = "import sys; from stragglers.cli import main; sys.exit(main())"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@dataclass
class Server:
    """A `stragglers serve` subprocess."""

    data: Path
    token_file: Path
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[str] | None = None
    url: str = ""
    log: Path | None = None

    def start(self) -> Server:
        self.log = self.data.parent / f"{self.data.name}-serve-{time.monotonic_ns()}.log"
        cmd = [sys.executable, "-c", CLI, "serve", "--data", str(self.data),
               "--token-file", str(self.token_file), "--port", "0", "--workers", "1",
               *self.args]
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(self.log, "w"),
                                     text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.wait(30)
            raise AssertionError(f"server did not start: {line!r}\n{self.log.read_text()}")
        self.url = line.split("listening on ")[1].split()[0]
        end = time.monotonic() + START_TIMEOUT
        while time.monotonic() < end:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited:\n{self.log.read_text()}")
            time.sleep(0.2)
        raise AssertionError(f"server not ready in {START_TIMEOUT} s:\n{self.log.read_text()}")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    # -- client helpers -------------------------------------------------------------------
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def upload(self, trace: Path, meta: Path, **fields: str) -> httpx.Response:
        with trace.open("rb") as fh:
            return httpx.post(f"{self.url}/api/v1/sessions", headers=self.headers(),
                              data=fields, timeout=120,
                              files={"trace": (trace.name, fh), "meta": (meta.name,
                                                                          meta.read_bytes())})

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=60)

    def wait(self, session: str, timeout: float = 180.0) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            doc: dict[str, Any] = self.get(f"/api/v1/sessions/{session}").json()
            if doc["status"] in ("done", "failed"):
                return doc
            time.sleep(0.2)
        raise AssertionError(f"session {session} not analysed in {timeout} s")


@dataclass(frozen=True)
class Job:
    trace: Path
    meta: Path
    truth: dict[str, Any]


def make_job(folder: Path, name: str, slow: float | None = 1.5, seed: int = 0,
             steps: int = 4) -> Job:
    spec = SynthSpec(dp=2, pp=2, microbatches=4, steps=steps, seed=seed, name=name,
                     slow_workers=[(1, 1, slow)] if slow else [])
    paths = write_synth(spec, folder / name)
    return Job(paths["trace"], paths["meta"], json.loads(paths["truth"].read_text()))


class Receiver:
    """A real HTTP server on loopback that records the JSON bodies POSTed to it."""

    def __init__(self) -> None:
        self.bodies: queue.Queue[dict[str, Any]] = queue.Queue()
        #: the ``Idempotency-Key`` header of each POST, in the order received ("" without)
        self.keys: list[str] = []
        received, keys = self.bodies, self.keys

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n))
                keys.append(self.headers.get("Idempotency-Key", ""))
                received.put(body)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def take(self, timeout: float = 60.0) -> dict[str, Any]:
        return self.bodies.get(timeout=timeout)

    def drain(self, quiet: float = 2.0) -> list[dict[str, Any]]:
        """Everything received until nothing more comes for ``quiet`` seconds."""
        out = []
        while True:
            try:
                out.append(self.bodies.get(timeout=quiet))
            except queue.Empty:
                return out

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def named_children(server_pid: int, comm: str) -> list[int]:
    """The server's child processes named ``comm`` (``smon-analysis``, ``smon-validate``)."""
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(ln.split(":\t", 1) for ln in text.splitlines() if ":\t" in ln)
        if fields.get("PPid", "").strip() == str(server_pid) and \
                fields.get("Name", "").strip() == comm:
            out.append(int(status.parent.name))
    return out


def peak_rss_bytes(pid: int) -> int:
    """A process's peak resident memory (VmHWM)."""
    for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
        if ln.startswith("VmHWM:"):
            return int(ln.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


def poll(check: Any, what: str, timeout: float = 120.0, every: float = 0.05) -> Any:
    """Call ``check()`` until it returns something true (generous deadline, no timing
    assert: the deadline only stops a test that would otherwise hang)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s")


class HangingReceiver:
    """A real HTTP server on loopback that takes a POST and never answers (until released):
    a webhook that hangs."""

    def __init__(self) -> None:
        self.received: queue.Queue[dict[str, Any]] = queue.Queue()
        self.release = threading.Event()
        received, release = self.received, self.release

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length", "0"))
                received.put(json.loads(self.rfile.read(n)))
                release.wait(600)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hang"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def iteration_records(rank: int, n: int, level: float, start: int, seed: int) -> str:
    """``n`` iteration records (the ``watch`` schema) of ``rank`` from iteration ``start``,
    ``level`` seconds each with 1% noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    durations = level * (1 + 0.01 * rng.standard_normal(n))
    return "".join(f'{{"rank": {rank}, "iter": {start + i}, "duration": {d:.6f}}}\n'
                   for i, d in enumerate(durations))
