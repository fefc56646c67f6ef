"""The robust-training driver on the real toy job (gloo, real processes): an injected hang and
crash are detected, the right slot is excluded, and training resumes from the checkpoint with
the same loss curve.

Loaded-machine safe: the only time bound asserted is the lower one (a hang cannot be declared
before --timeout-s without progress); the step work is tiny, so 6 s without any rank
advancing only happens when a rank really stops.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from stragglers.cli import main
from stragglers.recover.driver import DriverConfig, run_driver

pytest.importorskip("torch")

TIMEOUT_S = 6.0


def _losses(out: Path) -> dict[int, list[dict[str, Any]]]:
    by_step: dict[int, list[dict[str, Any]]] = {}
    for line in (out / "losses.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_step.setdefault(row["step"], []).append(row)
    return by_step


def _check_continuous(out: Path, steps: int) -> None:
    by_step = _losses(out)
    assert sorted(by_step) == list(range(steps))  # every step trained, none skipped
    for rows in by_step.values():
        # a step recomputed after a restart (fewer ranks, same global batch) gives the same loss
        assert max(r["loss"] for r in rows) == pytest.approx(min(r["loss"] for r in rows),
                                                             rel=1e-5)
    assert by_step[steps - 1][-1]["loss"] < 0.1 * by_step[0][0]["loss"]  # it trains


@pytest.mark.slow
def test_a_frozen_rank_inside_the_allreduce_is_excluded(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    code = main(["run", "--slots", "3", "--heartbeat-s", "0.2", "--timeout-s", str(TIMEOUT_S),
                 "--ckpt", str(ck), "--out", str(out), "--validate", "--",
                 sys.executable, "-m", "stragglers.testbed.toyjob", "--steps", "16",
                 "--ckpt-every", "4", "--hang-slot", "1", "--hang-at-step", "9",
                 "--hang-mode", "stop"])
    assert code == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    incidents, summary = lines[:-1], lines[-1]
    assert summary["ok"] and summary["attempts"] == 2 and summary["slots_in_service"] == [0, 2]
    (inc,) = incidents
    assert inc["kind"] == "hang" and inc["culprit_slots"] == [1] and inc["culprit_ranks"] == [1]
    assert inc["evidence"]["stale_heartbeat"] == [1]  # its heartbeats stopped
    assert set(inc["evidence"]["last_ops"]) == {"0", "2"}  # both wait in the all-reduce
    # the live ranks' real gloo flight-recorder dumps say the same: rank 1 left none, and
    # ranks 0 and 2 wait for it in all-reduce #10 (steps count from 0: the 10th call)
    fr = inc["evidence"]["flight_recorder"]
    assert inc["evidence"]["localised_by"] == "flight_recorder"
    assert fr["dumps"] == 2 and fr["silent"] == [1] and fr["suspects"] == [1]
    assert [(g["op"], g["seq"], g["waiting_for"], g["waiters"]) for g in fr["groups"]] == [
        ("gloo:all_reduce", 10, [1], [0, 2])]
    assert inc["since_last_progress_s"] >= TIMEOUT_S
    assert inc["checkpoint_step"] == 7 and inc["restart_step"] == 8
    assert inc["last_step_reached"] == 9 and inc["steps_lost"] == 1
    assert inc["resumed_after_s"] is not None
    # validation passes ran over the attempt's 3 slots (a ring: 3 links) and their GEMMs
    assert sorted(inc["validation"]["gemm_ratio"]) == ["0", "1", "2"]
    assert sorted(inc["validation"]["link_ratio"]) == ["0->1", "1->2", "2->0"]
    assert [json.loads(x) for x in (out / "incidents.jsonl").read_text().splitlines()] == [inc]
    _check_continuous(out, 16)


@pytest.mark.slow
def test_a_rank_that_never_reaches_the_call_then_a_crash(tmp_path: Path) -> None:
    cfg = DriverConfig((sys.executable, "-m", "stragglers.testbed.toyjob", "--steps", "20",
                        "--ckpt-every", "4", "--hang-slot", "2", "--hang-at-step", "6",
                        "--hang-mode", "never", "--crash-slot", "0", "--crash-at-step", "13"),
                       slots=4, ckpt_dir=str(tmp_path / "ck"), out_dir=str(tmp_path / "out"),
                       heartbeat_s=0.2, timeout_s=TIMEOUT_S)
    res = run_driver(cfg)
    assert res.ok and res.attempts == 3 and res.slots_in_service == [1, 3]
    hang, crash = [i.to_dict() for i in res.incidents]
    assert hang["kind"] == "hang" and hang["culprit_slots"] == [2]
    assert hang["evidence"]["alive_not_in_a_call"] == [2]  # alive, but not in the all-reduce
    assert hang["evidence"]["stale_heartbeat"] == []
    fr = hang["evidence"]["flight_recorder"]  # all 4 dumped; rank 2 never issued #7
    assert fr["dumps"] == 4 and fr["silent"] == [] and fr["suspects"] == [2]
    assert fr["details"][0]["kind"] == "not_joined"
    assert [(g["seq"], g["waiting_for"]) for g in fr["groups"]] == [(7, [2])]
    assert hang["restart_step"] == 4 and hang["steps_lost"] == 2
    # second attempt: slots 0, 1, 3 are ranks 0, 1, 2; slot 0 (rank 0) exits with status 3
    assert crash["kind"] == "crash" and crash["culprit_slots"] == [0]
    assert crash["exit_codes"]["0"] == 3
    assert crash["restart_step"] == 12 and crash["steps_lost"] == 1
    _check_continuous(tmp_path / "out", 20)


@pytest.mark.slow
def test_gives_up_when_slots_run_out(tmp_path: Path) -> None:
    cfg = DriverConfig((sys.executable, "-m", "stragglers.testbed.toyjob", "--steps", "8",
                        "--crash-slot", "0", "--crash-at-step", "2"),
                       slots=1, ckpt_dir=str(tmp_path / "ck"), out_dir=str(tmp_path / "out"),
                       heartbeat_s=0.2, timeout_s=TIMEOUT_S)
    res = run_driver(cfg)
    assert not res.ok and res.message == "no slot left"
    assert [i.to_dict()["culprit_slots"] for i in res.incidents] == [[0]]


@pytest.mark.parametrize("argv, message", [
    (["--slots", "2", "--ckpt", "c", "--out", "o"], "give the training command after --"),
    (["--slots", "2", "--ckpt", "c", "--out", "o", "--", "/no/such/cmd"], "not found"),
    (["--slots", "3", "--pp", "2", "--ckpt", "c", "--out", "o", "--", "true"],
     "not a multiple"),
    (["--slots", "5", "--world", "3", "--pp", "2", "--ckpt", "c", "--out", "o", "--", "true"],
     "--world 3 is not a multiple"),
    (["--slots", "2", "--world", "3", "--ckpt", "c", "--out", "o", "--", "true"],
     "more than --slots"),
    (["--slots", "2", "--heartbeat-s", "5", "--timeout-s", "1", "--ckpt", "c", "--out", "o",
      "--", "true"], "must be below"),
])
def test_bad_options(argv: list[str], message: str, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
