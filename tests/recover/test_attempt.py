"""The attempt state machine of the recovery driver: its transition table, the refusal of an
illegal transition, the paths the driver takes through it on commands that finish, crash or
refuse their input, and the records it writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stragglers.hang.heartbeats import (
    NO_DUMP,
    FlightRecorderEvidence,
    HangEvidence,
    HeartbeatEvidence,
)
from stragglers.hang.last_op import HangDiagnosis, LastOp, Suspect
from stragglers.recover import driver
from stragglers.recover.attempt import (
    TRANSITIONS,
    AttemptMachine,
    AttemptState,
    IllegalTransition,
)
from stragglers.recover.driver import DriverConfig, exclude_slots, run_driver
from stragglers.recover.incidents import CrashEvidence, Incident

S = AttemptState
ALLOWED = sorted(((a, b) for a, nexts in TRANSITIONS.items() for b in nexts),
                 key=lambda t: (t[0].value, t[1].value))
# the way to each state from LAUNCHING, by allowed transitions
PATH = {S.LAUNCHING: [], S.RUNNING: [S.RUNNING], S.HUNG: [S.RUNNING, S.HUNG],
        S.CRASHED: [S.RUNNING, S.CRASHED], S.EXCLUDING: [S.RUNNING, S.HUNG, S.EXCLUDING],
        S.RESTARTING: [S.RUNNING, S.HUNG, S.EXCLUDING, S.RESTARTING],
        S.DONE: [S.RUNNING, S.DONE], S.GAVE_UP: [S.GAVE_UP]}


def _machine_at(state: AttemptState) -> AttemptMachine:
    m = AttemptMachine()
    for s in PATH[state]:
        m.transition(s)
    assert m.state is state
    return m


def test_the_table_is_the_documented_one() -> None:
    """The transitions of the module's docstring table, written out apart from TRANSITIONS."""
    assert TRANSITIONS == {
        S.LAUNCHING: {S.RUNNING, S.GAVE_UP},
        S.RUNNING: {S.RUNNING, S.HUNG, S.CRASHED, S.DONE, S.GAVE_UP},
        S.HUNG: {S.EXCLUDING},
        S.CRASHED: {S.EXCLUDING},
        S.EXCLUDING: {S.RESTARTING, S.GAVE_UP},
        S.RESTARTING: {S.LAUNCHING, S.GAVE_UP},
        S.DONE: set(),
        S.GAVE_UP: set(),
    }


def test_the_table_covers_every_state_and_only_done_and_gave_up_are_final() -> None:
    assert set(TRANSITIONS) == set(S)
    assert {s for s in S if not TRANSITIONS[s]} == {S.DONE, S.GAVE_UP}
    assert set(driver.STEPS) == set(S) - {S.DONE, S.GAVE_UP}  # a function per working state
    assert AttemptMachine().state is S.LAUNCHING


@pytest.mark.parametrize("old, new", ALLOWED, ids=[f"{a.name}->{b.name}" for a, b in ALLOWED])
def test_every_allowed_transition(old: AttemptState, new: AttemptState) -> None:
    m = _machine_at(old)
    m.transition(new)
    assert m.state is new and m.final == (new in (S.DONE, S.GAVE_UP))


@pytest.mark.parametrize("old, new", [(S.LAUNCHING, S.HUNG), (S.RUNNING, S.EXCLUDING),
                                      (S.HUNG, S.RESTARTING), (S.EXCLUDING, S.LAUNCHING),
                                      (S.RESTARTING, S.RUNNING), (S.DONE, S.LAUNCHING),
                                      (S.GAVE_UP, S.GAVE_UP)])
def test_an_illegal_transition_is_refused(old: AttemptState, new: AttemptState) -> None:
    m = _machine_at(old)
    with pytest.raises(IllegalTransition, match=f"{old.name} -> {new.name} is not allowed"):
        m.transition(new)
    assert m.state is old


class _Recording(AttemptMachine):
    seen: list[AttemptState] = []

    def transition(self, new: AttemptState) -> None:
        super().transition(new)
        if new is not S.RUNNING or self.seen[-1:] != [S.RUNNING]:
            self.seen.append(new)


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, slots: int
         ) -> tuple[driver.DriverResult, list[AttemptState]]:
    seen: list[AttemptState] = []
    monkeypatch.setattr(_Recording, "seen", seen)
    monkeypatch.setattr(driver, "AttemptMachine", _Recording)
    cfg = DriverConfig((sys.executable, "-c", code), slots=slots,
                       ckpt_dir=str(tmp_path / "ck"), out_dir=str(tmp_path / "out"),
                       heartbeat_s=0.2, timeout_s=6.0, poll_s=0.05)
    return run_driver(cfg), seen


def test_a_job_that_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res, seen = _run(tmp_path, monkeypatch, "pass", 2)
    assert res.ok and res.attempts == 1 and res.incidents == []
    assert seen == [S.RUNNING, S.DONE]
    assert res.to_dict()["incidents"] == 0 and res.to_dict()["slots_in_service"] == [0, 1]


def test_crashes_until_no_slot_is_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = "import os; raise SystemExit(3 if os.environ['RANK'] == '0' else 0)"
    res, seen = _run(tmp_path, monkeypatch, code, 2)
    attempt = [S.RUNNING, S.CRASHED, S.EXCLUDING]
    assert seen == [*attempt, S.RESTARTING, S.LAUNCHING, *attempt, S.GAVE_UP]
    assert not res.ok and res.attempts == 2 and res.message == "no slot left"
    first, second = (i.to_dict() for i in res.incidents)
    assert first["kind"] == "crash" and first["exit_codes"] == {"0": 3}
    assert first["culprit_slots"] == [0]
    assert first["evidence"] == {"comm_error": [], "blamed_by": "first_exit",
                                 "exit_after_first_s": {"0": 0.0}, "status": {},
                                 "stale_heartbeat": [], "exit_times_measured": True}
    assert first["action"] == "excluded slots [0], restarting on 1"
    assert first["resumed_after_s"] is None and first["restart_step"] == 0
    assert first["checkpoint_step"] is None and first["steps_lost"] == 0
    assert second["attempt"] == 1 and second["culprit_slots"] == [1]  # rank 0 on slot 1
    assert second["action"] == "excluded slots [1], restarting on 0"
    lines = (tmp_path / "out" / "incidents.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [first, second]


def test_every_rank_refusing_its_input_gives_up(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    res, seen = _run(tmp_path, monkeypatch, "raise SystemExit(2)", 2)
    assert seen == [S.RUNNING, S.GAVE_UP]
    assert not res.ok and res.incidents == [] and res.slots_in_service == [0, 1]
    assert res.message.startswith("every rank exited with status 2")


def test_exclusion_elastic_and_with_spares() -> None:
    elastic = exclude_slots([0, 1, 2], {1}, 3, elastic=True)
    assert elastic.slots == (0, 2) and elastic.action == "excluded slots [1], restarting on 2"
    spare = exclude_slots([0, 1, 2, 3, 4], {1}, 4, elastic=False)
    assert spare.slots == (0, 4, 2, 3)
    assert spare.action == "excluded slots 1 (rank 1 -> spare slot 4)"
    none_left = exclude_slots([0, 1, 2, 3], {0}, 4, elastic=False)
    assert none_left.slots == (1, 2, 3)
    assert none_left.action == "excluded slots [0]: no spare left"


def _incident(culprits: tuple[int, ...], evidence: HangEvidence | CrashEvidence) -> Incident:
    return Incident(kind="hang", evidence=evidence, attempt=0, detected_at_s=7.5,
                    since_last_progress_s=6.1, localise_s=0.25, culprit_ranks=culprits,
                    culprit_slots=culprits, world=2, restart_step=4, checkpoint_step=3,
                    last_step_reached=5, steps_lost=1, action="x")


def test_the_json_of_a_hang_incident() -> None:
    diag = HangDiagnosis((Suspect((1,), "silent", 1, "rank 1 is silent"),), silent=(1,))
    hb = HeartbeatEvidence((1,), (), {2: "all_reduce in world"},
                           {0: LastOp("all_reduce", "dp", seq=3)}, {0: 5, 1: 5, 2: 5}, diag)
    inc = _incident((1,), HangEvidence(hb, FlightRecorderEvidence(), by_flight_recorder=False))
    out = inc.to_dict()
    assert list(out) == ["kind", "evidence", "attempt", "detected_at_s",
                         "since_last_progress_s", "localise_s", "culprit_ranks",
                         "culprit_slots", "world", "restart_step", "checkpoint_step",
                         "last_step_reached", "steps_lost", "action", "resumed_after_s"]
    assert out["evidence"] == {
        "stale_heartbeat": [1], "alive_not_in_a_call": [],
        "in_other_group_call": {"2": "all_reduce in world"},
        "last_ops": {"0": {"op": "all_reduce", "group": "dp", "seq": 3, "peer": None}},
        "steps": {"0": 5, "1": 5, "2": 5}, "phases": {},
        "diagnosis": [diag.suspects[0].to_dict()],
        "flight_recorder": {"dumps": 0, "note": NO_DUMP},
        "localised_by": "heartbeats"}
    assert isinstance(inc.evidence, HangEvidence) and inc.evidence.culprit_ranks == (1,)
    # without a culprit nothing was excluded and nothing resumes: no resumed_after_s
    assert "resumed_after_s" not in _incident((), CrashEvidence(())).to_dict()
