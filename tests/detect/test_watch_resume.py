"""A stop and resume whose first iteration is long itself (a warm-up, compiling: issue 29,
fifteenth round): the wall time the iterations do not explain is weighed against the rank's
typical iteration time, so the resume is a new segment and its warm-up is not judged against
the old level.  (Since the nineteenth round a level that comes back 10 % slower after such a
resume is declared as it comes: ``test_watch_resume_rise.py``; here it comes back within the
threshold.)  Answers known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.detect.watch import Watcher
from stragglers.evaluation.bocd import make_detector
from stragglers.logs.records import IterationRecord

ALERTS = ("onset", "change", "flapping")


def _events(x: np.ndarray, ts: np.ndarray) -> list[dict]:
    w = Watcher(detector_factory=lambda: make_detector("robust"))
    items = [(i + 1, IterationRecord(rank=0, iter=i + 1, duration=float(d), ts=float(t)))
             for i, (d, t) in enumerate(zip(x, ts, strict=True))]
    return [e.to_dict() for e in w.process_items(items) + w.finish()]


def _series(seed: int, first: float, down: float, after: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """3,000 iterations of 1 s (1 % noise); at iteration 1,501 the job resumes after ``down``
    seconds with a first iteration of ``first`` s, a warm-up of +30 % decaying over 30
    iterations, and a healthy level ``after`` times the old one."""
    rng = np.random.default_rng(seed)
    x = np.exp(0.01 * rng.standard_normal(3000))
    x[1500:] *= after
    x[1501:1600] *= 1.0 + 0.3 * np.exp(-np.arange(99) / 30.0)
    x[1500] = first
    ts = np.cumsum(x)
    ts[1500:] += down
    return x, ts


@pytest.mark.parametrize("seed", [0, 1])
def test_a_resume_with_a_long_first_iteration_is_a_new_segment(seed: int) -> None:
    # 75 s unexplained, but less than 10 x the 8 s first iteration: no segment before, and
    # the warm-up judged against the old level (onsets at 1501 and 1520-1522 without it)
    ev = _events(*_series(seed, first=8.0, down=75.0, after=1.04))
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["idle"]
    assert [e for e in ev if e["event"] in ALERTS] == []


def test_a_long_iteration_the_wall_time_explains_is_no_segment() -> None:
    # the same long first iteration without downtime (and 40 s unexplained: below IDLE_S),
    # then a real slowdown of +15 %: one onset, no segment
    x, ts = _series(3, first=8.0, down=40.0, after=1.15)
    ev = _events(x, ts)
    assert [e for e in ev if e["event"] == "segment"] == []
    onsets = [e for e in ev if e["event"] == "onset"]
    assert len(onsets) == 1 and 1495 <= onsets[0]["job_iteration"] <= 1620
