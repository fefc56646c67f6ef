"""The probes push their session by themselves (issue 10, point 2): a real example job with
``--push-server`` against a real ``stragglers serve``; rank 0 merges and uploads when the
session ends, the server analyses it. A server that is down costs the job nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("torch")

from stragglers.testbed.job import JobConfig, run_job  # noqa: E402
from tests.service.helpers import TOKEN  # noqa: E402


def _job(out: Path, **push: str) -> JobConfig:
    return JobConfig(out_dir=str(out), dp=2, pp=2, steps=5, warmup_steps=2, hidden=64,
                     heads=2, seq_len=32, vocab_size=128, gc_interval=0, **push)


@pytest.mark.slow
def test_rank0_merges_and_pushes_the_session(tmp_path: Path, server_factory: Any,
                                             token_file: Path) -> None:
    server = server_factory()
    summary = run_job(_job(tmp_path / "job", push_server=server.url,
                           push_token_file=str(token_file), push_job="probe-push"))
    pushed = json.loads((tmp_path / "job" / "probe" / "session" / "push.json").read_text())
    assert set(pushed) == {"session"}, pushed
    doc = server.wait(pushed["session"])
    assert doc["status"] == "done", doc
    # the pushed trace is the session the job merged itself: same ops, same slowdown
    ours = pd.read_parquet(summary["trace"])
    theirs = pd.read_parquet(tmp_path / "job" / "probe" / "session" / "trace.parquet")
    assert len(ours) == len(theirs) > 0
    job = doc["result"]["job"]
    assert job["dp_size"] == 2 and job["pp_size"] == 2, job
    assert doc["result"]["slowdown"] >= 1.0
    jobs = server.get("/api/v1/jobs").json()
    assert "probe-push" in json.dumps(jobs)


@pytest.mark.slow
def test_a_server_that_is_down_costs_the_job_nothing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAGGLERS_PUSH_RETRY_S", "1")  # the push gives up after 1 s
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    # port 9 (discard) on loopback: nothing listens, the connection is refused at once
    summary = run_job(_job(tmp_path / "job", push_server="http://127.0.0.1:9",
                           push_token_file=str(token)))
    assert Path(summary["trace"]).is_file()  # the job finished and merged as usual
    pushed = json.loads((tmp_path / "job" / "probe" / "session" / "push.json").read_text())
    assert set(pushed) == {"error"} and "127.0.0.1:9" in pushed["error"], pushed


def test_bad_push_server_is_refused_before_the_job_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--push-server must be an http"):
        _job(tmp_path / "job", push_server="ftp://x").check()
