"""Trace I/O, validation and the dense op table."""

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
