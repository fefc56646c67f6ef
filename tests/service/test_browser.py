"""The dashboard in a real browser (headless Chromium): the heatmap renders, hovering a
cell shows its DP rank, stage and S_w, the page loads nothing from elsewhere."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.service.helpers import Job, Server

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)


def test_dashboard_heatmap_renders_and_hover_shows_values(page, server_factory,
                                                           slow_job: Job, tmp_path: Path):
    server: Server = server_factory()
    session = server.upload(slow_job.trace, slow_job.meta, job="browser-job").json()["session"]
    doc = server.wait(session)
    assert doc["status"] == "done"
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url)
            if not r.url.startswith(server.url) else None)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    page.goto(f"{server.url}/")
    page.click("text=browser-job")
    page.wait_for_selector("#worker-heatmap")
    cells = page.locator("#worker-heatmap rect.cell")
    assert cells.count() == 4  # dp 2 x pp 2
    assert page.locator("#worker-heatmap rect.cell.mark").count() == 1  # the verdict's worker
    cell = page.locator('#worker-heatmap rect[data-dp="1"][data-stage="1"]')
    cell.scroll_into_view_if_needed()  # below the verdict's hypotheses table
    box = cell.bounding_box()
    assert box is not None and box["width"] > 10 and box["height"] > 10
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    tip = page.locator("#tooltip")
    tip.wait_for(state="visible")
    expected = doc["result"]["attribution"]["worker"]["1,1"]
    name = doc["result"]["worker_names"]["1,1"]  # the global rank (and host where known)
    assert name.startswith("rank ")
    assert tip.inner_text() == f"DP rank 1, stage 1, {name}: S_w = {expected:.4f}"
    assert expected > 1.1  # the slowed worker
    page.mouse.move(2, 2)
    tip.wait_for(state="hidden")
    # every hypothesis with its rem and add (shared with report.html)
    hypotheses = doc["result"]["verdict"]["hypotheses"]
    # worker, last_stage, sequence_length, gc, pauses, communication, host
    assert len(hypotheses) == 7
    assert page.locator("table.hypotheses tbody tr").count() == len(hypotheses)
    assert page.locator('a[href$="/files/report.html"]').count() == 1  # to hand on
    # the per-step heatmaps and the op-type attribution are drawn too
    assert page.locator("#steps-dp-rank rect.cell").count() == 2 * 4
    assert page.locator("svg.bars rect").count() >= 3
    shot = tmp_path / "job-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("STRAGGLERS_SCREENSHOT_DIR"):
        page.screenshot(path=str(Path(os.environ["STRAGGLERS_SCREENSHOT_DIR"]) /
                                 "job-page.png"), full_page=True)
    page.goto(f"{server.url}/sessions/{session}")
    assert page.locator("#status").inner_text() == "done"
    assert outside == [] and errors == []


def test_private_dashboard_opens_in_a_browser_with_the_token_as_password(
        server_factory, slow_job: Job, tmp_path: Path):
    """Defect 6 of issue 24: `--private` took only a bearer header, which a browser cannot
    send, so the dashboard could not be opened at all. Now a read takes HTTP basic auth (any
    user, the token as password); writes still need the bearer header."""
    import base64

    import httpx

    from tests.service.browser import browser_page, chromium_path
    from tests.service.helpers import TOKEN, in_ci

    server: Server = server_factory(args=("--private",))
    session = server.upload(slow_job.trace, slow_job.meta, job="private-job").json()["session"]
    assert server.get(f"/api/v1/sessions/{session}").status_code == 401
    r = server.get("/")
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic ")

    def basic(user: str, password: str) -> dict[str, str]:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}

    assert httpx.get(f"{server.url}/", headers=basic("me", "wrong-password-0123456"),
                     timeout=60).status_code == 401
    assert httpx.get(f"{server.url}/", headers=basic("me", TOKEN), timeout=60).status_code == 200
    # basic auth never authorises a write (a browser would send it for any page)
    r = httpx.post(f"{server.url}/api/v1/jobs/x/records", headers=basic("me", TOKEN),
                   content=b'{"rank": 0, "iter": 1, "duration": 1.0}\n', timeout=60)
    assert r.status_code == 401
    end = time.monotonic() + 180
    while time.monotonic() < end:
        doc = httpx.get(f"{server.url}/api/v1/sessions/{session}?result=0",
                        headers=server.headers(), timeout=60).json()
        if doc["status"] in ("done", "failed"):
            break
        time.sleep(0.2)
    assert doc["status"] == "done"
    if chromium_path() is None:
        reason = "chromium not found (install Debian's chromium: `make system-deps`)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    with browser_page(1000, 900, {"username": "oncall", "password": TOKEN}) as page:
        statuses: list[tuple[str, int]] = []
        page.on("response", lambda resp: statuses.append((resp.url, resp.status)))
        first = page.goto(f"{server.url}/")
        assert first is not None and first.status == 200
        page.click("text=private-job")
        page.wait_for_selector("#worker-heatmap")
        assert page.locator("#worker-heatmap rect.cell").count() == 4
        # the stylesheet and the script came with the same credentials
        assert any(u.endswith("/static/style.css") and st == 200 for u, st in statuses)
        assert any(u.endswith("/static/dashboard.js") and st == 200 for u, st in statuses)
        assert all(st == 200 for _, st in statuses), statuses
        shot = tmp_path / "private.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000


STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$")
CLOCK = re.compile(r"^(\d\d-\d\d )?\d\d:\d\d(:\d\d)?$")


def _cells(page, job: str) -> dict[str, str]:
    row = page.locator("#jobs tbody tr", has=page.locator(f'td.job a:text-is("{job}")'))
    return {c: row.locator(f"td.{c}").inner_text() for c in ("culprit", "since", "labels")}


def test_jobs_page_for_on_call(page, server_factory, slow_job: Job, healthy_job: Job,
                               tmp_path: Path):
    """Defect 9 of issue 24: no culprit or "since when" column, no filter or pagination, the
    S chart's x-axis the session index, the events axis relative ("0 s"), stream-only jobs
    "—" even with an onset."""
    import httpx

    from tests.service.helpers import iteration_records

    server: Server = server_factory()
    ids = []
    for job, name, labels in ((slow_job, "oncall-a", '{"cluster": "a"}'),
                              (slow_job, "oncall-a", '{"cluster": "a"}'),
                              (healthy_job, "oncall-b", '{"cluster": "b"}')):
        r = server.upload(job.trace, job.meta, job=name, labels=labels)
        ids.append(r.json()["session"])
    for sid in ids:
        assert server.wait(sid)["status"] == "done"
    healthy = iteration_records(0, 250, 1.0, 0, seed=1)
    for name, body in (("stream-s", healthy + iteration_records(0, 60, 1.4, 250, seed=3)),
                       ("stream-h", healthy)):
        r = httpx.post(f"{server.url}/api/v1/jobs/{name}/records", headers=server.headers(),
                       content=body.encode(), timeout=60)
        assert r.status_code == 200
    (onset,) = [e for e in server.get("/api/v1/jobs/stream-s/events").json()["events"]
                if e["event"] == "onset"]
    # the same state in the API, for on-call scripts
    doc = server.get("/api/v1/jobs/stream-s").json()
    assert doc["culprit"] == "rank 0" and doc["slow_since"] == onset["received_at"]
    assert doc["detection"]["slow_ranks"] == [0] and doc["detection"]["onsets"] == 1
    by_name = {j["name"]: j for j in server.get("/api/v1/jobs").json()["jobs"]}
    assert by_name["oncall-a"]["culprit"] == "worker 1,1"
    assert by_name["oncall-a"]["labels"] == {"cluster": "a"}
    assert by_name["stream-h"]["detection"]["slow"] is False
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    page.goto(f"{server.url}/")
    assert page.locator("#jobs tbody tr").count() == 4
    a, b = _cells(page, "oncall-a"), _cells(page, "oncall-b")
    s, h = _cells(page, "stream-s"), _cells(page, "stream-h")
    assert a["culprit"].startswith("worker 1,1 (") and a["labels"] == "cluster=a"
    assert b["culprit"].startswith("none (") and b["since"] == "—"
    assert s["culprit"] == "rank 0 (detector)" and STAMP.match(s["since"])
    assert s["since"] == time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                       time.gmtime(onset["received_at"]))
    assert h["culprit"] == "—" and h["since"] == "healthy"
    shot = tmp_path / "jobs.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("STRAGGLERS_SCREENSHOT_DIR"):
        page.screenshot(path=str(Path(os.environ["STRAGGLERS_SCREENSHOT_DIR"]) /
                                 "jobs-page.png"), full_page=True)

    # filter by name and by label through the form
    page.fill('#filter input[name="q"]', "stream")
    page.click('#filter button[type="submit"]')
    page.wait_for_url("**q=stream**")
    names = page.locator("#jobs tbody td.job").all_inner_texts()
    assert sorted(names) == ["stream-h", "stream-s"]
    assert page.locator("#matched").inner_text() == "2 of 4 jobs"
    page.fill('#filter input[name="q"]', "")
    page.fill('#filter input[name="label"]', "cluster=a")
    page.click('#filter button[type="submit"]')
    page.wait_for_url("**label=cluster**")
    assert page.locator("#jobs tbody td.job").all_inner_texts() == ["oncall-a"]
    page.goto(f"{server.url}/?q=oncall-*")  # a glob
    assert sorted(page.locator("#jobs tbody td.job").all_inner_texts()) == ["oncall-a",
                                                                           "oncall-b"]

    # pagination: 3 per page
    page.goto(f"{server.url}/?per=3&sort=name&order=asc")
    first = page.locator("#jobs tbody td.job").all_inner_texts()
    assert len(first) == 3 and page.locator("#pager").inner_text().find("page 1 of 2") >= 0
    page.click('#pager a[rel="next"]')
    second = page.locator("#jobs tbody td.job").all_inner_texts()
    assert sorted(first + second) == ["oncall-a", "oncall-b", "stream-h", "stream-s"]
    assert first == sorted(first) and "page 2 of 2" in page.locator("#pager").inner_text()

    # sorted by slow since: the slow stream first, the jobs that are not slow after it
    page.goto(f"{server.url}/")
    page.click('#jobs th a:text-is("slow since")')
    assert page.locator("#jobs tbody td.job").first.inner_text() == "stream-s"

    # wall-clock axes: the S chart over the sessions' times, events in UTC
    page.goto(f"{server.url}/jobs/oncall-a")
    ticks = page.locator("#series text.x-tick").all_text_contents()
    assert ticks and all(CLOCK.match(t) for t in ticks), ticks
    assert "UTC" in page.locator("#series text.axis").text_content()
    page.goto(f"{server.url}/jobs/stream-s")
    assert "slow since " + s["since"] in page.locator("#detection").inner_text()
    assert "rank 0" in page.locator("#detection").inner_text()
    ticks = page.locator("#events text.x-tick").all_text_contents()
    assert ticks and all(CLOCK.match(t) for t in ticks), ticks
    assert not any(t.endswith(" s") for t in ticks)
    assert "UTC" in page.locator("#events text.axis").text_content()
    shot = tmp_path / "stream.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("STRAGGLERS_SCREENSHOT_DIR"):
        page.screenshot(path=str(Path(os.environ["STRAGGLERS_SCREENSHOT_DIR"]) /
                                 "stream-job-page.png"), full_page=True)
        page.goto(f"{server.url}/jobs/oncall-a")
        page.locator("#series").screenshot(
            path=str(Path(os.environ["STRAGGLERS_SCREENSHOT_DIR"]) / "series.png"))
    page.goto(f"{server.url}/jobs/stream-h")
    assert "healthy" in page.locator("#detection").inner_text()
    assert errors == []
