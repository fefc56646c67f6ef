"""Tests for stragglers.viz.heatmap: layout, annotations, colour scale, files, big grids."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from matplotlib.patches import Rectangle

from stragglers.viz.heatmap import (
    DPI,
    MAX_FIGSIZE,
    grid_from_worker_keys,
    plot_step_heatmap,
    plot_worker_heatmap,
    step_heatmap_figure,
    worker_heatmap_figure,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_H_PX = int(MAX_FIGSIZE[1] * DPI)
MAX_W_PX = int(MAX_FIGSIZE[0] * DPI)

GRID_2x4 = np.array(
    [
        [1.0, 1.25, 1.5, 2.0],
        [1.004, 1.1, np.nan, 1.333],
    ]
)


def _cell_texts(fig) -> dict[tuple[int, int], str]:
    ax = fig.axes[0]
    return {
        (round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts
    }


def _image(fig):
    return fig.axes[0].get_images()[0]


def test_worker_heatmap_annotates_every_cell_of_2x4_grid():
    fig = worker_heatmap_figure(GRID_2x4, title="2 x 4")
    texts = _cell_texts(fig)
    assert texts == {
        (0, 0): "1.00",
        (0, 1): "1.25",
        (0, 2): "1.50",
        (0, 3): "2.00",
        (1, 0): "1.00",
        (1, 1): "1.10",
        (1, 2): "n/a",
        (1, 3): "1.33",
    }
    ax = fig.axes[0]
    # Stage 0 at the top, DP rank along x, integer ticks for every cell.
    assert ax.get_ylim() == (1.5, -0.5)
    assert ax.get_xlim() == (-0.5, 3.5)
    assert list(ax.get_xticks()) == [0, 1, 2, 3]
    assert list(ax.get_yticks()) == [0, 1]
    assert ax.get_xlabel() == "DP rank"
    assert ax.get_ylabel() == "PP stage"
    assert ax.get_title() == "2 x 4"
    # Text colour contrasts with the cell: dark red top value gets white text.
    colours = {
        (round(t.get_position()[1]), round(t.get_position()[0])): t.get_color() for t in ax.texts
    }
    assert colours[(0, 3)] == "white"
    assert colours[(0, 0)] == "black"


def test_worker_heatmap_colour_scale_anchored_at_one_and_nan_is_grey():
    fig = worker_heatmap_figure(GRID_2x4, title="t", value_label="S_w")
    im = _image(fig)
    assert im.norm.vmin == 1.0
    assert im.norm.vmax == 2.0
    data = im.get_array()
    assert np.ma.is_masked(data) and data.mask[1, 2] and data.mask.sum() == 1
    r, g, b, _ = im.cmap.get_bad()
    assert r == g == b and 0.3 < r < 0.9  # a mid grey, distinct from the pale 1.0 colour
    # The colour bar carries the value label.
    assert any(a.get_ylabel() == "S_w" for a in fig.axes[1:])


def test_colour_scale_keeps_a_minimum_span_and_goes_diverging_below_one():
    flat = worker_heatmap_figure(np.ones((2, 2)), title="flat")
    assert (_image(flat).norm.vmin, _image(flat).norm.vmax) == (1.0, pytest.approx(1.1))
    below = worker_heatmap_figure(np.array([[0.8, 1.0], [1.1, 1.2]]), title="below")
    norm = _image(below).norm
    assert norm.vmin == pytest.approx(0.8) and norm.vmax == pytest.approx(1.2)
    assert norm(1.0) == pytest.approx(0.5)  # 1.0 is the centre of the diverging map


def test_highlight_outlines_dp_stage_cell():
    fig = worker_heatmap_figure(GRID_2x4, title="t", highlight=[(3, 1)])
    rects = [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]
    assert len(rects) == 2  # black outer + white inner line
    for rect in rects:
        cx = rect.get_x() + rect.get_width() / 2
        cy = rect.get_y() + rect.get_height() / 2
        assert (cx, cy) == (pytest.approx(3.0), pytest.approx(1.0))
        assert not rect.get_fill()
    with pytest.raises(ValueError, match=r"\(1, 3\).*outside"):
        worker_heatmap_figure(GRID_2x4, title="t", highlight=[(1, 3)])


@pytest.mark.parametrize(
    "bad", [np.ones(4), np.ones((0, 3)), np.array([[1.0, np.inf]]), [["a", "b"]]]
)
def test_worker_heatmap_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        worker_heatmap_figure(bad, title="t")


def test_plot_worker_heatmap_writes_bounded_png(tmp_path: Path):
    out = plot_worker_heatmap(
        GRID_2x4, tmp_path / "sub" / "heat.png", title="t", highlight=[(0, 0)]
    )
    assert out == tmp_path / "sub" / "heat.png"
    raw = out.read_bytes()
    assert raw.startswith(PNG_MAGIC) and len(raw) > 5_000
    h, w, _ = mpimg.imread(out).shape
    assert 200 <= h <= MAX_H_PX and 400 <= w <= MAX_W_PX


@pytest.mark.slow
def test_16x1024_heatmap_is_unannotated_and_capped(tmp_path: Path):
    # (its drawing time is measured by bench/bench_whatif.py, not asserted here)
    rng = np.random.default_rng(0)
    values = 1.0 + 0.02 * rng.random((16, 1024))
    values[5, 700] = 2.5
    values[15, :] += 0.2
    fig = worker_heatmap_figure(values, title="big", highlight=[(700, 5)])
    ax = fig.axes[0]
    assert len(ax.texts) == 0
    assert len(ax.get_xticks()) <= 20
    assert _image(fig).get_array().shape == (16, 1024)  # no reduction needed
    out = plot_worker_heatmap(values, tmp_path / "big.png", title="big", highlight=[(700, 5)])
    assert mpimg.imread(out).shape[:2] == (MAX_H_PX, MAX_W_PX)


def test_wide_grid_is_reduced_by_block_max_keeping_a_single_straggler():
    values = np.ones((4, 4096))
    values[2, 4001] = 3.0
    fig = worker_heatmap_figure(values, title="wide")
    im = _image(fig)
    reduced = im.get_array()
    assert reduced.shape == (4, 1024)
    assert reduced.max() == 3.0 and reduced[2, 4001 // 4] == 3.0
    assert "max over 4" in fig.axes[0].get_xlabel()
    assert fig.axes[0].get_xlim() == (-0.5, 4095.5)


def test_step_heatmap_labels_texts_and_file(tmp_path: Path):
    values = np.array([[1.0, 1.2, 1.05], [1.5, 1.0, 1.01]])
    columns = ["forward-compute", "backward-compute", "gc"]
    fig = step_heatmap_figure(
        values,
        step_labels=[10, 11],
        column_labels=columns,
        title="per step",
        column_title="operation type",
    )
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["10", "11"]
    assert [t.get_text() for t in ax.get_xticklabels()] == columns
    assert ax.get_ylabel() == "step" and ax.get_xlabel() == "operation type"
    assert sorted(_cell_texts(fig).values()) == sorted(
        ["1.00", "1.20", "1.05", "1.50", "1.00", "1.01"]
    )
    out = plot_step_heatmap(
        values,
        step_labels=[10, 11],
        column_labels=columns,
        path=tmp_path / "steps.png",
        title="per step",
        column_title="operation type",
    )
    assert out.read_bytes().startswith(PNG_MAGIC)
    h, w, _ = mpimg.imread(out).shape
    assert h <= MAX_H_PX and w <= MAX_W_PX


def test_step_heatmap_many_steps_thins_ticks_and_drops_text():
    values = np.ones((200, 8))
    fig = step_heatmap_figure(
        values,
        step_labels=list(range(200)),
        column_labels=list(range(8)),
        title="t",
        column_title="DP rank",
    )
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert 5 <= len(labels) <= 32 and labels[0] == "0"
    assert len(ax.texts) == 0


def test_step_heatmap_label_count_mismatch():
    with pytest.raises(ValueError, match="step_labels"):
        step_heatmap_figure(
            np.ones((2, 2)), step_labels=[1], column_labels=[0, 1], title="t", column_title="c"
        )
    with pytest.raises(ValueError, match="column_labels"):
        step_heatmap_figure(
            np.ones((2, 2)), step_labels=[1, 2], column_labels=[0], title="t", column_title="c"
        )


def test_grid_from_worker_keys():
    grid = grid_from_worker_keys({"0,0": 1.9, "3,1": 1.2}, dp_size=4, pp_size=2)
    assert grid.shape == (2, 4)
    assert grid[0, 0] == 1.9 and grid[1, 3] == 1.2
    assert np.isnan(grid).sum() == 6
    with pytest.raises(ValueError, match="outside"):
        grid_from_worker_keys({"4,0": 1.0}, dp_size=4, pp_size=2)
    with pytest.raises(ValueError, match="dp,stage"):
        grid_from_worker_keys({"w3": 1.0}, dp_size=4, pp_size=2)


def test_many_outlines_are_drawn_and_laid_out_as_one_by_one(tmp_path: Path, monkeypatch):
    """Beyond a few highlighted cells the outlines leave the layout to one box spanning them
    (laying out each took seconds for 1,024 of 16k workers): the same PNG."""
    import stragglers.viz.heatmap as hm

    values = 1.0 + 0.5 * np.random.default_rng(2).random((4, 256))
    cells = [(d, s) for d in (0, 17, 100, 255) for s in range(4)] + [(3, 2), (250, 1)]
    assert len(cells) > hm._LAYOUT_OUTLINES
    fast = plot_worker_heatmap(values, tmp_path / "fast.png", title="t", highlight=cells)
    monkeypatch.setattr(hm, "_LAYOUT_OUTLINES", 10_000)
    slow = plot_worker_heatmap(values, tmp_path / "slow.png", title="t", highlight=cells)
    assert fast.read_bytes() == slow.read_bytes()
