"""Crash blame: the rank that failed first, from exit times, statuses, exit codes and stale
heartbeats (hand-built exits with known culprits), and the driver on fake jobs whose ranks
exit together or freeze outside any call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stragglers.recover.blame import Exit, crash_culprits
from stragglers.recover.driver import DriverConfig, run_driver

FAKE = str(Path(__file__).with_name("fake_rank.py"))


def test_the_first_to_exit_not_the_first_noticed() -> None:
    # listed in the order a watcher noticed them; rank 2 ended 40 ms before the others
    exits = [Exit(0, 1, 10.041), Exit(1, 1, 10.043), Exit(3, 1, 10.040), Exit(2, 3, 10.000)]
    blame = crash_culprits(exits)
    assert blame.culprits == (2,) and blame.reason == "first_exit"


def test_victims_that_report_comm_error_are_never_blamed() -> None:
    exits = [Exit(0, 1, 5.0, "comm_error"), Exit(1, 1, 5.0, "comm_error"),
             Exit(2, -9, 5.2, None)]
    blame = crash_culprits(exits)
    assert blame.culprits == (2,) and blame.victims == (0, 1)


def test_a_distinct_exit_code_breaks_a_tie() -> None:
    # exits seen at the same moment (no finer clock): the segfault among exit(1)s
    exits = [Exit(r, 1, 7.0) for r in (0, 1, 3)] + [Exit(2, -11, 7.0)]
    blame = crash_culprits(exits, tie_s=0.1)
    assert blame.culprits == (2,) and blame.reason == "distinct_exit_code"
    # two ranks with codes of their own and nothing shared: no way to tell, both named
    blame = crash_culprits([Exit(0, 1, 7.0), Exit(1, 3, 7.0)], tie_s=0.1)
    assert blame.culprits == (0, 1) and blame.reason == "tied_exits"


def test_a_stale_heartbeat_names_the_frozen_rank_behind_the_victims() -> None:
    # the peers of a frozen rank ended on their collective timeout, reporting comm_error
    exits = [Exit(r, 1, 30.0 + r / 100, "comm_error") for r in (0, 2, 3)]
    blame = crash_culprits(exits, stale_live=[1])
    assert blame.culprits == (1,) and blame.reason == "stale_heartbeat"
    # no stale rank: the first victims to exit
    assert crash_culprits(exits).culprits == (0,)


def _cfg(tmp_path: Path, scenario: str, slots: int, settle_s: float = 0.5) -> DriverConfig:
    return DriverConfig((sys.executable, FAKE, scenario), slots=slots,
                        ckpt_dir=str(tmp_path / "ck"), out_dir=str(tmp_path / "out"),
                        heartbeat_s=0.2, timeout_s=3.0, poll_s=0.05, max_restarts=0,
                        fr_wait_s=0.5, settle_s=settle_s)


@pytest.mark.slow
def test_ranks_that_exit_together_blame_the_first(tmp_path: Path) -> None:
    """Rank 2 exits with status 3; the three others exit with status 1 some 30 ms later,
    without reporting comm_error, usually before the driver's next look: only rank 2 is
    blamed (it was all four).  The driver waits up to ``settle_s`` for the peers' exits (it
    stops waiting once every rank has exited); 5 s here, so that on a loaded machine a peer
    scheduled late still lands in the incident (at the default 0.5 s one did not, once)."""
    res = run_driver(_cfg(tmp_path, "crash-together", 4, settle_s=5.0))
    (inc,) = [i.to_dict() for i in res.incidents]
    assert inc["kind"] == "crash" and inc["culprit_ranks"] == [2], inc
    assert inc["exit_codes"] == {"0": 1, "1": 1, "2": 3, "3": 1}
    ev = inc["evidence"]
    assert ev["blamed_by"] in ("first_exit", "distinct_exit_code")
    assert ev["exit_after_first_s"]["2"] == 0.0
    assert all(ev["exit_after_first_s"][r] > 0 for r in ("0", "1", "3"))


@pytest.mark.slow
def test_a_frozen_rank_outside_any_call_is_named_by_its_stale_heartbeat(tmp_path: Path
                                                                        ) -> None:
    res = run_driver(_cfg(tmp_path, "frozen-computing", 3))
    (inc,) = [i.to_dict() for i in res.incidents]
    assert inc["kind"] == "hang" and inc["culprit_ranks"] == [1], inc
    assert inc["evidence"]["localised_by"] == "stale_heartbeat"
    assert inc["evidence"]["stale_heartbeat"] == [1]
    assert res.message == "gave up after 0 restarts"
