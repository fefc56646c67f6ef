"""The events of ``stragglers watch`` (:mod:`stragglers.detect.watch`), one frozen dataclass
per kind.

The watcher, :mod:`~stragglers.detect.jobs` and :mod:`~stragglers.detect.spikes` produce these
objects (the follower's notices about files, :mod:`stragglers.logs.follow`, are events too)
and the planner and the service take them; :meth:`to_dict` gives the JSON object ``watch``
prints (key ``event`` first, then the fields in a fixed order) and is called only at the
edges (stdout, the service's store, files).
The meaning of every event and field: the docstring of :mod:`stragglers.detect.watch`.

:meth:`LevelEvent.from_dict` and :meth:`SuspectsEvent.from_dict` read the events a planner
uses back from a file (``stragglers mitigate plan``): the fields it relies on are checked
(an :class:`~stragglers.errors.InputError` naming ``where`` and the field); the others are
kept when they have their type and are left unset otherwise, as an events file written by
hand may omit them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from stragglers.detect.narrow import GroupFinding
from stragglers.errors import InputError
from stragglers.logs.follow import FileMissingEvent, RotatedEvent, TruncatedEvent

__all__ = [
    "BadInputEvent",
    "BadRecordEvent",
    "GapEvent",
    "HeldRecordEvent",
    "InputsEvent",
    "JobEvent",
    "LevelEvent",
    "SegmentEvent",
    "SkippedEvent",
    "SpikeTotals",
    "SpikesEvent",
    "SummaryEvent",
    "SuspectsEvent",
    "WatchEvent",
]


def _file(file: str | None) -> dict[str, str]:
    return {} if file is None else {"file": file}


def _as_json(obj: Any, event: bool = True) -> dict[str, object]:
    """``event`` first (when ``event``), then the dataclass fields in their order, tuples as
    lists; ``file`` only when known."""
    out: dict[str, object] = {"event": obj.event} if event else {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name == "file" and value is None:
            continue
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


class _Fields:
    """An event whose JSON object is ``event`` and then its fields (see :func:`_as_json`)."""

    def to_dict(self) -> dict[str, object]:
        return _as_json(self)


@dataclass(frozen=True)
class LevelEvent:
    """A verified change of a rank's iteration time: ``kind`` is ``onset``, ``change``,
    ``recovery``, ``speedup``, ``flapping`` or ``drift``.  ``iteration``: estimated first
    iteration of the new regime (position in the rank's series, warm-up included); levels
    in seconds per iteration (None: not known)."""

    kind: str
    rank: int
    iteration: int
    declared_iteration: int
    job_iteration: int | None
    declared_job_iteration: int | None
    ts: float | None
    line: int
    level_s: float | None
    previous_s: float | None
    healthy_s: float | None
    severity: float
    slow_fraction: float | None = None
    note: str = ""
    since_job_iteration: int | None = None
    file: str | None = None

    @property
    def event(self) -> str:
        return self.kind

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "event": self.kind, "rank": self.rank, "iteration": self.iteration,
            "declared_iteration": self.declared_iteration, "job_iteration": self.job_iteration,
            "declared_job_iteration": self.declared_job_iteration, "ts": self.ts,
            "line": self.line, "level_s": self.level_s, "previous_s": self.previous_s,
            "healthy_s": self.healthy_s, "severity": self.severity}
        if self.slow_fraction is not None:
            out["slow_fraction"] = self.slow_fraction
        if self.note:
            out["note"] = self.note
        if self.since_job_iteration is not None:
            out["since_job_iteration"] = self.since_job_iteration
        return {**out, **_file(self.file)}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], where: str) -> LevelEvent:
        """Read back: ``event``, ``rank``, ``iteration`` and numbers (or null) of seconds in
        ``level_s`` and ``healthy_s`` are required; ``declared_iteration`` defaults to
        ``iteration``; ``line`` to 0 and ``severity`` to NaN (unknown)."""
        from stragglers.inputs import int_field  # YAML behind it: not at watch start-up

        d = dict(obj)
        it = int_field(d, "iteration", where)
        declared = d.get("declared_iteration", it)
        if declared is None:
            declared = it
        declared = int_field({"declared_iteration": declared}, "declared_iteration", where,
                             low=it)
        rank = int_field(d, "rank", where)
        level, healthy = _seconds(d, "level_s", where), _seconds(d, "healthy_s", where)
        return cls(kind=str(d["event"]), rank=rank, iteration=it, declared_iteration=declared,
                   job_iteration=_int(d.get("job_iteration")),
                   declared_job_iteration=_int(d.get("declared_job_iteration")),
                   ts=_number(d.get("ts")), line=_int(d.get("line")) or 0, level_s=level,
                   previous_s=_number(d.get("previous_s")), healthy_s=healthy,
                   severity=_or_nan(d.get("severity")),
                   slow_fraction=_number(d.get("slow_fraction")),
                   note=d["note"] if isinstance(d.get("note"), str) else "",
                   since_job_iteration=_int(d.get("since_job_iteration")),
                   file=d["file"] if isinstance(d.get("file"), str) else None)


@dataclass(frozen=True)
class JobEvent(_Fields):
    """Several ranks changed at once (:mod:`stragglers.detect.jobs`); ``kind``: the kind of
    their level events."""

    event: ClassVar[str] = "job"
    kind: str
    ranks: tuple[int, ...]
    job_iteration: int
    last_job_iteration: int
    ts: float | None
    severity: float
    ranks_followed: int | None


@dataclass(frozen=True)
class SpikesEvent(_Fields):
    """Spikes of a rank over a report window (:mod:`stragglers.detect.spikes`)."""

    event: ClassVar[str] = "spikes"
    rank: int
    line: int
    job_iteration: int | None
    last_job_iteration: int | None
    points: int
    spikes: int
    clusters: int
    rate_per_100: float
    seconds_lost: float
    iterations_lost: float
    largest_ratio: float


@dataclass(frozen=True)
class GapEvent(_Fields):
    """Missing values of a Megatron iteration-time series (``restart``: more than one)."""

    event: ClassVar[str] = "gap"
    rank: int
    line: int
    job_iteration: int
    last_job_iteration: int
    values: int
    restart: bool


@dataclass(frozen=True)
class SuspectsEvent:
    """The groups that profiling after an onset flagged (``slow_transfer`` or
    ``waiting_for_peer``), with the ranks of the episode's onsets."""

    event: ClassVar[str] = "suspects"
    onset_ranks: tuple[int, ...]
    job_iteration: int | None
    ts: float | None
    line: int
    profiled_calls: int
    groups: tuple[GroupFinding, ...]

    @property
    def verdicts(self) -> tuple[str, ...]:
        return tuple(g.verdict for g in self.groups)

    def to_dict(self) -> dict[str, object]:
        return {"event": "suspects", "onset_ranks": list(self.onset_ranks),
                "job_iteration": self.job_iteration, "ts": self.ts, "line": self.line,
                "profiled_calls": self.profiled_calls,
                "groups": [g.to_dict() for g in self.groups]}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], where: str) -> SuspectsEvent:
        """Read back: each of ``groups`` needs its ``verdict`` (a group's other fields
        default to unknown: NaN, 0, empty)."""
        groups = obj.get("groups", [])
        if not isinstance(groups, list):
            raise InputError(f"{where}: field 'groups': expected a list, got {groups!r}"[:300])
        found = []
        for i, g in enumerate(groups):
            verdict = g.get("verdict") if isinstance(g, dict) else None
            if not isinstance(verdict, str):
                raise InputError(f"{where}: field 'groups[{i}].verdict': expected a string")
            found.append(_group(g, verdict))
        ranks = obj.get("onset_ranks")
        return cls(onset_ranks=tuple(r for r in ranks if _int(r) is not None)
                   if isinstance(ranks, list) else (),
                   job_iteration=_int(obj.get("job_iteration")), ts=_number(obj.get("ts")),
                   line=_int(obj.get("line")) or 0,
                   profiled_calls=_int(obj.get("profiled_calls")) or 0, groups=tuple(found))


@dataclass(frozen=True)
class SegmentEvent(_Fields):
    """A confirmed restart, iteration jump, clock step or idle stretch of a rank."""

    event: ClassVar[str] = "segment"
    reason: str  # restart | iteration_jump | clock_step | idle
    rank: int
    line: int
    job_iteration: int | None
    previous_iteration: int | None
    ts: float | None
    previous_ts: float | None
    file: str | None = None


@dataclass(frozen=True)
class BadRecordEvent(_Fields):
    """A line that is not a valid record (``event`` ``bad_record``): its own iteration number
    when it could be read, and the last one accepted before it."""

    event: ClassVar[str] = "bad_record"
    reason: str
    line: int
    job_iteration: int | None
    after_job_iteration: int | None
    error: str
    file: str | None = None


@dataclass(frozen=True)
class BadInputEvent(_Fields):
    """A line too long to read, or a whole input that is not a record document (``event``
    ``bad_record``)."""

    event: ClassVar[str] = "bad_record"
    reason: str
    line: int
    error: str
    file: str | None = None


@dataclass(frozen=True)
class HeldRecordEvent(_Fields):
    """A record held back as a discontinuity and then dropped (``reason``, also its
    ``event``: ``out_of_order``, ``outlier`` or ``unconfirmed``); ``decided_by_line``: the
    line that decided it."""

    reason: str
    line: int
    rank: int
    detail: str
    decided_by_line: int
    file: str | None = None

    @property
    def event(self) -> str:
        return self.reason


@dataclass(frozen=True)
class SkippedEvent(_Fields):
    """A record skipped for a limit or a value (``reason``, also its ``event``:
    ``rank_limit``, ``call_kinds_limit``, ``zero_duration``)."""

    reason: str
    line: int
    rank: int
    detail: str
    file: str | None = None

    @property
    def event(self) -> str:
        return self.reason


@dataclass(frozen=True)
class SpikeTotals:
    """Spikes of all ranks (the summary's ``spikes``)."""

    spikes: int
    clusters: int
    seconds_lost: float
    iterations_lost: float

    def to_dict(self) -> dict[str, object]:
        return _as_json(self, event=False)


@dataclass(frozen=True)
class SummaryEvent:
    """The end of the input: counts by reason and name (sorted mappings), iteration times
    per rank (``iterations``: replayed iterations counted again), the job iterations each
    rank's numbered records cover (``job_iterations``: replayed ones once; ranks with
    iteration records, or call records with ``step``) and the ranks still slow."""

    event: ClassVar[str] = "summary"
    lines: int
    records: int
    bad: int
    out_of_order: int
    dropped: Mapping[str, int]
    ignored: Mapping[str, int]
    unknown_fields: Mapping[str, int]
    segments: Mapping[str, int]
    files: Mapping[str, int]
    gap_runs: int
    gap_values: int
    warmup_points: int
    warmup_ends: Mapping[int, int]
    spikes: SpikeTotals
    job_events: Mapping[str, int]
    inputs: int
    ranks: int
    iterations: Mapping[int, int]
    slow_ranks: tuple[int, ...]
    job_iterations: Mapping[int, int] = field(default_factory=dict)
    #: Files of the folders and glob patterns given that ``watch`` did not read, by reason.
    skipped_files: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "event": "summary", "lines": self.lines, "records": self.records,
            "bad": self.bad, "out_of_order": self.out_of_order,
            "dropped": dict(self.dropped), "ignored": dict(self.ignored),
            "unknown_fields": dict(self.unknown_fields), "segments": dict(self.segments),
            "files": dict(self.files),
            "gaps": {"runs": self.gap_runs, "values": self.gap_values},
            "warmup_points": self.warmup_points,
            "warmup_ends": {str(r): v for r, v in self.warmup_ends.items()},
            "spikes": self.spikes.to_dict(),
            "job_events": dict(self.job_events),
            "inputs": self.inputs,
            "ranks": self.ranks,
            "iterations": {str(r): v for r, v in self.iterations.items()},
            "job_iterations": {str(r): v for r, v in self.job_iterations.items()},
            "slow_ranks": list(self.slow_ranks),
            "skipped_files": dict(self.skipped_files),
        }


@dataclass(frozen=True)
class InputsEvent(_Fields):
    """Files of a folder or glob pattern that ``watch`` follows from now on (``added``: they
    appeared after it started, e.g. the rank files of a job started after ``watch``);
    ``inputs``: the files followed now; ``skipped_files``: the files not read so far, by
    reason."""

    event: ClassVar[str] = "inputs"
    added: tuple[str, ...]
    inputs: int
    skipped_files: Mapping[str, int]


WatchEvent = (LevelEvent | JobEvent | SpikesEvent | GapEvent | SuspectsEvent | SegmentEvent
              | BadRecordEvent | BadInputEvent | HeldRecordEvent | SkippedEvent | RotatedEvent
              | TruncatedEvent | FileMissingEvent | SummaryEvent | InputsEvent)


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _number(v: object) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _seconds(d: Mapping[str, Any], key: str, where: str) -> float | None:
    v = d.get(key)
    if v is not None and _number(v) is None:
        raise InputError(f"{where}: field {key!r}: expected a number of seconds, got {v!r}"[:300])
    return v


def _group(g: Mapping[str, Any], verdict: str) -> GroupFinding:
    late = g.get("late_ranks")
    return GroupFinding(
        group=g["group"] if isinstance(g.get("group"), str) else "", verdict=verdict,
        transfer_ratio=_or_nan(g.get("transfer_ratio")), wait_ratio=_or_nan(g.get("wait_ratio")),
        transfer_s=_or_nan(g.get("transfer_s")), wait_s=_or_nan(g.get("wait_s")),
        calls=_int(g.get("calls")) or 0,
        late_ranks=tuple(r for r in late if _int(r) is not None)
        if isinstance(late, list) else ())


def _or_nan(v: object) -> float:
    x = _number(v)
    return math.nan if x is None else x
