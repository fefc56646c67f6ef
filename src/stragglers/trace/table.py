"""The dense op table: one row per op identity, one column per (DP rank, step).

Every DP rank and every step runs the same set of op identities ``(stage, optype,
seq_id)`` (whatif-model.md §1), so start times and durations fit arrays of shape
``(n_nodes, dp_size, n_steps)``. Building the table is also where a missing op, a
duplicate op or a worker absent from a step is found and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

from stragglers.errors import InputError
from stragglers.limits import check_limit, limit
from stragglers.phases import phase
from stragglers.trace.checks import checked_rows, sample_rows
from stragglers.trace.io import JobMeta, TraceColumns
from stragglers.trace.schema import OPTYPES


@dataclass
class OpTable:
    """Dense view of a validated trace.

    Node attributes (``node_*``) are indexed by node; ``start`` and ``duration`` have shape
    ``(n_nodes, dp_size, n_steps)`` in seconds, in the trace's float precision; ``steps``
    are the trace's step ids in increasing order; ``ranks[d, s]`` is the global rank of
    worker (d, s), ``hosts[d, s]`` the name of its machine (None when the trace has no
    ``host`` column).
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
    #: Host name of each worker, shape (dp, pp) (object array of str), when the trace has
    #: the ``host`` column; else None.
    hosts: np.ndarray | None = None

    @property
    def n_nodes(self) -> int:
        return int(self.node_stage.shape[0])

    @property
    def end(self) -> np.ndarray:
        return self.start + self.duration

    def node_name(self, n: int) -> str:
        return (f"{OPTYPES[int(self.node_optype[n])]} seq {int(self.node_seq[n])} "
                f"on stage {int(self.node_stage[n])}")

    def worker_name(self, dp_rank: int, stage: int) -> str:
        """How a person finds worker (``dp_rank``, ``stage``): its global rank and, when the
        trace names it, its host: ``"rank 3 (host-a)"``, else ``"rank 3"``."""
        name = f"rank {int(self.ranks[dp_rank, stage])}"
        if self.hosts is not None:
            name += f" ({self.hosts[dp_rank, stage]})"
        return name

    def worker_names(self) -> dict[str, str]:
        """:meth:`worker_name` of every worker, keyed as result documents key workers
        (``"dp_rank,stage"``)."""
        dp, pp = self.ranks.shape
        return {f"{d},{s}": self.worker_name(d, s) for s in range(pp) for d in range(dp)}

    def step_times(self) -> np.ndarray:
        """Actual step time per step: latest end − earliest start over all ops (an op
        identity at a time: no array of every op's end)."""
        latest = np.full(self.start.shape[2], -np.inf, dtype=self.start.dtype)
        for start, dur in zip(self.start, self.duration, strict=True):
            np.maximum(latest, (start + dur).max(axis=0), out=latest)
        return latest - self.start.min(axis=(0, 1))


#: Key ranges up to this many times the row count are factorised by counting (O(n), an
#: array of the key range); larger ones by sorting (no allocation beyond the rows).
_DENSE_KEY_FACTOR = 4


def _index_dtype(n: int) -> type[np.signedinteger]:
    """The narrowest of int32 and int64 that holds indices up to ``n``."""
    return np.int32 if n < 2**31 else np.int64


def node_keys(trace: TraceColumns) -> tuple[np.ndarray, int]:
    """Integer identity of each row's op, (stage, optype, seq_id), and the key range.

    The key is ``(stage * len(OPTYPES) + optype) * (max seq_id + 1) + seq_id``: below
    2**31 * 2**15 * 14 it fits int64 for any int16 stage and int32 seq_id (int32 when the
    range allows). Computed in place: one array of the rows' size.
    """
    max_seq = int(trace.seq_id.max()) + 1
    key_range = (int(trace.stage.max()) + 1) * len(OPTYPES) * max_seq
    keys = trace.stage.astype(_index_dtype(key_range))
    keys *= len(OPTYPES)
    keys += trace.optype
    keys *= max_seq
    keys += trace.seq_id
    return keys, key_range


def _factorize_small(keys: np.ndarray, key_range: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys (non-negative, below ``key_range``) and each row's index into them
    (int32 when it fits). O(n) for small key ranges: the counting array is never larger than
    a few times the rows; larger ranges are sorted."""
    if key_range > max(_DENSE_KEY_FACTOR * len(keys), 1 << 16):
        uniques, inverse = np.unique(keys, return_inverse=True)
        return uniques, inverse.astype(_index_dtype(len(uniques)), copy=False)
    present = np.bincount(keys, minlength=key_range) > 0
    lut = np.cumsum(present, dtype=_index_dtype(key_range))
    lut -= 1
    return np.flatnonzero(present), lut[keys]


def _factorize_steps(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique step ids and each row's index into them (int32 when it fits)."""
    low, high = int(step.min()), int(step.max())
    if high - low + 1 > max(_DENSE_KEY_FACTOR * len(step), 1 << 16):
        uniques, inverse = np.unique(step, return_inverse=True)
        return uniques, inverse.astype(_index_dtype(len(uniques)), copy=False)
    uniques, codes = _factorize_small(step - low, high - low + 1)
    return (uniques + low).astype(step.dtype, copy=False), codes


def _factorize_nodes(trace: TraceColumns) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted keys of the op identities (:func:`node_keys`), each row's node, and one row
    of each node (any: all rows are checked against it)."""
    keys, key_range = node_keys(trace)
    node_key, node_of_row = _factorize_small(keys, key_range)
    del keys
    first_row = np.empty(len(node_key), dtype=np.int64)
    first_row[node_of_row] = np.arange(len(node_of_row), dtype=_index_dtype(len(trace)))
    return node_key, node_of_row, first_row


#: Rows per block of the passes over the rows that build the table: their temporaries stay
#: in a core's cache instead of taking (and faulting in) arrays of the rows' size.
BLOCK_ROWS = 1 << 16
#: Rows of the sample from which the step ids and op identities of a trace are taken
#: (then looked up for every row, which proves the sample had them all).
SAMPLE_ROWS = 1 << 17
#: Rows at the start of the trace whose cells decide the layout values are placed in.
LAYOUT_ROWS = 1 << 16


class _SampleMissed(Exception):
    """A row whose step or op identity the sample lacks."""


def _lut(present: np.ndarray) -> np.ndarray:
    """Index of each value among the values present, -1 for the others (int64)."""
    lut = np.cumsum(present, dtype=np.int64)
    lut -= 1
    lut[~present] = -1
    return lut


def _node_keys_of(trace: TraceColumns, rows: slice | np.ndarray, max_seq: int
                  ) -> np.ndarray:
    """:func:`node_keys` of ``rows``, as int64."""
    keys = trace.stage[rows].astype(np.int64)
    keys *= len(OPTYPES)
    keys += trace.optype[rows]
    keys *= max_seq
    keys += trace.seq_id[rows]
    return keys


class _RowIndex:
    """Each row's step (its index in ``steps``) and node (its index in ``node_key``), a
    block of rows at a time (int64, the index type numpy places values with fastest).

    :meth:`sampled` takes the step ids and op identities from a sample of the rows and
    looks each row up among them (no array of the rows' size is made); a row the sample
    lacks raises :class:`_SampleMissed`. :meth:`counted` counts them on every row."""

    def __init__(self, trace: TraceColumns, steps: np.ndarray, node_key: np.ndarray, *,
                 step_low: int = 0, step_lut: np.ndarray | None = None,
                 node_lut: np.ndarray | None = None, max_seq: int = 0,
                 step_idx: np.ndarray | None = None,
                 node_of_row: np.ndarray | None = None) -> None:
        self.trace, self.steps, self.node_key = trace, steps, node_key
        self.step_low, self.step_lut, self.node_lut = step_low, step_lut, node_lut
        self.max_seq = max_seq
        self.step_idx, self.node_of_row = step_idx, node_of_row

    @property
    def sampled_only(self) -> bool:
        return self.node_of_row is None

    @classmethod
    def sampled(cls, trace: TraceColumns) -> _RowIndex | None:
        n = len(trace)
        low, high = int(trace.step.min()), int(trace.step.max())
        span = high - low + 1
        max_seq = int(trace.seq_id.max()) + 1
        key_range = (int(trace.stage.max()) + 1) * len(OPTYPES) * max_seq
        if max(span, key_range) > max(_DENSE_KEY_FACTOR * n, 1 << 16):
            return None
        sample = sample_rows(n, SAMPLE_ROWS)
        steps = np.zeros(span, dtype=bool)
        steps[trace.step[sample] - low] = True
        keys = np.zeros(key_range, dtype=bool)
        keys[_node_keys_of(trace, sample, max_seq)] = True
        return cls(trace, (np.flatnonzero(steps) + low).astype(trace.step.dtype, copy=False),
                   np.flatnonzero(keys), step_low=low,
                   step_lut=None if steps.all() else _lut(steps), node_lut=_lut(keys),
                   max_seq=max_seq)

    @classmethod
    def counted(cls, trace: TraceColumns) -> _RowIndex:
        steps, step_idx = _factorize_steps(trace.step)
        node_key, node_of_row, _ = _factorize_nodes(trace)
        return cls(trace, steps, node_key, step_idx=step_idx, node_of_row=node_of_row)

    def block(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """Step indices and nodes of rows ``lo:hi``."""
        if self.node_of_row is not None and self.step_idx is not None:
            return (self.step_idx[lo:hi].astype(np.int64),
                    self.node_of_row[lo:hi].astype(np.int64))
        assert self.node_lut is not None
        step = self.trace.step[lo:hi].astype(np.int64)
        step -= self.step_low
        if self.step_lut is not None:
            step = self.step_lut[step]
        nodes = self.node_lut[_node_keys_of(self.trace, slice(lo, hi), self.max_seq)]
        if len(nodes) and (step.min() < 0 or nodes.min() < 0):
            raise _SampleMissed
        return step, nodes

    def nodes_of_rows(self) -> np.ndarray:
        """The node of every row."""
        if self.node_of_row is not None:
            return self.node_of_row
        n = len(self.trace)
        out = np.empty(n, dtype=np.int64)
        for lo in range(0, n, BLOCK_ROWS):
            out[lo:lo + BLOCK_ROWS] = self.block(lo, lo + BLOCK_ROWS)[1]
        return out

    def last_rows(self) -> np.ndarray:
        """The last row of each node, found from the end a block at a time (the last
        blocks usually hold every node)."""
        n_nodes, n = len(self.node_key), len(self.trace)
        last = np.full(n_nodes, -1, dtype=np.int64)
        for hi in range(n, 0, -BLOCK_ROWS):
            lo = max(0, hi - BLOCK_ROWS)
            here = np.full(n_nodes, -1, dtype=np.int64)
            here[self.block(lo, hi)[1]] = np.arange(lo, hi)  # the last write wins
            np.copyto(last, here, where=last < 0)
            if last.min() >= 0:
                break
        return last


class _Layout:
    """Where each row goes in the dense (node, DP rank, step) arrays.

    Placing rows one by one into cells far apart (rows in worker and step order, as traces
    are usually written, land a whole DP x steps plane apart) misses the cache on every
    row. When the first rows lie closer together in the transposed layout (DP rank and step
    first, node last), values are placed there and transposed a block at a time; the
    result is the same."""

    def __init__(self, index: _RowIndex, dp_rank: np.ndarray, dp: int) -> None:
        self.n_nodes, self.dp, self.n_steps = len(index.node_key), dp, len(index.steps)
        m = min(len(dp_rank), LAYOUT_ROWS)
        step, nodes = index.block(0, m)
        near = [int(np.count_nonzero(np.abs(np.diff(
            self.cells(step, nodes, dp_rank[:m], t))) < 16)) for t in (False, True)]
        self.transposed = near[1] > near[0]

    def cells(self, step: np.ndarray, nodes: np.ndarray, dp_rank: np.ndarray,
              transposed: bool | None = None) -> np.ndarray:
        """Flat cell of each row (int64) in the layout."""
        if self.transposed if transposed is None else transposed:
            cell = dp_rank.astype(np.int64)  # (dp_rank * n_steps + step) * n_nodes + node
            cell *= self.n_steps
            cell += step
            cell *= self.n_nodes
            cell += nodes
            return cell
        cell = nodes * self.dp  # (node * dp + dp_rank) * n_steps + step
        cell += dp_rank
        cell *= self.n_steps
        cell += step
        return cell

    def final(self, placed: np.ndarray) -> np.ndarray:
        """The contiguous (n_nodes, dp, n_steps) array of values placed in the layout
        (``placed`` may be a strided view)."""
        shape = (self.n_nodes, self.dp, self.n_steps)
        if not self.transposed:
            return np.ascontiguousarray(placed).reshape(shape)
        cols = self.dp * self.n_steps
        src = placed.reshape(cols, self.n_nodes)
        out = np.empty((self.n_nodes, cols), dtype=placed.dtype)
        step = max(1, (1 << 21) // max(1, self.n_nodes * placed.itemsize))
        for lo in range(0, cols, step):
            out[:, lo:lo + step] = src[lo:lo + step].T
        return out.reshape(shape)


def _first_absent(sorted_unique: np.ndarray, total: int) -> int:
    """Smallest value in [0, total) that ``sorted_unique`` (non-negative) lacks."""
    gaps = np.flatnonzero(sorted_unique != np.arange(len(sorted_unique)))
    return int(gaps[0]) if len(gaps) else len(sorted_unique)


def _cell_of_row(node_of_row: np.ndarray, dp_rank: np.ndarray, step_idx: np.ndarray,
                 dp: int, n_steps: int, n_cells: int) -> np.ndarray:
    """Flat index of each row's (node, DP rank, step) cell (int32 when it fits)."""
    cell = node_of_row.astype(_index_dtype(n_cells))
    cell *= dp
    cell += dp_rank
    cell *= n_steps
    cell += step_idx
    return cell


def _pack(mc: np.ndarray, gmc: np.ndarray) -> np.ndarray:
    """``mc`` and ``gmc`` (32-bit at most) as one int64 per row: equal exactly when both
    are (one gather checks both)."""
    packed = mc.astype(np.int64)
    packed <<= 32
    packed |= gmc.astype(np.int64) & 0xFFFFFFFF
    return packed


#: Integer types whose items hold a pair of start time and duration, bit for bit.
_PAIR_TYPES: dict[int, type[np.generic]] = {4: np.int64, 8: np.complex128}


def build_table(trace: TraceColumns, meta: JobMeta) -> OpTable:
    """Validate ``trace`` against ``meta`` and build its :class:`OpTable`.

    Every (op identity, DP rank, step) cell must hold exactly one row, so a valid trace has
    exactly as many cells as rows: the dense arrays are allocated only once that holds, and a
    sparse trace (one row at a far DP rank or step) is refused from its rows alone. With as
    many rows as cells, a cell left empty once the start times are placed proves that
    another holds two rows (pigeonhole), so no per-cell count is kept. Any failure is
    diagnosed by :func:`_refuse`, which names the first problem.
    """
    with phase("validate"):
        checks = checked_rows(trace, meta)
    with phase("dense"):
        ranks = checks.ranks.astype(np.int64).reshape(meta.dp_size, meta.pp_size)
        index = _RowIndex.sampled(trace)
        if index is not None:
            try:
                return _dense_table(trace, meta, checks.caveats, ranks, index)
            except _SampleMissed:
                pass
        return _dense_table(trace, meta, checks.caveats, ranks, _RowIndex.counted(trace))


def _dense_table(trace: TraceColumns, meta: JobMeta, caveats: list[str], ranks: np.ndarray,
                 index: _RowIndex) -> OpTable:
    """The dense arrays of :func:`build_table` once the rows are checked, placed in one
    pass over blocks of rows; raises :class:`_SampleMissed` when ``index`` meets a row it
    lacks."""
    n_rows = len(trace)
    dp, pp = meta.dp_size, meta.pp_size
    steps, node_key = index.steps, index.node_key
    n_nodes, n_steps = len(node_key), len(steps)
    n_cells = n_nodes * dp * n_steps  # a Python int: no overflow
    if n_cells != n_rows or n_cells > limit("table_cells"):
        if index.sampled_only:
            raise _SampleMissed  # counted from every row before anything is refused
        _refuse(trace, meta, n_cells)
    first_row = index.last_rows()
    node_mc = trace.mc[first_row]
    node_gmc = trace.gmc[first_row]
    node_attr = _pack(node_mc, node_gmc)
    layout = _Layout(index, trace.dp_rank, dp)
    # Keep the trace's own precision: derived values are computed in it (as the published
    # analyzer does on float32 traces) and the simulator works in float64. Start times are
    # finite (checked when read), so a NaN left after placing them marks an empty cell.
    # Start times and durations are placed together, as pairs.
    dtype = np.result_type(trace.start_ts.dtype, trace.duration.dtype)
    pair_type = _PAIR_TYPES[dtype.itemsize]
    pairs = np.full((n_cells, 2), np.nan, dtype=dtype)
    placed = pairs.view(pair_type).reshape(n_cells)
    gc_flat = None if trace.gc_s is None else np.empty(n_cells, dtype=np.float64)
    consistent = True
    for lo in range(0, n_rows, BLOCK_ROWS):
        hi = min(lo + BLOCK_ROWS, n_rows)
        step, nodes = index.block(lo, hi)
        cell = layout.cells(step, nodes, trace.dp_rank[lo:hi])
        block = np.empty((hi - lo, 2), dtype=dtype)
        block[:, 0] = trace.start_ts[lo:hi]
        block[:, 1] = trace.duration[lo:hi]
        placed[cell] = block.view(pair_type).reshape(hi - lo)
        if gc_flat is not None and trace.gc_s is not None:
            gc_flat[cell] = trace.gc_s[lo:hi]
        # mc and gmc of every row against its op identity's.
        consistent = consistent and bool(np.array_equal(
            _pack(trace.mc[lo:hi], trace.gmc[lo:hi]), node_attr[nodes]))
    del placed
    if np.isnan(pairs[:, 0]).any():
        del pairs, gc_flat
        _refuse(trace, meta, n_cells)
    if not consistent:
        node_of_row = index.nodes_of_rows()
        for name, attr in (("mc", node_mc), ("gmc", node_gmc)):
            bad = getattr(trace, name) != attr[node_of_row]
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                r = int(first_row[node_of_row[i]])
                raise InputError(
                    f"{trace.source}: field '{name}' of one op identity differs across "
                    f"workers or steps (e.g. {trace.where(i)}: {trace.row(i)} vs "
                    f"{trace.where(r)})")
            del bad
    start = layout.final(pairs[:, 0])
    dur = layout.final(pairs[:, 1])
    del pairs
    gc_seconds = None if gc_flat is None else layout.final(gc_flat)
    _check_seq_order(trace, start, first_row, node_key, steps)

    hosts = None
    if trace.host is not None:  # one host per worker (check_rows)
        codes = np.empty((dp, pp), dtype=np.int64)
        codes[trace.dp_rank, trace.stage] = trace.host
        hosts = np.asarray(trace.host_names, dtype=object)[codes]
    return OpTable(
        meta=meta, source=trace.source, steps=steps,
        node_stage=trace.stage[first_row].astype(np.int64),
        node_optype=trace.optype[first_row].astype(np.int64),
        node_seq=trace.seq_id[first_row].astype(np.int64),
        node_mc=node_mc.astype(np.int64), node_gmc=node_gmc.astype(np.int64),
        node_mb=trace.mb_id[first_row].astype(np.int64),
        start=start, duration=dur, ranks=ranks, gc_seconds=gc_seconds, caveats=caveats,
        hosts=hosts,
    )


def _refuse(trace: TraceColumns, meta: JobMeta, n_cells: int) -> NoReturn:
    """Name the first reason why the rows do not fill the ``n_cells`` cells of the dense
    table exactly once: a worker absent from a step, a duplicate op, a missing op, too many
    cells (checked in that order; an error path, so the row indices are computed again)."""
    n_rows = len(trace)
    dp, pp = meta.dp_size, meta.pp_size
    steps, step_idx = _factorize_steps(trace.step)
    n_steps = len(steps)
    worker_step = (trace.dp_rank.astype(np.int64) * pp + trace.stage) * n_steps + step_idx
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

    _, node_of_row, first_row = _factorize_nodes(trace)
    if n_cells != n_rows:
        if n_cells < 2**62:
            cell = _cell_of_row(node_of_row, trace.dp_rank, step_idx, dp, n_steps, n_cells)
            order = np.argsort(cell, kind="stable")
            dup = np.flatnonzero(cell[order][1:] == cell[order][:-1])
            if len(dup):
                _duplicate(trace, sorted((int(order[dup[0]]), int(order[dup[0] + 1]))))
            del cell, order
        _missing_op(trace, node_of_row, first_row, step_idx, steps, dp, n_steps, n_cells)
    check_limit("table_cells", n_cells, trace.source)
    # As many rows as cells, and one left empty: another holds two rows.
    cell = _cell_of_row(node_of_row, trace.dp_rank, step_idx, dp, n_steps, n_cells)
    counts = np.bincount(cell, minlength=n_cells)
    dup_cell = int(np.flatnonzero(counts > 1)[0])
    _duplicate(trace, [int(r) for r in np.flatnonzero(cell == dup_cell)[:2]])


def _duplicate(trace: TraceColumns, rows: list[int]) -> NoReturn:
    raise InputError(
        f"{trace.source}: duplicate op (worker, step, optype, seq_id) in "
        f"{trace.where(rows[0])} and {trace.where(rows[1])}: {trace.row(rows[0])}"
    )


def _missing_op(trace: TraceColumns, node_of_row: np.ndarray, first_row: np.ndarray,
                step_idx: np.ndarray, steps: np.ndarray, dp: int, n_steps: int,
                n_cells: int) -> NoReturn:
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
