"""The dense op table: one row per op identity, one column per (DP rank, step).

Every DP rank and every step runs the same set of op identities ``(stage, optype,
seq_id)`` (whatif-model.md §1), so start times and durations fit arrays of shape
``(n_nodes, dp_size, n_steps)``. Building the table is also where a missing op, a
duplicate op or a worker absent from a step is found and reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglers.errors import InputError
from stragglers.trace.io import JobMeta, TraceColumns
from stragglers.trace.schema import OPTYPES
from stragglers.trace.validate import validate_rows, validate_seq_order


@dataclass
class OpTable:
    """Dense view of a validated trace.

    Node attributes (``node_*``) are indexed by node; ``start`` and ``duration`` have shape
    ``(n_nodes, dp_size, n_steps)`` in seconds, in the trace's float precision; ``steps`` are the trace's step ids
    in increasing order; ``ranks[d, s]`` is the global rank of worker (d, s).
    """

    meta: JobMeta
    source: str
    steps: np.ndarray
    node_stage: np.ndarray
    node_optype: np.ndarray
    node_seq: np.ndarray
    node_mc: np.ndarray
    node_gmc: np.ndarray
    node_mb: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    ranks: np.ndarray

    @property
    def n_nodes(self) -> int:
        return int(self.node_stage.shape[0])

    @property
    def end(self) -> np.ndarray:
        return self.start + self.duration

    def node_name(self, n: int) -> str:
        return (f"{OPTYPES[int(self.node_optype[n])]} seq {int(self.node_seq[n])} "
                f"on stage {int(self.node_stage[n])}")

    def step_times(self) -> np.ndarray:
        """Actual step time per step: latest end − earliest start over all ops."""
        end = self.start + self.duration
        return end.max(axis=(0, 1)) - self.start.min(axis=(0, 1))


def node_keys(trace: TraceColumns) -> np.ndarray:
    """Integer identity of each row's op: (stage, optype, seq_id)."""
    max_seq = int(trace.seq_id.max()) + 1
    return (trace.stage.astype(np.int64) * len(OPTYPES) + trace.optype) * max_seq + trace.seq_id


def build_table(trace: TraceColumns, meta: JobMeta) -> OpTable:
    """Validate ``trace`` against ``meta`` and build its :class:`OpTable`."""
    validate_rows(trace, meta)
    dp, pp = meta.dp_size, meta.pp_size
    steps, step_idx = np.unique(trace.step, return_inverse=True)
    n_steps = len(steps)
    worker_step = (trace.dp_rank.astype(np.int64) * pp + trace.stage) * n_steps + step_idx

    # Every worker in every step.
    present = np.bincount(worker_step, minlength=dp * pp * n_steps)
    if (present == 0).any():
        w, t = divmod(int(np.flatnonzero(present == 0)[0]), n_steps)
        d, s = divmod(w, pp)
        n_missing = int((present == 0).sum())
        raise InputError(
            f"{trace.source}: worker dp_rank {d} stage {s} has no ops in step {steps[t]} "
            f"({n_missing} worker-step(s) missing; every worker must appear in every step)"
        )

    validate_seq_order(trace, worker_step)

    keys = node_keys(trace)
    node_key, node_of_row = np.unique(keys, return_inverse=True)
    n_nodes = len(node_key)
    # Attributes of each node from one of its rows (the first occurrence).
    order = np.argsort(node_of_row, kind="stable")
    starts = np.searchsorted(node_of_row[order], np.arange(n_nodes))
    first_row = order[starts]

    cell = (node_of_row * dp + trace.dp_rank) * n_steps + step_idx
    counts = np.bincount(cell, minlength=n_nodes * dp * n_steps)
    if (counts > 1).any():
        dup_cell = int(np.flatnonzero(counts > 1)[0])
        rows = np.flatnonzero(cell == dup_cell)[:2]
        raise InputError(
            f"{trace.source}: duplicate op (worker, step, optype, seq_id) in rows "
            f"{rows[0]} and {rows[1]}: {trace.row(int(rows[0]))}"
        )
    # A node exists only on its own stage: every (node, dp, step) cell must be filled.
    if (counts == 0).any():
        miss = int(np.flatnonzero(counts == 0)[0])
        node, rest = divmod(miss, dp * n_steps)
        d, t = divmod(rest, n_steps)
        r = int(first_row[node])
        raise InputError(
            f"{trace.source}: worker dp_rank {d} stage {trace.stage[r]} step {steps[t]} lacks "
            f"op {OPTYPES[int(trace.optype[r])]} seq_id {trace.seq_id[r]}, which other "
            f"workers/steps of that stage have (e.g. row {r}); "
            f"{int((counts == 0).sum())} op(s) missing in all"
        )

    node_mc = trace.mc[first_row]
    node_gmc = trace.gmc[first_row]
    for name, attr in (("mc", node_mc), ("gmc", node_gmc)):
        bad = getattr(trace, name) != attr[node_of_row]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(
                f"{trace.source}: field '{name}' of one op identity differs across workers or "
                f"steps (e.g. row {i}: {trace.row(i)} vs row {int(first_row[node_of_row[i]])})"
            )

    # Keep the trace's own precision: derived values are computed in it (as the published
    # analyzer does on float32 traces) and the simulator works in float64.
    dtype = np.result_type(trace.start_ts.dtype, trace.duration.dtype)
    start = np.empty(n_nodes * dp * n_steps, dtype=dtype)
    dur = np.empty_like(start)
    start[cell] = trace.start_ts
    dur[cell] = trace.duration
    shape = (n_nodes, dp, n_steps)

    ranks = np.empty((dp, pp), dtype=np.int64)
    ranks[trace.dp_rank, trace.stage] = trace.rank
    return OpTable(
        meta=meta, source=trace.source, steps=steps,
        node_stage=trace.stage[first_row].astype(np.int64),
        node_optype=trace.optype[first_row].astype(np.int64),
        node_seq=trace.seq_id[first_row].astype(np.int64),
        node_mc=node_mc.astype(np.int64), node_gmc=node_gmc.astype(np.int64),
        node_mb=trace.mb_id[first_row].astype(np.int64),
        start=start.reshape(shape), duration=dur.reshape(shape), ranks=ranks,
    )
