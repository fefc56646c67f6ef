"""A throw-away Prometheus for tests: Debian's ``prometheus`` on a free loopback port,
scraping one target every second, stopped and removed at the end."""

from __future__ import annotations

import shutil
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.service.daemon import LoopbackDaemon


def prometheus_bin() -> str | None:
    return shutil.which("prometheus")


class Prometheus(LoopbackDaemon):
    name = "prometheus"

    def __init__(self, target_url: str, job: str = "smon") -> None:
        exe = prometheus_bin()
        if exe is None:
            raise FileNotFoundError("prometheus not found (Debian package prometheus)")
        super().__init__("stragglers-prom-")
        (self.root / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: {job}
    static_configs: [{{targets: ["{urlsplit(target_url).netloc}"]}}]
""")
        self.launch(
            [exe, f"--config.file={self.root / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"])

    def start(self, timeout: float = 60.0) -> Prometheus:
        self.wait_ready(timeout)
        return self

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
