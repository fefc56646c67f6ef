"""Reading the detection events of ``stragglers watch`` for the planner.

The planner needs, in the order ``watch`` printed them: the changes of a rank's iteration
time (``onset``, ``change``, ``recovery``, ``speedup``, ``flapping``: rank, ``iteration``
— the estimated first iteration of the new regime, counted in the rank's series —,
``declared_iteration`` — when the detector declared it —, ``level_s`` and ``healthy_s``),
the ``suspects`` events
(groups flagged ``slow_transfer`` make the episode a communication fail-slow), and the
``summary`` (its ``iterations`` per rank give the end of the stream). Every other event
(``segment``, ``bad_record``, file events ...) is counted by type and reported, not used.

Each line is read under the error contract: a line that is not a JSON object, a missing or
mistyped field, a negative rank or iteration, a level that is not a finite number > 0, is an
:class:`~stragglers.errors.InputError` naming ``FILE:LINE`` and the field.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from stragglers.errors import InputError
from stragglers.inputs import JSONLineError, check_file, int_field, iter_lines, parse_json_line
from stragglers.limits import check_limit

__all__ = ["EventStream", "LevelEvent", "SuspectsEvent", "add_event", "read_events"]

LEVEL_KINDS = ("onset", "change", "recovery", "speedup", "flapping")


@dataclass(frozen=True)
class LevelEvent:
    """A verified change of one rank's iteration time."""

    kind: str  # onset | change | recovery | speedup | flapping
    rank: int
    iteration: int  # first iteration of the new regime (position in the rank's series)
    declared_iteration: int  # the iteration at which the detector declared it
    level_s: float
    healthy_s: float
    line: int


@dataclass(frozen=True)
class SuspectsEvent:
    """Groups flagged by profiling after an onset."""

    verdicts: tuple[str, ...]  # one per flagged group: slow_transfer | waiting_for_peer
    line: int


@dataclass
class EventStream:
    """The events the planner uses, in input order, and what it did not use."""

    events: list[LevelEvent | SuspectsEvent] = field(default_factory=list)
    end_iteration: int | None = None  # from the summary: last iteration of the longest rank
    ignored: Counter[str] = field(default_factory=Counter)
    lines: int = 0


def _seconds(ev: dict[str, Any], key: str, where: str) -> float:
    v = ev.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{where}: field {key!r}: expected a number of seconds, got {v!r}"[:300])
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"{where}: field {key!r}: expected a finite number > 0, got {v!r}")
    return float(v)


def _level_event(ev: dict[str, Any], where: str, line: int) -> LevelEvent:
    it = int_field(ev, "iteration", where)
    declared = ev.get("declared_iteration", it)
    if declared is None:
        declared = it
    declared = int_field({"declared_iteration": declared}, "declared_iteration", where, low=it)
    return LevelEvent(kind=str(ev["event"]), rank=int_field(ev, "rank", where), iteration=it,
                      declared_iteration=declared, level_s=_seconds(ev, "level_s", where),
                      healthy_s=_seconds(ev, "healthy_s", where), line=line)


def _suspects(ev: dict[str, Any], where: str, line: int) -> SuspectsEvent:
    groups = ev.get("groups", [])
    if not isinstance(groups, list):
        raise InputError(f"{where}: field 'groups': expected a list, got {groups!r}"[:300])
    verdicts = []
    for i, g in enumerate(groups):
        verdict = g.get("verdict") if isinstance(g, dict) else None
        if not isinstance(verdict, str):
            raise InputError(f"{where}: field 'groups[{i}].verdict': expected a string")
        verdicts.append(verdict)
    return SuspectsEvent(verdicts=tuple(verdicts), line=line)


def _end(ev: dict[str, Any], where: str) -> int | None:
    iters = ev.get("iterations", {})
    if not isinstance(iters, dict):
        raise InputError(f"{where}: field 'iterations': expected a mapping rank -> count")
    counts = [int_field(iters, k, where) for k in iters]
    return max(counts) - 1 if counts else None


def add_event(stream: EventStream, ev: dict[str, Any], where: str, line: int) -> None:
    """Add one ``watch`` event (a decoded JSON object) to ``stream``: a level change or
    ``suspects`` event to its events, a ``summary`` to its end, any other kind counted in
    ``ignored``. ``where`` names the input in errors (``FILE:LINE``)."""
    kind = ev.get("event")
    if not isinstance(kind, str):
        raise InputError(f"{where}: field 'event': expected a string, got {kind!r}"[:300])
    if kind in LEVEL_KINDS:
        stream.events.append(_level_event(ev, where, line))
    elif kind == "suspects":
        stream.events.append(_suspects(ev, where, line))
    elif kind == "summary":
        stream.end_iteration = _end(ev, where)
    else:
        stream.ignored[kind[:40]] += 1


def read_events(path: str | os.PathLike[str]) -> EventStream:
    """The events of a ``watch`` output file (see the module docstring)."""
    p = check_file(path, "events file")
    out = EventStream()
    try:
        for lineno, raw in iter_lines(p):
            out.lines = lineno
            check_limit("mitigate_events", lineno, f"{p}: line {lineno}")
            where = f"{p}:{lineno}"
            try:
                ev = parse_json_line(raw)
            except JSONLineError as exc:
                raise InputError(f"{where}: {exc}") from None
            if ev is None:
                continue
            if not isinstance(ev, dict):
                raise InputError(f"{where}: expected a JSON object (a watch event), got "
                                 f"{type(ev).__name__}")
            add_event(out, ev, where, lineno)
    except OSError as exc:
        raise InputError(f"{p}: cannot read the events file ({exc.strerror or exc})") from None
    return out
