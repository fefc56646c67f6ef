"""The robust-training driver on the real example job (dp 2 x pp 2 GPT over gloo, one process
per rank, a spare slot): an injected hang inside a collective and a crash are detected, the
right rank is named, a spare takes over its slot and training resumes from the job's
checkpoint with the losses of an uninterrupted run.

Loaded-machine safe: the only time bound asserted is the lower one (a hang cannot be declared
before --timeout-s without progress); a step of this tiny model takes milliseconds, so 6 s
without any rank advancing only happens when a rank really stops.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stragglers.cli import main
from stragglers.recover.driver import DriverConfig, run_driver
from stragglers.recover.marker import Marker, write_marker
from stragglers.testbed.job import JobConfig, run_job

pytest.importorskip("torch")

TIMEOUT_S = 6.0
STEPS = 8
SMALL: dict[str, Any] = dict(dp=2, pp=2, warmup_steps=1, hidden=32, heads=2, seq_len=16,
                             vocab_size=64, microbatches=2, micro_batch_size=2, gc_interval=0,
                             probe=False)


def _job_args(tmp: Path, *inject: str) -> tuple[str, ...]:
    args = [sys.executable, "-m", "stragglers.testbed.job", "--out-dir", str(tmp / "job"),
            "--steps", str(STEPS), "--ckpt-dir", str(tmp / "ck"), "--ckpt-every", "2",
            "--resume", "--no-probe"]
    for key, value in SMALL.items():
        if key != "probe":
            args += ["--" + key.replace("_", "-"), str(value)]
    return (*args, *inject)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    """The losses of the same job run without a fault (spawned by the job itself)."""
    out = tmp_path_factory.mktemp("whole")
    return list(run_job(JobConfig(out_dir=str(out), steps=STEPS, **SMALL))["losses"])


def _resumed(tmp: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((tmp / "job" / "summary.json").read_text())
    return summary


@pytest.mark.slow
def test_a_rank_frozen_inside_a_collective_is_replaced_by_a_spare(
        tmp_path: Path, uninterrupted: list[float]) -> None:
    cfg = DriverConfig(_job_args(tmp_path, "--hang-rank", "1", "--hang-step", "5",
                                 "--hang-mode", "in-collective"),
                       slots=5, world=4, pp=2, ckpt_dir=str(tmp_path / "ck"),
                       out_dir=str(tmp_path / "run"), heartbeat_s=0.2, timeout_s=TIMEOUT_S)
    res = run_driver(cfg)
    assert res.ok and res.attempts == 2 and res.slots_in_service == [0, 4, 2, 3], res
    (inc,) = [i.to_dict() for i in res.incidents]
    assert inc["kind"] == "hang" and inc["culprit_ranks"] == [1] and inc["culprit_slots"] == [1]
    ev = inc["evidence"]
    assert ev["stale_heartbeat"] == [1]  # frozen: its heartbeats stopped
    # rank 0 waits in the DP all-gather of stage 0 with it, rank 3 for its P2P send
    assert ev["last_ops"]["0"]["op"] == "all_gather" and ev["last_ops"]["0"]["group"] == "dp"
    assert (ev["last_ops"]["3"]["op"], ev["last_ops"]["3"]["peer"]) == ("recv", 1)
    # the live ranks' gloo flight-recorder dumps name it too: no dump from rank 1, and rank 0
    # waits for it in the all-gather of the group the job named dp_stage0
    fr = ev["flight_recorder"]
    assert ev["localised_by"] == "flight_recorder"
    assert fr["dumps"] == 3 and fr["silent"] == [1] and fr["suspects"] == [1]
    assert [(g["desc"], g["op"], g["waiting_for"]) for g in fr["groups"]] == [
        ("dp_stage0", "gloo:all_gather", [1])]
    assert inc["since_last_progress_s"] >= TIMEOUT_S
    # checkpoints after steps 1 and 3 (every 2): the restart begins at step 4; step 5 is lost
    assert inc["restart_step"] == 4 and inc["checkpoint_step"] == 3
    assert inc["last_step_reached"] == 5 and inc["steps_lost"] == 1
    assert inc["resumed_after_s"] is not None
    # the spare (slot 4) ran rank 1 in the second attempt
    beat = json.loads((tmp_path / "run" / "heartbeats-1" / "hb-1.json").read_text())
    assert beat["slot"] == 4 and beat["status"] == "done"
    summary = _resumed(tmp_path)
    assert summary["first_step"] == 4
    assert summary["losses"] == pytest.approx(uninterrupted[4:], rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_a_crash_is_recovered(tmp_path: Path, uninterrupted: list[float],
                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--slots", "5", "--world", "4", "--pp", "2", "--heartbeat-s", "0.2",
                 "--timeout-s", str(TIMEOUT_S), "--ckpt", str(tmp_path / "ck"),
                 "--out", str(tmp_path / "run"), "--",
                 *_job_args(tmp_path, "--crash-rank", "2", "--crash-step", "3")])
    assert code == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    (inc,), summary = lines[:-1], lines[-1]
    assert summary["ok"] and summary["attempts"] == 2
    assert summary["slots_in_service"] == [0, 1, 4, 3]
    assert inc["kind"] == "crash" and inc["culprit_ranks"] == [2]
    assert inc["exit_codes"]["2"] == 3
    assert inc["restart_step"] == 2 and inc["steps_lost"] == 1
    resumed = _resumed(tmp_path)
    assert resumed["first_step"] == 2
    assert resumed["losses"] == pytest.approx(uninterrupted[2:], rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_no_spare_left_stops_with_a_clear_message(tmp_path: Path) -> None:
    cfg = DriverConfig(_job_args(tmp_path, "--crash-rank", "0", "--crash-step", "1"),
                       slots=4, world=4, pp=2, ckpt_dir=str(tmp_path / "ck"),
                       out_dir=str(tmp_path / "run"), heartbeat_s=0.2, timeout_s=TIMEOUT_S)
    res = run_driver(cfg)
    assert not res.ok and res.attempts == 1
    assert res.message.startswith("no spare slot left: the job needs 4 ranks and 3 healthy")
    assert [i.to_dict()["culprit_slots"] for i in res.incidents] == [[0]]


@pytest.mark.slow
def test_resume_with_another_layout_is_one_line_exit_2(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    write_marker(ck, Marker(step=4, dp=2, pp=2))
    argv = ["--out-dir", str(tmp_path / "o"), "--dp", "1", "--pp", "2", "--ckpt-dir", str(ck),
            "--resume"]
    proc = subprocess.run([sys.executable, "-m", "stragglers.testbed.job", *argv],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "latest: field 'dp'/'pp': written by dp 2 x pp 2, this run is dp 1 x pp 2" in proc.stderr
    # under the driver: every rank refuses, the driver stops instead of excluding slots
    cfg = DriverConfig((sys.executable, "-m", "stragglers.testbed.job", *argv),
                       slots=2, world=2, pp=2, ckpt_dir=str(ck), out_dir=str(tmp_path / "run"),
                       heartbeat_s=0.2, timeout_s=TIMEOUT_S)
    res = run_driver(cfg)
    assert not res.ok and res.incidents == []
    assert res.message.startswith("every rank exited with status 2")


def test_resume_with_another_layout_via_the_cli(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    ck = tmp_path / "ck"
    ck.mkdir()
    write_marker(ck, Marker(step=4, dp=1, pp=2))
    assert main(["probe", "example", "--out-dir", str(tmp_path / "o"), "--ckpt-dir", str(ck),
                 "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "written by dp 1 x pp 2, this run is dp 2 x pp 2" in err


@pytest.mark.parametrize("extra, message", [
    ({"hang_rank": 1}, "--hang-rank and --hang-step go together"),
    ({"crash_rank": 4, "crash_step": 1}, "crash_rank must be a rank below the world size 4"),
    ({"hang_mode": "sideways"}, "hang_mode must be one of"),
    ({"hang_rank": 1, "hang_step": 4, "hang_mode": "in-checkpoint", "ckpt_every": 2,
      "ckpt_dir": "ck"}, "needs a checkpoint after that step"),
    ({"hang_rank": 1, "hang_step": 3, "hang_mode": "stuck-in-checkpoint"},
     "needs a checkpoint after that step"),
])
def test_bad_injections_are_refused(extra: dict[str, Any], message: str,
                                    tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        JobConfig(out_dir=str(tmp_path), **{**SMALL, **extra}).check()


@pytest.mark.slow
def test_a_world_that_is_not_dp_x_pp_stops_the_driver(tmp_path: Path) -> None:
    """--world 2 for a dp 2 x pp 2 job: every rank refuses (one line, exit 2) and the driver
    stops instead of blaming and excluding slots."""
    cfg = DriverConfig(_job_args(tmp_path), slots=3, world=2, ckpt_dir=str(tmp_path / "ck"),
                       out_dir=str(tmp_path / "run"), heartbeat_s=0.2, timeout_s=TIMEOUT_S)
    res = run_driver(cfg)
    assert not res.ok and res.incidents == [] and res.slots_in_service == [0, 1, 2]
    assert res.message.startswith("every rank exited with status 2")
    log = (tmp_path / "run" / "attempt-0-rank-1.log").read_text()
    assert log.count("\n") == 1 and "error: WORLD_SIZE 2 != dp*pp 4" in log


def test_the_checkpoint_is_reported_to_the_heartbeats(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The example job's checkpoint: the ``checkpoint`` phase around the write and the
    barrier after it as a ``world`` call, numbered with the other world calls (the
    gradient-norm all-reduce); nothing for a probe without heartbeats."""
    from stragglers.hang.heartbeats import read_beats
    from stragglers.probe.ops import CLIP
    from stragglers.testbed import faults

    class _Probe:  # the probe's span only
        def span(self, optype: object, **kw: object) -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext()

    monkeypatch.setenv("STRAGGLERS_HEARTBEAT_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "2")
    probe = faults.watch(_Probe(), 2, 4, lambda: (-1, -1), -1, -1,  # type: ignore[arg-type]
                         "in-collective", -1, -1)
    with probe.span(CLIP):
        pass
    with faults.checkpoint_phase(probe, 5):
        before = read_beats(tmp_path)
        with faults.world_call(probe, "barrier"):
            probe._hb.flush()  # type: ignore[attr-defined]
            beat = read_beats(tmp_path)[2]
    assert (beat.phase, beat.op, beat.group, beat.seq) == ("checkpoint", "barrier", "world", 2)
    assert before[2].op is None
    plain = _Probe()
    assert isinstance(faults.checkpoint_phase(plain, 5),  # type: ignore[arg-type]
                      contextlib.nullcontext)
