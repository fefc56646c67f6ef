"""Issue 29, seventeenth round: the slope view's memory of the levels the healthy level has
held.  Healthy iteration times that come in modes drawn at random each iteration (batches of
a few shapes, a fast and a slow path) move the healthy level, a median of 32 points, from one
mode to the other whenever the slower one holds most of the latest points; a return to a
level it held before, for as long, is no rise.  Every answer is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from tests.detect.test_robust_issue29 import _alerts, _run


def _mixture(seed: int, share: float, slow: float, n: int = 1500) -> np.ndarray:
    """0.5 s per iteration, ``slow`` times that with chance ``share`` at each iteration
    (independently), 1 % log-normal noise, a first iteration 5x slower."""
    rng = np.random.default_rng(seed)
    level = np.where(rng.random(n) < share, slow, 1.0)
    x = 0.5 * level * np.exp(rng.normal(0.0, 0.01, n))
    x[0] *= 5.0
    return x


#: (seed, share of the slower mode, its height): before this round each raised 1-2 onsets
#: of the slope view (and changes after them) on these healthy series
MIXTURES = [(9, 0.55, 1.25), (5, 0.65, 1.2), (5, 0.7, 1.2)]


@pytest.mark.parametrize(("seed", "share", "slow"), MIXTURES)
def test_a_mixture_of_modes_is_no_rise(seed, share, slow) -> None:
    x = _mixture(seed, share, slow)
    assert _alerts(_run(np.arange(1, x.size + 1), x)) == []


@pytest.mark.parametrize(("seed", "share", "slow"), MIXTURES)
def test_the_mixture_slowed_as_a_whole_is_declared(seed, share, slow) -> None:
    """Every iteration 1.3x slower from iteration 1,001: the first alert is an onset there,
    soon declared (the mixture's own swings may be changes of the episode after it)."""
    x = _mixture(seed, share, slow)
    x[1000:] *= 1.3
    alerts = _alerts(_run(np.arange(1, x.size + 1), x))
    assert alerts and alerts[0]["event"] == "onset"
    assert abs(alerts[0]["iteration"] - 1001) <= 3
    assert alerts[0]["declared_iteration"] - 1001 <= 40
    assert all(a["event"] == "change" for a in alerts[1:])


@pytest.mark.parametrize("seed", range(2))
def test_a_ramp_to_a_level_never_held_is_declared(seed) -> None:
    """A single-mode series that climbs +25 % over 150 iterations (too slow for a stretch to
    hold a level within the ramp) is still an onset of the slope view: the level is new."""
    rng = np.random.default_rng(seed)
    level = np.concatenate([np.ones(800), np.linspace(1.0, 1.25, 150), np.full(400, 1.25)])
    x = 0.5 * level * np.exp(rng.normal(0.0, 0.01, level.size))
    x[0] *= 5.0
    alerts = _alerts(_run(np.arange(1, x.size + 1), x))
    assert len(alerts) == 1 and alerts[0]["event"] == "onset"
    assert 780 <= alerts[0]["iteration"] <= 900
