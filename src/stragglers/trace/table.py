"""The dense op table: one row per op identity, one column per (DP rank, step).

Every DP rank and every step runs the same set of op identities ``(stage, optype,
seq_id)`` (whatif-model.md §1), so start times and durations fit arrays of shape
``(n_nodes, dp_size, n_steps)``. Building the table is also where a missing op, a
duplicate op or a worker absent from a step is found and reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from stragglers.errors import InputError
from stragglers.trace.io import JobMeta, TraceColumns
from stragglers.trace.schema import OPTYPES
from stragglers.trace.validate import validate_rows


@dataclass
class OpTable:
    """Dense view of a validated trace.

    Node attributes (``node_*``) are indexed by node; ``start`` and ``duration`` have shape
    ``(n_nodes, dp_size, n_steps)`` in seconds, in the trace's float precision; ``steps``
    are the trace's step ids in increasing order; ``ranks[d, s]`` is the global rank of
    worker (d, s).
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


#: Above this many possible identities, factorise by sorting instead of counting.
_DENSE_KEY_LIMIT = 1 << 26


def node_keys(trace: TraceColumns) -> tuple[np.ndarray, int]:
    """Integer identity of each row's op, (stage, optype, seq_id), and the key range."""
    max_seq = int(trace.seq_id.max()) + 1
    keys = (trace.stage.astype(np.int64) * len(OPTYPES) + trace.optype) * max_seq
    keys += trace.seq_id
    return keys, (int(trace.stage.max()) + 1) * len(OPTYPES) * max_seq


def _factorize_small(keys: np.ndarray, key_range: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and each row's index into them (O(n) for small key ranges)."""
    if key_range > _DENSE_KEY_LIMIT:
        return np.unique(keys, return_inverse=True)
    present = np.bincount(keys, minlength=key_range) > 0
    lut = np.cumsum(present) - 1
    return np.flatnonzero(present), lut[keys]


def _factorize_steps(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique step ids and each row's index (hash-based, O(n))."""
    codes, uniques = pd.factorize(step, sort=True)
    return np.asarray(uniques), codes.astype(np.int64)


def build_table(trace: TraceColumns, meta: JobMeta) -> OpTable:
    """Validate ``trace`` against ``meta`` and build its :class:`OpTable`."""
    validate_rows(trace, meta)
    dp, pp = meta.dp_size, meta.pp_size
    steps, step_idx = _factorize_steps(trace.step)
    n_steps = len(steps)
    worker_step = (trace.dp_rank.astype(np.int64) * pp + trace.stage) * n_steps + step_idx

    # Every worker in every step.
    present = np.bincount(worker_step, minlength=dp * pp * n_steps)
    del worker_step
    if (present == 0).any():
        w, t = divmod(int(np.flatnonzero(present == 0)[0]), n_steps)
        d, s = divmod(w, pp)
        n_missing = int((present == 0).sum())
        raise InputError(
            f"{trace.source}: worker dp_rank {d} stage {s} has no ops in step {steps[t]} "
            f"({n_missing} worker-step(s) missing; every worker must appear in every step)"
        )

    keys, key_range = node_keys(trace)
    node_key, node_of_row = _factorize_small(keys, key_range)
    del keys
    n_nodes = len(node_key)
    # Attributes of each node from one of its rows (any: all rows are checked against it).
    first_row = np.empty(n_nodes, dtype=np.int64)
    first_row[node_of_row] = np.arange(len(node_of_row))

    cell = node_of_row * dp
    cell += trace.dp_rank
    cell *= n_steps
    cell += step_idx
    del step_idx
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
    del cell, counts
    shape = (n_nodes, dp, n_steps)

    start, dur = start.reshape(shape), dur.reshape(shape)
    _check_seq_order(trace, start, first_row, node_of_row, steps)

    ranks = np.empty((dp, pp), dtype=np.int64)
    ranks[trace.dp_rank, trace.stage] = trace.rank
    return OpTable(
        meta=meta, source=trace.source, steps=steps,
        node_stage=trace.stage[first_row].astype(np.int64),
        node_optype=trace.optype[first_row].astype(np.int64),
        node_seq=trace.seq_id[first_row].astype(np.int64),
        node_mc=node_mc.astype(np.int64), node_gmc=node_gmc.astype(np.int64),
        node_mb=trace.mb_id[first_row].astype(np.int64),
        start=start, duration=dur, ranks=ranks,
    )


def _check_seq_order(trace: TraceColumns, start: np.ndarray, first_row: np.ndarray,
                     node_of_row: np.ndarray, steps: np.ndarray) -> None:
    """``seq_id`` numbers the ops of one type on one worker and step by start time: an op
    that starts before the op with the previous seq_id makes a non-monotonic trace."""
    stage = trace.stage[first_row].astype(np.int64)
    opt = trace.optype[first_row].astype(np.int64)
    seq = trace.seq_id[first_row].astype(np.int64)
    ident = {(a, b, c): n for n, (a, b, c) in enumerate(zip(stage.tolist(), opt.tolist(),
                                                            seq.tolist(), strict=True))}
    prev = np.array([ident.get((a, b, c - 1), -1) for a, b, c in zip(
        stage.tolist(), opt.tolist(), seq.tolist(), strict=True)], dtype=np.int64)
    has = np.flatnonzero(prev >= 0)
    bad = start[has] < start[prev[has]]
    if bad.any():
        k, d, t = (int(x[0]) for x in np.nonzero(bad))
        n = int(has[k])
        raise InputError(
            f"{trace.source}: field 'seq_id' is not in start-time order (non-monotonic) on "
            f"worker dp_rank {d} stage {stage[n]} step {steps[t]}: "
            f"{OPTYPES[opt[n]]} seq_id {seq[n]} starts at {start[n, d, t]:.6f} s, before "
            f"seq_id {seq[n] - 1} at {start[prev[n], d, t]:.6f} s"
        )
