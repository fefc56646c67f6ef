"""Vectorised simulation of one dependency graph over DP ranks, steps and scenarios
(whatif-model.md §4).

Times have shape ``(B, V, S)``: B scenarios (timelines simulated at once), V DP ranks
(real or "virtual": see :class:`MixedValues`) and S steps, all relative to each step's
start. Nodes are evaluated level by level (:mod:`stragglers.model.order`): a local op
starts when its dependencies have ended plus its launch delay and ends after its own
duration; a communication group starts when its last member has launched (for
DP-synchronised groups: on any DP rank) and each member ends at group start plus its
own transfer duration.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from stragglers.model.order import EvaluationOrder

ValuesFn = Callable[[np.ndarray], np.ndarray]

#: Memory budget for one batch of the per-node end-time array (bytes).
BATCH_BYTES = 96 * 2**20
#: Size of one row of times (one node, the scenarios of a batch) that
#: :func:`simulate_mixed` aims at: rows that stay in a core's cache between the ops that
#: write and read them (more scenarios per batch only add memory traffic).
ROW_BYTES = 512 * 2**10
DTYPE = np.float64


@dataclass
class SimResult:
    """``step_time`` (B, S); ``start``/``end`` (n_nodes, B, V, S) when kept."""

    step_time: np.ndarray
    start: np.ndarray | None = None
    end: np.ndarray | None = None


class MixedValues:
    """Op values for a batch of scenarios that mix original and ideal values.

    For scenario b, virtual DP rank v and node n, the value is the original one of real
    DP rank ``dp_map[b, v]`` where ``node_mask[n, b] & worker_mask[b, v, stage(n)] &
    step_mask[b, s]``, else the ideal value of node n. A mask left as None is all True.
    Virtual ranks let a scenario in which only DP rank d differs from the ideal be
    simulated with V = 2 (rank d and one ideal rank standing for all the others).
    """

    def __init__(self, orig: np.ndarray, ideal: np.ndarray, node_stage: np.ndarray,
                 dp_map: np.ndarray, node_mask: np.ndarray | None = None,
                 worker_mask: np.ndarray | None = None,
                 step_mask: np.ndarray | None = None, nonnegative: bool | None = None
                 ) -> None:
        self.orig, self.ideal, self.node_stage = orig, ideal, node_stage
        self.dp_map = dp_map
        self.node_mask, self.worker_mask, self.step_mask = node_mask, worker_mask, step_mask
        #: Whether every value in ``orig`` and ``ideal`` is >= 0 (None: not known yet).
        self.nonnegative = nonnegative

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.dp_map.shape[0], self.dp_map.shape[1], self.orig.shape[2])

    def batch(self, sl: slice) -> MixedValues:
        return MixedValues(
            self.orig, self.ideal, self.node_stage, self.dp_map[sl],
            None if self.node_mask is None else self.node_mask[:, sl],
            None if self.worker_mask is None else self.worker_mask[sl],
            None if self.step_mask is None else self.step_mask[sl], self.nonnegative,
        )

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        orig = self.orig[idx[:, None, None], self.dp_map[None]]  # (k, B, V, S)
        mask = None
        if self.node_mask is not None:
            mask = self.node_mask[idx][:, :, None, None]
        if self.worker_mask is not None:
            wm = np.moveaxis(self.worker_mask[:, :, self.node_stage[idx]], 2, 0)[..., None]
            mask = wm if mask is None else mask & wm
        if self.step_mask is not None:
            sm = self.step_mask[None, :, None, :]
            mask = sm if mask is None else mask & sm
        if mask is None:
            return orig
        return np.where(mask, orig, self.ideal[idx][:, None, None, None])


def _latest(times: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``times[index].max(axis=1)`` for a (k, width) index with a small width, one column at
    a time: maxima of whole rows, without a reduction over a short strided axis."""
    out = times[index[:, 0]]
    for j in range(1, index.shape[1]):
        np.maximum(out, times[index[:, j]], out=out)
    return out


def simulate(order: EvaluationOrder, values: ValuesFn, shape: tuple[int, int, int],
             delays: ValuesFn | None = None, keep: bool = False) -> SimResult:
    """Simulate one batch of timelines of the given (B, V, S) shape."""
    n = order.n_nodes
    end = np.empty((n + 2, *shape), dtype=DTYPE)
    end[order.pad] = -np.inf
    end[order.zero] = 0.0
    starts = np.empty((n, *shape), dtype=DTYPE) if keep else None
    min_start = np.full(shape, np.inf)
    for lv in order.levels:
        if lv.local.size:
            st = _latest(end, lv.local_deps)
            if delays is not None:
                st += delays(lv.local)
            end[lv.local] = st + values(lv.local)
            np.minimum(min_start, st.min(axis=0), out=min_start)
            if starts is not None:
                starts[lv.local] = st
        if lv.members.size:
            st = _latest(end, lv.member_deps)
            if delays is not None:
                st += delays(lv.members)
            # Group start: the latest launch of its members (much faster than
            # maximum.reduceat over the leading axis, which loops over tiny groups).
            gs = _latest(st, lv.group_members)
            if lv.group_sync.any():
                synced = gs.max(axis=2, keepdims=True)
                gs = np.where(lv.group_sync[:, None, None, None], synced, gs)
            end[lv.members] = gs[lv.member_group] + values(lv.members)
            np.minimum(min_start, st.min(axis=0), out=min_start)
            if starts is not None:
                starts[lv.members] = st
    ends = end[:n]
    step_time = ends.max(axis=(0, 2)) - min_start.min(axis=1)
    return SimResult(step_time=step_time, start=starts, end=ends if keep else None)


@dataclass(frozen=True)
class _Unit:
    """One unit of a :class:`Program`: a local op (one member) or a communication group.

    ``nodes``: its op nodes; ``slots``: the row of the pool each one's times are kept in;
    ``deps``: for each member, the rows of its dependencies (the zero row for none);
    ``sync``: the group also waits for every DP rank."""

    nodes: tuple[int, ...]
    slots: tuple[int, ...]
    deps: tuple[tuple[int, ...], ...]
    group: bool
    sync: bool
    #: The rows of every member's dependencies, once each.
    all_deps: tuple[int, ...]
    #: For each member: no op waits for it (with values >= 0 the latest end of a step is
    #: the latest end of such an op: every other op ends before one that waits for it).
    sinks: tuple[bool, ...]


@dataclass(frozen=True)
class Program:
    """An evaluation order as a sequence of units over a small pool of rows: a node's row is
    handed to another node once every op that waits for it has been evaluated, so a batch
    needs ``n_slots`` rows instead of one per node (row 0 holds zeros: the start of an op
    without dependencies)."""

    units: tuple[_Unit, ...]
    n_slots: int


def compile_program(order: EvaluationOrder) -> Program:
    """The units of ``order`` in evaluation order, with rows assigned by liveness (compiled
    once per order, and kept with it)."""
    cached = getattr(order, "_program", None)
    if isinstance(cached, Program):
        return cached
    prog = _compile(order)
    setattr(order, "_program", prog)  # noqa: B010 (an attribute the dataclass does not declare)
    return prog


def _compile(order: EvaluationOrder) -> Program:
    pad, zero = order.pad, order.zero
    raw: list[tuple[list[int], list[list[int]], bool, bool]] = []
    for lv in order.levels:
        for i, node in enumerate(lv.local.tolist()):
            deps = [d for d in lv.local_deps[i].tolist() if d != pad]
            raw.append(([node], [deps], False, False))
        for g in range(len(lv.group_start)):
            pos = lv.group_members[g]
            members = sorted(set(pos.tolist()))
            nodes = [int(lv.members[p]) for p in members]
            deps = [[d for d in lv.member_deps[p].tolist() if d != pad] for p in members]
            raw.append((nodes, deps, True, bool(lv.group_sync[g])))
    last: dict[int, int] = {}
    used: set[int] = set()
    for u, (nodes, deps, _, _) in enumerate(raw):
        for x in nodes:
            last.setdefault(x, u)
        for ds in deps:
            for d in ds:
                if d != zero:
                    last[d] = max(last[d], u)
                    used.add(d)
    slot_of = {zero: 0}
    free: list[int] = []
    n_slots = 1
    releases: dict[int, list[int]] = {}
    for x, u in last.items():
        releases.setdefault(u, []).append(x)
    units = []
    for u, (nodes, deps, group, sync) in enumerate(raw):
        slots = []
        for x in nodes:
            if free:
                slot_of[x] = free.pop()
            else:
                slot_of[x] = n_slots
                n_slots += 1
            slots.append(slot_of[x])
        dep_slots = tuple(tuple(slot_of[d] for d in ds) for ds in deps)
        units.append(_Unit(tuple(nodes), tuple(slots), dep_slots, group, sync,
                           tuple(dict.fromkeys(d for ds in dep_slots for d in ds)),
                           tuple(x not in used for x in nodes)))
        for x in releases.get(u, ()):
            free.append(slot_of[x])
    return Program(tuple(units), n_slots)


#: Up to this many virtual ranks (or scenarios) a batch's kept values are added a whole
#: rank (scenario) at a time when the kept pairs form whole ranks (scenarios).
_FEW = 16


class _Adder:
    """Adds the op values of one batch of :class:`MixedValues` to start times, a node at a
    time: the ideal value (a scalar) where no scenario keeps the node's original value, the
    original values as a whole where every one does, and only the kept (scenario, rank)
    pairs otherwise. Each time is computed as ``start + value`` in float64, exactly as
    :meth:`MixedValues.__call__` and :func:`simulate` do."""

    def __init__(self, mv: MixedValues) -> None:
        self.orig, self.ideal, self.stage = mv.orig, mv.ideal, mv.node_stage
        self.dp_map = mv.dp_map
        dp = mv.orig.shape[1]
        b, v = mv.dp_map.shape
        self.identity = v == dp and bool((mv.dp_map == np.arange(dp)[None]).all())
        self.node_mask = mv.node_mask
        self.worker_mask = (None if mv.worker_mask is None
                            else np.ascontiguousarray(np.moveaxis(mv.worker_mask, 2, 0)))
        sm = mv.step_mask
        self.step_mask = None if sm is None or bool(sm.all()) else sm
        self.shape = (b, v)

    def kept(self, n: int) -> np.ndarray | None:
        """(B, V) bool: the pairs (scenario, virtual rank) that keep node n original (None:
        all of them)."""
        nm = None if self.node_mask is None else self.node_mask[n]
        wm = None if self.worker_mask is None else self.worker_mask[self.stage[n]]
        if nm is None:
            return wm
        if wm is None:
            return np.broadcast_to(nm[:, None], self.shape)
        return np.asarray(wm & nm[:, None])

    @staticmethod
    def ideal_only(kept: np.ndarray | None) -> bool:
        """No scenario keeps the node's original value (of :meth:`kept`)."""
        return kept is not None and not kept.any()

    def add(self, n: int, start: np.ndarray, out: np.ndarray, kept: np.ndarray | None
            ) -> None:
        """``out`` = ``start`` + the values of node n, ``kept`` its :meth:`kept` (``out``
        may be ``start``; ``start``, and ``out`` where only ideal values are added, may be
        (B, 1, S): the same for every rank)."""
        if kept is None and self.step_mask is None:
            np.add(start, self._orig(n), out=out)
            return
        mask = np.ones(self.shape, dtype=bool) if kept is None else kept
        if not mask.any():
            np.add(start, self.ideal[n], out=out)
            return
        if self.step_mask is not None:
            full = mask[:, :, None] & self.step_mask[:, None, :]
            np.add(start, np.where(full, self.orig[n][self.dp_map], self.ideal[n]), out=out)
            return
        if mask.all():
            np.add(start, self._orig(n), out=out)
            return
        start = np.broadcast_to(start, out.shape)
        b, v = self.shape
        if v <= _FEW:  # whole virtual ranks kept or not (one worker, one DP rank)
            cols = np.asarray(mask.all(axis=0))
            if (cols | ~mask.any(axis=0)).all():
                for j in range(v):
                    value = self.orig[n][self.dp_map[:, j]] if cols[j] else self.ideal[n]
                    np.add(start[:, j], value, out=out[:, j])
                return
        if b <= _FEW:  # whole scenarios kept or not (a stage, an op type)
            rows = np.asarray(mask.all(axis=1))
            if (rows | ~mask.any(axis=1)).all():
                for i in range(b):
                    value = self._orig(n, i) if rows[i] else self.ideal[n]
                    np.add(start[i], value, out=out[i])
                return
        bi, vi = np.nonzero(mask)
        kept_times = start[bi, vi]
        kept_times += self.orig[n][self.dp_map[bi, vi]]
        np.add(start, self.ideal[n], out=out)
        out[bi, vi] = kept_times

    def _orig(self, n: int, i: int | None = None) -> np.ndarray:
        """Original values of node n on the batch's ranks, (B, V, S) or broadcastable to it
        (of scenario i alone, (V, S), when given)."""
        if self.identity:
            return np.asarray(self.orig[n])
        return np.asarray(self.orig[n][self.dp_map if i is None else self.dp_map[i]])


def _latest_into(rows: list[np.ndarray], out: np.ndarray) -> None:
    """``out`` = the element-wise maximum of ``rows`` (broadcast to ``out``)."""
    if len(rows) == 1:
        np.copyto(out, rows[0])
        return
    np.maximum(rows[0], rows[1], out=out)
    for r in rows[2:]:
        np.maximum(out, r, out=out)


def _nonnegative(values: MixedValues) -> bool:
    """Every value the batch can use is >= 0 (then every start is >= 0, and the earliest
    start of a step is the 0 of the ops without dependencies)."""
    if values.nonnegative is not None:
        return values.nonnegative
    return bool(values.orig.min(initial=0.0) >= 0 and values.ideal.min(initial=0.0) >= 0)


def _run_program(prog: Program, values: MixedValues, pool: np.ndarray) -> np.ndarray:
    """Step times (B, S) of one batch, its rows in ``pool`` (n_slots, B, V, S).

    A row whose times are the same on every virtual rank (an op at its ideal value whose
    dependencies are, or one that starts after a DP-synchronised group) is computed and kept
    for one rank only, ``pool[slot, :, :1]``, and broadcast where it is used: the same
    numbers, a DP-th of the work (most of a timeline in which only late ops keep their own
    values)."""
    shape = values.shape
    add = _Adder(values)
    narrow = [False] * prog.n_slots

    def row(slot: int) -> np.ndarray:
        return pool[slot, :, :1] if narrow[slot] else pool[slot]

    def target(slot: int, flat: bool) -> np.ndarray:
        narrow[slot] = flat
        return row(slot)

    pool[0, :, :1] = 0.0
    narrow[0] = True
    latest_end = np.full(shape, -np.inf)
    nonnegative = _nonnegative(values)
    min_start = None if nonnegative else np.full(shape, np.inf)
    group_start = np.empty(shape)
    for unit in prog.units:
        if not unit.group:
            node, deps = unit.nodes[0], unit.deps[0]
            mask = add.kept(node)
            out = target(unit.slots[0], _Adder.ideal_only(mask)
                         and all(narrow[d] for d in deps))
            if len(deps) == 1:
                start = row(deps[0])
            else:
                _latest_into([row(d) for d in deps], out)
                start = out
            if min_start is not None:
                np.minimum(min_start, start, out=min_start)
            add.add(node, start, out, mask)
            if unit.sinks[0] or not nonnegative:
                np.maximum(latest_end, out, out=latest_end)
            continue
        if min_start is None:
            # The group starts at the latest end among all its members' dependencies.
            flat = all(narrow[d] for d in unit.all_deps)
            gs = group_start[:, :1] if flat else group_start
            _latest_into([row(d) for d in unit.all_deps], gs)
        else:
            for slot, deps in zip(unit.slots, unit.deps, strict=True):
                member = target(slot, all(narrow[d] for d in deps))
                _latest_into([row(d) for d in deps], member)
                np.minimum(min_start, member, out=min_start)
            flat = all(narrow[slot] for slot in unit.slots)
            gs = group_start[:, :1] if flat else group_start
            _latest_into([row(slot) for slot in unit.slots], gs)
        if unit.sync:
            gs = gs.max(axis=1, keepdims=True)
            flat = True
        for node, slot, sink in zip(unit.nodes, unit.slots, unit.sinks, strict=True):
            mask = add.kept(node)
            out = target(slot, flat and _Adder.ideal_only(mask))
            add.add(node, gs, out, mask)
            if sink or not nonnegative:
                np.maximum(latest_end, out, out=latest_end)
    last = latest_end.max(axis=1)
    if min_start is None:
        return np.asarray(last)
    return np.asarray(last - min_start.min(axis=1))


def simulate_mixed(order: EvaluationOrder, values: MixedValues) -> np.ndarray:
    """Step times (B, S) of a batch of mixed scenarios, in memory-bounded chunks of the
    batch (:func:`compile_program`: one pool of rows per chunk, reused), the chunks shared
    out to :func:`sim_threads` threads (numpy works outside the interpreter lock; each
    chunk's times depend on that chunk alone, so the result is the same)."""
    prog = compile_program(order)
    b_total, v, s = values.shape
    # The pool's rows, and about six rows more of temporaries (latest end, earliest start,
    # group start, the kept values gathered).
    row = v * s * 8
    chunk = max(1, min(b_total, ROW_BYTES // row, BATCH_BYTES // ((prog.n_slots + 6) * row)))
    out = np.empty((b_total, s))
    starts = list(range(0, b_total, chunk))
    threads = min(sim_threads(), len(starts))

    def work(first: int) -> None:
        pool = np.empty((prog.n_slots, chunk, v, s), dtype=DTYPE)
        for lo in starts[first::threads]:
            sl = slice(lo, min(lo + chunk, b_total))
            out[sl] = _run_program(prog, values.batch(sl), pool[:, : sl.stop - sl.start])

    if threads <= 1:
        work(0)
        return out
    with ThreadPoolExecutor(max_workers=threads) as ex:
        for f in [ex.submit(work, i) for i in range(threads)]:
            f.result()
    return out


def sim_threads() -> int:
    """Threads that simulate chunks of a batch at once: the ``STRAGGLERS_SIM_THREADS``
    environment variable, else the CPUs this process may use, at most 4."""
    raw = os.environ.get("STRAGGLERS_SIM_THREADS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))
