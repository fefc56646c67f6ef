"""A throw-away Prometheus for tests: Debian's ``prometheus`` on a free loopback port,
scraping one target every second, stopped and removed at the end."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx


def prometheus_bin() -> str | None:
    return shutil.which("prometheus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(self, target_url: str, job: str = "smon") -> None:
        exe = prometheus_bin()
        if exe is None:
            raise FileNotFoundError("prometheus not found (Debian package prometheus)")
        self.root = Path(tempfile.mkdtemp(prefix="stragglers-prom-"))
        (self.root / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: {job}
    static_configs: [{{targets: ["{urlsplit(target_url).netloc}"]}}]
""")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.root / "log"
        self.proc = subprocess.Popen(
            [exe, f"--config.file={self.root / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))

    def start(self, timeout: float = 60.0) -> Prometheus:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"prometheus did not start:\n{self.log.read_text()}")

    def query(self, expr: str) -> dict[str, Any]:
        """``/api/v1/query`` of ``expr`` now: the whole answer (status, data or error)."""
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=30)
        doc: dict[str, Any] = r.json()
        return doc

    def series(self, expr: str) -> list[dict[str, Any]]:
        doc = self.query(expr)
        assert doc["status"] == "success", f"{expr}: {doc.get('error')}"
        found: list[dict[str, Any]] = doc["data"]["result"]
        return found

    def stop(self) -> None:
        try:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
