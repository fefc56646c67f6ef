"""A throw-away server of a Debian package for tests (Prometheus, Alertmanager): its own
temporary folder and a free loopback port, started with a readiness wait, stopped and
removed at the end."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopbackDaemon:
    """``argv(root, port)`` gives the command line; ``/-/ready`` answers 200 once it is up
    (the Prometheus family's readiness endpoint)."""

    name = "daemon"

    def __init__(self, prefix: str) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.root / "log"
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self, argv: list[str]) -> None:
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)

    def wait_ready(self, timeout: float = 60.0) -> None:
        assert self.proc is not None
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"{self.name} did not start:\n{self.log.read_text()}")

    def stop(self) -> None:
        try:
            if self.proc is not None:
                self.proc.terminate()
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(30)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
