"""``watch`` on a probe folder (issue 29): the per-rank step records (busy and wait) name the
rank that is slow, not the ranks that wait for it; a folder's files are read only when
``watch`` understands them (the others counted by reason); a folder, a glob or a path with no
file yet is waited for, and files that appear later join.

The step records are built by hand with known values: two DDP ranks whose steps take equally
long (they synchronise every step), rank 1's busy time 1.5x from step 60 to 119, rank 0
waiting for it meanwhile."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.detect.watch_files import WatchSettings, watch_files, watch_inputs
from stragglers.evaluation.bocd import make_detector
from stragglers.jsonout import Output
from stragglers.logs.records import RecordError, StepRecord, parse_line
from stragglers.logs.watch_dir import FileScanner, classify

SLOW = (60, 120)  # rank 1's busy time is 1.5x in these steps
STEPS = 200


def _steps(n: int = STEPS, seed: int = 0) -> dict[int, list[dict]]:
    """Step records of two ranks that synchronise every step: the step takes as long as
    the slower rank's busy time; the other rank waits the difference."""
    rng = np.random.default_rng(seed)
    out: dict[int, list[dict]] = {0: [], 1: []}
    ts = 1000.0
    for k in range(n):
        busy = {r: 0.05 * float(np.exp(rng.normal(0, 0.02))) for r in (0, 1)}
        if SLOW[0] <= k < SLOW[1]:
            busy[1] *= 1.5
        step = max(busy.values()) + 0.002  # the gradient transfer
        ts += step
        for r in (0, 1):
            out[r].append({"kind": "step", "v": 1, "rank": r, "step": k, "ts": round(ts, 6),
                           "busy": round(busy[r], 6), "wait": round(step - busy[r], 6)})
    return out


def _probe_folder(folder: Path, records: dict[int, list[dict]]) -> None:
    """A probe folder as the loop probe leaves it: step records beside the trace files."""
    folder.mkdir(parents=True, exist_ok=True)
    for r, recs in records.items():
        (folder / f"steps-rank-{r:05d}.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in recs))
        (folder / f"rank-{r:05d}.jsonl").write_text(
            json.dumps({"kind": "header", "version": 2, "rank": r}) + "\n"
            + json.dumps({"kind": "span", "step": 2, "optypes": ["optimizer"],
                          "start": 1.0, "end": 1.1, "mb_id": -1, "mc": -1}) + "\n")
        (folder / f"rank-{r:05d}.parquet").write_bytes(b"PAR1\x15\x04\x15\x00" + bytes(200))
    (folder / "job.yaml").write_text("trial_name: loop\ndp_size: 2\npp_size: 1\n")
    (folder / "session").mkdir()


def _run(capsys: pytest.CaptureFixture[str], args: list[str]) -> list[dict]:
    assert main(["watch", *args]) == 0
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def test_step_records_name_the_slow_rank_not_the_one_waiting(tmp_path: Path, capsys) -> None:
    _probe_folder(tmp_path / "probe", _steps())
    out = _run(capsys, [str(tmp_path / "probe"), "--once"])
    level = [(e["event"], e["rank"], e["job_iteration"]) for e in out
             if e["event"] in ("onset", "recovery", "change")]
    assert [(k, r) for k, r, _ in level] == [("onset", 1), ("recovery", 1)], level
    assert abs(level[0][2] - SLOW[0]) <= 2 and abs(level[1][2] - SLOW[1]) <= 2
    onset = next(e for e in out if e["event"] == "onset")
    assert onset["declared_job_iteration"] - SLOW[0] <= 20
    assert onset["level_s"] == pytest.approx(0.075, rel=0.05)  # rank 1's busy time
    s = out[-1]
    assert s["inputs"] == 2 and s["records"] == 2 * STEPS and s["bad"] == 0
    assert s["skipped_files"] == {"binary": 2, "folder": 1, "not_records": 2, "text": 1}
    assert s["unknown_fields"] == {} and s["slow_ranks"] == []


def test_iteration_time_alone_cannot_tell_who_is_slow(tmp_path: Path, capsys) -> None:
    """The same steps as iteration records (the step's time, equal on both ranks): both
    ranks have the onset, so iteration times cannot name the slow one."""
    recs = _steps()
    p = tmp_path / "iters.jsonl"
    p.write_text("".join(json.dumps({"rank": x["rank"], "iter": x["step"], "ts": x["ts"],
                                     "duration": round(x["busy"] + x["wait"], 6)}) + "\n"
                         for k in range(STEPS) for x in (recs[0][k], recs[1][k])))
    out = _run(capsys, [str(p), "--once"])
    assert sorted(e["rank"] for e in out if e["event"] == "onset") == [0, 1]


def test_step_record_format() -> None:
    rec = parse_line('{"kind": "step", "v": 1, "rank": 2, "step": 7, "ts": 5.0, "busy": 0.04, '
                     '"wait": 0.01}')
    assert rec == StepRecord(rank=2, step=7, busy=0.04, wait=0.01, ts=5.0)
    assert parse_line('{"rank": 0, "step": 1, "busy": 0.1, "wait": 0}') == StepRecord(
        rank=0, step=1, busy=0.1, wait=0.0)  # the kind from the fields, no ts, no version
    for line, field in (('{"kind": "step", "v": 2, "rank": 0, "step": 1, "busy": 1, "wait": 0}',
                         "'v': expected 1"),
                        ('{"kind": "step", "rank": 0, "step": 1, "busy": 0, "wait": 0}',
                         "'busy': expected a number > 0"),
                        ('{"kind": "step", "rank": 0, "step": 1, "busy": 1}',
                         "'wait': expected a number")):
        with pytest.raises(RecordError, match=field):
            parse_line(line, source="s.jsonl", line=3)


def test_classify_files_of_a_probe_folder(tmp_path: Path) -> None:
    _probe_folder(tmp_path, _steps(5))
    (tmp_path / "calls-rank-00000.jsonl").write_text(
        '{"rank": 0, "type": "all_reduce", "size": 4, "ts": 1.0, "duration": 0.1}\n')
    (tmp_path / "train_rank3.log").write_text(
        "> building\n [2025-01-10 07:00:00] iteration        1/     100 | elapsed time per "
        "iteration (ms): 1000.0 |\n")
    (tmp_path / "starting.log").write_text("> building GPT model ...\n")
    (tmp_path / "half.jsonl").write_text('{"kind": "step", "rank": 0, "st')
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "times.json").write_text('{\n "values": {"1": 1.0, "2": 1.0}\n}\n')
    (tmp_path / "result.json").write_text('{\n "verdict": {"cause": "none"}\n}\n')
    got = {p.name: classify(p) for p in sorted(tmp_path.iterdir())}
    assert got == {
        "calls-rank-00000.jsonl": "jsonl", "steps-rank-00000.jsonl": "jsonl",
        "steps-rank-00001.jsonl": "jsonl", "rank-00000.jsonl": "not_records",
        "rank-00001.jsonl": "not_records", "rank-00000.parquet": "binary",
        "rank-00001.parquet": "binary", "job.yaml": "wait:text", "session": "folder",
        "train_rank3.log": "megatron-log", "starting.log": "wait:text",
        "half.jsonl": "wait:partial", "empty.jsonl": "wait:empty",
        "times.json": "megatron-json", "result.json": "not_records"}
    # --format megatron-log: a log whose iterations have not begun is read
    scanner = FileScanner([str(tmp_path)], "megatron-log")
    assert [Path(p).name for p, _ in scanner.scan()] == ["job.yaml", "starting.log",
                                                         "train_rank3.log"]


def test_several_formats_found_at_once_are_one_line(tmp_path: Path, capsys) -> None:
    _probe_folder(tmp_path, _steps(5))
    (tmp_path / "train_rank3.log").write_text(
        " [2025-01-10 07:00:00] iteration        1/     100 | elapsed time per iteration "
        "(ms): 1000.0 |\n")
    assert main(["watch", str(tmp_path), "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "watch reads several files of one format" in err[0]


def _settings(**kw: object) -> WatchSettings:
    base = dict(input_format="auto", window=1024, warmup=None, max_ranks=64, once=False,
                poll=0.05, idle_timeout=3.0, wait_timeout=120.0)
    base.update(kw)
    return WatchSettings(**base)  # type: ignore[arg-type]


def _watch(args: list[str], settings: WatchSettings) -> list[dict]:
    buf = io.StringIO()
    assert watch_files(watch_inputs(args, once=settings.once), lambda: make_detector("robust"),
                       settings, Output(buf)) == 0
    return [json.loads(x) for x in buf.getvalue().splitlines()]


@pytest.mark.parametrize("how", ["folder", "glob"])
def test_watch_started_before_the_job_waits_and_follows_the_rank_files(tmp_path: Path,
                                                                      how: str) -> None:
    """``watch`` on a probe folder that does not exist yet (or a glob with no match): the
    job creates the folder and writes the trace files and each rank's step records, rank 1's
    file later than rank 0's, both growing; every record is read, the slow rank named."""
    folder = tmp_path / "runs" / "ddp" / "probe"
    recs = _steps()
    started = threading.Event()

    def job() -> None:
        started.wait(timeout=60)
        time.sleep(0.3)
        folder.mkdir(parents=True)
        (folder / "job.yaml").write_text("trial_name: loop\n")
        (folder / "rank-00000.parquet").write_bytes(b"PAR1" + bytes(100))
        files = {r: (folder / f"steps-rank-{r:05d}.jsonl").open("w") for r in (0, 1)}
        for k in range(STEPS):
            for r in (0, 1):
                if r == 1 and k < 30:
                    continue  # rank 1's file appears later
                lines = recs[r][:31] if r == 1 and k == 30 else [recs[r][k]]
                files[r].write("".join(json.dumps(x) + "\n" for x in lines))
                files[r].flush()
            if k % 20 == 0:
                time.sleep(0.05)
        for fh in files.values():
            fh.close()

    th = threading.Thread(target=job)
    th.start()
    started.set()
    arg = str(folder) if how == "folder" else str(folder / "steps-rank-*.jsonl")
    out = _watch([arg], _settings())
    th.join()
    assert [(e["event"], e["rank"]) for e in out if e["event"] in ("onset", "recovery")] == [
        ("onset", 1), ("recovery", 1)]
    joined = [e for e in out if e["event"] == "inputs"]
    assert sum(len(e["added"]) for e in joined) == 1  # rank 1's file, after rank 0's
    assert joined[-1]["inputs"] == 2
    s = out[-1]
    assert s["records"] == 2 * STEPS and s["bad"] == 0 and s["inputs"] == 2
    assert s["iterations"] == {"0": STEPS, "1": STEPS}
    if how == "folder":
        assert s["skipped_files"] == {"binary": 1, "text": 1}


def test_no_file_within_the_wait_timeout_is_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "job.yaml").write_text("trial_name: loop\n")
    t0 = time.monotonic()
    assert main(["watch", str(tmp_path), "--wait-timeout", "0.5", "--poll", "0.05"]) == 2
    assert time.monotonic() - t0 >= 0.5
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"stragglers watch: error: {tmp_path}: no file watch can read (skipped: 1 "
                   "text); waited 0.5 s (--wait-timeout)"]
    assert main(["watch", str(tmp_path / "none" / "*.jsonl"), "--wait-timeout", "0.2",
                 "--poll", "0.05"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no file matches the pattern; waited 0.2 s" in err[0]


def test_once_does_not_wait(tmp_path: Path, capsys) -> None:
    assert main(["watch", str(tmp_path), "--once"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"{tmp_path}: is a folder without files to watch")
    assert main(["watch", str(tmp_path / "later"), "--once"]) == 2
    assert "no such file" in capsys.readouterr().err
