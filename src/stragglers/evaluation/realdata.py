"""Evaluation families built from real Megatron-LM iteration times.

``../shared/real/megatron-iter/`` holds the ``iteration-time`` curves of six Megatron-LM
release runs (one value every 5 steps, ``"nan"`` where the job restarted or did not log; see
the README there).  Two families of :mod:`stragglers.evaluation.detect_eval` are built from them:

``real``
    Each run as it is, after its warm-up (:class:`~stragglers.detect.warmup.WarmUp`, also
    after every restart: a gap of more than one value).  Every onset is a false alarm, except
    inside three episodes that are real slow periods, labelled by hand from the data
    (``REAL_EPISODES``) and counted as events to find: ``gpt3-gb200`` steps 214-244
    (iterations 1.1-1.7x slower for 30 steps) and 1407-1426 (1.5-5x for 20 steps), and
    ``nemotron-gb200`` steps 12170-12310 (1.55x for 7 samples in a row, i.e. at least 60
    iterations, then 1-1.6x with two 5x spikes).
``semi-real``
    A run's real noise (after warm-up, without its gaps and labelled episodes, repeated to
    the length needed, each repetition scaled to the level where the one before ended so that
    no level jump appears at a seam) times an injected slow period
    of known onset: duration 20 to 5,000 points (log-uniform), throughput loss 5 to 60 %
    (uniform), plus injected spike clusters (1 to 5 spikes of 1.3-3x, some overlapping the
    slow period).  A quarter of the series have no slow period (spikes only).  A slow period
    of less than 10 % loss is *minor*: below the detection threshold, so neither finding it
    nor missing it counts (an onset inside it is not a false alarm).

Positions are points of the series (one every 5 steps of the real runs).  Which runs tuned
the defaults and which were held out is in ``TUNED`` and ``HELD_OUT``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stragglers.detect.warmup import DEFAULT_MIN_ITERS, WarmUp
from stragglers.errors import InputError
from stragglers.evaluation.corpus import EVENT_LOSS, LOCATION_TOLERANCE, Event, Series
from stragglers.logs.megatron import read_iteration_json

__all__ = [
    "HELD_OUT",
    "SEMI_REAL_PER_RUN",
    "REAL_EPISODES",
    "RUNS",
    "TUNED",
    "RealRun",
    "load_runs",
    "real_series",
    "semi_real_corpus",
]

#: Short name of each run -> a substring of its file name.
RUNS: dict[str, str] = {
    "gpt3-h100": "gpt_gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap"
                 "__dev_dgx_h100",
    "gpt3-gb200": "gpt_gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap"
                  "__dev_dgx_gb200",
    "dsv3-h100": "mixtral_deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release_sm__dev_dgx_h100",
    "dsv3-gb200": "mixtral_deepseekv3_proxy_flex_tp2pp2emp16etp1cp1_gb_200_release_sm__dev_dgx"
                  "_gb200",
    "mixtral-a100": "mixtral_mixtral_8x7b_alltoall_tp2pp4ep4_release__lts_dgx_a100",
    "nemotron-gb200": "nemotron_nemotron3_super_release_gb200__dev_dgx_gb200",
}
#: The runs the detector's defaults (min_segment, persist_fraction, warm-up) were tuned on.
TUNED: tuple[str, ...] = ("gpt3-gb200", "dsv3-h100", "dsv3-gb200", "nemotron-gb200")
#: The runs held out of the tuning (looked at only to report).
HELD_OUT: tuple[str, ...] = ("gpt3-h100", "mixtral-a100")
#: Real slow periods (first step, last step) labelled by hand.
REAL_EPISODES: dict[str, tuple[tuple[int, int], ...]] = {
    "gpt3-gb200": ((214, 244), (1407, 1426)),
    "nemotron-gb200": ((12170, 12310),),
}
WARMUP_ITERS = DEFAULT_MIN_ITERS  # the real family: the runs as watch sees them by default
#: The semi-real noise starts after at least this many iterations (and the level settled):
#: the first 300 iterations of dsv3-h100 rise 16 % and come back, part of the job's start,
#: not of its steady noise (the semi-real corpus is the same as with the former 200-iteration
#: default warm-up).
NOISE_WARMUP_ITERS = 200
SEMI_REAL_PER_RUN = 60  # semi-real series per run at detect-eval --scale 1
RESTART_GAP = 2  # "nan" values in a row that mean a restart (one alone: a step not logged)


@dataclass(frozen=True)
class RealRun:
    """One run after warm-up: values, their steps, and the labelled episodes (positions)."""

    name: str
    values: np.ndarray
    steps: np.ndarray
    warmup_points: int
    restarts: int
    episodes: tuple[tuple[int, int], ...]  # (first position, end position) of real events
    noise: np.ndarray  # True where a value is steady noise (after NOISE_WARMUP_ITERS too)


def run_files(folder: str | Path) -> list[tuple[str, Path]]:
    """``(name, path)`` of the six runs' iteration-time files in ``folder``; a missing folder
    or file is an :class:`InputError` naming it."""
    d = Path(folder)
    if not d.is_dir():
        raise InputError(f"{d}: folder of Megatron iteration-time files not found")
    out = []
    for name, stem in RUNS.items():
        path = d / f"{stem}.json"
        if not path.exists():
            raise InputError(f"{path}: file of run {name} not found")
        out.append((name, path))
    return out


def load_runs(folder: str | Path) -> list[RealRun]:
    """The six runs of ``folder`` (``../shared/real/megatron-iter``), after warm-up."""
    runs = []
    for name, path in run_files(folder):
        series = read_iteration_json(path)
        runs.append(_after_warmup(name, series.steps, series.values))
    return runs


def _kept(steps: list[int], values: list[float], min_iters: int
          ) -> tuple[list[int], list[float], int, int]:
    """The steps and values after warm-up (and after each restart's), the warm-up points and
    the restarts."""
    warm = WarmUp(min_iters=min_iters)
    kept_x: list[float] = []
    kept_s: list[int] = []
    nans = 0
    restarts = 0
    for s, x in zip(steps, values, strict=True):
        if x != x:
            nans += 1
            continue
        if nans >= RESTART_GAP:
            warm.rearm()
            restarts += 1
        nans = 0
        if warm.feed(x, s):
            kept_x.append(x)
            kept_s.append(s)
    return kept_s, kept_x, warm.points, restarts


def _after_warmup(name: str, steps: list[int], values: list[float]) -> RealRun:
    kept_s, kept_x, warm_points, restarts = _kept(steps, values, WARMUP_ITERS)
    noise_steps = set(_kept(steps, values, max(WARMUP_ITERS, NOISE_WARMUP_ITERS))[0])
    st = np.asarray(kept_s, dtype=np.int64)
    episodes = []
    for first, last in REAL_EPISODES.get(name, ()):
        a = int(np.searchsorted(st, first))
        b = int(np.searchsorted(st, last, side="right"))
        if b > a:
            episodes.append((a, b))
    noise = np.fromiter((s in noise_steps for s in kept_s), dtype=bool, count=len(kept_s))
    return RealRun(name=name, values=np.asarray(kept_x), steps=st,
                   warmup_points=warm_points, restarts=restarts, episodes=tuple(episodes),
                   noise=noise)


def real_series(runs: list[RealRun]) -> list[Series]:
    """The ``real`` family: each run after warm-up, its labelled episodes as events."""
    out = []
    for r in runs:
        events = []
        for a, b in r.episodes:
            seg = r.values[a:b]
            base = float(np.median(r.values))
            loss = 1.0 - base / float(np.median(seg))
            events.append(Event(onset=a, end=b, match_from=a - LOCATION_TOLERANCE, loss=loss,
                                peak_loss=1.0 - base / float(seg.max()), kind="real",
                                duration_s=float(seg.sum())))
        out.append(Series(name=f"real/{r.name}", family="real", scenario=r.name,
                          values=r.values, events=tuple(events),
                          base_s=float(np.median(r.values)), jitter=_jitter(r.values)))
    return out


def _jitter(x: np.ndarray) -> float:
    med = float(np.median(x))
    return 1.4826 * float(np.median(np.abs(x - med))) / med


def _noise(run: RealRun) -> np.ndarray:
    """The run's values without its labelled episodes and its start (the real noise)."""
    keep = run.noise.copy()
    for a, b in run.episodes:
        keep[a:b] = False
    return run.values[keep]


def _tiled(base: np.ndarray, start: int, length: int) -> np.ndarray:
    """``length`` points of ``base`` repeated from position ``start``; each repetition is
    scaled so that the median of its first 50 points equals the median of the 50 points before
    the seam (no level jump where the end of the run meets its start)."""
    m = base.size
    parts = [base[start % m:]]
    have = parts[0].size
    head = float(np.median(base[:50]))
    while have < length:
        prev = parts[-1]
        tail = float(np.median(prev[-50:])) if prev.size >= 50 else float(np.median(prev))
        parts.append(base * (tail / head))
        have += m
    return np.concatenate(parts)[:length]


def semi_real_corpus(runs: list[RealRun], seed: int = 0, per_run: int = SEMI_REAL_PER_RUN
                     ) -> list[Series]:
    """The ``semi-real`` family: ``per_run`` series from each run's noise (module docstring)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in runs:
        base = _noise(r)
        for i in range(per_run):
            negative = i % 4 == 3
            lead = int(rng.integers(300, 1001))
            tail = int(rng.integers(200, 1001))
            dur = 0 if negative else int(round(math.exp(rng.uniform(math.log(20),
                                                                    math.log(5000)))))
            n = lead + dur + tail
            x = _tiled(base, int(rng.integers(0, base.size)), n)
            events: tuple[Event, ...] = ()
            if not negative:
                loss = float(rng.uniform(0.05, 0.60))
                x[lead:lead + dur] /= 1.0 - loss
                kind = "step" if loss >= EVENT_LOSS else "minor"
                events = (Event(onset=lead, end=lead + dur, match_from=lead - LOCATION_TOLERANCE,
                                loss=loss, peak_loss=loss, kind=kind,
                                duration_s=float(x[lead:lead + dur].sum())),)
            _spike_clusters(rng, x, lead, dur)
            out.append(Series(name=f"semi-real/{r.name}/{i:03d}", family="semi-real",
                              scenario=r.name, values=x, events=events,
                              base_s=float(np.median(base)), jitter=_jitter(base)))
    return out


def _spike_clusters(rng: np.random.Generator, x: np.ndarray, lead: int, dur: int) -> None:
    """Clusters of 1-5 spikes (1.3-3x, at most 2 healthy points between two spikes), about one
    per 150 points and never closer than 20 points to each other (closer, they would be one
    slow period), one of them inside the slow period when there is one."""
    n = x.size
    starts = set(np.flatnonzero(rng.random(n) < 1 / 150).tolist())
    if dur:
        starts.add(lead + int(rng.integers(0, dur)))
    free_from = 0
    for s in sorted(starts):
        if s < free_from:
            continue
        pos = s
        for _ in range(int(rng.integers(1, 6))):
            if pos >= n:
                break
            x[pos] *= rng.uniform(1.3, 3.0)
            last = pos
            pos += int(rng.integers(1, 4))
        free_from = last + 20
