"""Labelled synthetic corpus of iteration-time series for the detection benchmark.

Every series is ``base_s * level[t] * exp(noise[t]) * spike[t]`` (seconds per iteration):

* ``noise`` is AR(1) Gaussian jitter in log space with stationary standard deviation ``jitter``
  (1-3 % for single-node computation jobs, 2-5 % for multi-node communication jobs, cf. the CoVs
  of Falcon Table 2) and lag-1 correlation ``phi`` drawn from [0, 0.3];
* ``spike`` is 1 except on rare single iterations (checkpointing, evaluation): each iteration is a
  spike with probability ``spike_rate`` (1/2000 - 1/300 per iteration, in about half of the series)
  and then takes 1.5x - 4x longer;
* ``level`` is the noise-free slowdown factor, 1 when healthy.  A throughput loss ``l`` means
  ``level = 1 / (1 - l)``.

Scenarios (``Series.scenario``):

``jitter`` / ``spikes``
    Healthy job, no event.
``drift_minor``
    MFU decline that ends below 10 % throughput loss (2 - 6 %): no event, a detector should stay
    silent.
``step``
    One slow period with a constant loss: 10 - 50 % and 30 s - 1 h for computation fail-slows
    (GPU throttling, CPU contention), 10 - 90 % and 30 s - 10 h for communication fail-slows
    (congestion).  Durations are wall-clock seconds of the slow period (log-uniform); a draw that
    would give fewer than ``MIN_EVENT_ITERS`` slow iterations is redrawn (a shorter slowdown is
    indistinguishable from a spike).
``ladder``
    2-4 successive increases (first loss 10 - 40 %, each further step makes iterations 1.15x -
    1.6x slower), then a return to healthy, in one step or down the same ladder.
``compound``
    A communication slowdown and an overlapping computation slowdown (levels multiply), Falcon
    Fig. 6.
``multi``
    Two separate slow periods.
``drift``
    Gradual MFU decline (linear ramp of ``level`` over 1000 - 6000 iterations) to a final loss of
    15 - 40 %, which then persists.

Labels (:class:`Event`).  ``onset`` is the first iteration whose noise-free loss is at least
``EVENT_LOSS`` (10 %): the first slow iteration for step-like events, the point where the ramp
crosses 10 % for a drift.  ``end`` is the first iteration after the slow period
(``len(series)`` if it lasts to the end).  Overlapping slowdowns of a compound event form one
event.  ``match_from`` is the earliest alarm position that counts as detecting the event:
``onset - LOCATION_TOLERANCE`` for step-like events, the start of the ramp for a drift.
``loss`` is the loss at the onset (first step), ``peak_loss`` the largest loss in the event.

The corpus is fully determined by the seed; nothing in it depends on the detectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

__all__ = [
    "EVENT_LOSS",
    "Event",
    "LOCATION_TOLERANCE",
    "MIN_EVENT_ITERS",
    "SCENARIOS",
    "Series",
    "generate_corpus",
    "generate_series",
]

EVENT_LOSS = 0.10
LOCATION_TOLERANCE = 5
MIN_EVENT_ITERS = 15

# (family, scenario, count) of the default corpus.  Computation ~ Falcon Table 4 (single-node
# jobs, mostly healthy), communication ~ Table 5 (multi-node jobs, frequent congestion).
SCENARIOS: tuple[tuple[str, str, int], ...] = (
    ("computation", "jitter", 100),
    ("computation", "spikes", 60),
    ("computation", "drift_minor", 10),
    ("computation", "step", 50),
    ("computation", "drift", 20),
    ("communication", "jitter", 20),
    ("communication", "spikes", 20),
    ("communication", "step", 50),
    ("communication", "ladder", 30),
    ("communication", "compound", 25),
    ("communication", "multi", 15),
)


@dataclass(frozen=True)
class Event:
    """Ground truth of one slow period (positions are 0-based iteration indices)."""

    onset: int
    end: int
    match_from: int
    loss: float
    peak_loss: float
    kind: str
    duration_s: float


@dataclass(frozen=True)
class Series:
    """One labelled iteration-time series."""

    name: str
    family: str
    scenario: str
    values: np.ndarray
    events: tuple[Event, ...]
    base_s: float
    jitter: float

    @property
    def positive(self) -> bool:
        return bool(self.events)


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _slow_iters(rng: np.random.Generator, base: float, loss: float, dur_lo: float,
                dur_hi: float) -> tuple[int, float]:
    """Draw a wall-clock duration and convert it to a number of slow iterations (>= minimum)."""
    for _ in range(1000):
        dur = _loguniform(rng, dur_lo, dur_hi)
        n = int(round(dur * (1.0 - loss) / base))
        if n >= MIN_EVENT_ITERS:
            return n, dur
    raise RuntimeError("cannot draw a slow period long enough")  # pragma: no cover


class _Builder:
    def __init__(self, rng: np.random.Generator, family: str) -> None:
        self.rng = rng
        self.family = family
        lo, hi = (0.3, 1.5) if family == "computation" else (0.8, 4.0)
        self.base = _loguniform(rng, lo, hi)
        self.segments: list[np.ndarray] = []
        self.events: list[Event] = []

    @property
    def pos(self) -> int:
        return int(sum(s.size for s in self.segments))

    def healthy(self, lo: int, hi: int) -> None:
        self.segments.append(np.ones(int(self.rng.integers(lo, hi + 1))))

    def add(self, levels: np.ndarray) -> None:
        self.segments.append(np.asarray(levels, float))

    def event(self, start: int, levels: np.ndarray, kind: str, duration_s: float) -> None:
        loss = 1.0 - 1.0 / levels
        crossing = np.flatnonzero(loss >= EVENT_LOSS - 1e-12)
        onset = start + int(crossing[0])
        match_from = start if kind == "drift" else onset - LOCATION_TOLERANCE
        slow = np.flatnonzero(levels > 1.0 + 1e-12)
        end = start + int(slow[-1]) + 1
        self.events.append(Event(
            onset=onset, end=end, match_from=match_from, loss=float(loss[crossing[0]]),
            peak_loss=float(loss.max()), kind=kind, duration_s=float(duration_s),
        ))


def _step_levels(b: _Builder, loss_hi: float, dur_hi: float) -> tuple[np.ndarray, float]:
    loss = float(b.rng.uniform(EVENT_LOSS, loss_hi))
    n, dur = _slow_iters(b.rng, b.base, loss, 30.0, dur_hi)
    return np.full(n, 1.0 / (1.0 - loss)), dur


def _ladder_levels(b: _Builder) -> tuple[np.ndarray, float]:
    rng = b.rng
    steps = int(rng.integers(2, 5))
    level = 1.0 / (1.0 - rng.uniform(EVENT_LOSS, 0.4))
    parts, total = [], 0.0
    levels_up = []
    for i in range(steps):
        if i:
            level *= rng.uniform(1.15, 1.6)
        levels_up.append(level)
        n, dur = _slow_iters(rng, b.base * level, 0.0, 30.0, 7200.0)
        parts.append(np.full(n, level))
        total += dur
    if rng.random() < 0.5:  # come down the same ladder
        for level in levels_up[-2::-1]:
            n, dur = _slow_iters(rng, b.base * level, 0.0, 30.0, 3600.0)
            parts.append(np.full(n, level))
            total += dur
    return np.concatenate(parts), total


def _compound_levels(b: _Builder) -> tuple[np.ndarray, float]:
    rng = b.rng
    comm, dur_a = _step_levels(b, 0.6, 7200.0)
    a = comm.size
    lb = 1.0 / (1.0 - rng.uniform(EVENT_LOSS, 0.6))
    nb, dur_b = _slow_iters(rng, b.base * comm[0] * lb, 0.0, 30.0, 3600.0)
    b0 = int(rng.integers(MIN_EVENT_ITERS // 3, max(MIN_EVENT_ITERS // 3 + 1, a - 5)))
    length = max(a, b0 + nb)
    levels = np.ones(length)
    levels[:a] *= comm
    levels[b0 : b0 + nb] *= lb
    return levels, dur_a + dur_b


def generate_series(rng: np.random.Generator, family: str, scenario: str, name: str) -> Series:
    """Generate one series of the given family and scenario (see the module docstring)."""
    b = _Builder(rng, family)
    comp = family == "computation"
    loss_hi, dur_hi = (0.5, 3600.0) if comp else (0.9, 36000.0)
    b.healthy(300, 1500)
    if scenario in ("jitter", "spikes"):
        b.healthy(1000, 4000)
    elif scenario in ("drift", "drift_minor"):
        final_loss = rng.uniform(0.15, 0.4) if scenario == "drift" else rng.uniform(0.02, 0.06)
        ramp = int(rng.integers(1000, 6001))
        hold = int(rng.integers(200, 1001))
        top = 1.0 / (1.0 - final_loss)
        levels = np.concatenate([np.linspace(1.0, top, ramp + 1)[1:], np.full(hold, top)])
        start = b.pos
        b.add(levels)
        if scenario == "drift":
            b.event(start, levels, "drift", float(levels.sum() * b.base))
    else:
        n_events = 2 if scenario == "multi" else 1
        for k in range(n_events):
            if k:
                b.healthy(300, 1500)
            if scenario in ("step", "multi"):
                levels, dur = _step_levels(b, loss_hi, dur_hi)
                kind = "step"
            elif scenario == "ladder":
                levels, dur = _ladder_levels(b)
                kind = "ladder"
            elif scenario == "compound":
                levels, dur = _compound_levels(b)
                kind = "compound"
            else:
                raise ValueError(f"unknown scenario {scenario!r}")
            start = b.pos
            b.add(levels)
            b.event(start, levels, kind, dur)
        b.healthy(200, 1000)
    level = np.concatenate(b.segments)
    n = level.size
    jitter = rng.uniform(0.01, 0.03) if comp else rng.uniform(0.02, 0.05)
    phi = rng.uniform(0.0, 0.3)
    z = rng.standard_normal(n) * jitter * math.sqrt(1.0 - phi * phi)
    noise = lfilter([1.0], [1.0, -phi], z)
    spikes = np.ones(n)
    if scenario != "jitter" and rng.random() < (1.0 if scenario == "spikes" else 0.5):
        rate = _loguniform(rng, 1 / 2000, 1 / 300)
        hit = rng.random(n) < rate
        spikes[hit] = rng.uniform(1.5, 4.0, int(hit.sum()))
    values = b.base * level * np.exp(noise) * spikes
    return Series(
        name=name, family=family, scenario=scenario, values=values, events=tuple(b.events),
        base_s=b.base, jitter=float(jitter),
    )


def generate_corpus(
    seed: int = 0, scenarios: tuple[tuple[str, str, int], ...] = SCENARIOS, scale: float = 1.0
) -> list[Series]:
    """The labelled corpus for ``seed``; ``scale`` multiplies every scenario count (>= 1 each)."""
    rng = np.random.default_rng(seed)
    corpus: list[Series] = []
    for family, scenario, count in scenarios:
        for i in range(max(1, int(round(count * scale)))):
            name = f"{family}/{scenario}/{i:03d}"
            corpus.append(generate_series(rng, family, scenario, name))
    return corpus
