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

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.logs.records import MessageRecord, other_kinds, read_records

__all__ = [
    "MatrixFinding",
    "MatrixReport",
    "SenderFinding",
    "classify_matrix",
    "delay_matrix",
    "late_senders",
    "matrix_report",
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


def from_records(records: Iterable[MessageRecord], n_ranks: int | None = None,
                 factor: float = 1.5
                 ) -> tuple[np.ndarray, list[MatrixFinding], list[SenderFinding]]:
    """Delay matrix, its findings (:func:`classify_matrix` with ``factor``) and the late
    senders from message records."""
    recs = list(records)
    m = delay_matrix([r.src for r in recs], [r.dst for r in recs], [r.latency for r in recs],
                     n_ranks)
    waits = [r for r in recs if r.wait is not None]
    senders = late_senders([r.src for r in waits], [r.dst for r in waits],
                           [float(r.wait or 0.0) for r in waits])
    return m, classify_matrix(m, factor), senders


@dataclass(frozen=True)
class MatrixReport:
    """``stragglers detect matrix``: the delay matrix of a file's message records, its slow
    cells, rows and columns, and the late senders."""

    skipped: dict[str, int]  # records of other kinds, by kind
    matrix: np.ndarray
    findings: list[MatrixFinding]
    late: list[SenderFinding]

    def to_dict(self, show: bool = False) -> dict[str, Any]:
        """The JSON document; ``show`` adds the matrix (null where no message was seen)."""
        m = self.matrix
        res: dict[str, Any] = {
            "skipped_records": self.skipped,
            "ranks": int(m.shape[0]),
            "median_latency_s": float(np.nanmedian(m)) if np.isfinite(m).any() else None,
            "findings": [f.to_dict() for f in self.findings],
            "late_senders": [f.to_dict() for f in self.late],
        }
        if show:
            res["matrix"] = [[None if math.isnan(v) else v for v in row] for row in m.tolist()]
        return res


def matrix_report(path: str | Path, ranks: int | None = None, factor: float = 1.5
                  ) -> MatrixReport:
    """Read the message records of a JSON-lines file and classify their delay matrix of
    ``ranks`` ranks (default: the largest rank + 1; checked against its limit first)."""
    if ranks is not None:
        check_limit("matrix_ranks", ranks, "--ranks")
    records = read_records(path)
    msgs = [r for r in records if isinstance(r, MessageRecord)]
    if not msgs:
        raise InputError(f"{path}: no message records (fields src, dst, latency)")
    top = max(max(r.src, r.dst) for r in msgs)
    if ranks is not None and top >= ranks:
        bad = next(r for r in msgs if max(r.src, r.dst) >= ranks)
        field = "src" if bad.src >= ranks else "dst"
        raise InputError(f"{path}: field '{field}': rank {max(bad.src, bad.dst)} is "
                         f"outside --ranks {ranks}")
    if ranks is None:
        check_limit("matrix_ranks", top + 1, f"{path}: largest rank {top}")
    try:
        m, findings, late = from_records(msgs, ranks, factor)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None
    return MatrixReport(other_kinds(records, MessageRecord), m, findings, late)
