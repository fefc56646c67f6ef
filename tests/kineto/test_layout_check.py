"""The layout of the metadata checked against the traces (issue 23, item 4).

Hand-built rank traces of jobs whose layout is known (:mod:`tests.kineto.chrome`), imported
with a layout they contradict: a data-parallel-only job with ``pp_size 2`` or ``tp_size 2``,
a pipeline job with ``pp_size 1``, two files at one position. Each is one line, exit 2,
naming the file and the field; the right layout still imports.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from stragglers.errors import InputError
from stragglers.kineto import import_kineto
from stragglers.synth import SynthSpec
from stragglers.synth.generator import generate
from stragglers.trace.io import JobMeta, TraceColumns
from tests.kineto.chrome import spread_steps, write_profiler_job
from tests.kineto.test_import import run_cli


def dp_only(tmp_path: Path, dp: int = 4, **kwargs) -> tuple[Path, TraceColumns, JobMeta]:
    """A data-parallel-only job (dp ranks, one stage) as rank traces."""
    trace, meta, _ = generate(SynthSpec(dp=dp, pp=1, microbatches=2, steps=3, seed=1,
                                        jitter=0.02))
    trace = spread_steps(trace)
    return write_profiler_job(trace, meta, tmp_path / "prof", **kwargs), trace, meta


def strip_groups(folder: Path) -> None:
    """Remove every process-group argument (older PyTorch, TorchRec traces record none)."""
    for path in folder.iterdir():
        doc = json.loads(path.read_text())
        for ev in doc["traceEvents"]:
            for key in ("Process Group Ranks", "Group size"):
                ev.get("args", {}).pop(key, None)
        path.write_text(json.dumps(doc))


def test_dp_only_job_with_pp_size_2_is_refused(tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    folder, _, _ = dp_only(tmp_path)
    wrong = JobMeta(dp_size=2, pp_size=2, world_size=4)
    with pytest.raises(InputError) as err:
        import_kineto(folder, wrong, jobs=1)
    assert str(err.value) == (
        f"{folder / 'rank-0.json'}: metadata field 'pp_size' is 2, but rank 0 (dp rank 0, "
        "stage 0) records no send/recv (no point-to-point call, kernel or annotation): the "
        "trace shows no pipeline parallelism")
    text = run_cli(tmp_path, folder, wrong, capsys)
    assert "metadata field 'pp_size' is 2" in text


@pytest.mark.parametrize("groups", [True, False], ids=["group-ranks", "no-group-info"])
def test_dp_only_job_with_tp_size_2_does_not_drop_the_odd_ranks(
        tmp_path: Path, capsys: pytest.CaptureFixture, groups: bool) -> None:
    """tp_size 2 would collapse ranks 1 and 3 into ranks 0 and 2 and never read them: the
    DP collectives run over all four ranks, nothing shows a tensor-parallel group."""
    folder, _, _ = dp_only(tmp_path)
    if not groups:
        strip_groups(folder)
    wrong = JobMeta(dp_size=2, pp_size=1, tp_size=2, world_size=4)
    with pytest.raises(InputError) as err:
        import_kineto(folder, wrong, jobs=1)
    assert str(err.value).startswith(
        f"{folder / 'rank-1.json'}: metadata field 'tp_size' is 2: rank 1 would be collapsed "
        "into rank 0's worker and its trace not read, but nothing in the traces shows "
        "tensor/context parallelism")
    run_cli(tmp_path, folder, wrong, capsys)


def test_pipeline_job_with_pp_size_1_is_refused(tmp_path: Path) -> None:
    """A dp 2 x pp 2 job read as dp 4 x pp 1: rank 0's sends go to rank 2, which that layout
    makes another DP rank of the same stage."""
    trace, meta, _ = generate(SynthSpec(dp=2, pp=2, microbatches=2, steps=3, seed=1))
    folder = write_profiler_job(spread_steps(trace), meta, tmp_path / "prof")
    with pytest.raises(InputError, match=(
            r"rank-0.json: traceEvents\[\d+\]: field 'Dst Rank' 2: a send to rank 2 \(dp rank "
            r"2, stage 0\) on rank 0 \(dp rank 0, stage 0\) contradicts the layout \(dp_size 4, "
            r"pp_size 1, tp_size 1, dsp_size 1\): pipeline send/recv joins neighbouring "
            r"stages of one DP rank")):
        import_kineto(folder, JobMeta(dp_size=4, pp_size=1, world_size=4), jobs=1)
    # the right layout imports
    got, _ = import_kineto(folder, meta, jobs=1)
    assert len(got) == len(trace)


def test_peer_outside_the_job_is_refused(tmp_path: Path) -> None:
    trace, meta, _ = generate(SynthSpec(dp=1, pp=2, microbatches=2, steps=2, seed=1))
    folder = write_profiler_job(spread_steps(trace), meta, tmp_path / "prof")
    path = folder / "rank-0.json"
    doc = json.loads(path.read_text())
    send = next(e for e in doc["traceEvents"] if e.get("args", {}).get("Dst Rank") == 1)
    send["args"]["Dst Rank"] = 5
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"rank-0.json: traceEvents\[\d+\]: field 'Dst Rank' 5 "
                                         r"is outside the metadata's world_size 2"):
        import_kineto(folder, meta, jobs=1)


def test_two_files_at_one_position_are_refused(tmp_path: Path) -> None:
    """pg_config puts rank 1 where rank 0 is (index 0 of its DATA_PARALLEL_GROUP): one of
    them would have been dropped."""
    folder, _, meta = dp_only(tmp_path, dp=2)
    path = folder / "rank-1.json"
    doc = json.loads(path.read_text())
    doc["distributedInfo"]["pg_config"] = [{"pg_desc": "DATA_PARALLEL_GROUP", "ranks": [1, 0]}]
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=(
            r"rank-1.json: distributedInfo \(pg_config\) puts rank 1 at dp rank 0, stage 0, "
            r"TP/CP index 0, where rank 0 \(.*rank-0.json\) already is")):
        import_kineto(folder, meta, jobs=1)


def test_tensor_parallel_job_with_group_ranks_but_no_pg_config_imports(tmp_path: Path) -> None:
    """A real TP job (every TP rank records the worker's ops): its DP collectives run in
    groups of every other rank ([0, 2], ...), a data-parallel group of the TP layout."""
    trace, _, _ = generate(SynthSpec(dp=2, pp=2, microbatches=2, steps=3, seed=1))
    meta = JobMeta(dp_size=2, pp_size=2, tp_size=2, world_size=8)
    folder = write_profiler_job(spread_steps(trace), meta, tmp_path / "prof")
    got, report = import_kineto(folder, meta, jobs=1)
    assert report.ranks_collapsed == [1, 3, 5, 7]
    assert np.unique(got.rank).tolist() == [0, 2, 4, 6]


def gloo_p2p(folder: Path, keep_peer_ranks: tuple[int, ...] = ()) -> None:
    """Record the point-to-point transfers as gloo does: ``gloo:send`` / ``gloo:recv`` ranges
    without a peer (no ``record_param_comms`` with ``Dst Rank`` / ``Src Rank``, no NCCL
    kernel), except on ``keep_peer_ranks``."""
    for path in folder.iterdir():
        doc = json.loads(path.read_text())
        if doc["distributedInfo"]["rank"] in keep_peer_ranks:
            continue
        events = []
        for ev in doc["traceEvents"]:
            args = ev.get("args", {})
            if ev.get("name") == "record_param_comms" and args.get("Collective name") in (
                    "send", "recv"):
                continue
            if ev.get("cat") == "kernel" and "SendRecv" in ev["name"]:
                continue
            if ev.get("name") in ("nccl:send", "nccl:recv"):
                ev["name"] = ev["name"].replace("nccl:", "gloo:")
            events.append(ev)
        doc["traceEvents"] = events
        path.write_text(json.dumps(doc))


def test_pipeline_whose_transfers_name_no_peer_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 28 item 4: a dp 1 x pp 2 job under gloo (P2P without peers). The transfers
    cannot be typed, so they are dropped (and counted); before, the pipeline check still
    counted them and the import went on with independent stages (on this job: S 1.21 and
    discrepancy 1.20, against S 1.11 and 1.00 for the job's own trace)."""
    trace, meta, _ = generate(SynthSpec(dp=1, pp=2, microbatches=3, steps=3, seed=1,
                                        slow_workers=[(0, 1, 1.6)]))
    folder = write_profiler_job(spread_steps(trace), meta, tmp_path / "prof")
    gloo_p2p(folder)
    with pytest.raises(InputError) as err:
        import_kineto(folder, meta, jobs=1)
    assert str(err.value) == (
        f"{folder / 'rank-0.json'}: metadata field 'pp_size' is 2, but none of the 18 "
        "send/recv calls of rank 0 (dp rank 0, stage 0) names its peer ('Dst Rank' / "
        "'Src Rank'; e.g. gloo:send ranges): the pipeline stages cannot be linked (name "
        "them with record_function ranges forward-send, forward-recv, backward-send, "
        "backward-recv, or record them under NCCL)")
    text = run_cli(tmp_path, folder, meta, capsys)
    assert text.count("\n") == 1 and "the pipeline stages cannot be linked" in text


def test_peerless_transfers_beside_linked_ones_are_counted(tmp_path: Path) -> None:
    """Transfers without a peer on a worker whose other transfers have one (Megatron's
    batched P2P: the SendRecv kernel of a batch) are dropped and counted; the pipeline
    check counts only the linked ones."""
    trace, meta, _ = generate(SynthSpec(dp=1, pp=2, microbatches=3, steps=3, seed=1))
    folder = write_profiler_job(spread_steps(trace), meta, tmp_path / "prof")
    for path in folder.iterdir():  # one more gloo:send without a peer per step
        doc = json.loads(path.read_text())
        steps = [e for e in doc["traceEvents"] if str(e.get("name")).startswith("ProfilerStep")]
        doc["traceEvents"] += [{"ph": "X", "cat": "user_annotation", "name": "gloo:send",
                                "pid": 1, "tid": 100, "ts": s["ts"] + 0.5, "dur": 0.2,
                                "args": {}} for s in steps]
        path.write_text(json.dumps(doc))
    _, report = import_kineto(folder, meta, jobs=1)
    # two ranks, four ProfilerSteps each (the last one, truncated, is dropped after typing)
    assert report.counts["send calls without a peer rank"] == 2 * 4
