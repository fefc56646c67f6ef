"""``bench/bench_truth_crossing.py``: when the noise-free truth of a labelled slowdown reaches
the threshold (the earlier of its 16-step median and its 32-step mean), on hand-built spans
whose crossing is known by construction."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
try:
    from bench_truth_crossing import crossing
finally:
    sys.path.pop(0)


def test_a_step_is_crossed_by_the_median_once_most_of_its_window_is_up() -> None:
    # 50 healthy steps then +30 %: the 16-step median is up once 8 of its 16 are (1.15,
    # step 57); the 32-step mean only once 11 of 32 are (step 60): the earlier counts
    ratio = np.r_[np.ones(50), np.full(50, 1.3)]
    assert crossing(ratio, 0.10) == 57


def test_a_share_of_long_steps_is_crossed_by_the_mean() -> None:
    # every fourth step 1.5x from the start (+12.5 % of the mean, the median healthy): the
    # 32-step mean is up from its first full window (step 31); the median never
    ratio = np.ones(200)
    ratio[::4] = 1.5
    assert crossing(ratio, 0.10) == 31


def test_a_climb_is_crossed_where_its_level_reaches_the_threshold() -> None:
    # a linear climb from 1.0 to 1.3 over 300 steps: the median of 16 ending at step i is
    # the climb at i - 7.5, up once that is 1.1 (step 107.5: 108)
    ratio = np.linspace(1.0, 1.3, 300)
    assert abs(crossing(ratio, 0.10) - 108) <= 1


def test_a_span_that_never_reaches_the_threshold_counts_its_length() -> None:
    assert crossing(np.full(120, 1.05), 0.10) == 120
    assert crossing(np.full(10, 1.5), 0.10) == 10  # shorter than both windows
