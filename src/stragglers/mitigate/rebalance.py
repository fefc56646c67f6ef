"""S2 for any training loop: each DP replica's speed, measured robustly, and the micro-batch
split it calls for (:class:`Rebalancer`; the live loop of ``mitigate run`` uses the same).

A user's loop tells the rebalancer, after each step, how long each micro-batch took on each
DP replica (:meth:`Rebalancer.observe`), and asks it how many micro-batches each replica
should run next (:meth:`Rebalancer.plan`). The estimate behind the answer:

* per step and replica, the **median** of the micro-batch times given (one micro-batch
  stretched by a context switch or a garbage collection does not move it);
* per step, each replica's time **relative to the step's lower median over the replicas**
  (with two replicas, the faster): load that stretches every replica at once (a shared
  machine, a slow file system) cancels;
* per replica, over the last ``window`` steps that every replica reported, the steps whose
  ratio lies more than ``outlier_mads`` median absolute deviations from the replica's median
  are **rejected** (other load on that replica's core for a step or two), and the rest
  averaged; times in seconds are these ratios times the median over the window of the
  steps' lower medians.

No plan is made before ``min_steps`` steps are in the window, and after each change of the
split ``min_steps`` steps run with it before the next (a change is measured before the next
one is decided). The split is Falcon's Eq. 1 solved exactly
(:func:`~.microbatch.solve_microbatches`) for a step of ``max_i (m_i + stages - 1) t_i``
(with ``stages`` pipeline stages, the fill and drain of the pipeline add ``stages - 1``
micro-batch slots to every replica's step). The even split is kept, or returned to (*give
back*), whenever its predicted step is within ``tolerance`` of the best; the split in effect
is kept while it is within ``tolerance`` (no flapping on noise).

Example (two replicas, 12 micro-batches each, replica 0 twice as slow)::

    rb = Rebalancer(dp_size=2, microbatches=12)
    for step in range(6):
        rb.observe(0, step, [0.02] * rb.counts[0])
        rb.observe(1, step, [0.01] * rb.counts[1])
    rb.plan()  # (8, 16)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stragglers.errors import InputError
from stragglers.mitigate.microbatch import solve_microbatches

__all__ = ["Estimate", "Rebalancer", "best_split", "lower_median", "step_of"]


def lower_median(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The lower median along ``axis`` (NaN ignored; the faster of two)."""
    s = np.sort(x, axis=axis)  # NaN sort last
    n = np.sum(np.isfinite(x), axis=axis, keepdims=True)
    idx = np.maximum((n - 1) // 2, 0)
    return np.asarray(np.take_along_axis(s, idx, axis=axis).squeeze(axis), dtype=np.float64)


def step_of(counts: np.ndarray | Sequence[int], times: np.ndarray, stages: int = 1) -> float:
    """Predicted compute step of a split: ``max_i (m_i + stages - 1) * t_i``."""
    c = np.asarray(counts, dtype=np.float64)
    return float(np.max((c + (stages - 1)) * np.asarray(times, dtype=np.float64)))


def best_split(times: np.ndarray, total: int, stages: int = 1,
               source: str = "micro-batch times") -> np.ndarray:
    """The split of ``total`` micro-batches that minimises :func:`step_of`: the exact solver
    for ``max m_i t_i``, and for ``stages > 1`` also for the shifted problem (``m_i + stages
    - 1`` slots each), the better of the two (every replica keeps >= 1 micro-batch)."""
    t = np.asarray(times, dtype=np.float64)
    plain = solve_microbatches(t, total, source=source).assignment
    if stages <= 1:
        return np.asarray(plain, dtype=np.int64)
    k = stages - 1
    shifted = solve_microbatches(t, total + k * t.size, source=source).assignment - k
    if shifted.min() >= 1 and step_of(shifted, t, stages) < step_of(plain, t, stages):
        return np.asarray(shifted, dtype=np.int64)
    return np.asarray(plain, dtype=np.int64)


@dataclass(frozen=True)
class Estimate:
    """Each replica's robust seconds per micro-batch over the window, and what it used."""

    times_s: np.ndarray  # (dp,)
    relative: np.ndarray  # (dp,) times relative to the steps' lower median
    steps: int  # steps in the window
    rejected: int  # (replica, step) values rejected as outliers

    def to_dict(self) -> dict[str, object]:
        return {"times_s": [round(float(x), 6) for x in self.times_s],
                "relative": [round(float(x), 4) for x in self.relative],
                "steps": self.steps, "rejected": self.rejected}


class Rebalancer:
    """Micro-batch rebalancing across ``dp_size`` replicas of ``microbatches`` micro-batches
    each (the module docstring says how it measures and decides)."""

    def __init__(self, dp_size: int, microbatches: int, *, stages: int = 1, window: int = 8,
                 min_steps: int = 4, tolerance: float = 0.03,
                 outlier_mads: float = 3.0) -> None:
        if dp_size < 1 or microbatches < 1 or stages < 1:
            raise InputError(f"Rebalancer: dp_size, microbatches and stages must be >= 1, got "
                             f"{dp_size}, {microbatches}, {stages}")
        if window < 1 or not 1 <= min_steps <= window:
            raise InputError(f"Rebalancer: expected 1 <= min_steps <= window, got min_steps "
                             f"{min_steps}, window {window}")
        if not (tolerance >= 0 and outlier_mads > 0):
            raise InputError("Rebalancer: tolerance must be >= 0 and outlier_mads > 0")
        self.dp, self.m, self.stages = dp_size, microbatches, stages
        self.window, self.min_steps = window, min_steps
        self.tolerance, self.outlier_mads = tolerance, outlier_mads
        self.counts: tuple[int, ...] = (microbatches,) * dp_size
        self.even: tuple[int, ...] = self.counts
        self._steps = np.full(0, -1, dtype=np.int64)  # step numbers with a row
        self._times = np.full((0, dp_size), np.nan)  # (rows, dp): per-step median per mb
        self._since = -1  # first step run with the split in effect (its changes)
        self.changes = 0

    # -- input ----------------------------------------------------------------------------
    def observe(self, replica: int, step: int, per_microbatch_s: float | Sequence[float]
                | np.ndarray) -> None:
        """Record how long each micro-batch of ``replica`` took in ``step`` (seconds; one
        value or one per micro-batch: their median is kept)."""
        if not 0 <= replica < self.dp:
            raise InputError(f"Rebalancer.observe: replica {replica} is outside 0..{self.dp - 1}")
        x = np.asarray(per_microbatch_s, dtype=np.float64).reshape(-1)
        if x.size == 0 or not np.all(np.isfinite(x) & (x > 0)):
            raise InputError(f"Rebalancer.observe: replica {replica}, step {step}: expected "
                             "finite micro-batch times > 0")
        row = np.full((1, self.dp), np.nan)
        row[0, replica] = float(np.median(x))
        self.observe_steps(np.asarray([step]), row)

    def observe_steps(self, steps: np.ndarray, per_microbatch_s: np.ndarray) -> None:
        """Vectorised :meth:`observe`: ``per_microbatch_s`` is (len(steps), dp) of each
        replica's seconds per micro-batch (NaN: not reported)."""
        steps = np.asarray(steps, dtype=np.int64).reshape(-1)
        vals = np.asarray(per_microbatch_s, dtype=np.float64).reshape(steps.size, self.dp)
        known, pos = np.unique(np.concatenate([self._steps, steps]), return_inverse=True)
        table = np.full((known.size, self.dp), np.nan)
        old = pos[:self._steps.size]
        table[old] = self._times
        new = pos[self._steps.size:]
        cur = table[new]
        table[new] = np.where(np.isfinite(vals), vals, cur)
        keep = max(4 * self.window, 64)  # rows kept: enough for the window and the hold
        self._steps, self._times = known[-keep:], table[-keep:]

    # -- estimate -------------------------------------------------------------------------
    def _complete(self, since: int = -1) -> tuple[np.ndarray, np.ndarray]:
        ok = np.all(np.isfinite(self._times), axis=1) & (self._steps >= since)
        return self._steps[ok], self._times[ok]

    def estimate(self) -> Estimate | None:
        """The robust times per micro-batch over the last ``window`` complete steps (None
        before ``min_steps`` such steps)."""
        _, x = self._complete()
        x = x[-self.window:]
        if x.shape[0] < self.min_steps:
            return None
        common = lower_median(x, axis=1)  # per step: load on every replica cancels
        r = x / common[:, None]
        k = self.min_steps
        if r.shape[0] > k:
            # a level shift (onset, recovery) inside the window: the steps since it only
            recent, older = r[-k:], r[:-k]
            m_new, m_old = np.median(recent, axis=0), np.median(older, axis=0)
            mad = np.maximum(np.median(np.abs(recent - m_new), axis=0),
                             np.median(np.abs(older - m_old), axis=0))
            if np.any(np.abs(m_new - m_old) > self.outlier_mads * np.maximum(
                    1.4826 * mad, 0.01 * m_old)):
                r, common = recent, common[-k:]
        med = np.median(r, axis=0)
        mad = np.median(np.abs(r - med), axis=0)
        # a floor of 1% of the level: identical values must not reject a 0.1% wobble
        keep = np.abs(r - med) <= self.outlier_mads * np.maximum(mad * 1.4826, 0.01 * med)
        rel = np.sum(np.where(keep, r, 0.0), axis=0) / np.sum(keep, axis=0)
        return Estimate(times_s=rel * float(np.median(common)), relative=rel,
                        steps=int(r.shape[0]), rejected=int(np.sum(~keep)))

    def predicted_step_s(self, counts: Sequence[int] | np.ndarray,
                         estimate: Estimate | None = None) -> float:
        """The compute step of a split at the estimated times (NaN before an estimate)."""
        est = estimate if estimate is not None else self.estimate()
        return float("nan") if est is None else step_of(counts, est.times_s, self.stages)

    # -- decision -------------------------------------------------------------------------
    def plan(self) -> tuple[int, ...]:
        """The micro-batch counts per replica for the next step: the split in effect unless
        the measurements call for another (the even split whenever it is within
        ``tolerance`` of the best). Returned counts different from the last ones are taken
        to be in effect from the step after the last one observed."""
        if self.dp < 2:
            return self.counts
        _, held = self._complete(self._since)
        est = self.estimate()
        if est is None or held.shape[0] < self.min_steps:
            return self.counts
        t = est.times_s
        best = best_split(t, self.m * self.dp, self.stages, source="Rebalancer: times")
        limit = step_of(best, t, self.stages) * (1 + self.tolerance)
        if step_of(self.even, t, self.stages) <= limit:
            new = self.even
        elif step_of(self.counts, t, self.stages) <= limit:
            new = self.counts
        else:
            new = tuple(int(c) for c in best)
        if new != self.counts:
            self.counts = new
            self._since = int(self._steps[-1]) + 1 if self._steps.size else 0
            self.changes += 1
        return self.counts

    def reset(self, counts: Sequence[int] | None = None, since: int = -1) -> None:
        """Set the split in effect (e.g. one applied by other means) from step ``since``."""
        c = tuple(int(x) for x in (counts if counts is not None else self.even))
        if len(c) != self.dp or sum(c) != self.m * self.dp or min(c) < 1:
            raise InputError(f"Rebalancer.reset: {list(c)} is not a split of "
                             f"{self.m * self.dp} micro-batches over {self.dp} replicas")
        self.counts, self._since = c, since
