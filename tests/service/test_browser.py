"""The dashboard in a real browser (headless Chromium): the heatmap renders, hovering a
cell shows its DP rank, stage and S_w, the page loads nothing from elsewhere."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.service.helpers import Job, Server


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
    assert tip.inner_text() == f"DP rank 1, stage 1: S_w = {expected:.4f}"
    assert expected > 1.1  # the slowed worker
    page.mouse.move(2, 2)
    tip.wait_for(state="hidden")
    # every hypothesis with its rem and add (shared with report.html)
    assert page.locator("table.hypotheses tbody tr").count() == 6
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
