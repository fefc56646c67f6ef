"""A resume whose warm-up decays slowly is no slower configuration (issue 29, twenty-fifth
round): the segment after a stop and resume is declared slower as it comes only where the
trend of its points, carried over the next 2 x RISE_POINTS points, leaves its level the
threshold above the level before the resume.  Answers known by construction: the healthy
level after the resume and the warm-up's shape are the series' own."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.detect.watch import RISE_UNTIL, Watcher, _trend
from stragglers.evaluation.bocd import make_detector
from stragglers.logs.records import IterationRecord

ALERTS = ("onset", "change", "flapping")


def _events(level: float, seed: int, *, warm: float, tau: float, noise: float) -> list[dict]:
    """400 iterations of 1 s (``noise`` log-normal), a stop of 80 s and 400 more at
    ``level`` x 1 s, the resume's warm-up ``1 + warm x exp(-t / tau)`` on them, the iteration
    numbers going on (a stop and resume of the same run)."""
    rng = np.random.default_rng(seed)
    x = np.exp(noise * rng.standard_normal(800))
    x[400:] *= level * (1.0 + warm * np.exp(-np.arange(400) / tau))
    ts = np.cumsum(x + np.r_[np.zeros(400), 80.0, np.zeros(399)])
    w = Watcher(detector_factory=lambda: make_detector("robust"))
    items = [(i + 1, IterationRecord(rank=0, iter=i + 1, duration=float(d), ts=float(t)))
             for i, (d, t) in enumerate(zip(x, ts, strict=True))]
    return [e.to_dict() for e in w.process_items(items) + w.finish()]


def test_trend_is_the_median_slope_and_ignores_a_few_stalls() -> None:
    t = np.arange(40, dtype=float)
    y = 0.5 - 0.01 * t
    assert _trend(y) == pytest.approx(-0.01)
    y[[5, 17, 33]] += 1.0  # three checkpoint stalls
    assert _trend(y) == pytest.approx(-0.01)
    assert _trend(np.full(30, 0.2)) == 0.0


@pytest.mark.parametrize("seed", range(20))
def test_a_warm_up_that_decays_slowly_into_a_healthy_level_is_no_onset(seed: int) -> None:
    # +3 % after the resume (within the threshold), the warm-up +35 % decaying with a time
    # constant of 35 iterations: still +10 % some 40 points in, in 3 % noise.  Before this
    # round the two medians of 16 passed on noise in 6 of these 20 seeds (an onset
    # `resumed_slower` at 401, declared 58-69 points in).
    ev = _events(1.03, seed, warm=0.35, tau=35.0, noise=0.03)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["idle"]
    assert [e for e in ev if e["event"] in ALERTS] == []


@pytest.mark.parametrize("seed", range(5))
def test_a_slower_level_behind_a_slow_warm_up_is_still_declared_as_it_comes(seed: int) -> None:
    # +25 % after the resume, under a warm-up of +40 % with a time constant of 30: the trend
    # of the segment's points flattens once the warm-up is a minority of them
    ev = _events(1.25, seed, warm=0.4, tau=30.0, noise=0.02)
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert len(onsets) == 1 and onsets[0]["note"] == "resumed_slower"
    assert onsets[0]["job_iteration"] == 401
    assert onsets[0]["declared_job_iteration"] <= 400 + RISE_UNTIL
