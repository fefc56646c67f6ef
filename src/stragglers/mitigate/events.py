"""The detection events of ``stragglers watch`` for the planner
(:mod:`stragglers.detect.events`), read from a file or given by the live loop.

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

from stragglers.detect.events import LevelEvent, SuspectsEvent, WatchEvent
from stragglers.errors import InputError
from stragglers.inputs import JSONLineError, check_file, int_field, iter_lines, parse_json_line
from stragglers.limits import check_limit

__all__ = ["EventStream", "add_event", "read_events"]

LEVEL_KINDS = ("onset", "change", "recovery", "speedup", "flapping")


@dataclass
class EventStream:
    """The events the planner uses, as ``(line, event)`` in input order (``line``: where it
    was read, for errors), and what it did not use."""

    events: list[tuple[int, LevelEvent | SuspectsEvent]] = field(default_factory=list)
    end_iteration: int | None = None  # from the summary: last iteration of the longest rank
    ignored: Counter[str] = field(default_factory=Counter)
    lines: int = 0


def _seconds(v: float | None, key: str, where: str) -> None:
    if v is None:
        raise InputError(f"{where}: field {key!r}: expected a number of seconds, got None")
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"{where}: field {key!r}: expected a finite number > 0, got {v!r}")


def _end(ev: dict[str, Any], where: str) -> int | None:
    iters = ev.get("iterations", {})
    if not isinstance(iters, dict):
        raise InputError(f"{where}: field 'iterations': expected a mapping rank -> count")
    counts = [int_field(iters, k, where) for k in iters]
    return max(counts) - 1 if counts else None


def add_event(stream: EventStream, ev: WatchEvent, where: str, line: int) -> None:
    """Add one ``watch`` event to ``stream``: a level change of :data:`LEVEL_KINDS` (levels
    finite and > 0) or a ``suspects`` event to its events, any other kind counted in
    ``ignored``. ``where`` names the event in errors (``FILE:LINE``)."""
    if isinstance(ev, LevelEvent) and ev.kind in LEVEL_KINDS:
        _seconds(ev.level_s, "level_s", where)
        _seconds(ev.healthy_s, "healthy_s", where)
        stream.events.append((line, ev))
    elif isinstance(ev, SuspectsEvent):
        stream.events.append((line, ev))
    else:
        stream.ignored[ev.event[:40]] += 1


def _add_object(stream: EventStream, ev: dict[str, Any], where: str, line: int) -> None:
    """One decoded JSON object of an events file: the typed event, or the ``summary``'s end."""
    kind = ev.get("event")
    if not isinstance(kind, str):
        raise InputError(f"{where}: field 'event': expected a string, got {kind!r}"[:300])
    if kind in LEVEL_KINDS:
        add_event(stream, LevelEvent.from_dict(ev, where), where, line)
    elif kind == "suspects":
        add_event(stream, SuspectsEvent.from_dict(ev, where), where, line)
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
            _add_object(out, ev, where, lineno)
    except OSError as exc:
        raise InputError(f"{p}: cannot read the events file ({exc.strerror or exc})") from None
    return out
