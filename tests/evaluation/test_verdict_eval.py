"""``probe verdict-eval``: the scoring on hand-made rows, the matrix, the command's contract
and a smoke run of one small real case (the full matrix is a benchmark, not a test)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from stragglers.analysis.verdict import Cause
from stragglers.cli import main
from stragglers.evaluation.verdict_eval import (
    CASE_FILE,
    MATRIX,
    ROWS_FILE,
    EvalCase,
    EvalRow,
    format_report,
    score,
    select,
)


def _row(name: str, kind: str, expected: str, cause: str, confidence: float,
         expected_worker: str | None = None, workers: tuple[str, ...] = (),
         hog: int = 0) -> EvalRow:
    return EvalRow(name=name, split="eval", kind=kind, dp=2, pp=2, injected=kind,
                   expected=expected, expected_worker=expected_worker, cause=cause,
                   workers=workers, confidence=confidence, slowdown=1.2, discrepancy=1.0,
                   trustworthy=True, top_sw="0,0", gc_recorded=False, hog=hog, wall_s=1.0,
                   load_1m=1.0, run_dir="-")


ROWS = [
    _row("a", "worker", "worker", "worker", 0.97, "1,0", ("1,0",)),          # right
    _row("b", "worker", "worker", "worker", 0.90, "1,1", ("0,1", "1,1")),    # wrong worker
    _row("c", "last_stage", "last_stage", "last_stage", 0.85),               # right
    _row("d", "healthy", "none", "none", 1.0),                               # right
    _row("e", "healthy", "none", "pauses", 0.55),                            # wrong, healthy
    _row("f", "gc", "pauses", "pauses", 0.30),                               # right
    _row("g", "sequence", "sequence_length", "communication", 0.10),         # wrong
    _row("h", "healthy", "none", "pauses", 0.95, hog=2),                     # hog: allowed
]


def test_score_counts_the_hand_made_rows() -> None:
    s = score(ROWS)
    assert (s.n, s.right, s.right_cause) == (8, 4, 5)
    assert (s.worker_runs, s.worker_right) == (2, 1)
    assert s.confusion["worker"]["worker"] == 2
    assert s.confusion["none"] == {**{c.value: 0 for c in Cause}, "none": 1, "pauses": 2}
    assert s.confusion["sequence_length"]["communication"] == 1
    assert sum(sum(line.values()) for line in s.confusion.values()) == 8
    # calibration: [0,.2) g; [.2,.5) f; [.5,.8) e; [.8,.95) b c; [.95,1] a d h
    assert [(b.count, b.right) for b in s.calibration] == [(1, 0), (1, 1), (1, 0), (2, 1),
                                                           (3, 2)]
    assert (s.confident, s.confident_right) == (5, 3)
    assert s.healthy_confident == 1  # e (0.55); h is pauses under a hog: allowed
    assert s.confident_wrong == 1  # b; h is pauses under a hog
    targets = dict(s.targets())
    assert list(targets.values()) == [False, False, False, False, False]
    assert s.right_named == s.right  # no row has a leading cause


def test_a_cause_named_below_the_threshold_counts_only_in_the_named_score() -> None:
    below = replace(_row("i", "gc", "gc", "none", 0.7), slowdown=1.07, leading="gc")
    wrong_lead = replace(below, name="j", leading="pauses")
    no_lead = replace(below, name="k", leading=None)
    worker_ok = replace(_row("l", "worker", "worker", "none", 0.7, "1,0"), leading="worker",
                        leading_workers=("1,0",))
    worker_bad = replace(worker_ok, name="m", leading_workers=("0,1", "1,0"))
    healthy = replace(_row("n", "healthy", "none", "none", 1.0), leading="sequence_length")
    rows = [below, wrong_lead, no_lead, worker_ok, worker_bad, healthy]
    assert [r.right for r in rows] == [False, False, False, False, False, True]
    assert [r.right_named for r in rows] == [True, False, False, True, False, True]
    s = score(rows)
    assert (s.right, s.right_named) == (1, 3)
    report = format_report(rows)
    assert "| none (leading: gc) | 0.70 | 1.070 | named |" in report
    assert "| none (leading: worker [0,1 1,0]) | 0.70 | 1.200 | NO |" in report
    assert "counting the cause named below the threshold: 3/6 (50%)" in report


def test_score_targets_hold_on_right_rows() -> None:
    rows = [ROWS[0], ROWS[2], ROWS[3], ROWS[5]]
    assert all(ok for _, ok in score(rows).targets())
    report = format_report(rows)
    assert "| worker | " in report and "right worker: 1/1 (100%)" in report
    assert "| [0.95, 1.00] | 2 | 2 | 100% |" in report


def test_row_round_trips_through_json() -> None:
    for row in ROWS:
        again = EvalRow.from_dict(json.loads(json.dumps(row.to_dict())))
        assert again == row


def test_matrix_covers_the_issue() -> None:
    assert len(MATRIX) >= 24 and len({c.name for c in MATRIX}) == len(MATRIX)
    assert {c.dp for c in MATRIX} == {1, 2, 4} and {c.pp for c in MATRIX} == {1, 2, 3, 4}
    slow = [c for c in MATRIX if c.kind == "worker"]
    stages = set()
    for c in slow:
        w = c.slow_worker
        assert w is not None and 0 <= c.slow_rank < c.dp * c.pp
        stages.add("first" if w.stage == 0 else "last" if w.stage == c.pp - 1 else "middle")
    assert stages == {"first", "middle", "last"}
    assert {c.slow_mode for c in slow} == {"spin", "sleep"}
    assert min(c.slow_factor for c in slow) <= 1.3 and max(c.slow_factor for c in slow) >= 3
    assert {c.kind for c in MATRIX} == {"healthy", "worker", "last_stage", "sequence", "gc"}
    for kind in ("healthy", "worker", "last_stage", "sequence", "gc"):  # both splits
        assert {c.split for c in MATRIX if c.kind == kind} == {"tune", "eval"}
    assert len({c.seed for c in MATRIX if c.kind == "healthy"}) >= 3
    assert len(select(MATRIX, "tune")) + len(select(MATRIX, "eval")) == len(MATRIX)


def test_expected_cause_of_gc_follows_the_trace() -> None:
    gc_case = next(c for c in MATRIX if c.kind == "gc")
    assert gc_case.expected(gc_recorded=True) == Cause.GC
    assert gc_case.expected(gc_recorded=False) == Cause.PAUSES
    worker = next(c for c in MATRIX if c.kind == "worker")
    assert worker.expected(True) == worker.expected(False) == Cause.WORKER


@pytest.mark.parametrize("argv, needle", [
    (["--only", "nope"], "--only: no case named 'nope'"),
    (["--only", ","], "--only: no case name given"),
    (["--hog", "100000"], "--hog: 100,000 CPU-hog processes"),
    (["--hog", "-1"], "--hog"),
    (["--split", "both"], "--split"),
    (["--steps", "2", "--warmup-steps", "2"], "--steps (2) must exceed"),
    (["--verdict", "pause_factr=2"], "did you mean 'pause_factor'"),
    (["--reanalyse", "/nonexistent/x"], "--reanalyse /nonexistent/x: no such folder"),
    (["--reanalyse", "/tmp", "--hog", "1"], "--hog: not with --reanalyse"),
])
def test_bad_options_exit_2_with_one_line(argv: list[str], needle: str,
                                          capsys: pytest.CaptureFixture) -> None:
    assert main(["probe", "verdict-eval", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err


def test_reanalyse_refuses_damaged_records(tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    assert main(["probe", "verdict-eval", "--reanalyse", str(tmp_path)]) == 2
    assert "no kept runs" in capsys.readouterr().err
    run = tmp_path / "x"
    run.mkdir()
    (run / CASE_FILE).write_text('{"case": {"name": "x", "split": "tune"}, "hog": 0}')
    assert main(["probe", "verdict-eval", "--reanalyse", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{run / CASE_FILE}: case field 'dp' missing" in err and err.count("\n") == 1
    case = replace(MATRIX[0], name="x").to_dict()
    (run / CASE_FILE).write_text(json.dumps({"case": case, "hog": 0}))
    assert main(["probe", "verdict-eval", "--reanalyse", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "trace.parquet: missing" in err and err.count("\n") == 1


def test_keep_refuses_a_users_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "mine.txt").write_text("keep")
    code = main(["probe", "verdict-eval", "--only", "healthy-d1p2-s34", "--keep",
                 str(tmp_path)])
    assert code == 2
    assert "--keep" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_case_record_types_are_checked() -> None:
    from stragglers.errors import InputError

    raw = {**MATRIX[0].to_dict(), "dp": "2"}
    with pytest.raises(InputError, match="case field 'dp' has the wrong type"):
        EvalCase.from_dict(raw, "r.json")
    with pytest.raises(InputError, match="split must be tune or eval"):
        EvalCase.from_dict({**MATRIX[0].to_dict(), "split": "x"}, "r.json")


@pytest.mark.slow
def test_smoke_one_real_case_kept_and_reanalysed(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    """One small case end to end: run, keep, score; re-scoring the kept run gives the same
    row. The verdict itself is not asserted (that is what the benchmark measures)."""
    pytest.importorskip("torch")
    keep = tmp_path / "keep"
    argv = ["probe", "verdict-eval", "--only", "healthy-d1p2-s34", "--steps", "6",
            "--warmup-steps", "1", "--keep", str(keep), "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1
    row = rows[0]
    assert (row["name"], row["split"], row["expected"], row["expected_worker"]) == (
        "healthy-d1p2-s34", "eval", "none", None)
    assert row["cause"] in {c.value for c in Cause}
    assert 0.0 <= row["confidence"] <= 1.0 and row["hog"] == 0
    assert row["right"] == (row["cause"] == "none")
    run = keep / "healthy-d1p2-s34"
    assert (run / "trace.parquet").is_file() and (run / CASE_FILE).is_file()
    assert json.loads((keep / ROWS_FILE).read_text()) == rows
    assert main(["probe", "verdict-eval", "--reanalyse", str(keep), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again == rows
    assert main(["probe", "verdict-eval", "--reanalyse", str(keep)]) == 0
    report = capsys.readouterr().out
    assert "Confusion matrix" in report and "Calibration" in report
