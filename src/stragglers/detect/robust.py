"""The default fail-slow detector of ``stragglers watch``: robust levels on log time.

The model, its nuisances and how an onset is confirmed: one page, ``docs/detection.md``.
Iterations and seconds come from the records; levels are logs of seconds per iteration.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from stragglers.detect.detector import Alarm, median_sorted
from stragglers.detect.warmup import DEFAULT_WARMUP_ITERS

__all__ = ["RobustLevelDetector", "RobustSettings"]

SPIKE_POINTS = (256, 32)  # healthy points behind the spike rates (long, short window)
SPIKE_PRIOR = (0.5, 10.0)  # Beta prior of both rates (pseudo-counts: beyond, not beyond)
NOISE_POINTS = 64  # healthy points behind the noise scale and its autocorrelation
WARM_POINTS = 5  # values behind a level of the warm-up (the watcher's settle test)
SHARP_POINTS = 3  # values where a new level began that tell a step from a ramp
FLAP_SHARE = 0.25  # flapping: slow this share of the time since the first onset, or more
FLAP_GAP = 3.0  # a healthy gap this many times its longest one ends a flapping
MODE_RUNS = 6  # returned runs at one height that make it a healthy mode
MODE_WINDOW = 1000  # ... within this many iterations
MODE_MARGIN = 1.5  # a level at a mode's height must outlast its longest run this many times
MODE_TAIL = 0.001  # ... and than all but this share of geometric dwells of their mean
MODE_BAND = 0.5  # a run within this many midpoints (half thresholds) of a level is at its height
MODE_LEVELS = 2  # ... or this many runs within a midpoint that each outlasted a stall
MODE_GAP = 2  # points back below the midpoint that end a run
MODE_HISTORY = 512  # latest points whose runs are found again when the healthy level falls
MIX_POINTS = 64  # healthy points before a candidate stretch behind the mixture's weights
MIX_SHARE = 0.1  # ... at least this share of them beyond its midpoint: a mode, not spikes
#: standard errors of a median by which a new level clears the midpoint (``confidence``)
CONFIDENCE = 2.5
MIX_DRAWN = 0.2  # ... of modes drawn afresh each point: beyond the midpoint again after a
#                  point beyond it at most this much more often than the share beyond it
MIX_ARL = 1e6  # a stretch that mixes known modes: its share beyond their midpoint clears
#               the healthy share at a chance of 1 / MIX_ARL (Chernoff) to be an onset
FOLD_POINTS = 32  # latest points behind the short level of a periodic series (lower quartile)
FOLD_GAPS = 16  # gaps between long points behind its period
FOLD_LOCK = 12  # a period: this many of those gaps equal (at least 2 points) ...
FOLD_UNLOCK = 8  # ... and no more period when fewer than this are
FOLD_HISTORY = 512  # latest points kept to fold the gaps that made a period
FOLD_BLOCK = 8  # a folded value: the mean over whole periods of at least this many points
FOLD_MIN_POINTS = 4  # a level of the folded view: at least this many blocks (clusters of
#                      congested boundaries raise a few blocks in a row)
LOSS_CAP = 8.0  # the view on the mean: one point's excess (x / h - 1) counted at most
LOSS_ITERS = 1.0  # an onset: at least this many stall_iters of iterations lost ...
LOSS_RUNS = 4  # ... made of this many runs of long points or more
LOSS_Z = 15.0  # ... and LOSS_Z x the excess' long-run variance / drift (healthy clumps)
LOSS_ARL = 3e5  # the count of runs: a false onset once in this many healthy points (a series
#                 of 3,000 at the FPR of 1 %)
LOSS_BATCH = 32  # points per batch mean behind the long-run variance
LOSS_BATCHES = 8  # batches before the sum is judged
LOSS_BASE = 1024  # healthy points behind the healthy excess and its variance
LOSS_WINDOW = 64  # points behind a recovery's mean excess
LOSS_STARTS = 256  # run starts kept to place an onset
LOSS_PLACE = 3.0  # an onset: the latest run start whose log-likelihood of a rise of the chance
#                  of a run since is within this of the best (a likelihood ratio of e^3 = 20)
DRIFT_ONSET = 2  # thresholds of rise of the healthy level above its lowest since the
#                 start-up that make an onset however slow the rise (one: a schedule's drift)
RATE_LEVELS = (1.5, 2.0, 3.0, 5.0)  # the count of long points: points this many times the
#                  healthy level or more, beyond the healthy body (each level its own count)

Sink = Callable[[float, int], list[Alarm]]


def _median(v: list[float]) -> float:
    return median_sorted(sorted(v))


def _mad(v: deque[float]) -> float:
    """``1.4826 x`` the median absolute deviation from the median."""
    m = _median(list(v))
    return 1.4826 * _median([abs(x - m) for x in v])



def share_clears(q: float, p0: float, n: int) -> bool:
    """A share ``q`` of ``n`` points beyond a height that a share ``p0`` of the healthy ones
    reached clears it at a chance of ``1 / MIX_ARL`` (Chernoff: ``n KL(q || p0)``)."""
    if q <= p0:
        return False
    kl = q * math.log(q / p0) + ((1.0 - q) * math.log((1.0 - q) / (1.0 - p0))
                                 if q < 1.0 else 0.0)
    return n * kl >= math.log(MIX_ARL)


class _SpikeTally:
    """Over the latest ``size`` healthy points: how many lay beyond the midpoint, how many
    followed one that did, and both (a first-order Markov chain of spikes)."""

    __slots__ = ("codes", "counts")

    def __init__(self, size: int) -> None:
        self.codes: deque[int] = deque(maxlen=size)  # 0-3: bit 0 beyond, bit 1 the one before
        self.counts = [0, 0, 0, 0]

    def add(self, code: int) -> None:
        if len(self.codes) == self.codes.maxlen:
            self.counts[self.codes[0]] -= 1
        self.codes.append(code)
        self.counts[code] += 1

    def rates(self) -> tuple[float, float]:
        """``p`` = P(beyond), ``q`` = P(beyond | the point before beyond)."""
        (a, b), (_, n1, n2, n3) = SPIKE_PRIOR, self.counts
        return (n1 + n3 + a) / (len(self.codes) + a + b), (n3 + a) / (n2 + n3 + a + b)


class _Window:
    """The latest ``size`` values in arrival order and sorted (median in O(1))."""

    __slots__ = ("fifo", "sorted")

    def __init__(self, size: int, values: list[float] | None = None) -> None:
        self.fifo: deque[float] = deque(maxlen=size)
        self.sorted: list[float] = []
        for y in values or ():
            self.add(y)

    def add(self, y: float) -> None:
        if len(self.fifo) == self.fifo.maxlen:
            del self.sorted[bisect_left(self.sorted, self.fifo[0])]
        self.fifo.append(y)
        insort(self.sorted, y)

    def median(self) -> float:
        return median_sorted(self.sorted)


class _Stretch:
    """A candidate level: consecutive points ``(y, inside, position, iteration, seconds
    before it)``, the first beyond the midpoint (``inside``)."""

    __slots__ = ("up", "pts", "n_inside", "total", "in_it", "in_cum")

    def __init__(self, up: bool) -> None:
        self.up = up
        self.pts: deque[tuple[float, bool, int, int, float]] = deque()
        self.n_inside, self.total = 0, 0.0
        self.in_it, self.in_cum = 0, 0.0  # iteration and seconds at the latest inside point

    def add(self, y: float, inside: bool, pos: int, it: int, secs: float) -> None:
        self.pts.append((y, inside, pos, it, self.total))
        self.total += secs
        self.n_inside += inside
        if inside:
            self.in_it, self.in_cum = it, self.total

    def pop(self) -> float:
        y, inside, _, _, _ = self.pts.popleft()
        self.n_inside -= inside
        return y

    def ys(self) -> list[float]:
        return [p[0] for p in self.pts]

    def persisted(self) -> tuple[int, float]:
        """Iterations and seconds from its first point to its latest inside point."""
        return self.in_it - self.pts[0][3] + 1, self.in_cum - self.pts[0][4]

    def held(self) -> float:
        """The level it holds: the nearer to the old level of the medians of its two halves
        (a step has both at the new level; a trend or a settling hump has not)."""
        ys = self.ys()
        h = len(ys) // 2
        if not h:
            return ys[0]
        a, b = _median(ys[:h]), _median(ys[h:])
        return min(a, b) if self.up else max(a, b)

    def latest(self) -> float:
        """The level its latest half holds (a step, a ramp that has reached its level, a
        hump on its plateau)."""
        ys = self.ys()
        return _median(ys[len(ys) // 2:])

    def sharp(self, k: int, before: float, level: float) -> bool:
        """A step, not a ramp: where the new level began (the ``SHARP_POINTS`` points from
        point ``k``) a point is already at three quarters of its rise or more (a ramp or a
        hump climbs there point by point)."""
        return max(self.ys()[k:k + SHARP_POINTS]) - before >= 0.75 * (level - before)

    def first(self, before: float, level: float) -> int:
        """Index of the point where the new level began: the first beyond the midpoint
        between the old level and the new one."""
        mid = 0.5 * (before + level)
        for k, p in enumerate(self.pts):
            if (p[0] >= mid) if self.up else (p[0] <= mid):
                return k
        return 0

    def inside_level(self) -> float:
        """The median of its points beyond the midpoint (the new level without the healthy
        points that may follow it)."""
        return _median([p[0] for p in self.pts if p[1]])

    def last_beyond(self, floor: float) -> tuple[int, float]:
        """Iteration of its latest point at ``floor`` or beyond, and seconds from its first
        point to the end of that one (none is: the iteration before its first point, 0)."""
        total = self.total
        for y, _, _, it, before in reversed(self.pts):
            if y >= floor:
                return it, total
            total = before
        return self.pts[0][3] - 1, 0.0

    def after_return(self, floor: float) -> int:
        """Index of the point after the latest one below ``floor`` that a point beyond the
        midpoint followed (0: none is)."""
        later = False
        for k in range(len(self.pts) - 1, -1, -1):
            y, inside = self.pts[k][0], self.pts[k][1]
            if later and y < floor:
                return k + 1
            later = later or inside
        return 0

    def start(self, before: float, level: float) -> tuple[int, int]:
        """Position and iteration where the new level began (:meth:`first`)."""
        p = self.pts[self.first(before, level)]
        return p[2], p[3]


class _PeriodFold:
    """The view on whole periods (``docs/detection.md``): a series whose long iterations
    come at a regular period (gradient accumulation: only the micro-batch that closes an
    optimizer step runs the all-reduce and the optimizer step) is folded into the mean time
    of whole periods, one value per block of periods, and those values are judged by a
    detector of their own.  A slowdown of the long iterations only raises the mean while
    every median of the points stays healthy.

    A point is *long* when it lies ``cut`` (log) above the lower quartile of the latest
    ``FOLD_POINTS`` points (the short level); the period is the gap between the starts of
    runs of long points that ``FOLD_LOCK`` of the latest ``FOLD_GAPS`` gaps take (2 points
    or more; a level shift, where the short level follows a few points late, is one long
    run), and it holds until fewer than ``FOLD_UNLOCK`` do.  A
    block begins after a long point and ends at the first long point once it holds
    ``FOLD_BLOCK`` points or more (whole periods; at most one period more without one)."""

    __slots__ = ("cut", "make", "win", "hist", "gaps", "counts", "last_long", "prev_long",
                 "period", "size", "total", "n", "det")

    def __init__(self, cut: float, make: Callable[[], RobustLevelDetector]) -> None:
        self.cut, self.make = cut, make
        self.win = _Window(FOLD_POINTS)
        self.hist: deque[tuple[float, int, bool]] = deque(maxlen=FOLD_HISTORY)
        self.gaps: deque[int] = deque(maxlen=FOLD_GAPS)
        self.counts: dict[int, int] = {}
        self.last_long, self.prev_long = -1, False
        self.period = self.size = self.n = 0
        self.total = 0.0
        self.det: RobustLevelDetector | None = None

    def feed(self, y: float, x: float, it: int, t: int) -> list[Alarm]:
        """One point (``y`` its log, ``x`` seconds, iteration ``it``, position ``t``): the
        folded detector's alarms, their positions the main series' (``t`` - iterations
        back)."""
        win = self.win
        win.add(y)
        if len(win.fifo) < FOLD_POINTS:
            return []
        long = y >= win.sorted[FOLD_POINTS // 4] + self.cut
        self.hist.append((x, it, long))
        alarms = self._add(x, it, long) if self.period else []
        if long and not self.prev_long:  # a run of long points begins
            if self.last_long >= 0:
                gaps, counts = self.gaps, self.counts
                if len(gaps) == FOLD_GAPS:
                    counts[gaps[0]] -= 1
                g = t - self.last_long
                gaps.append(g)
                counts[g] = counts.get(g, 0) + 1
                k, c = max(counts.items(), key=lambda kv: kv[1])
                if not self.period and len(gaps) == FOLD_GAPS and k >= 2 and c >= FOLD_LOCK:
                    alarms = self._lock(k)
                elif self.period and counts.get(self.period, 0) < FOLD_UNLOCK:
                    return self._place(alarms, it, t) + self.stop(it, t)
            self.last_long = t
        self.prev_long = long
        return self._place(alarms, it, t) if alarms else alarms

    def _add(self, x: float, it: int, long: bool) -> list[Alarm]:
        """A point into the open block; a block that ends goes to the folded detector."""
        self.total += x
        self.n += 1
        if (self.n >= self.size and long) or self.n >= self.size + self.period:
            assert self.det is not None
            alarms = self.det.observe(self.total / self.n, it, self.n)
            self.total, self.n = 0.0, 0
            return alarms
        return []

    def _lock(self, k: int) -> list[Alarm]:
        """A period of ``k`` points: the folded detector starts on the points of the gaps
        that made it (from after the first long point of the first gap, so that the healthy
        level of whole periods is known before the next point)."""
        self.period, self.size = k, k * -(-FOLD_BLOCK // k)
        self.det, self.total, self.n = self.make(), 0.0, 0
        back = min(sum(self.gaps), len(self.hist) - 1)
        alarms: list[Alarm] = []
        for x, it, long in list(self.hist)[-back:]:
            alarms += self._add(x, it, long)
        return alarms

    @staticmethod
    def _place(alarms: list[Alarm], it: int, t: int) -> list[Alarm]:
        """The folded detector's alarms at the main series' positions (one point an
        iteration: ``t`` is iteration ``it``)."""
        return [replace(a, index=t - (it - a.iteration if a.iteration is not None else 0),
                        declared_at=t) for a in alarms]

    def stop(self, it: int, t: int) -> list[Alarm]:
        """No period any more (or a new segment): the folded detector ends."""
        alarms = self.det.new_segment() if self.det is not None else []
        self.period, self.det, self.total, self.n = 0, None, 0.0, 0
        return self._place(alarms, it, t)

    @property
    def slow(self) -> bool:
        return self.det is not None and (self.det.slow or self.det._flapping)


def _count_exponent(p: float, m: float, k: float) -> float:
    """The positive ``theta`` with ``p exp(theta a) + (1 - p) exp(theta b) = 1``, ``a = m
    (1 - p) - k``, ``b = -m p - k``: the steps of a sum of Bernoulli(``p``) events worth
    ``m`` less their mean and a drift ``k`` (a false onset at ``h`` once in about
    ``exp(theta h)`` points; Gaussian steps: ``2 k / variance``).  0 where none is (``a <=
    0``).  Newton's method from the right of the root (the function is convex: it comes
    down to the root from above)."""
    a, b = m * (1.0 - p) - k, -m * p - k
    if a <= 0.0:
        return 0.0

    def f(t: float) -> float:
        return p * math.exp(min(t * a, 700.0)) + (1.0 - p) * math.exp(t * b) - 1.0

    t = 2.0 * k / (m * m * p * (1.0 - p))  # the Gaussian exponent
    while f(t) < 0.0:
        t *= 2.0
    for _ in range(60):
        d = p * a * math.exp(min(t * a, 700.0)) + (1.0 - p) * b * math.exp(t * b)
        step = f(t) / d
        t -= step
        if step < 1e-9 * t:
            break
    return t


class _RateLevel:
    """The count of run starts at one level ``c`` (points ``c`` times the healthy level or
    more) in the view on the mean: Bernoulli's cumulative log-likelihood ratio of a chance
    of a run start that rises from the healthy one ``p0`` to ``p0 + threshold / (c - 1)``
    (a rise of the mean time of ``threshold`` at the least excess a run start there has),
    an onset at ``log(LOSS_ARL x levels)`` times the healthy count's long-run variance over
    the Bernoulli one.  The healthy chance and that variance learn the points of each
    excursion that ends without an onset (like the view on the mean).  O(1) a point."""

    __slots__ = ("c", "inrun", "n", "p", "nb", "cm", "cm2", "s", "pend_n", "pend_k",
                 "pend_b", "starts", "top")

    def __init__(self, c: float) -> None:
        self.c, self.inrun = c, False
        self.n, self.p = 0, 0.0  # healthy points learnt, chance that one starts a run
        self.nb, self.cm, self.cm2 = 0, 0.0, 0.0  # batch means of the run starts
        self.pend_n, self.pend_k = 0, 0
        self.pend_b: list[float] = []
        self.reset()

    def reset(self) -> None:
        """The sum at zero (the pending points dropped: a rise is not learnt)."""
        self.s, self.top = 0.0, 0.0
        self.pend_n, self.pend_k = 0, 0
        self.pend_b.clear()
        # (iteration, position, the view's excess summed before it) of the run starts
        self.starts: deque[tuple[int, int, float]] = deque(maxlen=LOSS_STARTS)

    def chance(self) -> float:
        return min(max(self.p, 1.0 / LOSS_BASE), 0.5)

    def learn(self, k: int, n: int) -> None:
        self.n += n
        self.p += (k / n - self.p) * min(1.0, n / min(self.n, LOSS_BASE))

    def batch(self, b: float) -> None:
        self.nb += 1
        w = 1.0 / min(self.nb, LOSS_BASE // LOSS_BATCH)
        self.cm += (b - self.cm) * w
        self.cm2 += (b * b - self.cm2) * w

    def feed(self, start: bool, it: int, pos: int, cum: float, e: float, b: float | None,
             judge: bool, limit: float, threshold: float) -> tuple[int, int, float] | None:
        """One point (``start``: it begins a run at this level; ``cum``: the view's excess
        summed before it, ``e`` its own; ``b``: the batch mean of run starts it closed);
        where a rise began (iteration, position, excess summed before it) once the sum
        holds the limit (``judge``: the view has learnt enough), else None."""
        k = int(start)
        if not judge or (self.s <= 0.0 and not start):
            self.learn(k, 1)
            if b is not None:
                self.batch(b)
            return None
        p0 = self.chance()
        p1 = min(p0 + threshold / (self.c - 1.0), 0.95)
        if self.s <= 0.0:  # a run start: the sum leaves zero
            self.s, self.top = 0.0, 0.0
            self.starts.clear()
        self.top = max(self.top, e)
        self.s += math.log(p1 / p0) if start else math.log((1.0 - p1) / (1.0 - p0))
        if start:
            self.starts.append((it, pos, cum))
        self.pend_n += 1
        self.pend_k += k
        if b is not None:
            self.pend_b.append(b)
        if self.s <= 0.0:  # an excursion over without an onset: healthy, learnt
            self.learn(self.pend_k, self.pend_n)
            for m in self.pend_b:
                self.batch(m)
            self.reset()
            return None
        if self.pend_n >= LOSS_BASE:  # a long excursion below the limit: the healthy chance
            self.learn(self.pend_k, self.pend_n)
            for m in self.pend_b:
                self.batch(m)
            self.pend_n, self.pend_k = 0, 0
            self.pend_b.clear()
        lrv = LOSS_BATCH * max(self.cm2 - self.cm * self.cm, 0.0)
        disp = max(1.0, lrv / (p0 * (1.0 - p0)))
        if self.s < disp * limit or len(self.starts) < LOSS_RUNS:
            return None
        return self._began(pos, p0)

    def _began(self, pos: int, p0: float) -> tuple[int, int, float]:
        """The latest run start whose log-likelihood of a rise of the chance (from ``p0``
        to the one since) is within ``LOSS_PLACE`` of the best."""
        st = self.starts
        n = len(st)
        ll = []
        for i, (_, q, _c) in enumerate(st):
            m, k = pos - q + 1, n - i
            p1 = min(k / m, 1.0 - 1e-9)
            ll.append(k * math.log(p1 / p0) + (m - k) * math.log((1.0 - p1) / (1.0 - p0))
                      if p1 > p0 else -math.inf)
        top = max(ll)
        return st[max(i for i in range(n) if ll[i] >= top - LOSS_PLACE)]


class _LossView:
    """The view on the mean (``docs/detection.md``): the time that sparse long iterations
    add in a series without a period (a storm of input stalls, part of the steps waiting
    for a slower loader).  The median, and every level of the main view, stays healthy
    there while the mean rises; each long iteration is a spike.

    Each point's excess over the main view's healthy level ``h``, ``min(x / h - 1,
    LOSS_CAP)``, goes into Page's cumulative sum less the healthy excess (its mean over
    the healthy points) and half the threshold (the drift).  A run of more than
    ``stall_iters`` long points is a level (the main view's) and adds nothing.  The sum is
    an onset when, less its largest run (not one stall), it holds ``LOSS_ITERS x
    stall_iters`` iterations lost and ``LOSS_Z`` times the healthy excess' long-run
    variance over the drift (from means of ``LOSS_BATCH`` points: healthy clumps of stalls
    ask for more), made of ``LOSS_RUNS`` runs of long points or more; or, where the
    sizes of the long points spread widely, when the count of runs since the sum left zero
    (less the largest), each valued at their mean excess, holds the need beyond the
    healthy chance of a run and the drift, and the threshold of a false onset once in
    ``LOSS_ARL`` healthy points for rare Bernoulli run starts (:meth:`_count_rise`).
    The rise began at the run after which the excess beyond the healthy one and half the
    rise is largest, or later: at the latest run start whose likelihood of a rise of the
    chance of a run (Bernoulli, from the healthy chance) is within ``LOSS_PLACE`` of the
    best (a healthy stall, or a short healthy burst of them, before the rise is not its
    start).
    The healthy excess and its variance learn the points of each excursion of the sum that
    ends without an onset (at most ``LOSS_BASE`` points pending; a rise is not learnt).
    The mean excess of the latest ``LOSS_WINDOW`` points back within the drift of the
    healthy one is its recovery.  Long points that come more often, beyond the healthy body
    (the median healthy, the healthy excess spread by rare huge stalls), are also counted
    at each of ``RATE_LEVELS`` (:class:`_RateLevel`): an onset there where the excess since
    the rise began, beyond the healthy one and less its largest point, holds the need, from
    ``LOSS_RUNS`` run starts or more.  O(1) a point."""

    __slots__ = ("limit", "k", "need", "max_run", "base", "n", "s", "start", "runs", "run",
                 "run_sum", "top", "starts", "cum", "pos", "win", "wsum", "bsum", "bn", "nb",
                 "bm", "bm2", "slow", "pend_e", "pend_n", "pend_b", "rate", "pend_r", "csum",
                 "cm", "cm2", "from_pos", "threshold", "levels", "lcount", "ecum",
                 "arl")

    def __init__(self, threshold: float, stall_iters: int) -> None:
        self.limit, self.k = math.log1p(threshold), 0.5 * threshold
        self.threshold = threshold
        # the count of long points beyond the healthy body, one per level
        self.levels = tuple(_RateLevel(c) for c in RATE_LEVELS if c - 1.0 > threshold)
        self.lcount = [0] * len(self.levels)  # run starts of the open batch, per level
        self.ecum = 0.0  # the excess summed over every point judged
        self.arl = math.log(LOSS_ARL * max(len(self.levels), 1))
        self.need, self.max_run = LOSS_ITERS * max(stall_iters, 1), max(stall_iters, 1)
        self.base, self.n, self.pos = 0.0, 0, 0
        self.rate, self.pend_r = 0.0, 0  # healthy chance that a point begins a run
        self.bsum, self.bn, self.nb, self.bm, self.bm2 = 0.0, 0, 0, 0.0, 0.0  # batch means
        self.csum, self.cm, self.cm2 = 0.0, 0.0, 0.0  # ... of the run starts
        self.win: deque[float] = deque(maxlen=LOSS_WINDOW)  # excess since the onset
        self.wsum, self.slow = 0.0, False
        # an open excursion's points: learnt as healthy when it ends without an onset
        self.pend_e, self.pend_n = 0.0, 0
        self.pend_b: list[tuple[float, float]] = []
        self._clear()

    def _clear(self) -> None:
        self.run, self.run_sum = 0, 0.0  # the open run of long points and its excess
        self._restart()

    def _restart(self) -> None:
        """The sum at zero: no rise under way."""
        self.s, self.start, self.runs, self.top, self.cum = 0.0, -1, 0, 0.0, 0.0
        self.from_pos = self.pos + 1  # the sum's first point
        # (iteration, position, excess summed before it) of the runs since the sum left zero
        self.starts: deque[tuple[int, int, float]] = deque(maxlen=LOSS_STARTS)

    def pause(self) -> None:
        """The main view is slow (or has no healthy level): the sum starts afresh after."""
        for lv in self.levels:
            lv.reset()
        self._clear()
        self._drop()
        self.slow, self.wsum = False, 0.0
        self.win.clear()

    def feed(self, x: float, h: float, it: int) -> tuple[str, int, float] | None:
        """One point: ``("onset", iteration, excess)`` (where the rise began, the mean
        excess since), ``("recovery", iteration, excess)`` (the latest window's) or None."""
        r = math.log(x / h)
        e = min(x / h - 1.0, LOSS_CAP)
        self.pos += 1
        first = 0.0
        starts: list[bool] = []
        for lv in self.levels:  # runs beyond the healthy body, per level
            up = x >= lv.c * h
            starts.append(up and not lv.inrun)
            lv.inrun = up
        if r >= self.limit:  # a long point
            self.run += 1
            if self.run == 1:
                first = 1.0
                if self.s <= 0:
                    self._restart()
                    self.start = it
                self.runs += 1
                self.starts.append((it, self.pos, self.cum))
            if self.run > self.max_run:  # a level, not stalls
                self.s = max(0.0, self.s - self.run_sum)
                self.run_sum, e = 0.0, 0.0
                if self.s <= 0:
                    self._restart()
            else:
                self.run_sum += e
                self.top = max(self.top, self.run_sum)
        else:
            if self.run > self.max_run:
                e = 0.0
            self.run, self.run_sum = 0, 0.0
        if self.slow:
            win = self.win
            if len(win) == LOSS_WINDOW:
                self.wsum -= win[0]
            win.append(e)
            self.wsum += e
            if len(win) == LOSS_WINDOW and self.wsum / LOSS_WINDOW - self.base < self.k:
                self.slow = False
                self._clear()
                for lv in self.levels:
                    lv.reset()
                return "recovery", it, self.wsum / LOSS_WINDOW
            return None
        self.bsum += e
        self.csum += first
        self.bn += 1
        for j, st in enumerate(starts):
            self.lcount[j] += int(st)
        b = (self.bsum / LOSS_BATCH, self.csum / LOSS_BATCH) if self.bn == LOSS_BATCH else None
        lb: list[float | None] = [None] * len(self.levels)
        if b is not None:
            self.bsum, self.csum, self.bn = 0.0, 0.0, 0
            lb = [c / LOSS_BATCH for c in self.lcount]
            self.lcount = [0] * len(self.levels)
        judge = self.nb >= LOSS_BATCHES
        rose: tuple[int, int, float] | None = None
        for j, lv in enumerate(self.levels):
            at = lv.feed(starts[j], it, self.pos, self.ecum, e, lb[j], judge, self.arl,
                         self.threshold)
            # the rise holds the need beyond the healthy excess, less its largest point
            # (one stall is no rise), as the sum's does
            if at is not None and (self.ecum + e - at[2] - self.base * (self.pos - at[1] + 1)
                                   - lv.top >= self.need) and (rose is None or at[1] < rose[1]):
                rose = at
        self.ecum += e
        if rose is not None:  # the count of long points beyond the healthy body rose
            self.slow, self.wsum = True, 0.0
            self.win.clear()
            self._drop()
            self._restart()
            for lv in self.levels:
                lv.reset()
            at_it, p, c0 = rose
            return "onset", at_it, (self.ecum - c0) / (self.pos - p + 1)
        if self.nb < LOSS_BATCHES:
            self._learn(e, b, first)
            return None
        self.s = max(0.0, self.s + e - self.base - self.k)
        if self.s <= 0:  # an excursion over without an onset: healthy, learnt
            self._learn(e, b, first)
            self._restart()
            return None
        self.cum += e
        self.pend_e += e
        self.pend_n += 1
        self.pend_r += int(first)
        if b is not None:
            self.pend_b.append(b)
        if self.pend_n >= LOSS_BASE:  # a long excursion below the need: the healthy excess
            self._commit()
        lrv = LOSS_BATCH * max(self.bm2 - self.bm * self.bm, 0.0)  # long-run variance
        need = max(self.need, LOSS_Z * lrv / self.k)
        if self.runs >= LOSS_RUNS and self.s - self.top >= self.need and (
                self.s - self.top >= need or self._count_rise()):
            self.slow, self.wsum = True, 0.0
            self.win.clear()
            self._drop()  # the rise, not the healthy excess
            return self._began()
        return None

    def _count_rise(self) -> bool:
        """The runs since the sum left zero, less the largest, valued at their mean
        excess ``m``, beyond the healthy chance of a run and the drift, hold the need and
        the threshold of a false onset once in ``LOSS_ARL`` healthy points: the evidence
        of the count of long iterations, without the spread of their sizes.  Each point
        adds ``m (run start - healthy chance) - drift``; a run start is rare and counts
        much, so the threshold is ``log(LOSS_ARL) / theta`` with ``theta`` the exponent
        that zeroes the healthy steps' log moment (:func:`_count_exponent`; Bernoulli
        run starts, scaled by the healthy count's long-run variance over the Bernoulli
        one: clumped runs ask for more, regular ones for less), not the Gaussian sum's
        ``2 drift / variance``.  A run worth no more than the drift is no evidence."""
        n = self.runs - 1
        span = self.pos - self.from_pos + 1
        m = (self.cum - self.top) / n
        ev = m * (n - self.rate * span) - self.k * span
        if ev < self.need or m <= 0.0:
            return False
        p0 = min(max(self.rate, 1.0 / LOSS_BASE), 0.5)
        lrv_c = LOSS_BATCH * max(self.cm2 - self.cm * self.cm, 0.0)
        theta = _count_exponent(p0, m, self.k)
        if theta <= 0.0:
            return False
        disp = lrv_c / (p0 * (1.0 - p0))
        return ev >= disp * math.log(LOSS_ARL) / theta

    def _learn(self, e: float, b: tuple[float, float] | None, first: float) -> None:
        """The healthy excess: the pending points of an excursion that ended, then ``e``
        (and the batch mean ``b`` that it closed; ``first``: 1 where ``e`` began a run)."""
        self._commit()
        self.n += 1
        w = 1.0 / min(self.n, LOSS_BASE)
        self.base += (e - self.base) * w
        self.rate += (first - self.rate) * w
        if b is not None:
            self._batch(b)

    def _commit(self) -> None:
        if self.pend_n:
            self.n += self.pend_n
            w = min(1.0, self.pend_n / min(self.n, LOSS_BASE))
            self.base += (self.pend_e / self.pend_n - self.base) * w
            self.rate += (self.pend_r / self.pend_n - self.rate) * w
            for m in self.pend_b:
                self._batch(m)
        self._drop()

    def _drop(self) -> None:
        self.pend_e, self.pend_n, self.pend_r = 0.0, 0, 0
        self.pend_b.clear()

    def _batch(self, b: tuple[float, float]) -> None:
        self.nb += 1
        w = 1.0 / min(self.nb, LOSS_BASE // LOSS_BATCH)
        self.bm += (b[0] - self.bm) * w
        self.bm2 += (b[0] * b[0] - self.bm2) * w
        self.cm += (b[1] - self.cm) * w
        self.cm2 += (b[1] * b[1] - self.cm2) * w

    def _began(self) -> tuple[str, int, float]:
        """Where the rise began: the run start after which the excess beyond the healthy
        one and half the rise (as large as the sum's life says, at least the threshold)
        is largest (hiccups before the rise left the sum above zero), or the latest run
        start the runs cannot tell from it (:meth:`_latest_start`)."""
        it0, p0, c0 = self.starts[0]
        rise = max(self.k, 0.5 * ((self.cum - c0) / (self.pos - p0 + 1) - self.base))
        drift = self.base + rise
        best, at, excess, j = -math.inf, it0, 0.0, 0
        for i, (it, p, c) in enumerate(self.starts):
            v = (self.cum - c) - drift * (self.pos - p + 1)
            if v > best:
                best, at, excess, j = v, it, (self.cum - c) / (self.pos - p + 1), i
        i = self._latest_start(j)
        if i > j:
            it, p, c = self.starts[i]
            at, excess = it, (self.cum - c) / (self.pos - p + 1)
        return "onset", at, excess

    def _latest_start(self, j: int) -> int:
        """The latest run start whose log-likelihood of a rise of the chance of a run
        (Bernoulli, from the healthy chance to the one since run start ``j``) is within
        ``LOSS_PLACE`` of the best: where the runs alone cannot tell the rise began
        later (a healthy run or a short burst before it, a climb of the chance)."""
        st = self.starts
        n = len(st)
        p0 = max(self.rate, 1.0 / LOSS_BASE)
        p1 = (n - j) / (self.pos - st[j][1] + 1)
        if p1 <= p0 or p1 >= 1.0:
            return j
        up, down = math.log(p1 / p0), math.log((1.0 - p1) / (1.0 - p0))
        ll = [(n - i) * up + (self.pos - p + 1 - (n - i)) * down
              for i, (_, p, _) in enumerate(st)]
        top = max(ll)
        return max(j, max(i for i in range(n) if ll[i] >= top - LOSS_PLACE))


class RobustLevelDetector:
    """Streaming detector of one rank (``docs/detection.md``)."""

    name = "robust"
    segmented = True  # takes job iteration numbers and restarts (observe, new_segment)
    default_warmup_iters = DEFAULT_WARMUP_ITERS  # the watcher's minimum warm-up before it

    def __init__(self, *, threshold: float = 0.10, stall_iters: int = 8,
                 stall_seconds: float = 0.0, min_points: int = 3,
                 persist_fraction: float = 0.8, ramp_iters: int = 60,
                 rise_iters: int = 100, startup_iters: int = 300, lag_iters: int = 100,
                 reference_points: int = 32, flap_episodes: int = 3,
                 flap_window_iters: int = 1000, spike_run_chance: float = 1e-4,
                 confidence: float = CONFIDENCE, fold: bool = True, mean_view: bool = True) -> None:
        """Every parameter, its unit and meaning: ``docs/detection.md`` (Parameters)."""
        if not (0.0 < threshold < 10.0 and 0.5 <= persist_fraction <= 1.0
                and 0.0 < spike_run_chance < 1.0 and confidence >= 0.0):
            raise ValueError("need 0 < threshold < 10, 0.5 <= persist_fraction <= 1, "
                             "0 < spike_run_chance < 1 and confidence >= 0")
        if (stall_iters < 0 or min_points < 1 or ramp_iters < 1 or reference_points < 3
                or stall_seconds < 0 or flap_episodes < 2 or flap_window_iters < 1
                or rise_iters < 0 or startup_iters < 0 or lag_iters < 0):
            raise ValueError("need stall_iters >= 0, min_points >= 1, ramp_iters >= 1, "
                             "reference_points >= 3, stall_seconds >= 0, flap_episodes >= 2, "
                             "flap_window_iters >= 1, rise_iters >= 0, startup_iters >= 0 "
                             "and lag_iters >= 0")
        self.threshold, self.limit = float(threshold), math.log1p(threshold)
        self.mid = 0.5 * self.limit
        self.stall_iters, self.stall_seconds = int(stall_iters), float(stall_seconds)
        self.min_points, self.persist_fraction = int(min_points), float(persist_fraction)
        self.ramp_iters, self.reference_points = int(ramp_iters), int(reference_points)
        self.rise_iters, self.startup_iters = int(rise_iters), int(startup_iters)
        self.lag_iters = int(lag_iters)
        self.min_reference = max(self.min_points, 5)
        self.flap_episodes, self.flap_window_iters = int(flap_episodes), int(flap_window_iters)
        self.spike_run_chance, self.confidence = float(spike_run_chance), float(confidence)
        self._t, self._span = -1, 1
        kw = dict(threshold=threshold, stall_iters=stall_iters, stall_seconds=stall_seconds,
                  min_points=min_points, persist_fraction=persist_fraction,
                  ramp_iters=ramp_iters, rise_iters=rise_iters, startup_iters=startup_iters,
                  lag_iters=lag_iters, reference_points=reference_points,
                  flap_episodes=flap_episodes, flap_window_iters=flap_window_iters,
                  spike_run_chance=spike_run_chance, confidence=confidence)
        # the folded view: its own detector, a level there at least FOLD_MIN_POINTS blocks
        fkw = {**kw, "min_points": max(self.min_points, FOLD_MIN_POINTS)}
        self._fold = _PeriodFold(self.limit, lambda: RobustLevelDetector(
            **fkw, fold=False, mean_view=False)) if fold else None  # type: ignore[arg-type]
        self._fold_slow = False  # the folded view holds a slow episode
        # the view on the mean: the time lost by sparse long iterations
        self._mean = _LossView(self.threshold, self.stall_iters) if mean_view else None
        self._mean_slow = False  # the view on the mean holds a slow episode
        self._reset()

    @property
    def candidate_open(self) -> bool:
        """A candidate stretch is open: its points may yet become a level."""
        return self._stretch is not None

    def new_segment(self) -> list[Alarm]:
        """Forget every level (a restart or resume).  An open episode ends here."""
        e = math.exp(self._episode.median()) if self._episode.fifo else math.nan
        alarms = [self._alarm("recovery", self._t, self._last_it, e, e, note="segment")
                  ] if self.slow or self._flapping else []
        self._reset()
        folded = self._fold.stop(self._last_it, self._t) if self._fold is not None else []
        if self._fold is not None:
            self._fold = _PeriodFold(self._fold.cut, self._fold.make)  # a new series
        out = self._merge(alarms, folded)
        if self._mean is not None:
            if self._mean.slow:
                out = self._merge_mean(out, [self._alarm(
                    "recovery", self._t, self._last_it, math.nan, math.nan, note="segment")])
            self._mean = _LossView(self.threshold, self.stall_iters)
        return out

    def _merge(self, alarms: list[Alarm], folded: list[Alarm]) -> list[Alarm]:
        """One episode at a time from the two views: an onset (or recovery) of either is
        said when the other is not slow; while the folded view is slow the main view's
        onsets and recoveries are part of its episode, and the reverse."""
        out = [a for a in alarms if not ((self._fold_slow or self._mean_slow) and a.kind in (
            "onset", "flapping", "recovery"))]
        for a in folded:
            if a.kind in ("onset", "flapping"):
                if not (self._fold_slow or self._mean_slow or self.slow or self._flapping):
                    out.append(replace(a, kind="onset", since=None, slow_fraction=None,
                                       note="periods"))
                self._fold_slow = True
            elif a.kind == "recovery" and self._fold_slow:
                self._fold_slow = False
                if self._flapping:
                    continue
                if self.slow:  # the mean of whole periods is back: so is every iteration
                    # (the main view's episode level may not be: in a series with long
                    # iterations every few points, too few points return to the healthy
                    # level for its own recovery)
                    self._end_episode(a.iteration or 0)
                out.append(replace(a, note=a.note or "periods"))
        return out

    def _merge_mean(self, alarms: list[Alarm], mean: list[Alarm]) -> list[Alarm]:
        """The view on the mean's alarms into the episode of the other two (their own
        alarms already merged): its onset is an onset when neither is slow, its recovery a
        recovery when neither is (the episode is the time any view is slow)."""
        out = alarms
        for a in mean:
            other = self.slow or self._flapping or self._fold_slow
            if a.kind == "onset":
                if not (self._mean_slow or other):
                    out = out + [a]
                self._mean_slow = True
            elif a.kind == "recovery" and self._mean_slow:
                self._mean_slow = False
                if not other:
                    out = out + [a]
        return out

    def _reset(self) -> None:
        self._ref = _Window(self.reference_points)  # healthy level (winsorised points)
        self._dev = _Window(NOISE_POINTS)  # |healthy point - healthy level|, winsorised
        self._spread = _Window(NOISE_POINTS)  # the same, not winsorised
        # signed differences of successive healthy points
        self._d1: deque[float] = deque(maxlen=NOISE_POINTS)
        self._noise_at, self._noise = -2, (0.0, 0.0)  # (position, (scale, phi)) cached
        self._episode = _Window(self.reference_points)
        self._stretch: _Stretch | None = None
        self.slow = self._flapping = self._prev_inside = False
        self._last_healthy = self._healthy = self._base = math.nan  # logs
        self._drifts = 0  # drift events of the segment
        # (position, iteration, healthy level) of the healthy points after the start-up
        # below every later one (increasing levels; the lowest first): where a drift began
        self._floor: list[tuple[int, int, float]] = []
        self._drift_next = 0  # the iteration from which a drift onset is judged again
        self._onsets: deque[int] = deque()  # onset iterations (flapping window)
        self._slow_spans: deque[tuple[int, int]] = deque()  # (first, end) of slow episodes
        # the latest recovery folded into the flapping (None: none yet)
        self._flap_recovery: tuple[int, int, float, float] | None = None
        self._slow_pos = 0  # position where the open slow episode began
        self._tallies = (_SpikeTally(SPIKE_POINTS[0]), _SpikeTally(SPIKE_POINTS[1]))
        self._needed = self._points_for(*self._tallies[0].rates())
        self._last_it = self._t
        self._first_it: int | None = None  # the segment's first iteration seen
        # (position, iteration, healthy level) with increasing levels: the lowest healthy
        # level of the latest rise_iters iterations is the first (a sliding minimum)
        self._lows: deque[tuple[int, int, float]] | None = None  # (after the start-up)
        self._settled: list[float] = []  # the latest WARM_POINTS settled points
        # runs of points beyond the midpoint that returned: (iteration, points, height,
        # declared: the detector was slow when it returned)
        self._runs: deque[tuple[int, int, float, bool]] = deque(maxlen=64)
        self._run_ys: list[float] = []  # heights of the open run's points beyond it
        self._run_first = self._run_last = self._run_gap = 0
        # the latest points (iteration, log, slow) and the healthy level their runs were
        # found against (it follows the level up; a fall of a midpoint below it finds them
        # again against the lower level: :meth:`_rerun`)
        self._hist: deque[tuple[int, float, bool]] = deque(maxlen=MODE_HISTORY)
        self._run_ref = math.inf
        # (iteration, healthy level) after each healthy point since the latest episode: the
        # level as it was lag_iters iterations ago is the first (the lagged reference)
        self._past: deque[tuple[int, float]] = deque()
        # (iteration, healthy level) of the latest MODE_WINDOW iterations since the latest
        # episode: the levels the healthy level has held (the slope view's memory)
        self._held: deque[tuple[int, float]] = deque()

    def update(self, x: float) -> list[Alarm]:
        """One iteration time of a series without iteration numbers (position = iteration)."""
        return self.observe(x, self._t + 1, 1)

    def observe(self, x: float, iteration: int, span: int = 1) -> list[Alarm]:
        """``x`` seconds per iteration at job iteration ``iteration``, ``span`` iterations
        after the previous point (one value every k iterations, or k-iteration means)."""
        if not (x > 0.0 and math.isfinite(x)):
            raise ValueError(f"{self.name} needs positive finite iteration times, got {x}")
        self._t += 1
        self._last_it, self._span = iteration, max(span, 1)
        y, secs = math.log(x), x * self._span
        fold, mv = self._fold, self._mean
        if fold is None and mv is None:
            return self._observe(y, iteration, secs)
        folded = [] if fold is None else (
            fold.feed(y, x, iteration, self._t) if span == 1
            else fold.stop(iteration, self._t) if fold.period else [])
        alarms = self._observe(y, iteration, secs)
        mean: list[Alarm] = []
        if mv is not None:
            # a period found while the view on the mean has an excursion or an episode
            # open does not stop it: long iterations at a regular period that came with a
            # rise make the period, and the folded view, which starts on the gaps that
            # made it, has no healthy level from before them
            locked = fold is not None and fold.period and not (mv.slow or mv.s > 0)
            if (span == 1 and not locked and not self.slow
                    and not self._flapping and len(self._ref.fifo) >= self.min_reference):
                h = math.exp(self._ref.median())
                said = mv.feed(x, h, iteration)
                if said is not None:
                    kind, at, excess = said
                    e = h * (1.0 + max(excess, 0.0))
                    pos = self._t - (iteration - at)
                    mean = [self._alarm(kind, pos, at, *((h, e) if kind == "onset"
                                                         else (e, h)), note="mean")]
            elif mv.slow or mv.s > 0:
                if mv.slow:
                    mean = [self._alarm("recovery", self._t, iteration, math.nan, math.nan,
                                        note="mean")]
                mv.pause()
        if folded or (alarms and (self._fold_slow or self._mean_slow)):
            alarms = self._merge(alarms, folded)
        return self._merge_mean(alarms, mean) if mean else alarms

    def _observe(self, y: float, iteration: int, secs: float) -> list[Alarm]:
        if self._first_it is None:
            self._first_it = iteration
        if len(self._ref.fifo) < self.min_reference:
            self._ref.add(y)
            if len(self._ref.fifo) == self.min_reference:
                self._first_noise()
            return []
        self._track_run(y, iteration)
        alarms = (self._slow_point if self.slow else self._healthy_point)(y, iteration, secs)
        if self._flapping and self.slow and self._outlasts(iteration):
            alarms += self._unfold(self._slow_pos, self._slow_spans[-1][0],
                                   self._healthy, self._episode.median())
        if self._flapping and iteration - self._onsets[-1] >= self.flap_window_iters:
            # No onset for a whole window: over (healthy), or steadily slow (a change).
            self._flapping = False
            e, r = math.exp(self._episode.median()), math.exp(self._healthy)
            kind, before, after = ("change", r, e) if self.slow else ("recovery", e, r)
            alarms.append(self._alarm(kind, self._t, iteration, before, after, note=(
                "steady" if self.slow else "flapping"), frac=self._slow_fraction(iteration)))
        return alarms

    def warm_start(self, values: list[float]) -> int | None:
        """The warm-up's iteration times (the last one ends it): where a slowdown that began
        inside the warm-up started from, or None.  The warm-up settled on a level (its
        lowest median of ``WARM_POINTS`` consecutive values after the first value) and rose
        ``threshold`` above it to a level (the latest ``WARM_POINTS`` values), the values of
        each spreading less than ``threshold`` or than half the rise, and most values since
        stayed beyond the midpoint: the
        watcher then gives the detector the values from that level on, so that the level
        becomes the healthy one and the rise is judged as any other (``docs/detection.md``,
        warm-up)."""
        w, n = WARM_POINTS, len(values)
        if n < 2 * w + 1 or min(values) <= 0.0:
            return None
        ys = [math.log(v) for v in values]
        best, low = None, math.inf
        for j in range(1, n - 2 * w + 1):  # the floor ends before the latest window begins
            m = _median(ys[j:j + w])
            if m < low:
                best, low = j, m
        # both are levels, told apart by the rise: the values of each window spread less
        # than the rise between their medians (within threshold of each other, or less
        # than a rise of many thresholds: a noisy warm-up, a shared machine; not a
        # saw-tooth, whose windows span what lies between them)
        rise = -math.inf if best is None else _median(ys[-w:]) - low
        if (best is None or rise < self.limit
                or max(ys[best:best + w]) - min(ys[best:best + w]) > max(self.limit, rise / 2)
                or max(ys[-w:]) - min(ys[-w:]) > max(self.limit, rise / 2)):
            return None
        after = ys[best + w:]
        if sum(y >= low + self.mid for y in after) < self.persist_fraction * len(after):
            return None
        return best

    def _track_run(self, y: float, it: int) -> None:
        """Runs of points beyond the midpoint over the healthy level that returned below it
        (``MODE_GAP`` points), declared or not, of at most ``ramp_iters`` points: the dwells
        of the healthy level's modes (:meth:`_mode_need`)."""
        r = self._healthy if self.slow else self._ref.median()
        self._hist.append((it, y, self.slow))
        if not r > self._run_ref - self.mid:
            self._rerun(r)
        elif r > self._run_ref or self._run_ref == math.inf:
            self._run_ref = r
        if y >= r + self.mid:
            if not self._run_ys:
                self._run_first = self._t
            self._run_ys.append(y)
            self._run_last, self._run_gap = self._t, 0
        elif self._run_ys:
            self._run_gap += 1
            if self._run_gap >= MODE_GAP:
                n = self._run_last - self._run_first + 1
                if n <= self.ramp_iters:
                    self._runs.append((it, n, _median(self._run_ys), self.slow))
                self._run_ys = []

    def _run_points(self) -> int:
        """Points of the open run beyond the midpoint (since the latest return below it:
        a candidate stretch may span several visits of a mode and the returns between)."""
        return self._t - self._run_first + 1 if self._run_ys else 0

    def _rerun(self, r: float) -> None:
        """The healthy level fell to ``r``, a midpoint or more below the level the runs of
        the latest points were found against (a regime that switches between levels: the
        healthy level sat on the slower one while it held most of the latest points): those
        runs are found again against ``r``, as they would have been had it been the healthy
        level then (the slower level's visits are then dwells of a mode, not new levels)."""
        hist, runs = self._hist, self._runs
        first = hist[0][0]
        while runs and runs[-1][0] >= first:
            runs.pop()
        ys: list[float] = []
        start = last = gap = 0
        for k, (it, y, slow) in enumerate(hist):
            if y >= r + self.mid:
                if not ys:
                    start = k
                ys.append(y)
                last, gap = k, 0
            elif ys:
                gap += 1
                if gap >= MODE_GAP:
                    if last - start + 1 <= self.ramp_iters:
                        runs.append((it, last - start + 1, _median(ys), slow))
                    ys = []
        # the open run goes on against r
        self._run_ys = ys
        if ys:
            n = len(hist)
            self._run_first = self._t - (n - 1 - start)
            self._run_last, self._run_gap = self._t - (n - 1 - last), gap
        self._run_ref = r

    def _mode_runs(self, level: float, it: int) -> list[tuple[int, bool]]:
        """The returned runs (points, declared) of the healthy level's mode at the height
        ``level`` (over the healthy level) within ``MODE_WINDOW`` iterations, or none: a
        mode there when ``MODE_RUNS`` or more runs within ``MODE_BAND`` midpoints of it, most
        of them never declared, or ``MODE_LEVELS`` runs within a midpoint of it that each
        lasted more than ``stall_iters`` and were never declared (levels that came and went:
        the start-up's, or a slower level the healthy level held before it fell)."""
        runs = self._runs
        while runs and runs[0][0] < it - MODE_WINDOW:
            runs.popleft()
        at = level + self._ref.median()
        near = [(n, slow) for _, n, h, slow in runs if abs(h - at) <= MODE_BAND * self.mid]
        # the mode is the healthy level's: most of its runs came and went undeclared (the
        # slow phases of a flapping the detector reported are no mode)
        quiet = sum(not slow for _, slow in near)
        if quiet >= MODE_RUNS and quiet >= len(near) / 2:
            return near
        wide = [(n, slow) for _, n, h, slow in runs if abs(h - at) <= self.mid]
        levels = sum(n > self.stall_iters and not slow for n, slow in wide)
        return wide if levels >= MODE_LEVELS and 2 * levels >= len(wide) else []

    def _mode_need(self, level: float, it: int) -> int:
        """Points a candidate level ``level`` (over the healthy level) needs when the healthy
        level has a mode at its height (:meth:`_mode_runs`): it must then outlast the
        longest of its runs never declared ``MODE_MARGIN`` times and all but ``MODE_TAIL``
        of memoryless runs of their mean length, or all but a smaller share where its runs
        come so often that ``MODE_TAIL`` of them would give a false onset more than once in
        ``LOSS_ARL`` iterations (a return to a known mode is no new level; a level beyond the modes'
        range is judged as any other)."""
        near = self._mode_runs(level, it)
        if not near:
            return 0
        # the longest dwell from the runs never declared (a slowdown declared and over is
        # no dwell: 1.5 times it would hide the next one); the mean from all of them
        longest = max((n for n, slow in near if not slow), default=0)
        # dwells with no memory (geometric, mean m): one in 1 / share lasts n or more.  The
        # share is per run, and a frequent mode has many: len(near) in MODE_WINDOW iterations,
        # so that a false onset comes at most once in LOSS_ARL iterations (the view on the
        # mean's rate), not once in 1 / MODE_TAIL of its runs
        m = sum(n for n, _ in near) / len(near)
        share = min(MODE_TAIL, MODE_WINDOW / (LOSS_ARL * len(near)))
        tail = 1 + math.ceil(math.log(share) / math.log(1.0 - 1.0 / m)) if m > 1.0 else 0
        return max(math.ceil(MODE_MARGIN * longest), tail)

    def _first_noise(self) -> None:
        """The noise of the first reference points (the level is their median)."""
        r = self._ref.median()
        for v in self._ref.fifo:
            self._dev.add(abs(v - r))
            self._spread.add(abs(v - r))
            self._difference(v)

    def _startup(self, it: int) -> bool:
        """Within the first ``startup_iters`` iterations of the segment's detection."""
        return self._first_it is not None and it - self._first_it < self.startup_iters

    def _lagged(self, it: int) -> float:
        """The healthy level as it was ``lag_iters`` iterations before ``it`` (its latest
        value at that iteration or earlier, since the latest episode), or inf (none)."""
        past, then = self._past, it - self.lag_iters
        while len(past) > 1 and past[1][0] <= then:
            past.popleft()
        return past[0][1] if past and past[0][0] <= then and self.lag_iters else math.inf

    def _healthy_point(self, y: float, it: int, secs: float) -> list[Alarm]:
        # a rise is judged against the healthy level and against that level a time-scale
        # ago, the lower of the two: rungs that the healthy level followed one by one add up
        now, lag = self._ref.median(), self._lagged(it)
        r = min(now, lag)
        st, inside = self._stretch, y >= r + self.mid
        if st is None:
            if not inside:
                return self._settle(y, it)
            st = self._stretch = _Stretch(up=True)
        st.add(y, inside, self._t, it, secs)
        alarms = self._trim(st, self._settle, it)
        if (self._stretch is None or not self._persists(st)
                or self._run_points() < self._mode_need(st.latest() - now, it)):
            return alarms
        # A step holds its level over the whole stretch; a ramp or a hump over its latest
        # half (in the start-up only a step is an onset: a gradual rise there is the start)
        n, startup, latest = len(st.pts), self._startup(it), st.latest()
        level = st.held() if startup else latest
        # slow against the healthy level, or else against the lagged reference
        slow = self._slow_enough(level - now, n) and self._clears(level - (now + self.mid), n)
        r = now if slow else lag
        k = st.first(r, latest)
        if ((slow or self._lag_slow(st, k, lag, level))
                and self._lasted(st, max(k, st.after_return(self._return_floor(r, latest))),
                                 max(r + self.mid, 0.5 * (r + st.inside_level())))
                and (not startup or self._step(st, k, n, latest))):
            if not self._known_mixture(st, r, level):
                return alarms + self._onset(st, r, level)
        return alarms + self._ramp(st, self._settle, it)  # a trend, not a step

    def _known_mixture(self, st: _Stretch, r: float, level: float) -> bool:
        """The candidate stretch is what the healthy mixture of modes draws: the healthy
        points of the latest ``MODE_HISTORY`` before it held ``MODE_RUNS`` points or more
        beyond the midpoint between ``r`` and ``level``, and ``MIX_SHARE`` of them (a mode
        already seen, not spikes), drawn afresh each point (``MIX_DRAWN``), and the
        stretch's share of points beyond it is within the binomial noise of their share
        (Chernoff's bound: ``n KL(share || healthy share) < log(MIX_ARL)``).  A shift of the
        mixture's weights, or of its modes, clears it; a stretch that only mixes known
        modes as often as they come waits for more points."""
        mid = 0.5 * (r + level)
        first = st.pts[0][3]
        n0 = k0 = k11 = 0
        prev = False
        for it, y, slow in self._hist:
            if it >= first:
                break
            if not slow:
                up = y >= mid
                n0 += 1
                k0 += up
                k11 += up and prev
                prev = up
        if k0 < MODE_RUNS or n0 < MIX_POINTS or k0 < MIX_SHARE * n0:
            return False
        # drawn afresh each point: a point beyond the midpoint follows one beyond it no
        # more often than MIX_DRAWN above the share (modes that dwell: the mode model's)
        if k11 / k0 > k0 / n0 + MIX_DRAWN:
            return False
        n1 = len(st.pts)
        q = sum(p[0] >= mid for p in st.pts) / n1
        return not share_clears(q, (k0 + 1.0) / (n0 + 2.0), n1)

    def _lag_slow(self, st: _Stretch, k: int, lag: float, level: float) -> bool:
        """Slow against the lagged reference ``lag`` (:meth:`_lagged`): the whole threshold
        above it (no tolerance for the level's estimate: the level a time-scale ago is one
        more estimate, and a schedule's steps or a wandering level can leave it lower),
        clearing its midpoint by ``confidence`` standard errors, and lasting twice as long
        as a stall from where it began (point ``k``: a burst on a level that rose is none)."""
        return (level - lag >= self.limit
                and self._clears(level - (lag + self.mid), len(st.pts))
                and st.in_it - st.pts[k][3] + 1 - (self._span - 1) > 2 * self.stall_iters)

    def _step(self, st: _Stretch, k: int, n: int, latest: float) -> bool:
        """In the start-up, a new level must be a step up from the points just before the
        stretch (not the end of a rise that a trend carried the healthy level along) and
        begin sharply (:meth:`_Stretch.sharp`)."""
        before = _median(self._settled) if self._settled else self._ref.median()
        return self._slow_enough(latest - before, n) and st.sharp(k, before, latest)

    def _return_floor(self, r: float, level: float) -> float:
        """Below this a point of a candidate stretch is back at the healthy level ``r``, not
        a low point of the new level ``level``: below the midpoint, nearer to ``r`` than to
        ``level``, and ``confidence`` noise scales below ``level``.  Bursts that come in
        clusters return there between them; a new level does not (``docs/detection.md``)."""
        s, _ = self._noise_model()
        return min(r + self.mid, 0.5 * (r + level), level - self.confidence * s)

    def _lasted(self, st: _Stretch, k: int, mid: float) -> bool:
        """The new level, from where it began (point ``k`` of the stretch, not the noise
        that opened the stretch before it) to its latest point beyond ``mid`` (the midpoint
        between the healthy level and the new one, as where it began: a noise point after a
        stall that is only beyond the slow limit does not make the stall longer), has
        lasted longer than a stall."""
        p = st.pts[k]
        end_it, end_cum = st.last_beyond(mid)
        # with one value per span iterations (a mean of them, maybe), the first and the last
        # value may each show only part of their span: a stall of stall_iters can reach
        # values span - 1 iterations further apart than it lasts
        iters = end_it - p[3] + 1 - (self._span - 1)
        return iters > self.stall_iters and end_cum - p[4] > self.stall_seconds

    def _slow_point(self, y: float, it: int, secs: float) -> list[Alarm]:
        e, st = self._episode.median(), self._stretch
        up, down = y >= e + self.mid, y <= e - self.mid or y < self._healthy + self.mid
        if st is None:
            if not (up or down):
                self._episode.add(y)
                return []
            st = self._stretch = _Stretch(up=up)
        st.add(y, up if st.up else down, self._t, it, secs)
        alarms = self._trim(st, self._in_episode, it)
        if self._stretch is None or not self._persists(st):
            return alarms
        if not st.up and self._taper(st, e):
            return alarms + self._trim(st, self._in_episode, it)
        held = st.held()
        if not st.up and held < self._healthy + self.limit:
            return alarms + self._recovery(st, e)
        if (held - e >= self.limit and self._clears(held - (e + self.mid), len(st.pts))
                if st.up else e - held >= self.limit):
            self._new_episode(st)
            pos, first = st.start(e, held)
            return alarms + [self._alarm("change", pos, first, math.exp(e), math.exp(held))]
        return alarms + self._ramp(st, self._in_episode, it)

    def _taper(self, st: _Stretch, e: float) -> bool:
        """A stretch down that began with the episode's last, lower points (the slow level
        easing off before it ended: two levels in one stretch) gives them back to the
        episode, so that the level it holds and where it began are the new level's; True
        when it gave any (the stretch is then judged again from its next point).  Held with
        them, the first half's mixture was the level a ``change`` went down to, while the
        episode took the second half's (back at the healthy level, say): a slow episode at
        the healthy level, whose end nothing could then declare."""
        k = st.first(e, st.latest())
        for _ in range(k):
            self._episode.add(st.pop())
        return k > 0

    def _persists(self, st: _Stretch) -> bool:
        """Longer than a stall, in iterations and in wall time, and than a run of spikes."""
        iters, secs = st.persisted()
        return (len(st.pts) >= self._needed and iters > self.stall_iters
                and secs > self.stall_seconds)

    def _difference(self, w: float) -> None:
        """A new healthy point: its difference to the one before."""
        if self._last_healthy == self._last_healthy:
            self._d1.append(w - self._last_healthy)
        self._last_healthy = w

    def _noise_model(self) -> tuple[float, float]:
        """The healthy noise: scale ``s`` and lag-1 autocorrelation ``phi`` (AR(1)).

        ``s`` is ``1.4826 MAD`` of the healthy points around the healthy level, ``phi``
        from the successive differences: ``Var(d) = 2 s^2 (1 - phi)``, ``1.4826 MAD`` around
        their median (a slow trend only shifts them).  While fewer than 32 points measure
        it (the first points after a warm-up, often still settling: a trend there would
        look like autocorrelation) ``s`` is taken one standard error wider and ``phi`` 0."""
        if self._noise_at == self._t:
            return self._noise
        m = len(self._dev.fifo)
        if not m:
            s, phi = math.inf, 0.0
        else:
            s, phi = 1.4826 * self._dev.median(), 0.0
            if m < NOISE_POINTS // 2:
                s *= 1.0 + 1.17 / math.sqrt(m)
            elif s > 0.0:
                sd = _mad(self._d1)
                phi = min(max(1.0 - sd * sd / (2.0 * s * s), 0.0), 0.9)
        self._noise_at, self._noise = self._t, (s, phi)
        return s, phi

    def _se(self, n: int, spread: bool = False) -> float:
        """Standard error of the median of ``n / 2`` points in the healthy noise
        (:meth:`_noise_model`); ``spread``: with the healthy points' whole spread as the
        scale (not winsorised: :meth:`_spread_scale`), for a median of healthy points."""
        s, phi = self._noise_model()
        if spread:
            s = max(s, self._spread_scale())
        if s <= 0.0 or s == math.inf:
            return s
        return 1.2533 * s * math.sqrt((1.0 + phi) / (1.0 - phi) / max(n // 2, 1))

    def _spread_scale(self) -> float:
        """``1.4826 MAD`` of the healthy points around the healthy level, not winsorised:
        the noise scale winsorised at the midpoint cannot exceed ``1.4826`` midpoints, so a
        series noisier than that (wide, right-skewed step times) looked no noisier."""
        m = len(self._spread.fifo)
        if not m:
            return math.inf
        s = 1.4826 * self._spread.median()
        return s * (1.0 + 1.17 / math.sqrt(m)) if m < NOISE_POINTS // 2 else s

    def _clears(self, gap: float, n: int) -> bool:
        """The new level clears the midpoint by ``confidence`` standard errors of the median
        of half the stretch, in the observed noise (scale and lag-1 autocorrelation)."""
        return gap > 0.0 and gap >= self.confidence * self._se(n)

    def _slow_enough(self, rise: float, n: int) -> bool:
        """A rise of at least ``threshold``, within the precision of its estimate: one
        standard error, at least a tenth and at most a quarter of the threshold (log)."""
        se = self._se(n)
        tol = min(max(se if se < math.inf else 0.0, 0.1 * self.limit), 0.25 * self.limit)
        return rise >= self.limit - tol


    def _points_for(self, p: float, q: float) -> int:
        """Points a level needs: a run of ``n`` spikes has chance ``p * q ** (n - 1)``."""
        alpha = self.spike_run_chance
        need = 1 if p <= alpha else 1 + math.ceil(math.log(alpha / p) / math.log(q))
        return max(self.min_points, need)

    def _trim(self, st: _Stretch, sink: Sink, it: int) -> list[Alarm]:
        """Drop the oldest points while too few are inside: a spike or stall that returned."""
        alarms: list[Alarm] = []
        while st.pts and (not st.pts[0][1] or st.n_inside < self.persist_fraction * len(st.pts)):
            alarms += sink(st.pop(), it)
        if not st.pts:
            self._stretch = None
        return alarms

    def _ramp(self, st: _Stretch, sink: Sink, it: int) -> list[Alarm]:
        """A stretch that has not reached a new level within ``ramp_iters`` (and the points
        the spike model asks for, which one value every few iterations takes longer to
        give) is a trend."""
        if (st.persisted()[0] <= self.ramp_iters
                or len(st.pts) < max(2 * self.min_points, self._needed)):
            return []
        self._stretch = None
        alarms: list[Alarm] = []
        for y in st.ys():  # (the slope view may declare an onset on the way: the rest is slow)
            alarms += (self._in_episode if self.slow and sink == self._settle else sink)(y, it)
        return alarms

    def _settle(self, y: float, it: int) -> list[Alarm]:
        """A healthy point (or a stall's): spike tally, noise, level (winsorised), drift."""
        r = self._ref.median()
        # a point at a healthy mode's height is no spike: the mode's dwell is its own model
        beyond = y >= r + self.mid
        mode = beyond and bool(self._mode_runs(y - r, it))
        inside = beyond and not mode
        w = min(y, r + self.mid)  # winsorised: a long stall cannot carry the level away
        # ... nor the first points of a new level, given back by a stretch that one low point
        # ended, make it look like no step from the points just before it (start-up)
        settled = self._settled
        settled.append(w)
        if len(settled) > WARM_POINTS:
            del settled[0]
        for tally in self._tallies:
            tally.add(inside | (self._prev_inside << 1))
        self._prev_inside = inside
        (p1, q1), (p2, q2) = (t.rates() for t in self._tallies)
        self._needed = self._points_for(max(p1, p2), max(q1, q2))
        if mode and y >= r + self.limit and self._spread_scale() <= self.mid:
            # a slower mode's point (a level of its own, in healthy points that spread less
            # than a midpoint: not wide noise): the healthy level stays the mode it left
            return []
        self._ref.add(w)
        self._dev.add(abs(w - r))
        self._spread.add(abs(y - r))
        self._difference(w)
        r, base = self._ref.median(), self._base
        self._past.append((it, r))
        held = self._held
        held.append((it, r))
        while held[0][0] < it - MODE_WINDOW:
            held.popleft()
        if self.rise_iters and not self._startup(it):
            rise = self._rise(r, it)
            if rise:
                return rise
        floor = self._floor
        if not self._startup(it):  # (the start-up's levels settle: none is the floor)
            while floor and floor[-1][2] >= r:
                floor.pop()
            floor.append((self._t, it, r))
            low = floor[0][2]
            if r - low >= DRIFT_ONSET * self.limit and it >= self._drift_next and (
                    r - low - (DRIFT_ONSET - 0.5) * self.limit >= math.sqrt(2.0)
                    * self.confidence * self._se(2 * self.reference_points, spread=True)):
                drifted = self._drifted(low, r, it)
                if drifted:
                    return drifted
        if not r >= base:  # lower, or the first level of the segment
            self._base = r
        elif r - base >= self.limit * (self._drifts + 1):
            self._drifts += 1  # once per threshold of rise above the lowest level
            return [self._alarm("drift", self._t, it, math.exp(base), math.exp(r))]
        return []

    def _drifted(self, low: float, r: float, it: int) -> list[Alarm]:
        """The healthy level has drifted ``DRIFT_ONSET`` thresholds above its lowest one
        since the start-up, however slowly: an onset where it last stood a threshold below its
        level now (the latest of the points below every later one that lay there), unless
        it has held this level before (:meth:`_held_before`) or healthy points visit it as a
        mode (:meth:`_mode_runs`): modes drawn at random move the median between them."""
        floor = self._floor
        k = bisect_left(floor, r - self.limit, key=lambda p: p[2])
        pos, first, _ = floor[max(k - 1, 0)]
        if self._held_before(r, first) or self._mode_runs(0.0, it):
            # a level it held before, or a healthy mode's height: no drift (asked again
            # reference_points iterations later)
            self._drift_next = it + self.reference_points
            return []
        self._episode = _Window(self.reference_points,
                                list(self._ref.fifo)[-(self.reference_points // 2):])
        self._ref = _Window(self.reference_points, [low] * self.reference_points)
        self._stretch = None
        # further drift is judged from the level now (the lowest since, once it falls)
        self._base, self._drifts = r, 0
        floor.clear()
        return self._declare(pos, first, low, r, it)

    def _rise(self, r: float, it: int) -> list[Alarm]:
        """The slope view: the healthy level has risen ``threshold`` above its lowest value
        of the latest ``rise_iters`` iterations (a ramp too gradual to open a stretch, or
        one that did not hold still within ``ramp_iters``): an onset at that lowest point."""
        lows = self._lows
        if lows is None:
            lows = self._lows = deque()
        while lows and lows[-1][2] >= r:
            lows.pop()
        lows.append((self._t, it, r))
        while lows[0][1] < it - self.rise_iters:
            lows.popleft()
        low = lows[0][2]
        rise = r - low
        # the full threshold (a scheduled drift rises by steps; only a rise of the whole
        # threshold within rise_iters is an onset), clearing the midpoint by confidence
        # standard errors of the difference of two medians of reference_points points
        n = 2 * self.reference_points
        if rise < self.limit or (rise - self.mid < math.sqrt(2.0) * self.confidence
                                 * self._se(n, spread=True)):
            return []
        # the rise began at the last of the sliding minima still near the lowest level
        pos, first, _ = next(p for p in reversed(lows) if p[2] <= low + 0.2 * self.limit)
        if self._held_before(r, first):
            return []
        self._episode = _Window(self.reference_points,
                                list(self._ref.fifo)[-(self.reference_points // 2):])
        self._ref = _Window(self.reference_points, [low] * self.reference_points)
        self._stretch = None
        lows.clear()
        return self._declare(pos, first, low, r, it)

    def _held_before(self, r: float, first: int) -> bool:
        """The healthy level ``r`` is one it has held before the rise began at ``first``, as
        long as it has held it since or longer (within a quarter of the threshold below it,
        at least ``reference_points`` iterations; within ``MODE_WINDOW`` iterations and
        since the latest episode): a median of healthy points that come in modes (batches
        of a few shapes drawn at random, a fast and a slow path) sits on the slower mode
        whenever it holds most of the latest points, and a return there is no rise."""
        band = r - 0.25 * self.limit
        longest = now = 0
        start = -1
        for it, level in self._held:
            if level >= band:
                if start < 0:
                    start = it
                now = it - start + 1
                if it < first:
                    longest = max(longest, now)
            else:
                start, now = -1, 0
        return longest >= max(now, self.reference_points)

    def _in_episode(self, y: float, it: int) -> list[Alarm]:
        self._episode.add(y)
        return []

    def _onset(self, st: _Stretch, r: float, level: float) -> list[Alarm]:
        self._new_episode(st)
        pos, first = st.start(r, level)
        return self._declare(pos, first, r, level, st.pts[-1][3])

    def _declare(self, pos: int, first: int, r: float, level: float, now: int
                 ) -> list[Alarm]:
        """A new slow episode from ``first`` (position ``pos``): onset, or flapping."""
        self.slow, self._healthy, self._slow_pos = True, r, pos
        self._past.clear()  # the lagged reference spans no episode
        self._held.clear()  # ... nor the memory of the healthy levels
        self._slow_spans.append((first, -1))
        window = first - self.flap_window_iters
        while self._onsets and self._onsets[0] < window:
            self._onsets.popleft()
        while self._slow_spans and 0 <= self._slow_spans[0][1] < window:
            self._slow_spans.popleft()
        self._onsets.append(first)
        if self._flapping:
            if not self._flap_over(first):
                return []
            # healthy far longer than between its phases: the flapping ended at its latest
            # recovery, and this is a new episode of its own
            return self._unfold(pos, first, r, level)
        # flapping alternates alike slow and healthy phases: episodes that leave the rank
        # healthy most of the time, or unlike each other, are separate episodes, each its
        # own onset (folding them would hide a slowdown that comes after them)
        if (len(self._onsets) < self.flap_episodes
                or self._slow_fraction(now) < FLAP_SHARE or not self._alike()):
            return [self._alarm("onset", pos, first, math.exp(r), math.exp(level))]
        self._flapping, self._flap_recovery = True, None
        return [self._alarm("flapping", pos, first, math.exp(r), math.exp(level),
                            frac=self._slow_fraction(now), since=self._onsets[0])]

    def _unfold(self, pos: int, first: int, r: float, level: float) -> list[Alarm]:
        """The episode from ``first`` is no phase of the flapping: the flapping ended at its
        latest recovery (said now), and the episode is an onset of its own."""
        self._flapping, rec = False, self._flap_recovery
        self._onsets = deque([first])
        self._slow_spans = deque([self._slow_spans[-1]])
        if rec is None:  # the episode that made it flapping stayed slow: said as at the end
            return [self._alarm("change", self._t, self._last_it, math.exp(r), math.exp(level),
                                note="steady", frac=self._slow_fraction(self._last_it))]
        return [self._alarm("recovery", rec[0], rec[1], rec[2], rec[3], note="flapping"),
                self._alarm("onset", pos, first, math.exp(r), math.exp(level))]

    def _alike(self) -> bool:
        """The window's finished slow episodes are alike, as a flapping's slow phases are:
        the longest lasted at most ``FLAP_GAP`` times the shortest (a long slowdown among
        short episodes is no phase of a cycle)."""
        spans = [b - a for a, b in self._slow_spans if b >= 0]
        return not spans or max(spans) <= FLAP_GAP * max(min(spans), 1)

    def _outlasts(self, it: int) -> bool:
        """The open episode has lasted ``FLAP_GAP`` times the flapping's longest slow phase:
        it is no phase of it."""
        spans = self._slow_spans
        longest = max((b - a for a, b in list(spans)[:-1] if b >= 0), default=0)
        return longest > 0 and it - spans[-1][0] > FLAP_GAP * longest

    def _flap_over(self, first: int) -> bool:
        """The healthy gap before the episode from ``first`` is ``FLAP_GAP`` times the
        longest one between the flapping's earlier episodes (its fast phases), or longer."""
        spans = list(self._slow_spans)[:-1]
        if len(spans) < 2 or spans[-1][1] < 0:
            return False
        gaps = [b[0] - a[1] for a, b in zip(spans, spans[1:], strict=False) if a[1] >= 0]
        return bool(gaps) and first - spans[-1][1] > FLAP_GAP * max(max(gaps), 1)

    def _new_episode(self, st: _Stretch) -> None:
        """The episode level from the confirming stretch's second half."""
        ys = st.ys()
        self._episode = _Window(self.reference_points, ys[len(ys) // 2:])
        self._stretch = None

    def _recovery(self, st: _Stretch, e: float) -> list[Alarm]:
        self.slow, self._stretch = False, None
        (_, _, pos, first, _), ys = st.pts[0], st.ys()
        self._slow_spans[-1] = (self._slow_spans[-1][0], first)
        for v in ys:
            self._ref.add(v)
        if self._flapping:  # folded in; said if the flapping ends at it (_flap_over)
            self._flap_recovery = (pos, first, math.exp(e), math.exp(_median(ys)))
            return []
        return [
            self._alarm("recovery", pos, first, math.exp(e), math.exp(_median(ys)))]

    def _end_episode(self, end: int) -> None:
        """The open episode ended at iteration ``end`` (said by the folded view)."""
        self.slow, self._stretch = False, None
        self._slow_spans[-1] = (self._slow_spans[-1][0], end)

    def _slow_fraction(self, now: int) -> float:
        slow = sum((now if end < 0 else end) - first for first, end in self._slow_spans)
        return round(min(1.0, slow / max(now - self._slow_spans[0][0], 1)), 4)

    def _alarm(self, kind: str, pos: int, it: int, before: float, after: float, *,
               frac: float | None = None, note: str = "", since: int | None = None) -> Alarm:
        frozen = self.slow or kind in ("recovery", "change")
        healthy = math.exp(self._healthy if frozen else self._ref.median())
        severity = max(0.0, 1.0 - healthy / after) if after == after and after > 0 else 0.0
        return Alarm(kind=kind, index=pos, declared_at=self._t, level_before=before,
                     level_after=after, healthy_level=healthy, severity=severity,
                     iteration=it, slow_fraction=frac, note=note, since=since)


@dataclass(frozen=True)
class RobustSettings:
    """The default detector's parameters a user sets (None: its default) and the minimum
    warm-up of the watcher (``warmup_iters``; None: the detector's), for ``watch`` and the
    service (``stragglers serve``). Units and meanings: ``docs/detection.md``."""

    threshold: float | None = None
    stall_iters: int | None = None
    stall_seconds: float | None = None
    min_points: int | None = None
    ramp_iters: int | None = None
    rise_iters: int | None = None
    startup_iters: int | None = None
    flap_window_iters: int | None = None
    warmup_iters: int | None = None

    def detector(self) -> RobustLevelDetector:
        """A new detector with these parameters (ValueError for a bad combination)."""
        kw = {f.name: getattr(self, f.name) for f in fields(self)
              if f.name != "warmup_iters" and getattr(self, f.name) is not None}
        return RobustLevelDetector(**kw)
