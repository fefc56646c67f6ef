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
    # the incomplete last line is counted and reported, not skipped silently
    n_lines = len((tmp_path / "in" / "rank-00000.jsonl").read_text().splitlines())
    assert result.incomplete_lines == [
        f"rank-00000.jsonl line {n_lines} (not valid JSON (Unterminated string starting at); "
        "a process killed while writing?)"]


def test_corrupt_line_in_the_middle_is_an_error(tmp_path: Path) -> None:
    write_job(tmp_path / "in")
    path = tmp_path / "in" / "rank-00001.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(3, "{not json")
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="rank-00001.jsonl: line 4: not valid JSON"):
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
    assert result.meta.world_size == 4
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


@pytest.mark.slow
def test_check_finds_a_missing_op_and_boundary_violations(tmp_path: Path) -> None:
    meta = load_meta(write_job(tmp_path / "in", dp=2))
    trace = merge_dir(tmp_path / "in", meta).trace
    drop = trace.index[(trace["optype"] == "optimizer") & (trace["dp_rank"] == 1)
                       & (trace["stage"] == 1) & (trace["step"] == 6)]
    problems = check_trace(trace.drop(drop), meta)
    assert any("refuses the merged trace" in p and "lacks op optimizer" in p for p in problems)
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


# --- issue 8: every bad record named, nothing silently fixed, atomic output ------------------

def _edit_line(path: Path, index: int, **changes: object) -> None:
    lines = path.read_text().splitlines()
    rec = json.loads(lines[index])
    rec.update(changes)
    lines[index] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


def _first_span(path: Path, optype: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines())
                if f'"{optype}"' in line and '"span"' in line)


def test_span_ending_before_it_starts_is_an_error(tmp_path: Path) -> None:
    """It used to become a zero duration without a word."""
    meta = write_job(tmp_path / "in")
    path = tmp_path / "in" / "rank-00000.jsonl"
    i = _first_span(path, "forward-compute")
    start = json.loads(path.read_text().splitlines()[i])["start"]
    _edit_line(path, i, end=start - 0.005)
    with pytest.raises(InputError, match=rf"rank-00000.jsonl: line {i + 1}: span ends before "
                                         r"it starts"):
        merge_dir(tmp_path / "in", meta)


@pytest.mark.parametrize("changes,needle", [
    ({"start": "soon"}, "field 'start' must be a finite number, got 'soon'"),
    ({"step": [5]}, "field 'step' must be an integer in [0, 2**31), got [5]"),
    ({"optypes": ["forward-compute-v2"]}, "unknown operation type 'forward-compute-v2'"),
    ({"optypes": []}, "field 'optypes' must be a non-empty list"),
    ({"mb_id": True}, "field 'mb_id' must be an integer"),
    ({"end": 1e12}, "span lasts 1e+12 s, beyond the limit of 86,400 s"),
])
def test_bad_record_fields_name_file_and_line(tmp_path: Path, changes: dict, needle: str
                                              ) -> None:
    meta = write_job(tmp_path / "in")
    path = tmp_path / "in" / "rank-00001.jsonl"
    i = _first_span(path, "forward-compute")
    _edit_line(path, i, **changes)
    with pytest.raises(InputError) as exc:
        merge_dir(tmp_path / "in", meta)
    assert f"rank-00001.jsonl: line {i + 1}: " in str(exc.value)
    assert needle in str(exc.value), str(exc.value)


def test_bytes_and_tokens_that_are_not_json_data(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in")
    path = tmp_path / "in" / "rank-00001.jsonl"
    data = path.read_bytes().split(b"\n")
    data[2] = data[2].replace(b'"span"', b'"sp\xffan"')
    path.write_bytes(b"\n".join(data))
    with pytest.raises(InputError, match="rank-00001.jsonl: line 3: not UTF-8"):
        merge_dir(tmp_path / "in", meta)
    write_job(tmp_path / "in")
    i = _first_span(path, "gc")
    lines = path.read_text().splitlines()
    lines[i] = lines[i].replace('"start": ', '"start": NaN, "x": ')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=f"line {i + 1}: NaN is not a finite number"):
        merge_dir(tmp_path / "in", meta)


def test_merge_cli_reports_the_incomplete_last_line(tmp_path: Path, capsys) -> None:
    import yaml

    from stragglers.cli import main

    meta = write_job(tmp_path / "in", steps=3, unfinished={0: 7})
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    with open(tmp_path / "in" / "rank-00000.jsonl", "a") as fh:
        fh.write('{"kind": "span", "step": 7, "optypes": ["gc"], "sta')
    code = main(["probe", "merge", str(tmp_path / "in"), "--meta", str(tmp_path / "meta.yaml"),
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "left out the unreadable last line of 1 rank file(s): rank-00000.jsonl line" in err
    assert "dropped 1 step(s) not finished by every worker: [7]" in err


def test_merge_output_is_atomic_and_checked_first(tmp_path: Path, capsys) -> None:
    import yaml

    from stragglers.cli import main

    meta = write_job(tmp_path / "in")
    (tmp_path / "meta.yaml").write_text(yaml.safe_dump(meta))
    (tmp_path / "file").write_text("x")
    argv = ["probe", "merge", str(tmp_path / "in"), "--meta", str(tmp_path / "meta.yaml")]
    assert main([*argv, "--out", str(tmp_path / "file")]) == 2
    assert "stragglers probe merge: error: --out" in capsys.readouterr().err
    out = tmp_path / "out"
    out.mkdir()
    (out / "trace.parquet").write_text("earlier")
    path = tmp_path / "in" / "rank-00001.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(4, "{broken")
    path.write_text("\n".join(lines) + "\n")
    assert main([*argv, "--out", str(out)]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["trace.parquet"]  # as it was
    assert (out / "trace.parquet").read_text() == "earlier"


def test_metadata_read_under_the_contract(tmp_path: Path) -> None:
    write_job(tmp_path / "in")
    meta = tmp_path / "m.yaml"
    meta.write_bytes(b"dp_size: 1\npp_size: 2\nvpp-size: 1\n")
    with pytest.raises(InputError, match="did you mean 'vpp_size'"):
        merge_dir(tmp_path / "in", meta)
    meta.write_bytes(b"dp_size: 1\npp_size: 2\n# \xff\n")
    with pytest.raises(InputError, match="not UTF-8"):
        merge_dir(tmp_path / "in", meta)
    meta.write_text("dp_size: 1\npp_size: 2\nlabels: {site: lab}\n")
    assert load_meta(meta).labels == {"site": "lab"}


def test_merge_fills_host_from_each_rank_files_header(tmp_path: Path) -> None:
    """Each worker's rows carry the host its rank file's header names (ranks 0 and 2 on
    host a, 1 and 3 on host b), read back as the op table's worker names."""
    from stragglers.trace import build_table, read_meta, read_trace

    hosts = {0: "host-a", 1: "host-b", 2: "host-a", 3: "host-b"}
    meta = write_job(tmp_path / "in", dp=2, hosts=hosts)
    result = merge_dir(tmp_path / "in", meta, tmp_path / "out")
    assert result.problems == []
    trace = pd.read_parquet(tmp_path / "out" / "trace.parquet")
    assert tuple(trace.columns) == (*TRACE_COLUMNS, "host")
    pairs = trace[["rank", "host"]].astype({"host": str}).drop_duplicates()
    assert dict(zip(pairs["rank"], pairs["host"], strict=True)) == hosts
    table = build_table(read_trace(tmp_path / "out" / "trace.parquet"),
                        read_meta(tmp_path / "out" / "meta.yaml"))
    assert table.worker_name(1, 1) == "rank 3 (host-b)"
    assert table.worker_name(0, 1) == "rank 2 (host-a)"


def test_merge_without_host_names_writes_no_host_column(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in", dp=2)
    merge_dir(tmp_path / "in", meta, tmp_path / "out")
    assert "host" not in pd.read_parquet(tmp_path / "out" / "trace.parquet").columns


def test_merge_refuses_rank_files_that_disagree_on_host(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in", dp=2, hosts={0: "a", 1: "a", 2: "b"})
    with pytest.raises(InputError, match=r"rank-00003.jsonl: line 1: the header lacks field "
                                         r"'host', which rank-00000.jsonl has"):
        merge_dir(tmp_path / "in", meta)


def test_merge_refuses_a_host_that_is_not_a_string(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in", dp=2, hosts={0: "a", 1: "a", 2: "b", 3: 7})  # type: ignore[dict-item]
    with pytest.raises(InputError, match=r"rank-00003.jsonl: line 1: field 'host' must be a "
                                         r"non-empty string, got 7"):
        merge_dir(tmp_path / "in", meta)
