"""A configuration that comes back slower at a stop and resume and stays so (issue 29,
nineteenth round): the segment after a resume across which the iteration count goes on is
judged as it comes, against the level before the resume, once its own points show a level
that has stopped falling (a warm-up after a resume decays; a slower configuration does
not).  Answers known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.detect.watch import Watcher
from stragglers.evaluation.bocd import make_detector
from stragglers.logs.records import IterationRecord

ALERTS = ("onset", "change", "flapping")


def _events(levels: tuple[float, ...], lengths: tuple[int, ...], seed: int, *,
            down: float = 80.0, replay: int = 0, warm: float = 0.3,
            tau: float = 10.0) -> list[dict]:
    """Segments of 1 s iterations (2 % noise) at ``levels`` x 1 s, ``lengths`` iterations
    each; between two segments the job stops for ``down`` seconds and comes back with a
    warm-up (+``warm`` decaying with time constant ``tau`` iterations), its iteration
    numbers going on (``replay`` > 0: going back that many, a restart from a checkpoint)."""
    rng = np.random.default_rng(seed)
    parts, gaps, steps = [], [], []
    for j, (lv, n) in enumerate(zip(levels, lengths, strict=True)):
        x = lv * np.exp(0.02 * rng.standard_normal(n))
        if j:
            x *= 1.0 + warm * np.exp(-np.arange(n) / tau)
        parts.append(x)
        gaps.append(np.r_[down if j else 0.0, np.zeros(n - 1)])
        steps.append(np.r_[1 - replay if j else 1, np.ones(n - 1, dtype=int)])
    x, gap = np.concatenate(parts), np.concatenate(gaps)
    ts = np.cumsum(x + gap)
    it = np.cumsum(np.concatenate(steps))
    w = Watcher(detector_factory=lambda: make_detector("robust"))
    items = [(i + 1, IterationRecord(rank=0, iter=int(k), duration=float(d), ts=float(t)))
             for i, (k, d, t) in enumerate(zip(it, x, ts, strict=True))]
    return [e.to_dict() for e in w.process_items(items) + w.finish()]


@pytest.mark.parametrize(("seed", "down", "reason", "level"), [
    (0, 80.0, "idle", 1.25), (1, 80.0, "idle", 1.15),
    (2, 300.0, "clock_step", 1.3),  # a downtime of more than 100 iterations: a timestamp jump
])
def test_a_resume_into_a_slower_level_is_declared_as_it_comes(seed: int, down: float,
                                                              reason: str, level: float
                                                              ) -> None:
    # healthy 1 s for 400 iterations, a stop and resume into a slower level that holds to the
    # end (no later resume: the rule between two resumes never judges it)
    ev = _events((1.0, level), (400, 400), seed, down=down)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == [reason]
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert len(onsets) == 1 and onsets[0]["job_iteration"] == 401
    assert onsets[0]["note"] == "resumed_slower"
    assert onsets[0]["level_s"] == pytest.approx(level, rel=0.04)
    assert onsets[0]["declared_job_iteration"] <= 401 + 60


@pytest.mark.parametrize(("seed", "level", "warm", "tau"), [
    (3, 1.04, 0.3, 10.0),  # a resume into a level within the threshold
    (4, 1.02, 0.35, 25.0),  # a warm-up that decays slowly: +10 % still 30 points in
    (5, 0.9, 0.3, 10.0),  # faster after the resume
])
def test_a_resume_into_a_healthy_level_or_a_slow_warm_up_is_no_onset(
        seed: int, level: float, warm: float, tau: float) -> None:
    ev = _events((1.0, level), (400, 400), seed, warm=warm, tau=tau)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["idle"]
    assert [e for e in ev if e["event"] in ALERTS] == []


def test_a_restart_from_a_checkpoint_into_a_slower_level_is_a_new_healthy_one() -> None:
    # the count goes back 50 iterations: another allocation may come back at another scale
    ev = _events((1.0, 1.25), (400, 400), 6, replay=50)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["restart"]
    assert [e for e in ev if e["event"] in ALERTS] == []
