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
instead (:class:`_OnePass`): a file without GPU kernels, with device<->host copies
(:func:`~stragglers.kineto.rankops._copies_of_calls` pairs copies across calls), with
all-to-all kernels (their time is taken out of every compute op), whose correlation ids do
not grow with the launch time across windows, a window without kernels, compute segmented
(no forward/backward annotation) where the windows' kernels overlap on the GPU, or no step
start free of annotations and calls.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.errors import InputError
from stragglers.kineto.patterns import Patterns
from stragglers.kineto.rankops import RankOps, rank_ops, rank_ops_parts
from stragglers.kineto.reader import (
    COMM_CODE,
    RankEvents,
    _few_collections,
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
    """After each batch: the new launches thinned to a sample, the new kernels counted."""

    def __init__(self) -> None:
        self.k = 1
        self.ts = np.zeros(0)
        self.corr = np.zeros(0, np.int64)
        self.kernels = 0
        self.alltoall = False

    def __call__(self, r: _Reader) -> None:
        corr, ts = _take(r.rt.cols["corr"], 0), _take(r.rt.cols["ts"], 0)
        for a in r.rt.cols.values():
            del a[:]
        keep = corr % self.k == 0
        self.ts, self.corr = np.r_[self.ts, ts[keep]], np.r_[self.corr, corr[keep]]
        while self.corr.size > SAMPLE:
            self.k *= 2
            keep = self.corr % self.k == 0
            self.ts, self.corr = self.ts[keep], self.corr[keep]
        kind = _take(r.k.cols["kind"], 0)
        self.kernels += kind.size
        self.alltoall |= bool((kind == COMM_CODE["alltoall"]).any())
        for a in r.k.cols.values():
            del a[:]


class _Window:
    """After each batch: keep the new launches with a CPU time in [t0, t1) and the new
    kernels with a correlation id in (c0, c1]."""

    def __init__(self, t0: float, t1: float, c0: float, c1: float) -> None:
        self.t0, self.t1, self.c0, self.c1 = t0, t1, c0, c1
        self.n_rt = self.n_k = 0

    def __call__(self, r: _Reader) -> None:
        ts = _take(r.rt.cols["ts"], self.n_rt)
        self.n_rt = _compact(r.rt.cols, self.n_rt, (ts >= self.t0) & (ts < self.t1))
        corr = _take(r.k.cols["corr"], self.n_k)
        self.n_k = _compact(r.k.cols, self.n_k, (corr > self.c0) & (corr <= self.c1))


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


def _cuts(ev: RankEvents, windows: int) -> np.ndarray:
    """Window edges: step starts cutting the steps into ``windows`` runs of about equal
    count, each moved to the nearest step start no annotation or call straddles."""
    starts = np.unique(ev.step_ts)
    lo = np.r_[ev.ann_ts, ev.cc_ts]
    hi = np.r_[ev.ann_end, ev.cc_end]
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


def _windowed(p: Path, patterns: Patterns, keep_rank: Any, windows: int) -> RankOps:
    survey = _Survey()
    ev = _read_rank_file(p, patterns, keep_rank, survey)
    if ev.skipped:
        return RankOps.skipped_rank(ev)
    if not survey.kernels or not ev.step_ts.size:
        raise _OnePass("no GPU kernel or no step")
    if ev.m_corr.size:
        raise _OnePass("device<->host copies")
    if survey.alltoall:
        raise _OnePass("all-to-all kernels")
    cuts = _cuts(ev, windows)
    del ev
    edges = np.r_[-np.inf, cuts, np.inf]
    s_ts, s_corr = survey.ts, survey.corr
    parts: list[tuple[RankOps, np.ndarray]] = []
    c0 = -math.inf
    gpu_end = -math.inf
    for w in range(edges.size - 1):
        t0, t1 = float(edges[w]), float(edges[w + 1])
        after = s_corr[s_ts >= t1]  # sampled launches after the window: a bound of its ids
        c1 = float(after.min()) if after.size else math.inf
        keep = _Window(t0, t1, c0, c1)
        ev = _read_rank_file(p, patterns, keep_rank, keep)
        if ev.rt_corr.size:
            if ev.rt_corr.min() <= c0 or ev.rt_corr.max() >= c1:
                raise _OnePass("correlation ids not growing with the launch time")
            top = float(ev.rt_corr.max()) if w < edges.size - 2 else math.inf
        else:
            raise _OnePass("a window without launches")
        k = (ev.k_corr > c0) & (ev.k_corr <= top)
        ev = replace(ev, k_corr=ev.k_corr[k], k_ts=ev.k_ts[k], k_end=ev.k_end[k],
                     k_kind=ev.k_kind[k], k_group=ev.k_group[k], k_peer=ev.k_peer[k],
                     k_idx=ev.k_idx[k])
        ev = _subset(ev, t0, t1, w == 0)
        ops, part = rank_ops_parts(ev)
        if ops.segmented:  # segments follow the GPU order: the windows' kernels must not mix
            linked = np.isin(ev.k_corr, ev.rt_corr)
            if not linked.any() or ev.k_ts[linked].min() <= gpu_end:
                raise _OnePass("segmented compute: the windows' kernels overlap on the GPU")
            gpu_end = float(ev.k_end[linked].max())
        if not np.isin(ev.k_corr, ev.rt_corr).any():
            raise _OnePass("a window without GPU kernels")
        parts.append((ops, part))
        c0 = top
        del ev, k
    return _merge(parts)


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
