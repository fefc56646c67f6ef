"""Live step records on SMon (issue 29): the probes' per-rank busy and wait of every step,
posted as a job's record stream, make the server's detector name the slow rank (not the
ones waiting for it) on the API, the jobs page (checked in Chromium) and ``/metrics``; the
probe posts them by itself while the job runs (``ProbeConfig.push_server``).

One server for the module (its start-up is most of the cost); each test has a job of its
own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stragglers.service.client import push_records
from tests.service.helpers import TOKEN, Server

pytestmark = pytest.mark.slow  # a server process


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("live-serve")
    token = folder / "token"
    token.write_text(TOKEN + "\n")
    server = Server(folder / "data", token)
    try:
        yield server.start()
    finally:
        server.stop()


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


def _culprit_on_the_jobs_page(page: Any, server: Server, job: str) -> str:
    page.goto(f"{server.url}/")
    row = page.locator("#jobs tbody tr", has=page.locator(f'td.job a:text-is("{job}")'))
    return str(row.locator("td.culprit").inner_text())


def test_step_records_name_the_culprit_rank(live_server: Server, page: Any) -> None:
    """Hand-built records (rank 1 1.5x from step 60 on), posted in batches as a probe's
    flushes send them: the onset is rank 1's at step 60, the job's culprit rank 1 on the API,
    the jobs page (Chromium) and ``/metrics``."""
    server = live_server
    lines = _step_lines(120)
    for k in range(0, len(lines), 40):
        push_records(lines[k:k + 40], "steps-live", server.url, TOKEN)
    doc = server.get("/api/v1/jobs/steps-live").json()
    assert doc["culprit"] == "rank 1", doc
    assert doc["detection"]["slow_ranks"] == [1]
    events = server.get("/api/v1/jobs/steps-live/events").json()["events"]
    onsets = [(e["rank"], e["job_iteration"]) for e in events if e["event"] == "onset"]
    assert onsets == [(1, SLOW)], onsets
    assert _slow_rank_metrics(server, "steps-live") == {"1": 1.0}
    assert "stragglers_job_slow_ranks{training_job=\"steps-live\"} 1.0" in server.get(
        "/metrics").text
    assert _culprit_on_the_jobs_page(page, server, "steps-live") == "rank 1 (detector)"


def _train(steps: int, **config: object) -> Any:
    """A one-process loop of ``steps`` steps with ``attach(..., config=ProbeConfig(**config))``;
    the probe's live pusher."""
    torch = pytest.importorskip("torch")
    from stragglers.probe import ProbeConfig, attach

    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = config.pop("out")
    probe = attach(model, out, config=ProbeConfig(flush_interval_s=0.05, **config))
    for _ in range(steps):
        with probe.step():
            model(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    probe.close()
    return probe.probe._pusher


def test_the_probe_posts_its_step_records_while_the_job_runs(live_server: Server,
                                                             tmp_path: Path) -> None:
    """A one-process loop with ``push_server``: every step record reaches the job's stream
    (the server counts them); the session is pushed at the end as before."""
    pusher = _train(30, out=tmp_path / "run", first_step=2, push_server=live_server.url,
                    push_token_file=str(live_server.token_file), push_job="live-one")
    assert pusher is not None and (pusher.posted, pusher.failed, pusher.error) == (30, 0, None)
    job = live_server.get("/api/v1/jobs/live-one").json()
    assert job["records"] == 30, job


def test_a_server_that_is_down_costs_the_live_records_nothing(token_file: Path,
                                                              tmp_path: Path, caplog: Any,
                                                              monkeypatch: Any) -> None:
    import stragglers.service.client as client
    from stragglers.probe.recorder import rank_file

    monkeypatch.setenv(client.RETRY_ENV, "0")  # one try per batch: no retries in a test
    pusher = _train(5, out=tmp_path / "run", push_server="http://127.0.0.1:9",
                    push_token_file=str(token_file))
    assert pusher.posted == 0 and pusher.failed == 5 and "127.0.0.1:9" in pusher.error
    assert len(rank_file(tmp_path / "run" / "probe", 0, "steps").read_text().splitlines()) == 5
    assert "5 not (5 failed" in caplog.text


#: The DDP job of the end-to-end test: rank 1 slowed (0.3 s more per step) from step
#: DDP_SLOW_FROM on; the job is stopped once the server names it (the onset is declared about
#: 8 steps after it). Not earlier: a noisy start can keep a rank's warm-up open past step 30
#: (measured: 10-17 in 12 of 14 ranks' runs here, 31 and 37 in the others; a slowdown inside
#: it is found when the level before it is one: tests/detect/test_steps.py has such a run),
#: and at load 5-8 the first ~70 steps of a rank's joined series can hold a candidate level
#: of the start-up (its values before the job's pace scale is set are raw busy times: a run
#: here opened one at step 10 that became a trend at step 71 and hid a slowdown at step 40
#: until then; the start-up's step test judges the whole stretch).
DDP_STEPS, DDP_SLOW_FROM = 150, 80


def _busy_ms(run: Path) -> str:
    """Each rank's busy times (ms) from its live step records (for a failure's message)."""
    from stragglers.probe.recorder import rank_file

    out = []
    for r in (0, 1):
        path = rank_file(run / "probe", r, "steps")
        rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        out.append(f"rank {r} busy ms: " + " ".join(f"{1e3 * x['busy']:.1f}" for x in rows))
    return "\n".join(out)


def _rise_at_the_slowdown(server: Server) -> bool:
    """Whether the job's events have a rise of rank 1 declared within 20 steps after
    ``DDP_SLOW_FROM`` and placed at it (-10..+2: on the loaded machine rank 1 can run 2-3x
    slower for a few steps just before its slowdown, and the onset declared after the
    slowdown then starts where that began; one full run: rank 1 at 50-74 ms from step 72
    against 20 ms, 320 ms from step 80, the onset placed at 73 and declared at 88)."""
    doc = server.get("/api/v1/jobs/ddp-live/events")
    if doc.status_code != 200:
        return False
    return any(e["event"] in ("onset", "change") and e["rank"] == 1
               and e["level_s"] > e["previous_s"]
               and 0 <= e["declared_job_iteration"] - DDP_SLOW_FROM <= 20
               and -10 <= e["job_iteration"] - DDP_SLOW_FROM <= 2
               for e in doc.json()["events"])


def test_a_ddp_job_pushed_live_names_its_slow_rank(live_server: Server, page: Any,
                                                   tmp_path: Path) -> None:
    """The plain DDP snippet (2 processes, gloo) with rank 1 slowed from step 80 on, its
    probe pushing to a real server (the snippet's ``attach`` given a ``ProbeConfig`` with
    ``push_server``): while the job runs, the server's detector names rank 1, the jobs page
    (Chromium) shows it as the job's culprit and ``/metrics`` has
    ``stragglers_job_slow_rank{rank="1"} 1``; the rise is placed at step 80. (``watch``
    following such a job's probe folder: the guide's example, docs/guides/watch.md.)

    The server's detector has the default threshold (10 %): on a loaded 2-core machine it
    also names the relative stragglers the machine makes (the watch guide's runs: false
    onsets in 3 of 5 healthy DDP runs of 120 steps), so another rank named too, or rank 1
    named before its slowdown, is not a failure here: the test waits for the rise placed at
    step 80 and checks the API, page and metrics then; the hand-built records above check
    the exact culprit."""
    pytest.importorskip("torch")
    from tests.probe.integration import REPO, tool

    server = live_server
    text = (REPO / "docs" / "snippets" / "ddp_loop.py").read_text()
    attach = "stragglers.probe.attach(model, out_dir=sys.argv[1])"
    assert attach in text
    script = tmp_path / "ddp_push.py"
    script.write_text(text.replace(attach, (
        "stragglers.probe.attach(model, out_dir=sys.argv[1], config=stragglers.probe."
        "ProbeConfig(first_step=2, push_server=os.environ['PUSH_URL'], "
        "push_token_file=os.environ['PUSH_TOKEN'], push_job='ddp-live'))")))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PUSH_URL": server.url,
           "PUSH_TOKEN": str(server.token_file), "STEPS": str(DDP_STEPS), "SLOW_RANK": "1",
           "SLOW_FROM": str(DDP_SLOW_FROM)}
    job = subprocess.Popen([*tool("torchrun"), "--standalone", "--nproc-per-node", "2",
                            str(script), str(tmp_path / "run")], env=env, cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[str, Any] = {}
    try:
        end = time.monotonic() + 600
        while time.monotonic() < end and job.poll() is None:
            # wait for the rise at the slowdown, not the first naming of rank 1: the loaded
            # machine's own stragglers may name it before (a false onset at step 18 of a
            # CI run ended the job before its slowdown began)
            doc = server.get("/api/v1/jobs/ddp-live")
            if (doc.status_code == 200 and _rise_at_the_slowdown(server)
                    and 1 in ((doc.json()["detection"] or {}).get("slow_ranks") or ())):
                seen = {"job": doc.json(), "metrics": _slow_rank_metrics(server, "ddp-live"),
                        "page": _culprit_on_the_jobs_page(page, server, "ddp-live")}
                break
            time.sleep(0.3)
    finally:
        running = job.poll() is None
        job.terminate()  # torchrun stops its workers
        out, _ = job.communicate(timeout=120)
    assert seen and running, (
        f"no rise of rank 1 at step {DDP_SLOW_FROM} while the job ran: "
        f"{server.get('/api/v1/jobs/ddp-live').text}\n"
        f"{server.get('/api/v1/jobs/ddp-live/events').text}\n{_busy_ms(tmp_path / 'run')}\n"
        f"{out[-2000:]}")
    assert seen["job"]["culprit"].startswith("rank "), seen  # no analysed session yet
    assert "1" in seen["job"]["culprit"][5:].split(", "), seen
    assert seen["metrics"].get("1") == 1.0, seen
    shown = re.fullmatch(r"rank ([\d, ]+) \(detector\)", seen["page"])
    assert shown and "1" in shown.group(1).split(", "), seen
