"""``probe recipe-eval``: the scoring on hand-made rows, on synthetic jobs with a known
straggler, re-scoring a kept folder, the command's contract, and one real run of the
documented loop recipe end to end (the full evaluation is a benchmark, not a test)."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from stragglers.analysis import analyze_table
from stragglers.analysis.verdict import VerdictConfig
from stragglers.cli import main
from stragglers.evaluation.recipe_eval import (
    CASE_FILE,
    CONDITIONS,
    KNOBS,
    LOG_FILE,
    RECIPES,
    ROWS_FILE,
    RecipeRow,
    RunCase,
    format_report,
    format_table,
    group_scores,
    plan,
    row_of,
    run_all,
    run_env,
    targets,
)
from stragglers.synth import SynthSpec, generate, write_synth
from stragglers.trace import build_table

REPO = Path(__file__).resolve().parents[2]


def _row(name: str, condition: str, cause: str, confidence: float,
         workers: tuple[str, ...] = (), recipe: str = "loop") -> RecipeRow:
    return RecipeRow(name=name, recipe=recipe, condition=condition, index=0, cause=cause,
                     workers=workers, confidence=confidence, slowdown=1.3,
                     slowdown_healthy=1.5, discrepancy=1.01, trustworthy=True, hog=0,
                     wall_s=10.0, load_1m=4.0, run_dir="-", evidence=("e1", "e2"),
                     summary=f"summary of {name}")


ROWS = [
    _row("a", "slow-forward", "worker", 0.97, ("1,0",)),               # right
    _row("b", "slow-forward", "worker", 0.70, ("1,0",)),               # right, not confident
    _row("c", "slow-forward", "worker", 0.90, ("0,0",)),               # waiter first
    _row("d", "slow-loader", "host", 0.85, ("1,0", "0,0")),            # right first, waiter too
    _row("e", "slow-loader", "communication", 0.40),                   # nobody named
    _row("f", "healthy", "none", 1.00),                                # fine
    _row("g", "healthy", "worker", 0.55, ("1,0",)),                    # blames at >= 0.5
    _row("h", "healthy", "worker", 0.45, ("0,0",)),                    # names, below 0.5
    _row("i", "slow-loader", "host", 0.99, ("1,0",), recipe="hf"),     # right
]


def test_each_row_is_scored_against_the_targets() -> None:
    by = {r.name: r for r in ROWS}
    assert [by[n].late_first for n in "abcdei"] == [True, True, False, True, False, True]
    assert [by[n].late_first_confident for n in "abcdei"] == [True, False, False, True, False,
                                                              True]
    assert [by[n].waiter_blamed for n in "abcdei"] == [False, False, True, True, False, False]
    assert [by[n].misses for n in "abcdefghi"] == [False, True, True, True, True, False, True,
                                                   False, False]
    # healthy runs have no late rank; slowed runs no healthy blame
    assert [by[n].late_first for n in "fgh"] == [None, None, None]
    assert [by[n].healthy_blame for n in "fgh"] == [False, True, False]
    assert by["a"].healthy_blame is None
    assert [r.expected for r in ROWS[:6]] == ["worker"] * 3 + ["host"] * 2 + ["none"]
    assert [r.right_cause for r in ROWS] == [True, True, True, True, False, True, False, False,
                                              True]


def test_the_targets_and_the_groups_count_the_hand_made_rows() -> None:
    t = targets(ROWS)
    assert [(x.runs, x.met, x.holds) for x in t] == [(6, 3, False), (6, 4, False),
                                                     (3, 2, False)]
    assert all(x.holds for x in targets([ROWS[0], ROWS[5], ROWS[7], ROWS[8]]))
    groups = {(g.recipe, g.condition): g for g in group_scores(ROWS)}
    assert list(groups) == [("loop", "healthy"), ("loop", "slow-forward"),
                            ("loop", "slow-loader"), ("hf", "slow-loader")]
    fwd = groups[("loop", "slow-forward")]
    assert (fwd.runs, fwd.late_first, fwd.late_first_confident, fwd.waiter_blamed) == (3, 2, 1, 1)
    assert (fwd.confidence_min, fwd.confidence_median) == (0.70, 0.90)
    assert fwd.causes == {"worker": 3} and fwd.right_cause == 3
    loader = groups[("loop", "slow-loader")]
    assert loader.causes == {"host": 1, "communication": 1} and loader.right_cause == 1
    healthy = groups[("loop", "healthy")]
    assert (healthy.named_worker, healthy.named_worker_confident) == (2, 1)
    table = format_table(ROWS)
    assert "| loop | slow-forward | 3 | worker 3 | 3/3 | 2/3 | 0.70 / 0.90 | 1/3 | 1/3 | 3/3 (3)" \
        in table
    assert "| loop | healthy | 3 | worker 2, none 1 | 1/3 | - | 0.45 / 0.55 | - | - | 2/3 (1)" \
        in table


def test_the_report_lists_each_missing_run_with_its_summary() -> None:
    report = format_report(ROWS)
    assert "- [ ] slowed runs: the late rank (1,0) named first with confidence >= 0.8: 3/6" \
        in report
    assert ("- [ ] healthy runs: no worker named with confidence >= 0.5 (but the rank the "
            "machine slowed): 2/3") in report
    missed = [r.name for r in ROWS if r.misses]
    assert f"Runs that miss a target ({len(missed)})" in report
    for r in ROWS:
        assert (f"summary of {r.name}" in report) == r.misses
        assert (f"| {r.name} (MISS) |" in report) == r.misses
    assert "load average at the runs' start: 4.0-4.0" in report
    clean = format_report([ROWS[0]])
    assert "miss a target" not in clean and "- [x]" in clean


def test_a_row_survives_its_json() -> None:
    for r in ROWS:
        doc = json.loads(json.dumps(r.to_dict()))
        assert doc["misses"] == r.misses and doc["expected"] == r.expected
        assert RecipeRow.from_dict(doc) == r


def _result(**spec):
    trace, meta, _ = generate(SynthSpec(dp=2, pp=1, steps=12, jitter=0.02, seed=5, **spec))
    return analyze_table(build_table(trace, meta)).result


@pytest.mark.parametrize("condition,spec,cause", [
    ("slow-forward", dict(slow_workers=[(1, 0, 3.0)]), "worker"),
    ("slow-loader", dict(slow_loaders=[(1, 0.6, 1.0)]), "host"),
])
def test_a_synthetic_straggler_on_dp_rank_1_is_scored_right(condition, spec, cause) -> None:
    """Jobs whose straggler is known by construction (dp 2, DP rank 1 slowed): the row names
    it first, confidently, without the rank that waits."""
    row = row_of(RunCase("loop", condition, 0), _result(**spec), 0, None, None, "-")
    assert (row.cause, row.workers[:1]) == (cause, ("1,0",)), row.summary
    assert row.late_first_confident and not row.waiter_blamed and not row.misses
    assert row.summary.startswith("job synth (dp 2 x pp 1")
    assert row.evidence and all(e in row.summary for e in row.evidence)


def test_a_synthetic_healthy_job_names_no_worker() -> None:
    row = row_of(RunCase("hf", "healthy", 1), _result(), 2, 1.0, 0.5, "-")
    assert not row.names_worker and row.healthy_blame is False and not row.misses
    assert (row.name, row.hog, row.wall_s, row.load_1m) == ("hf-healthy-01", 2, 1.0, 0.5)


def _keep(folder: Path, case: RunCase, **spec) -> Path:
    run = folder / case.name
    trace_dir = RECIPES[case.recipe].trace_folder(run)
    write_synth(SynthSpec(dp=2, pp=1, steps=8, jitter=0.02, seed=3, **spec), trace_dir)
    (run / CASE_FILE).write_text(json.dumps(
        {"case": case.to_dict(), "hog": 0, "wall_s": 3.0, "load_1m": 2.5}))
    return run


def test_kept_runs_are_rescored(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    keep = tmp_path / "keep"
    _keep(keep, RunCase("hf", "slow-forward", 0), slow_workers=[(1, 0, 3.0)])
    _keep(keep, RunCase("loop", "healthy", 0))
    (keep / "lightning-healthy-00").mkdir()  # a run that failed: reported, not scored
    assert main(["probe", "recipe-eval", "--reanalyse", str(keep), "--json"]) == 0
    out = capsys.readouterr()
    rows = [RecipeRow.from_dict(r) for r in json.loads(out.out)]
    assert [r.name for r in rows] == ["loop-healthy-00", "hf-slow-forward-00"]  # as they ran
    assert rows[1].late_first_confident and not rows[0].names_worker
    assert (rows[1].wall_s, rows[1].load_1m) == (3.0, 2.5)
    assert "1 folder(s)" in out.err and "lightning-healthy-00" in out.err
    assert main(["probe", "recipe-eval", "--reanalyse", str(keep), "--conditions",
                 "healthy"]) == 0
    report = capsys.readouterr().out
    assert "| loop | healthy | 1 |" in report and "slow-forward" not in report


def test_a_damaged_record_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run = _keep(tmp_path, RunCase("loop", "healthy", 0))
    for bad, word in (({"recipe": "loop", "condition": "healthy"}, "'index' missing"),
                      ({"recipe": "keras", "condition": "healthy", "index": 0}, "keras"),
                      ({"recipe": "loop", "condition": "healthy", "index": "0"},
                       "wrong type")):
        (run / CASE_FILE).write_text(json.dumps({"case": bad, "hog": 0}))
        assert main(["probe", "recipe-eval", "--reanalyse", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert word in err and str(run / CASE_FILE) in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv,word", [
    (["--recipes", "loop,keras"], "--recipes: unknown name 'keras'"),
    (["--conditions", ","], "--conditions: no name given"),
    (["--reanalyse", "x", "--keep", "y"], "--keep: not with --reanalyse"),
    (["--reanalyse", "x", "--repeat", "2"], "--repeat: not with --reanalyse"),
    (["--reanalyse", "x", "--hog", "1"], "--hog: not with --reanalyse"),
    (["--repeat", "0"], "--repeat"),
    (["--hog", "100"], "--hog"),
])
def test_bad_options_end_with_one_line(argv, word, capsys: pytest.CaptureFixture) -> None:
    assert main(["probe", "recipe-eval", *argv]) == 2
    err = capsys.readouterr().err
    assert word in err and len(err.strip().splitlines()) == 1, err


def test_it_must_run_from_the_repository_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["probe", "recipe-eval", "--keep", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert "from the repository root" in err and "docs/snippets/ddp_loop.py" in err
    assert not (tmp_path / "k").exists()  # nothing was run or created


def test_the_plan_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = plan(list(RECIPES), list(CONDITIONS), 2)
    assert len(runs) == 18 and len({r.name for r in runs}) == 18
    assert [r.name for r in runs[:4]] == ["loop-healthy-00", "loop-slow-forward-00",
                                          "loop-slow-loader-00", "lightning-healthy-00"]
    for knob in KNOBS:
        monkeypatch.setenv(knob, "0")  # never inherited: a healthy run stays healthy
    env = run_env(CONDITIONS["healthy"])
    assert not set(KNOBS) & set(env) and env["OMP_NUM_THREADS"] == "1"
    import stragglers

    src = str(Path(stragglers.__file__).resolve().parents[1])
    assert env["PYTHONPATH"].split(os.pathsep)[0] == src
    fwd = run_env(CONDITIONS["slow-forward"])
    assert (fwd["SLOW_RANK"], fwd["SLOW_FACTOR"]) == ("1", "3") and "SLOW_LOADER_MS" not in fwd
    assert RECIPES["hf"].shown("runs/x") == (
        "torchrun --standalone --nproc-per-node 2 docs/snippets/hf_trainer.py runs/x")


def _fake_recipe(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """Every recipe runs ``python -c code`` instead of its snippet."""
    from stragglers.evaluation import recipe_eval

    monkeypatch.setattr(recipe_eval.Recipe, "argv",
                        lambda self, out: [sys.executable, "-c", code, str(out)])


def test_a_failed_run_is_reported_not_scored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture) -> None:
    _fake_recipe(monkeypatch, "import sys; print('boom'); sys.exit(3)")
    monkeypatch.chdir(REPO)
    keep = tmp_path / "keep"
    assert main(["probe", "recipe-eval", "--recipes", "hf", "--conditions", "healthy",
                 "--keep", str(keep)]) == 1
    err = capsys.readouterr().err
    assert "run hf-healthy-00 failed (exit 3)" in err and "boom" in err
    run = keep / "hf-healthy-00"
    assert "boom" in (run / LOG_FILE).read_text() and not (run / CASE_FILE).exists()
    assert json.loads((keep / ROWS_FILE).read_text()) == []


def test_a_run_past_its_time_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_recipe(monkeypatch, "import time; print('started', flush=True); time.sleep(60)")
    t0 = time.perf_counter()
    rows, failures = run_all([RunCase("loop", "slow-loader", 0)], VerdictConfig(),
                             keep=str(tmp_path / "k"), timeout=3)
    assert time.perf_counter() - t0 < 30
    assert rows == [] and [(f.name, f.returncode) for f in failures] == [
        ("loop-slow-loader-00", None)]
    assert "started" in failures[0].tail


@pytest.mark.slow
def test_one_recipe_end_to_end_kept_and_reanalysed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    """The loop recipe with a slow loader, once: run, keep, score; re-scoring the kept run
    gives the same row. The verdict itself is not asserted (that is what the benchmark
    measures)."""
    pytest.importorskip("torch")
    monkeypatch.chdir(REPO)
    keep = tmp_path / "keep"
    argv = ["probe", "recipe-eval", "--recipes", "loop", "--conditions", "slow-loader",
            "--keep", str(keep), "--json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1
    row = RecipeRow.from_dict(rows[0])
    assert (row.name, row.recipe, row.condition, row.expected) == (
        "loop-slow-loader-00", "loop", "slow-loader", "host")
    assert 0.0 <= row.confidence <= 1.0 and row.slowdown >= 1.0 and row.summary
    run = keep / row.name
    assert (run / "trace.parquet").is_file() and (run / CASE_FILE).is_file()
    log = (run / LOG_FILE).read_text()
    assert log.startswith("$ SLOW_LOADER_RANK=1 SLOW_LOADER_MS=130 torchrun")
    record = json.loads((run / CASE_FILE).read_text())
    assert record["case"] == {"recipe": "loop", "condition": "slow-loader", "index": 0}
    assert json.loads((keep / ROWS_FILE).read_text()) == rows
    assert main(["probe", "recipe-eval", "--reanalyse", str(keep), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == rows
    # a second run into the same folder replaces the kept run
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in again] == [row.name]


def test_a_row_replaced_keeps_its_derived_scores() -> None:
    r = replace(ROWS[0], workers=("0,0", "1,0"))
    assert r.late_first is False and r.waiter_blamed and r.misses


def _sched_run(tmp_path: Path, waited: dict[str, tuple[float, float]]) -> Path:
    """A run folder with a probe rank file (spans from t=100 to t=110) and a run-queue
    series: each rank's waited seconds at t=99 and t=111."""
    import json

    run = tmp_path / "run"
    (run / "probe").mkdir(parents=True)
    (run / "probe" / "rank-00000.jsonl").write_text(
        '{"kind": "header"}\n'
        '{"kind": "span", "step": 2, "start": 100.0, "end": 101.0}\n'
        '{"kind": "span", "step": 9, "start": 109.0, "end": 110.0}\n')
    series = [[99.0, {r: a for r, (a, _) in waited.items()}],
              [111.0, {r: b for r, (_, b) in waited.items()}]]
    (run / "run-queue.json").write_text(json.dumps({"series": series}))
    return run


def test_contention_names_the_rank_the_machine_slowed(tmp_path: Path) -> None:
    """Independent truth from the run queue: rank 1's training thread waited 3 s of the 10 s
    of recorded steps, rank 0's 1 s: rank 1 was slowed by the machine (by 20% of the time,
    over the 10% limit); 1.5 s against 1 s is not."""
    from stragglers.evaluation.recipe_eval import contention

    got = contention(_sched_run(tmp_path, {"0": (5.0, 6.0), "1": (5.0, 8.0)}))
    assert got is not None and got["rank"] == "1"
    assert got["share"] == {"0": pytest.approx(0.1), "1": pytest.approx(0.3)}
    close = contention(_sched_run(tmp_path / "b", {"0": (5.0, 6.0), "1": (5.0, 6.5)}))
    assert close is not None and close["rank"] is None
    assert contention(tmp_path / "nothing") is None


def test_naming_the_rank_the_machine_slowed_is_right() -> None:
    base = ROWS[0]
    healthy = next(r for r in ROWS if not r.slowed)
    named = replace(healthy, workers=("1,0",), confidence=0.9, contended="1,0")
    assert named.healthy_blame is False and not named.misses
    other = replace(named, contended="0,0")
    assert other.healthy_blame is True
    assert base is ROWS[0]


def test_a_slowed_run_whose_waiter_the_machine_slowed_is_listed_not_scored() -> None:
    from stragglers.evaluation.recipe_eval import targets

    slowed = next(r for r in ROWS if r.slowed)
    both = replace(slowed, workers=("0,0",), confidence=0.99, contended="0,0")
    assert both.machine_slowed_waiter and not both.misses
    plain = replace(slowed, workers=("0,0",), confidence=0.99)
    assert plain.misses
    n = len([r for r in ROWS if r.slowed])
    assert targets([*ROWS, both])[0].runs == n
    assert "machine slowed the waiting rank 0,0" in format_report([*ROWS, both])
