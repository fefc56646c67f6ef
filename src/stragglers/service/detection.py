"""The one adapter between the service and the streaming detector of
:mod:`stragglers.detect.watch`: records of one job in, :class:`DetectionEvent` out.

Only this module knows the watcher's interface (``Watcher.process_lines`` and its event
dicts); when the detector changes, this is the module to adapt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stragglers.detect.records import parse_line
from stragglers.detect.watch import Watcher
from stragglers.service.rows import DetectionEvent

#: Watcher events kept by the service (``summary`` is the end of a stream, not an event).
KEPT = ("onset", "change", "recovery", "speedup", "flapping", "drift", "suspects",
        "out_of_order", "bad_record")


def check_records(lines: Sequence[str], source: str) -> int:
    """Parse every line strictly; returns the number of records. The first bad line raises
    :class:`~stragglers.detect.records.RecordError` (one line naming source, line and
    field), so that a batch is taken whole or not at all."""
    return sum(1 for i, text in enumerate(lines, start=1)
               if parse_line(text, source=source, line=i) is not None)


class JobDetector:
    """The streaming detector state of one job."""

    def __init__(self, source: str) -> None:
        self._watcher = Watcher(source=source)
        self._line = 0

    def feed(self, lines: Sequence[str]) -> list[DetectionEvent]:
        """Feed checked record lines; returns the events they produce."""
        first = self._line + 1
        self._line += len(lines)
        events = self._watcher.process_lines(enumerate(lines, start=first))
        return [_event(e) for e in events if e.get("event") in KEPT]

    def replay(self, lines: Sequence[str]) -> None:
        """Rebuild the state from records already handled (their events are discarded:
        they were stored when the records first came)."""
        self.feed(lines)


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _event(e: dict[str, Any]) -> DetectionEvent:
    return DetectionEvent(
        kind=str(e["event"]), rank=_int(e.get("rank")), iteration=_int(e.get("iteration")),
        ts=_num(e.get("ts")), severity=_num(e.get("severity")), level_s=_num(e.get("level_s")),
        previous_s=_num(e.get("previous_s")),
        detail={k: v for k, v in e.items() if k != "event"})
