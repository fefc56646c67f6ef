"""Issue 29, eighth round: the view on whole periods.  A series whose long iterations come at
a regular period (gradient accumulation logged per micro-batch: only the micro-batch that
closes an optimizer step runs the all-reduce and the optimizer step) can slow down in its
long iterations only: the mean time per iteration rises while most iterations, and every
median of them, stay healthy.  The detector folds such a series into the mean time of whole
periods and judges those too.  Every answer is known by construction: the series below are
hand-built with no slowdown, or one of known size and span."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.detect.robust import RobustLevelDetector
from tests.detect.test_robust_issue29 import _alerts, _run


def _periodic(seed: int, n: int, k: int, boundary: float, jitter: float = 0.01
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` micro-batches of 0.2 s (log-normal jitter); every ``k``-th one closes a step and
    takes ``boundary`` times longer (its own jitter of 5 %); the first 5x slower.  Returns
    the iterations, the times and the boundary mask."""
    rng = np.random.default_rng(seed)
    x = 0.2 * np.exp(rng.normal(0.0, jitter, n))
    bnd = (np.arange(n) + 1) % k == 0
    x[bnd] *= boundary * np.exp(rng.normal(0.0, 0.05, int(bnd.sum())))
    x[0] *= 5.0
    return np.arange(1, n + 1), x, bnd


@pytest.mark.parametrize(("k", "boundary", "seed"), [
    (2, 2.0, 0), (4, 2.5, 1), (8, 3.0, 2), (16, 4.0, 3), (3, 1.6, 4)])
def test_a_slowdown_of_the_long_iterations_only_is_found(k: int, boundary: float,
                                                          seed: int) -> None:
    # from iteration 1,201 (a cycle's start) to 1,200 + 50 k, every boundary slower so that
    # the mean time rises 25 %: the median and every point between boundaries stay healthy.
    # One onset inside the span, declared within 6 periods (at least 48 iterations) of its
    # start (before the change: none)
    it, x, bnd = _periodic(seed, 3000, k, boundary)
    a, b = 1200, 1200 + 50 * k
    cycle = 0.2 * (k - 1 + boundary)
    x[a:b][bnd[a:b]] += 0.25 * cycle
    alerts = _alerts(_run(it, x))
    assert len(alerts) == 1, alerts
    assert a - 5 <= alerts[0]["job_iteration"] < b
    assert alerts[0]["declared_job_iteration"] - (a + 1) <= max(48, 6 * k)


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_isolated_long_boundaries_and_stalls_are_no_onset(k: int) -> None:
    # a healthy periodic series with transient congestion (one boundary 3x slower, one in
    # 20), validation passes (one boundary + 6 micro-batch times every 50 steps) and a
    # checkpoint stall (6 iterations 5x slower: shorter than `stall_iters`) every 700: no onset
    it, x, bnd = _periodic(k, 4000, k, 2.0)
    rng = np.random.default_rng(k)
    b = np.flatnonzero(bnd)
    x[b[rng.random(b.size) < 0.05]] *= 3.0
    x[b[49::50]] += 6 * 0.2
    for s in range(500, 4000, 700):
        x[s:s + 6] *= 5.0
    assert _alerts(_run(it, x)) == []


@pytest.mark.parametrize("seed", range(3))
def test_a_new_period_after_a_restart_is_no_onset(seed: int) -> None:
    # 1,500 micro-batches of k = 4, then the job resumes (the iteration number goes back)
    # with k = 8 and boundaries that make the mean time 15 % higher: a new segment, no onset
    it1, x1, _ = _periodic(seed, 1500, 4, 2.0)
    _, x2, _ = _periodic(seed + 10, 1500, 8, 2.97)
    it = np.concatenate([it1, it1[:1500] + 1000])
    assert _alerts(_run(it, np.concatenate([x1, x2]))) == []


def _slower_compute(seed: int, k: int) -> tuple[list[dict], list[dict]]:
    """Every micro-batch of a period-``k`` series +30 % at iterations 1,201-1,600: the
    alerts and the recoveries."""
    it, x, _ = _periodic(seed, 3000, k, 2.0)
    x[1200:1600] *= 1.3
    events = _run(it, x)
    return _alerts(events), [e for e in events if e["event"] == "recovery"]


def test_a_slower_compute_is_one_episode_with_one_recovery() -> None:
    # every micro-batch +30 % for 400 iterations (both views see it): one onset, one recovery
    # (as before the change: the folded view's episode is part of the main view's)
    alerts, rec = _slower_compute(5, 8)
    assert len(alerts) == 1 and 1195 <= alerts[0]["job_iteration"] <= 1210
    assert len(rec) == 1 and 1590 <= rec[0]["job_iteration"] <= 1620


def test_only_a_regular_period_is_folded() -> None:
    # long iterations at random (one in 6 on average, 2-4x): no period, nothing folded;
    # every 6th: a period of 6, blocks of 12 points
    rng = np.random.default_rng(0)
    x = 0.2 * np.exp(rng.normal(0.0, 0.01, 2000))
    x[rng.random(2000) < 1 / 6] *= 3.0
    det = RobustLevelDetector()
    for v in x:
        det.update(float(v))
    assert det._fold is not None and det._fold.period == 0
    x = 0.2 * np.exp(rng.normal(0.0, 0.01, 2000))
    x[5::6] *= 3.0
    det = RobustLevelDetector()
    for v in x:
        det.update(float(v))
    assert det._fold is not None and (det._fold.period, det._fold.size) == (6, 12)


@pytest.mark.parametrize(("k", "seed"), [(2, 1), (3, 2), (4, 3)])
def test_a_slower_compute_recovers_where_long_iterations_are_frequent(k: int,
                                                                     seed: int) -> None:
    # with a long iteration every 2-4 points, fewer than persist_fraction of the points
    # return to the healthy level after a slowdown of every micro-batch: the main view never
    # said the recovery (before the change: none, to the series' end); the folded view's
    # recovery ends the episode, within 6 blocks of its end
    alerts, rec = _slower_compute(seed, k)
    assert len(alerts) == 1 and 1195 <= alerts[0]["job_iteration"] <= 1210
    assert len(rec) == 1 and 1590 <= rec[0]["declared_job_iteration"] <= 1650
