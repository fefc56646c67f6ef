"""Bad inputs give exit code 2 and a one-line reason naming the file/field/row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from stragglers.cli import main
from stragglers.synth import SynthSpec, write_synth
from stragglers.trace import read_trace, write_trace
from tests.whatif import handmade as H


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
    F, B, FS, FR, BS, BR = H.F, H.B, H.FS, H.FR, H.BS, H.BR
    tail = [(H.GC, 9, 9), (H.LN, 9, 9.01), (H.EMB, 9.01, 9.2), (H.CLIP, 9.2, 9.3),
            (H.OPT, 9.3, 9.6)]
    # Stage 0 runs B0 before F1 while stage 1 needs F1 before B0: a deadlock.
    w = {(0, 0): [(F, 0, 1), (FS, 1, 1.1), (BR, 1.1, 3), (B, 3, 5), (F, 5, 6), (FS, 6, 6.1),
                  (BR, 6.1, 7), (B, 7, 9), *tail],
         (0, 1): [(FR, 0, 1.1), (F, 1.1, 2.1), (FR, 2.1, 2.2), (F, 2.2, 3.2), (B, 3.2, 5.2),
                  (BS, 5.2, 5.3), (B, 5.3, 7.3), (BS, 7.3, 7.4), *tail]}
    trace = H.trace_from_workers(w, pp=2)
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
