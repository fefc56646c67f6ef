"""View models of the dashboard: what the templates draw, computed from the store's rows
and a session's result document (never from the heatmap PNGs). The heatmaps and the op-type
bars are shared with the report (:mod:`stragglers.viz.svg`) and re-exported here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from stragglers.service.overview import wall_clock
from stragglers.service.rows import EventRow
from stragglers.viz.svg import (
    NAN_FILL,
    PALETTE,
    RAMP,
    Bar,
    Grid,
    colour,
    fills,
    fmt,
    optype_bars,
    pct,
    step_grid,
    worker_grid,
)

__all__ = ["NAN_FILL", "PALETTE", "RAMP", "Bar", "Grid", "colour", "fills", "fmt", "optype_bars",
           "pct", "step_grid", "worker_grid"]

@dataclass(frozen=True)
class Point:
    x: float
    y: float
    tip: str
    href: str


@dataclass(frozen=True)
class Chart:
    """S (and waste) over a job's sessions, on a wall-clock (UTC) time axis."""

    width: float
    height: float
    s_points: tuple[Point, ...]
    waste_points: tuple[Point, ...]
    y_ticks: tuple[tuple[float, str], ...]
    x_ticks: tuple[tuple[float, str], ...] = ()
    x_label: str = "time (UTC)"

    @property
    def s_line(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.s_points)

    @property
    def waste_line(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.waste_points)


def time_ticks(t0: float, t1: float, px: Callable[[float], float], n: int = 5
               ) -> tuple[tuple[tuple[float, str], ...], str]:
    """Tick positions and wall-clock labels (UTC) for an axis from ``t0`` to ``t1``, and
    the axis caption (naming the date when the axis stays within one day)."""
    times = [t0] if t1 <= t0 else [float(t) for t in np.linspace(t0, t1, n)]
    first = dt.datetime.fromtimestamp(t0, dt.UTC)
    last = dt.datetime.fromtimestamp(max(t0, t1), dt.UTC)
    if first.date() == last.date():
        fmt_ = "%H:%M:%S" if t1 - t0 < 600 else "%H:%M"
        caption = f"time (UTC, {first:%Y-%m-%d})"
    else:
        fmt_ = "%m-%d %H:%M"
        caption = "time (UTC)"
    labels: list[tuple[float, str]] = []
    for t in times:  # a short span: ticks that would repeat a label are left out
        text = dt.datetime.fromtimestamp(t, dt.UTC).strftime(fmt_)
        if not labels or labels[-1][1] != text:
            labels.append((px(t), text))
    return tuple(labels), caption


def series_chart(series: Sequence[tuple[str, float, float, float]]) -> Chart | None:
    """``series``: (session, finished_at, S, waste) oldest first; x is when each session's
    analysis finished (wall clock)."""
    if not series:
        return None
    width, height, left, top, bottom = 880.0, 220.0, 50.0, 10.0, 50.0
    s = np.array([x[2] for x in series], dtype=float)
    hi = float(max(np.nanmax(s), 1.1))
    t0 = min(float(x[1]) for x in series)
    t1 = max(float(x[1]) for x in series)

    def px(t: float) -> float:
        return left + (width - left - 30) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.5)

    def py(v: float, vmax: float) -> float:
        return top + (height - top - bottom) * (1 - (v - 1.0) / (vmax - 1.0))

    s_points, w_points = [], []
    for sid, done, sv, wv in series:
        when = stamp(done)
        s_points.append(Point(px(done), py(sv, hi), f"{when}: S = {sv:.4f}",
                              f"/sessions/{sid}"))
        # waste (0..1 - 1/hi) drawn on the same axis as S through S = 1/(1 - waste)
        w_points.append(Point(px(done), py(1.0 + wv * (hi - 1.0), hi),
                              f"{when}: waste = {100 * wv:.1f}%", f"/sessions/{sid}"))
    ticks = tuple((py(v, hi), f"{v:.2f}") for v in np.linspace(1.0, hi, 5))
    x_ticks, caption = time_ticks(t0, t1, px)
    return Chart(width, height, tuple(s_points), tuple(w_points), ticks, x_ticks, caption)


@dataclass(frozen=True)
class EventMark:
    x: float
    y: float
    kind: str
    tip: str


@dataclass(frozen=True)
class Timeline:
    width: float
    height: float
    marks: tuple[EventMark, ...]
    x_ticks: tuple[tuple[float, str], ...]
    y_labels: tuple[tuple[float, str], ...]
    x_label: str = "time (UTC)"


def events_timeline(rows: Sequence[EventRow]) -> Timeline | None:
    """Detection events on a wall-clock (UTC) time axis: the records' own ``ts`` when it is
    a Unix time, else the time the server received them; one row per rank."""
    shown = [r for r in rows if r.event.kind in ("onset", "change", "recovery", "speedup",
                                                  "flapping", "drift", "suspects")]
    if not shown:
        return None
    times = [wall_clock(r.event.ts, r.received_at) for r in shown]
    ranks = sorted({r.event.rank for r in shown if r.event.rank is not None})
    row_of = {rank: i for i, rank in enumerate(ranks)}
    n_rows = len(ranks) + 1
    width, left, top = 880.0, 60.0, 10.0
    row_h = max(8.0, min(20.0, 240 / n_rows))
    height = top + n_rows * row_h + 46
    t0, t1 = min(times), max(times)

    def px(t: float) -> float:
        return left + (width - left - 40) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.5)

    marks = []
    for r, t in zip(shown, times, strict=True):
        e = r.event
        y = top + (row_of[e.rank] if e.rank is not None else len(ranks)) * row_h + row_h / 2
        sev = f", severity {100 * e.severity:.0f}%" if e.severity is not None else ""
        it = f", iteration {e.iteration}" if e.iteration is not None else ""
        who = f"rank {e.rank}" if e.rank is not None else "job"
        marks.append(EventMark(px(t), y, e.kind, f"{stamp(t)}: {e.kind}: {who}{it}{sev}"))
    ticks, caption = time_ticks(t0, t1, px)
    labels = tuple((top + i * row_h + row_h / 2, f"rank {rank}") for rank, i in row_of.items())
    return Timeline(width, height, tuple(marks), ticks,
                    labels + ((top + len(ranks) * row_h + row_h / 2, "job"),), caption)


def stamp(t: float | None) -> str:
    if t is None:
        return "—"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
