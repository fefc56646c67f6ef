"""Streaming watcher behind ``stragglers watch``: JSON-lines records in, JSON events out.

Records follow :mod:`stragglers.logs.records`.  Per rank:

* iteration records give iteration times directly (``duration``, or the ``ts`` difference to the
  previous iteration record of the rank divided by the iteration-number step);
* step records (the probes' per-rank ``busy`` and ``wait`` of each step) are iteration records
  whose iteration time is the rank's ``busy`` time less what slowed every rank alike in the
  same step (:mod:`stragglers.detect.steps`, which holds a rank's records until its peers'
  of the same steps have come, at most 16,384 records a rank): a rank that waits for a slow
  one is not slow itself, and a slowdown of the whole job is not a straggler;
* call records, for ranks that have sent no iteration record, go through a
  :class:`~stragglers.detect.period.PeriodTracker` (ACF period + anchor) that turns them into
  iteration times; call records with ``group`` and ``duration`` also feed the profile used to
  name suspect groups (:mod:`stragglers.detect.narrow`);
* every iteration time after the rank's warm-up (:mod:`stragglers.detect.warmup`: at least
  ``warmup_iters`` iterations and until the level settles; again after a restart) goes to a
  streaming detector (BOCD + verification by default).

Inputs: JSON lines (``input_format="jsonl"``), Megatron-LM training logs (``"megatron-log"``:
:func:`~stragglers.logs.megatron.parse_log_line`; other log lines are counted as ``text``)
and, through :meth:`Watcher.process_items`, the records of Megatron's iteration-time JSON.
Several input files (``sources`` > 1, one per rank): each batch says which file it comes
from (and the rank of its log lines without a ``torchrun`` prefix); events then carry
``file``, and the job-level groups wait until every file has given a record and every rank is
past them (no file read far ahead closes them).

Continuity of a rank (what is out of order, an outlier, a restart or a clock step)
-------------------------------------------------------------------------------------
A record *continues* the rank's last accepted record when its iteration number is higher by
at most ``max(1000, 8 x the last step)`` and its timestamp is not earlier and not more than
100 typical iteration times later (the typical time is the median of the rank's last 16
iteration times; call records have no iteration number and use the timestamp only).  A record
that does not continue the rank is held back, and the next record of the rank decides:

* it continues the last accepted record: the held record was a lone *outlier* (a record from
  the far future, ``iter: 10**12``) or *out of order* (from the past, a duplicate); it is
  dropped, counted and reported, and the rank goes on as if it had not come;
* it continues the held record: the discontinuity is confirmed and the rank starts a new
  *segment* (event ``segment``, with ``reason`` ``restart`` when the iteration number went
  back, e.g. after a checkpoint restart, ``iteration_jump`` when it went far ahead,
  ``clock_step`` when only the timestamp jumped or went back).  No iteration time is taken
  across the boundary (for call records, the timestamps after a clock step are shifted onto
  the old clock so the period tracker goes on); the detector keeps its state;
* neither: the held record is dropped as an outlier and the new one is held instead.

A record still held at the end of the input is counted as ``unconfirmed``.

Events (one JSON object per line, key ``event``; :mod:`stragglers.detect.events`)
----------------------------------------------------------------------------------
``onset`` / ``change`` / ``recovery`` / ``speedup``
    a verified change of a rank's iteration time: ``rank``, ``iteration`` (estimated first
    iteration of the new regime, counted from the rank's first iteration time, warm-up
    included), ``declared_iteration``, ``job_iteration`` (that first iteration's number in
    the job, for iteration records; else null), ``ts`` (end timestamp of that first iteration
    when known), ``line`` (the input line whose record raised it), ``level_s``,
    ``previous_s``, ``healthy_s`` and ``severity`` (throughput loss vs healthy);
``job``
    several ranks changed at once (:mod:`stragglers.detect.jobs`): ``kind``, ``ranks``,
    ``job_iteration``, ``ts``, ``severity``, ``ranks_followed``;
``spikes``
    every ``spike_report_points`` iteration times of a rank with spikes, and at the end
    (:mod:`stragglers.detect.spikes`): count, clusters, rate, seconds and iterations lost;
``gap``
    missing values of a Megatron iteration-time series (the first ``report_limit``; all are
    counted); more than one in a row is a restart: a new segment and a new warm-up;
``suspects``
    profiling after an onset (Falcon §4.3): once ``profile_calls`` call records with ``group``
    and ``duration`` have arrived after the first onset of an episode, the groups that
    :func:`~stragglers.detect.narrow.narrow_down` flags (``slow_transfer`` or
    ``waiting_for_peer``), with ``onset_ranks`` and the ``job_iteration`` and ``ts`` of the
    first onset;
``segment``
    a confirmed restart, iteration jump or clock step of a rank (see above);
``bad_record`` / ``out_of_order`` / ``outlier`` / ``rank_limit``
    the first ``report_limit`` records skipped for each of these reasons (all are counted);
    a ``bad_record`` carries ``job_iteration`` (its own, when it could be read) and
    ``after_job_iteration`` (the last one accepted before it);
``rotated`` / ``truncated`` / ``file_missing``
    what :class:`~stragglers.logs.follow.Follower` saw happen to the file;
``summary``
    at the end: lines read, valid records, records skipped by reason (``dropped``), records
    of other tools (``ignored``), unknown fields, segments, file events, iteration times per
    rank and the ranks still slow.

Memory: each followed rank holds its detector state (BOCD+V: at most 1,024 run lengths of 6
float64 values, 30 recent iteration times) and a 128-entry history of iteration numbers and
timestamps; call-record ranks add a period tracker (``2 x window`` calls).  Ranks beyond
``max_ranks`` are not followed (their records are counted as ``rank_limit``).

Bad input never stops the watcher.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import orjson

from stragglers.detect.detector import Alarm, Detector
from stragglers.detect.events import (
    BadInputEvent,
    BadRecordEvent,
    GapEvent,
    HeldRecordEvent,
    LevelEvent,
    SegmentEvent,
    SkippedEvent,
    SpikeTotals,
    SummaryEvent,
    SuspectsEvent,
    WatchEvent,
)
from stragglers.detect.jobs import JobGrouper
from stragglers.detect.narrow import GroupFinding, narrow_down_records
from stragglers.detect.period import CallEncoder, PeriodTracker
from stragglers.detect.robust import CONFIDENCE, MIX_SHARE, RobustLevelDetector, share_clears
from stragglers.detect.spikes import SpikeCounter
from stragglers.detect.steps import StepJoiner
from stragglers.detect.warmup import WarmUp
from stragglers.limits import limit
from stragglers.logs.follow import FileNotice
from stragglers.logs.megatron import Gap, parse_log_line
from stragglers.logs.records import (
    KNOWN_FIELDS,
    CallRecord,
    IterationRecord,
    MessageRecord,
    RecordError,
    StepRecord,
    decode_json,
    parse_record,
)

__all__ = ["Watcher"]

HISTORY = 128  # iteration numbers and timestamps kept per rank for the alarm events
TYPICAL_POINTS = 16  # iteration times behind a rank's typical iteration time
JUMP_FACTOR = 100.0  # a timestamp this many typical iteration times ahead is a jump
MIN_ITER_GAP = 1000  # an iteration number further ahead than max(this, 8 x step) is a jump
IDLE_S = 60.0  # wall time not explained by the iteration times that is a stop and resume
IDLE_FACTOR = 10.0  # ... and at least this many times the iterations' own (or typical) time
UNKNOWN_NAMES = 32  # distinct unknown field names counted by name (then as "other")
WARM_KEEP = 64  # warm-up points kept per rank for a slowdown that began inside the warm-up
# A segment between two resumes whose level stood above the segments on both sides, which
# agree with each other (a configuration that came back slower and was put back), is a
# slowdown over the whole segment; each segment's level is the median of its points after
# the first SEG_SETTLE (its warm-up), the one before over its latest SEG_BEFORE points, the
# one after over SEG_AFTER points (judged after each SEG_AFTER, up to SEG_TRIES times: a
# warm-up that decays slowly), and at most SEG_KEEP points are kept.
SEG_SETTLE = 30
SEG_BEFORE = 200
SEG_AFTER = 40
SEG_TRIES = 4
SEG_KEEP = 512
DEFAULT_THRESHOLD = 0.10  # the rise of a slowdown where the detector names none
# ... only between boundaries across which the iteration count goes on (a stop and resume:
# wall time the iterations do not explain, or a timestamp jump; the same run resumed where it
# was); a restart from a checkpoint (the count goes back) or a new job's counter (far ahead)
# may come back on other hardware or at another scale, whose level is a new healthy one
PUT_BACK_REASONS = frozenset({"idle", "clock_step"})
# A segment opened by such a resume is also judged as it comes, against the level before the
# resume (the latest segment not itself declared slower): an onset at its first point once,
# past its first RISE_SKIP points, the median of its latest RISE_POINTS points and of all its
# points since RISE_SKIP stand the threshold above that level, the latest RISE_POINTS no lower
# than RISE_FALL below the RISE_POINTS before them (a warm-up after a resume decays: a level
# does not), the trend of all its points since RISE_SKIP (Theil-Sen), carried over the next
# 2 x RISE_POINTS points, leaves that median the threshold above (a warm-up that decays
# slowly passes the two medians on noise sooner or later) and clear the midpoint by the
# detector's confidence in standard errors of their median; judged on the segment's first
# RISE_UNTIL points (later: the rule above).  A level
# that MIX_SHARE or more of the segment before's latest SEG_BEFORE points reached (beyond the
# midpoint between the two) is a height it held: no onset unless the segment's points reach
# it more often than that share by Chernoff's bound at MIX_ARL (the detector's known mixture).
RISE_SKIP = 10
RISE_POINTS = 16
RISE_FALL = 0.02
RISE_UNTIL = 100
# And the reverse, a resumed faster run that comes back to the level it kept within its
# first SEG_BEFORE points: Watcher._returned.

#: A warm-up point: seconds, iteration (or position), position, end ts, job iteration, span.
_WarmPoint = tuple[float, int, int, float | None, int | None, int]

Dropped = BadRecordEvent | BadInputEvent | HeldRecordEvent | SkippedEvent


@dataclass(frozen=True)
class _Segment:
    """A finished segment of a rank: its first point (position, job iteration, end ts), its
    level over its points after the warm-up (the latest ``SEG_KEEP``) and over its latest
    ``SEG_BEFORE``, whether an onset was raised in it and the reason of the boundary that
    opened it."""

    start: tuple[int, int | None, float | None]
    level: float
    late: float
    alarmed: bool
    opened: str
    risen: bool = False  # declared slower than the level before its resume (as it came)
    tail: np.ndarray | None = None  # its latest SEG_BEFORE settled points, sorted
    ended_slow: bool = False  # it ended inside a slow episode (its late level is no healthy one)


class _Rank:
    """State of one rank."""

    __slots__ = ("detector", "tracker", "encoder", "uses_iter_records", "last_iter",
                 "last_ts", "last_step", "pending", "pending_line", "ts_offset", "points",
                 "hist_iter", "hist_ts", "recent", "typical", "slow", "segments",
                 "last_call_ts", "pending_call", "pending_call_line", "warm", "spikes",
                 "calls_points", "seen", "hist_pos", "warm_points", "call_step",
                 "job_ranges", "seg_points", "seg_start", "seg_alarmed", "seg_before", "seg_opened",
                 "seg_risen", "paused")

    def __init__(self) -> None:
        self.detector: Detector | None = None
        self.tracker: PeriodTracker | None = None
        self.encoder: CallEncoder | None = None
        self.uses_iter_records = False
        self.last_iter: int | None = None  # last accepted iteration number
        self.last_ts: float | None = None  # last accepted timestamp (raw clock)
        self.last_step = 1
        self.pending: IterationRecord | None = None
        self.pending_line = 0
        self.paused = False  # the held record may end a stop (timestamps alone)
        self.ts_offset = 0.0  # added to call timestamps after confirmed clock steps
        self.points = 0
        self.hist_iter: np.ndarray | None = None
        self.hist_ts: np.ndarray | None = None
        self.recent: deque[float] = deque(maxlen=TYPICAL_POINTS)
        self.typical = math.nan
        self.slow = False
        self.segments = 0
        self.last_call_ts: float | None = None  # last accepted call timestamp (raw clock)
        self.pending_call: CallRecord | None = None
        self.pending_call_line = 0
        self.warm: WarmUp | None = None
        self.spikes = SpikeCounter()
        self.calls_points = 0  # iteration times derived from call records (no iteration number)
        self.seen = 0  # iteration times of the rank, warm-up included (the stream position)
        self.hist_pos: np.ndarray | None = None
        # the latest warm-up points (segmented detectors: a slowdown inside the warm-up)
        self.warm_points: deque[_WarmPoint] | None = None  # (while warming up)
        self.call_step: int | None = None  # latest training step of its call records
        self.job_ranges: list[list[int]] = []  # [first, last] job iteration of each segment
        # the current segment's iteration times (the latest SEG_KEEP), its first point
        # (position, job iteration, end ts), whether an onset was raised in it, and the two
        # segments before it
        self.seg_points: deque[float] = deque(maxlen=SEG_KEEP)
        self.seg_start: tuple[int, int | None, float | None] | None = None
        self.seg_alarmed = False
        self.seg_before: deque[_Segment] = deque(maxlen=2)
        self.seg_opened = ""  # the reason of the segment boundary that opened the current one
        self.seg_risen = False  # the current segment was declared slower as it came


class Watcher:
    """Incremental state of ``stragglers watch``: feed lines, collect events."""

    def __init__(
        self,
        *,
        detector_factory: Callable[[], Detector] | None = None,
        tracker_kwargs: dict[str, Any] | None = None,
        report_limit: int = 5,
        profile_calls: int = 256,
        source: str = "<stdin>",
        max_ranks: int | None = None,
        input_format: str = "jsonl",
        warmup_iters: int | None = None,
        spike_report_points: int = 1000,
        sources: int = 1,
    ) -> None:
        if input_format not in ("jsonl", "megatron-log"):
            raise ValueError(f"input_format must be jsonl or megatron-log, got {input_format!r}")
        self.input_format = input_format
        self._factory = detector_factory or RobustLevelDetector
        # Segmented detectors (RobustLevelDetector) get their own default warm-up, a new
        # warm-up at every segment, and segments for idle stretches too.
        probe = self._probe = self._factory()
        self._segmented = probe.segmented
        if warmup_iters is None:
            warmup_iters = probe.default_warmup_iters
        self.warmup_iters = int(warmup_iters)
        self.spike_report_points = int(spike_report_points)
        # Several input files (one per rank): the job groups wait for every file.
        self.sources = int(sources)
        self.jobs = JobGrouper(stall_rule=self.sources <= 1)
        self._source_progress: dict[int, int] = {}  # file index -> last iteration number
        self._file_index = 0
        self._default_rank = 0
        self.gaps = 0
        self.gap_values = 0
        self.warmup_points = 0
        self.warmup_ends: dict[int, int] = {}  # rank -> iteration where its warm-up ended
        self._tracker_kwargs = dict(tracker_kwargs or {})
        self.report_limit = report_limit
        self.source = source
        self.max_ranks = limit("watch_ranks") if max_ranks is None else int(max_ranks)
        self.max_line_bytes = limit("record_bytes")
        self.max_call_kinds = limit("call_kinds")
        self.ranks: dict[int, _Rank] = {}
        self._start_positions: dict[int, int] = {}  # resume_positions of ranks not seen yet
        self.profile_calls = profile_calls
        self.profile: deque[CallRecord] = deque(maxlen=max(profile_calls, 1))
        self._profiling = False
        self._onset_ranks: list[int] = []
        self.lines = 0
        self.records = 0
        self.dropped: Counter[str] = Counter()
        self.reported: Counter[str] = Counter()
        self.ignored: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.segments: Counter[str] = Counter()
        self.files: Counter[str] = Counter()
        self._line = 0
        self._last_job_iter: int | None = None  # last iteration number accepted (any rank)
        self._onset_job_iter: int | None = None  # first onset of the profiled episode
        self._onset_ts: float | None = None
        self._steps: StepJoiner[tuple[int, str]] = StepJoiner()  # step records' ranks joined

    # -- counters -----------------------------------------------------------------------------
    @property
    def bad(self) -> int:
        """Lines that are not a valid record."""
        return sum(v for k, v in self.dropped.items() if k in _BAD_REASONS)

    @property
    def out_of_order(self) -> int:
        return self.dropped["out_of_order"]

    def _drop(self, event: Dropped) -> list[WatchEvent]:
        """Count a skipped record (by its reason); report the first ``report_limit`` of each
        kind of event."""
        self.dropped[event.reason] += 1
        kind = event.event
        self.reported[kind] += 1
        if self.reported[kind] <= self.report_limit:
            if self.sources > 1:
                event = replace(event, file=self.source)
            return [event]
        return []

    def _bad(self, exc: RecordError, lineno: int) -> list[WatchEvent]:
        """A line that is not a valid record: ``job_iteration`` is its own iteration number
        when it could be read, ``after_job_iteration`` the last one accepted before it."""
        return self._drop(BadRecordEvent(reason=exc.reason, line=lineno,
                                         job_iteration=exc.iteration,
                                         after_job_iteration=self._last_job_iter,
                                         error=str(exc)))

    # -- input --------------------------------------------------------------------------------
    def process_line(self, text: bytes | str | None, lineno: int) -> list[WatchEvent]:
        """Handle one input line (``None``: a line too long to read); returns the events it
        produces (never raises on bad input)."""
        return self.process_lines([(lineno, text)])

    def process_lines(self, lines: Iterable[tuple[int, bytes | str | None]], *,
                      file_index: int = 0, source: str | None = None,
                      rank: int = 0) -> list[WatchEvent]:
        """Handle a batch of ``(line number, text)``; returns the events, in input order.

        With several input files (``sources`` > 1), ``file_index`` says which file the lines
        come from, ``source`` its name (events then carry ``file``) and ``rank`` the rank of
        its Megatron log lines that have no ``torchrun`` prefix."""
        self._select(file_index, source, rank)
        if self.input_format == "megatron-log":
            events = self._log_lines(lines)
        else:
            events = self._json_lines(lines)
        if self.jobs.open:
            events += self.jobs.close_due(self._rank_progress())
        return events

    def _select(self, file_index: int, source: str | None, rank: int) -> None:
        self._file_index = file_index
        if source is not None:
            self.source = source
        self._default_rank = rank

    def add_sources(self, n: int) -> None:
        """``n`` more input files, one per rank (``watch`` on a folder or glob pattern that
        files join while it runs): the job groups wait for them too."""
        self.sources += int(n)
        self.jobs.stall_rule = self.sources <= 1

    def expect_steps(self, rank: int) -> None:
        """A file of step records of ``rank`` is followed: the other ranks' step records
        wait for its records of their steps (:meth:`StepJoiner.expect`)."""
        self._steps.expect(rank)

    def unreadable(self, exc: RecordError, *, file_index: int = 0,
                   source: str | None = None) -> list[WatchEvent]:
        """A whole input that is not a record document (e.g. a file that is not Megatron's
        iteration-time JSON): one bad record at its line 1, counted, never fatal."""
        self._select(file_index, source, 0)
        self.lines += 1
        return self._drop(BadInputEvent(reason=exc.reason, line=1, error=str(exc)))

    def process_items(self, items: Iterable[tuple[int, IterationRecord | RecordError | Gap]],
                      *, file_index: int = 0, source: str | None = None) -> list[WatchEvent]:
        """Handle records already read (Megatron's iteration-time JSON): ``(position, record
        | error | gap)``; a gap counts one line per missing value.  ``file_index`` and
        ``source`` as for :meth:`process_lines` (the records carry their rank)."""
        self._select(file_index, source, 0)
        events: list[WatchEvent] = []
        for pos, item in items:
            self._line = pos
            if type(item) is IterationRecord:
                self.lines += 1
                self.records += 1
                events += self._iteration(item, pos)
            elif type(item) is Gap:
                self.lines += item.values
                events += self._gap(item, pos)
            else:
                assert isinstance(item, RecordError)
                self.lines += 1
                events += self._bad(item, pos)
        if self.jobs.open:
            events += self.jobs.close_due(self._rank_progress())
        return events

    def _log_lines(self, lines: Iterable[tuple[int, bytes | str | None]]) -> list[WatchEvent]:
        events: list[WatchEvent] = []
        source = self.source
        cap = self.max_line_bytes
        for lineno, text in lines:
            self.lines += 1
            self._line = lineno
            if text is None or len(text) > cap:
                events += self._drop(BadInputEvent(
                    reason="too_long", line=lineno, error=f"{source}:{lineno}: line longer "
                    f"than the limit of {cap:,} bytes (set STRAGGLERS_MAX_RECORD_BYTES to "
                    "raise it)"))
                continue
            try:
                rec = parse_log_line(text, source=source, line=lineno,
                                     default_rank=self._default_rank)
            except RecordError as exc:
                events += self._bad(exc, lineno)
                continue
            if rec is None:
                if text.strip():
                    self.ignored["text"] += 1  # other log lines: start-up, timers, evaluation
                continue
            self.records += 1
            events += self._iteration(rec, lineno)
        return events

    def _gap(self, gap: Gap, pos: int) -> list[WatchEvent]:
        """Missing values of a Megatron series: counted; more than one in a row is a restart
        (the rank starts a new segment and a new warm-up)."""
        self.gaps += 1
        self.gap_values += gap.values
        got = self._rank(gap.rank, pos)
        if not isinstance(got, _Rank):
            return got
        st = got
        restart = gap.values >= 2
        events: list[WatchEvent] = []
        if restart and st.last_iter is not None:
            st.last_iter, st.last_ts = None, None  # the next record starts a new segment
            events = self._new_segment(gap.rank, st, pos)
        self.reported["gap"] += 1
        if self.reported["gap"] > self.report_limit:
            return events
        return events + [GapEvent(rank=gap.rank, line=pos, job_iteration=gap.first_step,
                                  last_job_iteration=gap.last_step, values=gap.values,
                                  restart=restart)]

    def _rank_progress(self) -> list[int]:
        """The last iteration number of every rank that has iteration records; with several
        input files, none until every file has given an iteration record (a file not read yet
        holds the job groups open)."""
        if self.sources > 1 and len(self._source_progress) < self.sources:
            return []
        return [st.last_iter for st in self.ranks.values() if st.last_iter is not None]

    def _json_lines(self, lines: Iterable[tuple[int, bytes | str | None]]) -> list[WatchEvent]:
        events: list[WatchEvent] = []
        source = self.source
        cap = self.max_line_bytes
        loads = orjson.loads
        for lineno, text in lines:
            self.lines += 1
            self._line = lineno
            if text is None or len(text) > cap:
                events += self._drop(BadInputEvent(
                    reason="too_long", line=lineno, error=f"{source}:{lineno}: record longer "
                    f"than the limit of {cap:,} bytes (set STRAGGLERS_MAX_RECORD_BYTES to "
                    "raise it)"))
                continue
            try:
                obj = loads(text)
            except orjson.JSONDecodeError:
                if not text.strip():
                    continue
                try:
                    decode_json(text, f"{source}:{lineno}")
                except RecordError as exc:
                    events += self._bad(exc, lineno)
                continue
            try:
                rec = parse_record(obj, source=source, line=lineno)
            except RecordError as exc:
                if exc.iteration is None and type(obj) is dict and type(obj.get("iter")) is int:
                    exc.iteration = obj["iter"]
                events += self._bad(exc, lineno)
                continue
            self.records += 1
            if type(rec) is IterationRecord:
                known = KNOWN_FIELDS["iter"]
                if not known.issuperset(obj):
                    self._unknown(obj, known)
                events += self._iteration(rec, lineno)
            elif type(rec) is CallRecord:
                known = KNOWN_FIELDS["call"]
                if not known.issuperset(obj):
                    self._unknown(obj, known)
                events += self._call(rec, lineno)
            elif type(rec) is StepRecord:  # the rank's busy time, joined with its peers'
                known = KNOWN_FIELDS["step"]
                if not known.issuperset(obj):
                    self._unknown(obj, known)
                events += self._joined(self._steps.add(rec, lineno, (self._file_index,
                                                                     self.source)))
            else:
                assert type(rec) is MessageRecord
                self.ignored["msg"] += 1  # message records are for `stragglers detect matrix`
        return events

    def _joined(self, ready: list[tuple[IterationRecord, int, tuple[int, str]]]
                ) -> list[WatchEvent]:
        """Step records released by the joiner (:mod:`stragglers.detect.steps`), each with
        the file it came from."""
        events: list[WatchEvent] = []
        here = self._file_index, self.source
        for rec, lineno, (self._file_index, self.source) in ready:
            events += self._iteration(rec, lineno)
        self._file_index, self.source = here
        return events

    def notice(self, event: FileNotice) -> list[WatchEvent]:
        """A file event of the follower: counted and passed on."""
        self.files[event.event] += 1
        return [event]

    def _unknown(self, obj: dict[str, Any], known: frozenset[str]) -> None:
        for k in obj:
            if k not in known:
                name = k if k in self.unknown or len(self.unknown) < UNKNOWN_NAMES else "other"
                self.unknown[name] += 1

    def _rank(self, rank: int, lineno: int) -> _Rank | list[WatchEvent]:
        st = self.ranks.get(rank)
        if st is None:
            if len(self.ranks) >= self.max_ranks:
                return self._drop(SkippedEvent(
                    reason="rank_limit", line=lineno, rank=rank,
                    detail=f"{len(self.ranks):,} ranks are followed already (limit "
                    f"{self.max_ranks:,}: --max-ranks or STRAGGLERS_MAX_WATCH_RANKS)"))
            st = self.ranks[rank] = _Rank()
            st.seen = self._start_positions.get(rank, 0)
        return st

    # -- positions across a rebuild -----------------------------------------------------------
    def positions(self) -> dict[int, int]:
        """Each rank's stream position: the iteration times it has given so far (warm-up
        included), i.e. the position its next iteration time gets."""
        return {r: st.seen for r, st in self.ranks.items()}

    def resume_positions(self, positions: Mapping[int, int]) -> None:
        """Number the ranks' iteration times from ``positions`` on: a watcher rebuilt from
        the later part of a stream (its earlier records are gone) given, before those records,
        the positions the stream had reached where they begin, and after them the positions
        the stream had reached at their end (the first records of a call-record rank only
        find its period again, so a replay may give a few iteration times fewer). A rank seen
        already is moved by the difference, with the positions it holds (recent history,
        warm-up points); a rank not seen yet starts there."""
        for rank, pos in positions.items():
            st = self.ranks.get(rank)
            if st is None:
                self._start_positions[rank] = int(pos)
                continue
            d = int(pos) - st.seen
            if d == 0:
                continue
            st.seen += d
            if st.hist_pos is not None:
                st.hist_pos[st.hist_pos >= 0] += d
            if st.warm_points:
                st.warm_points = deque(
                    ((x, it + d if job is None else it, p + d, ts, job, span)
                     for x, it, p, ts, job, span in st.warm_points),
                    maxlen=st.warm_points.maxlen)

    # -- continuity ---------------------------------------------------------------------------
    def _threshold(self) -> float:
        """The detector's threshold (its rise of a slowdown), or the default where it has
        none."""
        return float(getattr(self._probe, "threshold", DEFAULT_THRESHOLD))

    @staticmethod
    def _step_fits(st: _Rank, step: int) -> bool:
        """An iteration step forward no larger than the rank's stride allows."""
        return 0 < step <= max(MIN_ITER_GAP, 8 * st.last_step)

    def _continues(self, st: _Rank, it: int | None, ts: float | None, prev_it: int | None,
                   prev_ts: float | None) -> bool:
        step = 1
        if it is not None and prev_it is not None:
            step = it - prev_it
            if not self._step_fits(st, step):
                return False
        if ts is not None and prev_ts is not None:
            dt = ts - prev_ts
            if dt < 0:
                return False
            typical = st.typical
            if typical == typical and dt > JUMP_FACTOR * typical * step:
                return False
        return True

    def _held(self, st: _Rank, rank: int, lineno: int, kind: str,
              detail: str, call: bool = False) -> list[WatchEvent]:
        """Drop the held record as an outlier or out of order."""
        if call:
            line = st.pending_call_line
            st.pending_call = None
        else:
            line = st.pending_line
            st.pending = None
        return self._drop(HeldRecordEvent(reason=kind, line=line, rank=rank, detail=detail,
                                          decided_by_line=lineno))

    def _iteration(self, rec: IterationRecord, lineno: int) -> list[WatchEvent]:
        got = self._rank(rec.rank, lineno)
        if not isinstance(got, _Rank):
            return got
        st = got
        st.uses_iter_records = True
        if st.last_iter is None:
            return self._accept_iter(rec.rank, st, rec, lineno, new_segment=True)
        if st.pending is None:
            if self._continues(st, rec.iter, rec.ts, st.last_iter, st.last_ts):
                if self._paused(st, rec):
                    st.pending, st.pending_line, st.paused = rec, lineno, True
                    return []
                return self._accept_iter(rec.rank, st, rec, lineno)
            st.pending, st.pending_line = rec, lineno
            return []
        held = st.pending
        assert isinstance(held, IterationRecord)
        events: list[WatchEvent]
        if st.paused:
            return self._after_pause(st, held, rec, lineno)
        if self._continues(st, rec.iter, rec.ts, st.last_iter, st.last_ts):
            events = self._held(st, rec.rank, lineno, *_why_dropped(
                held.iter, held.ts, st.last_iter, st.last_ts))
            if self._paused(st, rec):
                st.pending, st.pending_line, st.paused = rec, lineno, True
                return events
            return events + self._accept_iter(rec.rank, st, rec, lineno)
        if self._continues(st, rec.iter, rec.ts, held.iter, held.ts):
            reason = ("restart" if held.iter <= st.last_iter else "clock_step"
                      if self._continues(st, held.iter, None, st.last_iter, None)
                      else "iteration_jump")
            line = st.pending_line
            st.pending = None
            events = self._segment(rec.rank, st, reason, line, held.iter, held.ts)
            events += self._accept_iter(rec.rank, st, held, line, new_segment=True)
            return events + self._accept_iter(rec.rank, st, rec, lineno)
        events = self._held(st, rec.rank, lineno, *_why_dropped(
            held.iter, held.ts, st.last_iter, st.last_ts))
        st.pending, st.pending_line = rec, lineno
        return events

    def _paused(self, st: _Rank, rec: IterationRecord) -> bool:
        """Timestamps alone (no duration): wall time since the rank's latest record that the
        typical iteration time does not explain, as the idle test weighs it (less than a
        timestamp jump).  A stop and resume, or a stall: the next record tells them apart
        (:meth:`_after_pause`)."""
        if not self._segmented or rec.duration is not None or rec.ts is None:
            return False
        if st.last_ts is None or st.last_iter is None or st.typical != st.typical:
            return False
        step = rec.iter - st.last_iter
        return _idle(rec.ts - st.last_ts - step * st.typical, step, st.typical)

    def _after_pause(self, st: _Rank, held: IterationRecord, rec: IterationRecord,
                     lineno: int) -> list[WatchEvent]:
        """The record after a pause told by timestamps alone (:meth:`_paused`): when its own
        iteration time stands the detector's threshold above the typical one (the job came
        back warming up: a stop and resume), the held record opens a segment (reason
        ``idle``; its own time, with the stop in it, is not taken); else the pause was a
        stall of the running job, an iteration time as any other."""
        st.pending, st.paused = None, False
        line = st.pending_line
        thr = self._threshold()
        step = rec.iter - held.iter
        if (rec.duration is None and rec.ts is not None and held.ts is not None
                and self._step_fits(st, step)
                and rec.ts - held.ts >= (1.0 + thr) * step * st.typical):
            events = self._segment(rec.rank, st, "idle", line, held.iter, held.ts)
            events += self._accept_iter(rec.rank, st, held, line, resumed=True)
        else:
            events = self._accept_iter(rec.rank, st, held, line)
        return events + self._iteration(rec, lineno)

    def _segment(self, rank: int, st: _Rank, reason: str, line: int, it: int | None,
                 ts: float | None) -> list[WatchEvent]:
        st.segments += 1
        self.segments[reason] += 1
        ended: list[WatchEvent] = []
        if reason == "restart" or self._segmented:
            ended = self._new_segment(rank, st, line, reason)
        return [SegmentEvent(reason=reason, rank=rank, line=line, job_iteration=it,
                             previous_iteration=st.last_iter, ts=ts, previous_ts=st.last_ts,
                             file=self.source if self.sources > 1 else None), *ended]

    def _new_segment(self, rank: int, st: _Rank, line: int, reason: str = "gap"
                     ) -> list[WatchEvent]:
        """A restart, resume or gap: a new warm-up; a segmented detector forgets its levels
        (an open episode ends with a recovery noted ``segment``)."""
        risen: list[WatchEvent] = []
        if self._segmented:
            if st.seg_risen and st.seg_start is not None:
                risen = [self._risen_recovery(rank, st, line)]
            self._close_segment(st, reason)
        _rearm(st, self.warmup_iters if self._segmented else 0)
        det = st.detector
        if det is None:
            return risen
        events: list[WatchEvent] = []
        for alarm in det.new_segment():  # a detector that is not segmented keeps its state
            if not (risen and alarm.kind == "recovery"):  # the episode ends once
                events.append(self._alarm_event(rank, st, alarm, line))
            st.slow = False
        return risen + events

    def _accept_iter(self, rank: int, st: _Rank, rec: IterationRecord, lineno: int,
                     new_segment: bool = False, resumed: bool = False) -> list[WatchEvent]:
        dur = rec.duration
        events: list[WatchEvent] = []
        if not new_segment:
            step = rec.iter - st.last_iter  # type: ignore[operator]
            st.last_step = step
            if resumed:
                pass  # the first record after a stop told by timestamps: no time taken
            elif dur is None and rec.ts is not None and st.last_ts is not None:
                dur = (rec.ts - st.last_ts) / step
            elif (self._segmented and dur is not None and rec.ts is not None
                  and st.last_ts is not None
                  and _idle(rec.ts - st.last_ts - dur * step, step,
                            min(dur, st.typical) if st.typical == st.typical else dur)):
                # Wall time the iterations do not explain: the job stopped and resumed.  The
                # first iteration after a resume is often long itself (a warm-up, compiling):
                # the unexplained time is weighed against the typical iteration time where
                # that is shorter.
                events = self._segment(rank, st, "idle", lineno, rec.iter, rec.ts)
        if new_segment or not st.job_ranges:
            st.job_ranges.append([rec.iter, rec.iter])
        else:
            span = st.job_ranges[-1]
            span[0], span[1] = min(span[0], rec.iter), max(span[1], rec.iter)
        st.last_iter = rec.iter
        self._last_job_iter = rec.iter
        self._source_progress[self._file_index] = rec.iter
        if rec.ts is not None:
            st.last_ts = rec.ts
        elif new_segment:
            st.last_ts = None
        if dur is None:
            return events
        if not dur > 0:
            return events + self._drop(SkippedEvent(
                reason="zero_duration", line=lineno, rank=rank,
                detail=f"iteration {rec.iter} has the same timestamp as the one before"))
        return events + self._point(rank, st, dur, rec.ts, rec.iter, lineno)

    def _call(self, rec: CallRecord, lineno: int) -> list[WatchEvent]:
        got = self._rank(rec.rank, lineno)
        if not isinstance(got, _Rank):
            return got
        st = got
        if rec.step is not None:
            return self._stepped_call(rec, st, lineno)
        events: list[WatchEvent] = []
        last = st.last_call_ts
        if last is None:
            pass
        elif st.pending_call is None:
            if not self._continues(st, None, rec.ts, None, last):
                st.pending_call, st.pending_call_line = rec, lineno
                return []
        else:
            held = st.pending_call
            if self._continues(st, None, rec.ts, None, last):
                events = self._held(st, rec.rank, lineno, *_why_dropped(
                    None, held.ts, None, last), call=True)
            elif self._continues(st, None, rec.ts, None, held.ts):
                line = st.pending_call_line
                st.pending_call = None
                st.segments += 1
                self.segments["clock_step"] += 1
                events = [SegmentEvent(reason="clock_step", rank=rec.rank, line=line,
                                       job_iteration=None, previous_iteration=None, ts=held.ts,
                                       previous_ts=last)]
                st.ts_offset += last - held.ts
                # the job stopped and resumed (or the clock stepped): the calls of an
                # iteration may differ now (a reconfiguration); the period is found anew
                st.tracker = None
                if self._segmented:
                    events += self._new_segment(rec.rank, st, line, "clock_step")
                events += self._accept_call(rec.rank, st, held, line)
            else:
                events = self._held(st, rec.rank, lineno, *_why_dropped(
                    None, held.ts, None, last), call=True)
                st.pending_call, st.pending_call_line = rec, lineno
                return events
        return events + self._accept_call(rec.rank, st, rec, lineno)

    def _profile_call(self, rec: CallRecord) -> list[WatchEvent]:
        """A call with its group and duration joins the profile of the suspects."""
        if rec.group is not None and rec.duration is not None:
            self.profile.append(rec)
            if self._profiling and len(self.profile) >= self.profile_calls:
                return [self._suspects_event()]
        return []

    def _stepped_call(self, rec: CallRecord, st: _Rank, lineno: int) -> list[WatchEvent]:
        """A call that names its training step (the probe writes ``step``): the first call
        of each new step ends the step before it, an iteration record ``{iter: step - 1,
        ts}`` of the rank (so restarts that replay steps and reconfigurations that change
        the calls of an iteration are told by the step numbers, as for iteration records).
        A call of the step before the latest (one recorded late) or of step -1 (before
        the first step) ends nothing."""
        events = self._profile_call(rec)
        step, last = rec.step, st.call_step
        assert step is not None
        if step < 0 or (last is not None and last - 1 <= step <= last):
            return events
        st.call_step = step
        return events + self._iteration(IterationRecord(rank=rec.rank, iter=step - 1,
                                                        ts=rec.ts), lineno)

    def _accept_call(self, rank: int, st: _Rank, rec: CallRecord, lineno: int) -> list[WatchEvent]:
        st.last_call_ts = rec.ts
        events = self._profile_call(rec)
        if st.uses_iter_records:
            return events
        if st.tracker is None:
            st.tracker = PeriodTracker(**self._tracker_kwargs)
            st.encoder = CallEncoder()
        assert st.encoder is not None
        key = (rec.type, rec.size)
        if len(st.encoder) >= self.max_call_kinds and key not in st.encoder:
            return events + self._drop(SkippedEvent(
                reason="call_kinds_limit", line=lineno, rank=rank,
                detail=f"more than {self.max_call_kinds:,} distinct (type, size) call "
                "signatures (set STRAGGLERS_MAX_CALL_KINDS to raise the limit)"))
        ts = rec.ts + st.ts_offset
        its = st.tracker.feed_one(ts, st.encoder.code(key))
        if its is not None:
            for end_ts, dur, n in its:
                for _ in range(n):
                    events += self._point(rank, st, dur, end_ts, None, lineno)
        return events

    # -- detection ----------------------------------------------------------------------------
    def _close_segment(self, st: _Rank, reason: str) -> None:
        """Keep the level of the segment that ends (for :meth:`_segment_between`); the next
        one is opened by ``reason``."""
        pts = np.fromiter(st.seg_points, dtype=float)
        n = min(len(pts), st.seen - st.seg_start[0]) if st.seg_start is not None else 0
        settled = pts[max(0, len(pts) - (n - SEG_SETTLE)):] if n > SEG_SETTLE else pts[:0]
        if st.seg_start is None or settled.size < SEG_AFTER:
            st.seg_before.clear()  # no level: no segment between two known ones
        else:
            st.seg_before.append(_Segment(
                start=st.seg_start, level=float(np.median(settled)),
                late=float(np.median(settled[-SEG_BEFORE:])),
                alarmed=st.seg_alarmed, opened=st.seg_opened, risen=st.seg_risen,
                tail=np.sort(settled[-SEG_BEFORE:]), ended_slow=st.slow))
        st.seg_opened = reason
        st.seg_points.clear()
        st.seg_start = None
        st.seg_alarmed = False
        st.seg_risen = False

    def _segment_between(self, rank: int, st: _Rank, lineno: int) -> list[WatchEvent]:
        """The segment before the current one, between two resumes: a slowdown over all of
        it (an onset at its first point, a recovery at the current segment's) where its
        level stood the detector's threshold above both the segment before it and this one,
        and those two agree within half the threshold (a configuration that came back slower
        at a resume and was put back at the next).  Only where both boundaries kept the
        iteration count going (:data:`PUT_BACK_REASONS`) and no onset was raised in the
        segment.  Judged on this segment's latest ``SEG_AFTER`` points, after its warm-up
        and each ``SEG_AFTER`` points after (``SEG_TRIES`` times at most, once found)."""
        if len(st.seg_before) < 2 or st.seg_start is None:
            return []
        a, b = st.seg_before
        if (b.alarmed or b.start[1] is None or b.opened not in PUT_BACK_REASONS
                or st.seg_opened not in PUT_BACK_REASONS):
            return []
        pts = np.fromiter(st.seg_points, dtype=float)[-SEG_AFTER:]
        after = float(np.median(pts))
        thr = self._threshold()
        if not (b.level >= (1.0 + thr) * a.late and b.level >= (1.0 + thr) * after
                and abs(after / a.late - 1.0) <= 0.5 * thr):
            return []
        st.seg_before[-1] = replace(b, alarmed=True)  # said once
        declared = st.seen - 1
        onset = LevelEvent(
            kind="onset", rank=rank, iteration=b.start[0], declared_iteration=declared,
            job_iteration=b.start[1],
            declared_job_iteration=st.last_iter if st.uses_iter_records else None,
            ts=b.start[2], line=lineno, level_s=_rounded(b.level),
            previous_s=_rounded(a.late), healthy_s=_rounded(a.late),
            severity=round(1.0 - a.late / b.level, 4), note="between_segments")
        recovery = LevelEvent(
            kind="recovery", rank=rank, iteration=st.seg_start[0],
            declared_iteration=declared, job_iteration=st.seg_start[1],
            declared_job_iteration=onset.declared_job_iteration, ts=st.seg_start[2],
            line=lineno, level_s=_rounded(after), previous_s=_rounded(b.level),
            healthy_s=_rounded(a.late), severity=0.0, note="between_segments")
        return [onset, recovery]

    def _segment_rise(self, rank: int, st: _Rank, lineno: int) -> list[WatchEvent]:
        """The current segment, opened by a resume across which the iteration count went on,
        as it comes: an onset at its first point (noted ``resumed_slower``) when its level
        stands the detector's threshold above the level before the resume (the latest
        segment's latest ``SEG_BEFORE`` settled points; a segment declared slower itself is
        passed over) and has stopped falling (the rules at :data:`RISE_SKIP`: two medians
        and the trend of its points, :func:`_trend`)."""
        before = next((b for b in reversed(st.seg_before) if not b.risen), None)
        assert st.seg_start is not None
        if before is None or st.seg_start[1] is None:
            # (call records without a step number: whether the count went on is not known,
            # a restart that replays and reconfigures looks the same)
            return []
        base = before.late
        n = st.seen + 1 - st.seg_start[0]  # points of the segment, this one included
        if n < RISE_SKIP + RISE_POINTS or n < 2 * RISE_POINTS:
            return []
        pts = np.fromiter(st.seg_points, dtype=float)[-(n - RISE_SKIP):]
        thr = self._threshold()
        top = (1.0 + thr) * base
        latest = pts[-RISE_POINTS:]
        level = float(np.median(latest))
        if not (level >= top and float(np.median(pts)) >= top
                and level >= (1.0 - RISE_FALL) * float(np.median(
                    pts[-2 * RISE_POINTS:-RISE_POINTS]))):
            return []
        # a warm-up that decays slowly passes that test on noise, again and again as the
        # points come: the trend of all the segment's points since RISE_SKIP (their
        # Theil-Sen slope: a short warm-up before a slower level is a minority of their
        # pairs and does not move it) carried over the next 2 x RISE_POINTS points (the span
        # the two medians compare) must leave the level the threshold above
        if math.log(level / top) + min(_trend(np.log(pts)), 0.0) * 2 * RISE_POINTS < 0.0:
            return []
        # the median's standard error from the spread of the latest 2 x RISE_POINTS points
        # (a median absolute deviation; 1.2533 sd / sqrt(n) for a median of n)
        both = pts[-2 * RISE_POINTS:]
        sd = 1.4826 * float(np.median(np.abs(both - np.median(both))))
        conf = float(getattr(self._probe, "confidence", CONFIDENCE))  # (robust's default)
        if level - (1.0 + 0.5 * thr) * base < conf * 1.2533 * sd / math.sqrt(RISE_POINTS):
            return []
        # a height the segment before held often (modes of step times drawn afresh: the
        # median lands on another one; wide healthy noise) is no new level unless the
        # segment's points reach it more often than the binomial noise of their share
        # allows (the detector's test of a known mixture, Chernoff's bound at MIX_ARL)
        tail = before.tail
        if tail is not None and tail.size:
            mid = math.sqrt(base * level)
            k0 = tail.size - int(np.searchsorted(tail, mid))
            if k0 >= MIX_SHARE * tail.size and not share_clears(
                    float(np.mean(pts >= mid)), (k0 + 1.0) / (tail.size + 2.0), pts.size):
                return []
        st.seg_alarmed = st.seg_risen = st.slow = True
        start = st.seg_start
        return [LevelEvent(
            kind="onset", rank=rank, iteration=start[0], declared_iteration=st.seen,
            job_iteration=start[1],
            declared_job_iteration=st.last_iter if st.uses_iter_records else None,
            ts=start[2], line=lineno, level_s=_rounded(level), previous_s=_rounded(base),
            healthy_s=_rounded(base), severity=round(1.0 - base / level, 4),
            note="resumed_slower")]

    def _risen_recovery(self, rank: int, st: _Rank, line: int) -> LevelEvent:
        """The end of a segment declared slower as it came: a recovery noted ``segment`` at
        its last point (the next segment is judged on its own)."""
        base = next((b.late for b in reversed(st.seg_before) if not b.risen), math.nan)
        st.slow = False
        return LevelEvent(
            kind="recovery", rank=rank, iteration=st.seen - 1, declared_iteration=st.seen - 1,
            job_iteration=st.last_iter if st.uses_iter_records else None,
            declared_job_iteration=st.last_iter if st.uses_iter_records else None,
            ts=st.last_ts, line=line, level_s=_rounded(base), previous_s=None,
            healthy_s=_rounded(base), severity=0.0, note="segment")

    def _point(self, rank: int, st: _Rank, duration: float, end_ts: float | None,
               job_iter: int | None, lineno: int) -> list[WatchEvent]:
        events: list[WatchEvent] = []
        pos = st.seen
        if self._segmented:
            if st.seg_start is None:
                st.seg_start = (pos, job_iter, end_ts)
            st.seg_points.append(duration)
            k, r = divmod(pos - st.seg_start[0] + 1 - SEG_SETTLE, SEG_AFTER)
            if r == 0 and 1 <= k <= SEG_TRIES:
                events += self._segment_between(rank, st, lineno)
            if (not st.seg_alarmed and st.seg_opened in PUT_BACK_REASONS
                    and RISE_SKIP + RISE_POINTS <= pos - st.seg_start[0] + 1 <= RISE_UNTIL):
                events += self._segment_rise(rank, st, lineno)
        st.seen += 1
        st.recent.append(duration)  # the typical iteration time, for the continuity checks
        if st.seen % TYPICAL_POINTS == 0 or st.seen < TYPICAL_POINTS:
            st.typical = sorted(st.recent)[len(st.recent) // 2]
        it = pos if job_iter is None else job_iter
        span = max(st.last_step, 1) if job_iter is not None else 1
        warm = st.warm
        if warm is None:
            warm = st.warm = WarmUp(min_iters=self.warmup_iters)
        replay: list[_WarmPoint] = []
        if not warm.done:
            if not warm.feed(duration, it):
                self.warmup_points += 1
                if self._segmented:
                    if st.warm_points is None:
                        st.warm_points = deque(maxlen=WARM_KEEP)
                    st.warm_points.append((duration, it, pos, end_ts, job_iter, span))
                return events
            self.warmup_ends[rank] = it
            replay = self._warm_replay(st, duration)
        det = st.detector
        if det is None:
            det = st.detector = self._factory()
            st.hist_iter = np.full(HISTORY, -1, dtype=np.int64)
            st.hist_ts = np.full(HISTORY, math.nan)
            st.hist_pos = np.full(HISTORY, -1, dtype=np.int64)
        for x, w_it, w_pos, w_ts, w_job, w_span in replay:
            events += self._observe(rank, st, det, x, w_it, w_pos, w_ts, w_job, w_span,
                                    lineno, warm=True)
        return events + self._observe(rank, st, det, duration, it, pos, end_ts, job_iter, span,
                                      lineno)

    def _warm_replay(self, st: _Rank, last: float) -> list[_WarmPoint]:
        """At the end of a warm-up: the warm-up points a segmented detector is given after
        all.  The level the warm-up settled on is its first healthy level (the settle
        test's latest window: its points before this one); when a slowdown began inside
        the warm-up (``warm_start``), from the level the warm-up had settled on before."""
        points, st.warm_points = list(st.warm_points or ()), None
        if not points:
            return []
        start = getattr(st.detector or self._probe, "warm_start", None)
        k = None if start is None else start([p[0] for p in points] + [last])
        if k is None:
            k = max(0, len(points) - (st.warm.settle_points - 1 if st.warm else 0))
        return points[k:]

    def _observe(self, rank: int, st: _Rank, det: Detector, duration: float, it: int,
                 pos: int, end_ts: float | None, job_iter: int | None, span: int,
                 lineno: int, warm: bool = False) -> list[WatchEvent]:
        """One iteration time to the detector (``warm``: a warm-up point given after the
        warm-up ended; it was counted as warm-up, not as a spike)."""
        events: list[WatchEvent] = []
        k = st.points % HISTORY
        st.hist_pos[k] = pos  # type: ignore[index]
        st.hist_iter[k] = -1 if job_iter is None else job_iter  # type: ignore[index]
        st.hist_ts[k] = math.nan if end_ts is None else end_ts  # type: ignore[index]
        st.points += 1
        alarms = det.observe(duration, it, span)
        # While the detector weighs a candidate level, elevated points are not yet spikes.
        hold = det.candidate_open
        if not warm and st.spikes.add(duration, st.typical, span, it, self.spike_report_points,
                                      hold=hold) and (
                             st.spikes.points >= self.spike_report_points):
            events.append(st.spikes.report(rank, lineno))
        if not alarms:
            return events
        st.spikes.discard_pending()  # the elevated points were a level, not spikes
        if not st.slow and any(a.kind == "onset" and not a.note for a in alarms):
            back = self._returned(rank, st, det, alarms, lineno)
            if back is not None:
                return events + [back]
        for alarm in alarms:
            if alarm.kind != "drift" and 0.0 < alarm.level_after < math.inf:
                st.typical = alarm.level_after  # the new level is the typical time now
            ev = self._alarm_event(rank, st, alarm, lineno)
            events.append(ev)
            if ev.job_iteration is not None:
                self.jobs.add(ev, max(st.last_step, 1))
            if alarm.kind in ("onset", "flapping"):
                st.slow = True
                st.seg_alarmed = True
                if not self._profiling:
                    self._profiling = True
                    self._onset_ranks = []
                    self._onset_job_iter = ev.job_iteration
                    self._onset_ts = ev.ts
                    self.profile.clear()
                self._onset_ranks.append(rank)
            elif alarm.kind == "recovery":
                st.slow = False
        return events

    def _returned(self, rank: int, st: _Rank, det: Detector, alarms: list[Alarm],
                  lineno: int) -> LevelEvent | None:
        """The main view's onset in a segment opened by a resume across which the count went
        on, within its first ``SEG_BEFORE`` points, to a level below the midpoint between the
        level before the resume (the latest of the segments kept that was not declared
        slower and did not end slow) and a rise of the threshold above it: the level the run
        kept, found again.  The detector forgets its levels (as at a resume) and learns this
        one after a new warm-up; an event ``drift`` noted ``returned`` says so.  None where
        this is not such an onset."""
        if (not self._segmented or st.seg_start is None or st.seg_opened not in PUT_BACK_REASONS
                or st.seen - st.seg_start[0] > SEG_BEFORE):
            return None
        before = next((b for b in reversed(st.seg_before) if not (b.risen or b.ended_slow)),
                      None)
        onset = next(a for a in alarms if a.kind == "onset" and not a.note)
        if (before is None or not 0.0 < onset.level_after
                <= math.sqrt(1.0 + self._threshold()) * before.late):
            return None
        det.new_segment()  # no episode was said: its recovery is not either
        _rearm(st, 0)
        st.typical = onset.level_after
        return replace(self._alarm_event(rank, st, onset, lineno), kind="drift",
                       healthy_s=_rounded(before.late), severity=0.0, note="returned")

    def _alarm_event(self, rank: int, st: _Rank, a: Alarm, lineno: int) -> LevelEvent:
        back = st.points - 1 - a.index
        ts: float | None = None
        job_iter: int | None = None
        position = a.index + (st.seen - st.points)  # warm-up points before it (estimate)
        declared = a.declared_at + (st.seen - st.points)
        if 0 <= back < HISTORY and st.hist_ts is not None and st.hist_iter is not None:
            k = a.index % HISTORY
            position = int(st.hist_pos[k])  # type: ignore[index]
            t = float(st.hist_ts[k])
            ts = None if math.isnan(t) else t
            j = int(st.hist_iter[k])
            job_iter = None if j < 0 else j
        elif a.iteration is not None and st.uses_iter_records:
            job_iter = a.iteration  # older than the history: the detector's own number
        return LevelEvent(
            kind=a.kind, rank=rank, iteration=position, declared_iteration=declared,
            job_iteration=job_iter,
            declared_job_iteration=st.last_iter if st.uses_iter_records else None,
            ts=ts, line=lineno, level_s=_rounded(a.level_after),
            previous_s=_rounded(a.level_before), healthy_s=_rounded(a.healthy_level),
            severity=round(a.severity, 4), slow_fraction=a.slow_fraction, note=a.note,
            since_job_iteration=a.since, file=self.source if self.sources > 1 else None)

    def suspects(self) -> list[GroupFinding]:
        """Groups flagged by the recent call profile (empty without group profiles)."""
        if not self.profile:
            return []
        found = narrow_down_records(self.profile)
        return [f for f in found if f.verdict in ("slow_transfer", "waiting_for_peer")]

    def _suspects_event(self) -> SuspectsEvent:
        self._profiling = False
        return SuspectsEvent(onset_ranks=tuple(sorted(set(self._onset_ranks))),
                             job_iteration=self._onset_job_iter, ts=self._onset_ts,
                             line=self._line, profiled_calls=len(self.profile),
                             groups=tuple(self.suspects()))

    def finish(self) -> list[WatchEvent]:
        """Events due at the end of the input: held records, pending suspects, the summary."""
        events: list[WatchEvent] = self._joined(self._steps.flush())
        events += self.jobs.close_all(len(self._rank_progress()))
        for rank, st in self.ranks.items():
            if st.spikes.spikes_since or st.spikes.has_pending:
                events.append(st.spikes.report(rank, self._line, final=True))
        for rank, st in self.ranks.items():
            why = ("held back as a discontinuity; the input ended before a following record of "
                   "the rank confirmed it")
            if st.pending is not None and st.paused:  # a pause with nothing after it
                held, st.pending, st.paused = st.pending, None, False
                events += self._accept_iter(rank, st, held, st.pending_line)
            elif st.pending is not None:
                events += self._held(st, rank, self._line, "unconfirmed", why)
            if st.pending_call is not None:
                events += self._held(st, rank, self._line, "unconfirmed", why, call=True)
        if self._profiling and self.profile:
            events.append(self._suspects_event())
        return [*events, self.summary()]

    def summary(self) -> SummaryEvent:
        return SummaryEvent(
            lines=self.lines, records=self.records, bad=self.bad,
            out_of_order=self.out_of_order, dropped=dict(sorted(self.dropped.items())),
            ignored=dict(sorted(self.ignored.items())),
            unknown_fields=dict(sorted(self.unknown.items())),
            segments=dict(sorted(self.segments.items())),
            files=dict(sorted(self.files.items())), gap_runs=self.gaps,
            gap_values=self.gap_values, warmup_points=self.warmup_points,
            warmup_ends=dict(sorted(self.warmup_ends.items())),
            spikes=_spike_totals(self.ranks.values()),
            job_events=dict(sorted(self.jobs.emitted.items())), inputs=self.sources,
            ranks=len(self.ranks),
            iterations={r: st.seen for r, st in sorted(self.ranks.items())},
            job_iterations={r: _covered(st.job_ranges) for r, st in sorted(self.ranks.items())
                            if st.job_ranges},
            slow_ranks=tuple(sorted(r for r, st in self.ranks.items() if st.slow)))


def _trend(y: np.ndarray) -> float:
    """The Theil-Sen slope of ``y`` on its index: the median of the slopes between every two
    of its points (a line that half the pairs climb more steeply than and half less; a
    checkpoint stall or two among them do not move it, a decay that holds a third of the
    points or more does). ``scipy.stats.theilslopes`` gives the same slope with confidence
    limits this does not need, 4-9 times slower on 20-100 points (called at each point of a
    resumed segment's first ``RISE_UNTIL``)."""
    i, j = np.triu_indices(y.size, 1)
    return float(np.median((y[j] - y[i]) / (j - i)))


def _rearm(st: _Rank, warmup: int) -> None:
    """A new warm-up of ``warmup`` iterations for the rank (0: the detector's own)."""
    if st.warm is not None:
        st.warm.rearm(warmup)
        st.warm_points = None


def _idle(unexplained: float, step: int, unit: float) -> bool:
    """Wall time the iterations do not explain (``unexplained`` seconds over ``step``
    iterations of ``unit`` seconds each) long enough to be a stop and resume: more than
    :data:`IDLE_S` and :data:`IDLE_FACTOR` iterations."""
    return unexplained > max(IDLE_S, IDLE_FACTOR * step * unit)


def _covered(ranges: list[list[int]]) -> int:
    """Job iterations within the ``[first, last]`` ranges of a rank's segments, each once
    (a restart that replays iterations covers them again)."""
    total, end = 0, None
    for lo, hi in sorted(ranges):
        if end is not None and lo <= end:
            lo = end + 1
        if hi >= lo:
            total += hi - lo + 1
        end = hi if end is None else max(end, hi)
    return total


def _rounded(x: float) -> float | None:
    return round(x, 6) if x == x else None


def _spike_totals(ranks: Iterable[_Rank]) -> SpikeTotals:
    spikes = clusters = 0
    seconds = iters = 0.0
    for st in ranks:
        spikes += st.spikes.total_spikes
        clusters += st.spikes.total_clusters
        seconds += st.spikes.total_seconds
        iters += st.spikes.total_iterations
    return SpikeTotals(spikes=spikes, clusters=clusters, seconds_lost=round(seconds, 3),
                       iterations_lost=round(iters, 3))


_BAD_REASONS = frozenset({"not_json", "not_utf8", "bad_field", "not_object", "unknown_kind",
                          "too_long"})


def _why_dropped(it: int | None, ts: float | None, prev_it: int | None,
                 prev_ts: float | None) -> tuple[str, str]:
    """Reason and detail for a held record that the next record did not confirm."""
    if it is not None and prev_it is not None and it <= prev_it:
        return "out_of_order", f"iteration {it} does not follow iteration {prev_it}"
    if ts is not None and prev_ts is not None and ts < prev_ts:
        return "out_of_order", f"ts {ts} is before the previous record's ({prev_ts})"
    if it is not None and prev_it is not None and ts is not None and prev_ts is not None:
        return "outlier", (f"iteration {it} (ts {ts}) jumps ahead of iteration {prev_it} "
                           f"(ts {prev_ts}) and the next record does not follow it")
    if it is not None and prev_it is not None:
        return "outlier", (f"iteration {it} jumps ahead of iteration {prev_it} and the next "
                           "record does not follow it")
    return "outlier", (f"ts {ts} jumps ahead of the previous record's ({prev_ts}) and the "
                       "next record does not follow it")
