"""The dashboard in a real browser (headless Chromium): the heatmap renders, hovering a
cell shows its DP rank, stage and S_w, the page loads nothing from elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

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
