"""A run resumed faster that comes back to the level it kept before the stop (issue 29,
twenty-second round): after a stop and resume across which the iteration count goes on, a
rise within the segment's first 200 points to the level before the resume is the healthy
level found again (a cache emptied by the stop, a device cooled), not a slowdown; a rise
beyond it, or back to a level that was itself slow, still is.  Answers known by
construction."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.detect.watch import Watcher
from stragglers.evaluation.bocd import make_detector
from stragglers.logs.records import IterationRecord

ALERTS = ("onset", "change", "flapping")


def _events(before: float, fast: float, after: float, seed: int, *, fast_n: int = 60,
            n_before: int = 400, n_after: int = 500) -> list[dict]:
    """1 s x ``before`` iterations (2 % noise) for ``n_before`` iterations; a stop of 120 s;
    the job resumes (iteration numbers going on, a warm-up of +30 % decaying over 5
    iterations) at ``fast`` x 1 s for ``fast_n`` iterations and then holds ``after`` x 1 s
    for ``n_after``.  Records carry timestamps and durations."""
    rng = np.random.default_rng(seed)
    x0 = before * np.exp(0.02 * rng.standard_normal(n_before))
    lv = np.r_[np.full(fast_n, fast), np.full(n_after, after)]
    x1 = lv * np.exp(0.02 * rng.standard_normal(lv.size))
    x1 *= 1.0 + 0.3 * np.exp(-np.arange(lv.size) / 5.0)
    x = np.r_[x0, x1]
    gap = np.zeros(x.size)
    gap[n_before] = 120.0
    ts = np.cumsum(x + gap)
    w = Watcher(detector_factory=lambda: make_detector("robust"))
    items = [(i + 1, IterationRecord(rank=0, iter=i + 1, ts=float(t), duration=float(d)))
             for i, (t, d) in enumerate(zip(ts, x, strict=True))]
    return [e.to_dict() for e in w.process_items(items) + w.finish()]


@pytest.mark.parametrize(("seed", "after"), [(0, 1.0), (1, 1.02), (2, 0.98)])
def test_a_resume_faster_that_returns_to_the_level_before_is_no_slowdown(
        seed: int, after: float) -> None:
    # 1.0 s, a stop, 0.8 s for 60 iterations (+25 % when it returns: an onset before),
    # then back at the level before the stop (within 2 %)
    ev = _events(1.0, 0.8, after, seed)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["idle"]
    assert [e for e in ev if e["event"] in ALERTS] == []
    back = [e for e in ev if e["event"] == "drift" and e["note"] == "returned"]
    assert len(back) == 1 and abs(back[0]["job_iteration"] - 461) <= 3


@pytest.mark.parametrize("seed", [3, 4])
def test_a_resume_faster_that_rises_beyond_the_level_before_is_a_slowdown(seed: int) -> None:
    # the same, but the rise goes to 1.2x the level before the stop: an onset, as before
    ev = _events(1.0, 0.8, 1.2, seed)
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert len(onsets) == 1 and abs(onsets[0]["job_iteration"] - 461) <= 3
    assert [e for e in ev if e.get("note") == "returned"] == []


def test_a_return_to_a_level_that_was_slow_before_the_stop_is_a_slowdown() -> None:
    # 1.0 s for 300 iterations, then 1.3 s (declared) up to the stop; resumed at 0.8 s and
    # back to 1.3 s: the level before the stop was a slow episode, not the healthy level
    rng = np.random.default_rng(5)
    x0 = np.r_[np.full(300, 1.0), np.full(200, 1.3)] * np.exp(0.02 * rng.standard_normal(500))
    lv = np.r_[np.full(60, 0.8), np.full(400, 1.3)]
    x1 = lv * np.exp(0.02 * rng.standard_normal(lv.size)) * (
        1.0 + 0.3 * np.exp(-np.arange(lv.size) / 5.0))
    x = np.r_[x0, x1]
    gap = np.zeros(x.size)
    gap[500] = 120.0
    ts = np.cumsum(x + gap)
    w = Watcher(detector_factory=lambda: make_detector("robust"))
    items = [(i + 1, IterationRecord(rank=0, iter=i + 1, ts=float(t), duration=float(d)))
             for i, (t, d) in enumerate(zip(ts, x, strict=True))]
    ev = [e.to_dict() for e in w.process_items(items) + w.finish()]
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert len(onsets) == 2
    assert all(abs(e["job_iteration"] - j) <= 3 for e, j in zip(onsets, (301, 561), strict=True))
    assert [e for e in ev if e.get("note") == "returned"] == []


def _segments(parts: list[np.ndarray], seed: int) -> list[dict]:
    """Segments of 1 s x ``parts`` iterations (2 % noise), a stop of 120 s between two, each
    resumed with a warm-up of +30 % decaying over 5 iterations (the count going on)."""
    rng = np.random.default_rng(seed)
    xs, gaps = [], []
    for j, lv in enumerate(parts):
        x = lv * np.exp(0.02 * rng.standard_normal(lv.size))
        if j:
            x *= 1.0 + 0.3 * np.exp(-np.arange(lv.size) / 5.0)
        xs.append(x)
        gaps.append(np.r_[120.0 if j else 0.0, np.zeros(lv.size - 1)])
    x, gap = np.concatenate(xs), np.concatenate(gaps)
    ts = np.cumsum(x + gap)
    w = Watcher(detector_factory=lambda: make_detector("robust"))
    items = [(i + 1, IterationRecord(rank=0, iter=i + 1, ts=float(t), duration=float(d)))
             for i, (t, d) in enumerate(zip(ts, x, strict=True))]
    return [e.to_dict() for e in w.process_items(items) + w.finish()]


@pytest.mark.parametrize(("back", "returned"), [(1.0, True), (1.3, False)])
def test_the_level_before_a_slow_segment_is_the_one_returned_to(back: float,
                                                                returned: bool) -> None:
    # 1.0 s (400); a stop; 1.0 s (300) then 1.3 s (200, declared, up to the next stop); a
    # stop; 0.8 s (60) then ``back``: back at 1.0 s is the healthy level of the segment
    # before the slow one (no onset); back at 1.3 s is the slow level (an onset)
    parts = [np.full(400, 1.0), np.r_[np.full(300, 1.0), np.full(200, 1.3)],
             np.r_[np.full(60, 0.8), np.full(400, back)]]
    ev = _segments(parts, 6)
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert abs(onsets[0]["job_iteration"] - 701) <= 3
    later = [e for e in onsets if e["job_iteration"] > 901]
    notes = [e for e in ev if e.get("note") == "returned"]
    if returned:
        assert later == [] and len(notes) == 1 and abs(notes[0]["job_iteration"] - 961) <= 3
    else:
        assert len(later) == 1 and abs(later[0]["job_iteration"] - 961) <= 3 and notes == []
