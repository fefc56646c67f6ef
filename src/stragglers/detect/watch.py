"""Streaming watcher behind ``stragglers watch``: JSON-lines records in, JSON events out.

Records follow :mod:`stragglers.detect.records`.  Per rank:

* iteration records give iteration times directly (``duration``, or the ``ts`` difference to the
  previous iteration record divided by the iteration-number step);
* call records, for ranks that have sent no iteration record, go through a
  :class:`~stragglers.detect.period.PeriodTracker` (ACF period + anchor) that turns them into
  iteration times; call records with ``group`` and ``duration`` also feed the profile used to
  name suspect groups (:mod:`stragglers.detect.narrow`);
* every iteration time goes to a streaming detector (BOCD + verification by default).

Events (one JSON object per line, key ``event``):

``onset`` / ``change`` / ``recovery`` / ``speedup``
    a verified change of a rank's iteration time: ``rank``, ``iteration`` (estimated first
    iteration of the new regime, counted from the rank's first iteration seen),
    ``declared_iteration``, ``ts`` (end timestamp of that first iteration when known),
    ``level_s``, ``previous_s``, ``healthy_s`` and ``severity`` (throughput loss vs healthy);
``suspects``
    profiling after an onset (Falcon §4.3): once ``profile_calls`` call records with ``group``
    and ``duration`` have arrived after the first onset of an episode, the groups that
    :func:`~stragglers.detect.narrow.narrow_down` flags (``slow_transfer`` or
    ``waiting_for_peer``), with ``onset_ranks``;
``bad_record`` / ``out_of_order``
    the first ``report_limit`` problems of each kind (then only counted); a record with a
    timestamp older than the previous call of its rank, or an iteration number not above the
    previous one, is out of order and skipped;
``summary``
    at the end: counts of records, bad and out-of-order records, iterations per rank and the
    ranks still slow.

Bad input never stops the watcher.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from stragglers.detect.bocd import Alarm, Detector, make_detector
from stragglers.detect.narrow import narrow_down_records
from stragglers.detect.period import CallEncoder, PeriodTracker
from stragglers.detect.records import CallRecord, IterationRecord, RecordError, parse_line

__all__ = ["Watcher", "follow_lines"]


@dataclass
class _Rank:
    detector: Detector
    tracker: PeriodTracker | None = None
    encoder: CallEncoder = field(default_factory=CallEncoder)
    last_call_ts: float | None = None
    last_iter: int | None = None
    last_iter_ts: float | None = None
    uses_iter_records: bool = False
    points: int = 0
    end_ts: deque[float | None] = field(default_factory=lambda: deque(maxlen=4096))
    slow: bool = False


class Watcher:
    """Incremental state of ``stragglers watch``: feed lines, collect event dicts."""

    def __init__(
        self,
        *,
        method: str = "bocd_verify",
        detector_factory: Callable[[], Detector] | None = None,
        tracker_kwargs: dict[str, Any] | None = None,
        report_limit: int = 5,
        profile_calls: int = 256,
        source: str = "<stdin>",
    ) -> None:
        self._factory = detector_factory or (lambda: make_detector(method))
        self._tracker_kwargs = dict(tracker_kwargs or {})
        self.report_limit = report_limit
        self.source = source
        self.ranks: dict[int, _Rank] = {}
        self.profile_calls = profile_calls
        self.profile: deque[CallRecord] = deque(maxlen=max(profile_calls, 1))
        self._profiling = False
        self._onset_ranks: list[int] = []
        self.records = 0
        self.bad = 0
        self.out_of_order = 0
        self.ignored = 0

    # -- input --------------------------------------------------------------------------------
    def process_line(self, text: str, lineno: int) -> list[dict[str, Any]]:
        """Handle one input line; returns the events it produces (never raises on bad input)."""
        try:
            rec = parse_line(text, source=self.source, line=lineno)
        except RecordError as exc:
            self.bad += 1
            if self.bad <= self.report_limit:
                return [{"event": "bad_record", "line": lineno, "error": str(exc)}]
            return []
        if rec is None:
            return []
        self.records += 1
        if isinstance(rec, CallRecord):
            return self._call(rec, lineno)
        if isinstance(rec, IterationRecord):
            return self._iteration(rec, lineno)
        self.ignored += 1  # message records are for `stragglers detect matrix`
        return []

    def _rank(self, rank: int) -> _Rank:
        st = self.ranks.get(rank)
        if st is None:
            st = self.ranks[rank] = _Rank(detector=self._factory())
        return st

    def _disorder(self, lineno: int, rank: int, detail: str) -> list[dict[str, Any]]:
        self.out_of_order += 1
        if self.out_of_order <= self.report_limit:
            return [{"event": "out_of_order", "line": lineno, "rank": rank, "detail": detail}]
        return []

    def _call(self, rec: CallRecord, lineno: int) -> list[dict[str, Any]]:
        st = self._rank(rec.rank)
        if st.last_call_ts is not None and rec.ts < st.last_call_ts:
            return self._disorder(
                lineno, rec.rank, f"call ts {rec.ts} is before the previous call "
                f"({st.last_call_ts})"
            )
        st.last_call_ts = rec.ts
        events: list[dict[str, Any]] = []
        if rec.group is not None and rec.duration is not None:
            self.profile.append(rec)
            if self._profiling and len(self.profile) >= self.profile_calls:
                events.append(self._suspects_event())
        if st.uses_iter_records:
            return events
        if st.tracker is None:
            st.tracker = PeriodTracker(**self._tracker_kwargs)
        its = st.tracker.feed([rec.ts], [st.encoder.code((rec.type, rec.size))])
        for end_ts, dur, n in zip(its.end_ts.tolist(), its.duration.tolist(),
                                  its.n_iters.tolist(), strict=True):
            for _ in range(n):
                events += self._point(rec.rank, st, dur, end_ts)
        return events

    def _iteration(self, rec: IterationRecord, lineno: int) -> list[dict[str, Any]]:
        st = self._rank(rec.rank)
        if st.last_iter is not None and rec.iter <= st.last_iter:
            return self._disorder(lineno, rec.rank,
                                  f"iteration {rec.iter} does not follow iteration {st.last_iter}")
        if (rec.ts is not None and st.last_iter_ts is not None and rec.ts < st.last_iter_ts):
            return self._disorder(lineno, rec.rank,
                                  f"iteration ts {rec.ts} is before the previous one")
        st.uses_iter_records = True
        step = 1 if st.last_iter is None else rec.iter - st.last_iter
        dur = rec.duration
        if dur is None and rec.ts is not None and st.last_iter_ts is not None:
            dur = (rec.ts - st.last_iter_ts) / step
        st.last_iter = rec.iter
        if rec.ts is not None:
            st.last_iter_ts = rec.ts
        if dur is None:
            return []
        if dur <= 0:
            self.ignored += 1
            return []
        return self._point(rec.rank, st, dur, rec.ts)

    # -- detection ----------------------------------------------------------------------------
    def _point(self, rank: int, st: _Rank, duration: float, end_ts: float | None
               ) -> list[dict[str, Any]]:
        if not duration > 0:
            self.ignored += 1
            return []
        st.points += 1
        st.end_ts.append(end_ts)
        events = []
        for alarm in st.detector.update(duration):
            events.append(self._alarm_event(rank, st, alarm))
            if alarm.kind == "onset":
                st.slow = True
                if not self._profiling:
                    self._profiling = True
                    self._onset_ranks = []
                    self.profile.clear()
                self._onset_ranks.append(rank)
            elif alarm.kind == "recovery":
                st.slow = False
        return events

    def _alarm_event(self, rank: int, st: _Rank, a: Alarm) -> dict[str, Any]:
        back = st.points - 1 - a.index
        ts = st.end_ts[-1 - back] if 0 <= back < len(st.end_ts) else None
        return {
            "event": a.kind, "rank": rank, "iteration": a.index,
            "declared_iteration": a.declared_at, "ts": ts,
            "level_s": round(a.level_after, 6), "previous_s": round(a.level_before, 6),
            "healthy_s": round(a.healthy_level, 6), "severity": round(a.severity, 4),
        }

    def suspects(self) -> list[dict[str, Any]]:
        """Groups flagged by the recent call profile (empty without group profiles)."""
        if not self.profile:
            return []
        found = narrow_down_records(self.profile)
        return [f.to_dict() for f in found if f.verdict in ("slow_transfer", "waiting_for_peer")]

    def _suspects_event(self) -> dict[str, Any]:
        self._profiling = False
        return {"event": "suspects", "onset_ranks": sorted(set(self._onset_ranks)),
                "profiled_calls": len(self.profile), "groups": self.suspects()}

    def finish(self) -> list[dict[str, Any]]:
        """Events due at the end of the input: pending suspects, then the summary."""
        events = []
        if self._profiling and self.profile:
            events.append(self._suspects_event())
        return [*events, self.summary()]

    def summary(self) -> dict[str, Any]:
        return {
            "event": "summary", "records": self.records, "bad": self.bad,
            "out_of_order": self.out_of_order, "ignored": self.ignored,
            "iterations": {str(r): st.points for r, st in sorted(self.ranks.items())},
            "slow_ranks": sorted(r for r, st in self.ranks.items() if st.slow),
        }


def follow_lines(path: str, *, once: bool, poll: float = 0.5, idle_timeout: float | None = None,
                 stdin: IO[str] | None = None) -> Iterator[tuple[int, str]]:
    """Yield ``(line number, text)`` from a file that may still grow (``-`` = stdin).

    With ``once`` the file is read to its current end; otherwise it is polled every ``poll``
    seconds for new complete lines until ``idle_timeout`` seconds pass without growth (forever
    when ``None``).  A trailing partial line is only used once the writer completes it (or at
    the end with ``once``).
    """
    if path == "-":
        yield from enumerate(stdin or sys.stdin, start=1)
        return
    p = Path(path)
    with p.open(encoding="utf-8", errors="replace") as fh:
        lineno = 0
        partial = ""
        idle_since = time.monotonic()
        while True:
            chunk = fh.readline()
            if chunk:
                idle_since = time.monotonic()
                partial += chunk
                if partial.endswith("\n"):
                    lineno += 1
                    yield lineno, partial
                    partial = ""
                continue
            if once:
                if partial:
                    yield lineno + 1, partial
                return
            if idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout:
                if partial:
                    yield lineno + 1, partial
                return
            time.sleep(poll)
