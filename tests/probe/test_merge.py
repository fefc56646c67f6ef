"""Merging rank files: alignment, step selection, ids, structure checks, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stragglers.errors import InputError
from stragglers.probe.check import check_trace
from stragglers.probe.merge import TRACE_COLUMNS, load_meta, merge_dir, read_rank_file

from .synthetic import write_job


def test_merge_writes_the_schema(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in", dp=2)
    result = merge_dir(tmp_path / "in", meta, tmp_path / "out")
    trace = pd.read_parquet(tmp_path / "out" / "trace.parquet")
    assert tuple(trace.columns) == TRACE_COLUMNS
    assert result.problems == []
    assert result.steps == [5, 6, 7]
    written = (tmp_path / "out" / "meta.yaml").read_text().splitlines()
    assert [line.split(":")[0] for line in written] == [
        "trial_name", "run_id", "dp_size", "dsp_size", "pp_size", "tp_size", "vpp_size",
        "world_size"]
    # rank = stage * dp_size + dp_rank, the reference traces' numbering
    pairs = trace[["dp_rank", "stage", "rank"]].drop_duplicates()
    assert (pairs["rank"] == pairs["stage"] * 2 + pairs["dp_rank"]).all()
    # start_ts is relative to the step's earliest start over all workers
    assert np.allclose(trace.groupby("step")["start_ts"].min(), 0.0)
    # ids by the schema's conventions
    comp = trace[trace["optype"].isin(["forward-compute", "backward-compute"])]
    assert (comp["gmc"] == comp["stage"]).all() and (comp["mc"] == 0).all()
    assert sorted(comp["mb_id"].unique()) == [0, 1]
    assert (trace.loc[trace["optype"] == "gc", "mb_id"] == 0).all()
    coll = trace[trace["optype"].isin(["params-all-gather", "grads-reduce-scatter"])]
    assert (coll["mc"] == 0).all() and (coll["gmc"] == -1).all()
    p2p = trace[trace["optype"].astype(str).str.contains("send|recv")]
    assert (p2p[["mc", "gmc", "mb_id"]] == -1).all().all()


def test_seq_ids_and_combined_ops(tmp_path: Path) -> None:
    write_job(tmp_path / "in")
    trace = merge_dir(tmp_path / "in", {"dp_size": 1, "pp_size": 2}).trace
    w = trace[(trace["stage"] == 0) & (trace["step"] == 5)]
    fs = w[w["optype"] == "forward-send"].sort_values("seq_id")
    br = w[w["optype"] == "backward-recv"].sort_values("seq_id")
    assert list(fs["seq_id"]) == [0, 1] and list(br["seq_id"]) == [0, 1]
    # forward-send 1 and backward-recv 0 are one combined call: identical timing
    assert fs.iloc[1]["start_ts"] == br.iloc[0]["start_ts"]
    assert fs.iloc[1]["duration"] == br.iloc[0]["duration"]
    for _, ops in trace.groupby(["dp_rank", "stage", "step", "optype"], observed=True):
        ordered = ops.sort_values("start_ts")
        assert list(ordered["seq_id"]) == list(range(len(ops)))


def test_clock_offsets_are_applied(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "plain", dp=2)
    plain = merge_dir(tmp_path / "plain", meta).trace
    write_job(tmp_path / "skewed", dp=2, skew={1: 250.0, 2: -3.5, 3: 0.02})
    skewed = merge_dir(tmp_path / "skewed", meta).trace
    assert np.allclose(plain["start_ts"], skewed["start_ts"], atol=1e-9)
    assert np.allclose(plain["duration"], skewed["duration"], atol=1e-9)


def test_unaligned_clocks_fail_the_structure_check(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in", skew={1: 0.05}, record_offsets=False)
    with pytest.raises(InputError, match="clocks misaligned"):
        merge_dir(tmp_path / "in", meta)
    result = merge_dir(tmp_path / "in", meta, tmp_path / "out", strict=False)
    assert any("misaligned" in p for p in result.problems)
    assert (tmp_path / "out" / "trace.parquet").exists()


def test_unfinished_steps_and_truncated_lines(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in", steps=4, unfinished={1: 8})
    with open(tmp_path / "in" / "rank-00000.jsonl", "a") as fh:
        fh.write('{"kind": "span", "step": 9, "optyp')  # crash in mid-write
    result = merge_dir(tmp_path / "in", meta)
    assert result.steps == [5, 6, 7]
    assert result.dropped_steps == [8]  # step 9 never got a complete record
    assert sorted(result.trace["step"].unique()) == [5, 6, 7]


def test_corrupt_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    write_job(tmp_path / "in")
    path = tmp_path / "in" / "rank-00001.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(3, "{not json")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 4 is not JSON"):
        read_rank_file(path)


def test_missing_and_duplicate_workers(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in", dp=2)
    (tmp_path / "in" / "rank-00003.jsonl").unlink()
    with pytest.raises(InputError, match="no rank file for 1 worker.*dp_rank=1 stage=1"):
        merge_dir(tmp_path / "in", meta)
    write_job(tmp_path / "dup")
    src = (tmp_path / "dup" / "rank-00001.jsonl").read_text()
    (tmp_path / "dup" / "rank-00007.jsonl").write_text(src.replace('"rank": 1', '"rank": 7'))
    with pytest.raises(InputError, match="two rank files for worker dp_rank=0 stage=1"):
        merge_dir(tmp_path / "dup", {"dp_size": 1, "pp_size": 2})


def test_tensor_parallel_ranks_are_collapsed(tmp_path: Path) -> None:
    write_job(tmp_path / "in")
    lines = (tmp_path / "in" / "rank-00000.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header.update(rank=2, tp_rank=1)
    shifted = [json.dumps(header)] + lines[1:]
    (tmp_path / "in" / "rank-00002.jsonl").write_text("\n".join(shifted) + "\n")
    meta = {"dp_size": 1, "pp_size": 2, "tp_size": 2}
    result = merge_dir(tmp_path / "in", meta)
    assert result.meta["world_size"] == 4
    assert sorted(result.trace["rank"].unique()) == [0, 1]


def test_meta_errors(tmp_path: Path) -> None:
    write_job(tmp_path / "in")
    with pytest.raises(InputError, match="missing pp_size"):
        load_meta({"dp_size": 1})
    with pytest.raises(InputError, match="world_size 3"):
        load_meta({"dp_size": 1, "pp_size": 2, "world_size": 3})
    with pytest.raises(InputError, match="no --meta given and no job.yaml"):
        merge_dir(tmp_path / "in")
    with pytest.raises(InputError, match="outside dp_size=1 pp_size=1"):
        merge_dir(tmp_path / "in", {"dp_size": 1, "pp_size": 1})
    with pytest.raises(InputError, match="no rank-"):
        merge_dir(tmp_path, {"dp_size": 1, "pp_size": 2})


def test_check_finds_a_missing_op_and_boundary_violations(tmp_path: Path) -> None:
    meta = load_meta(write_job(tmp_path / "in", dp=2))
    trace = merge_dir(tmp_path / "in", meta).trace
    drop = trace.index[(trace["optype"] == "optimizer") & (trace["dp_rank"] == 1)
                       & (trace["stage"] == 1) & (trace["step"] == 6)]
    problems = check_trace(trace.drop(drop), meta)
    assert any("differ from" in p for p in problems)
    assert any("0 x optimizer, expected 1" in p for p in problems)
    bad = trace.copy()
    bad["optype"] = bad["optype"].astype(str)
    first_recv = bad.index[(bad["optype"] == "backward-recv") & (bad["stage"] == 0)][0]
    bad.loc[first_recv, "optype"] = "forward-recv"
    problems = check_trace(bad, meta)
    assert any("forward-recv on a boundary stage" in p for p in problems)


def test_analyzer_accepts_the_merged_trace(tmp_path: Path) -> None:
    analysis = pytest.importorskip("stragglers.analysis")
    write_job(tmp_path / "in", dp=2, steps=4)
    merge_dir(tmp_path / "in", {"dp_size": 2, "pp_size": 2}, tmp_path / "out")
    result = analysis.analyze_files(tmp_path / "out" / "trace.parquet",
                                    tmp_path / "out" / "meta.yaml").to_document()
    # identical steps on identical DP ranks: hardly any slowdown to find
    assert result["slowdown"] == pytest.approx(1.0, abs=0.02)
    assert result["steps"] == [5, 6, 7, 8]
