"""Unit tests of the probe building blocks that need no second process."""

from __future__ import annotations

import gc
import json
import time
from pathlib import Path

import pytest

from stragglers.callrecord import CallRecord
from stragglers.logs.records import parse_line
from stragglers.probe import JobLayout, PlannedGC, Probe, ProbeConfig, WorkerInfo
from stragglers.probe.clock import ClockSample, OffsetTrack, clock_domain
from stragglers.probe.ops import GC, OPTYPES, normalise_ids


def test_optypes_match_the_analyzer_schema() -> None:
    schema = pytest.importorskip("stragglers.trace.schema")
    assert set(OPTYPES) == set(schema.OPTYPES)


def test_normalise_ids_follows_reference_conventions() -> None:
    assert normalise_ids("forward-compute", 2, 1, 3, 4) == (1, 7, 2)
    assert normalise_ids("params-all-gather", -1, 0, 1, 4) == (0, -1, -1)
    assert normalise_ids("gc", -1, -1, 1, 4) == (-1, -1, 0)
    assert normalise_ids("forward-send", 3, 0, 1, 4) == (-1, -1, -1)
    with pytest.raises(ValueError, match="unknown operation type"):
        normalise_ids("moe-dispatch", -1, -1, 0, 1)


def test_sampling_windows() -> None:
    cfg = ProbeConfig(profile_steps=2, every=5, first_step=3)
    assert [s for s in range(16) if cfg.profiled(s)] == [3, 4, 8, 9, 13, 14]
    assert [s for s in range(16) if cfg.window_end(s)] == [4, 9, 14]
    assert not ProbeConfig(enabled=False).profiled(7)
    with pytest.raises(ValueError):
        ProbeConfig(profile_steps=3, every=2)
    with pytest.raises(ValueError):
        ProbeConfig(device="tpu")


def test_layout_meta_has_reference_keys_in_order() -> None:
    meta = JobLayout(dp_size=2, pp_size=4, trial_name="x", run_id=3).to_meta()
    assert list(meta) == ["trial_name", "run_id", "dp_size", "dsp_size", "pp_size", "tp_size",
                          "vpp_size", "world_size"]
    assert meta["world_size"] == 8


def test_offset_track_interpolates_and_extrapolates() -> None:
    track = OffsetTrack([ClockSample(10.0, 1.0, 0.0), ClockSample(20.0, 3.0, 0.0)])
    assert track.offset_at(5.0) == 1.0
    assert track.offset_at(15.0) == pytest.approx(2.0)
    assert track.offset_at(25.0) == 3.0
    assert track.align(15.0) == pytest.approx(17.0)
    assert OffsetTrack().align(4.0) == 4.0


def test_clock_domain_only_for_the_system_monotonic_clock() -> None:
    assert clock_domain(time.perf_counter) is not None
    assert clock_domain(time.perf_counter) == clock_domain(time.perf_counter)
    assert clock_domain(lambda: time.perf_counter() + 5.0) is None


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_probe_records_spans_of_sampled_steps_only(tmp_path: Path) -> None:
    probe = Probe(tmp_path, WorkerInfo(rank=0, world_size=1, dp_rank=0, stage=0),
                  ProbeConfig(profile_steps=1, every=2, device="cpu", flush_interval_s=0.05),
                  layout=JobLayout(dp_size=1, pp_size=1))
    probe.start()
    for step in range(4):
        recorded = probe.begin_step(step)
        assert recorded == (step % 2 == 0)
        with probe.span("forward-compute", mb_id=0, mc=0):
            time.sleep(0.002)
        with probe.span(("forward-send", "backward-recv")):
            pass
        probe.end_step()
    with probe.span("optimizer"):  # outside any step: not recorded
        pass
    probe.close()
    probe.close()  # idempotent
    records = _read(tmp_path / "rank-00000.jsonl")
    assert records[0]["kind"] == "header" and records[0]["timer"] == "monotonic"
    spans = [r for r in records if r["kind"] == "span"]
    assert sorted({s["step"] for s in spans}) == [0, 2]
    fwd = [s for s in spans if s["optypes"] == ["forward-compute"]]
    assert all(s["end"] - s["start"] >= 0.002 for s in fwd)
    assert [s["optypes"] for s in spans if len(s["optypes"]) == 2] == [
        ["forward-send", "backward-recv"]] * 2
    assert [r["step"] for r in records if r["kind"] == "step_end"] == [0, 2]
    assert sum(r["kind"] == "clock" for r in records) == 2  # start and close
    assert (tmp_path / "job.yaml").exists()
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "rank-00000.parquet")
    assert len(frame) == 6  # 2 steps x (1 + 2) ops: combined spans give one row per type
    assert set(frame["optype"]) == {"forward-compute", "forward-send", "backward-recv"}


def test_probe_rejects_unknown_optypes_and_decorates(tmp_path: Path) -> None:
    probe = Probe(tmp_path, WorkerInfo(0, 1, 0, 0), ProbeConfig(device="cpu"))
    probe.start()

    @probe.timed("optimizer")
    def update(x: int) -> int:
        return x + 1

    probe.begin_step(0)
    assert update(1) == 2
    with pytest.raises(ValueError, match="unknown operation type"):
        probe.span("matmul")
    probe.end_step()
    probe.close()
    spans = [r for r in _read(tmp_path / "rank-00000.jsonl") if r["kind"] == "span"]
    assert [s["optypes"] for s in spans] == [["optimizer"]]


def test_disabled_probe_writes_nothing(tmp_path: Path) -> None:
    probe = Probe(tmp_path / "p", WorkerInfo(0, 1, 0, 0), ProbeConfig(enabled=False))
    probe.start()
    probe.begin_step(0)
    with probe.span("forward-compute", mb_id=0):
        pass
    probe.end_step()
    probe.close()
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
def test_planned_gc_collects_at_fixed_steps_and_records_every_step(tmp_path: Path) -> None:
    was_enabled = gc.isenabled()
    probe = Probe(tmp_path, WorkerInfo(0, 1, 0, 0), ProbeConfig(device="cpu"))
    probe.start()
    planned = PlannedGC(probe, interval=3)
    with planned:
        assert not gc.isenabled()
        freed = []
        for step in range(7):
            probe.begin_step(step)
            junk = [[] for _ in range(50)]
            for a, b in zip(junk, junk[1:], strict=False):
                a.append(b)
                b.append(a)  # reference cycles: only the collector frees them
            del junk
            freed.append(planned.step(step))
            probe.end_step()
    probe.close()
    assert gc.isenabled() == was_enabled
    assert planned.collections == 2  # after steps 2 and 5
    assert freed[2] > 0 and freed[5] > 0 and freed[0] == 0
    spans = [r for r in _read(tmp_path / "rank-00000.jsonl") if r["kind"] == "span"]
    assert [s["step"] for s in spans if s["optypes"] == [GC]] == list(range(7))


def test_planned_gc_without_interval_keeps_automatic_gc(tmp_path: Path) -> None:
    planned = PlannedGC(None, interval=None)
    with planned:
        assert gc.isenabled()
        assert planned.step(0) == 0
    assert planned.collections == 0


def test_call_lines_read_back_as_the_records_written(tmp_path: Path) -> None:
    """A call line the probe writes parses into the record it was written from, and that
    record writes the same line again."""
    probe = Probe(tmp_path, WorkerInfo(rank=3, world_size=4, dp_rank=1, stage=1),
                  ProbeConfig(device="cpu", flush_interval_s=3600.0))
    probe.start()
    probe.begin_step(7)
    probe.record_call("all_reduce", 4096, (1, 3), 1000.5, 1000.75)
    probe.record_call("send", 4000, (0, 1, 2, 3), 1001.0, 1001.125, 2)
    probe.end_step()
    probe.close()
    assert probe._samples[-1].offset == 0.0  # one process: rank 0's clock
    lines = (tmp_path / "calls-rank-00003.jsonl").read_text().splitlines()
    records = [parse_line(line) for line in lines]
    assert records == [CallRecord(3, "all_reduce", 4096, 1000.5, "[1,3]", 0.25, step=7),
                       CallRecord(3, "send", 4000, 1001.0, "[0,1,2,3]", 0.125, step=7, peer=2)]
    assert [(r.step, r.peer) for r in records] == [(7, None), (7, 2)]
    assert [json.dumps(r.to_dict()) for r in records] == lines
