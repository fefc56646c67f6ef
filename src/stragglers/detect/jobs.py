"""Job-level events: one event when several ranks change at once.

One slow GPU slows every rank of a data-parallel job, so ``watch`` sees the same onset on
many ranks within a few iterations.  :class:`JobGrouper` collects the per-rank events
(``onset``, ``change``, ``recovery``, ``speedup``) of the same kind whose job iteration
numbers lie within ``window_points`` points (x the rank's iteration step) of the first one,
and emits one ``job`` event naming the ranks once every followed rank has gone
``close_points`` points past the group's last event (each had the time to declare it too), or
one rank has gone four times that far (a rank that stopped logging does not hold it back), or
at the end of the input.  A group of one rank gives no ``job`` event.  Without the stall rule
(``stall_rule=False``: ``watch`` on several files, read block by block, where one file can be
read far ahead of the others) only the slowest rank closes a group, or the end of the input.
"""

from __future__ import annotations

from collections import Counter

from stragglers.detect.events import JobEvent, LevelEvent

__all__ = ["JobGrouper"]


class _Group:
    __slots__ = ("kind", "first", "last", "window", "close_after", "events")

    def __init__(self, kind: str, first: int, window: int, close_after: int) -> None:
        self.kind = kind
        self.first = first
        self.last = first
        self.window = window
        self.close_after = close_after
        self.events: dict[int, LevelEvent] = {}  # rank -> its event (job iteration known)


def _job_iteration(event: LevelEvent) -> int:
    if event.job_iteration is None:
        raise ValueError("a job-level group needs events with a job iteration")
    return event.job_iteration


class JobGrouper:
    """Groups per-rank change events into job-level ``job`` events."""

    def __init__(self, window_points: int = 16, close_points: int = 64,
                 stall_rule: bool = True) -> None:
        self.window_points = window_points
        self.close_points = close_points
        self.stall_rule = stall_rule  # one rank far ahead closes a group (see the docstring)
        self.open: list[_Group] = []
        self.emitted: Counter[str] = Counter()

    def add(self, event: LevelEvent, step: int) -> None:
        """A per-rank event whose ``job_iteration`` is known; ``step``: the rank's iteration
        step."""
        kind = event.kind
        it = _job_iteration(event)
        for g in self.open:
            if g.kind == kind and abs(it - g.first) <= g.window:
                g.events.setdefault(event.rank, event)
                g.last = max(g.last, it)
                return
        g = _Group(kind, it, self.window_points * step, self.close_points * step)
        g.events[event.rank] = event
        self.open.append(g)

    def close_due(self, progress: list[int]) -> list[JobEvent]:
        """Close the groups that every rank (``progress``: last iteration numbers) is past."""
        if not progress or not self.open:
            return []
        low, high = min(progress), max(progress)
        out: list[JobEvent] = []
        keep = []
        for g in self.open:
            if low > g.last + g.close_after or (
                    self.stall_rule and high > g.last + 4 * g.close_after):
                out += self._emit(g, len(progress))
            else:
                keep.append(g)
        self.open = keep
        return out

    def close_all(self, followed: int | None = None) -> list[JobEvent]:
        """Close every group (end of the input)."""
        out: list[JobEvent] = []
        for g in self.open:
            out += self._emit(g, followed)
        self.open = []
        return out

    def _emit(self, g: _Group, followed: int | None) -> list[JobEvent]:
        if len(g.events) < 2:
            return []
        evs = list(g.events.values())
        its = [_job_iteration(e) for e in evs]
        stamps = [e.ts for e in evs if e.ts is not None]
        self.emitted[g.kind] += 1
        return [JobEvent(kind=g.kind, ranks=tuple(sorted(g.events)), job_iteration=min(its),
                         last_job_iteration=max(its), ts=min(stamps) if stamps else None,
                         severity=max(e.severity for e in evs), ranks_followed=followed)]
