"""Issue 29, thirteenth round: a rise of the chance of intermittent long iterations is
declared by their count at the threshold of a false onset once in ``LOSS_ARL`` healthy
points, from the exact exponent of rare run starts (not the Gaussian sum's, which is too
lenient for them, nor 15 long-run variances, which waits).  Every answer is known by
construction: the chance of a stall is healthy before ``a`` and higher from ``a`` on, or
the same everywhere (or in healthy bursts) in the series without a rise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stragglers.detect.robust import _count_exponent
from tests.detect.test_robust_issue29 import _alerts, _healthy, _run


def _stalls(seed: int, p: np.ndarray, salt: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """2 % noise, a stall with chance ``p`` (one value per iteration), each 1.5-20x the
    healthy time (log-uniform: a retransmission or a timeout doubled at each retry)."""
    it, x = _healthy(seed, p.size, 0.02)
    rng = np.random.default_rng(seed + salt)
    p = p.copy()
    p[0] = 0.0
    hit = rng.random(p.size) < p
    size = np.exp(rng.uniform(math.log(1.5), math.log(20.0), p.size))
    x[hit] *= size[hit]
    return it, x


@pytest.mark.parametrize("seed", [0, 2, 7])
def test_a_rise_of_the_chance_of_stalls_is_declared_by_their_count(seed: int) -> None:
    # the chance of a stall 1 -> 8 % for 600 iterations (+~40 % of the mean): one onset
    # inside the span, declared within 85 iterations (with 15 long-run variances: 92-137)
    a, b = 2000, 2600
    p = np.full(3200, 0.01)
    p[a:b] = 0.08
    alerts = _alerts(_run(*_stalls(seed, p)))
    assert alerts and all(a + 1 - 5 <= e["job_iteration"] < b for e in alerts), alerts
    assert alerts[0]["declared_job_iteration"] - (a + 1) <= 85, alerts


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_the_same_stalls_at_a_steady_chance_raise_no_onset(seed: int) -> None:
    # 3 % stalls of 1.5-20x everywhere (the marginal of a rise's series): no onset (the
    # Gaussian sum's threshold, half the log of LOSS_ARL, raised one on seed 3)
    alerts = _alerts(_run(*_stalls(seed, np.full(3200, 0.03), 500)))
    assert alerts == [], alerts


@pytest.mark.parametrize("seed", [0, 4, 5])
def test_healthy_bursts_of_stalls_raise_no_onset(seed: int) -> None:
    # the chance 1 % with bursts of 8 % for 60 iterations every 400 (a healthy clump that
    # comes back): no onset (the Gaussian sum's threshold raised one on each seed)
    p = np.full(3200, 0.01)
    for s in range(300, p.size, 400):
        p[s:s + 60] = 0.08
    alerts = _alerts(_run(*_stalls(seed, p, 500)))
    assert alerts == [], alerts


@pytest.mark.parametrize(("p", "m", "k"), [(0.01, 3.0, 0.05), (0.001, 10.0, 0.05),
                                           (0.3, 0.5, 0.05), (0.05, 1.0, 0.02)])
def test_the_count_exponent_zeroes_the_log_moment_and_is_below_the_gaussian(
        p: float, m: float, k: float) -> None:
    # theta > 0 with E[exp(theta step)] = 1 for steps m (I - p) - k, I ~ Bernoulli(p); a
    # right-skewed step has a smaller exponent than the Gaussian 2 k / variance (a higher
    # threshold for the same rate of false onsets)
    t = _count_exponent(p, m, k)
    a, b = m * (1.0 - p) - k, -m * p - k
    assert t > 0.0
    assert abs(p * np.exp(t * a) + (1.0 - p) * np.exp(t * b) - 1.0) < 1e-9
    assert t < 2.0 * k / (m * m * p * (1.0 - p))
    assert _count_exponent(0.01, 0.04, 0.05) == 0.0  # a run worth less than the drift
