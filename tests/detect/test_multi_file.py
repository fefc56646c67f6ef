"""``watch`` on several Megatron-LM logs at once (issue 9): one file per rank, the rank from the
file name or from the lines' ``torchrun`` prefix, job-level events naming the ranks, restarts.

The log lines are hand-written excerpts in the exact format of Megatron-LM's
``training_log`` (``megatron/training/training.py``: `` [YYYY-MM-DD HH:MM:SS] iteration
{:8d}/{:8d} | consumed samples: {:12d} | elapsed time per iteration (ms): {:.1f} | ...``);
the iteration times are known (1 % jitter, a 1.4x slow period on ranks 0 and 1), so the
answers are known.  There is no real Megatron text log in ``../shared/real``.
"""

from __future__ import annotations

import calendar
import json
import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.detect.watch import Watcher
from stragglers.logs.follow import Follower, follow_files
from stragglers.logs.megatron import rank_from_content, rank_from_name

START = calendar.timegm(time.strptime("2025-01-10 07:00:00", "%Y-%m-%d %H:%M:%S"))


def _line(it: int, total: int, ms: float, ts: float, prefix: str = "") -> str:
    """One line of Megatron-LM's training_log (its exact format and field order)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))
    return (f"{prefix} [{stamp}] iteration {it:8d}/{total:8d} | consumed samples: "
            f"{it * 256:12d} | elapsed time per iteration (ms): {ms:.1f} | throughput per GPU "
            f"(TFLOP/s/GPU): {400.0 * 1000 / ms:.1f} | learning rate: 2.999999E-04 | global "
            "batch size:   256 | lm loss: 3.123456E+00 | loss scale: 1.0 | grad norm: 0.812 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |")


SLOW = ((400, 600), (3500, 3700))  # iterations when ranks 0 and 1 run 1.4x slower


def _rank_log(rank: int, n: int, *, seed: int, prefix: str = "",
              restart_at: int | None = None) -> list[str]:
    """A rank's log: start-up text, n iterations of about 1 s (1 % jitter), ranks 0 and 1
    1.4x slower in SLOW; ``restart_at``: the job restarts there from the checkpoint 100
    iterations earlier (the iterations are logged again)."""
    rng = np.random.default_rng(seed)
    out = [f"{prefix}> building GPT model ...", f"{prefix}> loading checkpoint ... done"]
    ts = float(START)
    its = list(range(1, n + 1))
    if restart_at is not None:
        its = its[:restart_at] + list(range(restart_at - 100, n + 1))
    for k, it in enumerate(its):
        d = math.exp(rng.normal(0, 0.01))
        if rank in (0, 1) and any(a <= it < b for a, b in SLOW):
            d *= 1.4
        ts += d
        if restart_at is not None and k == restart_at:
            out.append(f"{prefix}> loading checkpoint from iteration {it - 1}")
            ts += 120.0
        out.append(_line(it, n, 1000.0 * d, ts, prefix))
    return out


def _run(capsys, args: list[str]) -> list[dict]:
    assert main(["watch", *args, "--once"]) == 0
    return [json.loads(x) for x in capsys.readouterr().out.splitlines()]


def _write(folder: Path, name: str, lines: list[str]) -> Path:
    p = folder / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_rank_rules() -> None:
    assert rank_from_name("/x/train_rank3.log") == 3
    assert rank_from_name("log_4711_12.out") == 12  # SLURM job id, then the task id
    assert rank_from_name("rank-007.log.1") == 7
    assert rank_from_name("train.log") is None
    assert rank_from_content(b"> start\n[rank5]: > building GPT model\n") == 5
    assert rank_from_content(b"[default2]: iteration 1/ 2 |") == 2
    assert rank_from_content(b"no prefix here\n") is None


def test_four_rank_logs_in_a_folder_give_job_events(tmp_path, capsys) -> None:
    """Four logs of 5,000 iterations (about 1.6 MB each: read block by block, one file far
    ahead of the others at times); ranks 0 and 1 are slow twice, rank 2's job restarted at
    iteration 2,000."""
    d = tmp_path / "logs"
    d.mkdir()
    n = 5000
    for r in range(4):
        _write(d, f"train_rank{r}.log",
               _rank_log(r, n, seed=r, restart_at=2000 if r == 2 else None))
    out = _run(capsys, [str(d)])
    s = out[-1]
    assert s["inputs"] == 4 and s["ranks"] == 4 and s["bad"] == 0
    assert s["records"] == 4 * n + 101 and s["ignored"] == {"text": 9}
    assert s["segments"] == {"restart": 1}
    (seg,) = [e for e in out if e["event"] == "segment"]
    assert seg["rank"] == 2 and seg["file"].endswith("train_rank2.log")
    assert seg["job_iteration"] == 1900
    onsets = sorted((e["rank"], e["job_iteration"]) for e in out if e["event"] == "onset")
    assert [r for r, _ in onsets] == [0, 0, 1, 1]
    for (_, it), want in zip(onsets, [400, 3500, 400, 3500], strict=True):
        assert abs(it - want) <= 3
    for e in out:
        if e["event"] in ("onset", "recovery"):
            assert e["file"].endswith(f"train_rank{e['rank']}.log")
    jobs = [(e["kind"], e["ranks"]) for e in out if e["event"] == "job"]
    assert sorted(jobs) == [("onset", [0, 1])] * 2 + [("recovery", [0, 1])] * 2
    assert s["job_events"] == {"onset": 2, "recovery": 2}


def test_files_glob_and_list_agree(tmp_path, capsys) -> None:
    for r in range(3):
        _write(tmp_path, f"log_4711_{r}.out", _rank_log(r, 1000, seed=10 + r))
    by_glob = _run(capsys, [str(tmp_path / "log_4711_*.out")])
    by_list = _run(capsys, [str(tmp_path / f"log_4711_{r}.out") for r in range(3)])
    assert by_glob == by_list
    (job,) = [e for e in by_glob if e["event"] == "job" and e["kind"] == "onset"]
    assert job["ranks"] == [0, 1] and job["ranks_followed"] == 3
    assert abs(job["job_iteration"] - 400) <= 3


def test_rank_from_the_torchrun_prefix(tmp_path, capsys) -> None:
    """Files without a number in their name: the rank is the lines' [rankN]: prefix."""
    for r, name in ((0, "alpha.log"), (1, "beta.log")):
        _write(tmp_path, name, _rank_log(r, 1000, seed=r, prefix=f"[rank{r}]:"))
    out = _run(capsys, [str(tmp_path / "alpha.log"), str(tmp_path / "beta.log")])
    assert out[-1]["ranks"] == 2
    (job,) = [e for e in out if e["event"] == "job" and e["kind"] == "onset"]
    assert job["ranks"] == [0, 1]


def test_bad_record_names_its_file_and_iteration(tmp_path, capsys) -> None:
    lines = _rank_log(0, 600, seed=1)
    lines[300] = lines[300].replace("elapsed time per iteration (ms): ", "elapsed time per "
                                    "iteration (ms): x")
    a = _write(tmp_path, "r0.log", lines)
    b = _write(tmp_path, "r1.log", _rank_log(1, 600, seed=2))
    out = _run(capsys, [str(a), str(b)])
    (bad,) = [e for e in out if e["event"] == "bad_record"]
    assert bad["file"] == str(a) and bad["job_iteration"] == 299
    assert bad["after_job_iteration"] == 298 and bad["line"] == 301


@pytest.mark.parametrize("names, message", [
    (("rank1.log", "node_1.log"), "names rank 1, as"),
    (("rank0.log", "train.log"), "cannot tell the rank of this log"),
])
def test_ambiguous_ranks_are_one_line_errors(tmp_path, capsys, names, message) -> None:
    paths = [str(_write(tmp_path, n, _rank_log(0, 10, seed=0))) for n in names]
    assert main(["watch", *paths, "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and paths[1] in err[0]


def test_warmup_bound_is_a_readable_limit(capsys, tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"  # a regular file (/dev/null is a device: refused)
    empty.write_text("")
    assert main(["watch", "--warmup", "99999999999", str(empty), "--once"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("stragglers watch: error: --warmup: 99,999,999,999 iterations of the "
                   "minimum warm-up (watch --warmup) exceed the limit of 10,000,000 (set "
                   "STRAGGLERS_MAX_WARMUP_ITERS to raise it)")


def test_follow_two_growing_logs_one_rotated(tmp_path) -> None:
    """Two ranks' logs written while they are followed; rank 1's is rotated half-way (the
    rest goes to a new file of the same name).  Every line is read once, the job event names
    both ranks."""
    logs = {r: _rank_log(r, 1000, seed=20 + r) for r in (0, 1)}
    paths = {r: tmp_path / f"rank{r}.log" for r in (0, 1)}
    for p in paths.values():
        p.write_text("")
    total = sum(len(v) for v in logs.values())
    read = {0: 0, 1: 0}
    half = threading.Event()

    def writer() -> None:
        for r in (0, 1):
            with paths[r].open("a") as fh:
                fh.write("\n".join(logs[r][:500]) + "\n")
        half.wait(timeout=120)
        os.rename(paths[1], tmp_path / "rank1.log.1")
        paths[1].write_text("\n".join(logs[1][500:]) + "\n")
        with paths[0].open("a") as fh:
            fh.write("\n".join(logs[0][500:]) + "\n")

    th = threading.Thread(target=writer)
    th.start()
    w = Watcher(input_format="megatron-log", sources=2)
    followers = [Follower(str(paths[r]), poll=0.01, idle_timeout=60.0, yield_when_idle=True)
                 for r in (0, 1)]
    events: list = []
    deadline = time.monotonic() + 120
    for i, batch in follow_files(followers, poll=0.01):
        if batch.notice is not None:
            events += w.notice(batch.notice)
            continue
        read[i] += len(batch.lines)
        events += w.process_lines(batch.lines, file_index=i, source=str(paths[i]), rank=i)
        if min(read.values()) >= 500:
            half.set()
        if sum(read.values()) >= total or time.monotonic() > deadline:
            break
    th.join()
    events = [e.to_dict() for e in events + w.finish()]
    s = events[-1]
    assert read == {0: len(logs[0]), 1: len(logs[1])} and s["files"]["rotated"] == 1
    # between the rename and the new file a poll may find the path missing (counted)
    assert set(s["files"]) <= {"rotated", "file_missing"}
    assert s["records"] == 2000 and s["inputs"] == 2
    jobs = sorted((e["kind"], e["ranks"]) for e in events if e["event"] == "job")
    assert jobs == [("onset", [0, 1]), ("recovery", [0, 1])]


def test_a_megatron_log_on_standard_input_is_recognised(tmp_path, capsys, monkeypatch) -> None:
    """`watch -` tells a Megatron-LM log on standard input by its first block, as it does for
    a file (before, standard input was always read as JSON lines: every line `not_json`)."""
    import io
    import sys

    lines = _rank_log(0, 1000, seed=3)
    path = _write(tmp_path, "train.log", lines)
    from_file = [e for e in _run(capsys, [str(path)]) if e["event"] != "summary"]

    class Stdin:  # what sys.stdin is under a pipe: a text stream over a binary buffer
        buffer = io.BufferedReader(io.BytesIO(path.read_bytes()))  # type: ignore[arg-type]

    monkeypatch.setattr(sys, "stdin", Stdin())
    events = _run(capsys, ["-"])
    summary = events[-1]
    assert summary["records"] == 1000 and summary["bad"] == 0
    assert summary["dropped"] == {} and summary["ignored"] == {"text": 2}
    assert events[:-1] == from_file  # the same events as from the file
    assert [(e["event"], e["job_iteration"]) for e in from_file
            if e["event"] in ("onset", "recovery")] == [("onset", 400), ("recovery", 600)]
