"""The fleet table: one row per job (``fleet.parquet``), the job's name and key beside its
:class:`~stragglers.fleet.task.FleetRow`; op-type shares as ``share_<key>`` columns (NaN for
op types the job does not have), per-step slowdowns as a list column."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stragglers.atomic import open_atomic
from stragglers.fleet.task import OP_KEYS, FleetRow


@dataclass(frozen=True)
class NamedRow:
    """A job of this run: its name (folder), content key and row."""

    job: str
    key: str
    row: FleetRow


def share_column(op_key: str) -> str:
    return "share_" + op_key.replace("-", "_")


_SCALAR = [f for f in fields(FleetRow) if f.name not in ("op_share", "step_slowdown")]
_TYPES = {int: pa.int64(), float: pa.float64(), bool: pa.bool_(), str: pa.string()}


def to_arrow(rows: Sequence[NamedRow]) -> pa.Table:
    """The fleet table as Arrow (column order: job, key, the row's fields, shares, steps)."""
    cols: dict[str, pa.Array] = {
        "job": pa.array([r.job for r in rows], pa.string()),
        "key": pa.array([r.key for r in rows], pa.string()),
    }
    hints = {"int": int, "float": float, "bool": bool, "str": str}
    for f in _SCALAR:
        typ = _TYPES[hints[str(f.type)]]
        cols[f.name] = pa.array([getattr(r.row, f.name) for r in rows], typ)
    for k in OP_KEYS:
        vals = [dict(r.row.op_share).get(k, math.nan) for r in rows]
        cols[share_column(k)] = pa.array(vals, pa.float64())
    cols["step_slowdown"] = pa.array([list(r.row.step_slowdown) for r in rows],
                                     pa.list_(pa.float64()))
    return pa.table(cols)


def write_table(rows: Sequence[NamedRow], path: str | Path) -> Path:
    """Write ``fleet.parquet`` atomically."""
    with open_atomic(path, "wb") as fh:
        pq.write_table(to_arrow(rows), fh)
    return Path(path)
