"""The ranks' heartbeat files read back, and the evidence of a hang that the heartbeats and
the flight-recorder dumps give together.

The job writes the heartbeats (:class:`stragglers.recover.heartbeat.Heartbeat`, one file
``hb-*.json`` per rank); :func:`read_beats` reads them as :class:`Beat` records,
:func:`heartbeat_evidence` localises a hang from them (the last op of every rank in a call,
:func:`~stragglers.hang.last_op.localize_hang`), :func:`await_fr_dumps` from the live ranks'
flight-recorder dumps (:mod:`stragglers.hang.fr_hang`), and :meth:`HangEvidence.decide` says
which of the two names the culprits. The driver and the node guard
(:mod:`stragglers.recover`) act on it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stragglers.errors import InputError
from stragglers.hang.flight_recorder import read_flight_recorder
from stragglers.hang.fr_hang import FRDiagnosis, localize_fr_hang
from stragglers.hang.last_op import TRACKED_GROUPS, HangDiagnosis, LastOp, Topology, localize_hang

__all__ = ["Beat", "FlightRecorderEvidence", "HangEvidence", "HeartbeatEvidence",
           "await_fr_dumps", "heartbeat_evidence", "read_beats"]


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _opt_float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Beat:
    """A rank's latest heartbeat as the driver reads it (the fields of the file it uses)."""

    rank: int
    step: int  # -1 before the first step
    status: str | None  # starting | running | done | comm_error | error | exited | ...
    op: str | None  # the call the rank is in; None: computing
    group: str | None  # the call's group (tp, dp, pp, world, or another the job names)
    seq: int | None
    peer: int | None
    ts: float  # time.time() of the write (0 when absent)
    phase: str | None = None  # e.g. "checkpoint": where the rank is outside its calls
    since: float | None = None  # time.time() it entered its call (or phase)
    pid: int | None = None
    node: str | None = None  # the guard's node (None under the driver)
    local_rank: int | None = None
    world: int | None = None
    started: float = 0.0  # time.time() the process began beating
    error: str | None = None  # the first line of the exception that ended the process

    @classmethod
    def from_dict(cls, obj: object) -> Beat | None:
        """The beat of a parsed file; None when it is not one (no integer rank, a step or
        time that is not a number)."""
        if not isinstance(obj, dict) or not isinstance(obj.get("rank"), int):
            return None
        try:
            step, ts = int(obj["step"]), float(obj.get("ts", 0.0))
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        status, op, group = obj.get("status"), obj.get("op"), obj.get("group")
        return cls(obj["rank"], step, status if isinstance(status, str) else None,
                   str(op) if op else None, None if group is None else str(group),
                   _opt_int(obj.get("seq")), _opt_int(obj.get("peer")), ts,
                   phase=_opt_str(obj.get("phase")), since=_opt_float(obj.get("since")),
                   pid=_opt_int(obj.get("pid")), node=_opt_str(obj.get("node")),
                   local_rank=_opt_int(obj.get("local_rank")), world=_opt_int(obj.get("world")),
                   started=_opt_float(obj.get("started")) or 0.0,
                   error=_opt_str(obj.get("error")))


def read_beats(folder: str | os.PathLike[str]) -> dict[int, Beat]:
    """The latest heartbeat of every rank in ``folder`` (files that cannot be parsed, being
    replaced at that moment, are skipped until the next read). When several files name the
    same rank (a guard's folder across rendezvous rounds), the newest process's."""
    out: dict[int, Beat] = {}
    for p in Path(folder).glob("hb-*.json"):
        try:
            obj = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        beat = Beat.from_dict(obj)
        if beat is not None:
            old = out.get(beat.rank)
            if old is None or (beat.started, beat.ts) > (old.started, old.ts):
                out[beat.rank] = beat
    return out


NO_DUMP = ("no flight-recorder dump came (TORCH_FR_BUFFER_SIZE unset, or the job does not use "
           "torch.distributed)")


@dataclass(frozen=True)
class HeartbeatEvidence:
    """A hang as the heartbeats show it, and :func:`~stragglers.hang.last_op.localize_hang`'s
    diagnosis from the last ops of the ranks in a call."""

    stale_heartbeat: tuple[int, ...]
    alive_not_in_a_call: tuple[int, ...]
    # a call in a group the dp x pp x tp topology does not describe: rank -> "op in group"
    in_other_group_call: Mapping[int, str]
    last_ops: Mapping[int, LastOp]
    steps: Mapping[int, int | None]  # the step of every rank that beat
    diagnosis: HangDiagnosis
    phases: Mapping[int, str] = field(default_factory=dict)  # rank -> e.g. "checkpoint"

    def to_dict(self) -> dict[str, Any]:
        return {
            "stale_heartbeat": list(self.stale_heartbeat),
            "alive_not_in_a_call": list(self.alive_not_in_a_call),
            "in_other_group_call": {str(r): c for r, c in self.in_other_group_call.items()},
            "last_ops": {str(r): {"op": o.op, "group": o.group, "seq": o.seq, "peer": o.peer}
                         for r, o in sorted(self.last_ops.items())},
            "steps": {str(r): s for r, s in sorted(self.steps.items())},
            "phases": {str(r): p for r, p in sorted(self.phases.items())},
            "diagnosis": [s.to_dict() for s in self.diagnosis.suspects],
        }


@dataclass(frozen=True)
class FlightRecorderEvidence:
    """A hang as the live ranks' flight-recorder dumps show it: their diagnosis, or none when
    no dump came or the dumps could not be read (``error``)."""

    diagnosis: FRDiagnosis | None = None
    error: str | None = None

    @property
    def suspect_ranks(self) -> tuple[int, ...]:
        return () if self.diagnosis is None else self.diagnosis.suspect_ranks

    @property
    def waited_for(self) -> bool:
        """Whether the dumps name ranks that others wait for (not only a group stuck as a
        whole)."""
        return self.diagnosis is not None and any(s.kind != "stuck_collective"
                                                  for s in self.diagnosis.suspects)

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        d = self.diagnosis
        if d is None:
            return {"dumps": 0, "note": NO_DUMP}
        return {"dumps": d.dumps, "suspects": list(d.suspect_ranks), "silent": list(d.silent),
                "groups": [g.to_dict() for g in d.groups],
                "details": [s.to_dict() for s in d.suspects], "waited_for": self.waited_for}


@dataclass(frozen=True)
class HangEvidence:
    """Both diagnoses of a hang; the dumps decide when they name ranks that others wait for,
    or when the heartbeats name nobody (``by_flight_recorder``); when neither names anybody,
    the ranks whose heartbeats went stale (``by_stale_heartbeat``), unless every rank's did
    (nothing then tells them apart)."""

    heartbeats: HeartbeatEvidence
    flight_recorder: FlightRecorderEvidence
    by_flight_recorder: bool
    by_stale_heartbeat: bool = False

    @classmethod
    def decide(cls, heartbeats: HeartbeatEvidence, fr: FlightRecorderEvidence,
               ) -> HangEvidence:
        by_fr = bool(fr.suspect_ranks) and (fr.waited_for
                                            or not heartbeats.diagnosis.suspect_ranks)
        alive = (heartbeats.alive_not_in_a_call or heartbeats.last_ops
                 or heartbeats.in_other_group_call)
        stale = (not by_fr and not heartbeats.diagnosis.suspect_ranks
                 and bool(heartbeats.stale_heartbeat) and bool(alive))
        return cls(heartbeats, fr, by_fr, stale)

    @property
    def culprit_ranks(self) -> tuple[int, ...]:
        if self.by_flight_recorder:
            return self.flight_recorder.suspect_ranks
        if self.by_stale_heartbeat:
            return self.heartbeats.stale_heartbeat
        return self.heartbeats.diagnosis.suspect_ranks

    @property
    def localised_by(self) -> str:
        if self.by_flight_recorder:
            return "flight_recorder"
        return "stale_heartbeat" if self.by_stale_heartbeat else "heartbeats"

    def to_dict(self) -> dict[str, Any]:
        out = self.heartbeats.to_dict()
        out["flight_recorder"] = self.flight_recorder.to_dict()
        out["localised_by"] = self.localised_by
        if self.by_flight_recorder:
            out["heartbeat_suspects"] = list(self.heartbeats.diagnosis.suspect_ranks)
        return out


def heartbeat_evidence(beats: Mapping[int, Beat], world: int, now: float,
                       stale_s: float, pp: int, tp: int) -> HeartbeatEvidence:
    """The hang as the heartbeats of a ``world``-rank job on ``pp x tp`` show it at ``now``:
    ranks whose beat is older than ``stale_s``, ranks computing, ranks in a call of a group
    outside the topology, and :func:`~stragglers.hang.last_op.localize_hang` on the last ops
    of the ranks in a call."""
    last_ops: dict[int, LastOp] = {}
    stale, computing = [], []
    # e.g. the example job's "emb" all-reduces: left out of the waits-for graph (like silent
    # ranks, they are suspects only if others wait for them)
    untracked: dict[int, str] = {}
    phases = {r: b.phase for r, b in beats.items() if r < world and b.phase is not None}
    for r in range(world):
        b = beats.get(r)
        if b is None or now - b.ts > stale_s:
            stale.append(r)
            continue
        if b.op is not None and b.group in TRACKED_GROUPS:
            last_ops[r] = LastOp(b.op, str(b.group), peer=b.peer, seq=b.seq)
        elif b.op is not None:  # a call in a group the dp x pp x tp topology does not describe
            untracked[r] = f"{b.op} in {b.group}"
        else:
            computing.append(r)
    diagnosis = localize_hang(Topology(dp=world // (pp * tp), pp=pp, tp=tp), last_ops)
    return HeartbeatEvidence(tuple(stale), tuple(computing), untracked, last_ops,
                             {r: b.step for r, b in beats.items()}, diagnosis, phases)


def await_fr_dumps(folder: Path, live: list[int], wait_s: float) -> FlightRecorderEvidence:
    """Wait (at most ``wait_s``) for the dumps of the ``live`` ranks in ``folder``, then
    localise the hang from the dumps there (:mod:`stragglers.hang.fr_hang`); a folder that
    never appeared gives empty evidence, unreadable dumps their error."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if all((folder / f"_dump_{r}").exists() for r in live):
            break
        time.sleep(0.05)
    if not folder.is_dir():
        return FlightRecorderEvidence()
    try:
        return FlightRecorderEvidence(localize_fr_hang(read_flight_recorder(folder)))
    except InputError as exc:
        return FlightRecorderEvidence(error=str(exc))
