"""The states of one attempt of a job under the recovery driver, and the transitions allowed
between them (after NVIDIA Resiliency Extension's rank monitor state machine).

=========== ============================================ ====================================
state       what the driver does in it                   next
=========== ============================================ ====================================
LAUNCHING   start one process per rank                   RUNNING; GAVE_UP (too few slots)
RUNNING     poll heartbeats and exit codes               RUNNING; HUNG; CRASHED; DONE;
                                                         GAVE_UP (every rank refused its input)
HUNG        localise: flight-recorder dumps, heartbeats  EXCLUDING
CRASHED     localise: exit codes, ``comm_error``         EXCLUDING
EXCLUDING   kill, validate, take the culprits' slots out RESTARTING; GAVE_UP (no culprit, no
                                                         slot left)
RESTARTING  count the restart                            LAUNCHING; GAVE_UP (restarts used up)
DONE        the job finished                             (final)
GAVE_UP     the job cannot be recovered                  (final)
=========== ============================================ ====================================
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TRANSITIONS", "AttemptMachine", "AttemptState", "IllegalTransition"]


class AttemptState(Enum):
    LAUNCHING = "launching"
    RUNNING = "running"
    HUNG = "hung"
    CRASHED = "crashed"
    EXCLUDING = "excluding"
    RESTARTING = "restarting"
    DONE = "done"
    GAVE_UP = "gave_up"


_S = AttemptState
TRANSITIONS: dict[AttemptState, frozenset[AttemptState]] = {
    _S.LAUNCHING: frozenset({_S.RUNNING, _S.GAVE_UP}),
    _S.RUNNING: frozenset({_S.RUNNING, _S.HUNG, _S.CRASHED, _S.DONE, _S.GAVE_UP}),
    _S.HUNG: frozenset({_S.EXCLUDING}),
    _S.CRASHED: frozenset({_S.EXCLUDING}),
    _S.EXCLUDING: frozenset({_S.RESTARTING, _S.GAVE_UP}),
    _S.RESTARTING: frozenset({_S.LAUNCHING, _S.GAVE_UP}),
    _S.DONE: frozenset(),
    _S.GAVE_UP: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A transition the table does not allow (a bug in the driver, not a user error)."""


class AttemptMachine:
    """The current state of the driver's attempt; it begins at LAUNCHING."""

    def __init__(self) -> None:
        self.state = AttemptState.LAUNCHING

    @property
    def final(self) -> bool:
        return not TRANSITIONS[self.state]

    def transition(self, new: AttemptState) -> None:
        """Move to ``new``; raise :class:`IllegalTransition` when the table forbids it."""
        if new not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"{self.state.name} -> {new.name} is not allowed")
        self.state = new
