"""The records of the recovery driver (:mod:`stragglers.recover.driver`): incidents with their
evidence, exclusions and the driver's result. Frozen; ``to_dict()`` gives the JSON of
``RUN/incidents.jsonl`` and of ``stragglers run``'s stdout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stragglers.hang.heartbeats import HangEvidence

__all__ = ["CrashEvidence", "DriverResult", "Exclusion", "ExclusionEvidence", "Incident",
           "NodeIncident", "ValidationFlags"]

@dataclass(frozen=True)
class CrashEvidence:
    """What named the culprits of a crash (:func:`stragglers.recover.blame.crash_culprits`)."""

    comm_error: tuple[int, ...]  # dead ranks that reported a failed call: a peer went away
    reason: str = ""  # the rule that named the culprits
    exit_after_first_s: Mapping[int, float] = field(default_factory=dict)  # dead rank -> s
    status: Mapping[int, str | None] = field(default_factory=dict)  # dead rank -> last status
    stale_heartbeat: tuple[int, ...] = ()  # live ranks whose heartbeats went stale
    exit_times_measured: bool = True  # False: the times the driver noticed the exits

    def to_dict(self) -> dict[str, Any]:
        return {"comm_error": list(self.comm_error), "blamed_by": self.reason,
                "exit_after_first_s": {str(r): t for r, t in
                                       sorted(self.exit_after_first_s.items())},
                "status": {str(r): s for r, s in sorted(self.status.items())},
                "stale_heartbeat": list(self.stale_heartbeat),
                "exit_times_measured": self.exit_times_measured}


@dataclass(frozen=True)
class ExclusionEvidence:
    """Why a rank was asked out of a running job (``stragglers guard --exclude-rank``): a slow
    rank, mitigation S4."""

    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason}


@dataclass(frozen=True)
class ValidationFlags:
    """The validation passes and GEMM test over an attempt's slots, by slot."""

    slow_links: tuple[tuple[int, int], ...]
    slow_gemm_slots: tuple[int, ...]
    gemm_ratio: Mapping[int, float]
    link_ratio: Mapping[tuple[int, int], float]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"slow_links": [list(link) for link in self.slow_links],
                "slow_gemm_slots": list(self.slow_gemm_slots),
                "gemm_ratio": {str(s): r for s, r in self.gemm_ratio.items()},
                "link_ratio": {f"{a}->{b}": r for (a, b), r in self.link_ratio.items()},
                "seconds": self.seconds}


@dataclass(frozen=True)
class Exclusion:
    """The slots in service after the culprits' slots are taken out, and what was done."""

    slots: tuple[int, ...]
    action: str


@dataclass(frozen=True)
class Incident:
    """A hang (``hang``, ``startup_hang``) or a crash, localised and acted on. Times in
    seconds; ``resumed_after_s``: from detection until the restarted job completed a step
    (None when it did not), written only when culprits were excluded."""

    kind: str
    evidence: HangEvidence | CrashEvidence
    attempt: int
    detected_at_s: float
    since_last_progress_s: float
    localise_s: float
    culprit_ranks: tuple[int, ...]
    culprit_slots: tuple[int, ...]
    world: int
    restart_step: int
    checkpoint_step: int | None  # the last step the checkpoint holds
    last_step_reached: int
    steps_lost: int
    action: str
    exit_codes: Mapping[int, int] | None = None  # crash: rank -> exit status of the dead
    validation: ValidationFlags | None = None
    resumed_after_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.exit_codes is not None:
            out["exit_codes"] = {str(r): c for r, c in self.exit_codes.items()}
        out.update(evidence=self.evidence.to_dict(), attempt=self.attempt,
                   detected_at_s=self.detected_at_s,
                   since_last_progress_s=self.since_last_progress_s,
                   localise_s=self.localise_s, culprit_ranks=list(self.culprit_ranks),
                   culprit_slots=list(self.culprit_slots), world=self.world)
        if self.validation is not None:
            out["validation"] = self.validation.to_dict()
        out.update(restart_step=self.restart_step, checkpoint_step=self.checkpoint_step,
                   last_step_reached=self.last_step_reached, steps_lost=self.steps_lost,
                   action=self.action)
        if self.culprit_slots:
            out["resumed_after_s"] = self.resumed_after_s
        return out


@dataclass(frozen=True)
class DriverResult:
    """How the driver's run ended; ``message`` says why when it is not ``ok`` (or when the
    processes of a finished job did not exit)."""

    ok: bool
    attempts: int
    incidents: list[Incident]
    slots_in_service: list[int]
    wall_s: float
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The summary line of ``stragglers run`` (the incidents are the lines before it)."""
        return {"ok": self.ok, "attempts": self.attempts, "incidents": len(self.incidents),
                "slots_in_service": self.slots_in_service, "wall_s": round(self.wall_s, 3)}


@dataclass(frozen=True)
class NodeIncident:
    """An incident as a node guard (``stragglers guard``, beside ``torchrun``) records it in
    ``RUN/incidents/``: what happened, who was blamed, what was done and what it cost. Times
    in seconds; ``detected_at`` is wall-clock (``time.time()``), shared by the nodes;
    ``resumed_after_s``: from detection until the next rendezvous round completed a step past
    the restart step (None until then, or when it never did), ``world_after`` the size of that
    round."""

    kind: str  # "hang" | "startup_hang" | "crash" | "exclude"
    recorded_by: str  # the node whose guard decided ("request": --exclude-rank)
    evidence: HangEvidence | CrashEvidence | ExclusionEvidence
    detected_at: float
    since_last_progress_s: float | None
    localise_s: float
    culprit_ranks: tuple[int, ...]
    culprit_nodes: tuple[str, ...]
    world: int
    restart_step: int
    checkpoint_step: int | None
    last_step_reached: int
    steps_lost: int
    action: str
    exit_codes: Mapping[int, int] | None = None
    resumed_after_s: float | None = None
    world_after: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "recorded_by": self.recorded_by}
        if self.exit_codes is not None:
            out["exit_codes"] = {str(r): c for r, c in sorted(self.exit_codes.items())}
        out.update(evidence=self.evidence.to_dict(), detected_at=round(self.detected_at, 3),
                   since_last_progress_s=self.since_last_progress_s,
                   localise_s=self.localise_s, culprit_ranks=list(self.culprit_ranks),
                   culprit_nodes=list(self.culprit_nodes), world=self.world,
                   restart_step=self.restart_step, checkpoint_step=self.checkpoint_step,
                   last_step_reached=self.last_step_reached, steps_lost=self.steps_lost,
                   action=self.action, resumed_after_s=self.resumed_after_s,
                   world_after=self.world_after)
        return out
