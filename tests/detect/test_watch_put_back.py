"""A configuration that comes back slower at a restart and is put back at the next (issue 29,
sixteenth round): a segment whose level stood above the segments on both sides, which agree,
was a slowdown over the whole segment.  Since the nineteenth round a segment opened by a stop
and resume (the count goes on) is also judged as it comes against the level before the
resume (``test_watch_resume_rise.py``): the slower segment is declared inside it, and its
episode ends at the next resume.  Between restarts from a checkpoint a level is a new healthy
one.  Answers known by construction."""

from __future__ import annotations

import pytest

from tests.detect.test_watch_resume_rise import _events as _resume_events

ALERTS = ("onset", "change", "flapping")


def _events(levels: tuple[float, ...], lengths: tuple[int, ...], seed: int,
            down: float = 80.0, replay: int = 0) -> list[dict]:
    """Segments of 1 s iterations at ``levels``, a stop of ``down`` seconds between two and a
    warm-up (+30 % decaying over 10 iterations) after each (``test_watch_resume_rise``'s
    series)."""
    return _resume_events(levels, lengths, seed, down=down, replay=replay)


@pytest.mark.parametrize(("seed", "down", "reason"), [
    (0, 80.0, "idle"), (1, 80.0, "idle"),
    (5, 300.0, "clock_step"),  # a downtime of more than 100 iterations: a timestamp jump
])
def test_a_segment_above_the_two_around_it_is_a_slowdown(seed: int, down: float,
                                                         reason: str) -> None:
    # healthy 1 s, stop and resume into +25 % for 300 iterations, stop and resume back to 1 s
    ev = _events((1.0, 1.25, 1.0), (400, 300, 300), seed, down)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == [reason, reason]
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert len(onsets) == 1 and onsets[0]["job_iteration"] == 401
    assert onsets[0]["level_s"] == pytest.approx(1.25, rel=0.04)
    # declared as it came (before the nineteenth round: between_segments, 70-190 points into
    # the next segment)
    assert onsets[0]["note"] == "resumed_slower"
    assert onsets[0]["declared_job_iteration"] <= 401 + 60
    rec = [e for e in ev if e["event"] == "recovery"]
    assert [(e["job_iteration"], e["note"]) for e in rec] == [(700, "segment")]


def test_a_slower_level_that_stays_across_resumes_is_declared_at_each() -> None:
    # the same run resumed twice, slower after the first and still slower after the second:
    # each segment against the level before the first resume (its episode ends at a resume)
    ev = _events((1.0, 1.25, 1.25), (400, 300, 300), 2)
    onsets = [e for e in ev if e["event"] in ALERTS]
    assert [(e["job_iteration"], e["note"]) for e in onsets] == [
        (401, "resumed_slower"), (701, "resumed_slower")]


@pytest.mark.parametrize(("levels", "seed"), [
    ((1.0, 0.85, 0.85), 3),  # faster, and it stays
    ((1.0, 1.06, 1.0), 4),  # back, but the segment between rose less than the threshold
])
def test_a_level_that_stays_or_moves_on_is_no_slowdown(levels: tuple[float, ...],
                                                       seed: int) -> None:
    ev = _events(levels, (400, 300, 300), seed)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["idle", "idle"]
    assert [e for e in ev if e["event"] in ALERTS] == []


def test_between_restarts_from_a_checkpoint_a_level_is_a_new_healthy_one() -> None:
    # the same levels, but each restart replays 50 iterations (another allocation may come
    # back at another scale): no onset
    ev = _events((1.0, 1.25, 1.0), (400, 300, 300), 6, replay=50)
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["restart", "restart"]
    assert [e for e in ev if e["event"] in ALERTS] == []
