"""diff.html drawn from diff.json: every ranked change and what was not compared is on the
page; heatmaps where workers were compared, none where the layouts differ."""

from __future__ import annotations

import re

import pytest
from markupsafe import escape

from stragglers.diff import compare, to_document
from stragglers.diff.report import delta_bars, render_diff_report
from tests.diff.helpers import side


def test_the_page_holds_the_changes_and_the_heatmaps() -> None:
    doc = to_document(compare(side(seed=1, slow_workers=[(0, 3, 1.5)]),
                              side(seed=2, slow_workers=[(1, 2, 1.5)])))
    html = render_diff_report(doc)
    assert doc["changes"][0]["kind"] == "moves"
    for c in doc["changes"]:
        assert str(escape(c["text"])) in html
    assert 'id="worker-heatmap-a"' in html and 'id="worker-heatmap-b"' in html
    # each heatmap marks the worker its own verdict names
    for side_name, worker in (("a", ("0", "3")), ("b", ("1", "2"))):
        grid = html.split(f'id="worker-heatmap-{side_name}"')[1].split("</svg>")[0]
        marked = re.findall(r'<rect class="cell mark"[^>]*data-dp="(\d+)" data-stage="(\d+)"',
                            grid)
        assert marked == [worker]
    assert "moved: 0,3 → 1,2 (worker)" in html


def test_layouts_that_differ_are_said_and_draw_no_worker_heatmap() -> None:
    doc = to_document(compare(side(seed=0, dp=2), side(seed=1, slow_workers=[(3, 1, 1.5)])))
    html = render_diff_report(doc)
    assert "not compared: <b>workers</b>" in html and "not compared: <b>dp_ranks</b>" in html
    assert "worker-heatmap" not in html and "Workers that moved most" not in html
    assert "Stages that moved most" in html and "Not matched: the layouts differ" in html


def test_bars_grow_right_and_shrink_left() -> None:
    rows = [{"key": "x", "delta_s": 0.2, "significant": True},
            {"key": "y", "delta_s": -0.1, "significant": True},
            {"key": "z", "delta_s": 0.01, "significant": False}]
    x, y, z = delta_bars(rows)
    assert (x.label, x.x, x.width, x.fill) == ("x", 180, 180, "#d62828")
    assert (y.label, y.x + y.width, y.width, y.fill) == ("y", 180, 90, "#2a9d8f")
    assert z.fill == "#bbbbbb"


@pytest.mark.slow
def test_the_page_renders_offline_in_chromium(page, tmp_path) -> None:
    from stragglers.diff.outputs import write_diff

    diff = compare(side(seed=0), side(seed=1, slow_workers=[(1, 2, 1.5)]))
    files = write_diff(diff, tmp_path / "d")
    url = files["report"].as_uri()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    assert page.locator("#conclusion h2").inner_text() == diff.conclusion
    # the inline stylesheet applied (its hash is allowed; anything else would be blocked)
    assert page.evaluate("getComputedStyle(document.querySelector('header'))"
                         ".backgroundColor") == "rgb(43, 45, 66)"
    cell = page.locator('#worker-heatmap-b rect[data-dp="1"][data-stage="2"]')
    assert cell.get_attribute("class") == "cell mark"
    assert requests == [url] and errors == []
