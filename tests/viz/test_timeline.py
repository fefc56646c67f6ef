"""Tests for stragglers.viz.timeline: Chrome trace layout, round trip, errors, speed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stragglers.viz.timeline import (
    op_category,
    read_chrome_trace,
    stack_steps,
    write_chrome_trace,
)

COLUMNS = ["dp_rank", "stage", "step", "optype", "seq_id", "mb_id", "start", "end"]


def sequential_ops(dp: int = 2, pp: int = 3, steps: int = 2, per_step: int = 4) -> pd.DataFrame:
    """Compute-only ops that never overlap on a worker: one track per worker."""
    rows = []
    for d in range(dp):
        for s in range(pp):
            t = 100.0 + 0.001 * d
            for step in range(steps):
                for k in range(per_step):
                    optype = "forward-compute" if k % 2 == 0 else "backward-compute"
                    dur = 0.0123456789 * (1 + k) + 1e-4 * s
                    rows.append((d, s, 10 + step, optype, k // 2, k // 2, t, t + dur))
                    t += dur + 0.0005
    return pd.DataFrame(rows, columns=COLUMNS)


def _load(path: Path) -> dict:
    raw = gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()

    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(raw, parse_constant=no_constants)


def test_layout_processes_threads_events(tmp_path: Path):
    ops = sequential_ops()
    out = write_chrome_trace(ops, tmp_path / "t.json", name="job-a", metadata={"dp": 2})
    doc = _load(out)
    assert doc["displayTimeUnit"] == "ms"
    assert doc["otherData"]["name"] == "job-a"
    assert doc["otherData"]["metadata"] == {"dp": 2}
    events = doc["traceEvents"]
    n_dp, n_workers = 2, 6
    assert len(events) == len(ops) + 2 * n_dp + 2 * n_workers

    meta = [e for e in events if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs == {1: "DP rank 0", 2: "DP rank 1"}
    psort = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
    assert psort == {1: 0, 2: 1}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert sorted(threads.values()) == sorted(
        f"stage {s} (worker {d},{s})" for d in range(2) for s in range(3)
    )
    tsort = {
        (e["pid"], e["tid"]): e["args"]["sort_index"]
        for e in meta
        if e["name"] == "thread_sort_index"
    }
    # Sort indices order the tracks by stage inside each DP-rank process.
    for pid in (1, 2):
        by_stage = sorted((name, tsort[key]) for key, name in threads.items() if key[0] == pid)
        assert [i for _, i in by_stage] == sorted(i for _, i in by_stage)

    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(ops)
    first = slices[0]
    assert set(first) == {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
    assert first["name"] == "forward-compute" and first["cat"] == "compute"
    assert first["args"] == {"step": 10, "seq_id": 0, "mb_id": 0}
    assert first["pid"] == 1 and threads[(1, first["tid"])] == "stage 0 (worker 0,0)"
    assert first["ts"] == pytest.approx(100.0 * 1e6, abs=1e-3)  # microseconds
    assert first["dur"] == pytest.approx(0.0123456789 * 1e6, abs=1e-3)


def test_round_trip_is_exact_to_a_nanosecond(tmp_path: Path):
    ops = sequential_ops()
    ops["optype"] = ops["optype"].astype("category")
    back = read_chrome_trace(write_chrome_trace(ops, tmp_path / "t.json", name="rt"))
    assert len(back) == len(ops)
    for col in ["dp_rank", "stage", "step", "seq_id", "mb_id"]:
        np.testing.assert_array_equal(back[col].to_numpy(), ops[col].to_numpy())
    assert back["optype"].tolist() == ops["optype"].astype(str).tolist()
    np.testing.assert_allclose(back["start"], ops["start"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(back["end"], ops["end"], rtol=0, atol=1e-9)
    assert back.attrs["name"] == "rt"
    assert back.attrs["metadata_events"] == 2 * 2 + 2 * 6


def test_overlapping_streams_get_lanes_and_no_track_overlaps(tmp_path: Path):
    rows = [
        # dp 0 stage 0: compute chain with a tiny overlap, a recv spanning it, a DP collective
        (0, 0, 1, "forward-compute", 0, 0, 0.000, 0.010),
        (0, 0, 1, "forward-compute", 1, 1, 0.00998, 0.020),  # overlaps by 20 us
        (0, 0, 1, "forward-recv", 0, -1, 0.005, 0.015),
        (0, 0, 1, "backward-send", 0, -1, 0.012, 0.013),
        (0, 0, 1, "params-all-gather", 0, -1, -0.002, 0.004),
        (0, 0, 1, "gc", 0, -1, 0.020, 0.021),
        (0, 0, 1, 'odd "op"\\x', 0, -1, 0.030, 0.030),  # needs JSON escaping
    ]
    ops = pd.DataFrame(rows, columns=COLUMNS)
    back = read_chrome_trace(write_chrome_trace(ops, tmp_path / "o.json", name="o"))
    np.testing.assert_allclose(back["start"], ops["start"], atol=1e-9, rtol=0)
    assert back["optype"].tolist() == ops["optype"].tolist()
    assert back["cat"].tolist() == [
        "compute",
        "compute",
        "pp-comm",
        "pp-comm",
        "dp-comm",
        "other",
        "other",
    ]
    names = back.attrs["thread_names"]
    lane_name = {
        row.optype: names[(row.pid, row.tid)] for row in back.itertuples() if row.seq_id == 0
    }
    assert lane_name["forward-compute"] == "stage 0 (worker 0,0)"
    assert lane_name["forward-recv"] == "stage 0 (worker 0,0) · fwd p2p"
    assert lane_name["backward-send"] == "stage 0 (worker 0,0) · bwd p2p"
    assert lane_name["params-all-gather"] == "stage 0 (worker 0,0) · collectives"
    assert names[(1, back["tid"][1])] == "stage 0 (worker 0,0) #2"
    # Within every track the slices are disjoint.
    for _, track in back.groupby(["pid", "tid"]):
        track = track.sort_values("start")
        assert (track["start"].to_numpy()[1:] >= track["end"].to_numpy()[:-1]).all()


def test_gzip_output_round_trips(tmp_path: Path):
    ops = sequential_ops(dp=1, pp=2, steps=1)
    out = write_chrome_trace(ops, tmp_path / "t.json.gz", name="gz")
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    back = read_chrome_trace(out)
    np.testing.assert_allclose(back["end"], ops["end"], atol=1e-9, rtol=0)


def test_end_before_start_names_first_bad_row(tmp_path: Path):
    ops = sequential_ops().set_index(pd.RangeIndex(1000, 1000 + len(sequential_ops())))
    ops.loc[1005, "end"] = ops.loc[1005, "start"] - 1e-3
    ops.loc[1009, "end"] = ops.loc[1009, "start"] - 1e-3
    with pytest.raises(ValueError, match=r"end < start in 2 row\(s\); first bad row 1005"):
        write_chrome_trace(ops, tmp_path / "bad.json", name="bad")
    assert not (tmp_path / "bad.json").exists()


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("start", np.nan, "'start' must be finite"),
        ("end", np.inf, "'end' must be finite"),
        ("dp_rank", -1, "'dp_rank' must be a non-negative integer"),
        ("mb_id", 0.5, "'mb_id' must be an integer"),
        ("optype", None, "'optype' is null"),
    ],
)
def test_invalid_values_raise_with_row(tmp_path: Path, column, value, message):
    ops = sequential_ops()
    if column == "mb_id":
        ops[column] = ops[column].astype(float)
    ops.loc[3, column] = value
    with pytest.raises(ValueError, match=message) as err:
        write_chrome_trace(ops, tmp_path / "bad.json", name="bad")
    assert "row 3" in str(err.value)


def test_missing_column_raises(tmp_path: Path):
    with pytest.raises(ValueError, match="missing column.*mb_id"):
        write_chrome_trace(sequential_ops().drop(columns="mb_id"), tmp_path / "x.json", name="x")


def test_empty_frame_writes_valid_trace(tmp_path: Path):
    doc = _load(write_chrome_trace(sequential_ops().iloc[:0], tmp_path / "e.json", name="e"))
    assert doc["traceEvents"] == []


def test_negative_and_fractional_times_format_exactly(tmp_path: Path):
    ops = sequential_ops(dp=1, pp=1, steps=1, per_step=3)
    ops["start"] = [-1.5e-6, -0.0000005, 2.0]
    ops["end"] = [0.0, 0.25, 2.000000001]
    doc = _load(write_chrome_trace(ops, tmp_path / "n.json", name="n"))
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [e["ts"] for e in xs] == [-1.5, -0.5, 2000000]
    assert [e["dur"] for e in xs] == [1.5, 250000.5, 0.001]


def test_stack_steps_lays_steps_back_to_back():
    ops = sequential_ops(dp=1, pp=1, steps=3)
    # Put every step on its own clock starting at 0.
    ops[["start", "end"]] -= ops.groupby("step")["start"].transform("min").to_numpy()[:, None]
    laid = stack_steps(ops, gap=0.5)
    spans = laid.groupby("step").agg(lo=("start", "min"), hi=("end", "max"))
    assert spans["lo"].iloc[0] == 0.0
    np.testing.assert_allclose(spans["lo"].to_numpy()[1:], spans["hi"].to_numpy()[:-1] + 0.5)
    durations = (laid["end"] - laid["start"]).to_numpy()
    np.testing.assert_allclose(durations, (ops["end"] - ops["start"]).to_numpy())


def test_op_category():
    assert op_category("forward-compute") == "compute"
    assert op_category("backward-recv") == "pp-comm"
    assert op_category("grads-reduce-scatter") == "dp-comm"
    assert op_category("gc") == "other"
    assert op_category("expert-all-to-all") == "other"


def test_many_ops_are_all_written(tmp_path: Path):
    n = 200_000
    rng = np.random.default_rng(0)
    start = np.sort(rng.random(n) * 100.0)
    ops = pd.DataFrame(
        {
            "dp_rank": rng.integers(0, 64, n),
            "stage": rng.integers(0, 8, n),
            "step": rng.integers(0, 10, n),
            "optype": pd.Categorical.from_codes(
                rng.integers(0, 4, n),
                ["forward-compute", "backward-compute", "forward-send", "params-all-gather"],
            ),
            "seq_id": rng.integers(0, 32, n),
            "mb_id": rng.integers(-1, 32, n),
            "start": start,
            "end": start + rng.random(n) * 1e-3,
        }
    )
    out = write_chrome_trace(ops, tmp_path / "big.json", name="big")
    with open(out, encoding="utf-8") as fh:
        n_lines = sum(1 for line in fh if '"ph":"X"' in line)
    assert n_lines == n
