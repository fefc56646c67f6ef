"""The default fail-slow detector: robust levels on log time, with its nuisances modelled.

The whole model is on one page (``docs/detection.md``); in short:

* **Levels.**  A rank's iteration time is a level per regime times noise, on log time
  ``y = log(seconds)``.  The healthy level ``r`` is the median of the latest
  ``reference_points`` points that were judged healthy (a robust estimate: heavy-tailed noise
  and spikes up to half the window do not move it).  It follows a slow trend by itself.
* **Slow** means a level at least ``threshold`` above the healthy level (``log(1 +
  threshold)`` on log time).  Each point is compared with the midpoint ``log(1 + threshold) /
  2``: a point beyond it is *inside* a candidate stretch.
* **Stretches, not points.**  A candidate opens at the first point beyond the midpoint and
  keeps its latest points while at least ``persist_fraction`` of them are inside (noise may
  dip); the oldest points leave it otherwise (they were a spike or a stall).  It is confirmed
  when it *persists*: it covers more than ``stall_iters`` iterations (counted with the
  iteration numbers, so a log with one value every k iterations, or k-iteration means, is
  judged in iterations), more than ``stall_seconds`` of wall time, and at least
  ``min_points`` points; and its median is at least ``log(1 + threshold)`` from the level it
  left.  A run of at most ``stall_iters`` iterations that returns (a spike, an asynchronous
  checkpoint or evaluation stall) is therefore never a level, however high.
* **Drift is not an onset.**  A candidate that has not reached the slow level within
  ``ramp_iters`` iterations of its start is a slow trend: its points become healthy ones and
  the healthy level moves with them.  When the healthy level has risen ``threshold`` above its
  lowest value of the segment, one ``drift`` event says so, and one more for each further
  ``threshold`` of rise (information, not an alert).
* **Episodes.**  While slow, the healthy level is frozen and the episode level ``e`` is the
  median of the episode's latest points.  A confirmed stretch below the slow limit is the
  ``recovery``; a confirmed stretch ``threshold`` above or below ``e`` that stays slow is a
  ``change``: a later, worse slowdown is reported even while an earlier episode is open.
* **Flapping.**  ``flap_episodes`` onsets within ``flap_window_iters`` iterations are one
  ``flapping`` event, at the start of the episode that makes it flapping, with the iteration
  of the first (``since``) and the share of the iterations since then that were slow; until
  no onset has come for ``flap_window_iters`` iterations the onsets and recoveries inside it
  are folded into it, and a ``recovery`` ends it.
* **Segments.**  A restart, resume or gap (the watcher decides: iteration number going back,
  a timestamp gap not explained by the iteration times, a run of missing values) starts a new
  segment: the caller's warm-up runs again and :meth:`RobustLevelDetector.new_segment`
  forgets every level (an open episode ends with a ``recovery`` noted ``segment``): a job
  that comes back on other nodes or another partition has a new healthy level.

Every parameter has a unit and a meaning (see ``__init__``); the defaults and the values
chosen on the tuning families are in ``TUNING_GRID`` and the README.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque

from stragglers.detect.bocd import Alarm

__all__ = ["RobustLevelDetector", "TUNING_GRID"]

SPIKE_POINTS = (256, 32)  # healthy points behind the spike rates (long, short window)
NOISE_POINTS = 64  # healthy points behind the noise scale and its autocorrelation
SPIKE_PRIOR = (0.5, 10.0)  # Beta prior of both rates (pseudo-counts: beyond, not beyond)


class _SpikeTally:
    """Counts over the latest ``size`` healthy points: beyond the midpoint, the previous one
    beyond, both (a first-order Markov chain of spikes)."""

    __slots__ = ("codes", "n1", "np", "n11")

    def __init__(self, size: int) -> None:
        self.codes: deque[int] = deque(maxlen=size)
        self.n1 = self.np = self.n11 = 0

    def add(self, inside: bool, prev: bool) -> None:
        codes = self.codes
        if len(codes) == codes.maxlen:
            old = codes[0]
            self.n1 -= old & 1
            self.np -= old >> 1
            self.n11 -= old == 3
        code = inside | (prev << 1)
        codes.append(code)
        self.n1 += inside
        self.np += prev
        self.n11 += code == 3

    def rates(self) -> tuple[float, float]:
        """``p`` = P(beyond), ``q`` = P(beyond | the previous point beyond)."""
        a, b = SPIKE_PRIOR
        return ((self.n1 + a) / (len(self.codes) + a + b), (self.n11 + a) / (self.np + a + b))

#: Named settings searched by the leave-one-family-out evaluation (``detect-eval --lofo``).
TUNING_GRID: tuple[tuple[str, dict[str, object]], ...] = (
    ("default", {}),
    ("stall6", {"stall_iters": 6}),
    ("stall12", {"stall_iters": 12}),
    ("points4", {"min_points": 4}),
    ("ramp30", {"ramp_iters": 30}),
    ("ramp120", {"ramp_iters": 120}),
)


class _Window:
    """The latest ``size`` values in arrival order and sorted (median in O(1))."""

    __slots__ = ("fifo", "sorted")

    def __init__(self, size: int) -> None:
        self.fifo: deque[float] = deque(maxlen=size)
        self.sorted: list[float] = []

    def add(self, y: float) -> None:
        if len(self.fifo) == self.fifo.maxlen:
            del self.sorted[bisect_left(self.sorted, self.fifo[0])]
        self.fifo.append(y)
        insort(self.sorted, y)

    def median(self) -> float:
        s = self.sorted
        m = len(s) // 2
        return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])

    def clear(self) -> None:
        self.fifo.clear()
        self.sorted.clear()


class _Stretch:
    """A candidate: consecutive points, the first of them inside (beyond the midpoint)."""

    __slots__ = ("up", "ys", "inside", "pos", "its", "cum", "n_inside", "total", "in_it",
                 "in_cum")

    def __init__(self, up: bool) -> None:
        self.up = up
        self.ys: deque[float] = deque()
        self.inside: deque[bool] = deque()
        self.pos: deque[int] = deque()
        self.its: deque[int] = deque()
        self.cum: deque[float] = deque()  # wall seconds before each point (running total)
        self.n_inside = 0
        self.total = 0.0
        self.in_it = 0  # iteration and running seconds at the end of the latest inside point
        self.in_cum = 0.0

    def add(self, y: float, inside: bool, pos: int, it: int, secs: float) -> None:
        self.ys.append(y)
        self.inside.append(inside)
        self.pos.append(pos)
        self.its.append(it)
        self.cum.append(self.total)
        self.total += secs
        self.n_inside += inside
        if inside:
            self.in_it, self.in_cum = it, self.total

    def pop(self) -> float:
        self.n_inside -= self.inside.popleft()
        self.pos.popleft()
        self.its.popleft()
        self.cum.popleft()
        return self.ys.popleft()

    def iterations(self) -> int:
        """Iterations from its first point to its latest inside point."""
        return self.in_it - self.its[0] + 1

    def seconds(self) -> float:
        return self.in_cum - self.cum[0]

    def level(self) -> float:
        return _median(list(self.ys))

    def held(self) -> float:
        """The level the stretch holds: the medians of its first and second halves must both
        reach a new level (a step has both there; a trend or a settling hump has not), so the
        lower of the two for a rise and the higher for a fall."""
        ys = list(self.ys)
        h = len(ys) // 2
        if not h:
            return ys[0]
        a, b = _median(ys[:h]), _median(ys[h:])
        return min(a, b) if self.up else max(a, b)


    def start(self, before: float, level: float) -> int:
        """Where the new level began: its first point beyond the midpoint between the level
        it left and the new one (noise just before a step opens the stretch early)."""
        mid = 0.5 * (before + level)
        for k, y in enumerate(self.ys):
            if (y >= mid) if self.up else (y <= mid):
                return k
        return 0


def _median(v: list[float]) -> float:
    s = sorted(v)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])


class RobustLevelDetector:
    """Streaming detector of one rank (model in the module docstring)."""

    name = "robust"
    #: Warm-up the watcher applies before this detector (iterations at least, then until the
    #: level settles), at the start and after every segment boundary.
    default_warmup_iters = 20

    def __init__(
        self,
        *,
        threshold: float = 0.10,
        stall_iters: int = 8,
        stall_seconds: float = 0.0,
        min_points: int = 3,
        persist_fraction: float = 0.8,
        ramp_iters: int = 60,
        reference_points: int = 32,
        flap_episodes: int = 3,
        flap_window_iters: int = 1000,
        spike_run_chance: float = 1e-4,
        confidence: float = 2.0,
    ) -> None:
        """``threshold``: relative slowdown that is reported (0.10: iterations 10 % slower);
        ``stall_iters`` / ``stall_seconds``: a run of elevated points lasting at most this many
        iterations, or seconds of wall time, that returns is a stall, not a level;
        ``min_points``: the fewest points behind a decision; ``persist_fraction``: share of a
        stretch's points that must lie beyond the midpoint; ``ramp_iters``: iterations within
        which a change must reach the slow level, or it is a drift; ``reference_points``:
        points behind the healthy (and episode) level; ``flap_episodes`` onsets within
        ``flap_window_iters`` iterations are flapping; ``spike_run_chance``: the chance, per
        start, that a run of spikes is taken for a level (sets the points needed from the
        observed spike rate); ``confidence``: standard errors (of the median of half the
        stretch, in the observed noise) by which a new level must clear the midpoint."""
        if not 0.0 < threshold < 10.0:
            raise ValueError(f"threshold must be in (0, 10), got {threshold}")
        if stall_iters < 0 or min_points < 1 or ramp_iters < 1 or reference_points < 3:
            raise ValueError("stall_iters >= 0, min_points >= 1, ramp_iters >= 1 and "
                             "reference_points >= 3")
        if not 0.5 <= persist_fraction <= 1.0:
            raise ValueError(f"persist_fraction must be in [0.5, 1], got {persist_fraction}")
        if stall_seconds < 0 or flap_episodes < 2 or flap_window_iters < 1:
            raise ValueError("stall_seconds >= 0, flap_episodes >= 2, flap_window_iters >= 1")
        self.threshold = float(threshold)
        self.limit = math.log1p(threshold)
        self.mid = 0.5 * self.limit
        self.stall_iters = int(stall_iters)
        self.stall_seconds = float(stall_seconds)
        self.min_points = int(min_points)
        self.persist_fraction = float(persist_fraction)
        self.ramp_iters = int(ramp_iters)
        self.reference_points = int(reference_points)
        self.min_reference = max(self.min_points, 5)
        self.flap_episodes = int(flap_episodes)
        self.flap_window_iters = int(flap_window_iters)
        if not 0.0 < spike_run_chance < 1.0:
            raise ValueError(f"spike_run_chance must be in (0, 1), got {spike_run_chance}")
        self.spike_run_chance = float(spike_run_chance)
        if not confidence >= 0.0:
            raise ValueError(f"confidence must be >= 0, got {confidence}")
        self.confidence = float(confidence)
        self._t = -1
        self._reset()

    # -- segments -----------------------------------------------------------------------------
    def new_segment(self) -> list[Alarm]:
        """Forget every level (a restart or resume).  An open episode ends here."""
        alarms: list[Alarm] = []
        if self.slow or self._flapping:
            e = math.exp(self._episode.median()) if self._episode.fifo else math.nan
            alarms.append(self._alarm("recovery", self._t, self._last_it, e, e, note="segment"))
        self._reset()
        return alarms

    def _reset(self) -> None:
        self._ref = _Window(self.reference_points)
        self._dev = _Window(NOISE_POINTS)  # |healthy point - healthy level|
        self._diff = _Window(NOISE_POINTS)  # |healthy point - the healthy point before|
        self._last_healthy = math.nan
        self._episode = _Window(self.reference_points)
        self._stretch: _Stretch | None = None
        self.slow = False
        self._healthy = math.nan  # frozen healthy level (log) during an episode
        self._base = math.nan  # lowest healthy level of the segment
        self._drifts = 0  # drift events of the segment
        self._onsets: deque[int] = deque()  # onset iterations (flapping window)
        self._tallies = (_SpikeTally(SPIKE_POINTS[0]), _SpikeTally(SPIKE_POINTS[1]))
        self._prev_inside = False
        self._needed = self._points_for(*self._tallies[0].rates())
        self._slow_spans: deque[tuple[int, int]] = deque()  # (first, end) of slow episodes
        self._flapping = False
        self._last_it = self._t

    # -- the stream ---------------------------------------------------------------------------
    def update(self, x: float) -> list[Alarm]:
        """One iteration time of a series without iteration numbers (position = iteration)."""
        return self.observe(x, self._t + 1, 1)

    def observe(self, x: float, iteration: int, span: int = 1) -> list[Alarm]:
        """One point: ``x`` seconds per iteration at job iteration ``iteration``, covering
        ``span`` iterations since the previous point (a log that reports every k-th
        iteration, or k-iteration means: ``span = k``)."""
        if not (x > 0.0 and math.isfinite(x)):
            raise ValueError(f"{self.name} needs positive finite iteration times, got {x}")
        self._t += 1
        self._last_it = iteration
        y = math.log(x)
        secs = x * max(span, 1)
        if len(self._ref.fifo) < self.min_reference:
            self._ref.add(y)
            return []
        alarms = self._slow_point(y, iteration, secs) if self.slow else self._healthy_point(
            y, iteration, secs)
        if self._flapping and iteration - self._onsets[-1] >= self.flap_window_iters:
            # No onset for a whole window: over (healthy), or steadily slow (a change).
            self._flapping = False
            frac = self._slow_fraction(iteration)
            e = math.exp(self._episode.median())
            r = math.exp(self._healthy)
            alarms.append(self._alarm("change", self._t, iteration, r, e, frac=frac,
                                      note="steady") if self.slow else
                          self._alarm("recovery", self._t, iteration, e, r, frac=frac,
                                      note="flapping"))
        return alarms

    def _healthy_point(self, y: float, it: int, secs: float) -> list[Alarm]:
        r = self._ref.median()
        st = self._stretch
        inside = y >= r + self.mid
        if st is None:
            if not inside:
                return self._settle(y, it)
            st = self._stretch = _Stretch(up=True)
        st.add(y, inside, self._t, it, secs)
        alarms = self._trim(st, self._settle, it)
        if self._stretch is None or not self._persists(st):
            return alarms
        held = st.held()
        if held >= r + self.limit and self._clears(held - (r + self.mid), len(st.ys)):
            return alarms + self._onset(st, r, held)
        if st.iterations() > self.ramp_iters and len(st.ys) >= 2 * self.min_points:
            alarms += self._absorb(self._settle, it)  # a trend, not a step
        return alarms

    def _slow_point(self, y: float, it: int, secs: float) -> list[Alarm]:
        e = self._episode.median()
        st = self._stretch
        if st is None:
            if y >= e + self.mid:
                st = self._stretch = _Stretch(up=True)
            elif y <= e - self.mid or y < self._healthy + self.mid:
                st = self._stretch = _Stretch(up=False)
            else:
                self._episode.add(y)
                return []
        inside = y >= e + self.mid if st.up else (y <= e - self.mid
                                                  or y < self._healthy + self.mid)
        st.add(y, inside, self._t, it, secs)
        alarms = self._trim(st, self._in_episode, it)
        if self._stretch is None or not self._persists(st):
            return alarms
        held = st.held()
        if not st.up and held < self._healthy + self.limit:
            return alarms + self._recovery(st, e, st.level())
        if (held - e >= self.limit and self._clears(held - (e + self.mid), len(st.ys))
                if st.up else e - held >= self.limit):
            self._new_episode(st)
            k = st.start(e, held)
            return alarms + [self._alarm("change", st.pos[k], st.its[k], math.exp(e),
                                         math.exp(held))]
        if st.iterations() > self.ramp_iters and len(st.ys) >= 2 * self.min_points:
            alarms += self._absorb(self._in_episode, it)
        return alarms

    # -- pieces -------------------------------------------------------------------------------
    def _persists(self, st: _Stretch) -> bool:
        """Longer than a stall in iterations and wall time, and more points than a run of
        spikes would give by chance (:meth:`_points_for`)."""
        return (len(st.ys) >= self._needed and st.iterations() > self.stall_iters
                and st.seconds() > self.stall_seconds)

    def _clears(self, gap: float, n: int) -> bool:
        """The new level clears the midpoint by ``confidence`` standard errors of the median
        of half the stretch.  The noise scale is ``1.4826 * MAD`` of the latest healthy
        points; autocorrelated noise (a level that wanders) is slower to average out: with
        lag-1 autocorrelation ``phi`` (from the MAD of successive differences, ``Var(d) =
        2 s^2 (1 - phi)``) the standard error grows by ``sqrt((1 + phi) / (1 - phi))``."""
        if len(self._dev.fifo) < NOISE_POINTS // 4:
            return True  # too few healthy points to know the noise: persistence decides
        s = 1.4826 * self._dev.median()
        if s <= 0.0:
            return gap > 0.0
        phi = 0.0
        if self._diff.fifo:
            sd = 1.4826 * self._diff.median()
            phi = min(max(1.0 - sd * sd / (2.0 * s * s), 0.0), 0.9)
        se = 1.2533 * s * math.sqrt((1.0 + phi) / (1.0 - phi) / max(n // 2, 1))
        return gap >= self.confidence * se

    def _points_for(self, p: float, q: float) -> int:
        """Points a level needs.  Healthy points beyond the midpoint (spikes, stalls, noise
        excursions) as a first-order Markov chain: ``p`` = P(beyond), ``q`` = P(beyond | the
        point before beyond), each with a Beta(0.5, 10) prior (about one in twenty before
        any is seen) and the larger of its estimates over the latest 256 and 32 healthy
        points (it rises as soon as the noise does).  A run of ``n`` has chance
        ``p * q ** (n - 1)``; a level needs ``n`` with that at most ``spike_run_chance``."""
        alpha = self.spike_run_chance
        need = 1 if p <= alpha else 1 + math.ceil(math.log(alpha / p) / math.log(q))
        return max(self.min_points, need)

    def _trim(self, st: _Stretch, sink: object, it: int) -> list[Alarm]:
        """Drop the stretch's oldest points while too few of them are inside (they were a
        spike or a stall that returned); they go to ``sink`` (the healthy or episode level)."""
        alarms: list[Alarm] = []
        q = self.persist_fraction
        while st.ys and (not st.inside[0] or st.n_inside < q * len(st.ys)):
            y = st.pop()
            alarms += sink(y, it)  # type: ignore[operator]
        if not st.ys:
            self._stretch = None
        return alarms

    def _absorb(self, sink: object, it: int) -> list[Alarm]:
        st = self._stretch
        assert st is not None
        self._stretch = None
        alarms: list[Alarm] = []
        for y in st.ys:
            alarms += sink(y, it)  # type: ignore[operator]
        return alarms

    def _settle(self, y: float, it: int) -> list[Alarm]:
        """A healthy point (or one of a stall that returned): into the spike tally and,
        winsorised at the midpoint, into the reference; a risen reference is a drift."""
        r = self._ref.median()
        inside = y >= r + self.mid
        long, short = self._tallies
        long.add(inside, self._prev_inside)
        short.add(inside, self._prev_inside)
        self._prev_inside = inside
        (p1, q1), (p2, q2) = long.rates(), short.rates()
        self._needed = self._points_for(max(p1, p2), max(q1, q2))
        w = min(y, r + self.mid)  # winsorised: a long stall cannot carry the level away
        self._ref.add(w)
        self._dev.add(abs(w - r))
        if self._last_healthy == self._last_healthy:
            self._diff.add(abs(w - self._last_healthy))
        self._last_healthy = w
        r = self._ref.median()
        base = self._base
        if not r >= base:  # lower, or the first level of the segment
            self._base = r
        elif r - base >= self.limit * (self._drifts + 1):
            self._drifts += 1  # once per threshold of rise above the lowest level
            return [self._alarm("drift", self._t, it, math.exp(base), math.exp(r))]
        return []

    def _in_episode(self, y: float, it: int) -> list[Alarm]:
        self._episode.add(y)
        return []

    def _onset(self, st: _Stretch, r: float, level: float) -> list[Alarm]:
        self.slow = True
        self._healthy = r
        self._new_episode(st)
        k = st.start(r, level)
        first, pos = st.its[k], st.pos[k]
        self._slow_spans.append((first, -1))
        window = first - self.flap_window_iters
        while self._onsets and self._onsets[0] < window:
            self._onsets.popleft()
        while self._slow_spans and 0 <= self._slow_spans[0][1] < window:
            self._slow_spans.popleft()
        self._onsets.append(first)
        if self._flapping:
            return []
        if len(self._onsets) >= self.flap_episodes:
            self._flapping = True
            return [self._alarm("flapping", pos, first, math.exp(r), math.exp(level),
                                frac=self._slow_fraction(st.its[-1]), since=self._onsets[0])]
        return [self._alarm("onset", pos, first, math.exp(r), math.exp(level))]

    def _new_episode(self, st: _Stretch) -> None:
        """The episode level from the second half of the stretch that confirmed it (its
        first half may hold the stall or spike it started with)."""
        self._episode.clear()
        ys = list(st.ys)
        for v in ys[len(ys) // 2:]:
            self._episode.add(v)
        self._stretch = None

    def _recovery(self, st: _Stretch, e: float, level: float) -> list[Alarm]:
        self.slow = False
        first = st.its[0]
        if self._slow_spans:
            self._slow_spans[-1] = (self._slow_spans[-1][0], first)
        self._stretch = None
        for v in st.ys:
            self._ref.add(v)
        if self._flapping:
            return []
        return [self._alarm("recovery", st.pos[0], first, math.exp(e), math.exp(level))]

    def _slow_fraction(self, now: int) -> float:
        if not self._slow_spans:
            return 0.0
        start = self._slow_spans[0][0]
        slow = sum((now if end < 0 else end) - first for first, end in self._slow_spans)
        return round(min(1.0, slow / max(now - start, 1)), 4)

    def _alarm(self, kind: str, pos: int, it: int, before: float, after: float, *,
               frac: float | None = None, note: str = "", since: int | None = None) -> Alarm:
        frozen = self.slow or kind in ("recovery", "change")
        h = self._healthy if frozen else self._ref.median() if self._ref.fifo else math.nan
        healthy = math.exp(h)
        severity = max(0.0, 1.0 - healthy / after) if after == after and after > 0 else 0.0
        return Alarm(kind=kind, index=pos, declared_at=self._t, level_before=before,
                     level_after=after, healthy_level=healthy, severity=severity,
                     iteration=it, slow_fraction=frac, note=note, since=since)
