"""One rank file's operations in bounded memory: the file read in windows of whole steps.

A rank file's kept events grow with it (about 75 bytes per GPU kernel and its CUDA launch:
about 120 MiB per GB of kernel-dense JSON, with :func:`~stragglers.kineto.rankops.rank_ops`'
arrays). :func:`read_rank_ops` reads a file whose estimated footprint is within
``budget`` bytes as before (one pass, :func:`read_rank_file` then ``rank_ops``); a larger one
is parsed once and turned into ops window by window:

1. the one pass over the JSON keeps the steps, annotations, communication calls and copies
   (a few per op), and moves the launches and kernels, batch by batch, to a spill of typed
   records in two temporary files (:class:`_Spill`: 24 and 49 bytes a row, about 6% of
   the JSON) indexed per batch by the range of its launches' CPU times and of its kernels'
   correlation ids; of the launches it keeps a thinned sample (time, correlation id) of at
   most :data:`SAMPLE` rows;
2. the steps are cut into windows (time ranges starting at a ``ProfilerStep`` start that no
   kept annotation or call straddles), as many as the footprint needs;
3. each window reads back from the spill the batches whose ranges meet its own (Kineto
   files are not in time order, CPU ops first, then the GPU activities, but each part is:
   a window reads about its share of the records, a batch at each edge more), keeps the
   launches whose CPU time falls in the window, the kernels whose correlation id falls in
   the window's range (the correlation id grows with the launch time: checked, exactly,
   against the least id launched after the window, from the spill) and the
   annotations and calls that start in it (all the steps are kept), and gives its ops;
   the windows' ops are put in the one-pass order. A file whose steps are spread over it
   gives the same ops, its windows reading more of the spill.

The JSON is parsed once, gzipped or not (before: one more full pass per window); what the
process holds is the survey's small columns, one window's launches and kernels and the
reader's batch.

The result is the one-pass result, array for array. The rules that look across a window's
edge are checked, and when one could see beyond a window the file is read in one pass
instead (:class:`_OnePass`): a file without GPU kernels, whose correlation ids do not grow
with the launch time across windows, a window without kernels, compute segmented (no
forward/backward annotation) where the windows' kernels overlap on the GPU, or no step start
free of annotations and calls; the one-pass events are then read back from the spill, not
parsed again (the CPU ops a file without kernels may need are read by the pass over the
file, as in one pass). Two rules are carried across the windows:

* device<->host copies (:func:`~stragglers.kineto.rankops._copies_of_calls`): a copy to the
  host launched outside a call is tied to the next copy of its stream (GPU order) launched
  inside one, maybe in a later step. The edges avoid the CPU range from such a copy's launch
  to that of the next copy of its stream that may be a call's (launched while a call runs,
  on any thread; the copies' own launches read back from the spill, exact whatever the
  file's size; a copy without a launch bounded by the sample), and after the windows each
  copy and the copy it may be tied to (from the copies each window found launched in a
  call) must be in one window (:class:`_Copies`);
* all-to-all time taken out of compute (:func:`~stragglers.kineto.rankops._compute_time`):
  the running sum of the cover goes from window to window (the one-pass additions, in their
  order), and the windows' covers must follow one another on the GPU with each window's
  compute kernels between the earlier windows' cover and the later ones' (:class:`_Alltoall`).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from stragglers.errors import InputError
from stragglers.kineto.patterns import Patterns
from stragglers.kineto.rankops import Links, RankOps, rank_ops, rank_ops_parts
from stragglers.kineto.reader import (
    DTOH,
    RankEvents,
    _few_collections,
    _read_rank_file,
    _Reader,
)

T = TypeVar("T")

#: Memory a rank file's events may take (bytes, estimated) before it is read in windows.
BUDGET = 512 << 20
#: The environment variable that sets it (bytes).
ENV = "STRAGGLERS_KINETO_MEMORY"
#: Estimated bytes of kept events and ``rank_ops`` arrays per byte of JSON (measured: about
#: 120 MiB per GB of kernel-dense JSON, ``bench/bench_kineto_rank.py``).
PER_JSON_BYTE = 0.125
#: The most launches the survey pass keeps (a thinned sample: every k-th correlation id).
SAMPLE = 1 << 18


class _SpillError(Exception):
    """The spill could not be written (``error``)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class _OnePass(Exception):
    """A rule of ``rank_ops`` would look beyond a window: read the file in one pass (its
    ``events``, when set: the one-pass events, read back from the spill, not parsed
    again)."""

    events: RankEvents | None = None


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
    return read_rank(path, patterns, _ops_only, keep_rank, budget)


def _ops_only(ops: RankOps, events: RankEvents | WindowEvents) -> RankOps:
    return ops


def read_rank(path: str | Path, patterns: Patterns,
              then: Callable[[RankOps, RankEvents | WindowEvents], T],
              keep_rank: Any = None, budget: int | None = None) -> T:
    """``then(ops, events)`` of one rank file: its ops as :func:`read_rank_ops` gives them
    and its events, those of one pass (:class:`RankEvents`) or, for a file read in windows,
    read back from the spill window by window (:class:`WindowEvents`, while the spill
    exists: ``then`` runs before it is removed)."""
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
                return _windowed(p, patterns, keep_rank, windows, then)
            except _OnePass as exc:
                if exc.events is not None:
                    return then(rank_ops(exc.events), exc.events)
    from stragglers.kineto.reader import read_rank_file
    ev = read_rank_file(p, patterns, keep_rank)
    return then(RankOps.skipped_rank(ev) if ev.skipped else rank_ops(ev), ev)


#: The launch and kernel columns as the spill file holds them (one record per row).
RT_ROW = np.dtype([("corr", "<i8"), ("ts", "<f8"), ("tid", "<i8")])
K_ROW = np.dtype([("corr", "<i8"), ("ts", "<f8"), ("end", "<f8"), ("kind", "i1"),
                  ("group", "<i8"), ("peer", "<i8"), ("idx", "<i8")])


class _Survey:
    """After each batch of the one pass over the file: its launches and kernels are moved
    from the reader's columns to the spill (:class:`_Spill`), the launches thinned to a
    sample, the kernels counted."""

    def __init__(self, spill: _Spill) -> None:
        self.k = 1
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []  # (times, ids) per batch
        self.rows = 0
        self.kernels = 0
        self.spill = spill

    @property
    def ts(self) -> np.ndarray:
        return np.concatenate([np.zeros(0)] + [t for t, _ in self.parts])

    @property
    def corr(self) -> np.ndarray:
        return np.concatenate([np.zeros(0, np.int64)] + [c for _, c in self.parts])

    def __call__(self, r: _Reader) -> None:
        rt = {k: _take(a, 0) for k, a in r.rt.cols.items()}
        for a in r.rt.cols.values():
            del a[:]
        kc = {k: _take(a, 0) for k, a in r.k.cols.items()}
        for a in r.k.cols.values():
            del a[:]
        try:
            self.spill.add(rt, kc)
        except OSError as exc:  # (not the reader's: it would say the trace is unreadable)
            raise _SpillError(exc) from None
        corr, ts = rt["corr"], rt["ts"]
        keep = corr % self.k == 0
        self.parts.append((ts[keep], corr[keep]))
        self.rows += int(keep.sum())
        if self.rows > SAMPLE:  # thinned (the batches' parts are not copied each time)
            ts, corr = self.ts, self.corr
            while corr.size > SAMPLE:
                self.k *= 2
                keep = corr % self.k == 0
                ts, corr = ts[keep], corr[keep]
            self.parts, self.rows = [(ts, corr)], corr.size
        self.kernels += kc["corr"].size


class _Spill:
    """The launches and kernels of the file, in file order, in two temporary files (typed
    records: :data:`RT_ROW`, 24 bytes, and :data:`K_ROW`, 49 bytes; about 6% of the JSON of
    a kernel-dense trace), with an index in memory: per batch of the pass (about
    :data:`~stragglers.kineto.jsonstream.PARSE_BYTES` of parsed JSON), its rows in each
    file, the range of its launches' CPU times and that of its kernels' correlation ids (8
    numbers a batch: 64 bytes per MiB of JSON). A window reads back only the batches whose
    ranges meet its own (:meth:`rows`): in all about one read of each record where the
    events of a step are near one another in the file (Kineto's order: the CPU ops in time
    order, then the GPU activities in time order); a file whose steps are spread over it is
    read whole by each window (binary records, not JSON), with the same result. The files
    are unnamed (``tempfile.TemporaryFile`` in ``$TMPDIR``): gone when closed, or when the
    process ends."""

    def __init__(self) -> None:
        self.rt_file: Any = tempfile.TemporaryFile(prefix="stragglers-rt-")
        self.k_file: Any = tempfile.TemporaryFile(prefix="stragglers-k-")
        self.index: list[tuple[float, ...]] = []
        self.n_rt = self.n_k = 0

    def close(self) -> None:
        self.rt_file.close()
        self.k_file.close()

    def add(self, rt: dict[str, np.ndarray], kc: dict[str, np.ndarray]) -> None:
        n_rt, n_k = rt["corr"].size, kc["corr"].size
        if not (n_rt or n_k):
            return
        rec = np.empty(n_rt, RT_ROW)
        for name in RT_ROW.names or ():
            rec[name] = rt[name]
        self.rt_file.write(rec.tobytes())
        rec = np.empty(n_k, K_ROW)
        for name in K_ROW.names or ():
            rec[name] = kc[name]
        self.k_file.write(rec.tobytes())
        ts, corr = rt["ts"], kc["corr"]
        self.index.append((self.n_rt, self.n_rt + n_rt, self.n_k, self.n_k + n_k,
                           float(ts.min()) if n_rt else math.inf,
                           float(ts.max()) if n_rt else -math.inf,
                           float(corr.min()) if n_k else math.inf,
                           float(corr.max()) if n_k else -math.inf))
        self.n_rt += n_rt
        self.n_k += n_k

    def done(self) -> None:
        self.rt_file.flush()
        self.k_file.flush()
        self.table = np.array(self.index, float).reshape(-1, 8)
        del self.index

    def _blocks(self, rows: int = 1 << 20) -> Any:
        """The launches, all of them, a block of records at a time."""
        self.rt_file.seek(0)
        while block := self.rt_file.read(rows * RT_ROW.itemsize):
            yield np.frombuffer(block, RT_ROW)

    def launches_of(self, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The CPU times and correlation ids of the launches with one of ids ``corr``."""
        ts, ids = [np.zeros(0)], [np.zeros(0, np.int64)]
        for b in self._blocks():
            hit = np.isin(b["corr"], corr)
            ts.append(b["ts"][hit])
            ids.append(b["corr"][hit])
        return np.concatenate(ts), np.concatenate(ids)

    def first_after(self, cuts: np.ndarray) -> np.ndarray:
        """Per cut: the least correlation id of the launches at or after it (inf: none)."""
        least = np.full(cuts.size + 1, np.inf)
        for b in self._blocks():  # by the number of cuts at or before each launch
            np.minimum.at(least, np.searchsorted(cuts, b["ts"], "right"), b["corr"])
        return np.minimum.accumulate(least[::-1])[::-1][1:]

    def rows(self, t0: float, t1: float, c0: float, c1: float
             ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The launches with a CPU time in [t0, t1) and the kernels with a correlation id
        in (c0, c1], in file order (records), read from the batches whose ranges meet
        those."""
        t = self.table
        lt = (t[:, 5] >= t0) & (t[:, 4] < t1)
        kc = (t[:, 7] > c0) & (t[:, 6] <= c1)
        return (_records(self.rt_file, RT_ROW, t[lt, 0], t[lt, 1],
                         lambda r: (r["ts"] >= t0) & (r["ts"] < t1)),
                _records(self.k_file, K_ROW, t[kc, 2], t[kc, 3],
                         lambda r: (r["corr"] > c0) & (r["corr"] <= c1)))


#: Records read back at a time (a block of the spill: 24 or 49 MiB).
BLOCK_ROWS = 1 << 20


def _records(fh: Any, dtype: np.dtype, lo: np.ndarray, hi: np.ndarray,
             keep: Callable[[np.ndarray], np.ndarray]) -> dict[str, np.ndarray]:
    """The columns of the records [lo, hi) of each range where ``keep``, read a block of
    at most :data:`BLOCK_ROWS` at a time (adjacent ranges: one run) and taken apart as read,
    so that a window holds its own rows once and one block (also where its batches hold
    other windows' records: a file whose steps are spread over it)."""
    lo, hi = lo.astype(np.int64), hi.astype(np.int64)
    names = dtype.names or ()
    parts: dict[str, list[np.ndarray]] = {name: [np.zeros(0, dtype[name])] for name in names}
    if lo.size:
        new = np.r_[True, lo[1:] != hi[:-1]]  # a run starts where a range does not follow
        for a, b in zip(lo[new].tolist(), hi[np.r_[new[1:], True]].tolist(), strict=True):
            fh.seek(a * dtype.itemsize)
            for at in range(a, b, BLOCK_ROWS):
                size = (min(b, at + BLOCK_ROWS) - at) * dtype.itemsize
                block = np.frombuffer(fh.read(size), dtype)
                mask = keep(block)
                for name in names:
                    parts[name].append(block[name][mask])
                del block
    native = {name: dtype[name].newbyteorder("=") for name in names}
    return {name: np.concatenate(parts.pop(name)).astype(native[name], copy=False)
            for name in names}


class _Window:
    """A window: the launches with a CPU time in [t0, t1), the kernels and copies with a
    correlation id in (c0, c1]."""

    def __init__(self, t0: float, t1: float, c0: float, c1: float) -> None:
        self.t0, self.t1, self.c0, self.c1 = t0, t1, c0, c1

    def __call__(self, spill: _Spill, base: RankEvents
                 ) -> tuple[RankEvents, np.ndarray]:
        """The window's launches, kernels and copies (the rest: ``base``'s, the survey's),
        and its copies' positions among the file's copies."""
        rt, k = spill.rows(self.t0, self.t1, self.c0, self.c1)
        m = np.flatnonzero((base.m_corr > self.c0) & (base.m_corr <= self.c1))
        ev = replace(
            base, rt_corr=rt["corr"], rt_ts=rt["ts"], rt_tid=rt["tid"],
            k_corr=k["corr"], k_ts=k["ts"], k_end=k["end"], k_kind=k["kind"],
            k_group=k["group"], k_peer=k["peer"], k_idx=k["idx"], m_corr=base.m_corr[m],
            m_ts=base.m_ts[m],
            m_end=base.m_end[m], m_dir=base.m_dir[m], m_stream=base.m_stream[m])
        return ev, m


def _take(a: Any, start: int) -> np.ndarray:
    """Rows ``start:`` of an ``array`` column as a numpy copy."""
    return np.frombuffer(a[start:], dtype=a.typecode) if len(a) > start \
        else np.zeros(0, a.typecode)


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


def _no_spill(p: Path, exc: OSError) -> InputError:
    return InputError(f"{p}: cannot write the temporary files of a read in windows in "
                      f"{tempfile.gettempdir()} ({exc.strerror or exc}; set $TMPDIR to a "
                      f"folder with room, or ${ENV} to read the file in one pass)")


def _read_window(spill: _Spill, base: RankEvents, keep: _Window
                 ) -> tuple[RankEvents, np.ndarray]:
    """The events of a window (``keep``): its launches and kernels read back from the
    spill, the rest the survey's (``base``)."""
    return keep(spill, base)


def _windowed(p: Path, patterns: Patterns, keep_rank: Any, windows: int,
              then: Callable[[RankOps, RankEvents | WindowEvents], T]) -> T:
    try:
        spill = _Spill()
    except OSError as exc:
        raise _no_spill(p, exc) from None
    try:
        return _in_windows(p, patterns, keep_rank, windows, spill, then)
    finally:
        spill.close()


def _in_windows(p: Path, patterns: Patterns, keep_rank: Any, windows: int, spill: _Spill,
                then: Callable[[RankOps, RankEvents | WindowEvents], T]) -> T:
    survey = _Survey(spill)
    try:
        ev = _read_rank_file(p, patterns, keep_rank, survey)
        spill.done()
    except _SpillError as exc:
        raise _no_spill(p, exc.error) from None
    except OSError as exc:  # the spill (the reader's own errors are InputErrors)
        raise _no_spill(p, exc) from None
    if ev.skipped:
        return then(RankOps.skipped_rank(ev), ev)
    if not survey.kernels or not ev.step_ts.size:
        # the one-pass events (the CPU ops of a file without kernels read as by one pass)
        one = _OnePass("no GPU kernel or no step")
        one.events = _whole(spill, ev)
        raise one
    s_ts, s_corr = survey.ts, survey.corr
    del survey
    if ev.m_corr.size:  # the copies' own launches, exact (the sample bounds the others')
        ts, corr = spill.launches_of(ev.m_corr)
        s_ts, s_corr = np.r_[s_ts, ts], np.r_[s_corr, corr]
    cuts = _cuts(ev, windows, _copy_spans(ev, s_ts, s_corr))
    try:
        ops, bounds = _each_window(spill, ev, cuts)
    except _OnePass as exc:  # the one-pass events, from the spill
        exc.events = _whole(spill, ev)
        raise
    return then(ops, WindowEvents(spill, ev, bounds))


def _whole(spill: _Spill, base: RankEvents) -> RankEvents:
    """The one-pass events: all the launches and kernels read back from the spill."""
    return _Window(-math.inf, math.inf, -math.inf, math.inf)(spill, base)[0]


class WindowEvents:
    """The events of a file read in windows, for a second look after its ops: window by
    window (:meth:`__iter__`: each window's launches and kernels, as its ops saw them, read
    back from the spill; all the steps), or all at once (:meth:`whole`: the one-pass
    events)."""

    def __init__(self, spill: _Spill, base: RankEvents,
                 bounds: list[tuple[float, float, float, float, float]]) -> None:
        self.spill, self.base, self.bounds = spill, base, bounds

    def __len__(self) -> int:
        return len(self.bounds)

    def __iter__(self) -> Iterator[RankEvents]:
        for w in range(len(self.bounds)):
            yield self.read(w)

    def read(self, w: int) -> RankEvents:
        """The events of window ``w``."""
        t0, t1, c0, c1, top = self.bounds[w]
        ev, _ = _Window(t0, t1, c0, c1)(self.spill, self.base)
        return _clip(ev, c0, top)[0]

    def whole(self) -> RankEvents:
        return _whole(self.spill, self.base)


def _clip(ev: RankEvents, c0: float, top: float) -> tuple[RankEvents, np.ndarray]:
    """A window's kernels and copies with a correlation id in (c0, top] (and the copies
    kept)."""
    k = (ev.k_corr > c0) & (ev.k_corr <= top)
    m = (ev.m_corr > c0) & (ev.m_corr <= top)
    return replace(ev, k_corr=ev.k_corr[k], k_ts=ev.k_ts[k], k_end=ev.k_end[k],
                   k_kind=ev.k_kind[k], k_group=ev.k_group[k], k_peer=ev.k_peer[k],
                   k_idx=ev.k_idx[k], m_corr=ev.m_corr[m], m_ts=ev.m_ts[m],
                   m_end=ev.m_end[m], m_dir=ev.m_dir[m], m_stream=ev.m_stream[m]), m


def _each_window(spill: _Spill, base: RankEvents, cuts: np.ndarray
                 ) -> tuple[RankOps, list[tuple[float, float, float, float, float]]]:
    """The ops of the windows cut at ``cuts`` (their launches and kernels from ``spill``,
    the rest from ``base``), in the one-pass order, and the windows' bounds (CPU times
    [t0, t1), correlation ids read (c0, c1], kept (c0, top])."""
    bounds: list[tuple[float, float, float, float, float]] = []
    copies = _Copies(base.m_ts, base.m_stream, base.m_dir)
    first_after = spill.first_after(cuts)
    edges = np.r_[-np.inf, cuts, np.inf]
    parts: list[tuple[RankOps, np.ndarray]] = []
    c0 = -math.inf
    gpu_end = -math.inf
    a2a = _Alltoall()
    for w in range(edges.size - 1):
        t0, t1 = float(edges[w]), float(edges[w + 1])
        c1 = float(first_after[w]) if w < cuts.size else math.inf  # the next window's ids
        keep = _Window(t0, t1, c0, c1)
        ev, m_pos = _read_window(spill, base, keep)
        if ev.rt_corr.size:
            if ev.rt_corr.min() <= c0 or ev.rt_corr.max() >= c1:
                raise _OnePass("correlation ids not growing with the launch time")
            top = float(ev.rt_corr.max()) if w < edges.size - 2 else math.inf
        else:
            raise _OnePass("a window without launches")
        ev, m = _clip(ev, c0, top)
        bounds.append((t0, t1, c0, c1, top))
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
        copies.add(w, m_pos[m], links.copy_owned)
        parts.append((ops, part))
        c0 = top
        del ev, m
    a2a.check()
    copies.check()
    return _merge(parts), bounds


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
