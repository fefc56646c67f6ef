"""Iteration time from a per-rank sequence of communication calls, without framework knowledge
(Falcon-Detect §4.2, "Iteration time analysis").

Calls are symbols: each distinct ``(type, size)`` pair gets an integer code (:class:`CallEncoder`).

Period (:func:`acf`, :func:`find_period`).  Over a window of ``L`` calls, the symbol sequence is
one-hot encoded (``x_t`` in ``{0,1}^C``, mean ``mu`` = symbol frequencies) and::

    ACF_k = [ 1/(L-k) * sum_{t<L-k} <x_t - mu, x_{t+k} - mu> ] / [ 1/L * sum_t |x_t - mu|^2 ]

i.e. Falcon's ACF with the lag-k sum normalised by its number of terms (without that, a
perfectly periodic sequence only reaches ``(L-k)/L`` and a 0.95 threshold would only find periods
below ``L/20``).  ``ACF_k = 1`` exactly when the window repeats with lag ``k``.  The period is the
first lag in ``1..max_lag`` whose ACF reaches ``threshold`` (0.95).

Anchor.  With period ``p`` known, the window's *motif* is the first ``p`` calls that are repeated
verbatim by the next ``p`` calls.  The anchor is the shortest n-gram of the cyclic motif (at least
``min_anchor`` calls long) that occurs exactly once per period; it exists because a
primitive motif's rotations are all distinct.  Every occurrence of the anchor marks one iteration;
the iteration time is the time between the first calls of consecutive occurrences (Falcon: "the
time difference between a communication operation and its occurrence in the previous period").

Robustness.  A dropped or inserted call inside an anchor occurrence hides it: the next gap spans
``g`` calls with ``round(g / p) = 2`` periods, and the time is split evenly over the two
iterations (``n_iters = 2``).  A dropped or inserted call elsewhere does not matter.  An anchor
found less than ``p / 2`` calls after the previous detected one is ignored (an inserted call that
happens to recreate the anchor).

Period changes (e.g. after re-partitioning).  The period is re-estimated every ``step`` calls on
the last ``window`` calls.  A window without a period (a glitch, or a window straddling a change)
keeps the current anchor.  When the period or motif changes, the new anchor is searched for
retroactively from the last anchor of the old pattern on (at most ``2 * window`` calls back), so
the iterations that revealed the new pattern are not lost.

Streaming and batch are one implementation: :class:`PeriodTracker` accepts arrays of any length
(one call at a time in the watcher, the whole sequence in :func:`iteration_times`) and processes
the calls between two period evaluations with array operations; the result does not depend on
how the calls are chunked.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.logs.records import CallRecord, other_kinds, read_records

__all__ = [
    "CallEncoder",
    "IterationTimes",
    "PeriodTracker",
    "RankIterations",
    "acf",
    "choose_anchor",
    "find_motif",
    "find_period",
    "iteration_times",
    "primitive_period",
    "rank_iterations",
]


class CallEncoder:
    """Maps call signatures (e.g. ``(type, size)``) to small integer codes, first come first."""

    def __init__(self) -> None:
        self._codes: dict[Hashable, int] = {}

    def code(self, key: Hashable) -> int:
        c = self._codes.get(key)
        if c is None:
            c = self._codes[key] = len(self._codes)
        return c

    def encode(self, keys: Sequence[Hashable]) -> np.ndarray:
        return np.fromiter((self.code(k) for k in keys), dtype=np.int64, count=len(keys))

    def __len__(self) -> int:
        return len(self._codes)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._codes


def acf(codes: np.ndarray, max_lag: int) -> np.ndarray:
    """One-hot autocorrelation ``ACF_k`` for ``k = 0..max_lag`` (definition in the module doc)."""
    x = np.asarray(codes)
    n = x.size
    max_lag = min(int(max_lag), n - 1)
    if n == 0 or max_lag < 0:
        return np.zeros(0)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    freq = counts / n
    s2 = float(np.sum(freq * freq))
    denom = 1.0 - s2
    if denom <= 0.0:  # a single symbol: every lag repeats it
        return np.ones(max_lag + 1)
    matches = _matches(inv, counts.size, max_lag)
    q = freq[inv]
    cq = np.concatenate([[0.0], np.cumsum(q)])
    k = np.arange(max_lag + 1)
    overlap = n - k
    num = matches - cq[overlap] - (cq[n] - cq[k]) + overlap * s2
    return (num / overlap) / denom


def _matches(inv: np.ndarray, symbols: int, max_lag: int) -> np.ndarray:
    """``matches[k] = #{t < n-k : x_t == x_{t+k}}`` for ``k = 0..max_lag`` (exact integers).

    By FFT autocorrelation of the one-hot channels (``symbols x n log n``, channels in chunks
    of bounded memory) or by direct comparison (``n x max_lag``), whichever costs less: a
    window of many distinct calls costs neither quadratic memory nor quadratic FFT time."""
    n = inv.size
    nfft = 1 << int(np.ceil(np.log2(2 * n)))
    fft_cost = symbols * nfft * np.log2(nfft)
    direct_cost = (max_lag + 1) * (n + 2000)
    if direct_cost < fft_cost:
        out = np.empty(max_lag + 1)
        for k in range(max_lag + 1):
            out[k] = np.count_nonzero(inv[: n - k] == inv[k:])
        return out
    chunk = max(1, (32 << 20) // (16 * nfft))  # channels per FFT batch: about 32 MiB
    power = np.zeros(nfft // 2 + 1)
    cols = np.arange(n)
    for lo in range(0, symbols, chunk):
        hi = min(symbols, lo + chunk)
        sel = (inv >= lo) & (inv < hi)
        onehot = np.zeros((hi - lo, n))
        onehot[inv[sel] - lo, cols[sel]] = 1.0
        spec = np.fft.rfft(onehot, nfft, axis=1)
        power += (spec.real**2 + spec.imag**2).sum(axis=0)
    auto = np.fft.irfft(power, nfft)[: max_lag + 1]
    return np.rint(auto)


def find_period(codes: np.ndarray, max_lag: int, threshold: float = 0.95) -> int | None:
    """First lag ``k >= 1`` whose ACF reaches ``threshold``, or ``None``."""
    a = acf(codes, max_lag)
    hits = np.flatnonzero(a[1:] >= threshold - 1e-12)
    return int(hits[0]) + 1 if hits.size else None


def find_motif(codes: np.ndarray, period: int) -> np.ndarray | None:
    """First ``period`` calls of the window that the next ``period`` calls repeat verbatim."""
    x = np.asarray(codes)
    p = int(period)
    if x.size < 2 * p:
        return None
    eq = (x[:-p] == x[p:]).astype(np.int64)
    csum = np.concatenate([[0], np.cumsum(eq)])
    ok = np.flatnonzero(csum[p:] - csum[:-p] == p)
    if ok.size == 0:
        return None
    j = int(ok[0])
    return x[j : j + p].copy()


def primitive_period(motif: np.ndarray) -> int:
    """The smallest ``d`` dividing ``len(motif)`` such that the motif is ``motif[:d]``
    repeated (its primitive root's length)."""
    x = np.asarray(motif)
    p = int(x.size)
    for d in range(1, p):
        if p % d == 0 and np.array_equal(x, np.tile(x[:d], p // d)):
            return d
    return p


def canonical_rotation(motif: np.ndarray) -> tuple[int, ...]:
    """Lexicographically smallest rotation (identifies a motif whatever its phase)."""
    p = motif.size
    idx = (np.arange(p)[:, None] + np.arange(p)[None, :]) % p
    rots = motif[idx]
    order = np.lexsort(rots.T[::-1])
    return tuple(int(v) for v in rots[order[0]])


def choose_anchor(motif: np.ndarray, min_anchor: int = 2) -> tuple[int, ...]:
    """Shortest n-gram (length >= ``min(min_anchor, p)``) that occurs once per cyclic motif;
    ties go to the n-gram starting earliest in the canonical rotation."""
    m0 = np.asarray(canonical_rotation(np.asarray(motif)), dtype=np.int64)
    p = m0.size
    doubled = np.concatenate([m0, m0])
    for m in range(min(max(1, min_anchor), p), p + 1):
        grams = np.lib.stride_tricks.sliding_window_view(doubled, m)[:p]
        _, inv, counts = np.unique(grams, axis=0, return_inverse=True, return_counts=True)
        unique_at = np.flatnonzero(counts[inv.ravel()] == 1)
        if unique_at.size:
            return tuple(int(v) for v in grams[unique_at[0]])
    raise ValueError("motif is not primitive")  # _evaluate passes the primitive root


@dataclass(frozen=True)
class IterationTimes:
    """Iterations found so far: ``end_ts[i]`` is the first call of the anchor that closes the
    interval, ``duration[i]`` the time per iteration over it, ``n_iters[i]`` how many iterations
    the interval spans (2 when an anchor was hidden by a dropped/inserted call), ``period[i]``
    the period in calls."""

    end_ts: np.ndarray
    duration: np.ndarray
    n_iters: np.ndarray
    period: np.ndarray

    def __len__(self) -> int:
        return int(self.end_ts.size)

    def per_iteration(self) -> np.ndarray:
        """One duration per iteration (intervals spanning n iterations repeated n times)."""
        return np.repeat(self.duration, self.n_iters)

    @staticmethod
    def concat(parts: Sequence[IterationTimes]) -> IterationTimes:
        if not parts:
            return IterationTimes(np.zeros(0), np.zeros(0), np.zeros(0, np.int64),
                                  np.zeros(0, np.int64))
        return IterationTimes(
            np.concatenate([p.end_ts for p in parts]),
            np.concatenate([p.duration for p in parts]),
            np.concatenate([p.n_iters for p in parts]),
            np.concatenate([p.period for p in parts]),
        )


class PeriodTracker:
    """Streaming iteration-time extraction for one rank (see the module docstring)."""

    def __init__(self, window: int = 1024, step: int | None = None, threshold: float = 0.95,
                 max_lag: int | None = None, min_anchor: int = 2) -> None:
        if window < 4:
            raise ValueError(f"window must be >= 4 calls, got {window}")
        self.window = int(window)
        self.step = int(step) if step is not None else max(1, self.window // 4)
        self.max_lag = int(max_lag) if max_lag is not None else max(1, self.window // 3)
        if self.step < 1 or self.max_lag < 1:
            raise ValueError("step and max_lag must be >= 1")
        self.threshold = float(threshold)
        self.min_anchor = int(min_anchor)
        self.seen = 0  # calls absorbed so far
        # The last 2 x window calls are visible (absolute index of the first: _base); they
        # live in buffers of 4 x window that are compacted when full (amortised O(1)).
        self._keep = 2 * self.window
        self._cap = 2 * self._keep
        self._bc = np.zeros(self._cap, np.int64)
        self._bt = np.zeros(self._cap)
        self._n = 0  # calls in the buffers
        self._abs0 = 0  # absolute index of the buffers' first call
        self._anchor_list: list[int] | None = None
        self._next_eval = self.window
        self.period: int | None = None
        self.anchor: tuple[int, ...] | None = None
        self._motif_key: tuple[int, ...] | None = None
        self._last_detected: int | None = None
        self._last_kept: int | None = None
        self._last_kept_ts = 0.0
        self._scanned = 0  # anchors starting before this absolute index have been handled

    # -- public API ---------------------------------------------------------------------------
    def feed(self, ts: Sequence[float] | np.ndarray, codes: Sequence[int] | np.ndarray
             ) -> IterationTimes:
        """Absorb calls (timestamps non-decreasing) and return the iterations they complete."""
        ts_a = np.asarray(ts, dtype=float).ravel()
        codes_a = np.asarray(codes, dtype=np.int64).ravel()
        if ts_a.size != codes_a.size:
            raise ValueError("ts and codes must have the same length")
        out: list[IterationTimes] = []
        pos = 0
        while pos < ts_a.size:
            take = min(ts_a.size - pos, self._next_eval - self.seen)
            self._append(ts_a[pos : pos + take], codes_a[pos : pos + take])
            pos += take
            out.append(self._scan())
            if self.seen == self._next_eval:
                out.append(self._evaluate())
                self._next_eval += self.step
        return IterationTimes.concat(out)

    def feed_one(self, ts: float, code: int) -> list[tuple[float, float, int]] | None:
        """Absorb one call; the iterations it completes as ``(end_ts, duration, n_iters)``
        (None when there are none).  Same result as :meth:`feed` with one call, faster."""
        if self._n == self._cap:
            self._compact(1)
        self._bc[self._n] = code
        self._bt[self._n] = ts
        self._n += 1
        self.seen += 1
        out = self._scan_one()
        if self.seen == self._next_eval:
            more = self._evaluate()
            self._next_eval += self.step
            if len(more):
                rows = list(zip(more.end_ts.tolist(), more.duration.tolist(),
                                more.n_iters.tolist(), strict=True))
                out = rows if out is None else out + rows
        return out

    # -- internals ----------------------------------------------------------------------------
    @property
    def _base(self) -> int:
        return max(self._abs0, self.seen - self._keep)

    @property
    def _codes(self) -> np.ndarray:
        return self._bc[self._base - self._abs0 : self._n]

    @property
    def _ts(self) -> np.ndarray:
        return self._bt[self._base - self._abs0 : self._n]

    def _compact(self, incoming: int) -> None:
        """Make room for ``incoming`` calls, keeping the visible ones."""
        drop = self._base - self._abs0
        assert self._n - drop + incoming <= self._cap  # visible <= keep, incoming <= keep
        live = self._n - drop
        self._bc[:live] = self._bc[drop : self._n]
        self._bt[:live] = self._bt[drop : self._n]
        self._n = live
        self._abs0 += drop

    def _append(self, ts: np.ndarray, codes: np.ndarray) -> None:
        k = codes.size
        if k > self._keep:  # only the last 2 x window calls stay visible
            skip = k - self._keep
            self.seen += skip
            self._abs0 = self.seen
            self._n = 0
            ts, codes, k = ts[skip:], codes[skip:], self._keep
        if self._n + k > self._cap:
            self._compact(k)
        self._bc[self._n : self._n + k] = codes
        self._bt[self._n : self._n + k] = ts
        self._n += k
        self.seen += k

    def _scan_one(self) -> list[tuple[float, float, int]] | None:
        """:meth:`_scan` for the usual case of one new call (one candidate anchor start)."""
        if self._anchor_list is None or self.period is None:
            return None
        gram = self._anchor_list
        m = len(gram)
        last = self.seen - m
        first = max(self._scanned, self._base)
        if last != first:
            if last < first:
                return None
            its = self._scan()
            if not len(its):
                return None
            return list(zip(its.end_ts.tolist(), its.duration.tolist(), its.n_iters.tolist(),
                            strict=True))
        self._scanned = last + 1
        i = last - self._abs0
        if self._bc[i : i + m].tolist() != gram:
            return None
        p = self.period
        prev = -(10**18) if self._last_detected is None else self._last_detected
        self._last_detected = last
        if last - prev < p / 2.0:
            return None
        kts = float(self._bt[i])
        if self._last_kept is None:
            self._last_kept = last
            self._last_kept_ts = kts
            return None
        n = max(1, int(np.rint((last - self._last_kept) / p)))
        dur = (kts - self._last_kept_ts) / n
        self._last_kept = last
        self._last_kept_ts = kts
        return [(kts, dur, n)]

    def _scan(self, start: int | None = None) -> IterationTimes:
        """Detect anchors whose n-gram is complete and starts at or after ``start``."""
        empty = IterationTimes.concat([])
        if self.anchor is None or self.period is None:
            return empty
        gram = np.asarray(self.anchor, dtype=np.int64)
        m = gram.size
        first = max(self._scanned if start is None else start, self._base)
        last = self.seen - m  # last absolute start index whose n-gram is complete
        if last < first:
            return empty
        lo = first - self._base
        seg = self._codes[lo : last - self._base + m]
        hit = np.ones(last - first + 1, dtype=bool)
        for k in range(m):
            hit &= seg[k : k + hit.size] == gram[k]
        self._scanned = last + 1
        det = np.flatnonzero(hit) + first
        if det.size == 0:
            return empty
        p = self.period
        prev = np.concatenate([[-(10**18) if self._last_detected is None else
                                self._last_detected], det[:-1]])
        kept = det[(det - prev) >= p / 2.0]
        self._last_detected = int(det[-1])
        if kept.size == 0:
            return empty
        kts = self._ts[kept - self._base]
        if self._last_kept is None:
            kept_prev = kept[:-1]
            kts_prev = kts[:-1]
            kept_cur, kts_cur = kept[1:], kts[1:]
        else:
            kept_prev = np.concatenate([[self._last_kept], kept[:-1]])
            kts_prev = np.concatenate([[self._last_kept_ts], kts[:-1]])
            kept_cur, kts_cur = kept, kts
        self._last_kept = int(kept[-1])
        self._last_kept_ts = float(kts[-1])
        n = np.maximum(1, np.rint((kept_cur - kept_prev) / p)).astype(np.int64)
        dur = (kts_cur - kts_prev) / n
        return IterationTimes(kts_cur.copy(), dur, n, np.full(n.size, p, dtype=np.int64))

    def _evaluate(self) -> IterationTimes:
        lo = self.seen - self.window - self._base
        win = self._codes[lo:]
        p = find_period(win, self.max_lag, self.threshold)
        if p is None:
            return IterationTimes.concat([])
        motif = find_motif(win, p)
        if motif is None:
            return IterationTimes.concat([])
        # a window that mixes patterns (a restart's start-up calls, a reconfiguration) can
        # reach the threshold first at a multiple of the period: the motif's primitive root
        p = primitive_period(motif)
        motif = motif[:p]
        key = canonical_rotation(motif)
        if key == self._motif_key:
            return IterationTimes.concat([])
        # New pattern: adopt its anchor and scan back over the window.
        retro_from = self._base
        if self._last_kept is not None:
            retro_from = max(self._base, self._last_kept + 1)
        self.period = p
        self._motif_key = key
        self.anchor = choose_anchor(motif, self.min_anchor)
        self._anchor_list = list(self.anchor)
        self._last_detected = None
        self._last_kept = None
        return self._scan(start=retro_from)


def iteration_times(ts: Sequence[float] | np.ndarray, codes: Sequence[int] | np.ndarray,
                    **kwargs: int | float) -> IterationTimes:
    """Batch iteration times of one rank's call sequence (same result as streaming)."""
    return PeriodTracker(**kwargs).feed(ts, codes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class RankIterations:
    """One rank's iteration times from its calls (a line of ``stragglers detect period``)."""

    rank: int
    calls: int
    calls_out_of_order: int  # calls with a ts before the previous one (sorted before use)
    periods: tuple[int, ...]  # the distinct periods found, in calls
    iteration_s: np.ndarray  # one time per iteration

    def to_dict(self, all_times: bool = False) -> dict[str, Any]:
        """The JSON line; ``all_times`` adds every iteration time (``iteration_s``)."""
        per = self.iteration_s
        row: dict[str, Any] = {
            "rank": self.rank, "calls": self.calls, "calls_out_of_order": self.calls_out_of_order,
            "iterations": int(per.size), "periods_calls": list(self.periods),
            "median_s": float(np.median(per)) if per.size else None,
            "mean_s": float(per.mean()) if per.size else None,
        }
        if all_times:
            row["iteration_s"] = [round(float(x), 9) for x in per]
        return row


def rank_iterations(path: str | Path, window: int = 1024, threshold: float = 0.95
                    ) -> tuple[Iterator[RankIterations], dict[str, int]]:
    """The call records of a JSON-lines file, per rank by increasing rank (each computed when
    it is asked for), and the records of other kinds counted by kind. The window is checked
    against its limit and the file read (strictly) before this returns."""
    check_limit("period_window", window, "--window")
    records = read_records(path)
    calls = [r for r in records if isinstance(r, CallRecord)]
    if not calls:
        raise InputError(f"{path}: no call records")
    by_rank: dict[int, list[CallRecord]] = {}
    for r in calls:
        by_rank.setdefault(r.rank, []).append(r)

    def each() -> Iterator[RankIterations]:
        for rank, recs in sorted(by_rank.items()):
            ts = np.array([r.ts for r in recs])
            order = np.argsort(ts, kind="stable")
            codes = CallEncoder().encode([(recs[i].type, recs[i].size) for i in order])
            its = iteration_times(ts[order], codes, window=window, threshold=threshold)
            yield RankIterations(rank, len(recs), int(np.count_nonzero(np.diff(ts) < 0)),
                                 tuple(sorted({int(p) for p in its.period})),
                                 its.per_iteration())

    return each(), other_kinds(records, CallRecord)
