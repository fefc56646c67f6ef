"""The one adapter between the service and the streaming detector of
:mod:`stragglers.detect.watch`: records of one job in, :class:`DetectionEvent` out.

Only this module knows the watcher's interface (``Watcher.process_lines`` and its events,
:mod:`stragglers.detect.events`); when the detector changes, this is the module to adapt.
"""

from __future__ import annotations

from collections.abc import Sequence

from stragglers.detect.events import HeldRecordEvent, LevelEvent, SuspectsEvent, WatchEvent
from stragglers.detect.robust import RobustSettings
from stragglers.detect.watch import Watcher
from stragglers.logs.records import parse_line
from stragglers.service.rows import DetectionEvent, StreamPosition

#: Watcher events kept by the service (``summary`` is the end of a stream, not an event).
KEPT = ("onset", "change", "recovery", "speedup", "flapping", "drift", "suspects",
        "out_of_order", "bad_record")


def check_records(lines: Sequence[str], source: str) -> int:
    """Parse every line strictly; returns the number of records. The first bad line raises
    :class:`~stragglers.logs.records.RecordError` (one line naming source, line and
    field), so that a batch is taken whole or not at all."""
    return sum(1 for i, text in enumerate(lines, start=1)
               if parse_line(text, source=source, line=i) is not None)


class JobDetector:
    """The streaming detector state of one job (the robust detector with ``settings``)."""

    def __init__(self, source: str, settings: RobustSettings | None = None) -> None:
        settings = settings or RobustSettings()
        self._watcher = Watcher(source=source, detector_factory=settings.detector,
                                warmup_iters=settings.warmup_iters)
        self._line = 0

    def feed(self, lines: Sequence[str]) -> list[DetectionEvent]:
        """Feed checked record lines; returns the events they produce."""
        first = self._line + 1
        self._line += len(lines)
        events = self._watcher.process_lines(enumerate(lines, start=first))
        return [_event(e) for e in events if e.event in KEPT]

    def replay(self, lines: Sequence[str]) -> None:
        """Rebuild the state from records already handled (their events are discarded:
        they were stored when the records first came)."""
        self.feed(lines)

    def position(self) -> StreamPosition:
        """Where the stream is: lines fed, and each rank's stream position."""
        return StreamPosition(self._line, self._watcher.positions())

    def resume(self, position: StreamPosition) -> None:
        """Go on from ``position`` (the stream's position before the records about to be
        replayed, or after the records replayed): line numbers and the ranks' stream
        positions continue from there (see :meth:`Watcher.resume_positions`)."""
        self._line = position.line
        self._watcher.resume_positions(position.ranks)


def _event(e: WatchEvent) -> DetectionEvent:
    """The stored form: the columns the service queries, and the event's JSON object
    (without ``event``) as its detail."""
    detail = e.to_dict()
    del detail["event"]
    if isinstance(e, LevelEvent):
        # the job's own iteration number when the records carry one (iteration records,
        # calls with a step), else the rank's stream position
        iteration = e.job_iteration if e.job_iteration is not None else e.iteration
        return DetectionEvent(kind=e.kind, rank=e.rank, iteration=iteration, ts=e.ts,
                              severity=e.severity, level_s=e.level_s, previous_s=e.previous_s,
                              detail=detail)
    return DetectionEvent(kind=e.event, rank=e.rank if isinstance(e, HeldRecordEvent) else None,
                          iteration=None, ts=e.ts if isinstance(e, SuspectsEvent) else None,
                          severity=None, level_s=None, previous_s=None, detail=detail)
