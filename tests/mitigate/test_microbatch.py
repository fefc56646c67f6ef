"""S2 solver: optimal against brute force, and its input checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stragglers.errors import InputError
from stragglers.limits import LimitError
from stragglers.mitigate.microbatch import solve_microbatches


def _compositions(total: int, parts: int):
    """Every tuple of ``parts`` integers >= 1 summing to ``total``."""
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        yield tuple(b - a for a, b in itertools.pairwise(bounds))


def _brute(times: list[float], total: int) -> tuple[float, float]:
    """(best makespan, best spread among assignments of that makespan), by enumeration."""
    t = np.asarray(times, dtype=np.float64)
    best: tuple[float, float] | None = None
    for comp in _compositions(total, len(times)):
        loads = np.asarray(comp, dtype=np.float64) * t
        key = (float(loads.max()), float(loads.max() - loads.min()))
        best = key if best is None or key < best else best
    assert best is not None
    return best


times_st = st.lists(
    st.one_of(st.integers(1, 9).map(float), st.floats(0.05, 5.0, allow_nan=False)),
    min_size=1, max_size=5)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(times=times_st, extra=st.integers(0, 9))
def test_optimal_against_brute_force(times: list[float], extra: int) -> None:
    total = len(times) + extra
    res = solve_microbatches(times, total)
    m = res.assignment
    assert m.sum() == total and m.min() >= 1
    loads = m * np.asarray(times)
    assert res.makespan == loads.max()
    assert res.spread == pytest.approx(loads.max() - loads.min(), abs=0)
    assert (res.makespan, res.spread) == _brute(times, total)


def test_known_answers() -> None:
    # two groups at 1 s, one at 2 s, 8 micro-batches: caps at 3 s give 3+3+1 = 7 < 8, so 4 s;
    # (3, 3, 2) has loads 3, 3, 4: spread 1 (4, 2, 2 would be 2)
    res = solve_microbatches([1.0, 1.0, 2.0], 8)
    assert res.assignment.tolist() == [3, 3, 2] and res.makespan == 4.0 and res.spread == 1.0
    # one slow group of four, x2: healthy 16 micro-batches over 4 take 4 units; optimum gives
    # the slow one 2 (load 4) and the others 14 (loads 5, 5, 4): makespan 5 instead of 8
    res = solve_microbatches([1.0, 1.0, 1.0, 2.0], 16)
    assert res.makespan == 5.0 and sorted(res.assignment.tolist()) == [2, 4, 5, 5]
    # M = D: every group gets one, the makespan is the slowest time
    res = solve_microbatches([0.3, 0.1, 0.2], 3)
    assert res.assignment.tolist() == [1, 1, 1] and res.makespan == 0.3


def test_large_m_and_many_groups() -> None:
    rng = np.random.default_rng(3)
    t = rng.uniform(0.5, 3.0, 5000)
    res = solve_microbatches(t, 10**12)
    loads = res.assignment * t
    assert res.assignment.sum() == 10**12 and loads.max() == res.makespan
    # no group can take one more without exceeding... and the makespan cannot drop: the
    # groups at the makespan cannot give one away to a group that stays below it
    caps_below = np.floor(np.nextafter(res.makespan, 0) / t)
    assert caps_below.sum() < 10**12


@pytest.mark.parametrize(("times", "total", "needle"), [
    ([1.0, float("nan")], 4, "time 2 (group 1) is nan"),
    ([1.0, 0.0], 4, "time 2 (group 1) is 0.0"),
    ([-1.0], 4, "time 1 (group 0) is -1.0"),
    ([1.0, float("inf")], 4, "is inf"),
    ([1.0, 2.0, 3.0], 2, "cannot give each of the 3 DP groups"),
    ([], 2, "no micro-batch times"),
    ([1.0], 2**51, "exceeds"),
])
def test_bad_input(times, total, needle) -> None:
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        solve_microbatches(times, total)


def test_group_limit(monkeypatch) -> None:
    monkeypatch.setenv("STRAGGLERS_MAX_MITIGATE_GROUPS", "4")
    with pytest.raises(LimitError, match="5 DP groups of a micro-batch assignment"):
        solve_microbatches([1.0] * 5, 10)


@settings(max_examples=200, deadline=None)
@given(times=st.lists(st.floats(1e-9, 86_400.0), min_size=1, max_size=40),
       extra=st.integers(0, 10**6))
def test_optimal_on_wide_ranges(times: list[float], extra: int) -> None:
    """Times spanning 14 orders of magnitude: the assignment is valid, reaches its makespan,
    and no smaller makespan fits M (the count below the makespan is short of M)."""
    total = len(times) + extra
    t = np.asarray(times)
    res = solve_microbatches(t, total)
    m = res.assignment
    assert m.sum() == total and m.min() >= 1 and (m * t).max() == res.makespan
    below = np.nextafter(res.makespan, 0)
    caps = np.floor(below / t)
    caps += (caps + 1) * t <= below  # exact float comparisons, as the solver's
    caps -= caps * t > below
    assert res.makespan == t.max() or caps.sum() < total


def test_implausible_times() -> None:
    with pytest.raises(InputError, match=r"expected a time in \[1e-09, 86400\]"):
        solve_microbatches([1.0, 1e-12], 4)
    with pytest.raises(InputError, match="STRAGGLERS_MAX_OP_SECONDS"):
        solve_microbatches([1e6, 1.0], 4)
