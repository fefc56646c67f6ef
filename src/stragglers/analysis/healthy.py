"""The slowdown against healthy peers, S_h: "how much faster would the job be without its
stragglers", also in small jobs (docs/model-extensions.md, E4).

The study's ideal value of an op type is its mean (compute-like) or median
(communication-like) over *every* worker, the stragglers included (§5). At the study's scale
(dp 32 and more) one slow worker moves that mean little; at dp 2 a ×4 worker makes the mean
2.5× the healthy time, and S reads 1.47 for a job that runs 2.75× slower than it would
without the straggler. S_h takes each op type's ideal value over the workers that are *not*
slower than their DP peers beyond the noise, so a straggler does not move it:

* for each op type and stage, each worker's mean value per step is compared with its DP
  peers' on the same stage and step (the other rank when dp = 2, the median of all DP ranks
  when dp > 2: one straggler does not move it);
* a worker is excluded for that op type when its per-step excess over the peers is
  significant against their step-to-step spread — a one-sided paired t-test at
  :data:`ALPHA` over the steps — and at least :data:`MIN_EXCESS` of the peers' mean;
* the ideal value is the mean over the remaining workers, and the ideal timeline is simulated
  with it. Only the compute-like types, whose ideal is a mean, are re-estimated: the median
  of a communication type is the study's own robust choice and stays. S_h = mean no-delay
  step time / that mean ideal step time.

With one DP rank (no peers), or fewer than 2 steps, nothing is excluded and S_h = S. The
study's S, its attribution and every published figure are unchanged: S_h is printed beside
them where the two differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from scipy.special import stdtrit

from stragglers.analysis.engine import WhatIfEngine
from stragglers.analysis.grouped import sum_rows
from stragglers.analysis.workers import Worker
from stragglers.sim import simulate
from stragglers.trace import schema

#: One-sided significance level of the paired t-test (per op type, stage and worker).
ALPHA = 0.01
#: Smallest excess over the peers (relative to their mean) for a worker to be excluded: a
#: worker 2% slower is not a straggler the estimate should leave out. Chosen on synthetic
#: jobs (tests/analysis/test_healthy.py), which also check the estimate against the truth.
MIN_EXCESS = 0.05


@dataclass(frozen=True)
class HealthyReference:
    """``ideal_value`` (n_nodes,): each op identity's ideal value over the healthy workers;
    ``ideal`` (n_steps,): the ideal timeline's step times with them; ``excluded``: per op
    type, the workers left out (slower than their peers beyond the noise)."""

    ideal_value: np.ndarray
    ideal: np.ndarray
    excluded: Mapping[str, tuple[Worker, ...]]

    def slowdown(self, nodelay: np.ndarray) -> float:
        """S_h: mean no-delay step time / mean ideal step time over the healthy workers."""
        return float(nodelay.mean() / self.ideal.mean())


def slow_beyond_noise(x: np.ndarray) -> np.ndarray:
    """(G, dp, S) per-step values of G groups (op type and stage) on each DP rank → (G, dp)
    bool: the worker is slower than its DP peers beyond the noise (see the module)."""
    g, dp, ns = x.shape
    if dp < 2 or ns < 2:
        return np.zeros((g, dp), dtype=bool)
    ref = x[:, ::-1] if dp == 2 else np.median(x, axis=1, keepdims=True)
    excess = x - ref
    mean = excess.mean(axis=2)
    sd = excess.std(axis=2, ddof=1)
    # Student's t quantile: scipy.stats.t.ppf computes it so, without importing scipy.stats
    # (a second of start-up).
    crit = float(stdtrit(ns - 1, 1.0 - ALPHA))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd > 0, mean / (sd / np.sqrt(ns)), np.where(mean > 0, np.inf, 0.0))
    scale = np.broadcast_to(ref, x.shape).mean(axis=2)
    return np.asarray((t >= crit) & (mean >= MIN_EXCESS * np.abs(scale)) & (mean > 0))


#: Blame needs more than significance: a worker's mean excess per step must reach this many
#: times its healthy peers' own step-to-step spread (so that it stands out in a typical
#: step, not only on average over many). Chosen on synthetic jobs and 7 real runs of the
#: DDP loop (4 healthy, 3 slowed); the user-recipe evaluation was scored with it.
SPREAD_FACTOR = 1.0


def blame_beyond_noise(x: np.ndarray) -> np.ndarray:
    """(G, dp, S) per-step values → (G, dp) bool: :func:`slow_beyond_noise`, and the mean
    excess over the peers is at least :data:`SPREAD_FACTOR` times the peers' step-to-step
    spread (1.4826 × the MAD over steps of a healthy rank's values: the other rank's when
    dp = 2, the median over every DP rank's when dp > 2)."""
    slow = slow_beyond_noise(x)
    g, dp, ns = x.shape
    if not slow.any():
        return slow
    med = np.median(x, axis=2, keepdims=True)
    spread = 1.4826 * np.median(np.abs(x - med), axis=2)  # (G, dp)
    peer = spread[:, ::-1] if dp == 2 else np.median(spread, axis=1, keepdims=True)
    ref = x[:, ::-1] if dp == 2 else np.median(x, axis=1, keepdims=True)
    excess = (x - ref).mean(axis=2)
    return np.asarray(slow & (excess >= SPREAD_FACTOR * peer))


def healthy_reference(engine: WhatIfEngine) -> HealthyReference:
    """The ideal values and timeline over the healthy workers (see the module docstring)."""
    t = engine.table
    value = engine.derived.value
    n, dp, ns = value.shape
    codes = np.unique(t.node_optype)
    # One group per (op type, stage): per-step mean value of each DP rank.
    group = np.searchsorted(codes, t.node_optype) * engine.pp + t.node_stage
    groups, position, counts = np.unique(group, return_inverse=True, return_counts=True)
    sums = sum_rows(value, np.arange(n), position, len(groups))
    slow = slow_beyond_noise(sums / counts[:, None, None])  # (G, dp)
    # Only the mean-valued (compute-like) types: a median does not move with one worker.
    slow &= schema.ideal_is_mean(codes[groups // engine.pp])[:, None]
    slow_of = np.zeros((len(codes) * engine.pp, dp), dtype=bool)
    slow_of[groups] = slow
    ideal = np.empty(n)
    excluded: dict[str, tuple[Worker, ...]] = {}
    use_mean = schema.ideal_is_mean(codes)
    for i, (code, mean) in enumerate(zip(codes, use_mean, strict=True)):
        nodes = np.flatnonzero(t.node_optype == code)
        v = value[nodes]
        rows = slow_of[i * engine.pp:(i + 1) * engine.pp]  # (pp, dp)
        if not rows.any():
            ideal[nodes] = v.mean() if mean else np.median(v)
            continue
        keep = ~rows[t.node_stage[nodes]]  # (k, dp)
        kept = v.transpose(0, 2, 1)[np.broadcast_to(keep[:, None, :], (len(nodes), ns, dp))]
        ideal[nodes] = kept.mean() if mean else np.median(kept)
        s_idx, d_idx = np.nonzero(rows)
        excluded[schema.OPTYPES[int(code)]] = tuple(
            Worker(int(d), int(st)) for st, d in zip(s_idx, d_idx, strict=True))

    def values(idx: np.ndarray) -> np.ndarray:
        return np.broadcast_to(ideal[idx][:, None, None, None], (len(idx), 1, 1, ns))

    times = simulate(engine.order, values, (1, 1, ns)).step_time[0]
    return HealthyReference(ideal_value=ideal, ideal=times, excluded=MappingProxyType(excluded))
