"""The example job end to end: real 1F1B + DP training over gloo, probes, merge, analysis."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from stragglers.evaluation.fidelity import subset_trace
from stragglers.probe.check import check_trace
from stragglers.probe.merge import TRACE_COLUMNS, load_meta
from stragglers.testbed.job import JobConfig, run_job
from tests.conftest import SLOW_RANK

analysis = pytest.importorskip("stragglers.analysis")
pytest.importorskip("torch")


def _sequence(frame: pd.DataFrame) -> list[tuple[str, int]]:
    ordered = frame.sort_values(["start_ts", "seq_id", "optype"])
    return [(str(o), int(s)) for o, s in zip(ordered["optype"], ordered["seq_id"], strict=True)]


@pytest.mark.slow
def test_structure_matches_the_reference_trace(tmp_path: Path, ref_dir: Path) -> None:
    """dp 1 x pp 4, 4 microbatches: each stage records the reference's ops in its order."""
    cfg = JobConfig(out_dir=str(tmp_path), dp=1, pp=4, steps=4, warmup_steps=2, hidden=64,
                    heads=2, seq_len=32, vocab_size=128, gc_interval=0)
    summary = run_job(cfg)
    ours = pd.read_parquet(summary["trace"])
    ref = pd.read_parquet(ref_dir / "trace-ST.parquet")
    ref_step = ref["step"].min()
    for stage in range(4):
        mine = ours[(ours["stage"] == stage) & (ours["step"] == ours["step"].min())]
        theirs = ref[(ref["stage"] == stage) & (ref["dp_rank"] == 0) & (ref["step"] == ref_step)]
        # the reference records gc inside the last backward; ours runs after the schedule
        seq_mine = [x for x in _sequence(mine) if x[0] != "gc"]
        seq_ref = [x for x in _sequence(theirs) if x[0] != "gc"]
        assert seq_mine == seq_ref, f"stage {stage}"
        for col in ("mc", "gmc", "mb_id"):
            a = mine.assign(optype=mine["optype"].astype(str)).sort_values(["optype", "seq_id"])
            b = theirs.assign(optype=theirs["optype"].astype(str)).sort_values(
                ["optype", "seq_id"])
            assert (a[col].to_numpy() == b[col].to_numpy()).all(), f"stage {stage} column {col}"
        gc_row = mine[mine["optype"] == "gc"].iloc[0]
        compute = mine[mine["optype"].isin(["forward-compute", "backward-compute"])]
        assert gc_row["start_ts"] >= (compute["start_ts"] + compute["duration"]).max()


@pytest.mark.slow
def test_merged_trace_is_well_formed(slow_run: dict[str, Any]) -> None:
    summary, cfg = slow_run["summary"], slow_run["cfg"]
    trace = pd.read_parquet(summary["trace"])
    # the probe records GC time and the host each rank ran on
    assert tuple(trace.columns) == (*TRACE_COLUMNS, "gc_s", "host")
    assert ((trace["gc_s"] >= 0) & (trace["gc_s"] <= trace["duration"])).all()
    assert summary["trace_steps"] == list(range(cfg.warmup_steps, cfg.steps))
    assert summary["dropped_steps"] == []
    assert summary["max_clock_rtt_s"] == 0.0  # one machine: one clock, nothing to measure
    meta = load_meta(summary["meta"])
    assert (meta.dp_size, meta.pp_size, meta.world_size) == (2, 2, 4)
    assert check_trace(trace, meta) == []
    per_worker = trace.groupby(["dp_rank", "stage", "step"]).size().unstack("step")
    assert (per_worker.nunique(axis=1) == 1).all()  # same op count every step
    counts = trace[trace["step"] == cfg.warmup_steps].groupby(["stage", "optype"],
                                                              observed=True).size()
    for stage in (0, 1):
        assert counts[(stage, "forward-compute")] == 2 * cfg.microbatches  # 2 DP ranks
        assert counts[(stage, "embedding-grads-all-reduce")] == 2
    assert (0, "forward-recv") not in counts and (1, "forward-send") not in counts
    # the model really trains
    assert summary["loss_last"] < summary["loss_first"] - 0.3


@pytest.mark.slow
def test_comm_hooks_logged_the_jobs_calls(slow_run: dict[str, Any]) -> None:
    import json

    calls = [json.loads(line) for line in
             (slow_run["out"] / "probe" / "calls-rank-00001.jsonl").read_text().splitlines()]
    types = {c["type"] for c in calls}
    assert {"isend", "irecv", "all_reduce"} <= types
    cfg = slow_run["cfg"]
    steps = {c["step"] for c in calls if c["type"] == "isend"}
    assert steps == set(range(cfg.steps))
    sends = [c for c in calls if c["type"] == "isend"]
    assert {c["peer"] for c in sends} == {3}  # rank 1 (stage 0) sends to rank 3 (stage 1)
    assert {c["size"] for c in sends} == {cfg.micro_batch_size * cfg.seq_len * cfg.hidden * 4}


@pytest.mark.slow
def test_analyzer_accepts_the_trace_without_warnings(slow_run: dict[str, Any]) -> None:
    summary = slow_run["summary"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = analysis.analyze_files(summary["trace"], summary["meta"]).to_document()
    assert result["trustworthy"] is True
    assert result["discrepancy"] < 1.05


def _ratio_standard_error(summary: dict[str, Any]) -> float:
    """Relative standard error of mean(injected step times) / mean(clean step times)."""
    times = np.asarray(summary["step_times"])
    rel2 = 0.0
    for steps in (summary["injected_steps"], summary["clean_steps"]):
        t = times[steps]
        rel2 += (t.std(ddof=1) / t.mean()) ** 2 / len(t)
    return float(np.sqrt(rel2))


def test_ratio_standard_error_of_known_step_times() -> None:
    # injected steps 2.0 and 2.2 (mean 2.1, sd 0.1414), clean 1.0 and 1.0 (sd 0)
    summary = {"step_times": [9.0, 2.0, 1.0, 2.2, 1.0], "injected_steps": [1, 3],
               "clean_steps": [2, 4]}
    assert _ratio_standard_error(summary) == pytest.approx(0.1414214 / 2.1 / np.sqrt(2))


@pytest.mark.slow
def test_slow_worker_is_blamed_and_slowdown_matches(slow_run: dict[str, Any]) -> None:
    summary, cfg, out = slow_run["summary"], slow_run["cfg"], slow_run["out"]
    measured = summary["mean_injected_step_s"] / summary["mean_clean_step_s"]
    assert measured > 1.05, "the injected straggler did not slow the job down"
    injected = subset_trace(Path(summary["trace"]), summary["injected_steps"],
                            out / "trace-injected.parquet")
    result = analysis.analyze_files(injected, summary["meta"], exact_workers=True).to_document()
    attribution = result["attribution"]
    scores = attribution["worker"]
    assert attribution["worker_method"] == "exact"
    slow = f"{SLOW_RANK % cfg.dp},{SLOW_RANK // cfg.dp}"
    ranked = sorted(scores, key=scores.get, reverse=True)
    assert ranked[0] == slow, scores
    assert scores[slow] - scores[ranked[1]] > 0.02, scores  # it stands out
    assert result["slowdown"] > 1.0
    # The measured ratio is only as precise as the step times it comes from: on a loaded
    # machine they scatter, so the tolerance is 10% or three standard errors of the measured
    # ratio (from the spread of the injected and the clean step times of this very run),
    # whichever is larger. The what-if model also assumes a processor per rank: with more
    # runnable processes than cores (the job's 4 ranks on a 2-core machine under load, a CPU
    # hog beside it) ranks time-share, which the wall-clock ratio carries and the model does
    # not; there the bar is 15% (seen under a 2-process hog on 2 cores: 10.1% and 12.9%
    # apart in 7 runs, the other 5 within 10%).
    overcommitted = os.getloadavg()[0] > (os.cpu_count() or 1)
    tolerance = max(0.15 if overcommitted else 0.10, 3.0 * _ratio_standard_error(summary))
    assert abs(result["slowdown"] - measured) <= tolerance * measured, (
        result["slowdown"], measured, tolerance)
    assert result["discrepancy"] < 1.05
    # the clean steps of the same run: the worker stands out far less than when slowed (a
    # loaded machine's noise can lift any worker a little, so the bar is relative)
    clean = subset_trace(Path(summary["trace"]), summary["clean_steps"],
                         out / "trace-clean.parquet")
    base = analysis.analyze_files(clean, summary["meta"], exact_workers=True).to_document()
    clean_scores = base["attribution"]["worker"]
    others = max(v for k, v in clean_scores.items() if k != slow)
    lead = scores[slow] - scores[ranked[1]]
    assert clean_scores[slow] - others < 0.25 * lead, (clean_scores, scores)


@pytest.mark.slow
def test_last_stage_imbalance_is_classified(last_stage_run: dict[str, Any]) -> None:
    summary = last_stage_run["summary"]
    result = analysis.analyze_files(summary["trace"], summary["meta"]).to_document()
    assert result["verdict"]["cause"] == "last_stage", result["verdict"]
    assert result["trustworthy"] is True
    trace = pd.read_parquet(summary["trace"])
    fwd = trace[trace["optype"] == "forward-compute"].groupby("stage")["duration"].mean()
    assert fwd[1] > 1.5 * fwd[0]


@pytest.mark.slow
def test_cli_merge_reproduces_the_jobs_trace(slow_run: dict[str, Any], tmp_path: Path) -> None:
    from stragglers.cli import main

    out = slow_run["out"]
    code = main(["probe", "merge", str(out / "probe"), "--meta", str(out / "probe" / "job.yaml"),
                 "--out", str(tmp_path)])
    assert code == 0
    again = pd.read_parquet(tmp_path / "trace.parquet")
    first = pd.read_parquet(out / "trace.parquet")
    pd.testing.assert_frame_equal(again, first)
    assert np.isfinite(again["start_ts"]).all()


def test_cli_merge_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from stragglers.cli import main

    assert main(["probe", "merge", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no rank-*.jsonl probe files" in err and err.count("\n") == 1
