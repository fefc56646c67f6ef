"""Partial jobs (``stragglers import kineto --partial``): a per-rank report of the traced ranks
when only some ranks' traces exist (rank 0, or a few sampled ranks), instead of the slowdown S,
which needs every worker.

Nothing is claimed about ranks not traced: a wait is only measured against traced ranks.

The report, ``OUT/partial-report.json`` (written atomically), schema ``stragglers.partial-report``
version 1; times in microseconds on the job's clock (the files' ``baseTimeNanoseconds`` and
the first traced host's clock, as in the full import)::

    {"schema": "stragglers.partial-report", "version": 1,
     "label": "PARTIAL JOB ...",            # what the report is, and is not
     "source": DIR, "world_size": N, "traced_ranks": [r, ...], "untraced_ranks": N - k,
     "tie_us": 1.0,                          # arrivals closer than this arrive together
     "ranks": [{"rank", "file", "host", "dp_rank", "stage", "breakdown_source", "steps",
                "compute_us", "communication_us", "overlap_us", "idle_us", "span_us",
                "collectives", "arrived_last", "wait_us", "caused_wait_us",
                "single_traced_collectives", "single_traced_us"}],
     "steps": [{"rank", "step", "start_us", "end_us", "span_us", "compute_us",
                "communication_us", "overlap_us", "idle_us"}],
     "collectives": [{"id", "kind", "group", "step", "seq", "matched_by", "skew_us",
                      "arrived_last": [r, ...],
                      "arrivals": [{"rank", "start_us", "end_us", "wait_us",
                                    "waited_for": [r, ...]}]}],
     "unmatched": [{"group", "kind", "step", "reason", "calls": {rank: n}}],
     "clock_shift_us": {host: shift}, "not_used": {what: count}}

* **Per step and rank** (``steps``): the step's window is the span of its GPU kernels (a kernel
  belongs to the ``ProfilerStep#N`` in which it was launched); ``compute_us`` is the time some
  compute kernel runs, ``communication_us`` the time communication (NCCL/RCCL) kernels run
  while no compute kernel does, ``overlap_us`` the time both run, ``idle_us`` the time none
  runs: ``compute + communication + idle = span``. A trace without GPU kernels uses the CPU
  ranges of its operations (``breakdown_source``). A rank's last step without the optimizer
  op its other steps have (cut by the end of profiling) is not used (``not_used``).
* **Collectives** (``collectives``, point-to-point calls and waits excluded: a
  ``record_param_comms`` named ``wait``, or naming nothing and launching no kernel, is not a
  collective): matched across the traced ranks by their identity as the trace records it:
  process group (its ranks, size and description), collective, message where every member
  sends the same one (all-reduce, broadcast, reduce, barrier, all-gather, reduce-scatter:
  ``In/Out msg nelems`` and ``dtype``, else ``Input Dims`` / ``Input type``), then sequence
  number (``Seq``) when every call of the group has one, else step and call order among the
  rank's calls of that group, collective and message (the k-th in step N on each rank). An
  identity whose number of calls in a step differs between traced ranks cannot be matched
  by call order: it is listed in ``unmatched`` with the counts. A collective of a group whose
  ranks are known but which is not found on each traced member is counted (``not_used``).
  The layout is checked as in the full import (:func:`.consistency.check_layout`). A rank
  arrives when its kernel of the collective starts (start skew); its
  ``wait_us`` is the time until the last traced rank arrived, ``waited_for`` the traced ranks
  that arrived after it (later by more than ``tie_us``), ``arrived_last`` the traced ranks that
  arrived last. A collective with one traced member has no wait (null): the time of its
  kernel, which includes any wait for untraced ranks, is counted per rank
  (``single_traced_us``).
* Ranks on several hosts: each host's clock is shifted onto the first one's by the median
  difference of the ends of the collectives they share (a collective ends together on all its
  members), as in the full import.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.errors import InputError
from stragglers.kineto.assemble import _ranges
from stragglers.kineto.consistency import P2P_KINDS, P2P_OPTYPES, check_layout
from stragglers.kineto.layout import JobLayout, Position, position
from stragglers.kineto.patterns import Patterns
from stragglers.kineto.rankops import COMM_OPTYPE_CODES, RankOps, base_offsets_us
from stragglers.kineto.reader import COMM_CODE, COMM_KINDS, Group, RankEvents
from stragglers.kineto.windowed import WindowEvents, read_rank
from stragglers.trace import schema
from stragglers.trace.io import JobMeta

SCHEMA = "stragglers.partial-report"
VERSION = 1
REPORT_NAME = "partial-report.json"
TIE_US = 1.0
LABEL = ("PARTIAL JOB: a per-rank report of the traced ranks only; no slowdown S is computed "
         "and nothing is claimed about ranks that were not traced")

_COLS = ("compute_us", "communication_us", "overlap_us", "idle_us", "span_us")
#: Collectives whose message (element counts, type) is the same on every member.
_SAME_MESSAGE = np.array([COMM_CODE[k] for k in ("allreduce", "broadcast", "reduce", "barrier",
                                                 "allgather", "reducescatter")])


@dataclass
class StepTable:
    """One rank's per-step breakdown (microseconds), one row per step."""

    step: np.ndarray
    start: np.ndarray
    end: np.ndarray
    compute: np.ndarray
    comm: np.ndarray  # communication while no compute runs
    overlap: np.ndarray
    idle: np.ndarray
    source: str
    counts: Counter[str] = field(default_factory=Counter)


@dataclass
class PartialRank:
    ops: RankOps
    table: StepTable


def _union_by_group(gid: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int,
                    shift: tuple[float, float] | None = None) -> np.ndarray:
    """Length of the union of the intervals of each group (vectorised). The times are taken
    relative to the earliest one and the groups kept apart by ``2 * span`` each (``shift``:
    that earliest time and span, given where the intervals are a part of a larger set: the
    groups whose intervals are all here then get the larger set's lengths, bit for bit)."""
    out = np.zeros(n_groups)
    if not gid.size:
        return out
    base, span = _shift(start, end) if shift is None else shift
    order = np.lexsort((start, gid))
    g, s, e = gid[order], start[order] - base, end[order] - base
    # running max of the ends within each group: groups offset so that they never mix
    run = np.maximum.accumulate(e + g * 2 * span) - g * 2 * span
    prev = np.r_[-np.inf, run[:-1]]
    prev[np.r_[True, g[1:] != g[:-1]]] = -np.inf
    piece = np.maximum(e - np.maximum(s, prev), 0.0)
    return np.bincount(g, weights=piece, minlength=n_groups)


def _range(start: np.ndarray, end: np.ndarray) -> tuple[float, float]:
    """The earliest and the latest time of intervals."""
    return (min(float(start.min()), float(end.min())),
            max(float(end.max()), float(start.max())))


def _shift(start: np.ndarray, end: np.ndarray) -> tuple[float, float]:
    """The earliest time of intervals and their span (+1), as :func:`_union_by_group`
    shifts them."""
    return _span(*_range(start, end))


def _span(low: float, high: float) -> tuple[float, float]:
    return low, high - low + 1.0


_GPU = "GPU kernels"


def _in_steps(ev: RankEvents, counts: Counter[str]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The GPU kernels launched in a ``ProfilerStep``: their step, start, end and whether
    they communicate (the others counted in ``counts``)."""
    order = np.argsort(ev.step_ts, kind="stable")
    s_n, s_ts, s_end = ev.step_n[order], ev.step_ts[order], ev.step_end[order]
    rc_order = np.argsort(ev.rt_corr, kind="stable")
    rc, rts = ev.rt_corr[rc_order], ev.rt_ts[rc_order]
    del rc_order  # (the temporaries freed as soon as they are used: a window's peak)
    j = np.searchsorted(rc, ev.k_corr)
    np.clip(j, 0, rc.size - 1, out=j)
    linked = rc[j] == ev.k_corr
    launch = rts[j]
    del rc, rts, j
    i = np.searchsorted(s_ts, launch, "right") - 1
    ok = linked & (i >= 0) & (launch <= s_end[np.clip(i, 0, None)]) if s_ts.size \
        else np.zeros(launch.shape, bool)
    # kernels without a launch record are counted once, by rank_ops ("not used"): they
    # are in neither the ops nor the breakdown
    outside = linked & ~ok
    if outside.any():
        counts["GPU kernels launched outside every ProfilerStep (not in the breakdown)"] \
            += int(outside.sum())
    return s_n[np.clip(i, 0, None)][ok], ev.k_ts[ok], ev.k_end[ok], ev.k_kind[ok] >= 0


def step_table(ev: RankEvents, ops: RankOps) -> StepTable:
    """Compute / communication / idle per step of one rank (module docstring)."""
    counts: Counter[str] = Counter()
    if ev.k_ts.size and ev.rt_corr.size:
        step, start, end, is_comm = _in_steps(ev, counts)
        source = _GPU
    else:
        step, start, end = ops.step, ops.start, ops.end
        is_comm = (ops.comm >= 0) | np.isin(ops.optype, COMM_OPTYPE_CODES)
        source = "CPU ranges of the operations"
    steps, gid = np.unique(step, return_inverse=True)
    n = steps.size
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, gid, start)
    np.maximum.at(hi, gid, end)
    compute = _union_by_group(gid[~is_comm], start[~is_comm], end[~is_comm], n)
    comm_all = _union_by_group(gid[is_comm], start[is_comm], end[is_comm], n)
    busy = _union_by_group(gid, start, end, n)
    return _table(steps, lo, hi, compute, comm_all, busy, source, counts)


def _table(steps: np.ndarray, lo: np.ndarray, hi: np.ndarray, compute: np.ndarray,
           comm_all: np.ndarray, busy: np.ndarray, source: str,
           counts: Counter[str]) -> StepTable:
    overlap = np.maximum(compute + comm_all - busy, 0.0)
    return StepTable(step=steps.astype(np.int64), start=lo, end=hi, compute=compute,
                     comm=busy - compute, overlap=overlap, idle=np.maximum(hi - lo - busy, 0.0),
                     source=source, counts=counts)


def window_step_table(windows: WindowEvents, ops: RankOps) -> StepTable:
    """:func:`step_table` of a file read in windows of whole steps, window by window (two
    reads of the windows' launches and kernels from the spill), equal to the one-pass
    table bit for bit: a first read finds the steps with kernels and, for the compute, the
    communication and all the kernels, the earliest time and the span that
    :func:`_union_by_group` shifts the times by; the second gives each window's steps their
    unions with those shifts (a step's kernels are all in the window of its launches: the
    window starts at a step start). Should a step have kernels in two windows (not
    expected), the one-pass events are read back from the spill."""
    counts: Counter[str] = Counter()
    seen: list[np.ndarray] = []
    low = np.full(3, np.inf)  # compute, communication, all
    high = np.full(3, -np.inf)
    for w in range(len(windows)):  # (a window's events freed once its kernels are found)
        step, start, end, is_comm = _in_steps(windows.read(w), counts)
        seen.append(np.unique(step))
        for j, sel in enumerate((~is_comm, is_comm, np.ones(step.size, bool))):
            if sel.any():
                a, b = _range(start[sel], end[sel])
                low[j] = min(low[j], a)
                high[j] = max(high[j], b)
        del step, start, end, is_comm
    steps = np.unique(np.concatenate([np.zeros(0, np.int64)] + seen))
    if sum(x.size for x in seen) != steps.size:
        return step_table(windows.whole(), ops)
    shifts = [_span(float(low[j]), float(high[j])) for j in range(3)]
    n = steps.size
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    sums = np.zeros((3, n))
    for w in range(len(windows)):
        step, start, end, is_comm = _in_steps(windows.read(w), Counter())
        gid = np.searchsorted(steps, step)
        del step
        np.minimum.at(lo, gid, start)
        np.maximum.at(hi, gid, end)
        mine = np.unique(gid)
        for j, sel in enumerate((~is_comm, is_comm)):
            sums[j, mine] = _union_by_group(gid[sel], start[sel], end[sel], n,
                                            shifts[j])[mine]
        sums[2, mine] = _union_by_group(gid, start, end, n, shifts[2])[mine]
        del start, end, is_comm, gid
    return _table(steps, lo, hi, sums[0], sums[1], sums[2], _GPU, counts)


def read_partial_rank(path: Path, patterns: Patterns, budget: int | None = None
                      ) -> PartialRank:
    """One rank file → its operations and its per-step breakdown (run in a worker); a file
    over the memory budget (``budget`` bytes, default ``$STRAGGLERS_KINETO_MEMORY``) is
    read in windows of whole steps (:mod:`.windowed`), with the one-pass result."""
    return read_rank(path, patterns, _partial_rank, budget=budget)


def _partial_rank(ops: RankOps, events: RankEvents | WindowEvents) -> PartialRank:
    table = window_step_table(events, ops) if isinstance(events, WindowEvents) \
        else step_table(events, ops)
    return PartialRank(ops, table)


def _group_key(g: Group | None) -> tuple[Any, ...]:
    if g is None:
        return ("unknown",)
    return ("pg", g.ranks, g.size, g.desc)


def _group_json(key: tuple[Any, ...]) -> dict[str, Any]:
    if key[0] == "unknown":
        return {"ranks": None, "size": None, "desc": None}
    if key[0] == "annotation":
        return {"annotation": key[1]}
    return {"ranks": list(key[1]) if key[1] is not None else None, "size": key[2],
            "desc": key[3]}


def partial_report(ranks: list[PartialRank], meta: JobMeta, source: str,
                   steps: tuple[int, int] | None = None) -> dict[str, Any]:
    """The report document of a partial job (module docstring)."""
    counts: Counter[str] = Counter()
    known: dict[int, Position] = {}
    by_rank: dict[int, PartialRank] = {}
    for pr in ranks:
        ops = pr.ops
        if ops.rank in by_rank:
            raise InputError(f"{ops.path}: distributedInfo field 'rank' {ops.rank} is also the "
                             f"rank of {by_rank[ops.rank].ops.path}")
        if ops.world_size is not None and ops.world_size != meta.world_size:
            raise InputError(f"{ops.path}: distributedInfo field 'world_size' "
                             f"{ops.world_size} != the metadata's world_size {meta.world_size}")
        by_rank[ops.rank] = pr
        known[ops.rank] = position(ops.rank, ops.pg_config, meta, ops.path)
    lay = JobLayout(meta, known)
    # the layout against the traces, as in the full import (TP/CP evidence included: the
    # positions reported depend on it)
    check_layout({r: pr.ops for r, pr in by_rank.items()}, known, lay, meta)
    opt = schema.OPTYPE_CODE[schema.OPTIMIZER]
    # --- steps used per rank
    used: dict[int, np.ndarray] = {}
    for r, pr in sorted(by_rank.items()):
        ops = pr.ops
        counts.update(ops.counts)
        counts.update(pr.table.counts)
        if not ops.steps.size:
            raise InputError(f"{ops.path}: no ProfilerStep#N range: record the trace with a "
                             "profiler schedule (torch.profiler.schedule) and prof.step()")
        with_opt = np.unique(ops.step[ops.optype == opt])
        st = pr.table.step
        keep = np.isin(st, with_opt) if with_opt.size else np.ones(st.size, bool)
        if (~keep).any():
            counts["steps without the optimizer op (truncated by the end of profiling)"] += \
                int((~keep).sum())
        if steps is not None:
            keep &= (st >= steps[0]) & (st <= steps[1])
        used[r] = st[keep]
    if not any(v.size for v in used.values()):
        raise InputError(f"{source}: no complete step on any traced rank"
                         + (f" in --steps {steps[0]}-{steps[1]}" if steps else ""))
    # --- collectives of every traced rank, one row per call
    keys: dict[tuple[Any, ...], int] = {}
    cols: dict[str, list[np.ndarray]] = {k: [] for k in
                                        ("rank", "g", "kind", "step", "seq", "msg", "start",
                                         "end")}
    kinds = list(COMM_KINDS)
    for r, pr in sorted(by_rank.items()):
        ops = pr.ops
        ann = np.isin(ops.optype, COMM_OPTYPE_CODES) & ~np.isin(ops.optype, P2P_OPTYPES) \
            & (ops.comm < 0)
        coll = (ops.comm >= 0) & ~np.isin(ops.comm, P2P_KINDS)
        p2p = (ops.comm >= 0) & np.isin(ops.comm, P2P_KINDS)
        sel = (ann | coll) & np.isin(ops.step, used[r])
        if p2p.any():
            counts["point-to-point calls (not collectives; in the communication time)"] += \
                int(p2p.sum())
        gmap = np.array([keys.setdefault(_group_key(g), len(keys)) for g in ops.groups]
                        + [keys.setdefault(_group_key(None), len(keys))], dtype=np.int64)
        ann_names = [schema.OPTYPES[int(c)] for c in np.unique(ops.optype[ann & sel])]
        ann_g = {schema.OPTYPE_CODE[n]: keys.setdefault(("annotation", n), len(keys))
                 for n in ann_names}
        for n in ann_names:
            if n not in kinds:
                kinds.append(n)
        g = np.where(ops.group >= 0, gmap[np.clip(ops.group, 0, None)], gmap[-1])
        kind = ops.comm.astype(np.int64)
        for code, gid in ann_g.items():
            m = ann & (ops.optype == code)
            g = np.where(m, gid, g)
            kind = np.where(m, kinds.index(schema.OPTYPES[code]), kind)
        n_ops = ops.step.size
        seq = ops.seq if ops.seq.size == n_ops else np.full(n_ops, -1)
        msg = ops.msg if ops.msg.size == n_ops else np.full(n_ops, -1)
        for name, v in (("rank", np.full(n_ops, r)), ("g", g), ("kind", kind),
                        ("step", ops.step), ("seq", seq), ("msg", msg), ("start", ops.start),
                        ("end", ops.end)):
            cols[name].append(np.asarray(v)[sel])
    c = {k: np.concatenate(v) if v else np.zeros(0) for k, v in cols.items()}
    rank, g, kind, step = (c[k].astype(np.int64) for k in ("rank", "g", "kind", "step"))
    seq = c["seq"].astype(np.int64)
    # every file's times on one clock (baseTimeNanoseconds), as in the full import
    base = base_offsets_us([pr.ops for pr in by_rank.values()])
    traced_arr = np.array(sorted(by_rank), dtype=np.int64)
    base_arr = np.array([base[int(r)] for r in traced_arr])
    rank_base = base_arr[np.searchsorted(traced_arr, rank)] if rank.size else np.zeros(0)
    start = c["start"].astype(float) + rank_base
    end = c["end"].astype(float) + rank_base
    key_list = sorted(keys, key=keys.__getitem__)
    # A collective's identity: its process group, the collective, its message where every
    # member sends the same one (all-reduce, broadcast, reduce, barrier, all-gather,
    # reduce-scatter: ``In/Out msg nelems`` and ``dtype``), and its sequence number in the
    # group (``Seq``) where every call of the group has one, else the step and the call's
    # position among the rank's calls of the same group, collective and message.
    msg = np.where(np.isin(kind, _SAME_MESSAGE), c["msg"].astype(np.int64), -1)
    n_g = len(keys)
    no_seq = np.bincount(g, weights=(seq < 0).astype(float), minlength=n_g) > 0
    by_seq = ~no_seq[g] if g.size else np.zeros(0, bool)
    ident = np.stack([g, kind, msg]) if g.size else np.zeros((3, 0), np.int64)
    _, what = np.unique(ident, axis=1, return_inverse=True)  # (group, kind, message)
    what = what.reshape(-1)
    order = np.lexsort((start, step, what, rank))
    run = np.stack([rank[order], what[order], step[order]]) if order.size else \
        np.zeros((3, 0))
    new = np.r_[True, (run[:, 1:] != run[:, :-1]).any(axis=0)] if order.size else \
        np.zeros(0, bool)
    first = np.maximum.accumulate(np.where(new, np.arange(order.size), 0)) if order.size else \
        np.zeros(0, np.int64)
    k = np.empty(order.size, np.int64)
    k[order] = np.arange(order.size) - first
    m_step = np.where(by_seq, -1, step)
    m_pos = np.where(by_seq, seq, k)
    # call-order identities whose call counts differ between ranks in a step: unmatched
    unmatched: list[dict[str, Any]] = []
    ok = np.ones(g.size, bool)
    if g.size:
        u, inv, n_calls = np.unique(np.stack([what, step, rank]), axis=1, return_inverse=True,
                                    return_counts=True)
        inv = inv.reshape(-1)
        _, p_first, p_inv = np.unique(u[:2], axis=1, return_index=True, return_inverse=True)
        p_inv = p_inv.reshape(-1)
        lo = np.full(p_first.size, np.iinfo(np.int64).max)
        hi = np.zeros(p_first.size, np.int64)
        np.minimum.at(lo, p_inv, n_calls)
        np.maximum.at(hi, p_inv, n_calls)
        what_g = np.zeros(int(what.max()) + 1, np.int64)
        what_g[what] = g
        what_k = np.zeros(int(what.max()) + 1, np.int64)
        what_k[what] = kind
        bad_pair = (lo != hi) & no_seq[what_g[u[0, p_first]]]
        ok = ~bad_pair[p_inv[inv]]
        for pi in np.flatnonzero(bad_pair).tolist():  # one entry per (identity, step): a few
            cols_p = np.flatnonzero(p_inv == pi)
            w = int(u[0, cols_p[0]])
            unmatched.append({
                "group": _group_json(key_list[int(what_g[w])]),
                "kind": kinds[int(what_k[w])], "step": int(u[1, cols_p[0]]),
                "reason": "the traced ranks made different numbers of calls of this "
                          "collective in this group and step (no sequence numbers): call "
                          "order cannot match them",
                "calls": {str(int(u[2, i])): int(n_calls[i]) for i in cols_p.tolist()}})
        if (~ok).any():
            counts["collective calls not matched (see unmatched)"] += int((~ok).sum())
    # --- match
    mk = np.stack([what, m_step, m_pos])[:, ok] if g.size else np.zeros((3, 0), np.int64)
    idx = np.flatnonzero(ok)
    coll_keys, cid = np.unique(mk, axis=1, return_inverse=True)
    cid = cid.reshape(-1)
    n_c = coll_keys.shape[1]
    shifts = _clock_shifts(by_rank, rank[idx], cid, end[idx], n_c)
    ranks_sorted = np.array(sorted(by_rank), dtype=np.int64)  # a shift per rank, not per call
    rank_shift = np.array([shifts.get(by_rank[int(r)].ops.host or "", 0.0)
                           for r in ranks_sorted])
    host_shift = (rank_shift[np.searchsorted(ranks_sorted, rank[idx])] if idx.size
                  else np.zeros(0))
    s, e = start[idx] - host_shift, end[idx] - host_shift
    members = np.bincount(cid, minlength=n_c)
    last = np.full(n_c, -np.inf)
    np.maximum.at(last, cid, s)
    multi = members[cid] >= 2
    wait = np.where(multi, last[cid] - s, np.nan)
    is_last = multi & (s >= last[cid] - TIE_US)
    kmin = np.full(n_c, np.iinfo(np.int64).max)
    np.minimum.at(kmin, cid, kind[idx])
    # a collective of a group whose ranks are known must be found on each traced member
    c_group = np.zeros(n_c, np.int64)
    c_group[cid] = g[idx]
    expect = np.array([np.isin(traced_arr, key[1]).sum()
                       if key[0] == "pg" and key[1] is not None else 0
                       for key in key_list], dtype=np.int64)  # one per process group
    short = members < expect[c_group]
    if short.any():
        counts["collectives not found on every traced member of their group (call counts, "
               "messages or steps differ; waits measured among the members found)"] += \
            int(short.sum())
    # --- per-rank totals
    traced = sorted(by_rank)
    ri = np.searchsorted(traced, rank[idx])
    nr = len(traced)
    n_multi = np.bincount(ri, weights=multi, minlength=nr)
    n_last = np.bincount(ri, weights=is_last, minlength=nr)
    own_wait = np.bincount(ri, weights=np.nan_to_num(wait), minlength=nr)
    total_wait = np.bincount(cid, weights=np.nan_to_num(wait), minlength=n_c)
    caused = np.bincount(ri, weights=np.where(is_last, total_wait[cid], 0.0), minlength=nr)
    single = ~multi
    n_single = np.bincount(ri, weights=single, minlength=nr)
    t_single = np.bincount(ri, weights=np.where(single, e - s, 0.0), minlength=nr)
    # --- the document
    steps_json: list[dict[str, Any]] = []
    ranks_json: list[dict[str, Any]] = []
    for j, r in enumerate(traced):
        pr, p = by_rank[r], known[r]
        t = pr.table
        m = np.isin(t.step, used[r])
        at = base[r] - shifts.get(pr.ops.host or "", 0.0)  # on the first host's clock
        rows = np.stack([t.step[m], t.start[m] + at, t.end[m] + at, t.end[m] - t.start[m],
                         t.compute[m], t.comm[m], t.overlap[m], t.idle[m]], axis=1).tolist()
        steps_json += [{"rank": r, "step": int(row[0]), "start_us": row[1], "end_us": row[2],
                        "span_us": row[3], "compute_us": row[4], "communication_us": row[5],
                        "overlap_us": row[6], "idle_us": row[7]} for row in rows]
        ranks_json.append({
            "rank": r, "file": pr.ops.path, "host": pr.ops.host, "dp_rank": p.dp_rank,
            "stage": p.stage, "breakdown_source": t.source,
            "steps": t.step[m].tolist(),
            "compute_us": float(t.compute[m].sum()), "communication_us": float(t.comm[m].sum()),
            "overlap_us": float(t.overlap[m].sum()), "idle_us": float(t.idle[m].sum()),
            "span_us": float((t.end[m] - t.start[m]).sum()),
            "collectives": int(n_multi[j]), "arrived_last": int(n_last[j]),
            "wait_us": float(own_wait[j]), "caused_wait_us": float(caused[j]),
            "single_traced_collectives": int(n_single[j]),
            "single_traced_us": float(t_single[j])})
    colls = _collectives_json(coll_keys, cid, rank[idx], s, e, wait, is_last, kmin, c_group,
                              key_list, kinds, by_seq[idx])
    return {
        "schema": SCHEMA, "version": VERSION, "label": LABEL, "source": source,
        "world_size": meta.world_size, "traced_ranks": traced,
        "untraced_ranks": meta.world_size - len(traced), "tie_us": TIE_US,
        "ranks": ranks_json, "steps": steps_json, "collectives": colls,
        "unmatched": unmatched, "clock_shift_us": shifts,
        "not_used": dict(sorted(counts.items())),
    }


def _clock_shifts(by_rank: dict[int, PartialRank], rank: np.ndarray, cid: np.ndarray,
                  end: np.ndarray, n_c: int) -> dict[str, float]:
    """Per host (other than the first traced rank's): the median difference of the ends of
    the collectives it shares with the first host."""
    hosts = [by_rank[r].ops.host or "" for r in sorted(by_rank)]
    names = list(dict.fromkeys(hosts))
    if len(names) < 2 or not cid.size:
        return {}
    traced = np.array(sorted(by_rank), dtype=np.int64)
    host_of = np.array([names.index(by_rank[int(r)].ops.host or "") for r in traced])
    h = host_of[np.searchsorted(traced, rank)]
    out: dict[str, float] = {}
    ref = np.full(n_c, np.nan)
    ref_sum = np.bincount(cid[h == 0], weights=end[h == 0], minlength=n_c)
    ref_n = np.bincount(cid[h == 0], minlength=n_c)
    ref[ref_n > 0] = ref_sum[ref_n > 0] / ref_n[ref_n > 0]
    for k in range(1, len(names)):  # one per host
        sel = (h == k) & np.isfinite(ref[cid])
        if sel.any():
            out[names[k]] = float(np.median(end[sel] - ref[cid[sel]]))
    return out


def _collectives_json(coll_keys: np.ndarray, cid: np.ndarray, rank: np.ndarray, s: np.ndarray,
                      e: np.ndarray, wait: np.ndarray, is_last: np.ndarray, kind: np.ndarray,
                      group: np.ndarray, key_list: list[tuple[Any, ...]], kinds: list[str],
                      by_seq: np.ndarray) -> list[dict[str, Any]]:
    """The collectives in time order, each with its arrivals in arrival order (output)."""
    if not cid.size:
        return []
    order = np.lexsort((s, cid))
    bounds = np.flatnonzero(np.r_[True, cid[order][1:] != cid[order][:-1], True])
    first_start = np.full(coll_keys.shape[1], np.inf)
    np.minimum.at(first_start, cid, s)
    out: list[dict[str, Any]] = []
    for c in np.argsort(first_start, kind="stable").tolist():  # building the output
        rows = order[bounds[c]:bounds[c + 1]]
        multi = rows.size >= 2
        arr = []
        for pos, i in enumerate(rows.tolist()):
            later = rows[pos + 1:]
            arr.append({"rank": int(rank[i]), "start_us": float(s[i]), "end_us": float(e[i]),
                        "wait_us": float(wait[i]) if multi else None,
                        "waited_for": [int(rank[q]) for q in later.tolist()
                                       if s[q] > s[i] + TIE_US] if multi else None})
        _, st, ps = (int(x) for x in coll_keys[:, c])
        seq_matched = bool(by_seq[rows[0]])
        out.append({
            "id": len(out), "kind": kinds[int(kind[c])],
            "group": _group_json(key_list[int(group[c])]),
            "step": None if seq_matched else st, "seq": ps if seq_matched else None,
            "call": None if seq_matched else ps,
            "matched_by": "seq" if seq_matched else "step and call order",
            "skew_us": float(s[rows].max() - s[rows].min()) if multi else None,
            "arrived_last": sorted(int(rank[i]) for i in rows.tolist() if is_last[i])
            if multi else None,
            "arrivals": arr})
    return out


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The short printed table of a partial report."""
    k = len(doc["traced_ranks"])
    out = [f"PARTIAL JOB: {k} of {doc['world_size']} ranks traced "
           f"({_ranges(doc['traced_ranks'])}): per-rank report; no slowdown S is computed and "
           f"nothing is said about the {doc['untraced_ranks']} ranks not traced",
           f"{'rank':>5} {'steps':>5} {'step ms':>9} {'compute':>8} {'comm':>6} {'overlap':>8} "
           f"{'idle':>6} {'coll.':>6} {'last':>5} {'waited ms':>10} {'caused ms':>10}"]
    for r in doc["ranks"]:
        n = max(len(r["steps"]), 1)
        span = r["span_us"] or 1.0
        out.append(f"{r['rank']:>5} {len(r['steps']):>5} {r['span_us'] / n / 1e3:>9.3f} "
                   f"{r['compute_us'] / span:>8.1%} {r['communication_us'] / span:>6.1%} "
                   f"{r['overlap_us'] / span:>8.1%} {r['idle_us'] / span:>6.1%} "
                   f"{r['collectives']:>6} {r['arrived_last']:>5} {r['wait_us'] / 1e3:>10.3f} "
                   f"{r['caused_wait_us'] / 1e3:>10.3f}")
    multi = [c for c in doc["collectives"] if c["arrived_last"] is not None]
    single = len(doc["collectives"]) - len(multi)
    if multi:
        tally = Counter(r for c in multi for r in c["arrived_last"])
        top, n = tally.most_common(1)[0]
        out.append(f"{len(multi)} collectives matched across the traced ranks; arrived last "
                   f"most often: rank {top} ({n} of {len(multi)})")
    if single:
        out.append(f"{single} collectives with one traced member (its wait for untraced ranks "
                   "is unknown)")
    for u in doc["unmatched"][:3]:
        out.append(f"unmatched: group {u['group']}, step {u['step']}: calls per rank "
                   f"{u['calls']}")
    if len(doc["unmatched"]) > 3:
        out.append(f"unmatched: {len(doc['unmatched']) - 3} more (see the report)")
    for what, n in doc["not_used"].items():
        out.append(f"not used: {n:,} {what}")
    return out


__all__ = ["LABEL", "REPORT_NAME", "SCHEMA", "VERSION", "PartialRank",
           "StepTable", "partial_report", "read_partial_rank", "report_lines", "step_table"]
