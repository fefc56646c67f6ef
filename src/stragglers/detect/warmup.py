"""Warm-up of a training job: the first iterations, until the iteration time settles.

The first iterations of a job (and of a restart) are slow for reasons that are not a
fail-slow: the first iteration compiles and allocates (4-7x the steady time in the Megatron
runs of ``../shared/real/megatron-iter``), the next ones tune kernels and fill caches, and
the level can drift for a while.  They must not set the healthy level, or everything after
them looks like a speed-up, or a slow warm-up looks like the job's normal speed.

:class:`WarmUp` decides point by point whether a rank is still warming up: it is until both

* the job's iteration number is at least ``min_iters`` past the first one seen (the
  configurable minimum; ``watch --warmup``), and
* the level has settled: the median of the last ``settle_points`` iteration times is within
  ``tolerance`` (relative) of the median of the ``settle_points`` before them.

Points of the warm-up are not given to the detector; they are counted.  :meth:`rearm` starts
a new warm-up after a restart (by default without the minimum: only until the level settles).
"""

from __future__ import annotations

from collections import deque

__all__ = ["DEFAULT_MIN_ITERS", "DEFAULT_WARMUP_ITERS", "WarmUp"]

#: The default minimum warm-up in job iterations (``watch --warmup``).  Chosen on the tuned
#: runs (``stragglers.evaluation.realdata.TUNED``): with a minimum of 50 the level of
#: ``dsv3-h100`` passes the settle test at iteration 55 and then rises 16 % (iterations
#: 100-155) and settles back by 300, a false onset; 100 and more raise none; checked on
#: the held-out runs (none at 50 or more).
DEFAULT_MIN_ITERS = 100
#: The default minimum warm-up of the default detector (``robust``): none, the warm-up ends
#: when the level settles (at least ``2 x settle_points`` points); docs/detection.md.
DEFAULT_WARMUP_ITERS = 0


class WarmUp:
    """Streaming warm-up detector of one rank (see the module docstring)."""

    __slots__ = ("min_iters", "settle_points", "tolerance", "_first", "_recent", "done",
                 "points", "end_iter")

    def __init__(self, min_iters: int = DEFAULT_MIN_ITERS, settle_points: int = 5,
                 tolerance: float = 0.05) -> None:
        if min_iters < 0 or settle_points < 1 or not 0.0 < tolerance < 1.0:
            raise ValueError("min_iters >= 0, settle_points >= 1 and 0 < tolerance < 1")
        self.min_iters = int(min_iters)
        self.settle_points = int(settle_points)
        self.tolerance = float(tolerance)
        self._recent: deque[float] = deque(maxlen=2 * self.settle_points)
        self._first: int | None = None
        self.done = False
        self.points = 0  # warm-up points seen (all warm-ups of the rank)
        self.end_iter: int | None = None  # iteration number of the first point after it

    def rearm(self, min_iters: int = 0) -> None:
        """A new warm-up starts with the next point (the job restarted); it lasts until the
        level settles and at least ``min_iters`` iterations (default: no minimum, a restart
        is shorter than a job start: no data loader or compilation warm-up)."""
        self.min_iters = int(min_iters)
        self._first = None
        self._recent.clear()
        self.done = False

    def feed(self, x: float, job_iter: int) -> bool:
        """True when the point ``x`` (iteration ``job_iter``) comes after the warm-up."""
        if self.done:
            return True
        if self._first is None:
            self._first = job_iter
        rec = self._recent
        rec.append(x)
        n = self.settle_points
        if job_iter - self._first >= self.min_iters and len(rec) == 2 * n:
            vals = list(rec)
            before = sorted(vals[:n])[n // 2]
            after = sorted(vals[n:])[n // 2]
            if abs(after - before) <= self.tolerance * before:
                self.done = True
                self.end_iter = job_iter
                return True
        self.points += 1
        return False
