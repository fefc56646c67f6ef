"""bench/bench_mitigate_live.py's windows: an action right after the onset must not leave an
empty window to predict from (it crashed with "no step in 47-46")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_mitigate_live.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_mitigate_live", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("at", [45, 46, 47, 48])
def test_action_within_three_steps_of_the_onset_gives_no_before_window(at: int) -> None:
    before, after = _bench().windows(onset=45, at=at, recovery=75)
    assert before is None  # the fail-slow run's slow steps are predicted from instead
    assert after == (at + 1, 75)


def test_before_window_when_there_are_slow_steps() -> None:
    before, after = _bench().windows(onset=45, at=54, recovery=75)
    assert before == (47, 54) and after == (55, 75)


def test_optimum_removed() -> None:
    bench = _bench()
    assert bench.optimum_removed(2.0) == ([8, 16], pytest.approx(2 / 3))
    assert bench.optimum_removed(1.5) == ([10, 14], pytest.approx(0.5))


def test_giveback_counts_only_a_return_that_lasts() -> None:
    """Even again 4 steps after the recovery, then off again: not given back (the bench
    counted the first return, 4); even before the recovery and not left: 0."""
    g = _bench().giveback
    even = [12, 12]
    acts = [{"step": 30, "assignment": [9, 15]}, {"step": 49, "assignment": even},
            {"step": 54, "assignment": [7, 17]}]
    assert g(acts, 45, even) is None
    assert g(acts[:2], 45, even) == 4
    assert g([{"step": 30, "assignment": [9, 15]}, {"step": 40, "assignment": even}],
             45, even) == 0
    assert g([], 45, even) is None
