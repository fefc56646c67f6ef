"""Issue 29, fourteenth round: a rise made of long iterations at a regular period (metrics
read back every few steps, each such step 2x) makes the period appear with the rise.  The
view on whole periods starts on the gaps that made the period, all of them slowed (no
healthy level before them), and the view on the mean, which pauses while a period is known,
used to lose the sum it had gathered: the rise was never declared.  A sum (or an episode)
of the view on the mean that is open when the period is found now goes on.  Every answer is
known by construction: healthy before ``a``, the rise over ``[a, b)``; the control is the
healthy series alone (evaluations every 100 iterations)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.detect.test_robust_issue29 import _alerts, _healthy, _run


def _with_evals(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """2 % noise and an evaluation every 100 iterations (that iteration 2-4x)."""
    it, x = _healthy(seed, n, 0.02)
    rng = np.random.default_rng(seed + 900)
    x[99::100] *= np.exp(rng.uniform(math.log(2.0), math.log(4.0), x[99::100].size))
    return it, x


@pytest.mark.parametrize("seed", [0, 3, 5])
def test_a_period_that_comes_with_the_rise_is_declared_by_the_mean(seed: int) -> None:
    # every 8th iteration 2.2x over [1500, 2200) (+15 % of the mean): one onset inside the
    # span, within 100 iterations (before: none; the period locked after 16 of them and the
    # view on the mean, paused, lost its sum)
    a, b = 1500, 2200
    it, x = _with_evals(seed, 3000)
    x[a:b:8] *= 2.2
    alerts = _alerts(_run(it, x))
    assert len(alerts) == 1 and a + 1 - 5 <= alerts[0]["job_iteration"] < b, alerts
    assert alerts[0]["declared_job_iteration"] - (a + 1) <= 100, alerts


@pytest.mark.parametrize("seed", [1, 2])
def test_the_healthy_series_alone_raise_no_onset(seed: int) -> None:
    assert _alerts(_run(*_with_evals(seed, 3000))) == []
