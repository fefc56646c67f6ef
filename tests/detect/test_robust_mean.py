"""Issue 29, tenth round: the view on the mean.  A series without a period can slow down by
sparse long iterations alone (a storm of input-pipeline stalls behind a prefetch queue,
part of the steps waiting for a slower loader): the mean time per iteration rises while
the median, and every level the main view takes, stays healthy, and each long iteration
is a spike.  The detector sums the time the long iterations lose beyond the healthy share
and half the threshold (Page's cumulative sum) and declares an onset when that sum, made
of several runs, holds ``LOSS_ITERS x stall_iters`` iterations.  Every answer is known by
construction: the series below are hand-built with no slowdown, or one of known size and
span."""

from __future__ import annotations

import numpy as np
import pytest

from tests.detect.test_robust_issue29 import _alerts, _healthy, _run


def _storm(seed: int, n: int, a: int, b: int, chance: float, height: float,
           noise: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """A healthy series with a hiccup (3x) one iteration in 200, and from ``a`` to ``b``
    single stalls with ``chance`` per iteration, each ``height`` times the healthy time."""
    it, x = _healthy(seed, n, noise)
    rng = np.random.default_rng(seed + 100)
    x[1:][rng.random(n - 1) < 0.005] *= 3.0
    hit = np.zeros(n, bool)
    hit[a:b] = rng.random(b - a) < chance
    x[hit] *= height
    return it, x


@pytest.mark.parametrize(("seed", "chance", "height", "span"), [
    (0, 0.10, 4.0, 400), (1, 0.15, 3.0, 300), (2, 0.05, 6.0, 600), (3, 0.08, 3.5, 250),
    (4, 0.12, 2.5, 500)])
def test_a_storm_of_sparse_stalls_is_found(seed: int, chance: float, height: float,
                                           span: int) -> None:
    # +15-30 % of the mean over 250-600 iterations made of single stalls, the median step
    # healthy: one onset inside the span (before the change: none, every stall a spike)
    a = 1500
    it, x = _storm(seed, 3000, a, a + span, chance, height)
    alerts = _alerts(_run(it, x))
    assert len(alerts) == 1, alerts
    assert a - 5 <= alerts[0]["job_iteration"] < a + span
    assert alerts[0]["declared_job_iteration"] - a <= 150


def test_the_storm_recovers() -> None:
    # after the storm the mean is back: a recovery within 100 iterations of its end
    it, x = _storm(5, 3000, 1500, 1900, 0.12, 4.0)
    ev = _run(it, x)
    rec = [e for e in ev if e["event"] == "recovery"]
    assert len(_alerts(ev)) == 1 and len(rec) == 1, ev
    assert 1900 <= rec[0]["job_iteration"] <= 2000


@pytest.mark.parametrize("seed", range(3))
def test_steady_stalls_bursts_and_one_long_wait_are_no_onset(seed: int) -> None:
    # hiccups (one in 200, 3x), a checkpoint stall at a steady rate (one iteration 6x every
    # 40), a burst at each checkpoint (3 iterations 4x every 300), a wait of 40 iterations'
    # time at an epoch start (every 1,000) and a GC pause (2x one in 25): no onset
    it, x = _storm(seed, 4000, 0, 0, 0.0, 1.0)
    x[100::40] *= 6.0
    for s in range(250, 4000, 300):
        x[s:s + 3] *= 4.0
    x[999::1000] *= 40.0
    rng = np.random.default_rng(seed + 7)
    x[1:][rng.random(3999) < 0.04] *= 2.0
    assert _alerts(_run(it, x)) == []


@pytest.mark.parametrize("seed", range(2))
def test_skewed_noise_and_a_level_shift_are_the_main_views(seed: int) -> None:
    # right-skewed data-dependent times (log-normal, sigma 0.15) and no slowdown: no onset;
    # a +20 % shift of every iteration from 1,500 to 2,000: one onset, at its start, and one
    # recovery (the view on the mean does not open a second episode)
    rng = np.random.default_rng(seed)
    it = np.arange(1, 3001)
    x = 0.5 * np.exp(rng.gamma(2.0, 0.07, 3000))
    assert _alerts(_run(it, x)) == []
    x[1500:2000] *= 1.2
    ev = _run(it, x)
    al = _alerts(ev)
    assert len(al) == 1 and 1495 <= al[0]["job_iteration"] <= 1520, al
    assert len([e for e in ev if e["event"] == "recovery"]) == 1
