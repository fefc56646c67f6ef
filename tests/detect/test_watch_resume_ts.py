"""A stop and resume in records that carry timestamps only (no ``duration``) (issue 29,
twentieth round): wall time between two records that the typical iteration time does not
explain, by more than 60 s and 10 typical iterations but less than a timestamp jump (100),
opens a segment as it does where durations are known; the warm-up after it is not judged
against the level before the stop.  Answers known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.detect.watch import Watcher
from stragglers.evaluation.bocd import make_detector
from stragglers.logs.records import IterationRecord

ALERTS = ("onset", "change", "flapping")


def _events(levels: tuple[float, ...], lengths: tuple[int, ...], seed: int, *,
            down: float, warm: float = 0.35, tau: float = 20.0,
            slow: tuple[int, int, float] | None = None, noise: float = 0.02,
            durations: bool = False) -> tuple[list[dict], dict]:
    """Segments of 1 s iterations (2 % noise) at ``levels`` x 1 s, ``lengths`` iterations
    each, written as timestamps only; between two segments the job stops for ``down``
    seconds and comes back with a warm-up (+``warm`` decaying with time constant ``tau``
    iterations), its iteration numbers going on.  ``slow``: iterations ``[a, b)`` (0-based)
    ``x`` times slower.  ``noise``: the log-normal noise; ``durations``: the records carry
    their durations too."""
    rng = np.random.default_rng(seed)
    parts, gaps = [], []
    for j, (lv, n) in enumerate(zip(levels, lengths, strict=True)):
        x = lv * np.exp(noise * rng.standard_normal(n))
        if j:
            x *= 1.0 + warm * np.exp(-np.arange(n) / tau)
        parts.append(x)
        gaps.append(np.r_[down if j else 0.0, np.zeros(n - 1)])
    x, gap = np.concatenate(parts), np.concatenate(gaps)
    if slow is not None:
        a, b, f = slow
        x[a:b] *= f
    ts = np.cumsum(x + gap)
    w = Watcher(detector_factory=lambda: make_detector("robust"))
    items = [(i + 1, IterationRecord(rank=0, iter=i + 1, ts=float(t),
                                     duration=float(d) if durations else None))
             for i, (t, d) in enumerate(zip(ts, x, strict=True))]
    ev = [e.to_dict() for e in w.process_items(items) + w.finish()]
    return ev, w.summary().to_dict()


@pytest.mark.parametrize(("seed", "down"), [(0, 80.0), (1, 65.0)])
def test_a_stop_and_resume_told_by_timestamps_alone_makes_a_segment(seed: int,
                                                                   down: float) -> None:
    # 80 / 65 s of wall time at 1 s iterations: a stop and resume, not a timestamp jump; the
    # warm-up after it (+35 %, still +10 % 25 iterations in) is no slowdown
    ev, summary = _events((1.0, 1.0), (400, 400), seed, down=down)
    seg = [e for e in ev if e["event"] == "segment"]
    assert [e["reason"] for e in seg] == ["idle"] and seg[0]["job_iteration"] == 401
    assert [e for e in ev if e["event"] in ALERTS] == []
    assert summary["job_iterations"] == {"0": 800}  # the count goes on across the resume


def test_a_resume_into_a_slower_level_told_by_timestamps_alone_is_declared() -> None:
    # the same stop and resume into 1.25x that holds: judged against the level before it
    ev, _ = _events((1.0, 1.25), (400, 400), 2, down=80.0, warm=0.3, tau=10.0)
    onsets = [e for e in ev if e["event"] in ALERTS]
    # (at the first iteration whose time is known: the one after the stop has none)
    assert len(onsets) == 1 and onsets[0]["job_iteration"] in (401, 402)
    assert onsets[0]["note"] == "resumed_slower"
    assert onsets[0]["declared_job_iteration"] <= 401 + 60


def test_a_short_stall_is_no_resume_and_a_slowdown_is_declared_as_before() -> None:
    # a stall of 30 s (under a minute) inside a segment and a slowdown of 1.3x at 600-800:
    # no segment, one onset at 600 declared 8-9 iterations later, as without the rule
    ev, _ = _events((1.0, 1.0), (400, 400), 3, down=30.0, warm=0.0, slow=(599, 800, 1.3))
    assert [e for e in ev if e["event"] == "segment"] == []
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert len(onsets) == 1 and abs(onsets[0]["job_iteration"] - 600) <= 2
    assert onsets[0]["declared_job_iteration"] - 600 <= 10


def test_a_long_stall_with_no_warm_up_after_it_is_no_resume() -> None:
    # 80 s of wall time followed at once by iterations at the level before (a stall of the
    # running job, e.g. a retransmission timeout): an iteration time as any other, no segment
    # (a segment would restart every view: stalls that recur would never be judged)
    ev, summary = _events((1.0, 1.0), (400, 400), 4, down=80.0, warm=0.0)
    assert [e for e in ev if e["event"] == "segment"] == []
    assert [e for e in ev if e["event"] in ALERTS] == []
    assert summary["spikes"]["spikes"] == 1  # the stall taken as an iteration time (a spike)


@pytest.mark.parametrize(("seed", "durations"), [(5, True), (6, False)])
def test_a_resume_into_a_slower_level_in_wide_noise_is_declared(seed: int,
                                                                 durations: bool) -> None:
    # healthy iteration times spread 20 % (log-normal): a quarter of the healthy points lie
    # beyond the midpoint between 1.0 and 1.3, so the height alone does not say "held
    # before"; the segment's points reach it far more often than that share (Chernoff)
    ev, _ = _events((1.0, 1.3), (400, 400), seed, down=80.0, warm=0.3, tau=10.0,
                    noise=0.2, durations=durations)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["idle"]
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert len(onsets) == 1 and onsets[0]["job_iteration"] in (401, 402)
    assert onsets[0]["note"] == "resumed_slower"
    assert onsets[0]["declared_job_iteration"] <= 401 + 100


def test_a_resume_into_the_same_level_in_wide_noise_is_no_onset() -> None:
    ev, _ = _events((1.0, 1.03), (400, 400), 7, down=80.0, warm=0.3, tau=10.0,
                    noise=0.2, durations=True)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["idle"]
    assert [e for e in ev if e["event"] in ALERTS] == []
