"""The node guard (``stragglers guard``) beside ``torchrun``: the exit status of a dead worker
read before its agent reaps it, the agent's log lines, the options it refuses, and two real
``torchrun`` agents (c10d rendezvous, ``--nnodes 1:2``) on this machine, each under a guard,
whose worker on node b is killed: node b leaves, node a resumes alone from the checkpoint and
the incident says what happened and what it cost.

The workers of the two-agent test are a fake elastic job without torch
(``fake_elastic_rank.py``: heartbeats, checkpoints, a barrier per step) so that they start in
a fraction of a second; the agents are real torchrun. Loaded-machine safe: no time bound is
asserted.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stragglers.cli import main
from stragglers.recover.guard import Guard, GuardConfig, _AgentLog, exit_status
from stragglers.recover.heartbeat import Heartbeat

FAKE = str(Path(__file__).with_name("fake_elastic_rank.py"))
STRAGGLERS = str(Path(sys.executable).with_name("stragglers"))
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))


def _zombie(code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 60
    while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("code, status", [("raise SystemExit(3)", 3),
                                          ("import os, signal; os.kill(os.getpid(), 9)", -9)])
def test_the_exit_status_of_a_dead_worker_before_it_is_reaped(code: str, status: int) -> None:
    proc = _zombie(code)  # its parent (here: the test, under torchrun: the agent) not told yet
    assert exit_status(proc.pid) == status
    assert proc.wait() == status
    assert exit_status(proc.pid) is None  # reaped: gone


def test_the_agent_log_says_which_workers_it_stopped_and_how_others_failed(
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    lines = (b"W1127 16:46:01.351000 12956 torch/distributed/elastic/multiprocessing/api.py:1028]"
             b" Sending process 13106 closing signal SIGTERM\n"
             b"E1127 16:31:40.599000 3036 torch/distributed/elastic/multiprocessing/api.py:1002]"
             b" failed (exitcode: -9) local_rank: 0 (pid: 3072) of binary: /usr/bin/python\n"
             b"[rank0]: anything else\n")
    log = _AgentLog(io.BytesIO(lines))
    log.join()
    assert log.closing == {13106} and log.codes == {3072: -9}
    assert capsysbinary.readouterr().err == lines  # passed through


@pytest.mark.parametrize("argv, message", [
    (["--ckpt", "c", "--", "true"], "--run-dir is required"),
    (["--run-dir", "r", "--ckpt", "c"], "give the launcher command after --"),
    (["--run-dir", "r", "--ckpt", "c", "--node", "a/b", "--", "true"], "--node 'a/b'"),
    (["--run-dir", "r", "--ckpt", "c", "--exclude-on", "slow", "--", "true"],
     "--exclude-on slow"),
    (["--serve-store", "29400"], "--serve-store '29400': give HOST:PORT"),
])
def test_bad_options(argv: list[str], message: str, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["guard", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_a_killed_rank_under_torchrun_takes_its_node_out(tmp_path: Path) -> None:
    """Two agents, one worker each; node a hosts the rendezvous store. The worker of node b
    is killed (SIGKILL) as it begins step 3: its guard blames it (it ended first, killed),
    node b leaves (guard exit 3), node a's agent restarts its failed worker and the next
    round runs without b, from the checkpoint of step 1 (restart at step 2).

    Both nodes must be in the first round: node b's agent starts first (it waits for a's
    store) and the rendezvous waits 5 s after its first node for more. (With 1 s a loaded run
    ended with b's guard exiting 0 and node a's agent stopping its worker for a new round:
    node a had run the first round alone and b joined a later one, which resumed past the
    kill step; started 3 s after a, b finds a round it cannot join at all.)"""
    port = _free_port()
    run, ck = tmp_path / "run", tmp_path / "ck"
    conf = "last_call_timeout=5,keep_alive_interval=1,keep_alive_max_attempt=2"
    guards = {}
    for node, host in (("b", 0), ("a", 1)):
        guards[node] = subprocess.Popen(
            [STRAGGLERS, "guard", "--run-dir", str(run), "--ckpt", str(ck), "--node", node,
             "--heartbeat-s", "0.2", "--timeout-s", "30", "--",
             TORCHRUN, "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t", "--max-restarts", "3",
             "--rdzv-conf", f"is_host={host},{conf}", FAKE, "8", "b", "3"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {n: p.communicate(timeout=600) for n, p in guards.items()}
    codes = {n: p.returncode for n, p in guards.items()}
    assert codes == {"a": 0, "b": 3}, out["a"][1][-3000:] + out["b"][1][-3000:]
    summary = {n: json.loads(o[0].splitlines()[-1]) for n, o in out.items()}
    assert summary["b"]["left"] and not summary["a"]["left"]
    (inc,) = summary["a"]["incidents"]
    assert inc["kind"] == "crash" and inc["culprit_nodes"] == ["b"]
    assert inc["recorded_by"] == "b" and inc["world"] == 2
    assert inc["culprit_ranks"] in ([0], [1])  # b's worker: the rendezvous orders the nodes
    assert inc["exit_codes"] == {str(inc["culprit_ranks"][0]): -9}
    assert inc["evidence"]["blamed_by"] == "first_exit"
    assert inc["checkpoint_step"] == 1 and inc["restart_step"] == 2
    assert inc["last_step_reached"] == 3 and inc["steps_lost"] == 1
    assert inc["resumed_after_s"] is not None and inc["world_after"] == 1
    assert "node b left the job" in inc["action"]
    # every step trained; the second round (world 1) began at the restart step, no second kill
    rows = [json.loads(x) for x in (run / "steps.jsonl").read_text().splitlines()]
    assert [(r["step"], r["world"]) for r in rows] == [(0, 2), (1, 2), (2, 2)] + [
        (s, 1) for s in range(2, 8)]
    assert sorted(os.listdir(run / "injections")) == ["kill"]
    assert json.loads((run / "nodes" / "b.json").read_text())["state"] == "left"


@pytest.mark.slow
def test_a_request_to_exclude_a_slow_rank_takes_its_node_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Mitigation S4 under torchrun: ``--exclude-rank 1`` names rank 1's node (b) from the
    heartbeats; b's guard leaves (its launcher, here a stand-in, ends on SIGTERM), a's guard
    stays and kills its workers of the round (none here) for the restart."""
    run, ck = tmp_path / "run", tmp_path / "ck"
    (run / "heartbeats").mkdir(parents=True)
    for node, rank in (("a", 0), ("b", 1)):
        hb = Heartbeat(run / "heartbeats", rank=rank, slot=rank, interval=60.0, node=node,
                       local_rank=0, world=2)
        hb.step(5)
        hb.close("running")
    assert main(["guard", "--run-dir", str(run), "--ckpt", str(ck), "--exclude-rank", "1",
                 "--reason", "1.4x slower for 300 steps"]) == 0
    inc = json.loads(capsys.readouterr().out)
    assert (inc["kind"], inc["culprit_ranks"], inc["culprit_nodes"]) == ("exclude", [1], ["b"])
    assert inc["evidence"] == {"reason": "1.4x slower for 300 steps"}
    assert inc["restart_step"] == 0 and inc["last_step_reached"] == 5 and inc["steps_lost"] == 5
    guards = {}
    for node in ("a", "b"):
        g = guards[node] = Guard(GuardConfig(("sleep", "60"), str(run), str(ck), node=node,
                                             leave_wait_s=5.0))
        g.launcher = subprocess.Popen(["sleep", "60"], start_new_session=True)
    guards["b"]._follow_decisions()
    assert guards["b"].left and guards["b"].launcher.returncode == -15  # type: ignore[union-attr]
    assert json.loads((run / "nodes" / "b.json").read_text())["state"] == "left"
    guards["a"]._follow_decisions()
    assert not guards["a"].left
    guards["a"].launcher.kill()  # type: ignore[union-attr]
    guards["a"].launcher.wait()  # type: ignore[union-attr]
    assert main(["guard", "--run-dir", str(run), "--ckpt", str(ck), "--exclude-rank", "7"]) == 2
    assert "--exclude-rank 7: no heartbeat" in capsys.readouterr().err


def test_an_injection_fires_once_per_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """torchrun restarts a node's workers after a membership change without counting a
    restart, and a rank moves between nodes: the marker in the run folder keeps every later
    process of the job clean; a counted restart (TORCHELASTIC_RESTART_COUNT) disarms too."""
    from stragglers.testbed.faults import claim, injections_armed

    monkeypatch.setenv("STRAGGLERS_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("STRAGGLERS_ATTEMPT", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert injections_armed()
    assert claim("crash") and not claim("crash") and claim("hang")
    assert sorted(os.listdir(tmp_path / "injections")) == ["crash", "hang"]
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert not injections_armed()
    monkeypatch.delenv("STRAGGLERS_RUN_DIR")
    assert claim("crash")  # no run folder (no driver, no guard): nothing to remember it by
