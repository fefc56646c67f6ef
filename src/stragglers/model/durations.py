"""Transfer durations and launch delays derived from the trace (whatif-model.md §3).

* transfer duration of a communication op = its end − the latest start among its group
  members in the same step (and across DP ranks for DP-synchronised groups);
* launch delay of an op = its start − the latest end among its dependencies, or − the
  step's earliest start for an op without dependencies.

Values at or below −10 ms are set to 0; the numbers of such clips are returned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglers.model.graph import DependencyGraph
from stragglers.trace.table import OpTable

#: Values at or below this are clipped to zero (seconds).
CLIP_THRESHOLD = -0.01


@dataclass
class DerivedDurations:
    """Per-node values of shape (n_nodes, dp, n_steps).

    ``value`` is what the simulator uses as an op's own time: the duration of a local op,
    the (clipped) transfer duration of a communication op. ``delay`` is the clipped
    launch delay. ``n_*_clipped`` count the clipped values; ``n_*_negative`` the small
    negative values kept.
    """

    value: np.ndarray
    delay: np.ndarray
    n_transfer_clipped: int
    n_transfer_negative: int
    n_delay_clipped: int
    n_delay_negative: int


def _clip(values: np.ndarray, rows: np.ndarray | None = None) -> tuple[int, int]:
    """Set values at or below :data:`CLIP_THRESHOLD` to 0, in place, a row (op identity) at a
    time (``rows``: those rows only, else all); the number of those, and the number of the
    small negative values kept."""
    n_clipped = n_negative = 0
    for r in (range(len(values)) if rows is None else rows.tolist()):
        row = values[r]
        low = row <= CLIP_THRESHOLD
        n_clipped += int(np.count_nonzero(low))
        n_negative += int(np.count_nonzero(row < 0)) - int(np.count_nonzero(low))
        np.copyto(row, 0.0, where=low)
    return n_clipped, n_negative


def _group_transfer(table: OpTable, graph: DependencyGraph, end: np.ndarray) -> np.ndarray:
    """Each op's duration, except that a communication op gets its transfer duration: its
    end − the latest start among its group members in the same step (and across DP ranks
    for DP-synchronised groups). Not clipped."""
    start = table.start
    value = table.duration.copy()
    for g, members in enumerate(graph.groups):
        latest = start[members].max(axis=0)  # (dp, steps)
        if graph.group_dp_sync[g]:
            latest = latest.max(axis=0, keepdims=True)
        value[members] = end[members] - latest[None]
    return value


def _launch_delays(table: OpTable, graph: DependencyGraph, end: np.ndarray) -> np.ndarray:
    """Each op's start − the latest end among its dependencies, or − the step's earliest
    start for an op without dependencies. Not clipped. An op identity at a time: rows of
    (dp, steps), no temporaries of the whole table."""
    start = table.start
    step_start = start.min(axis=(0, 1))  # (steps,)
    delay = np.empty_like(start)
    latest = np.empty_like(start[0])
    for n, deps in enumerate(graph.deps):
        if not deps:
            np.subtract(start[n], step_start[None, :], out=delay[n])
            continue
        np.copyto(latest, end[deps[0]])
        for d in deps[1:]:
            np.maximum(latest, end[d], out=latest)
        np.subtract(start[n], latest, out=delay[n])
    return delay


def derive_durations(table: OpTable, graph: DependencyGraph) -> DerivedDurations:
    end = table.start + table.duration
    value = _group_transfer(table, graph, end)
    n_tclip, n_tneg = _clip(value, np.flatnonzero(graph.is_comm))
    delay = _launch_delays(table, graph, end)
    del end
    n_dclip, n_dneg = _clip(delay)
    return DerivedDurations(value=value, delay=delay, n_transfer_clipped=n_tclip,
                            n_transfer_negative=n_tneg, n_delay_clipped=n_dclip,
                            n_delay_negative=n_dneg)
