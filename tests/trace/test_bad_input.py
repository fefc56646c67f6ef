"""Bad inputs give exit code 2 and a one-line reason naming the file/field/row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.synth import SynthSpec, write_synth
from stragglers.trace import JobMeta, TraceColumns, build_table, read_meta, read_trace, write_trace
from tests.analysis import handmade


@pytest.fixture()
def job(tmp_path: Path) -> dict[str, Path]:
    return write_synth(SynthSpec(dp=2, pp=4, microbatches=4, steps=3), tmp_path / "job")


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    err = capsys.readouterr().err.strip()
    return code, err


def analyze(trace: Path, meta: Path, capsys, tmp_path: Path) -> tuple[int, str]:
    return run_cli(["analyze", str(trace), "--meta", str(meta), "--out",
                    str(tmp_path / "out"), "--no-timelines"], capsys)


def rewrite(job: dict[str, Path], tmp_path: Path, keep) -> Path:
    trace = read_trace(job["trace"])
    out = tmp_path / "bad.parquet"
    write_trace(trace.take(keep(trace)), out)
    return out


def assert_one_line(code: int, err: str, *needles: str) -> None:
    assert code == 2
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, (n, err)


@pytest.mark.slow
def test_good_input_exits_0(job, capsys, tmp_path):
    code, err = analyze(job["trace"], job["meta"], capsys, tmp_path)
    assert code == 0 and err == ""


def test_truncated_parquet(job, capsys, tmp_path):
    data = job["trace"].read_bytes()
    bad = tmp_path / "trunc.parquet"
    bad.write_bytes(data[: len(data) // 2])
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "trunc.parquet",
                    "not a readable parquet")


def test_missing_column(job, capsys, tmp_path):
    table = pq.read_table(job["trace"]).drop(["duration"])
    bad = tmp_path / "nocol.parquet"
    pq.write_table(table, bad)
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "nocol.parquet",
                    "missing", "duration")


def test_missing_worker(job, capsys, tmp_path):
    bad = rewrite(job, tmp_path, lambda t: ~((t.dp_rank == 1) & (t.stage == 2) & (t.step == 1)))
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "dp_rank 1 stage 2",
                    "no ops in step 1")


@pytest.mark.parametrize("change,needle", [
    ({"dp_size": 4, "world_size": 16}, "dp_rank"),
    ({"pp_size": 2, "world_size": 4}, "stage"),
    ({"world_size": 99}, "world_size"),
    ({"dp_size": 0}, "dp_size"),
])
def test_contradictory_metadata(job, capsys, tmp_path, change, needle):
    meta = yaml.safe_load(job["meta"].read_text()) | change
    bad = tmp_path / "meta.yaml"
    bad.write_text(yaml.safe_dump(meta))
    assert_one_line(*analyze(job["trace"], bad, capsys, tmp_path), needle)


def test_step_missing_optimizer_op(job, capsys, tmp_path):
    from stragglers.trace.schema import OPTYPE_CODE

    bad = rewrite(job, tmp_path, lambda t: ~((t.optype == OPTYPE_CODE["optimizer"])
                                             & (t.step == 2) & (t.dp_rank == 0)
                                             & (t.stage == 1)))
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path),
                    "dp_rank 0 stage 1 step 2 lacks op optimizer")


def test_cycle(capsys, tmp_path):
    F, B, FS, FR, BS, BR = (handmade.F, handmade.B, handmade.FS, handmade.FR, handmade.BS,
                            handmade.BR)
    tail = [(handmade.GC, 9, 9), (handmade.LN, 9, 9.01), (handmade.EMB, 9.01, 9.2),
            (handmade.CLIP, 9.2, 9.3), (handmade.OPT, 9.3, 9.6)]
    # Stage 0 runs B0 before F1 while stage 1 needs F1 before B0: a deadlock.
    w = {(0, 0): [(F, 0, 1), (FS, 1, 1.1), (BR, 1.1, 3), (B, 3, 5), (F, 5, 6), (FS, 6, 6.1),
                  (BR, 6.1, 7), (B, 7, 9), *tail],
         (0, 1): [(FR, 0, 1.1), (F, 1.1, 2.1), (FR, 2.1, 2.2), (F, 2.2, 3.2), (B, 3.2, 5.2),
                  (BS, 5.2, 5.3), (B, 5.3, 7.3), (BS, 7.3, 7.4), *tail]}
    trace = handmade.trace_from_workers(w, pp=2)
    path = write_trace(trace, tmp_path / "cycle.parquet")
    meta = tmp_path / "meta.yaml"
    meta.write_text(yaml.safe_dump({"dp_size": 1, "pp_size": 2}))
    assert_one_line(*analyze(path, meta, capsys, tmp_path), "dependency cycle",
                    "forward-compute seq 1 on stage 0", "backward-compute seq 0 on stage 0")


def test_duplicate_op(job, capsys, tmp_path):
    trace = read_trace(job["trace"])
    idx = np.concatenate([np.arange(len(trace)), [5]])
    bad = write_trace(trace.take(idx), tmp_path / "dup.parquet")
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "duplicate op")


def test_negative_duration(job, capsys, tmp_path):
    trace = read_trace(job["trace"])
    trace.duration = trace.duration.copy()
    trace.duration[7] = -0.5
    bad = write_trace(trace, tmp_path / "neg.parquet")
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "duration", "negative",
                    "row 7")


def test_non_monotonic_seq(job, capsys, tmp_path):
    from stragglers.trace.schema import OPTYPE_CODE

    trace = read_trace(job["trace"])
    fc = np.flatnonzero((trace.optype == OPTYPE_CODE["forward-compute"]) & (trace.seq_id == 1))
    trace.start_ts = trace.start_ts.copy()
    trace.start_ts[fc[0]] = -1.0
    bad = write_trace(trace, tmp_path / "order.parquet")
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "seq_id", "non-monotonic")


def test_unknown_optype_and_bad_jsonl(job, capsys, tmp_path):
    jsonl = write_trace(read_trace(job["trace"]), tmp_path / "t.jsonl")
    rows = jsonl.read_text().splitlines()
    rec = json.loads(rows[3])
    rec["optype"] = "params-all-gather-v2"
    rows[3] = json.dumps(rec)
    bad = tmp_path / "unknown.jsonl"
    bad.write_text("\n".join(rows) + "\n")
    code, err = analyze(bad, job["meta"], capsys, tmp_path)
    assert_one_line(code, err, "unknown operation type")
    rows[5] = "{not json"
    bad.write_text("\n".join(rows) + "\n")
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "unknown.jsonl:6",
                    "not valid JSON")


def test_missing_files(capsys, tmp_path):
    assert_one_line(*analyze(tmp_path / "nope.parquet", tmp_path / "m.yaml", capsys, tmp_path),
                    "not found")


# --- issue 8: the error contract of trace and metadata reading -----------------------------

def jsonl_with(job: dict[str, Path], tmp_path: Path, line: int, key: str, raw: str) -> Path:
    """The job's trace as JSON lines with field ``key`` of line ``line`` (1-based) set to the
    raw JSON token ``raw``."""
    src = write_trace(read_trace(job["trace"]), tmp_path / "t.jsonl")
    rows = src.read_text().splitlines()
    rec = json.loads(rows[line - 1])
    rec[key] = "@@"
    rows[line - 1] = json.dumps(rec).replace('"@@"', raw)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(rows) + "\n")
    return bad


@pytest.mark.parametrize("key,raw,needle", [
    ("step", '"3"', "field 'step' must be an integer (64-bit), got '3'"),
    ("duration", "[1]", "field 'duration' must be a number, got [1]"),
    ("optype", "7", "field 'optype' must be a string, got 7"),
    ("duration", "[" * 100_000 + "]" * 100_000, "nesting too deep"),
    ("step", "9" * 5000, "an integer with 5000 digits (limit 30)"),
    ("duration", "1e999", "number '1e999' overflows a 64-bit float"),
    ("start_ts", "NaN", "column 'start_ts' is not finite (nan) at line 5"),
    ("step", "9223372036854775808", "field 'step' must be an integer (64-bit)"),
])
def test_jsonl_value_of_the_wrong_type_names_the_line(job, capsys, tmp_path, key, raw,
                                                      needle):
    bad = jsonl_with(job, tmp_path, 5, key, raw)
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "bad.jsonl", needle)


def test_jsonl_bytes_that_are_not_utf8(job, capsys, tmp_path):
    src = write_trace(read_trace(job["trace"]), tmp_path / "t.jsonl")
    rows = src.read_bytes().split(b"\n")
    rows[2] = rows[2].replace(b'"optype": "', b'"optype": "\xff')
    bad = tmp_path / "bytes.jsonl"
    bad.write_bytes(b"\n".join(rows))
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "bytes.jsonl:3:",
                    "not UTF-8")


def test_jsonl_truncated_and_duplicate_key(job, capsys, tmp_path):
    src = write_trace(read_trace(job["trace"]), tmp_path / "t.jsonl")
    data = src.read_bytes()
    n_lines = data.count(b"\n")
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[:-30])
    assert_one_line(*analyze(cut, job["meta"], capsys, tmp_path), f"cut.jsonl:{n_lines}:",
                    "not valid JSON")
    dup = jsonl_with(job, tmp_path, 2, "mc", '0, "mc": 1')
    assert_one_line(*analyze(dup, job["meta"], capsys, tmp_path), "bad.jsonl:2:",
                    "key 'mc' appears twice")


def test_row_errors_of_jsonl_name_the_line(job, capsys, tmp_path):
    """A value error found after parsing names the file's line, blank lines included."""
    src = write_trace(read_trace(job["trace"]), tmp_path / "t.jsonl")
    rows = src.read_text().splitlines()
    rec = json.loads(rows[6])
    rec["duration"] = -0.5
    rows[6] = json.dumps(rec)
    bad = tmp_path / "neg.jsonl"
    bad.write_text("\n\n" + "\n".join(rows) + "\n")  # two blank lines first
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "neg.jsonl",
                    "field 'duration' is negative", "e.g. line 9:")


def test_row_numbers_survive_step_selection(job, capsys, tmp_path):
    trace = read_trace(job["trace"])
    trace.duration = trace.duration.copy()
    i = int(np.flatnonzero(trace.step == 2)[3])
    trace.duration[i] = -1.0
    bad = write_trace(trace, tmp_path / "neg.parquet")
    code, err = run_cli(["analyze", str(bad), "--meta", str(job["meta"]), "--steps", "2",
                         "--out", str(tmp_path / "o"), "--no-timelines"], capsys)
    assert_one_line(code, err, f"e.g. row {i}:")


@pytest.mark.parametrize("column,array,needle", [
    ("step", lambda c: pa.array([str(v) for v in c.to_pylist()]),
     "column 'step' must hold integers but has Arrow type string (e.g. row 0: '0')"),
    ("start_ts", lambda c: pa.array((c.to_numpy() * 1e6).astype("int64")).cast(
        pa.timestamp("us")), "column 'start_ts' must hold numbers but has Arrow type timestamp"),
    ("duration", lambda c: pa.array([[v] for v in c.to_pylist()]),
     "column 'duration' must hold numbers but has Arrow type list"),
    ("mc", lambda c: pa.array(np.where(np.arange(len(c)) == 4, 2.0**40, 0.0)),
     "column 'mc' has a value outside int16 at row 4"),
])
def test_parquet_column_of_the_wrong_type(job, capsys, tmp_path, column, array, needle):
    table = pq.read_table(job["trace"])
    i = table.column_names.index(column)
    bad = tmp_path / "types.parquet"
    pq.write_table(table.set_column(i, column, array(table.column(column))), bad)
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "types.parquet", needle)


def test_folder_and_bytes_instead_of_files(job, capsys, tmp_path):
    folder = tmp_path / "dir.parquet"
    folder.mkdir()
    assert_one_line(*analyze(folder, job["meta"], capsys, tmp_path), "dir.parquet",
                    "is a folder, expected a trace file")
    assert_one_line(*analyze(job["trace"], tmp_path, capsys, tmp_path),
                    "is a folder, expected a metadata file")
    meta = tmp_path / "m.yaml"
    meta.write_bytes(job["meta"].read_bytes() + b"# caf\xe9\n")
    assert_one_line(*analyze(job["trace"], meta, capsys, tmp_path), "m.yaml",
                    "not UTF-8 text")
    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"PAR1" + bytes(range(256)) * 8 + b"PAR1")
    assert_one_line(*analyze(garbage, job["meta"], capsys, tmp_path), "g.parquet",
                    "not a readable parquet file")


def with_column(job, tmp_path, name, values, file="bad.parquet"):
    table = pq.read_table(job["trace"])
    i = table.column_names.index(name)
    path = tmp_path / file
    pq.write_table(table.set_column(i, name, pa.array(values)), path)
    return path


def test_implausible_op_duration(job, capsys, tmp_path, monkeypatch):
    d = pq.read_table(job["trace"]).column("duration").to_numpy().astype(np.float32)
    d[7] = 3e38
    bad = with_column(job, tmp_path, "duration", d)
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "field 'duration'",
                    "exceeds 86,400 s", "row 7", "STRAGGLERS_MAX_OP_SECONDS")
    # the bound is documented and overridable: a 2-day op passes a 3-day bound
    d[7] = 2 * 86_400
    ok = with_column(job, tmp_path, "duration", d.astype(np.float64), "ok.parquet")
    assert_one_line(*analyze(ok, job["meta"], capsys, tmp_path), "exceeds 86,400 s")
    monkeypatch.setenv("STRAGGLERS_MAX_OP_SECONDS", str(3 * 86_400))
    trace = read_trace(ok)
    build_table(trace, read_meta(job["meta"]))  # accepted under the raised bound


def test_timestamps_in_the_wrong_unit(job, capsys, tmp_path):
    s = pq.read_table(job["trace"]).column("start_ts").to_numpy() * 1e3 + 1.7e12  # epoch ms
    bad = with_column(job, tmp_path, "start_ts", s)
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "field 'start_ts'",
                    "milli- or nanoseconds")


def test_all_zero_durations_are_refused(job, capsys, tmp_path):
    n = pq.read_metadata(job["trace"]).num_rows
    bad = with_column(job, tmp_path, "duration", np.zeros(n))
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "bad.parquet",
                    "field 'duration' is 0 for every compute op")


def test_integer_timestamps_have_a_resolution_of_one_second(job, capsys, tmp_path):
    s = pq.read_table(job["trace"]).column("start_ts").to_numpy()
    bad = with_column(job, tmp_path, "start_ts", np.round(s * 1000).astype(np.int64))
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "field 'start_ts'",
                    "resolution of 1 s", "stored as integers")


def test_float32_epoch_timestamps_are_refused(ref_dir, capsys, tmp_path):
    """The issue's case: AR with float32 epoch seconds (resolution 128 s) gave S = 1.23
    instead of 1.97 with confidence 1.00; now it is refused with the reason."""
    table = pq.read_table(ref_dir / "trace-AR.parquet")
    s = (table.column("start_ts").to_numpy().astype(np.float64) + 1.7e9).astype(np.float32)
    bad = tmp_path / "ar-epoch.parquet"
    pq.write_table(table.set_column(table.column_names.index("start_ts"), "start_ts",
                                    pa.array(s)), bad)
    assert_one_line(*analyze(bad, ref_dir / "meta-AR.yaml", capsys, tmp_path),
                    "ar-epoch.parquet", "field 'start_ts' has a resolution of 128 s",
                    "too coarse to order the ops")


def test_reference_traces_have_no_caveats(ref_dir):
    for name in ("AR", "ST"):
        table = build_table(read_trace(ref_dir / f"trace-{name}.parquet"),
                            read_meta(ref_dir / f"meta-{name}.yaml"))
        assert table.caveats == []


def test_coarse_timestamps_give_a_caveat(job):
    """float32 timestamps 2048 s into a run: resolution 2.4e-4 s, 2.7e-3 of the median
    compute duration (0.09 s): kept, with a caveat that makes results untrustworthy."""
    trace = read_trace(job["trace"])
    trace.start_ts = (trace.start_ts + 2048.0).astype(np.float32)
    trace.duration = trace.duration.astype(np.float32)
    table = build_table(trace, read_meta(job["meta"]))
    assert len(table.caveats) == 1
    assert "field 'start_ts' has a resolution of 0.000244 s" in table.caveats[0]
    assert build_table(read_trace(job["trace"]), read_meta(job["meta"])).caveats == []


def test_unknown_metadata_key_suggests_the_known_one(job, capsys, tmp_path):
    meta = tmp_path / "m.yaml"
    meta.write_text(job["meta"].read_text() + "vpp-size: 2\n")
    assert_one_line(*analyze(job["trace"], meta, capsys, tmp_path), "m.yaml",
                    "unknown key 'vpp-size' (did you mean 'vpp_size'?)", "'labels:'")


def test_free_form_keys_live_under_labels(job, tmp_path):
    meta = tmp_path / "m.yaml"
    meta.write_text(job["meta"].read_text() + "labels: {cluster: a100-7, note: rerun}\n")
    job_meta = read_meta(meta)
    assert job_meta.labels == {"cluster": "a100-7", "note": "rerun"}
    assert job_meta.to_dict()["labels"] == {"cluster": "a100-7", "note": "rerun"}
    meta.write_text(job["meta"].read_text() + "labels: {when: 2024-01-01}\n")
    with pytest.raises(InputError, match="labels.when: date value"):
        read_meta(meta)


@pytest.mark.slow
@pytest.mark.parametrize("text,needle", [
    ("vpp_size: 2\n", "the metadata says vpp_size 2 but the compute ops of stage 0 have "
                      "field 'mc' in {0} only"),
    ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", "nesting deeper than 64 levels"),
    ("labels: {n: " + "9" * 5000 + "}\n", "integer with 5000 digits"),
    ("labels: {a: &a [x, x, x], b: *a}\n", None),  # aliases that expand little are fine
])
def test_metadata_contradictions_and_bombs(job, capsys, tmp_path, text, needle):
    raw = yaml.safe_load(job["meta"].read_text())
    raw.pop("vpp_size", None)
    meta = tmp_path / "m.yaml"
    meta.write_text(yaml.safe_dump(raw) + text)
    code, err = analyze(job["trace"], meta, capsys, tmp_path)
    if needle is None:
        assert code == 0, err
    else:
        assert_one_line(code, err, needle)


def test_gmc_and_rank_must_agree_with_the_metadata(job, capsys, tmp_path):
    from stragglers.trace.schema import OPTYPE_CODE

    trace = read_trace(job["trace"])
    i = int(np.flatnonzero(trace.optype == OPTYPE_CODE["forward-compute"])[2])
    trace.gmc = trace.gmc.copy()
    trace.gmc[i] += 1
    bad = write_trace(trace, tmp_path / "gmc.parquet")
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "field 'gmc'",
                    "mc * pp_size + stage", f"row {i}")
    trace = read_trace(job["trace"])
    trace.rank = trace.rank.copy()
    trace.rank[trace.rank == trace.rank.max()] = 99
    bad = write_trace(trace, tmp_path / "rank.parquet")
    assert_one_line(*analyze(bad, job["meta"], capsys, tmp_path), "field 'rank'",
                    "outside [0, world_size=8)")


def test_sparse_trace_is_refused_without_allocating_the_dense_table(capsys, tmp_path):
    """50,000 op identities in step 0 and 50,000 steps of one op: the dense table would be
    2.5e9 cells (19 GiB of counts); it is refused from the rows alone."""
    import tracemalloc

    n = 50_000
    ids = np.arange(n)
    cols = {
        "dp_rank": np.zeros(2 * n, np.int32), "stage": np.zeros(2 * n, np.int16),
        "rank": np.zeros(2 * n, np.int32),
        "step": np.concatenate([np.zeros(n, np.int64), ids + 1]),
        "optype": np.concatenate([np.zeros(n, np.int8), np.full(n, 12, np.int8)]),
        "start_ts": np.concatenate([ids * 1e-3, np.zeros(n)]), "duration": np.full(2 * n, 1e-3),
        "seq_id": np.concatenate([ids, np.zeros(n)]).astype(np.int32),
        "mc": np.concatenate([np.zeros(n), -np.ones(n)]).astype(np.int16),
        "mb_id": np.concatenate([ids, -np.ones(n)]).astype(np.int32),
        "gmc": np.concatenate([np.zeros(n), -np.ones(n)]).astype(np.int32),
    }
    trace = TraceColumns(source="sparse.parquet", **cols)
    meta = JobMeta(dp_size=1, pp_size=1, world_size=1)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="step 1 lacks op forward-compute seq_id 0"):
            build_table(trace, meta)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak


def test_huge_seq_ids_do_not_size_arrays(job):
    """seq_id 2e9 on every first op: the key range is 1e11, the rows a few hundred."""
    import tracemalloc

    trace = read_trace(job["trace"])
    trace.seq_id = np.where(trace.seq_id == 0, 2_000_000_000, trace.seq_id).astype(np.int32)
    tracemalloc.start()
    try:
        table = build_table(trace, read_meta(job["meta"]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 2_000_000_000 in table.node_seq
    assert peak < 16 * 2**20, peak


def test_size_limits_refuse_before_reading(job, capsys, tmp_path, monkeypatch):
    jsonl = write_trace(read_trace(job["trace"]), tmp_path / "t.jsonl")
    monkeypatch.setenv("STRAGGLERS_MAX_TRACE_ROWS", "100")
    assert_one_line(*analyze(job["trace"], job["meta"], capsys, tmp_path),
                    "exceed the limit of 100", "STRAGGLERS_MAX_TRACE_ROWS")
    assert_one_line(*analyze(jsonl, job["meta"], capsys, tmp_path), "t.jsonl (lines)",
                    "exceed the limit of 100")
    monkeypatch.delenv("STRAGGLERS_MAX_TRACE_ROWS")
    monkeypatch.setenv("STRAGGLERS_MAX_WORKERS", "4")
    assert_one_line(*analyze(job["trace"], job["meta"], capsys, tmp_path),
                    "dp_size x pp_size: 8 workers", "limit of 4")
    meta = tmp_path / "m.yaml"
    meta.write_text("dp_size: 1000000000000\npp_size: 1\n")
    assert_one_line(*analyze(job["trace"], meta, capsys, tmp_path), "'dp_size'",
                    "exceeds 2,147,483,647")
