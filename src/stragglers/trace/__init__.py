"""Trace I/O, validation and the dense op table.

The names below are loaded on first use (PEP 562), so that ``stragglers.trace.schema`` (the
op types, used everywhere) does not import pyarrow and the table code: start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stragglers.trace.io import (
        JobMeta,
        TraceColumns,
        parse_steps,
        read_meta,
        read_trace,
        select_steps,
        write_meta,
        write_trace,
    )
    from stragglers.trace.table import OpTable, build_table

__all__ = [
    "JobMeta", "OpTable", "TraceColumns", "build_table", "parse_steps", "read_meta",
    "read_trace", "select_steps", "write_meta", "write_trace",
]

_HOME = {name: "stragglers.trace.table" if name in ("OpTable", "build_table")
         else "stragglers.trace.io" for name in __all__}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'stragglers.trace' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
