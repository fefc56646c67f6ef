"""Live step records on SMon (issue 29): the probes' per-rank busy and wait of every step,
posted as a job's record stream, make the server's detector name the slow rank (not the
ones waiting for it) on the API, the jobs page (checked in Chromium) and ``/metrics``; the
probe posts them by itself while the job runs (``ProbeConfig.push_server``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from stragglers.service.client import push_records
from tests.service.helpers import TOKEN, Server

pytestmark = pytest.mark.slow  # a server process

SLOW = 60  # rank 1's busy time is 1.5x from this step on


def _step_lines(n: int) -> list[str]:
    """Two ranks that synchronise every step: equal step times, rank 1's busy time 1.5x from
    step SLOW on, rank 0 waiting for it."""
    import numpy as np

    rng = np.random.default_rng(5)
    lines = []
    ts = 1000.0
    for k in range(n):
        busy = [0.05 * float(np.exp(rng.normal(0, 0.01))) for _ in (0, 1)]
        if k >= SLOW:
            busy[1] *= 1.5
        step = max(busy) + 0.002
        ts += step
        lines += [json.dumps({"kind": "step", "v": 1, "rank": r, "step": k, "ts": ts,
                              "busy": busy[r], "wait": step - busy[r]}) for r in (0, 1)]
    return lines


def _slow_rank_metrics(server: Server, job: str) -> dict[str, float]:
    text = server.get("/metrics").text
    found = {}
    for m in re.finditer(r'^stragglers_job_slow_rank\{([^}]*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if labels.get("training_job") == job:
            found[labels["rank"]] = float(m.group(2))
    return found


def test_step_records_name_the_culprit_rank(server_factory: Any) -> None:
    server: Server = server_factory()
    lines = _step_lines(120)
    for k in range(0, len(lines), 40):  # batches as a probe's flushes send them
        push_records(lines[k:k + 40], "ddp-live", server.url, TOKEN)
    doc = server.get("/api/v1/jobs/ddp-live").json()
    assert doc["culprit"] == "rank 1", doc
    assert doc["detection"]["slow_ranks"] == [1]
    events = server.get("/api/v1/jobs/ddp-live/events").json()["events"]
    onsets = [(e["rank"], e["job_iteration"]) for e in events if e["event"] == "onset"]
    assert onsets == [(1, SLOW)], onsets
    assert _slow_rank_metrics(server, "ddp-live") == {"1": 1.0}
    assert "stragglers_job_slow_ranks{training_job=\"ddp-live\"} 1.0" in server.get(
        "/metrics").text


def test_the_jobs_page_shows_the_culprit_rank(page: Any, server_factory: Any) -> None:
    server: Server = server_factory()
    push_records(_step_lines(120), "ddp-live", server.url, TOKEN)
    page.goto(f"{server.url}/")
    row = page.locator("#jobs tbody tr", has=page.locator('td.job a:text-is("ddp-live")'))
    assert row.locator("td.culprit").inner_text() == "rank 1 (detector)"


def test_the_probe_posts_its_step_records_while_the_job_runs(server_factory: Any,
                                                             token_file: Path,
                                                             tmp_path: Path) -> None:
    """A one-process loop with ``push_server``: every step record reaches the job's stream
    (the server counts them); the session is pushed at the end as before."""
    torch = pytest.importorskip("torch")
    from stragglers.probe import ProbeConfig, attach

    server: Server = server_factory()
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cfg = ProbeConfig(first_step=2, push_server=server.url, push_token_file=str(token_file),
                      push_job="live-one", flush_interval_s=0.05)
    probe = attach(model, tmp_path / "run", config=cfg)
    for _ in range(30):
        with probe.step():
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    probe.close()
    pusher = probe.probe._pusher
    assert pusher is not None and (pusher.posted, pusher.failed, pusher.error) == (30, 0, None)
    job = server.get("/api/v1/jobs/live-one").json()
    assert job["records"] == 30, job


def test_a_server_that_is_down_costs_the_live_records_nothing(token_file: Path,
                                                              tmp_path: Path,
                                                              caplog: Any) -> None:
    torch = pytest.importorskip("torch")
    from stragglers.probe import ProbeConfig, attach
    from stragglers.probe.recorder import rank_file

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cfg = ProbeConfig(push_server="http://127.0.0.1:9", push_token_file=str(token_file),
                      flush_interval_s=0.05)
    probe = attach(model, tmp_path / "run", config=cfg)
    for _ in range(5):
        with probe.step():
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    probe.close()
    pusher = probe.probe._pusher
    assert pusher.posted == 0 and pusher.failed == 5 and "127.0.0.1:9" in pusher.error
    assert len(rank_file(tmp_path / "run" / "probe", 0, "steps").read_text().splitlines()) == 5
    assert "5 not (5 failed" in caplog.text


def test_a_ddp_job_pushed_live_names_its_slow_rank(server_factory: Any, token_file: Path,
                                                   tmp_path: Path) -> None:
    """The plain DDP snippet (2 processes, gloo) with rank 1 slowed from step 40 to its end,
    its probe pushing to a real server (the snippet's ``attach`` given a ``ProbeConfig`` with
    ``push_server``): while the job runs, the server's detector names rank 1, the job's
    culprit is rank 1 and ``/metrics`` has ``stragglers_job_slow_rank{rank="1"}`` only."""
    pytest.importorskip("torch")
    from tests.probe.integration import REPO, tool

    server: Server = server_factory()
    text = (REPO / "docs" / "snippets" / "ddp_loop.py").read_text()
    attach = "stragglers.probe.attach(model, out_dir=sys.argv[1])"
    assert attach in text
    script = tmp_path / "ddp_push.py"
    script.write_text(text.replace(attach, (
        "stragglers.probe.attach(model, out_dir=sys.argv[1], config=stragglers.probe."
        "ProbeConfig(first_step=2, push_server=os.environ['PUSH_URL'], "
        "push_token_file=os.environ['PUSH_TOKEN'], push_job='ddp-live'))")))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PUSH_URL": server.url,
           "PUSH_TOKEN": str(token_file), "STEPS": "100", "SLOW_RANK": "1",
           "SLOW_FROM": "40"}
    job = subprocess.Popen([*tool("torchrun"), "--standalone", "--nproc-per-node", "2",
                            str(script), str(tmp_path / "run")], env=env, cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[str, Any] = {}
    try:
        end = time.monotonic() + 600
        while time.monotonic() < end and job.poll() is None:
            doc = server.get("/api/v1/jobs/ddp-live")
            if doc.status_code == 200 and doc.json()["detection"] and \
                    doc.json()["detection"]["slow"]:
                seen = {"job": doc.json(), "metrics": _slow_rank_metrics(server, "ddp-live")}
                break
            time.sleep(0.5)
        out, _ = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, out[-3000:]
    assert seen, f"the detector named no rank while the job ran:\n{out[-2000:]}"
    assert seen["job"]["detection"]["slow_ranks"] == [1], seen
    assert seen["job"]["culprit"] == "rank 1", seen  # no analysed session yet
    assert seen["metrics"] == {"1": 1.0}, seen
    events = server.get("/api/v1/jobs/ddp-live/events").json()["events"]
    onsets = [(e["rank"], e["job_iteration"]) for e in events if e["event"] == "onset"]
    assert onsets[0][0] == 1 and abs(onsets[0][1] - 40) <= 2, onsets
    assert server.get("/api/v1/jobs/ddp-live").json()["records"] == 200  # every step, 2 ranks
