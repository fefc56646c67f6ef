"""SVG view models of an analysis's heatmaps and op-type attribution, shared by the
dashboard (:mod:`stragglers.service.dashboard`) and the self-contained report
(:mod:`stragglers.viz.report`); drawn by the macros of ``viz/templates/analysis.html``.

Heatmaps are SVG grids whose cells carry their values (``data-*`` attributes and a
``<title>``), so that hovering shows them with the dashboard's script, or as a plain tooltip
without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from markupsafe import Markup, escape

from stragglers.analysis.heatmaps import HeatmapData

#: Colour ramp for slowdowns (1 = white, the largest = dark red), as (position, RGB).
RAMP = ((0.0, (255, 255, 255)), (0.15, (255, 237, 160)), (0.4, (254, 178, 76)),
        (0.7, (240, 59, 32)), (1.0, (128, 0, 38)))
MAX_WIDTH = 880
NAN_FILL = "#dddddd"


def _palette(levels: int = 256) -> np.ndarray:
    pos = np.array([p for p, _ in RAMP])
    rgb = np.array([c for _, c in RAMP], dtype=float)
    t = np.linspace(0.0, 1.0, levels)
    chans = np.stack([np.interp(t, pos, rgb[:, k]) for k in range(3)], axis=1)
    return np.array(["#{:02x}{:02x}{:02x}".format(*np.rint(c).astype(int)) for c in chans])


PALETTE = _palette()


def fills(values: np.ndarray, vmax: float) -> np.ndarray:
    """The ramp's colour of each slowdown between 1 and ``vmax`` (grey where not finite)."""
    span = max(vmax - 1.0, 1e-9)
    with np.errstate(invalid="ignore"):
        t = np.clip((values - 1.0) / span, 0.0, 1.0)
    idx = np.rint(np.nan_to_num(t) * (len(PALETTE) - 1)).astype(int)
    return np.where(np.isfinite(values), PALETTE[idx], NAN_FILL)


def colour(value: float, vmax: float) -> str:
    return str(fills(np.array([value]), vmax)[0])


@dataclass(frozen=True)
class Grid:
    """A heatmap: ``n_x`` columns × ``n_y`` rows of ``w`` × ``h`` pixel cells; ``rects``
    is its SVG, one ``<rect>`` per cell carrying its position and value (``data-*``) and its
    tooltip (``data-tip``; the worker map also a ``<title>`` for browsers without
    scripts)."""

    id: str
    title: str
    x_title: str
    y_title: str
    n_x: int
    n_y: int
    w: float
    h: float
    values: np.ndarray
    rects: Markup
    x_labels: tuple[tuple[float, str], ...]
    y_labels: tuple[tuple[float, str], ...]
    vmax: float
    legend: tuple[tuple[str, str], ...]

    @property
    def width(self) -> float:
        return 60 + self.n_x * self.w + 10

    @property
    def height(self) -> float:
        return 10 + self.n_y * self.h + 40


def _labels(n: int, size: float, names: Sequence[str]) -> tuple[tuple[float, str], ...]:
    step = max(1, math.ceil(n / max(1.0, (n * size) / 28)))
    return tuple(((i + 0.5) * size, names[i]) for i in range(0, n, step))


def _legend(vmax: float) -> tuple[tuple[str, str], ...]:
    return tuple((f"{v:.3g}", colour(v, vmax)) for v in np.linspace(1.0, vmax, 6))


def _vmax(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(max(finite.max() if finite.size else 1.0, 1.05))


def _rects(values: np.ndarray, w: float, h: float, vmax: float, x_attr: str, y_attr: str,
           x_names: Sequence[str], y_names: Sequence[str], tip: str,
           marks: frozenset[tuple[int, int]] = frozenset(), titles: bool = False,
           cell_names: Sequence[Sequence[str]] | None = None) -> Markup:
    """The cells' SVG, built in one pass (a Jinja loop is too slow for 10^4 cells).
    ``tip`` is a format string with ``{x}``, ``{y}``, ``{v}`` and (``cell_names[y][x]``,
    when given) ``{n}``."""
    n_y, n_x = values.shape
    fill = fills(values, vmax)
    xs = [f"{i * w:g}" for i in range(n_x)]
    ys = [f"{j * h:g}" for j in range(n_y)]
    xn = [str(escape(x)) for x in x_names]
    yn = [str(escape(y)) for y in y_names]
    size = f'width="{w:g}" height="{h:g}"'
    out = []
    for j in range(n_y):
        row_v, row_f = values[j].tolist(), fill[j].tolist()
        for i in range(n_x):
            v = f"{row_v[i]:.4f}"
            n = str(escape(cell_names[j][i])) if cell_names is not None else ""
            text = tip.format(x=xn[i], y=yn[j], v=v, n=n)
            cls = "cell mark" if (i, j) in marks else "cell"
            title = f"<title>{text}</title>" if titles else ""
            out.append(f'<rect class="{cls}" x="{xs[i]}" y="{ys[j]}" {size} '
                       f'fill="{row_f[i]}" data-{x_attr}="{xn[i]}" data-{y_attr}="{yn[j]}" '
                       f'data-value="{v}" data-tip="{text}">{title}</rect>')
    return Markup("\n".join(out))


def worker_grid(data: HeatmapData, names: Mapping[str, str] | None = None) -> Grid:
    """The DP × PP worker heatmap (x: DP rank, y: stage) of S_w; ``names`` (a result
    document's ``worker_names``: ``"dp_rank,stage"`` to ``"rank 3 (host-a)"``) adds each
    worker's name to its tooltip."""
    values = np.asarray(data.worker, dtype=float)  # (pp, dp)
    vmax = _vmax(values)
    w = max(4.0, min(48.0, MAX_WIDTH / data.dp))
    h = max(14.0, min(40.0, 320 / data.pp))
    dps, stages = [str(i) for i in range(data.dp)], [str(i) for i in range(data.pp)]
    marks = frozenset((m.dp_rank, m.stage) for m in data.highlight)
    cell_names = None
    tip = "DP rank {x}, stage {y}: S_w = {v}"
    if names:
        cell_names = [[names.get(f"{d},{s}", "") for d in range(data.dp)]
                      for s in range(data.pp)]
        tip = "DP rank {x}, stage {y}, {n}: S_w = {v}"
    rects = _rects(values, w, h, vmax, "dp", "stage", dps, stages, tip, marks, titles=True,
                   cell_names=cell_names)
    return Grid(id="worker-heatmap", title=f"worker slowdown S_w ({data.method})",
                x_title="DP rank", y_title="stage", n_x=data.dp, n_y=data.pp, w=w, h=h,
                values=values, rects=rects, x_labels=_labels(data.dp, w, dps),
                y_labels=_labels(data.pp, h, stages), vmax=vmax, legend=_legend(vmax))


def step_grid(data: HeatmapData, by: str, titles: bool = False) -> Grid | None:
    """Per-step slowdown by DP rank or by stage (x: DP rank / stage, y: step); ``titles``
    adds a ``<title>`` to each cell (a tooltip without the dashboard's script)."""
    if not data.steps:
        return None
    values = np.asarray(data.per_step[by], dtype=float)  # (n_steps, n_cols)
    n_steps, n_cols = values.shape
    vmax = _vmax(values)
    w = max(3.0, min(48.0, MAX_WIDTH / n_cols))
    h = max(6.0, min(22.0, 400 / n_steps))
    label = "DP rank" if by == "dp_rank" else "stage"
    cols = [str(i) for i in range(n_cols)]
    rects = _rects(values, w, h, vmax, by.replace("_", "-"), "step", cols, list(data.steps),
                   f"step {{y}}, {label} {{x}}: S = {{v}}", titles=titles)
    return Grid(id=f"steps-{by.replace('_', '-')}", title=f"per-step slowdown by {label}",
                x_title=label, y_title="step", n_x=n_cols, n_y=n_steps, w=w, h=h,
                values=values, rects=rects, x_labels=_labels(n_cols, w, cols),
                y_labels=_labels(n_steps, h, list(data.steps)), vmax=vmax,
                legend=_legend(vmax))


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    width: float


def optype_bars(doc: dict[str, Any]) -> tuple[Bar, ...]:
    """Attribution by op type (S_t), largest first."""
    raw = doc.get("attribution", {}).get("optype", {})
    items = sorted(((str(k), float(v)) for k, v in raw.items()), key=lambda kv: -kv[1])
    top = max((v for _, v in items), default=1.0)
    return tuple(Bar(k, v, 360 * (v - 1.0) / max(top - 1.0, 1e-9) if top > 1.0 else 0.0)
                 for k, v in items)


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "—" if value is None else format(value, spec)


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"
