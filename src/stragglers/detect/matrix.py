"""Localisation matrices (C4D §3.1).

Communication slow.  Message latencies between workers are reduced to a source x destination
matrix (median latency per connection; NaN where no message was seen).  With ``base`` the median
of all observed cells and a cell *high* when it exceeds ``factor * base``:

* a row whose median cell is high is a **slow source** (its sends are slow everywhere);
* a column whose median cell is high is a **slow destination**;
* a high cell whose row and column are both normal is a **slow connection** (that one link).

Rows and columns are judged on their median so that one slow connection cannot make a whole row
or column suspect, and a slow row cannot make every column suspect.

Non-communication slow.  In a ring collective each rank receives from its predecessor, and the
receiver posts its buffer first ("receiver-driven"), so a receiver that waits long for data waits
for a *sender* that is late: slow compute or data loading on that sender.  :func:`late_senders`
takes receive waits per (sender, receiver) message and flags senders whose median receiver wait
exceeds ``factor`` times the median over all senders (and ``min_wait`` seconds).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from stragglers.detect.records import MessageRecord

__all__ = [
    "MatrixFinding",
    "SenderFinding",
    "classify_matrix",
    "delay_matrix",
    "late_senders",
]


def delay_matrix(src: Sequence[int], dst: Sequence[int], latency: Sequence[float],
                 n_ranks: int | None = None) -> np.ndarray:
    """Median latency per (src, dst); NaN where no message was observed."""
    s = np.asarray(src, dtype=np.int64)
    d = np.asarray(dst, dtype=np.int64)
    lat = np.asarray(latency, dtype=float)
    if not (s.size == d.size == lat.size):
        raise ValueError("src, dst and latency must have the same length")
    n = int(n_ranks) if n_ranks is not None else (int(max(s.max(), d.max())) + 1 if s.size else 0)
    if s.size and (s.min() < 0 or d.min() < 0 or s.max() >= n or d.max() >= n):
        raise ValueError(f"rank out of range for a {n} x {n} matrix")
    m = np.full((n, n), np.nan)
    if s.size == 0:
        return m
    cell = s * n + d
    order = np.lexsort((lat, cell))
    cell, lat = cell[order], lat[order]
    starts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1]])
    counts = np.diff(np.r_[starts, cell.size])
    lo = starts + (counts - 1) // 2
    hi = starts + counts // 2
    m.flat[cell[starts]] = 0.5 * (lat[lo] + lat[hi])
    return m


@dataclass(frozen=True)
class MatrixFinding:
    kind: str  # "source" | "destination" | "connection"
    src: int | None
    dst: int | None
    ratio: float  # latency (row/column median, or cell) over the matrix median

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "src": self.src, "dst": self.dst,
                "ratio": round(self.ratio, 4)}


def classify_matrix(matrix: np.ndarray, factor: float = 1.5) -> list[MatrixFinding]:
    """Slow sources (rows), destinations (columns) and single connections (cells)."""
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError("the delay matrix must be square")
    finite = np.isfinite(m)
    if not finite.any():
        return []
    base = float(np.median(m[finite]))
    if base <= 0:
        return []
    with np.errstate(all="ignore"):
        row_med = np.array([np.median(r[np.isfinite(r)]) if np.isfinite(r).any() else np.nan
                            for r in m])
        col_med = np.array([np.median(c[np.isfinite(c)]) if np.isfinite(c).any() else np.nan
                            for c in m.T])
    bad_row = np.nan_to_num(row_med, nan=0.0) > factor * base
    bad_col = np.nan_to_num(col_med, nan=0.0) > factor * base
    out: list[MatrixFinding] = []
    for r in np.flatnonzero(bad_row):
        out.append(MatrixFinding("source", int(r), None, float(row_med[r] / base)))
    for c in np.flatnonzero(bad_col):
        out.append(MatrixFinding("destination", None, int(c), float(col_med[c] / base)))
    high = np.nan_to_num(m, nan=0.0) > factor * base
    high &= ~bad_row[:, None] & ~bad_col[None, :]
    for r, c in zip(*np.nonzero(high), strict=True):
        out.append(MatrixFinding("connection", int(r), int(c), float(m[r, c] / base)))
    return out


@dataclass(frozen=True)
class SenderFinding:
    sender: int
    receivers: tuple[int, ...]
    median_wait_s: float
    ratio: float

    def to_dict(self) -> dict[str, object]:
        return {"sender": self.sender, "receivers": list(self.receivers),
                "median_wait_s": self.median_wait_s, "ratio": round(self.ratio, 4)}


def late_senders(src: Sequence[int], dst: Sequence[int], wait: Sequence[float], *,
                 factor: float = 2.0, min_wait: float = 0.0) -> list[SenderFinding]:
    """Senders whose receivers wait anomalously long for their data (see module docstring)."""
    s = np.asarray(src, dtype=np.int64)
    d = np.asarray(dst, dtype=np.int64)
    w = np.asarray(wait, dtype=float)
    if not (s.size == d.size == w.size):
        raise ValueError("src, dst and wait must have the same length")
    if s.size == 0:
        return []
    senders, inv = np.unique(s, return_inverse=True)
    med = np.array([np.median(w[inv == i]) for i in range(senders.size)])
    overall = float(np.median(med))
    out = []
    for i in np.flatnonzero((med > factor * overall) & (med > min_wait)):
        recv = tuple(int(x) for x in np.unique(d[inv == i]))
        ratio = float(med[i] / overall) if overall > 0 else float("inf")
        out.append(SenderFinding(int(senders[i]), recv, float(med[i]), ratio))
    out.sort(key=lambda f: -f.median_wait_s)
    return out


def from_records(records: Iterable[MessageRecord], n_ranks: int | None = None
                 ) -> tuple[np.ndarray, list[MatrixFinding], list[SenderFinding]]:
    """Delay matrix, its findings and the late senders from message records."""
    recs = list(records)
    m = delay_matrix([r.src for r in recs], [r.dst for r in recs], [r.latency for r in recs],
                     n_ranks)
    waits = [r for r in recs if r.wait is not None]
    senders = late_senders([r.src for r in waits], [r.dst for r in waits],
                           [r.wait for r in waits])  # type: ignore[misc]
    return m, classify_matrix(m), senders
