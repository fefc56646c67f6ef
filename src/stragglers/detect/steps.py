"""Step records of several ranks joined step by step: each rank's busy time less what slowed
(or sped up) every rank alike in the same step, the series ``watch`` detects a straggler on.

Under data parallelism every rank does the same work in a step, and every rank's step takes
as long as the slowest one's (they synchronise): the step time cannot tell who is slow, the
busy time can (:class:`~stragglers.logs.records.StepRecord`: the step less the rank's wait
for the others). But the busy time of every rank also moves with what changes the job as a
whole: a shared machine's load, the data, a new phase of training. Those are not
stragglers. So for each step ``k`` the joiner takes the middle of the ranks' busy times,
the interval ``[lo(k), hi(k)]`` between the lower and the upper median (with two ranks the
faster and the slower one; with an odd number both are the median), and the job's
reference pace ``P``: the median of the ``lo`` of its steps from the :data:`REF_SKIP`-th on
(the first ones are the start-up; ``lo``, as a slow rank, or fewer than half of them, never
moves it), fixed after :data:`REF_POINTS` of them. The job's common pace in step ``k`` is
``c(k)``, ``P`` moved into that interval (``P`` itself when the ranks straddle it, ``lo``
when every rank of the lower half is slower than ``P``, ``hi`` when every rank of the upper
half is faster), and the detector gets

    x_r(k) = S x max(busy_r(k), c(k)) / c(k)

seconds, ``S`` the value ``P`` had after :data:`SCALE_POINTS` steps, kept from then on: one
scale for the whole series (a scale that moved with ``P`` while ``P`` is still being taken
would be a rise of every rank where the job slowed as a whole). So a rank's busy time goes
in relative to ``P`` while the ranks straddle the job's pace, and less the job's common
change otherwise: a rank is slower only by being slower than the others. A slow rank, or
fewer than half of them, never moves ``lo``; a rank that gets faster does not make the
others look slow (as a comparison with the fastest rank alone would). A rank faster than
the common pace is taken at that pace (the ``max``): being faster is no sign of a
straggler, and a rank that was faster than the others for a while (a shared machine's load
on its peers) and comes back to their pace has not slowed down; so a rank that kept its own
time while more than half of the others slowed does not look faster either. No estimate of
each rank's own level is needed. The records of the first steps are held until ``S`` has a
value (:data:`REF_SKIP` + :data:`SCALE_POINTS` steps that two ranks or more have), so the
start-up goes to the detector in the scale of the rest of the series, less the job's common
slowdown like any other step: let go raw, the start-up's busy times (a loaded machine, a
first compilation) were a level change at that step. For a step that only one rank has,
and for records let go before ``S`` has a value (the end of the input, a silent peer),
``x`` is the busy time.

Records are held until every rank seen so far, and every rank announced (:meth:`expect`:
``watch`` reads the rank of each file of step records it follows before reading on), has a
record of their step, so a rank's values are taken against all of its peers even when files
are read one block at a time; a rank more than :data:`HOLD_STEPS` records ahead of a silent
peer, or more than :data:`MAX_HELD` records held in all, lets its oldest go with the peers
there are, and the end of the input lets everything go. Each rank's records leave in the
order they came (the watcher's continuity checks see them as written).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from stragglers.logs.records import IterationRecord, StepRecord

__all__ = ["HOLD_STEPS", "MAX_HELD", "REF_POINTS", "REF_SKIP", "SCALE_POINTS", "StepJoiner"]

#: Records of one rank held at most while its peers have no record of their steps.
HOLD_STEPS = 16_384
#: Records held at most in all.
MAX_HELD = 262_144
#: The job's reference pace: the median of the lower medians of the steps that two ranks or
#: more have, from the REF_SKIP-th on (in the order they are taken), fixed after REF_POINTS.
REF_SKIP = 8
REF_POINTS = 32
#: The scale of the detector's series: ``P`` as it is after SCALE_POINTS, kept from then on
#: (a scale that moved with ``P`` while it is taken would be a rise of every rank where the
#: job slowed as a whole).
SCALE_POINTS = 4

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Held(Generic[T]):
    rec: StepRecord
    line: int
    tag: T


class StepJoiner(Generic[T]):
    """Joins the step records of several ranks (module docstring). :meth:`add` takes a
    record with its input line and a caller's ``tag`` (which file it came from) and returns
    the records that can go on, as iteration records whose duration is ``x`` (the busy time
    less the job's common slowdown), each with its line and tag."""

    def __init__(self) -> None:
        self._queues: dict[int, deque[_Held[T]]] = {}  # per rank, in arrival order
        self._heads: dict[int, set[int]] = {}  # step -> ranks whose oldest held record it is
        # step -> rank -> busy of the recent steps (held or gone: a late peer's record is
        # taken against them), the records of each step still held, its pace once taken
        self._steps: dict[int, dict[int, float]] = {}
        self._left: dict[int, int] = {}
        self._paces: dict[int, tuple[float, float]] = {}
        self._values = 0  # busy values kept in _steps
        self._ranks: set[int] = set()  # ranks seen or announced: a step is complete with all
        self._early: list[float] = []  # lower medians of the steps taken, up to the reference
        self.reference: float | None = None  # P, seconds (until fixed: the latest median)
        self.scale: float | None = None  # S, seconds: P after SCALE_POINTS, then kept
        self.fixed = False
        self.held = 0

    def expect(self, rank: int) -> None:
        """Rank ``rank`` has step records to come (a file of them not read yet): records of
        the others wait for its records of their steps."""
        self._ranks.add(rank)

    def add(self, rec: StepRecord, line: int, tag: T) -> list[tuple[IterationRecord, int, T]]:
        out: list[tuple[IterationRecord, int, T]] = []
        q = self._queues.setdefault(rec.rank, deque())
        self._ranks.add(rec.rank)
        peers = self._steps.get(rec.step)
        if peers is not None and rec.rank in peers:
            if self._left.get(rec.step, 0):
                while q:  # a step repeated while the first is held: the held ones go first
                    out.append(self._pop(rec.rank))
            self._forget(rec.step)  # a step seen again (a restart): its old values go
        peers = self._steps.setdefault(rec.step, {})
        self._values += rec.rank not in peers
        peers[rec.rank] = rec.busy
        self._left[rec.step] = self._left.get(rec.step, 0) + 1
        q.append(_Held(rec, line, tag))
        self.held += 1
        if len(q) == 1:
            self._heads.setdefault(rec.step, set()).add(rec.rank)
        if len(peers) >= len(self._ranks):
            out += self._advance(rec.step)
        while len(q) > HOLD_STEPS:
            out.append(self._pop(rec.rank))
        while self.held > MAX_HELD:
            out.append(self._pop(max(self._queues, key=lambda r: len(self._queues[r]))))
        self._prune()
        return out

    def flush(self) -> list[tuple[IterationRecord, int, T]]:
        """Everything held (the end of the input)."""
        out: list[tuple[IterationRecord, int, T]] = []
        for rank, q in self._queues.items():
            while q:
                out.append(self._pop(rank))
        return out

    def _advance(self, step: int) -> list[tuple[IterationRecord, int, T]]:
        """``step`` has a record of every rank: its pace is taken, and the ranks waiting
        there go on, each until its oldest held record is of a step some rank has not
        reached. Until the scale ``S`` is set (with two ranks or more), nothing goes on:
        the first steps go, in the scale of the rest of the series, once it is."""
        out: list[tuple[IterationRecord, int, T]] = []
        n = len(self._ranks)
        had_scale = self.scale is not None
        self._pace(step)
        if self.scale is None and n >= 2:
            return out
        waiting = self._heads.get(step, ()) if had_scale or n < 2 else list(self._queues)
        for rank in sorted(waiting):
            q = self._queues[rank]
            while q and len(self._steps[q[0].rec.step]) >= n:
                out.append(self._pop(rank))
        return out

    def _pop(self, rank: int) -> tuple[IterationRecord, int, T]:
        """Let the oldest held record of ``rank`` go."""
        q = self._queues[rank]
        item = q.popleft()
        step = item.rec.step
        waiting = self._heads[step]
        waiting.discard(rank)
        if not waiting:
            del self._heads[step]
        if q:
            self._heads.setdefault(q[0].rec.step, set()).add(rank)
        self.held -= 1
        self._left[step] -= 1
        return self._release(item)

    def _forget(self, step: int) -> None:
        if not self._left.get(step, 0):
            self._values -= len(self._steps.pop(step, {}))
            self._left.pop(step, None)
            self._paces.pop(step, None)

    def _prune(self) -> None:
        """Keep the values of at most :data:`MAX_HELD` recent steps' records (the oldest
        steps with nothing held go first)."""
        if self._values <= MAX_HELD:
            return
        for step in list(self._steps):
            if self._values <= MAX_HELD // 2:
                break
            self._forget(step)

    def _pace(self, step: int) -> tuple[float, float] | None:
        """``(lo, hi)``, the lower and upper median of the busy times of the ranks with a
        record of ``step`` (None with fewer than two: taken again for a later record), fixed
        the first time it is taken."""
        pace = self._paces.get(step)
        if pace is not None:
            return pace
        vals = sorted(self._steps[step].values())
        n = len(vals)
        if n < 2:
            return None
        pace = self._paces[step] = (vals[(n - 1) // 2], vals[n // 2])
        if not self.fixed:
            self._early.append(pace[0])
            if len(self._early) > REF_SKIP:
                mid = sorted(self._early[REF_SKIP:])
                m = len(mid)
                self.reference = 0.5 * (mid[(m - 1) // 2] + mid[m // 2])
                if m >= SCALE_POINTS and self.scale is None:
                    self.scale = self.reference
                if m >= REF_POINTS:
                    self.fixed = True
                    self._early = []
        return pace

    def _release(self, item: _Held[T]) -> tuple[IterationRecord, int, T]:
        rec = item.rec
        pace = self._pace(rec.step)
        busy = rec.busy
        ref = self.reference
        if pace is not None and ref is not None and self.scale is not None:
            common = min(max(ref, pace[0]), pace[1])
            busy = self.scale * max(busy, common) / common
        return (IterationRecord(rank=rec.rank, iter=rec.step, ts=rec.ts, duration=busy),
                item.line, item.tag)
