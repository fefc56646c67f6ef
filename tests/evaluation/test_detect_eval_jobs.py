"""Scoring through the watcher, leave-one-family-out choices and detect-eval --corpus jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stragglers.cli import main
from stragglers.evaluation import jobcorpus
from stragglers.evaluation.detect_eval_jobs import (
    FALLBACK_GRID,
    Alert,
    JobOutcome,
    RealStream,
    Run,
    choose_setting,
    evaluate_streams,
    load_real_more,
    lofo_choices,
    run_evaluation,
    score_alerts,
    summarize_jobs,
    tolerance,
    watch_stream,
)
from stragglers.evaluation.jobcorpus import JobEvent, generate_series
from stragglers.logs.records import IterationRecord
from tests.conftest import SHARED, require_shared

ITER_MORE = SHARED / "real" / "iter-more"


def _shared(path: Path) -> Path:
    """A folder of ../shared; skip outside CI when it is absent, fail inside CI."""
    return require_shared(path, "real labelled series")


def _a(ji: int, declared: int | None = None, rank: int = 0, kind: str = "onset") -> Alert:
    return Alert(kind=kind, rank=rank, job_iteration=ji,
                 declared=ji + 3 if declared is None else declared)


EV = JobEvent(start_iter=1000, end_iter=1100, loss=0.3, peak_loss=0.3, kind="step")


def test_a_matching_onset_and_its_delay() -> None:
    sc = score_alerts([EV], [_a(1002, declared=1009)], stride=1, last_iter=2000)
    assert (sc.detected, sc.spurious, sc.correct, sc.delays) == (1, 0, True, (9,))
    # tolerance before the start (5 iterations at stride 1); the delay is floored at 0
    sc = score_alerts([EV], [_a(996, declared=998)], stride=1)
    assert sc.correct and sc.delays == (0,)
    assert not score_alerts([EV], [_a(994)], stride=1).correct
    # the first declaration counts; a second alert in the event is no error
    sc = score_alerts([EV], [_a(1001, 1020), _a(1050, 1060)], stride=1)
    assert sc.delays == (20,) and sc.spurious == 0


def test_tolerance_follows_the_stride() -> None:
    assert tolerance(1) == 5 and tolerance(10) == 20 and tolerance(100) == 200
    assert score_alerts([EV], [_a(820)], stride=100).correct


def test_a_spurious_onset_and_a_missed_event() -> None:
    sc = score_alerts([EV], [_a(500), _a(1010)], stride=1)
    assert sc.detected == 1 and sc.spurious == 1 and sc.spurious_iters == (500,)
    assert not sc.correct
    sc = score_alerts([EV], [_a(1200)], stride=1)  # after the end
    assert sc.detected == 0 and sc.spurious == 1
    neg = score_alerts([], [_a(300)], stride=1)
    assert neg.events == 0 and not neg.correct
    assert score_alerts([], [], stride=1).correct


def test_rank_mismatch() -> None:
    ev = JobEvent(1000, 1100, 0.3, 0.3, "step", ranks=(2,))
    sc = score_alerts([ev], [_a(1003, rank=1)], stride=1)
    assert sc.detected == 0 and sc.spurious == 1
    assert score_alerts([ev], [_a(1003, rank=2)], stride=1).correct


def test_minor_events_are_optional() -> None:
    minor = JobEvent(1000, 1100, 0.05, 0.05, "minor")
    assert score_alerts([minor], [], stride=1).correct  # not required
    sc = score_alerts([minor], [_a(1010)], stride=1)  # not spurious
    assert sc.correct and sc.events == 0 and sc.spurious == 0
    assert not score_alerts([minor], [_a(1300)], stride=1).correct


def test_recovery() -> None:
    rec = [_a(1101, kind="recovery")]
    sc = score_alerts([EV], [_a(1001)], rec, stride=1, last_iter=2000)
    assert (sc.recoverable, sc.recovered) == (1, 1)
    sc = score_alerts([EV], [_a(1001)], [], stride=1, last_iter=2000)
    assert (sc.recoverable, sc.recovered) == (1, 0)
    sc = score_alerts([EV], [_a(1001)], [], stride=1, last_iter=1050)  # ends with the series
    assert sc.recoverable == 0


def _out(family: str, correct: bool, positive: bool = True, delay: int = 5,
         seed: int = 0) -> JobOutcome:
    return JobOutcome(
        name=f"{family}/x", family=family, scenario="x", seed=seed, run="r",
        positive=positive, events=int(positive), detected=int(positive and correct),
        big_events=int(positive), big_detected=int(positive and correct),
        spurious=0 if correct or positive else 1, spurious_iters=(), correct=correct,
        delays=(delay,) if positive and correct else (), recoverable=0, recovered=0,
        drifts=0, points=100, cpu_s=0.001)


def test_summary_rates() -> None:
    x = summarize_jobs([_out("a", True), _out("a", False), _out("a", True, positive=False),
                        _out("a", False, positive=False)])
    assert (x.accuracy, x.fpr, x.fnr) == (0.5, 0.5, 0.5)
    assert x.mean_delay_iters == 5 and x.us_per_point == pytest.approx(10.0)


def test_lofo_picks_the_setting_best_on_the_other_families() -> None:
    # s1 is right on family a only, s2 on b and c
    table = {
        "s1": [_out("a", True), _out("a", True), _out("b", False), _out("c", False)],
        "s2": [_out("a", False), _out("a", False), _out("b", True), _out("c", True)],
        "s3": [_out("a", False), _out("a", False), _out("b", False), _out("c", False)],
    }
    order = ["s1", "s2", "s3"]
    # a held out: on b+c s2 2/2 beats s1 0/2; b held out: on a+c s1 2/3 beats s2 1/3; c: same
    assert lofo_choices(table, order) == {"a": "s2", "b": "s1", "c": "s1"}
    # on everything s1 and s2 tie (2/4, no negatives, same delay): grid order
    assert choose_setting(table, order, ["a", "b", "c"]) == "s1"
    assert choose_setting(table, ["s2", "s1", "s3"], ["a", "b", "c"]) == "s2"
    # lower FPR wins an accuracy tie, then lower delay
    t2 = {"p": [_out("a", True), _out("a", False, positive=False)],
          "q": [_out("a", False), _out("a", True, positive=False)]}
    assert choose_setting(t2, ["p", "q"], ["a"]) == "q"
    t3 = {"p": [_out("a", True, delay=9)], "q": [_out("a", True, delay=3)]}
    assert choose_setting(t3, ["p", "q"], ["a"]) == "q"
    assert choose_setting(t3, ["p", "q"], ["zzz"]) == "p"  # nothing to score: grid order


def test_watch_stream_on_a_hand_built_stream() -> None:
    recs = [IterationRecord(rank=0, iter=i, duration=1.0 if not 400 <= i < 500 else 1.5)
            for i in range(1, 800)]
    stream = RealStream(name="x", family="x", items=tuple(recs),
                        events=(JobEvent(400, 500, 1 / 3, 1 / 3, "step"),), stride=1)
    res = watch_stream(stream, "sliding_window")
    assert [a.kind for a in res.alerts] == ["onset"]
    assert 395 <= res.alerts[0].job_iteration <= 402
    assert res.alerts[0].declared > res.alerts[0].job_iteration
    assert len(res.recoveries) == 1 and res.points == 799 and res.last_iter == 799


@pytest.fixture()
def small_corpus(monkeypatch) -> None:
    """Three short families of one series each (the CLI tests' corpus)."""
    monkeypatch.setattr(jobcorpus, "SCENARIOS", tuple(
        (f, s, 1, p) for f, s, _, p in jobcorpus.SCENARIOS
        if s in ("stalls_slow", "isolated", "single_step")))
    monkeypatch.setattr(jobcorpus, "SAMPLED_RECORDS", (150, 200))
    monkeypatch.setattr(jobcorpus, "SERIES_ITERS", (1000, 1200))


@pytest.mark.slow
def test_evaluate_streams_serial_and_parallel_agree(monkeypatch) -> None:
    monkeypatch.setattr(jobcorpus, "SERIES_ITERS", (800, 1000))
    streams = [generate_series(0, "greyhound", "injected", 0),
               generate_series(0, "multirank", "one_slow", 1),
               generate_series(0, "restart", "replay", 0)]
    runs = [Run("sw", "sliding_window"), Run("bv", "bocd_verify")]
    one = evaluate_streams(streams, runs, jobs=1)
    two = evaluate_streams(streams, runs, jobs=2)
    for k in one:
        assert [(o.name, o.correct, o.spurious, o.delays) for o in one[k]] == [
            (o.name, o.correct, o.spurious, o.delays) for o in two[k]]
    assert [o.name for o in one["sw"]] == [s.name for s in streams]
    with pytest.raises(ValueError, match="unknown method"):
        evaluate_streams(streams, [Run("x", "nope")])


@pytest.mark.slow
def test_run_evaluation_lofo_small(small_corpus) -> None:
    fams = ("ckpt_stall", "flapping", "sampled")
    ev = run_evaluation([0, 1], 0.04, ["sliding_window", "bocd_verify"],
                        grid=FALLBACK_GRID[:2], jobs=1, families=fams)
    assert set(ev.choices) == set(fams)
    assert {o.seed for o in ev.others["bocd_verify"]} == {0, 1}
    assert set(ev.choices.values()) <= {"w10-t10", "w10-t15"}
    assert ev.plain in ("w10-t10", "w10-t15") and list(ev.others) == ["bocd_verify"]


def _labelled(tmp_path: Path, labels: object, lines: list[str]) -> Path:
    (tmp_path / "s.jsonl").write_text("".join(x + "\n" for x in lines))
    (tmp_path / "labels.json").write_text(json.dumps(labels))
    return tmp_path


def test_load_real_more(tmp_path) -> None:
    lines = [json.dumps({"rank": 0, "iter": i, "duration": 2.0 if 50 <= i <= 60 else 1.0})
             for i in range(1, 101)]
    d = _labelled(tmp_path, {"s": {"slow_periods": [[50, 60]]}}, lines)
    (s,) = load_real_more(d)
    assert s.name == "real-more/s" and s.stride == 1 and len(s.items) == 100
    assert s.events[0].start_iter == 50 and s.events[0].end_iter == 61
    assert s.events[0].loss == pytest.approx(0.5)


@pytest.mark.parametrize(("labels", "message"), [
    ({"s": {"slow_periods": [[60, 50]]}}, "field 's.slow_periods[0]': expected [first, last]"),
    ({"s": {}}, "field 's.slow_periods': expected a list"),
    ({}, "no labels for s.jsonl"),
    ({"s": {"slow_periods": []}, "t": {"slow_periods": []}}, "its series"),
])
def test_bad_labels_are_one_line_errors(tmp_path, capsys, labels, message) -> None:
    d = _labelled(tmp_path, labels, [json.dumps({"rank": 0, "iter": 1, "duration": 1.0})])
    assert main(["detect-eval", "--corpus", "jobs", "--scale", "0.01", "--jobs", "1",
                 "--method", "sliding_window", "--real-more", str(d)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


@pytest.mark.parametrize(("argv", "message"), [
    (["--corpus", "jobs", "--method", "nope"], "--method: unknown method 'nope'"),
    (["--corpus", "jobs", "--method", "bocd,bocd"], "--method: bocd given twice"),
    (["--lofo"], "--lofo: only with --corpus jobs"),
    (["--method", "bocd"], "--method: only with --corpus jobs"),
    (["--seed", "1", "--seed", "2"], "--seed: the series corpus takes one seed"),
    (["--corpus", "jobs", "--seed", "1", "--seed", "1"], "--seed: seed 1 given twice"),
    (["--corpus", "jobs", "--seed", "-3"], "--seed: expected an integer >= 0"),
    (["--corpus", "jobs", "--family", "real"], "--family: only with --corpus series"),
    (["--corpus", "jobs", "--scale", "0"], "--scale: expected a finite number > 0"),
    (["--corpus", "jobs", "--warmup", "-1"], "--warmup: expected an integer >= 0"),
    (["--warmup", "10"], "--warmup: only with --corpus jobs"),
    (["--corpus", "jobs", "--real-more", "/nonexistent/x"], "/nonexistent/x: folder"),
])
def test_cli_errors_exit_2_with_one_line(capsys, argv, message) -> None:
    assert main(["detect-eval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


@pytest.mark.slow
def test_cli_jobs_lofo_json(capsys, small_corpus) -> None:
    assert main(["detect-eval", "--corpus", "jobs", "--lofo", "--jobs", "2",
                 "--method", "sliding_window,bocd_verify", "--seed", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seeds"] == [3] and doc["method"] == "sliding_window"
    assert doc["grid"] == [n for n, _ in FALLBACK_GRID]
    assert set(doc["lofo"]) == {"ckpt_stall", "flapping", "sampled"}
    assert doc["plain_choice"] in doc["grid"]
    assert set(doc["methods"]) == {"bocd_verify"}
    assert 0.0 <= doc["all_held_out"]["accuracy"] <= 1.0


def test_cli_jobs_text(capsys, small_corpus) -> None:
    assert main(["detect-eval", "--corpus", "jobs", "--jobs", "1",
                 "--method", "sliding_window"]) == 0
    out = capsys.readouterr().out
    assert "| flapping | 0 |" in out and "| **all** | all |" in out


def test_real_more_with_the_existing_baseline() -> None:
    """The nine labelled real series of ../shared (four with slow periods, five without)."""
    streams = load_real_more(_shared(ITER_MORE))
    assert len(streams) == 9
    assert sum(s.positive for s in streams) == 4
    strides = {s.name.split("/")[1]: s.stride for s in streams}
    assert strides["mlm_gpt3_15b_8t_release_h100"] == 100
    assert strides["mlm_nemotron3_super_gb200_sm"] == 10
    res = evaluate_streams([s for s in streams if s.stride >= 10],
                           [Run("sw", "sliding_window")], jobs=1)
    assert all(o.spurious == 0 for o in res["sw"])  # the baseline raises no false onset there
