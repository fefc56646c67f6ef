"""One rank file's operations in bounded memory: the file read in windows of whole steps.

A rank file's kept events grow with it (about 75 bytes per GPU kernel and its CUDA launch:
about 120 MiB per GB of kernel-dense JSON, with :func:`~stragglers.kineto.rankops.rank_ops`'
arrays). :func:`read_rank_ops` reads a file whose estimated footprint is within
``budget`` bytes as before (one pass, :func:`read_rank_file` then ``rank_ops``); a larger one
is read several times:

1. a survey pass keeps the steps, annotations and communication calls (a few per op), and of
   the launches a thinned sample (time, correlation id) of at most :data:`SAMPLE` rows;
2. the steps are cut into windows (time ranges starting at a ``ProfilerStep`` start that no
   kept annotation or call straddles), as many as the footprint needs;
3. each window is one more pass over the file (Kineto files are not in time order: CPU ops
   first, then the GPU activities), keeping only the launches whose CPU time falls in the
   window, the kernels whose correlation id falls in the window's range (the correlation id
   grows with the launch time: checked) and the annotations and calls that start in it (all
   the steps are kept), and gives its ops; the windows' ops are put in the one-pass order.

The result is the one-pass result, array for array. The rules that look across a window's
edge are checked, and when one could see beyond a window the file is read in one pass
instead (:class:`_OnePass`): a file without GPU kernels, whose correlation ids do not grow
with the launch time across windows, a window without kernels, compute segmented (no
forward/backward annotation) where the windows' kernels overlap on the GPU, or no step start
free of annotations and calls. Two rules are carried across the windows:

* device<->host copies (:func:`~stragglers.kineto.rankops._copies_of_calls`): a copy to the
  host launched outside a call is tied to the next copy of its stream (GPU order) launched
  inside one, maybe in a later step. The edges avoid the CPU range from such a copy's launch
  to that of the next copy of its stream that may be a call's (launched while a call runs,
  on any thread; the launches bounded by the survey's sample, exact in files of up to
  :data:`SAMPLE` launches), and after the windows each copy and the copy it may be tied to
  (from the copies each window found launched in a call) must be in one window
  (:class:`_Copies`);
* all-to-all time taken out of compute (:func:`~stragglers.kineto.rankops._compute_time`):
  the running sum of the cover goes from window to window (the one-pass additions, in their
  order), and the windows' covers must follow one another on the GPU with each window's
  compute kernels between the earlier windows' cover and the later ones' (:class:`_Alltoall`).
"""

from __future__ import annotations

import math
import os
import zlib
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.errors import InputError
from stragglers.kineto.jsonstream import EventSyntaxError, scan_piece
from stragglers.kineto.patterns import Patterns
from stragglers.kineto.rankops import Links, RankOps, rank_ops, rank_ops_parts
from stragglers.kineto.reader import (
    DTOH,
    RankEvents,
    _few_collections,
    _open,
    _read_rank_file,
    _Reader,
)

#: Memory a rank file's events may take (bytes, estimated) before it is read in windows.
BUDGET = 512 << 20
#: The environment variable that sets it (bytes).
ENV = "STRAGGLERS_KINETO_MEMORY"
#: Estimated bytes of kept events and ``rank_ops`` arrays per byte of JSON (measured: about
#: 120 MiB per GB of kernel-dense JSON, ``bench/bench_kineto_rank.py``).
PER_JSON_BYTE = 0.125
#: The most launches the survey pass keeps (a thinned sample: every k-th correlation id).
SAMPLE = 1 << 18


class _OnePass(Exception):
    """A rule of ``rank_ops`` would look beyond a window: read the file in one pass."""


def json_bytes(path: Path) -> int:
    """Bytes of JSON in ``path`` (a gzipped file: its trailer's size, modulo 4 GiB: taken
    as at least 8 times the compressed size when the trailer says less)."""
    size = os.stat(path).st_size
    with open(path, "rb") as fh:
        if fh.read(2) != b"\x1f\x8b" or size < 18:
            return size
        fh.seek(-4, os.SEEK_END)
        isize = int.from_bytes(fh.read(4), "little")
    return max(isize, 8 * size)


def memory_budget() -> int:
    """Bytes a rank file's events may take: ``$STRAGGLERS_KINETO_MEMORY`` (read in the
    process that parses the file), else :data:`BUDGET`."""
    text = os.environ.get(ENV)
    if text is None:
        return BUDGET
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise InputError(f"${ENV}: must be a positive number of bytes, got {text!r:.60}")
    return value


def read_rank_ops(path: str | Path, patterns: Patterns, keep_rank: Any = None,
                  budget: int | None = None) -> RankOps:
    """The ops of one rank file (``rank_ops(read_rank_file(...))``), in windows of whole
    steps when its events would take more than ``budget`` bytes (default:
    :func:`memory_budget`)."""
    p = Path(path)
    budget = memory_budget() if budget is None else budget
    try:
        size = json_bytes(p)
    except OSError:
        size = 0  # the reader says why the file cannot be read
    windows = math.ceil(size * PER_JSON_BYTE / max(budget, 1))
    if windows > 1:
        with _few_collections():
            try:
                return _windowed(p, patterns, keep_rank, windows)
            except _OnePass:
                pass
    from stragglers.kineto.reader import read_rank_file
    ev = read_rank_file(p, patterns, keep_rank)
    return RankOps.skipped_rank(ev) if ev.skipped else rank_ops(ev)


class _Survey:
    """After each batch: the new launches thinned to a sample, the new kernels counted, and
    the ranges of the piece being read (:class:`_Index`) widened by them."""

    def __init__(self) -> None:
        self.k = 1
        self.ts = np.zeros(0)
        self.corr = np.zeros(0, np.int64)
        self.kernels = 0
        self.index = _Index()

    def __call__(self, r: _Reader) -> None:
        corr, ts = _take(r.rt.cols["corr"], 0), _take(r.rt.cols["ts"], 0)
        for a in r.rt.cols.values():
            del a[:]
        self.index.launches(ts)
        keep = corr % self.k == 0
        self.ts, self.corr = np.r_[self.ts, ts[keep]], np.r_[self.corr, corr[keep]]
        while self.corr.size > SAMPLE:
            self.k *= 2
            keep = self.corr % self.k == 0
            self.ts, self.corr = self.ts[keep], self.corr[keep]
        self.kernels += len(r.k.cols["kind"])
        self.index.kernels(_take(r.k.cols["corr"], 0))
        for a in r.k.cols.values():
            del a[:]
        self.index.kernels(_take(r.m.cols["corr"], self.index.copies))
        self.index.copies = len(r.m.cols["corr"])


class _Index:
    """Per piece of the events array (:func:`~stragglers.kineto.jsonstream.
    iter_event_batches`' ``on_chunk``: about :data:`~stragglers.kineto.jsonstream.CHUNK`
    bytes of whole events): its byte range, the index of its first event, the copies kept
    before it, the range of its launches' CPU times and that of its kernels' and copies'
    correlation ids. A window reads again only the pieces whose ranges meet its own
    (:func:`_read_window`): about one read of each byte in all, where the events of a step
    are near one another in the file (Kineto's order: the CPU ops in time order, then the
    GPU activities in time order); a file whose steps are spread over it is read whole by
    each window, with the same result. 8 numbers per piece (64 bytes per 2 MiB of JSON)."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []
        self.copies = 0  # copies kept so far
        self.m_first = 0  # copies kept before the piece being read
        self._reset()

    def _reset(self) -> None:
        self.t_lo, self.t_hi = math.inf, -math.inf
        self.c_lo, self.c_hi = math.inf, -math.inf

    def launches(self, ts: np.ndarray) -> None:
        if ts.size:
            self.t_lo = min(self.t_lo, float(ts.min()))
            self.t_hi = max(self.t_hi, float(ts.max()))

    def kernels(self, corr: np.ndarray) -> None:
        if corr.size:
            self.c_lo = min(self.c_lo, float(corr.min()))
            self.c_hi = max(self.c_hi, float(corr.max()))

    def __call__(self, at: int, size: int, first: int, count: int) -> None:
        self.rows.append((at, size, first, self.m_first, self.t_lo, self.t_hi, self.c_lo,
                          self.c_hi))
        self.m_first = self.copies
        self._reset()

    def table(self) -> np.ndarray:
        return np.array(self.rows, float).reshape(-1, 8)

    @staticmethod
    def pieces(table: np.ndarray, t0: float, t1: float, c0: float, c1: float) -> np.ndarray:
        """The pieces a window reads: launches in [t0, t1), kernels or copies with a
        correlation id in (c0, c1]."""
        t_lo, t_hi, c_lo, c_hi = table[:, 4], table[:, 5], table[:, 6], table[:, 7]
        return np.flatnonzero(((t_hi >= t0) & (t_lo < t1)) | ((c_hi > c0) & (c_lo <= c1)))


class _Window:
    """After each batch: keep the new launches with a CPU time in [t0, t1) and the new
    kernels and copies with a correlation id in (c0, c1] (and the copies' positions among
    the file's copies)."""

    def __init__(self, t0: float, t1: float, c0: float, c1: float) -> None:
        self.t0, self.t1, self.c0, self.c1 = t0, t1, c0, c1
        self.n_rt = self.n_k = self.n_m = self.seen_m = 0
        self.m_pos: list[np.ndarray] = []

    def __call__(self, r: _Reader) -> None:
        ts = _take(r.rt.cols["ts"], self.n_rt)
        self.n_rt = _compact(r.rt.cols, self.n_rt, (ts >= self.t0) & (ts < self.t1))
        corr = _take(r.k.cols["corr"], self.n_k)
        self.n_k = _compact(r.k.cols, self.n_k, (corr > self.c0) & (corr <= self.c1))
        corr = _take(r.m.cols["corr"], self.n_m)
        keep = (corr > self.c0) & (corr <= self.c1)
        self.m_pos.append(self.seen_m + np.flatnonzero(keep))
        self.seen_m += corr.size
        self.n_m = _compact(r.m.cols, self.n_m, keep)

    def positions(self) -> np.ndarray:
        """The kept copies' positions among the file's copies (file order)."""
        return np.concatenate(self.m_pos) if self.m_pos else np.zeros(0, np.int64)


def _take(a: Any, start: int) -> np.ndarray:
    """Rows ``start:`` of an ``array`` column as a numpy copy."""
    return np.frombuffer(a[start:], dtype=a.typecode) if len(a) > start \
        else np.zeros(0, a.typecode)


def _compact(cols: dict[str, Any], start: int, keep: np.ndarray) -> int:
    """Keep the rows ``start:`` of ``cols`` where ``keep``; returns the new length."""
    if keep.all():
        return start + keep.size
    for a in cols.values():
        tail = _take(a, start)[keep]
        del a[start:]
        a.frombytes(tail.tobytes())
    return start + int(keep.sum())


def _copy_spans(ev: RankEvents, s_ts: np.ndarray,
                s_corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CPU time ranges a window edge should not cut: from the launch of each device-to-host
    copy to the launch of the next copy of its stream (GPU order) that may have been launched
    inside a communication call (the copy it may be tied to,
    :func:`~stragglers.kineto.rankops._copies_of_calls`). The launches are bounded by the
    sampled launches around their correlation id (exact where the sample is whole)."""
    n = ev.m_corr.size
    if not n:
        return np.zeros(0), np.zeros(0)
    o = np.argsort(s_corr, kind="stable")
    sc, st = s_corr[o], s_ts[o]
    i = np.searchsorted(sc, ev.m_corr, "left")  # the first sampled id >= the copy's
    j = np.searchsorted(sc, ev.m_corr, "right") - 1  # the last one <= it
    late = np.where(i < sc.size, st[np.clip(i, 0, max(sc.size - 1, 0))] if sc.size else 0.0,
                    np.inf)
    early = np.where(j >= 0, st[np.clip(j, 0, None)] if sc.size else 0.0, -np.inf)
    # may be inside a call: the range meets one (on any thread: a superset)
    c_lo, c_hi = ev.cc_ts, ev.cc_end
    maybe = np.zeros(n, bool)
    if c_lo.size:
        co = np.argsort(c_lo, kind="stable")
        run = np.maximum.accumulate(c_hi[co])
        k = np.searchsorted(c_lo[co], late, "right") - 1
        maybe = (k >= 0) & (run[np.clip(k, 0, None)] >= early)
    order = np.lexsort((ev.m_ts, ev.m_stream))
    pos = np.where(maybe[order], np.arange(n), n)
    nxt = np.minimum.accumulate(pos[::-1])[::-1]
    nxt = np.r_[nxt[1:], n]  # the next one after the copy
    nc = np.clip(nxt, 0, n - 1)
    tied = (nxt < n) & (ev.m_stream[order][nc] == ev.m_stream[order]) \
        & (ev.m_dir[order] == DTOH)
    a, b = order[tied], order[nc[tied]]
    return np.minimum(early[a], early[b]), np.maximum(late[a], late[b])


def _cuts(ev: RankEvents, windows: int,
          spans: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))) -> np.ndarray:
    """Window edges: step starts cutting the steps into ``windows`` runs of about equal
    count, each moved to the nearest step start no annotation, call or span of ``spans``
    straddles."""
    starts = np.unique(ev.step_ts)
    lo = np.r_[ev.ann_ts, ev.cc_ts, spans[0]]
    hi = np.r_[ev.ann_end, ev.cc_end, spans[1]]
    if not lo.size:
        free = starts
    else:
        o = np.argsort(lo, kind="stable")
        run = np.maximum.accumulate(hi[o])
        i = np.searchsorted(lo[o], starts, "left") - 1  # intervals starting before
        free = starts[(i < 0) | (run[np.clip(i, 0, None)] < starts)]
    free = free[1:] if free.size and free[0] == starts[0] else free
    if not free.size:
        raise _OnePass("every step start inside an annotation or call")
    windows = min(windows, starts.size)
    want = starts[np.linspace(0, starts.size, windows + 1)[1:-1].astype(np.int64)]
    near = free[np.clip(np.searchsorted(free, want), 0, free.size - 1)]
    cuts = np.unique(near)
    return cuts


def _subset(ev: RankEvents, t0: float, t1: float, first: bool) -> RankEvents:
    """The window's annotations and calls (starting in [t0, t1)); the file's counts of
    ignored events and unmatched names in the first window only."""
    a = (ev.ann_ts >= t0) & (ev.ann_ts < t1)
    c = (ev.cc_ts >= t0) & (ev.cc_ts < t1)
    return replace(
        ev, ann_type=ev.ann_type[a], ann_mb=ev.ann_mb[a], ann_ts=ev.ann_ts[a],
        ann_end=ev.ann_end[a], ann_tid=ev.ann_tid[a], ann_idx=ev.ann_idx[a],
        cc_kind=ev.cc_kind[c], cc_group=ev.cc_group[c], cc_peer=ev.cc_peer[c],
        cc_ts=ev.cc_ts[c], cc_end=ev.cc_end[c], cc_tid=ev.cc_tid[c], cc_idx=ev.cc_idx[c],
        cc_rpc=ev.cc_rpc[c], cc_seq=ev.cc_seq[c], cc_msg=ev.cc_msg[c],
        ignored=ev.ignored if first else Counter(),
        names_unmatched=ev.names_unmatched if first else Counter())


def _read_window(p: Path, patterns: Patterns, base: RankEvents, table: np.ndarray,
                 pieces: np.ndarray, keep: _Window) -> RankEvents:
    """The launches, kernels and copies of a window (``keep``) read from the ``pieces`` of
    the file (rows of :class:`_Index`' table); the rest is the survey's (``base``). A
    gzipped file is decompressed from its start to the window's last piece (the pieces
    before are skipped unscanned)."""
    reader = _Reader(p, patterns)
    reader.groups = {g: i for i, g in enumerate(base.groups)}
    i = -1
    try:
        with _open(p) as fh:
            for at, size, first, m_first in table[pieces, :4].astype(np.int64).tolist():
                fh.seek(at)
                piece = fh.read(size)
                if len(piece) != size:
                    raise _OnePass("the file changed since the survey")
                keep.seen_m = m_first
                for batch in scan_piece(piece, first):
                    for ev, i in zip(batch.events, batch.index.tolist(), strict=True):
                        reader.event(ev, i)
                    del batch
                    keep(reader)
                del piece
    except (OSError, EventSyntaxError, UnicodeDecodeError, OverflowError, EOFError,
            zlib.error) as exc:  # the survey read the same bytes without error
        raise _OnePass(f"the file changed since the survey ({exc})") from None
    del i
    if len(reader.groups) != len(base.groups):
        raise _OnePass("a process group the survey did not see")
    r, k, m = reader.rt, reader.k, reader.m
    return replace(
        base, rt_corr=r.np("corr"), rt_ts=r.np("ts"), rt_tid=r.np("tid"),
        k_corr=k.np("corr"), k_ts=k.np("ts"), k_end=k.np("end"),
        k_kind=k.np("kind").astype(np.int8), k_group=k.np("group"), k_peer=k.np("peer"),
        k_idx=k.np("idx"), m_corr=m.np("corr"), m_ts=m.np("ts"), m_end=m.np("end"),
        m_dir=m.np("dir").astype(np.int8), m_stream=m.np("stream"))


def _windowed(p: Path, patterns: Patterns, keep_rank: Any, windows: int) -> RankOps:
    survey = _Survey()
    ev = _read_rank_file(p, patterns, keep_rank, survey, survey.index)
    if ev.skipped:
        return RankOps.skipped_rank(ev)
    if not survey.kernels or not ev.step_ts.size:
        raise _OnePass("no GPU kernel or no step")
    s_ts, s_corr = survey.ts, survey.corr
    cuts = _cuts(ev, windows, _copy_spans(ev, s_ts, s_corr))
    copies = _Copies(ev.m_ts, ev.m_stream, ev.m_dir)
    table = survey.index.table()
    base = replace(ev, m_corr=ev.m_corr[:0], m_ts=ev.m_ts[:0], m_end=ev.m_end[:0],
                   m_dir=ev.m_dir[:0], m_stream=ev.m_stream[:0])
    del ev
    edges = np.r_[-np.inf, cuts, np.inf]
    parts: list[tuple[RankOps, np.ndarray]] = []
    c0 = -math.inf
    gpu_end = -math.inf
    a2a = _Alltoall()
    for w in range(edges.size - 1):
        t0, t1 = float(edges[w]), float(edges[w + 1])
        after = s_corr[s_ts >= t1]  # sampled launches after the window: a bound of its ids
        c1 = float(after.min()) if after.size else math.inf
        keep = _Window(t0, t1, c0, c1)
        ev = _read_window(p, patterns, base, table, _Index.pieces(table, t0, t1, c0, c1),
                          keep)
        if ev.rt_corr.size:
            if ev.rt_corr.min() <= c0 or ev.rt_corr.max() >= c1:
                raise _OnePass("correlation ids not growing with the launch time")
            top = float(ev.rt_corr.max()) if w < edges.size - 2 else math.inf
        else:
            raise _OnePass("a window without launches")
        k = (ev.k_corr > c0) & (ev.k_corr <= top)
        m = (ev.m_corr > c0) & (ev.m_corr <= top)
        ev = replace(ev, k_corr=ev.k_corr[k], k_ts=ev.k_ts[k], k_end=ev.k_end[k],
                     k_kind=ev.k_kind[k], k_group=ev.k_group[k], k_peer=ev.k_peer[k],
                     k_idx=ev.k_idx[k], m_corr=ev.m_corr[m], m_ts=ev.m_ts[m],
                     m_end=ev.m_end[m], m_dir=ev.m_dir[m], m_stream=ev.m_stream[m])
        ev = _subset(ev, t0, t1, w == 0)
        ops, part, links = rank_ops_parts(ev, a2a.base)
        if ops.segmented:  # segments follow the GPU order: the windows' kernels must not mix
            linked = np.isin(ev.k_corr, ev.rt_corr)
            if not linked.any() or ev.k_ts[linked].min() <= gpu_end:
                raise _OnePass("segmented compute: the windows' kernels overlap on the GPU")
            gpu_end = float(ev.k_end[linked].max())
        if not np.isin(ev.k_corr, ev.rt_corr).any():
            raise _OnePass("a window without GPU kernels")
        a2a.add(ev, links)
        copies.add(w, keep.positions()[m], links.copy_owned)
        parts.append((ops, part))
        c0 = top
        del ev, k, m
    a2a.check()
    copies.check()
    return _merge(parts)


class _Alltoall:
    """The all-to-all time taken out of compute (:func:`~stragglers.kineto.rankops.
    _compute_time`), window by window: the running sum of the cover's lengths goes from one
    window to the next (the same additions in the same order as in one pass), which gives
    the one-pass times when the windows' covers follow one another on the GPU (each starts
    after the earlier ones end: their union is the one-pass cover) and each window's compute
    kernels run between the earlier windows' cover and the later ones' (they see no other
    window's cover)."""

    def __init__(self) -> None:
        self.base = 0.0
        self.cover_end = -math.inf  # the latest end of the earlier windows' covers
        self.first: list[float] = []  # per window: its cover's first start (inf: none)
        self.last_k: list[float] = []  # per window: its compute kernels' latest end

    def add(self, ev: RankEvents, links: Links) -> None:
        comp = ev.k_kind < 0
        if comp.any() and ev.k_ts[comp].min() < self.cover_end:
            raise _OnePass("all-to-all: compute kernels before an earlier window's")
        cs, ce = links.cover_start, links.cover_end
        if cs.size and cs[0] <= self.cover_end:
            raise _OnePass("all-to-all: the windows' kernels overlap on the GPU")
        self.first.append(float(cs[0]) if cs.size else math.inf)
        self.last_k.append(float(ev.k_end[comp].max()) if comp.any() else -math.inf)
        if cs.size:
            self.cover_end = max(self.cover_end, float(ce.max()))
        self.base = links.cover_sum

    def check(self) -> None:
        later = np.minimum.accumulate(np.r_[self.first[1:], math.inf][::-1])[::-1]
        if (np.array(self.last_k) >= later).any():
            raise _OnePass("all-to-all: compute kernels after a later window's")


class _Copies:
    """The device<->host copies, window by window: a device-to-host copy launched outside a
    call is tied to the next copy of its stream launched inside one
    (:func:`~stragglers.kineto.rankops._copies_of_calls`); a window ties its copies as the
    one pass does when each such pair (in the file's copies) is in one window."""

    def __init__(self, ts: np.ndarray, stream: np.ndarray, direction: np.ndarray) -> None:
        self.ts, self.stream, self.dir = ts, stream, direction
        self.window = np.full(ts.size, -1)
        self.owned = np.zeros(ts.size, bool)

    def add(self, w: int, pos: np.ndarray, owned: np.ndarray) -> None:
        if (self.window[pos] >= 0).any():
            raise _OnePass("copies: one in two windows")
        self.window[pos] = w
        self.owned[pos] = owned

    def check(self) -> None:
        n = self.ts.size
        if not n:
            return
        if (self.window < 0).any():
            raise _OnePass("copies: one in no window")
        order = np.lexsort((self.ts, self.stream))
        own = self.owned[order]
        pos = np.where(own, np.arange(n), n)
        nxt = np.minimum.accumulate(pos[::-1])[::-1]  # the next owned copy (n: none)
        nc = np.clip(nxt, 0, n - 1)
        pair = (nxt < n) & (self.stream[order][nc] == self.stream[order]) & ~own \
            & (self.dir[order] == DTOH)
        if (self.window[order][pair] != self.window[order][nc][pair]).any():
            raise _OnePass("copies: a copy and the one it may be tied to in two windows")


def _merge(parts: list[tuple[RankOps, np.ndarray]]) -> RankOps:
    """The windows' ops in the one-pass order: part by part (:func:`rank_ops_parts`);
    annotations and calls in file order (event index), kernels and segments in window
    order (launch and GPU order)."""
    first = parts[0][0]
    if any(o.segmented != first.segmented for o, _ in parts):
        raise _OnePass("compute segmented in some windows only")
    part = np.concatenate([pt for _, pt in parts])
    arrays: dict[str, Any] = {k: np.concatenate([getattr(o, k) for o, _ in parts])
              for k, v in vars(first).items() if isinstance(v, np.ndarray) and k != "steps"}
    key = np.where(part <= 2, arrays["idx"], 0)
    order = np.lexsort((key, part))
    counts: Counter[str] = Counter()
    for o, _ in parts:
        counts.update(o.counts)
    return replace(first, **{k: v[order] for k, v in arrays.items()}, counts=counts,
                   comm_in_compute_us=sum(o.comm_in_compute_us for o, _ in parts),
                   copy_timed=sum(o.copy_timed for o, _ in parts))
