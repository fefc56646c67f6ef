"""Alert housekeeping while the database is down (issue 31): one line per outage, one on
recovery, no traceback per round."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy.exc import OperationalError

from stragglers.service.alert_rules import AlertConfig
from stragglers.service.alerts import Alerter
from stragglers.service.store import Store, sqlite_url


def test_a_database_outage_is_logged_once_and_its_end_once(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    store = Store.open(sqlite_url(tmp_path), lease_s=0.15)  # a round every 0.05 s
    alerter = Alerter(store, AlertConfig(stale_s=10.0), "http://localhost")
    down = True
    rounds = 0
    real = store.renew_alerts

    def renew(ids: list[int]) -> None:
        nonlocal rounds
        rounds += 1
        if down:
            raise OperationalError("UPDATE alerts", {}, ConnectionRefusedError(
                "connection refused\nis the server running on host ...?"))
        real(ids)

    def wait_rounds(n: int) -> None:
        end, start = time.monotonic() + 60, rounds
        while rounds < start + n:
            assert time.monotonic() < end, "housekeeping stopped"
            time.sleep(0.02)

    monkeypatch.setattr(store, "renew_alerts", renew)
    caplog.set_level(logging.DEBUG, logger="stragglers.service")
    loop = threading.Thread(target=alerter._housekeeping, daemon=True)
    loop.start()
    try:
        wait_rounds(20)
        down = False
        wait_rounds(3)
        down = True
        wait_rounds(3)
    finally:
        alerter.stop()
        loop.join(10)
        store.close()
    lines = [r for r in caplog.records if r.name.startswith("stragglers.service")]
    assert all(r.exc_info is None for r in lines)
    assert "Traceback" not in caplog.text
    texts = [r.getMessage() for r in lines]
    assert len(texts) == 3, texts  # down, up again, down again
    assert texts[0].startswith("alert housekeeping failed (OperationalError: ")
    assert "connection refused" in texts[0] and "\n" not in texts[0]
    assert "works again" in texts[1] and "failed round(s))" in texts[1]
    assert int(texts[1].split("(")[1].split()[0]) >= 20
    assert texts[2].startswith("alert housekeeping failed")
