"""The optional ``gc_s`` column (seconds of garbage collection inside each op): read and
written with the trace, checked under the error contract, carried into the op table, and the
evidence that tells the verdict ``gc`` from ``pauses``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from stragglers.analysis import analyze_table
from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.synth import SynthSpec, generate, write_synth
from stragglers.trace import build_table, read_trace, write_trace
from stragglers.trace.schema import FORWARD_COMPUTE, GC, OPTYPE_CODE

#: GC pauses inside forward compute (the synthetic generator's injection, known answer).
PAUSES = dict(dp=4, pp=4, steps=10, jitter=0.01, gc_prob=0.15, gc_pause=0.5,
              gc_in_compute=True, seed=3)


def test_synth_records_exactly_the_injected_pauses():
    trace, meta, truth = generate(SynthSpec(**PAUSES, gc_recorded=True))
    plain, _, plain_truth = generate(SynthSpec(**PAUSES))
    assert plain.gc_s is None  # default: GC time not recorded
    assert trace.gc_s is not None
    # Same trace otherwise; the pauses are the extra time of the paused ops.
    np.testing.assert_array_equal(trace.duration, plain.duration)
    hit = trace.gc_s > 0
    assert set(np.unique(trace.gc_s)) == {0.0, 0.5}
    assert (trace.optype[hit] == OPTYPE_CODE[FORWARD_COMPUTE]).all()
    clean, _, _ = generate(SynthSpec(**{**PAUSES, "gc_prob": 0.0, "gc_in_compute": False}))
    extra = trace.duration - clean.duration
    np.testing.assert_allclose(extra[hit], 0.5, atol=0.01)  # jitter draws are shared
    assert truth["expected"]["causes"][0]["cause"] == "gc"
    assert plain_truth["expected"]["causes"][0]["cause"] == "pauses"


def test_gc_ops_record_their_pause():
    trace, _, _ = generate(SynthSpec(dp=2, pp=2, steps=6, gc_prob=0.5, gc_pause=0.2,
                                     gc_recorded=True, seed=1))
    assert trace.gc_s is not None
    is_gc = trace.optype == OPTYPE_CODE[GC]
    assert (trace.gc_s[~is_gc] == 0).all()
    np.testing.assert_allclose(trace.gc_s[is_gc], trace.duration[is_gc])  # gc ops: all GC
    assert (trace.gc_s <= trace.duration).all()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_round_trip_and_op_table(tmp_path: Path, fmt: str):
    files = write_synth(SynthSpec(**PAUSES, gc_recorded=True), tmp_path, fmt=fmt)
    original, meta, _ = generate(SynthSpec(**PAUSES, gc_recorded=True))
    back = read_trace(files["trace"])
    assert back.gc_s is not None and original.gc_s is not None
    np.testing.assert_array_equal(back.gc_s, original.gc_s)
    table = build_table(back, meta)
    assert table.gc_seconds is not None
    assert table.gc_seconds.shape == table.duration.shape
    # Each op's cell holds that op's gc_s: the paused cells are the ones whose duration grew.
    assert table.gc_seconds.sum() == pytest.approx(float(original.gc_s.sum()))
    paused = table.gc_seconds > 0
    assert (table.node_optype[np.nonzero(paused)[0]] == OPTYPE_CODE[FORWARD_COMPUTE]).all()
    assert (table.duration[paused] >= 0.5).all()
    # A selection of steps keeps the column row for row.
    sub = back.take(back.step < 3)
    assert sub.gc_s is not None and len(sub.gc_s) == len(sub)


def test_traces_without_the_column_have_none(tmp_path: Path):
    files = write_synth(SynthSpec(**PAUSES), tmp_path, fmt="jsonl")
    trace = read_trace(files["trace"])
    assert trace.gc_s is None
    assert build_table(trace, generate(SynthSpec(**PAUSES))[1]).gc_seconds is None


def _bad_parquet(tmp_path: Path, value: float) -> tuple[Path, Path, int]:
    files = write_synth(SynthSpec(**PAUSES, gc_recorded=True), tmp_path / "job")
    table = pq.read_table(files["trace"])
    gc_s = table.column("gc_s").to_numpy().copy()
    dur = table.column("duration").to_numpy()
    row = int(np.flatnonzero(gc_s > 0)[3])
    gc_s[row] = dur[row] + 0.25 if value == np.inf else value
    bad = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(table.column_names.index("gc_s"), "gc_s",
                                    [gc_s.tolist()]), bad)
    return bad, files["meta"], row


@pytest.mark.parametrize("value,needle", [
    (-0.1, "field 'gc_s' is negative"),
    (np.inf, "field 'gc_s' exceeds the op's duration"),  # (inf: duration + 0.25 s)
    (np.nan, "column 'gc_s' is not finite (nan)"),
])
def test_bad_gc_values_are_one_line_errors(tmp_path: Path, capsys, value: float, needle: str):
    bad, meta, row = _bad_parquet(tmp_path, value)
    code = main(["analyze", str(bad), "--meta", str(meta), "--out", str(tmp_path / "out"),
                 "--no-timelines"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert "bad.parquet" in err and needle in err and f"row {row}" in err, err


def test_bad_gc_value_in_json_lines_names_the_line(tmp_path: Path):
    files = write_synth(SynthSpec(dp=1, pp=2, microbatches=2, steps=2, gc_prob=0.5,
                                  gc_recorded=True), tmp_path, fmt="jsonl")
    lines = files["trace"].read_text().splitlines()
    rec = json.loads(lines[4])
    rec["gc_s"] = "0.1"
    lines[4] = json.dumps(rec)
    files["trace"].write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"trace.jsonl:5: field 'gc_s' must be a number"):
        read_trace(files["trace"])
    rec["gc_s"] = rec["duration"] + 1.0
    lines[4] = json.dumps(rec)
    files["trace"].write_text("\n".join(lines) + "\n")
    meta = generate(SynthSpec(dp=1, pp=2, microbatches=2, steps=2))[1]
    with pytest.raises(InputError, match=r"field 'gc_s' exceeds the op's duration .* line 5"):
        build_table(read_trace(files["trace"]), meta)


def test_write_trace_keeps_the_column(tmp_path: Path):
    trace, _, _ = generate(SynthSpec(**PAUSES, gc_recorded=True))
    write_trace(trace, tmp_path / "t.parquet")
    assert "gc_s" in pq.read_schema(tmp_path / "t.parquet").names


# -- the verdict: recorded GC time is the evidence ------------------------------------------
def _verdict(**spec: object) -> dict:
    trace, meta, _ = generate(SynthSpec(**spec))  # type: ignore[arg-type]
    return analyze_table(build_table(trace, meta)).result.to_document()["verdict"]


def test_recorded_gc_inside_compute_is_gc():
    v = _verdict(**PAUSES, gc_recorded=True)
    assert v["cause"] == "gc"
    assert any("recorded GC time covers 100%" in line for line in v["evidence"])


def test_unrecorded_gc_inside_compute_is_pauses():
    v = _verdict(**PAUSES)
    assert v["cause"] == "pauses"
    assert any("no GC is recorded inside them" in line for line in v["evidence"])


def test_recorded_but_zero_gc_time_is_pauses():
    """A trace that records GC time, none of it inside the long ops: stalls of another kind
    (the pauses are in compute, the recorded GC in the gc ops only)."""
    trace, meta, _ = generate(SynthSpec(**PAUSES))
    assert trace.gc_s is None
    trace.gc_s = np.zeros(len(trace))
    v = analyze_table(build_table(trace, meta)).result.to_document()["verdict"]
    assert v["cause"] == "pauses"
    assert any("recorded GC time covers only 0%" in line for line in v["evidence"])
