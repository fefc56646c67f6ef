"""GC time recorded by the probe (``gc.callbacks``) into the spans open while Python's
collector runs, and carried by the merge into the trace's ``gc_s`` column."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path

import pandas as pd
import pytest

from stragglers.errors import InputError
from stragglers.probe import JobLayout, PlannedGC, Probe, ProbeConfig, WorkerInfo
from stragglers.probe.merge import build_trace, merge_dir, read_rank_file
from stragglers.trace import read_trace
from stragglers.trace.io import JobMeta

from .synthetic import write_job


def _cycles(n: int) -> None:
    """Leave ``n`` reference cycles for the collector (only it frees them)."""
    for _ in range(n):
        a: list[object] = []
        a.append(a)


def _spans(path: Path) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["kind"] == "span"]


@pytest.mark.slow
def test_forced_collection_inside_a_span_shows_in_its_gc_s(tmp_path: Path) -> None:
    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection: the forced one is the only GC
    try:
        probe = Probe(tmp_path, WorkerInfo(0, 1, 0, 0), ProbeConfig(device="cpu"),
                      layout=JobLayout(dp_size=1, pp_size=1))
        probe.start()
        probe.begin_step(0)
        with probe.span("forward-compute", mb_id=0, mc=0):
            _cycles(200_000)
            t0 = time.perf_counter()
            freed = gc.collect()
            collect_s = time.perf_counter() - t0
        with probe.span("backward-compute", mb_id=0, mc=0):
            time.sleep(0.01)  # long, but no GC
        probe.end_step()
        probe.close()
        _cycles(10)
        gc.collect()  # after close: the probe's callback is gone, nothing is recorded
    finally:
        if was_enabled:
            gc.enable()
    assert freed >= 200_000
    assert probe._on_gc not in gc.callbacks
    header = json.loads((tmp_path / "rank-00000.jsonl").read_text().splitlines()[0])
    assert header["gc_recorded"] is True
    fwd, bwd = _spans(tmp_path / "rank-00000.jsonl")
    # The callbacks run inside gc.collect(): the recorded time is within the measured call
    # and makes up nearly all of it (a collection of 200k cycles takes milliseconds).
    assert 0.5 * collect_s <= fwd["gc_s"] <= collect_s
    assert fwd["gc_s"] <= fwd["end"] - fwd["start"]
    assert bwd["gc_s"] == 0.0 and bwd["end"] - bwd["start"] >= 0.01
    frame = pd.read_parquet(tmp_path / "rank-00000.parquet")
    assert frame.set_index("optype")["gc_s"].to_dict() == {
        "forward-compute": fwd["gc_s"], "backward-compute": 0.0}
    # merged: the op's gc_s in the trace
    result = build_trace([read_rank_file(tmp_path / "rank-00000.jsonl")],
                         JobMeta(dp_size=1, pp_size=1, vpp_size=1), check=False)
    merged = result.trace.set_index("optype")["gc_s"]
    assert merged["forward-compute"] == fwd["gc_s"] and merged["backward-compute"] == 0.0


@pytest.mark.slow
def test_planned_gc_spans_carry_their_collection(tmp_path: Path) -> None:
    probe = Probe(tmp_path, WorkerInfo(0, 1, 0, 0), ProbeConfig(device="cpu"))
    probe.start()
    planned = PlannedGC(probe, interval=2)
    with planned:
        for step in range(4):
            probe.begin_step(step)
            _cycles(20_000)
            planned.step(step)
            probe.end_step()
    probe.close()
    gc_spans = [s for s in _spans(tmp_path / "rank-00000.jsonl") if s["optypes"] == ["gc"]]
    assert [s["step"] for s in gc_spans] == [0, 1, 2, 3]
    collected = [s["gc_s"] > 0 for s in gc_spans]
    assert collected == [False, True, False, True]  # after steps 1 and 3
    assert sum(s["gc_s"] for s in gc_spans) <= planned.pause_s


@pytest.mark.slow
def test_record_gc_off(tmp_path: Path) -> None:
    probe = Probe(tmp_path, WorkerInfo(0, 1, 0, 0), ProbeConfig(device="cpu", record_gc=False))
    probe.start()
    probe.begin_step(0)
    with probe.span("forward-compute", mb_id=0, mc=0):
        gc.collect()
    probe.end_step()
    probe.close()
    (span,) = _spans(tmp_path / "rank-00000.jsonl")
    assert "gc_s" not in span
    assert "gc_s" not in pd.read_parquet(tmp_path / "rank-00000.parquet").columns


def _with_gc(path: Path, gc_s: float | None = 0.0, line: int | None = None,
             value: object = None) -> None:
    """Mark a rank file as recording GC time (every span ``gc_s``), optionally with one
    span's value replaced."""
    records = [json.loads(x) for x in path.read_text().splitlines()]
    records[0]["gc_recorded"] = True
    for i, r in enumerate(records):
        if r["kind"] == "span":
            r["gc_s"] = value if i == line else gc_s
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")


def test_merge_writes_gc_s_when_every_rank_records_it(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in", dp=2)
    for rank in range(4):
        _with_gc(tmp_path / "in" / f"rank-{rank:05d}.jsonl")
    path = tmp_path / "in" / "rank-00002.jsonl"
    line = next(i for i, x in enumerate(path.read_text().splitlines())
                if '"forward-compute"' in x)
    records = [json.loads(x) for x in path.read_text().splitlines()]
    records[line]["gc_s"] = 0.004  # in a 10 ms forward compute of worker dp 0, stage 1
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    merge_dir(tmp_path / "in", meta, tmp_path / "out")
    trace = read_trace(tmp_path / "out" / "trace.parquet")
    assert trace.gc_s is not None
    assert sorted(trace.gc_s[trace.gc_s > 0]) == [0.004]
    hit = int((trace.gc_s > 0).nonzero()[0][0])
    assert (trace.dp_rank[hit], trace.stage[hit], trace.step[hit]) == (0, 1, 5)


def test_merge_without_gc_records_has_no_column(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in")
    merge_dir(tmp_path / "in", meta, tmp_path / "out")
    assert read_trace(tmp_path / "out" / "trace.parquet").gc_s is None


@pytest.mark.parametrize("value,needle", [
    (-0.001, "field 'gc_s' must be in [0, end - start"),
    (1.0, "field 'gc_s' must be in [0, end - start"),
    ("x", "field 'gc_s' must be a finite number"),
    (None, "field 'gc_s' must be a finite number"),
])
def test_bad_gc_s_in_a_rank_file_names_file_and_line(tmp_path: Path, value: object,
                                                      needle: str) -> None:
    meta = write_job(tmp_path / "in")
    path = tmp_path / "in" / "rank-00001.jsonl"
    line = next(i for i, x in enumerate(path.read_text().splitlines())
                if '"forward-compute"' in x)
    _with_gc(tmp_path / "in" / "rank-00000.jsonl")
    _with_gc(path, line=line, value=value)
    with pytest.raises(InputError) as exc:
        merge_dir(tmp_path / "in", meta)
    assert f"rank-00001.jsonl: line {line + 1}: " in str(exc.value)
    assert needle in str(exc.value), str(exc.value)


def test_a_span_without_gc_s_in_a_recording_file_is_an_error(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in")
    path = tmp_path / "in" / "rank-00000.jsonl"
    _with_gc(tmp_path / "in" / "rank-00001.jsonl")
    _with_gc(path)
    lines = path.read_text().splitlines()
    rec = json.loads(lines[2])
    del rec["gc_s"]
    lines[2] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="rank-00000.jsonl: line 3: lacks field 'gc_s'"):
        merge_dir(tmp_path / "in", meta)


def test_ranks_that_disagree_on_recording_gc(tmp_path: Path) -> None:
    meta = write_job(tmp_path / "in")
    _with_gc(tmp_path / "in" / "rank-00001.jsonl")
    with pytest.raises(InputError, match="rank-00001.jsonl: records GC time .* but "
                                         ".*rank-00000.jsonl does not"):
        merge_dir(tmp_path / "in", meta)
