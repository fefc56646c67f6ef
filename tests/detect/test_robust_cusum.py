"""Issue 29, fifth round: what a faster view of gradual rises must not declare.

A cumulative-sum view of the excess over the healthy level (Page's test) was tried for the
declaration delay of ramps and not adopted (``docs/benchmarks/detection.md``, section 9;
branch ``det7-cusum``, with a test that a ramp is declared soon after it reaches the
threshold).  These cases hold for the default detector and for any such view: a slow
healthy drift, a ramp that stays below the threshold and a schedule of small steps are
never an onset.  Every answer is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from tests.detect.test_robust_issue29 import _alerts, _run

AT = 1000  # index where the rise begins (job iteration AT + 1)
N = 1800


def _rise(seed: int, level: np.ndarray, noise: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """0.5 s with log-normal ``noise``, a first iteration 5x slower, and from index ``AT``
    the time ``1 + level[t]``."""
    rng = np.random.default_rng(seed)
    x = 0.5 * np.exp(rng.normal(0.0, noise, N))
    x[0] *= 5.0
    x[AT:] *= 1.0 + level[:N - AT]
    return np.arange(1, N + 1), x


@pytest.mark.parametrize("seed", range(4))
def test_a_slow_healthy_drift_is_never_an_onset(seed) -> None:
    """+5 % over 1,000 iterations (a schedule, from iteration 501 on), then steady: no
    alert."""
    rng = np.random.default_rng(seed)
    x = 0.5 * np.exp(rng.normal(0.0, 0.02, N))
    x[0] *= 5.0
    x *= 1.0 + 0.05 * np.clip((np.arange(N) - 500) / 1000.0, 0.0, 1.0)
    assert _alerts(_run(np.arange(1, N + 1), x)) == []


@pytest.mark.parametrize("seed", range(4))
def test_a_ramp_below_the_threshold_is_never_an_onset(seed) -> None:
    """A ramp to +8 % over 60 iterations that holds: its excess would add up in a sum, but
    its level is no slowdown of ``threshold``."""
    level = np.minimum(np.arange(N - AT) / 60.0, 1.0) * 0.08
    iters, x = _rise(seed, level)
    assert _alerts(_run(iters, x)) == []


@pytest.mark.parametrize("seed", range(4))
def test_a_schedule_of_small_steps_is_a_drift_not_an_onset(seed) -> None:
    """+12 % in 4 steps of 3 % every 150 iterations (a staircase schedule): no onset."""
    steps = np.zeros(N - AT)
    for k in range(4):
        steps[150 * k:] += 0.03
    iters, x = _rise(seed, steps, noise=0.01)
    assert _alerts(_run(iters, x)) == []
