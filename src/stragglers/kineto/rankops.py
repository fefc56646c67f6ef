"""One rank's kept events → its operations (still per rank, before the job-wide steps).

Rules (the mapping table of docs/guides/kineto.md):

* the step of an event is the ``ProfilerStep#N`` range that holds its CPU time (a GPU kernel's
  CPU time is its launch, found through the correlation id);
* an annotation matched by a pattern is one operation of its type. Its time is the GPU span of
  the kernels launched inside it (compute kernels for compute and optimizer types, NCCL
  kernels for communication types) when the trace has GPU kernels and some were launched,
  else its CPU range. Same-type annotations nested in one another count once (outermost);
* communication not inside an annotated communication op: each ``record_param_comms`` (the
  ``nccl:*`` range inside it, else its kernel, gives the collective name when it lacks one),
  each backend range (``nccl:*``, ``gloo:*``) outside one, and each NCCL kernel launched
  outside both; its time is the span of its kernels (else the CPU range); its type is decided
  job-wide (:mod:`stragglers.kineto.assemble`) from the collective, the group and the peer.
  A call without NCCL kernels whose data lives on the GPU (gloo with CUDA tensors: it has
  device<->host copies, :func:`_copies_of_calls`) is timed on the GPU clock from its data:
  from the end of its copies to the host (or its CPU start, if later) to the end of its
  copies back (or its CPU end, without any). A
  ``record_param_comms`` named ``wait``, or naming no collective and launching no kernel, is
  a wait, not communication: counted, not an op;
* an all-to-all launched inside a forward/backward annotation (extension E2) is an op of its
  own and cuts the annotation into pieces of its compute kernels; the time of every compute op
  from kernels is their span less the time the kernels of those all-to-alls run (the model
  places the all-to-all between compute ops: no GPU instant is charged to both), and a piece
  after an all-to-all starts no earlier than that all-to-all ends (:func:`_compute_time`);
* in a trace without GPU kernels (a CPU-only job), a compute-like annotation is timed by its
  CPU range less the time its thread spends in communication (:func:`_thread_comm_cover`):
  its collective calls and waits (``c10d::*``, ``record_param_comms``, ``gloo:*`` /
  ``nccl:*`` ranges on that thread), and its idle stretch during a communication call of
  the rank (e.g. DDP's wait for the gradient all-reduce at the end of backward, which no
  CPU op records under gloo). The model places that time in the
  collective, whose transfer time it takes from the latest member's start;
* without forward/backward annotations, compute is segmented: the rank's compute kernels of a
  step, in GPU order, are cut wherever the launching thread changes between the autograd
  thread (backward) and any other (forward), and at each point-to-point kernel; each piece is
  one compute op.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from stragglers.kineto.reader import COMM_CODE, COMPUTE_LIKE, DTOH, HTOD, Group, RankEvents
from stragglers.trace import schema

COMM_OPTYPE_CODES = np.array([schema.OPTYPE_CODE[t] for t in schema.OPTYPES
                              if t not in COMPUTE_LIKE], dtype=np.int8)
_P2P_KINDS = np.array([COMM_CODE["send"], COMM_CODE["recv"], COMM_CODE["sendrecv"]])
UNRESOLVED = -1


@dataclass
class RankOps:
    """Operations of one rank; ``optype`` is -1 for communication typed job-wide."""

    path: str
    rank: int
    world_size: int | None
    host: str | None
    pg_config: list[object]
    optype: np.ndarray
    comm: np.ndarray
    group: np.ndarray
    peer: np.ndarray
    start: np.ndarray  # microseconds
    end: np.ndarray
    step: np.ndarray
    mb: np.ndarray
    idx: np.ndarray  # event index in the file (for messages)
    groups: list[Group]
    steps: np.ndarray  # every ProfilerStep#N of the file
    counts: Counter[str] = field(default_factory=Counter)
    skipped: bool = False
    segmented: bool = False
    #: True for the all-to-all calls launched inside a compute annotation (extension E2)
    a2a_in_compute: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: a communication call's sequence number in its process group (``Seq``), else -1
    seq: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: a communication call's message (``In/Out msg nelems``, ``dtype``) as one number, else -1
    msg: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: the file's ``baseTimeNanoseconds`` (its times are microseconds after it), or None
    base_ns: int | None = None
    #: microseconds of CPU-timed compute annotations spent in communication (not compute)
    comm_in_compute_us: float = 0.0
    #: communication calls without NCCL kernels timed on the GPU by their device<->host
    #: copies (gloo with CUDA tensors)
    copy_timed: int = 0

    @classmethod
    def skipped_rank(cls, ev: RankEvents) -> RankOps:
        """A collapsed TP/CP rank: only its header was read."""
        e8, e64 = np.zeros(0, np.int8), np.zeros(0, np.int64)
        return cls(path=ev.path, rank=ev.rank, world_size=ev.world_size, host=ev.host,
                   pg_config=list(ev.pg_config), optype=e8, comm=e8, group=e64, peer=e64,
                   start=np.zeros(0), end=np.zeros(0), step=e64, mb=e64, idx=e64, groups=[],
                   steps=e64, skipped=True, base_ns=ev.base_ns)


def base_offsets_us(all_ops: list[RankOps]) -> dict[int, float]:
    """Per rank: microseconds to add to its times to put every file on one clock. Kineto
    writes the times as microseconds after the file's ``baseTimeNanoseconds`` (a time
    rounded down per process, the same on every rank unless the job started across a
    rounding boundary); a file without it has times on the profiler clock itself (base 0).
    The offsets are relative to the smallest base, so that they are 0 in the usual case."""
    base = {o.rank: o.base_ns or 0 for o in all_ops}
    low = min(base.values(), default=0)
    return {r: (b - low) / 1000.0 for r, b in base.items()}


def _launched(lo_t: np.ndarray, hi_t: np.ndarray,
              launch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernels launched in each window [lo, hi] (``launch`` sorted): one row per (window,
    kernel), the window's index and the kernel's position in ``launch``. Vectorised."""
    lo = np.searchsorted(launch, lo_t, "left")
    hi = np.searchsorted(launch, hi_t, "right")
    lengths = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(lo.size), lengths)
    pos = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) \
        + np.repeat(lo, lengths)
    return owner, pos


def _spans(lo_t: np.ndarray, hi_t: np.ndarray, launch: np.ndarray, kstart: np.ndarray,
           kend: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each window [lo, hi]: min start and max end of the kernels launched in it, and
    whether there was any (``launch`` sorted)."""
    owner, pos = _launched(lo_t, hi_t, launch)
    start = np.full(lo_t.shape, np.inf)
    end = np.full(lo_t.shape, -np.inf)
    np.minimum.at(start, owner, kstart[pos])
    np.maximum.at(end, owner, kend[pos])
    has = np.isfinite(start)
    start[~has] = np.nan
    end[~has] = np.nan
    return start, end, has


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint intervals, sorted."""
    if not start.size:
        return np.zeros(0), np.zeros(0)
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    run = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run[:-1]]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def _compute_time(owner: np.ndarray, kstart: np.ndarray, kend: np.ndarray, n: int,
                  cover: tuple[np.ndarray, np.ndarray], base: float = 0.0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The time of ``n`` compute ops from their kernels (``owner``: the op of each kernel):
    the span of the kernels less the time inside ``cover`` (disjoint sorted intervals: the
    kernels of the all-to-alls that the model places between compute ops). Returns the
    first instant of the span outside the cover, the length, and whether the op has
    kernels; an op whose span lies inside the cover gets length 0 at its span's end.
    ``base``: the covered time before the first interval (the running sum of the covers of
    the earlier windows of a file read in windows, :mod:`stragglers.kineto.windowed`: the
    sums are then added in the one-pass order, bit for bit)."""
    first = np.full(n, np.nan)
    has = np.bincount(owner, minlength=n) > 0
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, owner, kstart)
    np.maximum.at(hi, owner, kend)
    lo, hi = lo[has], hi[has]
    cs, ce = cover
    length = np.zeros(n)
    if cs.size:
        cum = np.cumsum(np.r_[base, ce - cs])  # sequential: the one-pass sums, from base

        def covered_until(t: np.ndarray) -> np.ndarray:
            i = np.searchsorted(cs, t, "right") - 1
            ic = np.clip(i, 0, None)
            return np.where(i >= 0, cum[ic] + np.clip(t - cs[ic], 0.0, ce[ic] - cs[ic]), base)

        i = np.searchsorted(cs, lo, "right") - 1
        ic = np.clip(i, 0, None)
        in_cover = (i >= 0) & (lo < ce[ic])
        first[has] = np.where(in_cover, np.minimum(ce[ic], hi), lo)
        length[has] = np.maximum(hi - lo - (covered_until(hi) - covered_until(lo)), 0.0)
    else:
        first[has] = lo
        length[has] = hi - lo
    return first, length, has


def _range_argmax(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each range [lo, hi] of positions (lo <= hi), the position of its largest value
    (a sparse table: vectorised, O(n log n))."""
    levels = [np.arange(values.size)]
    width = 1
    while 2 * width <= values.size:
        prev = levels[-1]
        a, b = prev[:-width], prev[width:]
        levels.append(np.where(values[b] > values[a], b, a))
        width *= 2
    k = np.floor(np.log2(np.maximum(hi - lo + 1, 1))).astype(np.int64)
    out = np.empty(lo.size, np.int64)
    for level in np.unique(k).tolist():  # one pass per power of two: a handful
        sel = k == level
        table = levels[level]
        a, b = table[lo[sel]], table[hi[sel] - (1 << level) + 1]
        out[sel] = np.where(values[b] > values[a], b, a)
    return out


def _thread_comm_cover(ev: RankEvents, tid: int) -> tuple[np.ndarray, np.ndarray]:
    """The time thread ``tid`` spends in communication, as disjoint sorted intervals: its
    collective calls and waits (CPU ops ``c10d::*``, ``record_param_comms``, ``nccl:*`` /
    ``gloo:*`` ranges on it), and for each communication call of the rank (on any thread),
    the thread's idle stretch (no CPU op of it running) that overlaps the call most, from
    its start to the call's end at the latest: a thread that waits for a collective does
    nothing else until it completes (DDP's wait for its gradient all-reduce under gloo is
    recorded by no CPU op). A thread that runs its ops while a collective is in flight
    loses at most the short gap between two of them. Vectorised over the thread's events."""
    on = ev.cpu_tid == tid
    c_on = ev.cc_tid == tid
    comm_s = np.r_[ev.cpu_ts[on & ev.cpu_comm], ev.cc_ts[c_on]]
    comm_e = np.r_[ev.cpu_end[on & ev.cpu_comm], ev.cc_end[c_on]]
    busy_s, busy_e = _union(np.r_[ev.cpu_ts[on], comm_s], np.r_[ev.cpu_end[on], comm_e])
    # the idle stretches: before the first op, between two, after the last
    g_s, g_e = np.r_[-np.inf, busy_e], np.r_[busy_s, np.inf]
    e_s = np.concatenate([ev.cc_ts, ev.cpu_ts[ev.cpu_comm]])
    e_e = np.concatenate([ev.cc_end, ev.cpu_end[ev.cpu_comm]])
    first = np.searchsorted(g_e, e_s, "right")  # the first stretch ending after the start
    last = np.searchsorted(g_s, e_e, "left") - 1  # the last one starting before the end
    ok = last >= first
    first, last, e_s, e_e = first[ok], last[ok], e_s[ok], e_e[ok]

    def overlap(g: np.ndarray) -> np.ndarray:
        return np.minimum(g_e[g], e_e) - np.maximum(g_s[g], e_s)

    best = first.copy()
    cand = [last]
    inner = last - first >= 2  # whole stretches between the two partial ones
    if inner.any():
        mid = first.copy()
        mid[inner] = _range_argmax(g_e - g_s, first[inner] + 1, last[inner] - 1)
        cand.append(mid)
    for c in cand:
        best = np.where(overlap(c) > overlap(best), c, best)
    # (no op of the thread before the call: idle from the call's start)
    start = np.where(np.isfinite(g_s[best]), g_s[best], e_s)
    return _union(np.r_[comm_s, start], np.r_[comm_e, np.minimum(g_e[best], e_e)])


def _call_of(c_ts: np.ndarray, c_end: np.ndarray, c_tid: np.ndarray, launch: np.ndarray,
             tid: np.ndarray) -> np.ndarray:
    """For each launch (time ``launch`` on thread ``tid``): the call it was made inside (the
    latest call of that thread started before it, when it has not ended), or -1."""
    owner = np.full(launch.size, -1)
    for t in np.unique(tid).tolist() if launch.size else []:  # one pass per thread: a handful
        cs = np.flatnonzero(c_tid == t)
        if not cs.size:
            continue
        cs = cs[np.argsort(c_ts[cs])]
        sel = np.flatnonzero(tid == t)
        i = np.searchsorted(c_ts[cs], launch[sel], "right") - 1
        ok = (i >= 0) & (launch[sel] <= c_end[cs[np.clip(i, 0, None)]])
        owner[sel[ok]] = cs[np.clip(i, 0, None)][ok]
    return owner


def _copies_of_calls(ev: RankEvents, rc: np.ndarray, rts: np.ndarray, rtid: np.ndarray,
                     c_ts: np.ndarray, c_end: np.ndarray, c_tid: np.ndarray,
                     counts: Counter[str]) -> tuple[np.ndarray, np.ndarray]:
    """The communication call of each device<->host copy of the file (-1: none, -2: no
    launch record), and whether the copy was launched inside that call (``rc``, ``rts``,
    ``rtid``: the runtime launches sorted by correlation id). A copy launched inside a call
    on the call's thread is that call's (gloo copies a collective's result back to the GPU
    on its worker thread, inside the ``gloo:*`` range).
    A device-to-host copy launched elsewhere (gloo's copy of the input to the host is launched
    by the caller, e.g. DDP's ``c10d::allreduce_`` on the autograd thread, before the worker
    thread runs the collective) is the call of the next copy launched inside a call on the
    same stream, in GPU order (gloo takes a fresh stream per collective and copies in and out
    on it), when it was launched before that call ended. Vectorised over the copies."""
    n = ev.m_corr.size
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    j = np.clip(np.searchsorted(rc, ev.m_corr), 0, max(rc.size - 1, 0))
    linked = (rc[j] == ev.m_corr) if rc.size else np.zeros(n, bool)
    if (~linked).any():
        counts["gpu_memcpy events without a CUDA launch record (not used)"] += int(
            (~linked).sum())
    launch = np.where(linked, rts[j] if rc.size else 0.0, np.nan)
    tid = np.where(linked, rtid[j] if rc.size else -1, -1)
    call = np.where(linked, _call_of(c_ts, c_end, c_tid, launch, tid), -2)
    owned = call >= 0
    # device-to-host copies launched outside a call: the call of the next owned copy of
    # their stream
    order = np.lexsort((ev.m_ts, ev.m_stream))
    own = call[order]
    pos = np.where(own >= 0, np.arange(n), n)
    nxt = np.minimum.accumulate(pos[::-1])[::-1]  # the next owned copy (n: none)
    nc = np.clip(nxt, 0, n - 1)
    nxt_call = own[nc]
    ok = (nxt < n) & (ev.m_stream[order][nc] == ev.m_stream[order]) & (own == -1) \
        & (ev.m_dir[order] == DTOH)
    if c_end.size:  # (no call: no owned copy, none tied)
        ok &= launch[order] <= c_end[np.clip(nxt_call, 0, None)]
    call[order[ok]] = nxt_call[ok]
    return call, owned


def _copy_times(m_call: np.ndarray, m_end: np.ndarray, m_dir: np.ndarray,
                n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call (``n``): the latest end of its device-to-host copies (its data is ready on the
    host: it arrives), of its host-to-device copies (the result is back on the GPU: it
    ends), NaN where it has none, and whether it has any copy."""
    has = np.zeros(n, bool)
    got = m_call >= 0
    has[m_call[got]] = True
    ready = np.full(n, -np.inf)
    back = np.full(n, -np.inf)
    d, h = got & (m_dir == DTOH), got & (m_dir == HTOD)
    np.maximum.at(ready, m_call[d], m_end[d])
    np.maximum.at(back, m_call[h], m_end[h])
    ready[~np.isfinite(ready)] = np.nan
    back[~np.isfinite(back)] = np.nan
    return ready, back, has


def _inside(lo_t: np.ndarray, hi_t: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Mask of times ``t`` inside any of the intervals [lo, hi]."""
    if not lo_t.size or not t.size:
        return np.zeros(t.shape, bool)
    o = np.argsort(lo_t)
    run_hi = np.maximum.accumulate(hi_t[o])
    i = np.searchsorted(lo_t[o], t, "right") - 1
    return (i >= 0) & (t <= run_hi[np.clip(i, 0, None)])


def _outermost(types: np.ndarray, tids: np.ndarray, ts: np.ndarray,
               end: np.ndarray) -> np.ndarray:
    """Mask of annotations not nested in an earlier one of the same type and thread."""
    order = np.lexsort((-end, ts, tids, types))
    t, d, s, e = types[order], tids[order], ts[order], end[order]
    keep = np.ones(order.size, dtype=bool)
    if order.size:
        new_group = np.r_[True, (t[1:] != t[:-1]) | (d[1:] != d[:-1])]
        # running max end within each group, excluding the current element
        gid = np.cumsum(new_group) - 1
        for g in np.unique(gid):  # one pass per (type, thread): a handful
            sel = np.flatnonzero(gid == g)
            run = np.maximum.accumulate(e[sel])
            prev = np.r_[-np.inf, run[:-1]]
            keep[sel] = s[sel] >= prev
    out = np.zeros(order.size, dtype=bool)
    out[order] = keep
    return out


@dataclass
class _Pieces:
    """Compute annotations cut at all-to-all calls: one row per piece."""

    annotation: np.ndarray  # index of the annotation it comes from
    launch: np.ndarray  # CPU launch of its first kernel
    start: np.ndarray  # its time (:func:`_compute_time`)
    end: np.ndarray


def _pieces(ann: np.ndarray, a_ts: np.ndarray, a_end: np.ndarray, cuts: np.ndarray,
            cut_end: np.ndarray, launch: np.ndarray, kstart: np.ndarray, kend: np.ndarray,
            cover: tuple[np.ndarray, np.ndarray], base: float = 0.0) -> _Pieces:
    """The compute kernels launched inside each annotation of ``ann`` (``launch`` sorted),
    grouped by the cut times (sorted; ``cut_end``: the end of the all-to-all of each cut)
    before their launch: each group is one piece, timed by the span of its kernels less
    ``cover`` (:func:`_compute_time`), and starting no earlier than the all-to-all before it
    ends (the model's order and dependency: ``compute k → all-to-all → compute k+1``).
    Vectorised over every kernel of every annotation."""
    owner, pos = _launched(a_ts[ann], a_end[ann], launch)
    label = np.searchsorted(cuts, launch[pos], "right")
    key = owner * (cuts.size + 1) + label
    uniq, piece = np.unique(key, return_inverse=True)
    first = np.full(uniq.size, np.inf)
    np.minimum.at(first, piece, launch[pos])
    start, length, _ = _compute_time(piece, kstart[pos], kend[pos], uniq.size, cover, base)
    a_of = ann[uniq // (cuts.size + 1)]
    after = uniq % (cuts.size + 1) - 1  # the cut before the piece, if in its annotation
    follows = (after >= 0) & (cuts[np.clip(after, 0, None)] >= a_ts[a_of]) if cuts.size \
        else np.zeros(uniq.size, bool)
    if follows.any():
        start[follows] = np.maximum(start[follows], cut_end[after[follows]])
    return _Pieces(a_of, first, start, start + length)


def rank_ops(ev: RankEvents) -> RankOps:
    """The operations of one rank's kept events (the rules of this module's docstring)."""
    return rank_ops_parts(ev)[0]


@dataclass
class Links:
    """What a window's ops depend on beyond the window (:mod:`stragglers.kineto.windowed`
    checks that the windows agree with the one-pass read)."""

    #: the all-to-all time taken out of compute: its disjoint sorted intervals
    cover_start: np.ndarray
    cover_end: np.ndarray
    #: the running sum of their lengths, from ``a2a_base`` (the next window's base)
    cover_sum: float
    #: per device<->host copy: launched inside a communication call of the file
    copy_owned: np.ndarray


def rank_ops_parts(ev: RankEvents, a2a_base: float = 0.0
                   ) -> tuple[RankOps, np.ndarray, Links]:
    """:func:`rank_ops`, and the part of the list each op comes from (0: whole annotations,
    1: pieces of annotations cut at all-to-alls, 2: communication calls, 3: NCCL kernels
    outside every call, 4: segments of compute kernels): the ops come part by part; and the
    links of the ops beyond the events (``a2a_base``: the all-to-all time covered before the
    events, :func:`_compute_time`)."""
    counts: Counter[str] = Counter()
    for cat, n in ev.ignored.items():
        if cat == "cpu_op" and ev.cpu_read:
            counts["cpu_op events (not ops; in CPU-only traces those of the compute ranges' "
                   "threads time them)"] += n
        elif cat == "gpu_memcpy":
            counts["gpu_memcpy events other than device<->host copies"] += n
        else:
            counts[f"{cat} events (a category the importer does not use)"] += n
    n_names = sum(ev.names_unmatched.values())
    if n_names:
        counts["annotations matching no pattern"] += n_names
    # --- steps
    order = np.argsort(ev.step_ts, kind="stable")
    s_n, s_ts, s_end = ev.step_n[order], ev.step_ts[order], ev.step_end[order]

    def step_of(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(s_ts, t, "right") - 1
        ok = (i >= 0) & (t <= s_end[np.clip(i, 0, None)]) if s_ts.size else np.zeros(t.shape,
                                                                                   bool)
        return np.where(ok, s_n[np.clip(i, 0, None)] if s_ts.size else -1, -1)

    # --- kernels: their CPU launch (time, thread) through the correlation id
    # (the launches come in correlation order, and every kernel has its launch, in the
    # usual file: the columns are then used as they are, not copied, a few arrays of the
    # size of the kernels less at the peak of memory)
    if (np.diff(ev.rt_corr) >= 0).all():
        rc, rts, rtid = ev.rt_corr, ev.rt_ts, ev.rt_tid
    else:
        rt_order = np.argsort(ev.rt_corr, kind="stable")
        rc, rts, rtid = ev.rt_corr[rt_order], ev.rt_ts[rt_order], ev.rt_tid[rt_order]
        del rt_order
    j = np.clip(np.searchsorted(rc, ev.k_corr), 0, max(rc.size - 1, 0))
    linked = (rc[j] == ev.k_corr) if rc.size else np.zeros(ev.k_corr.shape, bool)
    all_linked = bool(linked.all())
    if not all_linked:
        counts["GPU kernels without a CUDA launch record (not used)"] += int((~linked).sum())
    k_launch = (rts[j] if all_linked else rts[j][linked]) if rc.size else np.zeros(0)
    k_tid = (rtid[j] if all_linked else rtid[j][linked]) if rc.size \
        else np.zeros(0, np.int64)
    del j
    if all_linked:
        k_ts, k_end, k_kind, k_group, k_peer, k_idx = (
            ev.k_ts, ev.k_end, ev.k_kind, ev.k_group, ev.k_peer, ev.k_idx)
    else:
        k_ts, k_end = ev.k_ts[linked], ev.k_end[linked]
        k_kind, k_group, k_peer = ev.k_kind[linked], ev.k_group[linked], ev.k_peer[linked]
        k_idx = ev.k_idx[linked]
    has_gpu = k_ts.size > 0
    is_comm_k = k_kind >= 0
    lorder = np.argsort(k_launch, kind="stable")
    c_sel = lorder[~is_comm_k[lorder]]
    m_sel = lorder[is_comm_k[lorder]]

    # --- annotations
    keep = _outermost(ev.ann_type, ev.ann_tid, ev.ann_ts, ev.ann_end)
    if (~keep).sum():
        counts["annotations nested in one of the same type (counted once)"] += int(
            (~keep).sum())
    a_type, a_mb, a_tid = ev.ann_type[keep], ev.ann_mb[keep], ev.ann_tid[keep]
    a_ts, a_end, a_idx = ev.ann_ts[keep], ev.ann_end[keep], ev.ann_idx[keep]
    a_comm = np.isin(a_type, COMM_OPTYPE_CODES)
    a_start, a_stop = a_ts.copy(), a_end.copy()
    if has_gpu and a_comm.any():  # communication annotations: the span of their NCCL kernels
        st, en, has = _spans(a_ts[a_comm], a_end[a_comm], k_launch[m_sel], k_ts[m_sel],
                             k_end[m_sel])
        ms = np.flatnonzero(a_comm)
        a_start[ms[has]], a_stop[ms[has]] = st[has], en[has]

    # --- communication on the CPU: backend ranges inside a record_param_comms merge into it
    cc_kind, cc_group, cc_peer = ev.cc_kind.copy(), ev.cc_group, ev.cc_peer
    cc_keep = np.ones(cc_kind.size, dtype=bool)
    rpc = np.flatnonzero(ev.cc_rpc)
    ann_cc = np.flatnonzero(~ev.cc_rpc)
    if rpc.size and ann_cc.size:
        r_order = rpc[np.lexsort((ev.cc_ts[rpc], ev.cc_tid[rpc]))]
        for tid in np.unique(ev.cc_tid[ann_cc]):
            rs = r_order[ev.cc_tid[r_order] == tid]
            aa = ann_cc[ev.cc_tid[ann_cc] == tid]
            if not rs.size:
                continue
            i = np.searchsorted(ev.cc_ts[rs], ev.cc_ts[aa], "right") - 1
            ok = (i >= 0) & (ev.cc_end[aa] <= ev.cc_end[rs[np.clip(i, 0, None)]] + 1e-3)
            parent = rs[np.clip(i, 0, None)][ok]
            no_kind = cc_kind[parent] < 0
            cc_kind[parent[no_kind]] = ev.cc_kind[aa[ok]][no_kind]
            cc_keep[aa[ok]] = False

    # communication inside an annotated communication op is that op
    def inside_comm_annotation(t: np.ndarray) -> np.ndarray:
        return _inside(a_ts[a_comm], a_end[a_comm], t)

    absorbed = cc_keep & inside_comm_annotation(ev.cc_ts)
    if absorbed.any():
        counts["communication calls inside annotated communication ops"] += int(absorbed.sum())
    cc_keep &= ~absorbed
    cci = np.flatnonzero(cc_keep)
    c_ts, c_end, c_tid = ev.cc_ts[cci], ev.cc_end[cci], ev.cc_tid[cci]
    c_start, c_stop = c_ts.copy(), c_end.copy()
    # NCCL kernels → their CPU call (launch inside it, same thread)
    mk = m_sel
    mk_absorbed = inside_comm_annotation(k_launch[mk])
    mk = mk[~mk_absorbed]
    owner = _call_of(c_ts, c_end, c_tid, k_launch[mk], k_tid[mk])
    got = owner >= 0
    c_kind = cc_kind[cci].astype(np.int8)  # -1: no collective name yet
    c_kernel = np.zeros(cci.size, bool)  # the call launched NCCL kernels
    if got.any():
        lo = np.full(cci.size, np.inf)
        hi = np.full(cci.size, -np.inf)
        np.minimum.at(lo, owner[got], k_ts[mk][got])
        np.maximum.at(hi, owner[got], k_end[mk][got])
        has = np.isfinite(lo)
        c_kernel = has
        c_start[has], c_stop[has] = lo[has], hi[has]
        # a kernel names the collective when neither the call nor a backend range does
        k_k = np.full(cci.size, -1)
        np.maximum.at(k_k, owner[got], k_kind[mk][got])
        c_kind = np.where(c_kind < 0, k_k, c_kind).astype(np.int8)
        # a kernel carries the group and peer when the CPU call does not
        g_k = np.full(cci.size, -1)
        p_k = np.full(cci.size, -1)
        np.maximum.at(g_k, owner[got], k_group[mk][got])
        np.maximum.at(p_k, owner[got], k_peer[mk][got])
        cc_group = cc_group.copy()
        cc_peer = cc_peer.copy()
        cg, cp = cc_group[cci], cc_peer[cci]
        cc_group[cci] = np.where(cg < 0, g_k, cg)
        cc_peer[cci] = np.where(cp < 0, p_k, cp)
    # not communication: a wait for a collective to complete (record_param_comms named
    # 'wait'), or a call that names no collective and launched no kernel (a bare
    # record_param_comms: work waits in traces that do not name them)
    c_wait = c_kind == COMM_CODE["wait"]
    c_bare = (c_kind < 0) & ~c_kernel
    if c_wait.any():
        counts["wait calls (record_param_comms 'wait': waits for a collective to complete, "
               "not communication)"] += int(c_wait.sum())
    if c_bare.any():
        counts["record_param_comms calls naming no collective and launching no kernel "
               "(e.g. work waits; not communication)"] += int(c_bare.sum())
    c_kind = np.where(c_kind < 0, COMM_CODE["other"], c_kind).astype(np.int8)
    # a call without NCCL kernels whose data lives on the GPU (gloo with CUDA tensors): timed
    # on the GPU by its device<->host copies
    m_call, m_owned = _copies_of_calls(ev, rc, rts, rtid, c_ts, c_end, c_tid, counts)
    by_copies = np.zeros(cci.size, bool)
    if m_call.size:
        by_copies = ~c_kernel & ~c_wait & ~c_bare
        start_m, end_m, has_m = _copy_times(m_call, ev.m_end, ev.m_dir, cci.size)
        by_copies &= has_m
        c_stop = np.where(by_copies, np.where(np.isnan(end_m), c_end, end_m), c_stop)
        c_start = np.where(by_copies, np.minimum(np.fmax(c_ts, start_m), c_stop), c_start)
        used = (m_call >= 0) & (by_copies[np.clip(m_call, 0, None)] if cci.size else False)
        n_unused = int(((m_call > -2) & ~used).sum())
        if n_unused:
            counts["gpu_memcpy events (device<->host copies not of a communication call "
                   "without an NCCL kernel: not used)"] += n_unused
    if has_gpu:
        n_no = int((~c_kernel & ~c_wait & ~c_bare & ~by_copies).sum())
        if n_no:
            counts["communication calls without an NCCL kernel (CPU time used)"] += n_no
    lone = mk[~got]
    f_code, b_code = schema.OPTYPE_CODE[schema.FORWARD_COMPUTE], \
        schema.OPTYPE_CODE[schema.BACKWARD_COMPUTE]
    # --- all-to-all launched inside a compute annotation (extension E2): an op of its own,
    # and the annotation is cut there into compute ops of its compute kernels only
    compute_ann = np.isin(a_type, [f_code, b_code])
    a2a = COMM_CODE["alltoall"]
    c_a2a = np.zeros(cci.size, bool)
    l_a2a = np.zeros(lone.size, bool)
    split = np.zeros(a_type.size, bool)
    if has_gpu and compute_ann.any():
        c_a2a = (c_kind == a2a) & _inside(a_ts[compute_ann], a_end[compute_ann], c_ts)
        l_a2a = (k_kind[lone] == a2a) & _inside(a_ts[compute_ann], a_end[compute_ann],
                                                 k_launch[lone])
        cut_t = np.r_[c_ts[c_a2a], k_launch[lone][l_a2a]]
        cut_order = np.argsort(cut_t, kind="stable")
        cuts = cut_t[cut_order]
        cut_end = np.r_[c_stop[c_a2a], k_end[lone][l_a2a]][cut_order]
        if cuts.size:
            inside = np.searchsorted(cuts, a_end, "right") - np.searchsorted(cuts, a_ts, "left")
            split = compute_ann & (inside > 0)
            counts["compute annotations as a whole (cut at the all-to-all calls inside them "
                   "into compute ops of their kernels)"] += int(split.sum())
    # the kernels of those all-to-alls: their time is never compute (the model places the
    # all-to-all between the compute ops; a compute kernel running beside it, or the wait of
    # a rank that arrived early, is not charged to compute)
    a2a_k = np.r_[mk[got][c_a2a[owner[got]]], lone[l_a2a]].astype(np.int64)
    cover = _union(k_ts[a2a_k], k_end[a2a_k])
    # compute-like annotations (whole): the span of the compute kernels launched inside them
    # less the all-to-all time above, else the CPU range
    timed = ~a_comm & ~split
    if has_gpu and timed.any():
        ms = np.flatnonzero(timed)
        k_own, k_pos = _launched(a_ts[ms], a_end[ms], k_launch[c_sel])
        first, length, has = _compute_time(k_own, k_ts[c_sel][k_pos], k_end[c_sel][k_pos],
                                           ms.size, cover, a2a_base)
        a_start[ms[has]], a_stop[ms[has]] = first[has], first[has] + length[has]
    # without GPU kernels: the CPU range less the time its thread spends in communication
    comm_in_compute = 0.0
    if not has_gpu and ev.cpu_read and timed.any():
        ms = np.flatnonzero(timed)
        for tid in np.unique(a_tid[ms]).tolist():  # one pass per thread: a handful
            sel = ms[a_tid[ms] == tid]
            first, length, _ = _compute_time(np.arange(sel.size), a_ts[sel], a_end[sel],
                                             sel.size, _thread_comm_cover(ev, tid))
            less = (a_end[sel] - a_ts[sel]) - length
            a_start[sel], a_stop[sel] = first, first + length
            comm_in_compute += float(less.sum())
    pieces = _pieces(np.flatnonzero(split), a_ts, a_end,
                     cuts if split.any() else np.zeros(0),
                     cut_end if split.any() else np.zeros(0),
                     k_launch[c_sel], k_ts[c_sel], k_end[c_sel], cover, a2a_base)
    whole = ~split
    a_type, a_mb, a_ts_k, a_start, a_stop, a_idx = (
        np.r_[a_type[whole], a_type[pieces.annotation]].astype(np.int8),
        np.r_[a_mb[whole], a_mb[pieces.annotation]],
        np.r_[a_ts[whole], pieces.launch],
        np.r_[a_start[whole], pieces.start], np.r_[a_stop[whole], pieces.end],
        np.r_[a_idx[whole], a_idx[pieces.annotation]])
    # --- forward/backward compute by segmentation when no compute annotation exists
    segmented = False
    seg_type = np.zeros(0, np.int8)
    seg_start = seg_end = seg_launch = np.zeros(0)
    if has_gpu and not np.isin(a_type, [f_code, b_code]).any():
        segmented = True
        autograd = np.array([t for t, name in ev.threads.items() if "autograd" in name],
                            dtype=np.int64)
        cs = c_sel[np.argsort(k_ts[c_sel], kind="stable")]
        # kernels inside the optimizer (and other non-compute annotations) are not compute
        other = ~np.isin(a_type, [f_code, b_code])
        cs = cs[~_inside(a_ts[other], a_end[other], k_launch[cs])]
        back = np.isin(k_tid[cs], autograd)
        step_k = step_of(k_launch[cs])
        p2p_t = np.sort(np.r_[k_ts[m_sel][np.isin(k_kind[m_sel], _P2P_KINDS)]])
        n_p2p = np.searchsorted(p2p_t, k_ts[cs], "right")
        cut = np.r_[True, (back[1:] != back[:-1]) | (step_k[1:] != step_k[:-1])
                    | (n_p2p[1:] != n_p2p[:-1])] if cs.size else np.zeros(0, bool)
        seg = np.cumsum(cut) - 1
        n_seg = int(seg[-1]) + 1 if cs.size else 0
        seg_start, seg_len, _ = _compute_time(seg, k_ts[cs], k_end[cs], n_seg, cover,
                                              a2a_base)
        seg_end = seg_start + seg_len
        first = np.flatnonzero(cut)
        seg_type = np.where(back[first], b_code, f_code).astype(np.int8)
        seg_launch = k_launch[cs][first]
    # --- assemble
    n_a, n_c, n_l, n_s = a_type.size, cci.size, lone.size, seg_type.size
    optype = np.r_[a_type, np.full(n_c + n_l, UNRESOLVED, np.int8), seg_type].astype(np.int8)
    comm = np.r_[np.full(n_a, -1, np.int8), c_kind, k_kind[lone],
                 np.full(n_s, -1, np.int8)].astype(np.int8)
    group = np.r_[np.full(n_a, -1), cc_group[cci], k_group[lone], np.full(n_s, -1)]
    peer = np.r_[np.full(n_a, -1), cc_peer[cci], k_peer[lone], np.full(n_s, -1)]
    start = np.r_[a_start, c_start, k_ts[lone], seg_start]
    end = np.r_[a_stop, c_stop, k_end[lone], seg_end]
    cpu_t = np.r_[a_ts_k, c_ts, k_launch[lone], seg_launch]
    in_compute = np.r_[np.zeros(n_a, bool), c_a2a, l_a2a, np.zeros(n_s, bool)]
    mb = np.r_[a_mb, np.full(n_c + n_l + n_s, -1)]
    idx = np.r_[a_idx, ev.cc_idx[cci], k_idx[lone], np.full(n_s, -1)]
    seq = np.r_[np.full(n_a, -1), ev.cc_seq[cci], np.full(n_l + n_s, -1)]
    msg = np.r_[np.full(n_a, -1), ev.cc_msg[cci], np.full(n_l + n_s, -1)]
    not_comm = np.r_[np.zeros(n_a, bool), c_wait | c_bare, np.zeros(n_l + n_s, bool)]
    step = step_of(cpu_t)
    out = (step < 0) & ~not_comm
    if out.any():
        counts["operations outside every ProfilerStep range (not used)"] += int(out.sum())
    keep_op = ~out & ~not_comm
    part = np.repeat(np.arange(5, dtype=np.int8),
                     [int(whole.sum()), n_a - int(whole.sum()), n_c, n_l, n_s])[keep_op]
    return RankOps(
        path=ev.path, rank=ev.rank, world_size=ev.world_size, host=ev.host,
        pg_config=list(ev.pg_config), optype=optype[keep_op], comm=comm[keep_op],
        group=group[keep_op].astype(np.int64), peer=peer[keep_op].astype(np.int64),
        start=start[keep_op], end=end[keep_op], step=step[keep_op].astype(np.int64),
        mb=mb[keep_op].astype(np.int64), idx=idx[keep_op].astype(np.int64),
        groups=ev.groups, steps=np.sort(ev.step_n), counts=counts, segmented=segmented,
        a2a_in_compute=in_compute[keep_op], seq=seq[keep_op].astype(np.int64),
        msg=msg[keep_op].astype(np.int64), base_ns=ev.base_ns,
        comm_in_compute_us=comm_in_compute,
        copy_timed=int(by_copies[keep_op[n_a:n_a + n_c]].sum())), part, Links(
            cover[0], cover[1], float(np.cumsum(np.r_[a2a_base, cover[1] - cover[0]])[-1]),
            m_owned)
