"""A throw-away Alertmanager for tests: Debian's ``prometheus-alertmanager`` on a free
loopback port (clustering off), routing every alert to a webhook receiver of the test with
resolved notifications, stopped and removed at the end."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

NAMES = ("prometheus-alertmanager", "alertmanager")


def alertmanager_bin() -> str | None:
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Alertmanager:
    def __init__(self, receiver_url: str) -> None:
        exe = alertmanager_bin()
        if exe is None:
            raise FileNotFoundError("alertmanager not found (Debian package "
                                    "prometheus-alertmanager)")
        self.root = Path(tempfile.mkdtemp(prefix="stragglers-am-"))
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
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.root / "log"
        self.proc = subprocess.Popen(
            [exe, f"--config.file={self.root / 'am.yml'}",
             f"--storage.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))

    def start(self, timeout: float = 60.0) -> Alertmanager:
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
        raise AssertionError(f"alertmanager did not start:\n{self.log.read_text()}")

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds (active ones: resolved alerts are not listed)."""
        flt = [f'{k}="{v}"' for k, v in labels.items()]
        r = httpx.get(f"{self.url}/api/v2/alerts", params={"filter": flt}, timeout=30)
        r.raise_for_status()
        found: list[dict[str, Any]] = r.json()
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
