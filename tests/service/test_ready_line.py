"""``serve`` says it listens once the app has started, not when its socket is bound: the
``on_ready`` hook of :func:`stragglers.service.app.create_app` runs after the store is open
and the pools, dispatcher and alerter are started (the first request after the line used to
wait for the database migrations and the pools: 5 s at load 4)."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from stragglers.service.app import create_app
from stragglers.service.state import ServiceConfig


def test_on_ready_after_start_up_and_before_requests(tmp_path: Path) -> None:
    seen: list[bool] = []
    config = ServiceConfig(data=tmp_path / "data", token="t" * 32, workers=1, validators=1)
    (tmp_path / "data").mkdir()

    def ready() -> None:
        # the service exists and its dispatcher runs when the line is printed
        service = getattr(app.state, "service", None)
        seen.append(service is not None and service.dispatcher is not None)

    app = create_app(config, on_ready=ready)
    assert seen == []
    with TestClient(app) as client:
        assert seen == [True]
        assert client.get("/healthz").status_code == 200
    assert seen == [True]
