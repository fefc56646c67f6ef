"""Issue 29, fifth round: the declaration delay of gradual rises (the cumulative-sum view).

A ramp slow enough that the healthy level follows it never opens a stretch that holds a
level; the cumulative sum of its excess over the lowest healthy level of the latest
``rise_iters`` iterations (held while the sum is positive) still adds up, and the rise is
an onset once its points hold a level ``threshold`` above that anchor.  Every answer is
known by construction: the noise-free level is given, so is the point where it reaches the
threshold."""

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


def _thermal(iters: int, rise: float) -> np.ndarray:
    t = np.arange(N - AT, dtype=float)
    return rise * (1.0 - np.exp(-3.0 * t / iters))


def _linear(iters: int, rise: float) -> np.ndarray:
    return rise * np.minimum((np.arange(N - AT) + 1.0) / iters, 1.0)


#: (level, noise): a thermal ramp, +20 % as 1 - exp(-3 t / 150), in 2 % noise (the level
#: reaches +10 % at point 35 of the ramp); a linear ramp to +25 % over 100 points in 1 %
#: noise (point 39)
RAMPS = {"thermal": (_thermal(150, 0.20), 0.02), "linear": (_linear(100, 0.25), 0.01)}
LATE = 22  # points after the level reached the threshold


@pytest.mark.parametrize("shape", sorted(RAMPS))
@pytest.mark.parametrize("seed", range(6))
def test_a_gradual_ramp_is_declared_soon_after_it_reaches_the_threshold(shape, seed) -> None:
    """Declared at most ``LATE`` points after the noise-free level reached +10 %, with the
    onset inside the ramp (now 0-21 points after it on the thermal ramp, 8-17 on the linear
    one).  Before: 0-64 and 12-111 (4 and 5 of the 6 seeds later than ``LATE``): the healthy
    level followed the ramp, and the slope view waited for it to rise a whole threshold in
    noise that the ramp had inflated."""
    level, noise = RAMPS[shape]
    cross = AT + int(np.argmax(level >= 0.10))  # index where the level reaches +10 %
    iters, x = _rise(seed, level, noise)
    alerts = _alerts(_run(iters, x))
    assert len(alerts) == 1 and alerts[0]["event"] == "onset"
    assert AT + 1 - 5 <= alerts[0]["job_iteration"] <= AT + 1 + 150
    assert alerts[0]["declared_job_iteration"] <= iters[cross] + LATE


@pytest.mark.parametrize("seed", range(4))
def test_a_slow_healthy_drift_is_never_an_onset(seed) -> None:
    """+5 % over 1,000 iterations (a schedule): no alert."""
    level = np.full(N - AT, 0.05)
    level[:700] = 0.05 * np.arange(700) / 1000.0
    iters, x = _rise(seed, level)
    assert _alerts(_run(iters, x)) == []


@pytest.mark.parametrize("seed", range(4))
def test_a_ramp_below_the_threshold_is_never_an_onset(seed) -> None:
    """A ramp to +8 % over 60 iterations that holds: the excess adds up in the sum, but its
    level is no slowdown of ``threshold``."""
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
