"""``stragglers import kineto`` on hand-built profiler traces with known ops.

The traces are written from a schema trace (a synthetic job, some with a known slow worker) by
:mod:`tests.kineto.chrome`, the way torch.profiler records them; importing them must give the
same ops back, whatever way the ops are recorded (annotations, NCCL kernels with old or new
names, compute segmented by the autograd thread), and the analysis of the import must equal
the analysis of the source trace.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from stragglers import analysis
from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.kineto import import_kineto
from stragglers.synth import SynthSpec
from stragglers.synth.generator import generate
from stragglers.trace.io import JobMeta, TraceColumns, write_meta, write_trace
from stragglers.trace.table import build_table
from tests.kineto.chrome import spread_steps, write_profiler_job

COLUMNS = ("dp_rank", "stage", "rank", "step", "optype", "seq_id", "mb_id", "mc", "gmc")


def job(slow: tuple[int, int, float] | None = None, dp: int = 2, pp: int = 2, steps: int = 3,
        seed: int = 1, jitter: float = 0.02) -> tuple[TraceColumns, JobMeta]:
    spec = SynthSpec(dp=dp, pp=pp, microbatches=3, steps=steps, seed=seed, jitter=jitter,
                     slow_workers=[slow] if slow else [])
    trace, meta, _ = generate(spec)
    return spread_steps(trace), meta


def rows(trace: TraceColumns) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    o = np.lexsort((trace.seq_id, trace.optype, trace.step, trace.stage, trace.dp_rank))
    return ({n: getattr(trace, n)[o] for n in COLUMNS}, trace.start_ts[o], trace.duration[o])


def assert_same_ops(got: TraceColumns, want: TraceColumns) -> None:
    assert len(got) == len(want)
    a, sa, da = rows(got)
    b, sb, db = rows(want)
    for name in COLUMNS:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    np.testing.assert_allclose(sa, sb, rtol=0, atol=1e-9)
    np.testing.assert_allclose(da, db, rtol=0, atol=1e-9)


@pytest.mark.parametrize("kwargs", [
    {},                                      # old NCCL kernel names (ncclKernel_*)
    {"new_names": True},                     # new names (ncclDevKernel_*)
    {"annotate_compute": False},             # compute segmented: autograd thread = backward
    {"annotate_comm": True},                 # every op annotated by its schema name
    {"pg_config": True, "gzip_ranks": (0, 3)},
], ids=["old-nccl-names", "new-nccl-names", "segmented", "annotated", "pg-config-gzip"])
def test_import_gives_back_the_recorded_ops(tmp_path: Path, kwargs: dict) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof", **kwargs)
    got, report = import_kineto(folder, meta, jobs=1)
    assert_same_ops(got, trace)
    assert report.steps == [0, 1, 2]
    assert report.dropped_steps == {3: [0, 1, 2, 3]}  # the truncated last ProfilerStep
    assert report.segmented_ranks == ([0, 1, 2, 3] if "annotate_compute" in kwargs else [])


def test_ranks_in_parallel_give_the_same_trace(tmp_path: Path) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof", new_names=True)
    one, _ = import_kineto(folder, meta, jobs=1)
    two, _ = import_kineto(folder, meta, jobs=2)
    assert_same_ops(two, one)


def test_known_slow_worker_is_found_as_in_the_source_trace(tmp_path: Path) -> None:
    trace, meta = job(slow=(1, 0, 1.8), steps=4)
    folder = write_profiler_job(trace, meta, tmp_path / "prof", annotate_compute=False)
    got, _ = import_kineto(folder, meta)
    want = analysis.analyze_table(build_table(trace, meta)).result.to_document()
    have = analysis.analyze_table(build_table(got, meta)).result.to_document()
    assert have["slowdown"] == pytest.approx(want["slowdown"], abs=1e-9)
    assert have["slowdown"] > 1.1
    scores = have["attribution"]["worker"]
    assert max(scores, key=scores.get) == "1,0"
    assert have["verdict"]["cause"] == want["verdict"]["cause"]


def test_host_clocks_are_aligned_on_shared_collectives(tmp_path: Path) -> None:
    trace, meta = job(jitter=0.0)  # without noise a collective ends together on all members
    # ranks 2 and 3 (stage 1) run on a second host whose clock is 0.25 s ahead
    folder = write_profiler_job(trace, meta, tmp_path / "prof",
                                host_offsets={2: 0.25, 3: 0.25})
    got, report = import_kineto(folder, meta)
    assert report.clock_shift_s == {"host1": pytest.approx(0.25, abs=1e-9)}
    assert_same_ops(got, trace)


@pytest.mark.slow
def test_cli_import_then_analyze(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace, meta = job(slow=(0, 1, 1.6))
    folder = write_profiler_job(trace, meta, tmp_path / "prof", gzip_ranks=(1,))
    write_meta(meta, tmp_path / "job.yaml")
    out = tmp_path / "imported"
    assert main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "step 3 dropped: truncated (no optimizer op) on rank(s) 0-3" in text
    assert sorted(p.name for p in out.iterdir()) == [".stragglers-outputs.json", "meta.yaml",
                                                     "trace.parquet"]
    assert main(["analyze", str(out / "trace.parquet"), "--meta", str(out / "meta.yaml"),
                 "--out", str(tmp_path / "a"), "--no-timelines", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert max(doc["attribution"]["worker"], key=doc["attribution"]["worker"].get) == "0,1"


def test_steps_option_selects_steps(tmp_path: Path) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    got, report = import_kineto(folder, meta, steps=(1, 2))
    assert report.steps == [1, 2]
    assert_same_ops(got, trace.take(trace.step >= 1))


def test_unmapped_communication_is_counted(tmp_path: Path) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    path = folder / "rank-0.json"
    doc = json.loads(path.read_text())
    step0 = next(e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#0")
    t = step0["ts"] + 10.0
    doc["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 100,
         "ts": t, "dur": 1.0, "args": {"Collective name": "broadcast",
                                      "Process Group Ranks": "[0, 1, 2, 3]", "Group size": 4}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 100,
         "ts": t + 2, "dur": 1.0, "args": {"Collective name": "send"}},
    ]
    path.write_text(json.dumps(doc))
    got, report = import_kineto(folder, meta)
    assert_same_ops(got, trace)
    assert report.counts["broadcast calls in group class 'world' (not a schema op)"] == 1
    assert report.counts["send calls without a peer rank"] == 1
    assert any("not used: 1 broadcast calls" in line for line in report.lines())


def test_annotation_patterns_file(tmp_path: Path) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    for p in folder.iterdir():  # rename the forward annotations as a user's code would
        p.write_text(p.read_text().replace('"forward-compute mb=', '"my_fwd microbatch '))
    pats = tmp_path / "ann.yaml"
    pats.write_text("forward-compute: ['^my_fwd']\n")
    got, _ = import_kineto(folder, meta, annotations=pats)
    assert_same_ops(got, trace)


# ---------------------------------------------------------------- error contract
def run_cli(tmp_path: Path, folder: Path, meta: JobMeta, capsys: pytest.CaptureFixture,
            *extra: str) -> str:
    write_meta(meta, tmp_path / "job.yaml")
    out = tmp_path / "out"
    code = main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                 "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("stragglers import kineto: error: ")
    assert not out.exists()  # nothing written
    return err


def test_missing_rank_is_an_incomplete_job(tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof", skip_ranks=(2,))
    err = run_cli(tmp_path, folder, meta, capsys)
    assert "incomplete job: no trace of 1 of 4 workers" in err
    assert "dp rank 0, stage 1 (rank 2)" in err


def test_missing_step_on_one_rank_is_named(tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    path = folder / "rank-3.json"  # rank 3 loses the optimizer of steps 1 and 2
    doc = json.loads(path.read_text())
    t1 = next(e["ts"] for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#1")
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not (e.get("name") == "optimizer" and e["ts"] > t1)]
    path.write_text(json.dumps(doc))
    err = run_cli(tmp_path, folder, meta, capsys)
    assert "incomplete job: step 1 is complete on rank" in err
    assert "missing on rank 3 (dp rank 1, stage 1)" in err


@pytest.mark.parametrize("damage,expect", [
    (lambda b: gzip.compress(b)[:-200], "damaged or truncated gzip"),
    (lambda b: b[: len(b) // 2], "ends inside the traceEvents array (truncated?)"),
    (lambda b: b.replace(b'"traceEvents": [', b'"traceEvents": 5, "x": [', 1),
     "field 'traceEvents' missing"),
    (lambda b: b"\xff\xfe" + b, "bytes that are not UTF-8 (byte 0: invalid start byte) "
     "before the traceEvents array"),
    (lambda b: b.replace(b'{"schemaVersion": 1,', b'{"schemaVersion": 1 2,', 1),
     "not valid JSON (Expecting ',' delimiter at character 20) before the traceEvents "
     "array"),
    (lambda b: b[: b.index(b'"traceName"')],
     "not a complete JSON file: it ends after the traceEvents array (truncated?)"),
    (lambda b: b.replace(b'"traceName"', b'"baseTimeNanoseconds": "1e18", "traceName"'),
     "field 'baseTimeNanoseconds' must be a non-negative integer, got '1e18'"),
    (lambda b: b.replace(b'{"schemaVersion": 1,', b'{"baseTimeNanoseconds": -5,', 1),
     "field 'baseTimeNanoseconds' must be a non-negative integer, got -5"),
], ids=["gzip", "truncated", "no-events", "not-utf8", "not-json", "truncated-after-events",
        "base-string", "base-negative"])
def test_damaged_files_end_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture,
                                       damage, expect: str) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    path = folder / "rank-1.json"
    path.write_bytes(damage(path.read_bytes()))
    err = run_cli(tmp_path, folder, meta, capsys)
    assert "rank-1.json" in err and expect in err


def test_wrong_field_type_names_file_field_and_event(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    path = folder / "rank-1.json"
    doc = json.loads(path.read_text())
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    doc["traceEvents"][i]["dur"] = "12"
    path.write_text(json.dumps(doc))
    err = run_cli(tmp_path, folder, meta, capsys)
    assert f"rank-1.json: traceEvents[{i}]: field 'dur' must be a number" in err


def test_missing_distributed_info_and_duplicate_rank(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    doc = json.loads((folder / "rank-1.json").read_text())
    (folder / "rank-9.json").write_text(json.dumps(doc))
    err = run_cli(tmp_path, folder, meta, capsys)
    assert "distributedInfo field 'rank' 1 is also the rank of" in err
    del doc["distributedInfo"]
    (folder / "rank-9.json").write_text(json.dumps(doc))
    err = run_cli(tmp_path, folder, meta, capsys)
    assert "rank-9.json: field 'distributedInfo' missing" in err


def test_event_limit_is_checked(tmp_path: Path, capsys: pytest.CaptureFixture,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    monkeypatch.setenv("STRAGGLERS_MAX_KINETO_EVENTS", "50")
    err = run_cli(tmp_path, folder, meta, capsys)
    assert "exceed the limit of 50" in err and "STRAGGLERS_MAX_KINETO_EVENTS" in err


def test_bad_patterns_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    pats = tmp_path / "ann.yaml"
    pats.write_text("forward-compute: ['(unclosed']\n")
    err = run_cli(tmp_path, folder, meta, capsys, "--annotations", str(pats))
    assert "ann.yaml: forward-compute[0]: bad regular expression" in err
    pats.write_text("fwd: ['x']\n")
    err = run_cli(tmp_path, folder, meta, capsys, "--annotations", str(pats))
    assert "field 'fwd' is not an operation type" in err


def test_vpp_is_refused(tmp_path: Path) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    with pytest.raises(InputError, match="vpp_size > 1"):
        import_kineto(folder, JobMeta(dp_size=2, pp_size=2, vpp_size=2, world_size=4))
    _ = write_trace  # the public writer is what the command uses


def test_tensor_parallel_ranks_collapse_into_their_worker(tmp_path: Path) -> None:
    trace, meta1 = job()
    meta = JobMeta(dp_size=2, pp_size=2, tp_size=2, world_size=8)
    folder = write_profiler_job(trace, meta, tmp_path / "prof", pg_config=True)
    got, report = import_kineto(folder, meta)
    assert report.ranks_used == [0, 2, 4, 6]  # TP index 0 of each worker
    assert report.ranks_collapsed == [1, 3, 5, 7]
    want = trace.take(np.arange(len(trace)))
    want.rank = (2 * (trace.dp_rank + 2 * trace.stage)).astype(np.int32)
    assert_same_ops(got, want)
    assert meta1.tp_size == 1
