"""report.html (issue 20): ``analyze --out`` writes one self-contained page with the job,
S, waste, discrepancy, the verdict with evidence and confidence, every hypothesis with its
rem/add, the heatmaps, the op-type attribution and how to open the timelines; it loads
nothing from anywhere (checked in the file, and in headless Chromium from a file:// URL)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from stragglers.cli import main


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``stragglers demo``'s folder: its job (a slow worker 1,1 and a heavy last stage)
    analysed with --out."""
    out = tmp_path_factory.mktemp("report") / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_report_is_written_with_the_other_outputs(demo: Path) -> None:
    doc = json.loads((demo / "result.json").read_text())
    assert doc["outputs"]["report"] == str(demo / "report.html")
    html = (demo / "report.html").read_text()
    assert "Verdict: worker (1,1) · confidence 1.00" in html
    assert f"{doc['slowdown']:.5f}" in html and f"{100 * doc['waste']:.1f}%" in html
    assert f"{doc['discrepancy']:.4f}" in html
    for e in doc["verdict"]["evidence"]:
        assert e.replace("'", "&#39;") in html
    for h in doc["verdict"]["hypotheses"]:  # every hypothesis, with rem and add
        assert f"<td>{h['cause']}</td>" in html
        if h["rem"] is not None:
            assert f'<td class="num">{h["rem"]:.2f}</td>' in html
    assert 'id="worker-heatmap"' in html and 'id="steps-dp-rank"' in html
    assert "backward-compute" in html  # attribution by op type
    assert "timeline-original.json" in html and "ui.perfetto.dev" in html


@pytest.mark.slow
def test_report_loads_nothing_from_anywhere(demo: Path) -> None:
    html = (demo / "report.html").read_text()
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert csp is not None and "default-src 'none'" in csp.group(1)
    assert "unsafe-inline" not in csp.group(1)
    # no attribute points anywhere: no src, no href to a network, no script, no import
    assert not re.search(r"""\b(src|href|action|srcset|poster|data)\s*=\s*["']?\s*(https?:)?//""",
                         html, re.I)
    assert not re.search(r"<(script|link|iframe|img|object|embed)\b", html, re.I)
    assert "@import" not in html and "url(" not in html


@pytest.mark.slow
def test_report_renders_offline_in_chromium(page, demo: Path, tmp_path: Path) -> None:
    from PIL import Image

    url = (demo / "report.html").as_uri()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    heading = page.locator("section.verdict h2")
    assert heading.inner_text() == "Verdict: worker (1,1) · confidence 1.00"
    # the inline stylesheet applied (its hash is allowed; anything else would be blocked)
    assert page.evaluate("getComputedStyle(document.querySelector('header'))"
                         ".backgroundColor") == "rgb(43, 45, 66)"
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("STRAGGLERS_SCREENSHOT_DIR"):
        page.screenshot(path=str(Path(os.environ["STRAGGLERS_SCREENSHOT_DIR"]) /
                                 "report.png"), full_page=True)
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)

    def region(selector: str) -> np.ndarray:
        box = page.locator(selector).first.bounding_box()
        assert box is not None and box["width"] > 10 and box["height"] > 10, selector
        x, y = int(box["x"]), int(box["y"])
        return img[y:y + int(box["height"]), x:x + int(box["width"])]

    # the verdict text is drawn: dark text pixels in its heading
    assert (region("section.verdict h2").sum(axis=2) < 200).mean() > 0.02
    # the heatmap is drawn: the slow worker's cell (DP 1, stage 1) in the ramp's dark red
    cell = region('#worker-heatmap rect[data-dp="1"][data-stage="1"]')
    centre = cell[cell.shape[0] // 2, cell.shape[1] // 2]
    assert np.abs(centre - np.array([128, 0, 38])).max() <= 8, centre
    fast = region('#worker-heatmap rect[data-dp="0"][data-stage="0"]')
    assert fast[fast.shape[0] // 2, fast.shape[1] // 2].min() > 240  # S_w ~ 1: white
    assert requests == [url]  # nothing but the file itself
    assert errors == [] and not [c for c in console if c.startswith("error")], console


def test_report_from_the_analysis_equals_the_report_from_its_document() -> None:
    """``analyze --out`` hands the report the heatmaps' data of the analysis instead of
    reading it back from result.json: the same page."""
    from stragglers.analysis import analyze_table
    from stragglers.analysis.heatmaps import HeatmapData
    from stragglers.synth import SynthSpec, generate
    from stragglers.trace import build_table
    from stragglers.viz.report import render_report

    trace, meta, _ = generate(SynthSpec(dp=3, pp=2, steps=4, jitter=0.05,
                                        slow_workers=[(2, 1, 1.5)], seed=4))
    result = analyze_table(build_table(trace, meta)).result
    doc = json.loads(json.dumps(result.to_document()))
    assert render_report(doc, data=HeatmapData.of(result)) == render_report(doc)
