"""The dense op table: one row per op identity, one column per (DP rank, step).

Every DP rank and every step runs the same set of op identities ``(stage, optype,
seq_id)`` (whatif-model.md §1), so start times and durations fit arrays of shape
``(n_nodes, dp_size, n_steps)``. Building the table is also where a missing op, a
duplicate op or a worker absent from a step is found and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from stragglers.errors import InputError
from stragglers.limits import check_limit
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
    #: Seconds of garbage collection recorded inside each op, shape of ``duration``
    #: (float64), when the trace has the ``gc_s`` column; else None.
    gc_seconds: np.ndarray | None = None
    #: One-line reasons, found while reading and validating the trace, that make any result
    #: from it untrustworthy (e.g. coarse timestamp precision); empty for a clean trace.
    caveats: list[str] = field(default_factory=list)

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


#: Key ranges up to this many times the row count are factorised by counting (O(n), an
#: array of the key range); larger ones by sorting (no allocation beyond the rows).
_DENSE_KEY_FACTOR = 4


def node_keys(trace: TraceColumns) -> tuple[np.ndarray, int]:
    """Integer identity of each row's op, (stage, optype, seq_id), and the key range.

    The key is ``(stage * len(OPTYPES) + optype) * (max seq_id + 1) + seq_id``: below
    2**31 * 2**15 * 14 it fits int64 for any int16 stage and int32 seq_id.
    """
    max_seq = int(trace.seq_id.max()) + 1
    keys = (trace.stage.astype(np.int64) * len(OPTYPES) + trace.optype) * max_seq
    keys += trace.seq_id
    return keys, (int(trace.stage.max()) + 1) * len(OPTYPES) * max_seq


def _factorize_small(keys: np.ndarray, key_range: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and each row's index into them (O(n) for small key ranges; the
    counting array is never larger than a few times the rows)."""
    if key_range > max(_DENSE_KEY_FACTOR * len(keys), 1 << 16):
        return np.unique(keys, return_inverse=True)
    present = np.bincount(keys, minlength=key_range) > 0
    lut = np.cumsum(present) - 1
    return np.flatnonzero(present), lut[keys]


def _factorize_steps(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique step ids and each row's index (hash-based, O(n))."""
    codes, uniques = pd.factorize(step, sort=True)
    return np.asarray(uniques), codes.astype(np.int64)


def _first_absent(sorted_unique: np.ndarray, total: int) -> int:
    """Smallest value in [0, total) that ``sorted_unique`` (non-negative) lacks."""
    gaps = np.flatnonzero(sorted_unique != np.arange(len(sorted_unique)))
    return int(gaps[0]) if len(gaps) else len(sorted_unique)


def build_table(trace: TraceColumns, meta: JobMeta) -> OpTable:
    """Validate ``trace`` against ``meta`` and build its :class:`OpTable`.

    Every (op identity, DP rank, step) cell must hold exactly one row, so a valid trace has
    exactly as many cells as rows: the dense arrays are allocated only once that holds, and a
    sparse trace (one row at a far DP rank or step) is refused from its rows alone.
    """
    caveats = validate_rows(trace, meta)
    n_rows = len(trace)
    dp, pp = meta.dp_size, meta.pp_size
    steps, step_idx = _factorize_steps(trace.step)
    n_steps = len(steps)
    worker_step = (trace.dp_rank.astype(np.int64) * pp + trace.stage) * n_steps + step_idx

    # Every worker in every step.
    n_worker_steps = dp * pp * n_steps
    if n_worker_steps > n_rows:  # some are missing: find one from the rows alone
        have = np.unique(worker_step)
        missing = _first_absent(have, n_worker_steps)
        n_missing = n_worker_steps - len(have)
        del have
    else:
        present = np.bincount(worker_step, minlength=n_worker_steps)
        missing = int(np.argmin(present)) if (present == 0).any() else -1
        n_missing = int((present == 0).sum())
        del present
    del worker_step
    if missing >= 0:
        w, t = divmod(missing, n_steps)
        d, s = divmod(w, pp)
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

    n_cells = n_nodes * dp * n_steps  # a Python int: no overflow
    if n_cells < 2**62:
        cell = node_of_row * dp
        cell += trace.dp_rank
        cell *= n_steps
        cell += step_idx
        order = np.argsort(cell, kind="stable") if n_cells != n_rows else None
        if order is not None:
            dup = np.flatnonzero(cell[order][1:] == cell[order][:-1])
            if len(dup):
                rows = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
                _duplicate(trace, rows)
    if n_cells != n_rows:
        _missing_op(trace, node_of_row, first_row, step_idx, steps, dp, n_steps, n_cells)
    check_limit("table_cells", n_cells, trace.source)
    counts = np.bincount(cell, minlength=n_cells)
    if (counts != 1).any():  # equal totals: a duplicate cell means a missing one
        dup_cell = int(np.flatnonzero(counts > 1)[0])
        _duplicate(trace, [int(r) for r in np.flatnonzero(cell == dup_cell)[:2]])
    del counts
    del step_idx

    node_mc = trace.mc[first_row]
    node_gmc = trace.gmc[first_row]
    for name, attr in (("mc", node_mc), ("gmc", node_gmc)):
        bad = getattr(trace, name) != attr[node_of_row]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            r = int(first_row[node_of_row[i]])
            raise InputError(
                f"{trace.source}: field '{name}' of one op identity differs across workers or "
                f"steps (e.g. {trace.where(i)}: {trace.row(i)} vs {trace.where(r)})"
            )

    # Keep the trace's own precision: derived values are computed in it (as the published
    # analyzer does on float32 traces) and the simulator works in float64.
    dtype = np.result_type(trace.start_ts.dtype, trace.duration.dtype)
    start = np.empty(n_cells, dtype=dtype)
    dur = np.empty_like(start)
    start[cell] = trace.start_ts
    dur[cell] = trace.duration
    shape = (n_nodes, dp, n_steps)
    gc_seconds = None
    if trace.gc_s is not None:
        gc_flat = np.empty(n_cells, dtype=np.float64)
        gc_flat[cell] = trace.gc_s
        gc_seconds = gc_flat.reshape(shape)
    del cell

    start, dur = start.reshape(shape), dur.reshape(shape)
    _check_seq_order(trace, start, first_row, node_key, steps)

    ranks = np.empty((dp, pp), dtype=np.int64)
    ranks[trace.dp_rank, trace.stage] = trace.rank
    return OpTable(
        meta=meta, source=trace.source, steps=steps,
        node_stage=trace.stage[first_row].astype(np.int64),
        node_optype=trace.optype[first_row].astype(np.int64),
        node_seq=trace.seq_id[first_row].astype(np.int64),
        node_mc=node_mc.astype(np.int64), node_gmc=node_gmc.astype(np.int64),
        node_mb=trace.mb_id[first_row].astype(np.int64),
        start=start, duration=dur, ranks=ranks, gc_seconds=gc_seconds, caveats=caveats,
    )


def _duplicate(trace: TraceColumns, rows: list[int]) -> None:
    raise InputError(
        f"{trace.source}: duplicate op (worker, step, optype, seq_id) in "
        f"{trace.where(rows[0])} and {trace.where(rows[1])}: {trace.row(rows[0])}"
    )


def _missing_op(trace: TraceColumns, node_of_row: np.ndarray, first_row: np.ndarray,
                step_idx: np.ndarray, steps: np.ndarray, dp: int, n_steps: int,
                n_cells: int) -> None:
    """Report a (node, DP rank, step) cell without a row, found from the rows alone."""
    per_node = dp * n_steps
    node_counts = np.bincount(node_of_row, minlength=len(first_row))
    short = np.flatnonzero(node_counts < per_node)
    node = int(short[0])
    mine = np.flatnonzero(node_of_row == node)
    have = np.unique(trace.dp_rank[mine].astype(np.int64) * n_steps + step_idx[mine])
    d, t = divmod(_first_absent(have, per_node), n_steps)
    r = int(first_row[node])
    n_missing = n_cells - len(node_of_row)
    raise InputError(
        f"{trace.source}: worker dp_rank {d} stage {trace.stage[r]} step {steps[t]} lacks "
        f"op {OPTYPES[int(trace.optype[r])]} seq_id {trace.seq_id[r]}, which other "
        f"workers/steps of that stage have (e.g. {trace.where(r)}); "
        f"{n_missing:,} op(s) missing in all"
    )


def _check_seq_order(trace: TraceColumns, start: np.ndarray, first_row: np.ndarray,
                     node_key: np.ndarray, steps: np.ndarray) -> None:
    """``seq_id`` numbers the ops of one type on one worker and step by start time: an op
    that starts before the op with the previous seq_id makes a non-monotonic trace.

    ``node_key`` holds the sorted keys of :func:`node_keys`, in which the op with the
    previous seq_id of the same stage and type has key - 1.
    """
    stage = trace.stage[first_row].astype(np.int64)
    opt = trace.optype[first_row].astype(np.int64)
    seq = trace.seq_id[first_row].astype(np.int64)
    pos = np.searchsorted(node_key, node_key - 1)
    found = (seq > 0) & (pos < len(node_key))
    found[found] = node_key[pos[found]] == node_key[found] - 1
    has = np.flatnonzero(found)
    prev = pos[has]
    bad = start[has] < start[prev]
    if bad.any():
        k, d, t = (int(x[0]) for x in np.nonzero(bad))
        n, m = int(has[k]), int(prev[k])
        raise InputError(
            f"{trace.source}: field 'seq_id' is not in start-time order (non-monotonic) on "
            f"worker dp_rank {d} stage {stage[n]} step {steps[t]}: "
            f"{OPTYPES[opt[n]]} seq_id {seq[n]} starts at {start[n, d, t]:.6f} s, before "
            f"seq_id {seq[m]} at {start[m, d, t]:.6f} s"
        )
