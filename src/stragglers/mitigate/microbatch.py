"""S2, micro-batch redistribution across DP groups (Falcon §5.3, Eq. 1), solved exactly.

Problem. DP group ``i`` needs ``t_i`` seconds per micro-batch; a global batch of ``M``
micro-batches is split into integers ``m_i >= 1`` with ``sum m_i = M``. The step lasts as
long as the slowest group, ``max_i m_i * t_i`` (the *makespan*); we minimise it and, among
the assignments that reach it, minimise the *spread* ``max_i m_i t_i - min_i m_i t_i``.
Falcon hands the variance form of this objective to a QP solver (35.9 s at 512 groups,
its Table 6); it is an integer problem with a structure that makes it easy.

Why the result is optimal
-------------------------
*Makespan.* For a bound ``T`` the most micro-batches group ``i`` can take without
exceeding ``T`` is ``cap_i(T) = max{m : m t_i <= T}``. An assignment of makespan ``<= T``
exists iff ``T >= max t_i`` (every ``m_i >= 1``) and ``sum cap_i(T) >= M`` (take
``m_i <= cap_i`` summing to ``M``, possible because every cap is >= 1 and their sum is
>= M). ``sum cap_i(T)`` is non-decreasing in ``T``, so the optimum ``T*`` is the smallest
feasible ``T``; and ``T*`` is the load of some group, ``k t_i`` for an integer ``k``. With
``H = sum 1/t_i`` and ``D`` groups, ``T/t_i - 1 < cap_i(T) <= T/t_i`` gives
``max(M/H, max t) <= T* <= max((M+D)/H, max t)``: an interval of width at most ``D/H``,
which holds at most ``D/(H t_i) + 1`` multiples of each ``t_i``, so at most ``2D``
candidates in all. We list them (vectorised), sort them, and binary-search the smallest
feasible one with a vectorised count: ``O(D log D)``, independent of ``M``.

*Spread.* Every assignment has makespan ``>= T*``, so among those that reach ``T*``,
minimising the spread means maximising the smallest load ``L``. Group ``i`` reaches ``L``
with ``lo_i(L) = max(1, min{m : m t_i >= L})`` micro-batches; an assignment with
makespan ``T*`` and minimum load ``>= L`` exists iff ``lo_i <= cap_i(T*)`` for all ``i`` and
``sum lo_i <= M`` (and ``sum cap_i >= M``, true at ``T*``). Both conditions are monotone in
``L``; the best ``L*`` is again a multiple of some ``t_i``, between
``min(max(0, (M-D)/H), min_i cap_i t_i)`` and ``min(M/H, min_i cap_i t_i)`` — at most
``2D`` candidates again, searched the same way. Any ``m`` with ``lo_i(L*) <= m_i <= cap_i(T*)``
and ``sum m_i = M`` is then optimal for both; the micro-batches left after ``lo`` go to the
least-loaded groups first (up to their caps), which makes the answer deterministic.

Floating point. Loads are compared as computed, ``fl(m * t_i)``: ``cap`` and ``lo`` start
from ``floor(T / t_i)`` / ``ceil(L / t_i)`` and are corrected by one where the product
rounds across the bound, so the result is optimal for the loads exactly as the float
products give them (the brute-force tests compare the same products).
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

import numpy as np

from stragglers.errors import InputError
from stragglers.inputs import read_text
from stragglers.limits import check_limit, limit

__all__ = ["Assignment", "TimesAssignment", "assign_times", "check_times", "parse_numbers",
           "solve_microbatches"]

#: Largest M accepted: micro-batch counts and their products with times stay exact in float64.
MAX_MICROBATCHES = 2**50
#: Shortest time per micro-batch accepted (seconds, or any unit); the longest is the
#: ``op_seconds`` limit. Their ratio (< 2**50) keeps every multiple k * t_i searched exact.
MIN_TIME = 1e-9


@dataclass(frozen=True)
class Assignment:
    """The optimal micro-batch counts per DP group, their makespan and spread."""

    assignment: np.ndarray  # int64, one count per group
    makespan: float  # max m_i * t_i (seconds per step of the slowest group)
    spread: float  # makespan - min m_i * t_i
    solve_s: float  # wall time of the solve

    def to_dict(self) -> dict[str, object]:
        return {"assignment": self.assignment.tolist(), "makespan": self.makespan,
                "spread": self.spread, "solve_s": self.solve_s}


@dataclass(frozen=True)
class TimesAssignment:
    """``mitigate microbatch``: the times per micro-batch given and their optimal split."""

    times: np.ndarray  # seconds per micro-batch of each DP group
    microbatches: int
    result: Assignment

    def summary(self) -> str:
        """Makespan against the even split, spread, solve time; then the assignment."""
        r, n = self.result, self.times.size
        even = self.microbatches / n
        return (f"{n} DP groups, {self.microbatches} micro-batches: makespan "
                f"{r.makespan:.6g} s (even split: {even * self.times.max():.6g} s or more), "
                f"spread {r.spread:.6g} s, solved in {r.solve_s * 1e3:.3f} ms\n"
                "assignment: " + ",".join(str(int(m)) for m in r.assignment))

    def to_dict(self) -> dict[str, object]:
        return self.result.to_dict()


_SEP = re.compile(r"[,\s]+")


def parse_numbers(text: str, what: str = "time", limit_name: str = "mitigate_groups"
                  ) -> tuple[np.ndarray, str]:
    """The numbers of ``--times`` (or ``--lengths``, ``what="length"``): ``x1,x2,...`` or
    ``@FILE`` (separated by commas, spaces or newlines), each finite and > 0; and their
    source (the option or the file)."""
    option = f"--{what}s"
    if text.startswith("@"):
        path = text[1:]
        body = read_text(path, f"{what}s file")
        source = path
    else:
        body, source = text, option
    values: list[float] = []
    for lineno, line in enumerate(body.splitlines() or [""], start=1):
        tokens = [tok for tok in _SEP.split(line.strip()) if tok]
        check_limit(limit_name, len(values) + len(tokens), source)
        for tok in tokens:
            where = f"{source}: line {lineno}" if source != option else source
            try:
                value = float(tok)
            except ValueError:
                raise InputError(f"{where}: {what} {len(values) + 1} {tok[:40]!r} is not a "
                                 "number") from None
            if not math.isfinite(value) or value <= 0:
                raise InputError(f"{where}: {what} {len(values) + 1} {tok[:40]!r} must be a "
                                 "finite number > 0")
            values.append(value)
    return np.asarray(values, dtype=np.float64), source


def assign_times(text: str, microbatches: int) -> TimesAssignment:
    """``mitigate microbatch``: the optimal split of ``microbatches`` micro-batches for the
    times of ``text`` (``t1,t2,...`` or ``@FILE``, as :func:`parse_numbers`)."""
    times, source = parse_numbers(text)
    return TimesAssignment(times, microbatches,
                           solve_microbatches(times, microbatches, source=source))


def check_times(times: np.ndarray, microbatches: int, source: str = "--times") -> np.ndarray:
    """The times as float64, checked: finite, in ``[1e-9, op_seconds limit]``, at least one,
    no more groups than allowed, and ``microbatches`` an integer in ``[number of groups,
    2**50]``."""
    check_limit("mitigate_groups", int(np.size(times)), source)
    t = np.asarray(times, dtype=np.float64).reshape(-1)
    if t.size == 0:
        raise InputError(f"{source}: no micro-batch times given")
    bad = np.flatnonzero(~np.isfinite(t) | (t <= 0))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{source}: time {i + 1} (group {i}) is {float(t[i])!r}; every "
                         f"micro-batch time must be a finite number > 0 ({bad.size} such)")
    top = limit("op_seconds")
    odd = np.flatnonzero((t < MIN_TIME) | (t > top))
    if odd.size:
        i = int(odd[0])
        raise InputError(f"{source}: time {i + 1} (group {i}) is {float(t[i])!r}; expected "
                         f"a time in [{MIN_TIME:g}, {top:g}] (the upper bound is "
                         "STRAGGLERS_MAX_OP_SECONDS)")
    if isinstance(microbatches, bool) or not isinstance(microbatches, (int, np.integer)):
        raise InputError(f"--microbatches: expected an integer, got {microbatches!r}")
    if microbatches < t.size:
        raise InputError(f"--microbatches: {microbatches} micro-batches cannot give each of "
                         f"the {t.size} DP groups at least one")
    if microbatches > MAX_MICROBATCHES:
        raise InputError(f"--microbatches: {microbatches:,} exceeds {MAX_MICROBATCHES:,}")
    return t


def _caps(t: np.ndarray, bound: float) -> np.ndarray:
    """Per group, the largest m >= 0 with fl(m * t) <= bound."""
    m = np.floor(bound / t)
    m += (m + 1) * t <= bound
    m -= (m * t > bound) & (m > 0)
    return m.astype(np.int64)


def _lows(t: np.ndarray, bound: float) -> np.ndarray:
    """Per group, the smallest m >= 1 with fl(m * t) >= bound."""
    m = np.maximum(np.ceil(bound / t), 1.0)
    m -= ((m - 1) * t >= bound) & (m > 1)
    m += m * t < bound
    return m.astype(np.int64)


def _candidates(t: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Sorted distinct loads fl(k * t_i), k >= 1, in [lo, hi] (widened by a few ulps)."""
    lo_w, hi_w = lo * (1 - 1e-12), hi * (1 + 1e-12)
    k0 = np.maximum(np.ceil(lo_w / t), 1.0)
    k1 = np.floor(hi_w / t)
    counts = np.maximum(k1 - k0 + 1, 0).astype(np.int64)
    total = int(counts.sum())
    group = np.repeat(np.arange(t.size), counts)
    starts = np.cumsum(counts) - counts
    k = k0[group] + (np.arange(total) - starts[group])
    return np.unique(k * t[group])


def _first_true(values: np.ndarray, ok: object) -> int:
    """Index of the first value for which the monotone predicate ``ok`` holds, or -1."""
    lo, hi = 0, values.size  # invariant: answer in [lo, hi]; hi = none
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(float(values[mid])):  # type: ignore[operator]
            hi = mid
        else:
            lo = mid + 1
    return lo if lo < values.size else -1


def solve_microbatches(times: np.ndarray | list[float], microbatches: int,
                       source: str = "--times") -> Assignment:
    """The optimal assignment of ``microbatches`` micro-batches to DP groups of per-micro-batch
    times ``times`` (see the module docstring for the proof). Raises :class:`InputError` for
    bad input."""
    t = check_times(np.asarray(times), microbatches, source)
    start = time.perf_counter()
    m_total = int(microbatches)
    d = t.size
    h = float(np.sum(1.0 / t))
    t_max = float(t.max())

    # makespan: smallest feasible load among the candidate multiples
    lo = max(m_total / h, t_max)
    hi = max((m_total + d) / h, t_max)
    cands = _candidates(t, lo, hi)
    i = _first_true(cands, lambda v: v >= t_max and int(_caps(t, v).sum()) >= m_total)
    if i < 0:
        raise RuntimeError(f"no feasible makespan in [{lo}, {hi}] ({cands.size} candidates)")
    makespan = float(cands[i])
    cap = _caps(t, makespan)

    # spread: largest feasible minimum load
    cap_load_min = float((cap * t).min())
    lo_l = min(max(0.0, (m_total - d) / h), cap_load_min)
    hi_l = min(m_total / h, cap_load_min)
    lcands = _candidates(t, lo_l, hi_l)[::-1]  # descending: first feasible = largest

    def min_ok(v: float) -> bool:
        low = _lows(t, v)
        return bool(np.all(low <= cap)) and int(low.sum()) <= m_total

    j = _first_true(lcands, min_ok)
    if j < 0:
        raise RuntimeError(f"no feasible minimum load in [{lo_l}, {hi_l}]")
    low = _lows(t, float(lcands[j]))

    # the rest, least-loaded groups first, each up to its cap
    rest = m_total - int(low.sum())
    order = np.lexsort((np.arange(d), low * t))
    slack = (cap - low)[order]
    before = np.cumsum(slack) - slack
    give = np.clip(rest - before, 0, slack)
    m = low.copy()
    m[order] += give
    loads = m * t
    solve_s = time.perf_counter() - start
    if int(m.sum()) != m_total or float(loads.max()) != makespan:  # pragma: no cover
        raise RuntimeError("micro-batch solver: inconsistent result")
    return Assignment(assignment=m, makespan=makespan,
                      spread=float(loads.max() - loads.min()), solve_s=solve_s)
