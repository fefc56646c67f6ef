"""Fixtures of the service tests: real `stragglers serve` processes on loopback, small
synthetic sessions with known verdicts, a real webhook receiver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.helpers import TOKEN, Job, Receiver, Server, make_job


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    p = tmp_path / "token"
    p.write_text(TOKEN + "\n")
    return p


@pytest.fixture
def server_factory(tmp_path: Path, token_file: Path) -> Iterator[Any]:
    started: list[Server] = []

    def make(data: Path | None = None, args: tuple[str, ...] = (),
             env: dict[str, str] | None = None) -> Server:
        s = Server(data or tmp_path / "data", token_file, args, env or {})
        started.append(s)  # stopped at the end even when it fails to start
        return s.start()

    yield make
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def jobs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jobs")


@pytest.fixture(scope="session")
def slow_job(jobs_dir: Path) -> Job:
    """dp 2 × pp 2, worker (1,1) computes 1.5× as long: S ≈ 1.21, verdict worker 1,1."""
    return make_job(jobs_dir, "slow")


@pytest.fixture(scope="session")
def healthy_job(jobs_dir: Path) -> Job:
    """The same job without a straggler: S = 1, verdict none."""
    return make_job(jobs_dir, "healthy", slow=None)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()
