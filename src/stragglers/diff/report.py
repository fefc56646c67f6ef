"""``diff.html``: the diff of two analyses as one self-contained page, drawn from the diff
document (``diff.json``, data first) with the analysis report's templates, worker heatmaps
(:mod:`stragglers.viz.svg`) and stylesheet, under the same Content-Security-Policy: nothing
is loaded from anywhere (inline SVG, the style allowed by its hash, no script)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stragglers.analysis.heatmaps import HeatmapData
from stragglers.analysis.workers import Worker
from stragglers.viz.report import environment, stylesheet
from stragglers.viz.svg import Grid, worker_grid

DIFF_HTML = "diff.html"
#: Half the width of a change bar at the largest change (pixels).
BAR_HALF = 180
#: Rows of each group's bars (the largest changes; the JSON holds them all).
BAR_ROWS = 16


@dataclass(frozen=True)
class DeltaBar:
    """One group's change drawn from the centre line: to the right when it grew (red), to
    the left when it shrank (green); faint when within the noise."""

    label: str
    value: float
    x: float
    width: float
    fill: str
    title: str


def delta_bars(rows: Sequence[Mapping[str, Any]], key: str = "delta_s",
               limit: int = BAR_ROWS) -> tuple[DeltaBar, ...]:
    """Bars of the rows' ``key`` (s per step), the largest changes first."""
    items = sorted(rows, key=lambda r: -abs(float(r.get(key) or 0.0)))[:limit]
    top = max((abs(float(r.get(key) or 0.0)) for r in items), default=0.0)
    out = []
    for r in items:
        v = float(r.get(key) or 0.0)
        w = 0.0 if top <= 0 else BAR_HALF * abs(v) / top
        grew = v > 0
        fill = ("#d62828" if grew else "#2a9d8f") if r.get("significant") else "#bbbbbb"
        out.append(DeltaBar(
            label=str(r["key"]), value=v, x=BAR_HALF - (0.0 if grew else w), width=w,
            fill=fill, title=f"{r['key']}: {v:+.4f} s per step"
                             + (" (beyond the noise)" if r.get("significant") else
                                " (not named: within the noise, or a change of a part of it)")))
    return tuple(out)


def _largest(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(rows, key=lambda r: -abs(float(r.get("delta_s") or 0.0)))[:BAR_ROWS]


def _grids(doc: Mapping[str, Any]) -> list[tuple[str, Grid]]:
    """The worker heatmaps of A and B (S_w), where workers were compared."""
    rows = doc.get("workers") or []
    if not rows:
        return []
    dp, pp = int(doc["a"]["job"]["dp_size"]), int(doc["a"]["job"]["pp_size"])
    keys = [Worker.parse(r["key"]) for r in rows]
    out = []
    for side in ("a", "b"):
        grid = np.full((pp, dp), np.nan)
        vals = np.array([np.nan if r[f"s_{side}"] is None else r[f"s_{side}"] for r in rows])
        grid[[w.stage for w in keys], [w.dp_rank for w in keys]] = vals
        info = doc[side]
        highlight = tuple(Worker.parse(k) for k in info["verdict"]["workers"])
        data = HeatmapData(name=info["job"]["trial_name"], dp=dp, pp=pp, worker=grid,
                           method="exact", slowdown=float(doc["figures"]["slowdown"][side]),
                           cause=info["verdict"]["cause"], highlight=highlight, steps=(),
                           per_step={})
        g = worker_grid(data, info.get("worker_names") or {})
        out.append((side.upper(), dataclasses.replace(g, id=f"worker-heatmap-{side}",
                                                      title=f"{side.upper()}: {g.title}")))
    return out


def render_diff_report(doc: Mapping[str, Any]) -> str:
    """The page of one diff document, as one HTML string."""
    css = stylesheet()
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    groups = [(title, symbol, _largest(doc.get(key) or []), delta_bars(doc.get(key) or []))
              for key, title, symbol in (("optypes", "Op types", "S_t"),
                                         ("stages", "Stages", "S_stage"),
                                         ("dp_ranks", "DP ranks", "S_dp"),
                                         ("workers", "Workers", "S_w"))]
    return environment().get_template("diff.html").render(
        css=css, csp=csp, doc=doc, groups=groups, grids=_grids(doc),
        bar_half=BAR_HALF, bar_rows=BAR_ROWS)
