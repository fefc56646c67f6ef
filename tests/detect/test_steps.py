"""Step records of several ranks joined step by step (:mod:`stragglers.detect.steps`): what
slows every rank alike is not a straggler, a rank that gets faster does not make the others
look slow, and files read one after the other give the events of lines read together.

Hand-built records with known answers: two (or four) ranks of equal work, noise of 2 % per
step, and the changes injected at known steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.detect.steps import REF_POINTS, REF_SKIP, SCALE_POINTS, StepJoiner
from stragglers.detect.watch import Watcher
from stragglers.logs.records import StepRecord

N = 240
BASE = 0.05


def _records(factors: dict[int, list[float]], seed: int = 0) -> dict[int, list[dict]]:
    """Step records of the ranks of ``factors`` (rank -> its busy time's factor per step):
    the ranks synchronise every step (the step is the slowest busy time plus 2 ms)."""
    rng = np.random.default_rng(seed)
    out: dict[int, list[dict]] = {r: [] for r in factors}
    ts = 100.0
    for k in range(N):
        busy = {r: BASE * f[k] * float(np.exp(rng.normal(0, 0.02))) for r, f in factors.items()}
        step = max(busy.values()) + 0.002
        ts += step
        for r in factors:
            out[r].append({"kind": "step", "v": 1, "rank": r, "step": k, "ts": round(ts, 6),
                           "busy": round(busy[r], 7), "wait": round(step - busy[r], 7)})
    return out


def _factor(changes: list[tuple[int, int, float]]) -> list[float]:
    f = [1.0] * N
    for a, b, x in changes:
        for k in range(a, b):
            f[k] *= x
    return f


def _folder(tmp_path: Path, recs: dict[int, list[dict]]) -> Path:
    for r, lines in recs.items():
        (tmp_path / f"steps-rank-{r:05d}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in lines))
    return tmp_path


def _levels(capsys: pytest.CaptureFixture[str], args: list[str]) -> list[tuple[str, int, int]]:
    assert main(["watch", *args, "--once"]) == 0
    events = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    return [(e["event"], e["rank"], e["job_iteration"]) for e in events
            if e["event"] in ("onset", "recovery", "change", "speedup", "flapping")]


def test_a_slowdown_of_every_rank_is_not_a_straggler(tmp_path: Path, capsys) -> None:
    """Both ranks 1.6x slower in steps 100-179 (the machine, the data): no onset; as plain
    per-rank iteration times of the busy time, both ranks had one."""
    both = [(100, 180, 1.6)]
    recs = _records({0: _factor(both), 1: _factor(both)})
    assert _levels(capsys, [str(_folder(tmp_path, recs))]) == []
    iters = tmp_path / "busy.jsonl"
    iters.write_text("".join(json.dumps({"rank": x["rank"], "iter": x["step"],
                                         "duration": x["busy"]}) + "\n"
                             for k in range(N) for x in (recs[0][k], recs[1][k])))
    assert sorted(r for e, r, _ in _levels(capsys, [str(iters)]) if e == "onset") == [0, 1]


def test_a_slowdown_of_every_rank_while_the_reference_is_taken_is_not_a_straggler(
        tmp_path: Path, capsys) -> None:
    """Both ranks 2x slower from step 16 on, while the job's reference pace is still being
    taken (a shared machine's load; measured on the 2-core machine, a healthy Lightning run
    had its rank 1 named): no onset. (With a reference that moved as it was taken, every
    rank's series was rescaled with it, a rise of every rank.)"""
    both = [(REF_SKIP + SCALE_POINTS + 4, N, 2.0)]
    recs = _records({0: _factor(both), 1: _factor(both)})
    assert _levels(capsys, [str(_folder(tmp_path, recs))]) == []


def test_a_straggler_during_a_slowdown_of_every_rank_is_found(tmp_path: Path, capsys) -> None:
    """Every rank 1.6x slower in steps 100-199, rank 1 another 1.5x in 130-169."""
    both = [(100, 200, 1.6)]
    recs = _records({0: _factor(both), 1: _factor(both + [(130, 170, 1.5)])})
    got = _levels(capsys, [str(_folder(tmp_path, recs))])
    assert [(e, r) for e, r, _ in got] == [("onset", 1), ("recovery", 1)], got
    assert abs(got[0][2] - 130) <= 2 and abs(got[1][2] - 170) <= 2


def test_a_rank_that_gets_faster_does_not_make_the_other_slow(tmp_path: Path, capsys) -> None:
    """Rank 1 0.6x (faster) in steps 100-179: rank 0, unchanged, raises nothing (against
    the faster rank alone it would look 1.7x slower)."""
    recs = _records({0: _factor([]), 1: _factor([(100, 180, 0.6)])})
    got = _levels(capsys, [str(_folder(tmp_path, recs))])
    assert got == [], got  # being faster is no straggler's sign either


def test_a_rank_that_comes_back_to_the_pace_of_the_others_has_not_slowed(
        tmp_path: Path, capsys) -> None:
    """The whole job faster from step 100 on (a shared machine's load gone), rank 0 much
    faster than rank 1 (0.3x against 0.7x) until step 150, then back at rank 1's pace: no
    rank was ever slower than the other's pace, no onset (measured on the 2-core machine:
    rank 0 of a DDP loop was named at the step it came back)."""
    recs = _records({0: _factor([(100, N, 0.3), (150, N, 0.7 / 0.3)]),
                     1: _factor([(100, N, 0.7)])})
    got = _levels(capsys, [str(_folder(tmp_path, recs))])
    assert [x for x in got if x[0] == "onset"] == [], got


def test_half_the_ranks_slow_are_found_more_are_the_job(tmp_path: Path, capsys) -> None:
    """Four ranks: ranks 2 and 3 1.5x slower in steps 100-179 are two stragglers; ranks
    1, 2 and 3 (more than half) are the job's pace: no event, and rank 0, which kept its
    time, does not look faster."""
    two = _records({r: _factor([(100, 180, 1.5)] if r >= 2 else []) for r in range(4)})
    (tmp_path / "two").mkdir()
    got = _levels(capsys, [str(_folder(tmp_path / "two", two))])
    assert sorted((e, r) for e, r, _ in got) == [("onset", 2), ("onset", 3), ("recovery", 2),
                                                  ("recovery", 3)], got
    three = _records({r: _factor([(100, 180, 1.5)] if r >= 1 else []) for r in range(4)})
    (tmp_path / "three").mkdir()
    assert _levels(capsys, [str(_folder(tmp_path / "three", three))]) == []


def test_files_read_one_after_the_other_give_the_events_of_interleaved_lines(
        tmp_path: Path, capsys) -> None:
    """``watch DIR --once`` reads rank 0's whole file before rank 1's: the joiner holds rank
    0's records for rank 1's, so the events are those of one stream of interleaved lines."""
    recs = _records({0: _factor([(100, 180, 1.6)]),
                     1: _factor([(100, 180, 1.6), (130, 170, 1.5)])})
    from_files = _levels(capsys, [str(_folder(tmp_path, recs))])
    one = tmp_path / "one" / "all.jsonl"
    one.parent.mkdir()
    one.write_text("".join(json.dumps(x) + "\n" for k in range(N)
                           for x in (recs[0][k], recs[1][k])))
    assert _levels(capsys, [str(one)]) == from_files
    assert [r for e, r, _ in from_files if e == "onset"] == [1]


def test_one_rank_alone_is_detected_on_its_busy_time(tmp_path: Path, capsys) -> None:
    recs = _records({0: _factor([(100, 180, 1.5)])})
    got = _levels(capsys, [str(_folder(tmp_path, recs))])
    assert [(e, r) for e, r, _ in got] == [("onset", 0), ("recovery", 0)], got


def test_the_joiner_holds_records_for_a_rank_announced_and_lets_go_at_the_end() -> None:
    """Records wait for the announced rank's record of their step, and the first steps
    also for the scale (``REF_SKIP + SCALE_POINTS`` steps both ranks have): then they go
    in step order, in the scale; what is held at the end of the input goes as it is."""
    j: StepJoiner[int] = StepJoiner()
    j.expect(1)
    out = []
    total = REF_SKIP + REF_POINTS + 5
    for k in range(total):
        out += j.add(StepRecord(rank=0, step=k, busy=1.0, wait=0.0), k, 0)
    assert out == [] and j.held == total  # waiting for rank 1
    first = REF_SKIP + SCALE_POINTS
    for k in range(first - 1):
        out += j.add(StepRecord(rank=1, step=k, busy=2.0, wait=0.0), k, 1)
    assert out == [] and j.scale is None  # the scale is not set yet: nothing goes
    out += j.add(StepRecord(rank=1, step=first - 1, busy=2.0, wait=0.0), first - 1, 1)
    assert j.scale == 1.0
    assert sorted((r.iter, r.rank) for r, _, _ in out) == [
        (k, r) for k in range(first) for r in (0, 1)]
    for rank in (0, 1):  # each rank's records in the order they came
        assert [r.iter for r, _, _ in out if r.rank == rank] == list(range(first))
    # in the scale: rank 0 at the common pace, rank 1 twice as busy
    assert {(r.rank, r.duration) for r, _, _ in out} == {(0, 1.0), (1, 2.0)}
    rest = j.flush()
    assert len(rest) == total - first and j.held == 0
    assert all(r.rank == 0 and r.duration == 1.0 for r, _, _ in rest)


def test_a_healthy_ddp_run_on_a_loaded_machine_has_no_onset_at_its_start() -> None:
    """Two ranks of equal work on a loaded machine: every step stretched alike by the
    machine's load (a wandering factor, log-sd 0.09 a step, and per-step jumps of log-sd
    0.18) and each rank's own noise (12 %): no rise in 40 seeded runs of 150 steps. Before
    the first steps were held for the scale, they went to the detector as raw busy times
    (the load's swings and all) and the series changed scale at step 12: 2 of these runs
    had a false onset at step 10 or 11 (declared at 47 and 69)."""
    found = []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n = 150
        wander = np.cumsum(rng.normal(0, 0.35 / 4, n))
        common = np.exp(wander - wander.mean() + rng.normal(0, 0.35 / 2, n))
        lines = [json.dumps({"kind": "step", "v": 1, "rank": r, "step": k, "wait": 0.0,
                             "busy": round(BASE * float(common[k])
                                           * float(np.exp(rng.normal(0, 0.12))), 7)})
                 for k in range(n) for r in (0, 1)]
        w = Watcher()
        events = [e.to_dict() for e in w.process_lines(enumerate(lines, start=1)) + w.finish()]
        found += [(seed, e["event"], e["rank"], e["job_iteration"]) for e in events
                  if e["event"] in ("onset", "change", "flapping")
                  and e["level_s"] > e["previous_s"]]
    assert found == []


def test_the_watcher_names_events_by_the_file_the_record_came_from(tmp_path: Path) -> None:
    """Records let go while another file is read carry their own file."""
    recs = _records({0: _factor([]), 1: _factor([(100, 180, 1.5)])})
    w = Watcher(sources=2)
    w.expect_steps(0)
    w.expect_steps(1)
    events = []
    for i in (1, 0):  # rank 1's file first: its records wait for rank 0's
        lines = [(k + 1, json.dumps(x)) for k, x in enumerate(recs[i])]
        events += w.process_lines(lines, file_index=i, source=f"steps-{i}.jsonl")
    events += w.finish()
    onset = next(e for e in events if e.event == "onset")
    assert onset.rank == 1 and onset.file == "steps-1.jsonl"


#: Busy times (ms) of the first 60 steps of a 2-rank DDP run of docs/snippets/ddp_loop.py on
#: a loaded 2-core machine, rank 1 slowed by 0.3 s from step 30 on (the end-to-end test of
#: tests/service/test_live_steps.py): the start is noisy (a rank at 1.5-3x its pace in some
#: steps until step 29), so rank 1's warm-up had not settled when the slowdown began, and
#: its values around the level before it spread more than the threshold.
DDP_BUSY_MS = {
    0: [28.4, 32.3, 22.3, 17.2, 28.9, 19.2, 15.2, 14.5, 14.3, 12.0, 12.0, 11.7, 11.7, 11.8,
        12.2, 12.6, 12.3, 13.1, 16.5, 19.1, 21.4, 16.4, 15.1, 14.4, 13.6, 15.7, 15.3, 14.2,
        14.2, 36.7, 12.3, 15.1, 13.1, 12.5, 16.4, 14.4, 12.7, 16.5, 17.7, 19.1, 20.6, 21.1,
        13.7, 15.2, 17.5, 13.9, 20.3, 17.2, 53.0, 21.6, 25.5, 20.0, 26.1, 20.9, 24.4, 12.2,
        40.8, 13.9, 44.1, 24.2],
    1: [23.6, 21.4, 20.2, 14.9, 19.0, 13.2, 14.8, 22.4, 12.3, 13.8, 12.6, 11.7, 14.3, 12.8,
        12.9, 18.1, 16.7, 31.2, 48.3, 37.6, 20.7, 17.8, 26.4, 16.3, 16.5, 17.9, 21.8, 24.8,
        40.3, 79.5, 317.7, 347.1, 324.1, 323.6, 318.6, 336.5, 318.7, 317.5, 328.2, 318.8,
        329.7, 325.7, 313.7, 312.8, 314.1, 317.8, 330.8, 321.3, 316.8, 318.2, 317.5, 320.6,
        316.9, 323.2, 316.6, 325.5, 332.6, 313.5, 324.5, 314.2],
}


def test_a_slowdown_inside_a_noisy_warm_up_of_a_ddp_run_is_found() -> None:
    """The recorded DDP run above: rank 1's warm-up ends on its slow level (step 37), but the
    level it had before (steps 9-13, within the noise of the start) is told from the slow
    one by a rise larger than either level's spread: a rise of rank 1 to twice its healthy
    time or more is placed at most 3 steps before step 30 (the noisy steps 27-29 join the
    rise) and declared by step 40, and no other rank is named. With the former level test (5 values
    within the threshold of each other) the noisy level was no level: the slow one was
    taken as rank 1's healthy time, nothing found. (In steps 15-29 rank 1 was 1.2-3x as
    busy as rank 0 in most steps, the machine's load on its core: since the first steps go
    to the detector in the scale of the rest, that is an earlier onset of rank 1, at step
    12, declared at 29.)"""
    lines = [json.dumps({"kind": "step", "v": 1, "rank": r, "step": k, "busy": ms / 1e3,
                         "wait": 0.0})
             for k in range(60) for r in (0, 1) for ms in [DDP_BUSY_MS[r][k]]]
    w = Watcher()
    events = [e.to_dict() for e in w.process_lines(enumerate(lines, start=1)) + w.finish()]
    rises = [e for e in events if e["event"] in ("onset", "change", "flapping")
             and e["level_s"] > e["previous_s"]]
    assert rises and {e["rank"] for e in rises} == {1}, rises
    slow = [e for e in rises if e["level_s"] > 2 * e["healthy_s"]]
    assert slow and 27 <= slow[0]["job_iteration"] <= 30, rises
    assert slow[0]["declared_job_iteration"] <= 40, rises
