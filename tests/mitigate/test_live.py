"""`stragglers mitigate run`: the live loop beside the example job, its reader of the job's
probe files, and its errors."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.mitigate.costs import load_costs
from stragglers.mitigate.follow_job import JobFollower
from stragglers.mitigate.live import LiveConfig, LiveController, run_live

META = {"trial_name": "t", "run_id": 0, "dp_size": 2, "dsp_size": 1, "pp_size": 1,
        "tp_size": 1, "vpp_size": 1, "world_size": 2}


def _span(step: int, optype: str, start: float, end: float, mb: int = 0) -> str:
    return json.dumps({"kind": "span", "step": step, "optypes": [optype], "start": start,
                       "end": end, "mb_id": mb, "mc": 0})


def _header(rank: int) -> str:
    return json.dumps({"kind": "header", "rank": rank, "dp_rank": rank, "stage": 0,
                       "meta": META})


def test_follower_reads_complete_lines_and_steps(tmp_path: Path) -> None:
    """Hand-written probe files: compute and micro-batches per step by position; a step is
    complete only when both ranks ended it; half a line waits; a bad line is counted."""
    probe = tmp_path / "probe"
    probe.mkdir()
    r0 = [_header(0), _span(3, "forward-compute", 0.0, 0.5), _span(3, "backward-compute",
          0.5, 1.5), _span(3, "forward-compute", 2.0, 2.25, 1), _span(3, "params-all-gather",
          3.0, 9.0), json.dumps({"kind": "step_end", "step": 3, "time": 4.0}), "{not json"]
    r1 = [_header(1), _span(3, "forward-compute", 0.0, 0.125),
          json.dumps({"kind": "step_end", "step": 3, "time": 4.0}),
          _span(4, "forward-compute", 0.0, 0.125)]
    (probe / "rank-00000.jsonl").write_text("\n".join(r0) + "\n")
    (probe / "rank-00001.jsonl").write_text("\n".join(r1) + "\n" + '{"kind": "step_e')
    f = JobFollower(tmp_path)
    f.poll()
    assert f.ready() and f.meta is not None and f.meta.dp_size == 2
    t = f.table()
    assert t.steps.tolist() == [3]
    np.testing.assert_allclose(t.compute_s[:, 0], [1.75, 0.125])
    assert t.microbatches[:, 0].tolist() == [2, 1]
    assert f.bad_lines == {"not_json": 1}
    with (probe / "rank-00000.jsonl").open("a") as fh:
        fh.write(json.dumps({"kind": "step_end", "step": 4, "time": 5.0}) + "\n")
    with (probe / "rank-00001.jsonl").open("a") as fh:
        fh.write('nd", "step": 4, "time": 5.0}\n')
    f.poll()
    assert f.table(after=3).steps.tolist() == [4]
    assert not f.finished()


def test_run_refuses_an_existing_action_file(tmp_path: Path, capsys) -> None:
    action = tmp_path / "a.json"
    action.write_text("{}")
    assert main(["mitigate", "run", str(tmp_path), "--action", str(action)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a.json: the action file exists already" in err


def test_run_refuses_a_finished_job_and_times_out(tmp_path: Path, capsys) -> None:
    (tmp_path / "done" / "workers").mkdir(parents=True)
    (tmp_path / "done" / "workers" / "worker-00000.json").write_text("{}")
    assert main(["mitigate", "run", str(tmp_path / "done"), "--action",
                 str(tmp_path / "a.json")]) == 2
    assert "has finished already" in capsys.readouterr().err
    assert main(["mitigate", "run", str(tmp_path / "never"), "--action",
                 str(tmp_path / "a.json"), "--idle-timeout", "0.3", "--poll", "0.05"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no new probe records for 0.3 s" in err


# Live loop: dp 2 x pp 1, rank 0 (DP replica 0) sleeps 7x its compute from step 5 + K on.
# Sleep, not spin: on a 2-core machine a spinning rank takes the CPU of the healthy one too
# and blurs which replica is slow; a sleeping one slows only itself.
K = 30
JOB = ["--dp", "2", "--pp", "1", "--steps", str(5 + 2 * K), "--warmup-steps", "5",
       "--inject-period", str(K), "--slow-rank", "0", "--slow-factor", "8", "--slow-mode",
       "sleep", "--hidden", "64", "--heads", "2", "--seq-len", "64", "--vocab-size", "128",
       "--microbatches", "8", "--micro-batch-size", "4", "--gc-interval", "0"]


@pytest.mark.slow
def test_live_s2_action_reduces_the_step_time(tmp_path: Path) -> None:
    """The controller detects the slow replica, gives it fewer micro-batches, and the job's
    median step time after the action is clearly below the median of its slow steps before
    (even split: the step waits for 8 slow micro-batches, 64 healthy ones' worth; after, for
    2 of them or 14 healthy ones: about a quarter, so that a machine load that changes
    during the run cannot hide it)."""
    pytest.importorskip("torch")
    out, action = tmp_path / "job", tmp_path / "action.json"
    costs = tmp_path / "costs.yaml"
    costs.write_text("S2: {overhead_s: 0.3}\n")
    log = (tmp_path / "job.log").open("w")
    job = subprocess.Popen([sys.executable, "-m", "stragglers.testbed.job",
                            "--out-dir", str(out), "--action-file", str(action), *JOB],
                           stdout=log, stderr=subprocess.STDOUT)
    records: list[dict] = []
    try:
        end = run_live(LiveConfig(job_dir=out, action_path=action,
                                  strategies=load_costs(costs), idle_timeout_s=300),
                       records.append)
    finally:
        assert job.wait(timeout=300) == 0, (tmp_path / "job.log").read_text()[-2000:]
    actions = [r for r in records if r["record"] == "action"]
    assert actions, [r for r in records if r["record"] != "watch"]
    first = actions[0]
    assert first["assignment"][0] < 8 < first["assignment"][1]  # replica 0 is the slow one
    applied = end["job"]["applied"]
    assert applied[0]["assignment"] == first["assignment"]
    at = applied[0]["step"]
    assert at >= first["step"]
    summary = json.loads((out / "summary.json").read_text())
    times = dict(zip(range(summary["first_step"], 5 + 2 * K), summary["step_times"],
                     strict=True))
    onset = 5 + K
    slow = [times[s] for s in range(onset, at)]
    after = [times[s] for s in range(at + 1, 5 + 2 * K)]
    assert len(slow) >= 3 and len(after) >= 5, (onset, at)
    assert statistics.median(after) < 0.8 * statistics.median(slow), (slow, after)
    # the job really ran the assignment: replica 0 ran fewer forward computes after it
    follower = JobFollower(out)
    follower.poll()
    table = follower.table(after=at - 1)
    assert table.microbatches[0, 0] == first["assignment"][0]
    assert table.microbatches[1, 0] == first["assignment"][1]


def test_follower_checks_the_step_limit(tmp_path: Path) -> None:
    """A step number beyond the live_steps limit is refused before the arrays grow."""
    from stragglers.errors import InputError

    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "rank-00000.jsonl").write_text(
        _header(0) + "\n" + _span(10**12, "forward-compute", 0.0, 1.0) + "\n")
    with pytest.raises(InputError, match=r"rank-00000.jsonl: line 2: field 'step'.*live_steps|"
                                         r"rank-00000.jsonl: line 2: field 'step'.*LIVE_STEPS"):
        JobFollower(tmp_path).poll()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux affinity")
def test_the_loop_yields_to_the_job_and_keeps_off_its_pinned_cpus(tmp_path: Path) -> None:
    """Both ranks of a job run on this host pinned to one CPU (a real process, its pid in
    their probe headers, as the example job with --pin-cpus writes them): the loop's thread
    goes to the other CPUs it may use (with one CPU only: it stays, and says so) and runs
    ``nice`` lower; both undone after. With keep_off_job_cpus off it stays where it was."""
    mine = os.sched_getaffinity(0)
    cpu = min(mine)
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.sched_setaffinity(rank.pid, {cpu})
        probe = tmp_path / "job" / "probe"
        probe.mkdir(parents=True)
        for r in range(2):
            (probe / f"rank-{r:05d}.jsonl").write_text(json.dumps(
                {"kind": "header", "rank": r, "dp_rank": r, "stage": 0, "meta": META,
                 "pid": rank.pid, "host": socket.gethostname()}) + "\n")
        seen: list[tuple[dict, set[int], int, set[int], int]] = []

        def place(keep_off: bool) -> None:  # in a thread of its own: nice is per thread
            ctl = LiveController(LiveConfig(job_dir=tmp_path / "job",
                                            action_path=tmp_path / "a.json",
                                            strategies=load_costs(None), nice=5,
                                            keep_off_job_cpus=keep_off), lambda rec: None)
            ctl.follower.poll()
            tid = threading.get_native_id()
            before = os.getpriority(os.PRIO_PROCESS, tid)
            rec = ctl.place()
            during = (os.sched_getaffinity(0), os.getpriority(os.PRIO_PROCESS, tid) - before)
            ctl.unplace()
            seen.append((rec, *during, os.sched_getaffinity(0), before))

        for keep_off in (True, False):
            t = threading.Thread(target=place, args=(keep_off,))
            t.start()
            t.join()
    finally:
        rank.kill()
        rank.wait()
    (rec, cpus, lowered, after, _), (rec2, cpus2, _, _, _) = seen
    assert rec["record"] == "controller" and rec["job_cpus"] == [cpu]
    assert lowered == min(5, 19 - seen[0][4])
    if len(mine) >= 2:
        assert cpus == mine - {cpu} and rec["cpus"] == sorted(mine - {cpu})
        assert rec["note"] == "moved off the job's CPUs"
    else:
        assert cpus == mine and "no CPU free" in rec["note"]
    assert after == mine  # undone
    assert cpus2 == mine and "not looked at" in rec2["note"]
