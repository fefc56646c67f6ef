"""``stragglers import kineto --partial``: the per-rank report of a job with only some ranks
traced (issue 23, item 5), on hand-built traces with known answers and on the real partial
traces of ../shared/real (rank 0 of 2, ranks 0-1 of 128, rank 1 of 2, rank 3 of 8, an MI300
rank 0 of 8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stragglers.cli import main
from stragglers.kineto.partial import SCHEMA, VERSION
from tests.conftest import SHARED, require_shared

MAIN, STREAM, COMM = 1, 7, 20


def _rank(rank: int, world: int, compute_end: float, ar_start: float) -> dict[str, Any]:
    """One step: a forward kernel [10, compute_end], an all-reduce of ranks 0..world-1 whose
    kernel runs [ar_start, 400], the optimizer kernel [410, 450]."""
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": MAIN,
         "ts": 0.0, "dur": 500.0, "args": {}}]
    corr = 0

    def kernel(cpu: float, ts: float, end: float, name: str) -> None:
        nonlocal corr
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": MAIN, "ts": cpu, "dur": 0.1, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0,
                   "tid": COMM if name.startswith("nccl") else STREAM, "ts": ts,
                   "dur": end - ts, "args": {"correlation": corr}})

    ev.append({"ph": "X", "cat": "user_annotation", "name": "forward_step mb=0", "pid": 1,
               "tid": MAIN, "ts": 1.0, "dur": 2.0, "args": {}})
    kernel(1.5, 10.0, compute_end, "gemm")
    ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": MAIN,
               "ts": 4.0, "dur": 2.0, "args": {"Collective name": "allreduce",
                                               "Process Group Ranks": str(list(range(world))),
                                               "Group size": world}})
    kernel(4.5, ar_start, 400.0, "ncclKernel_AllReduce_RING_LL_Sum_float(x)")
    ev.append({"ph": "X", "cat": "user_annotation", "name": "optimizer", "pid": 1,
               "tid": MAIN, "ts": 7.0, "dur": 2.0, "args": {}})
    kernel(7.5, 410.0, 450.0, "adam")
    return {"distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": ev}


def _run(folder: Path, world: int, out: Path, *extra: str) -> int:
    meta = folder.parent / f"{folder.name}.yaml"
    meta.write_text(f"dp_size: {world}\npp_size: 1\n")
    return main(["import", "kineto", str(folder), "--meta", str(meta), "--out", str(out),
                 "--jobs", "1", *extra])


def _report(out: Path) -> dict[str, Any]:
    doc = json.loads((out / "partial-report.json").read_text())
    assert doc["schema"] == SCHEMA and doc["version"] == VERSION
    assert "PARTIAL JOB" in doc["label"] and "nothing is claimed" in doc["label"]
    return doc


def test_a_rank_late_at_an_all_reduce_is_last_and_the_others_wait_the_skew(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    # ranks 0 and 2 arrive at 120 and 150, rank 1 computes until 310 and arrives at 350
    for rank, (c_end, ar) in enumerate([(110.0, 120.0), (310.0, 350.0), (140.0, 150.0)]):
        (folder / f"r{rank}.json").write_text(json.dumps(_rank(rank, 4, c_end, ar)))
    assert _run(folder, 4, tmp_path / "out", "--partial") == 0
    printed = capsys.readouterr().out
    assert "PARTIAL JOB: 3 of 4 ranks traced (0-2)" in printed
    assert "nothing is said about the 1 ranks not traced" in printed
    doc = _report(tmp_path / "out")
    assert doc["traced_ranks"] == [0, 1, 2] and doc["untraced_ranks"] == 1
    [coll] = doc["collectives"]
    assert coll["kind"] == "allreduce" and coll["group"]["ranks"] == [0, 1, 2, 3]
    assert coll["arrived_last"] == [1]
    assert coll["skew_us"] == pytest.approx(230.0)
    arr = {a["rank"]: a for a in coll["arrivals"]}
    assert arr[0]["wait_us"] == pytest.approx(230.0) and arr[0]["waited_for"] == [2, 1]
    assert arr[2]["wait_us"] == pytest.approx(200.0) and arr[2]["waited_for"] == [1]
    assert arr[1]["wait_us"] == 0.0 and arr[1]["waited_for"] == []
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert ranks[1]["arrived_last"] == 1 and ranks[1]["caused_wait_us"] == pytest.approx(430.0)
    assert ranks[0]["arrived_last"] == 0 and ranks[0]["wait_us"] == pytest.approx(230.0)
    assert not any(k.startswith("S") for k in doc)  # no slowdown claimed


def test_a_single_rank_gives_its_compute_communication_idle_split(tmp_path: Path) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "r0.json").write_text(json.dumps(_rank(0, 2, 110.0, 120.0)))
    assert _run(folder, 2, tmp_path / "out", "--partial") == 0
    doc = _report(tmp_path / "out")
    [step] = doc["steps"]
    # kernels: compute [10, 110] and [410, 450], all-reduce [120, 400]
    assert step["rank"] == 0 and step["step"] == 3
    assert step["span_us"] == pytest.approx(440.0)
    assert step["compute_us"] == pytest.approx(140.0)
    assert step["communication_us"] == pytest.approx(280.0)
    assert step["overlap_us"] == pytest.approx(0.0)
    assert step["idle_us"] == pytest.approx(20.0)
    assert doc["ranks"][0]["breakdown_source"] == "GPU kernels"
    [coll] = doc["collectives"]  # one traced member: no wait is claimed
    assert coll["arrived_last"] is None and coll["arrivals"][0]["wait_us"] is None
    assert doc["ranks"][0]["single_traced_us"] == pytest.approx(280.0)


def test_without_partial_the_refusal_names_the_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "r0.json").write_text(json.dumps(_rank(0, 2, 110.0, 120.0)))
    assert _run(folder, 2, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "incomplete job" in err and "--partial" in err
    assert not (tmp_path / "out").exists()


REAL = SHARED / "real"
PARTIAL_REAL = {  # folder or file -> metadata (None: the folder's meta.yaml)
    "kineto/hta-ddp-rank0-of-2.json.gz": "dp_size: 2\npp_size: 1\n",
    "kineto/hta-sampled-rank-*": "dp_size: 128\npp_size: 1\n",
    "kineto-more/D_hta_dfidx_rank1of2": None,
    "kineto-more/E_hta_tracediff_rank3of8": None,
    "kineto-more/G_tl_mi300_resnet_rank0of8": None,
}


@pytest.fixture(scope="module")
def real() -> Path:
    require_shared(REAL, "real profiler traces",
                   probe=REAL / "kineto" / "hta-ddp-rank0-of-2.json.gz")
    return require_shared(REAL, "real profiler traces",
                          probe=REAL / "kineto-more" / "D_hta_dfidx_rank1of2" / "meta.yaml")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARTIAL_REAL))
def test_real_partial_traces_give_a_report(real: Path, name: str, tmp_path: Path) -> None:
    text = PARTIAL_REAL[name]
    src = real / name
    if name.endswith("*"):  # several files of one job: linked into one folder
        src = tmp_path / "ranks"
        src.mkdir()
        for f in sorted((real / name).parent.glob((real / name).name)):
            (src / f.name).symlink_to(f)
    meta = (real / name / "meta.yaml") if text is None else tmp_path / "meta.yaml"
    if text is not None:
        meta.write_text(text)
    out = tmp_path / "out"
    assert main(["import", "kineto", str(src), "--meta", str(meta), "--out", str(out),
                 "--partial", "--jobs", "1"]) == 0
    doc = _report(out)
    assert doc["untraced_ranks"] == doc["world_size"] - len(doc["traced_ranks"]) > 0
    assert doc["steps"] and doc["collectives"]
    for row in doc["steps"]:
        total = row["compute_us"] + row["communication_us"] + row["idle_us"]
        assert total == pytest.approx(row["span_us"], rel=1e-6, abs=1e-3)
        assert min(row["compute_us"], row["communication_us"], row["idle_us"]) >= 0


# --- issue 28 item 3 ---------------------------------------------------------------------


def _calls_rank(rank: int, world: int, calls: list[tuple[str, dict[str, Any], float, float]],
                extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One step: a forward kernel, then ``calls`` (collective name, more args, kernel start,
    kernel end) in the given order on the CPU, each with its NCCL kernel on its own stream,
    then the optimizer; ``extra`` events are appended."""
    ev: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 1, "tid": MAIN,
         "ts": 0.0, "dur": 900.0, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "forward_step", "pid": 1, "tid": MAIN,
         "ts": 1.0, "dur": 2.0, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "optimizer", "pid": 1, "tid": MAIN,
         "ts": 80.0, "dur": 2.0, "args": {}}]
    corr = 0

    def kernel(cpu: float, ts: float, end: float, name: str, stream: int) -> None:
        nonlocal corr
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                   "tid": MAIN, "ts": cpu, "dur": 0.1, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream,
                   "ts": ts, "dur": end - ts, "args": {"correlation": corr}})

    kernel(1.5, 10.0, 50.0, "gemm", STREAM)
    for i, (coll, args, k0, k1) in enumerate(calls):
        cpu = 10.0 + 10.0 * i
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1,
                   "tid": MAIN, "ts": cpu, "dur": 2.0,
                   "args": {"Collective name": coll} | args})
        kind = {"allreduce": "AllReduce", "all_gather": "AllGather"}[coll]
        kernel(cpu + 0.5, k0, k1, f"ncclKernel_{kind}_RING_LL_Sum_float(x)", COMM + i)
    kernel(80.5, 800.0, 850.0, "adam", STREAM)
    return {"distributedInfo": {"rank": rank, "world_size": world},
            "traceEvents": ev + (extra or [])}


def _msg(n: int) -> dict[str, Any]:
    return {"In msg nelems": n, "Out msg nelems": n, "dtype": "Float"}


def test_collectives_are_matched_by_identity_not_call_order(tmp_path: Path) -> None:
    # no process-group information (as in TorchRec's traces): two all-reduces of different
    # groups, issued in different orders on the two traced ranks. The gradient all-reduce
    # (1000 elements): rank 0 at 100, rank 1 at 300, both end at 400; the small one (10):
    # rank 1 at 120, rank 0 at 450, both end at 500. Before, call order paired rank 0's
    # first call with rank 1's first call (different collectives).
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, calls in ((0, [("allreduce", _msg(1000), 100.0, 400.0),
                             ("allreduce", _msg(10), 450.0, 500.0)]),
                        (1, [("allreduce", _msg(10), 120.0, 500.0),
                             ("allreduce", _msg(1000), 300.0, 400.0)])):
        (folder / f"r{rank}.json").write_text(json.dumps(_calls_rank(rank, 4, calls)))
    assert _run(folder, 4, tmp_path / "out", "--partial") == 0
    doc = _report(tmp_path / "out")
    got = sorted((c["arrived_last"], c["skew_us"]) for c in doc["collectives"])
    assert got == [([0], pytest.approx(330.0)), ([1], pytest.approx(200.0))]
    for c in doc["collectives"]:  # the matched calls end together: one collective each
        ends = {a["end_us"] for a in c["arrivals"]}
        assert len(ends) == 1


def test_different_collectives_are_never_matched(tmp_path: Path) -> None:
    # rank 0: all-reduce then all-gather; rank 1 the other way round (different groups)
    folder = tmp_path / "job"
    folder.mkdir()
    ar, ag = ("allreduce", _msg(10), 0.0, 0.0), ("all_gather", _msg(20), 0.0, 0.0)
    for rank, calls in ((0, [ar[:2] + (100.0, 400.0), ag[:2] + (450.0, 500.0)]),
                        (1, [ag[:2] + (120.0, 500.0), ar[:2] + (300.0, 400.0)])):
        (folder / f"r{rank}.json").write_text(json.dumps(_calls_rank(rank, 4, calls)))
    assert _run(folder, 4, tmp_path / "out", "--partial") == 0
    doc = _report(tmp_path / "out")
    got = sorted((c["kind"], c["arrived_last"], c["skew_us"]) for c in doc["collectives"])
    assert got == [("allgather", [0], pytest.approx(330.0)),
                   ("allreduce", [1], pytest.approx(200.0))]
    assert not any("kinds differ" in k for k in doc["not_used"])


def test_waits_and_bare_record_param_comms_are_not_collectives(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # each rank: one all-reduce, the 'wait' that PyTorch records for it (same Seq) and a
    # record_param_comms naming nothing and launching no kernel (older traces' waits)
    folder = tmp_path / "job"
    folder.mkdir()
    group = {"Process Group Ranks": "[0, 1, 2, 3]", "Group size": 4,
             "Process Group Name": "0"}
    for rank, start in ((0, 100.0), (1, 300.0)):
        extra = [
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": MAIN,
             "ts": 60.0, "dur": 1.0, "args": {"Collective name": "wait", "Seq": 7,
                                              "Process Group Ranks": "[]", "Group size": 1}},
            {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": MAIN,
             "ts": 65.0, "dur": 1.0, "args": {}}]
        doc = _calls_rank(rank, 4, [("allreduce", group | {"Seq": 7} | _msg(10), start,
                                     400.0)], extra)
        (folder / f"r{rank}.json").write_text(json.dumps(doc))
    assert _run(folder, 4, tmp_path / "out", "--partial") == 0
    printed = capsys.readouterr().out
    doc = _report(tmp_path / "out")
    [coll] = doc["collectives"]  # before: the all-reduce, the wait (its Seq) and 'other'
    assert coll["kind"] == "allreduce" and coll["matched_by"] == "seq"
    assert coll["arrived_last"] == [1] and coll["skew_us"] == pytest.approx(200.0)
    assert doc["not_used"]["wait calls (record_param_comms 'wait': waits for a collective to "
                           "complete, not communication)"] == 2
    assert doc["not_used"]["record_param_comms calls naming no collective and launching no "
                           "kernel (e.g. work waits; not communication)"] == 2
    assert "1 collectives matched across the traced ranks" in printed


def test_partial_checks_the_tensor_parallel_layout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a data-parallel job given tp_size 2: ranks 0 and 1 would be one worker; nothing in the
    # traces shows tensor parallelism (before: a report with both ranks at dp rank 0)
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, (c_end, ar) in enumerate([(110.0, 120.0), (310.0, 350.0)]):
        doc = _rank(rank, 4, c_end, ar)
        for e in doc["traceEvents"]:  # the all-reduce names no group
            e["args"].pop("Process Group Ranks", None)
            e["args"].pop("Group size", None)
        (folder / f"r{rank}.json").write_text(json.dumps(doc))
    meta = tmp_path / "tp.yaml"
    meta.write_text("dp_size: 2\npp_size: 1\ntp_size: 2\n")
    assert main(["import", "kineto", str(folder), "--meta", str(meta), "--out",
                 str(tmp_path / "out"), "--jobs", "1", "--partial"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "metadata field 'tp_size' is 2: rank 1 would be collapsed" in err
    assert not (tmp_path / "out").exists()


def test_each_not_used_reason_is_printed_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a kernel without its CUDA launch record: before, counted by the ops ("not used") and
    # again by the breakdown ("not in the breakdown"), two lines for one kernel
    folder = tmp_path / "one"
    folder.mkdir()
    doc = _rank(0, 2, 110.0, 120.0)
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "orphan", "pid": 0,
                               "tid": STREAM, "ts": 200.0, "dur": 5.0,
                               "args": {"correlation": 999}})
    (folder / "r0.json").write_text(json.dumps(doc))
    assert _run(folder, 2, tmp_path / "out", "--partial") == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "CUDA launch record" in ln]
    assert lines == ["not used: 1 GPU kernels without a CUDA launch record (not used)"]


def test_a_collective_missing_on_a_traced_member_of_its_group_is_counted(
        tmp_path: Path) -> None:
    # the group's ranks are known, but the two traced members record different messages
    # for their one all-gather (an uneven all-gather): they are not one identity, and the
    # report says that a collective was not found on every traced member of its group
    folder = tmp_path / "job"
    folder.mkdir()
    group = {"Process Group Ranks": "[0, 1, 2, 3]", "Group size": 4}
    for rank, n in ((0, 20), (1, 24)):
        doc = _calls_rank(rank, 4, [("all_gather", group | _msg(n), 100.0 + rank, 400.0)])
        (folder / f"r{rank}.json").write_text(json.dumps(doc))
    assert _run(folder, 4, tmp_path / "out", "--partial") == 0
    doc = _report(tmp_path / "out")
    assert [c["arrived_last"] for c in doc["collectives"]] == [None, None]
    assert doc["not_used"]["collectives not found on every traced member of their group (call "
                           "counts, messages or steps differ; waits measured among the members "
                           "found)"] == 2
