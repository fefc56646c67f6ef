"""A throw-away Alertmanager for tests: Debian's ``prometheus-alertmanager`` on a free
loopback port (clustering off), routing every alert to a webhook receiver of the test with
resolved notifications, stopped and removed at the end."""

from __future__ import annotations

import shutil
from typing import Any

import httpx

from tests.service.daemon import LoopbackDaemon

NAMES = ("prometheus-alertmanager", "alertmanager")


def alertmanager_bin() -> str | None:
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Alertmanager(LoopbackDaemon):
    name = "alertmanager"

    def __init__(self, receiver_url: str) -> None:
        exe = alertmanager_bin()
        if exe is None:
            raise FileNotFoundError("alertmanager not found (Debian package "
                                    "prometheus-alertmanager)")
        super().__init__("stragglers-am-")
        (self.root / "am.yml").write_text(f"""
route:
  receiver: hook
  group_by: [alertname, training_job]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: {receiver_url}
        send_resolved: true
""")
        self.launch(
            [exe, f"--config.file={self.root / 'am.yml'}",
             f"--storage.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="])

    def start(self, timeout: float = 60.0) -> Alertmanager:
        self.wait_ready(timeout)
        return self

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds (active ones: resolved alerts are not listed)."""
        flt = [f'{k}="{v}"' for k, v in labels.items()]
        r = httpx.get(f"{self.url}/api/v2/alerts", params={"filter": flt}, timeout=30)
        r.raise_for_status()
        found: list[dict[str, Any]] = r.json()
        return found
