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
  ratio lies more than ``outlier_mads`` median absolute deviations (small-sample corrected,
  :func:`robust_spread`) from the replica's median are **rejected** (other load on that
  replica's core for a step or two), and the rest averaged; times in seconds are these
  ratios times the median over the window of the steps' lower medians.

No plan is made before ``min_steps`` steps are in the window, and after each change of the
split ``min_steps`` steps run with it before the next. Every change is a *trial*, judged as
a statistical decision on its measured compute steps (``max_i (m_i + stages - 1) x_i`` with
the micro-batches each replica ran, ``x_i`` relative to the step's lower median over the
replicas, as in the estimate: the load that stretches every replica at once, which on a
shared machine jumps x2-x3 within one trial, cancels) against those of the split before
(the steps the estimate used): the noise is the pooled spread of both (one step's standard
deviation relative to each median, :func:`step_spread`), the standard error of a median
1.2533 x that / sqrt(n). A trial
**significantly slower** (its median above the one before by more than ``significance``
standard errors of the difference, plus ``tolerance`` for the even split) is taken back and
no change is tried for ``window`` steps, twice as long after each failed trial in a row; one
significantly faster is kept; an inconclusive one runs on, up to ``window`` steps, and is
then weighed against the prediction (prior: the predicted relative change, spread as large
as it): taken back only when the posterior mean says slower; never when the same steps in
seconds are significantly faster than the split before's (the fast replica got faster).
A trial taken back because a replica it cut measured slower can have met a straggler that
worsened as the split changed: when the split restored measures that replica as slow as
the trial did (significantly slower than before the trial, nearer the trial's level), the
cooldown ends and the plan starts again from the steps since the take-back (``level
shift``); where the split was the cause, the replica's time falls back with it.
A trial across a change of straggler (the split before gave micro-batches to a replica the
estimate now measures slower) is void: neither kept nor taken back on its measure, the
estimate decides. A change from one rebalanced
split to another *away* from even is not tried when its predicted gain is below what its
trial could resolve at the noise measured, on the same relative steps as the trials
(``held_back`` counts them); the first change
from the even split, every return to it and every move toward it are. (Relative to the
step's common level, a slow replica slowed further by a split is seen; a fast replica
slowed by the micro-batches it took, where replicas share cores, is not. Judged in seconds
instead, machine-wide load jumps took good splits and returns to even back in the example
job's decision logs: docs/benchmarks/mitigate.md.) Where replicas
share a resource (ranks on the cores of one loaded machine) a replica's time per micro-batch
depends on the split, and the model alone drifts: moving micro-batches to the fast replica
slows the slow one further, which calls for moving more. A replica that got faster in a
level shift (a recovery: a drop measured on steps of one split, before and after it;
across a change of split a drop can be the split's own effect on the replicas' speeds)
makes it try the even split, also during the back-off after a
failed trial (the split that trial was about is gone), when it is nearer the others' level
than its own before (else the split for its new level, toward even). The last 2 x
``min_steps`` steps measuring the replicas alike, and unlike the steps before, bring the
even split at once; no split past even is made in one move; and after a return to even,
leaving it needs a first action's evidence on the steps at even, with a gain above twice
``tolerance`` (no flapping around even); after a give-back (alike, recovered), and for a
split that cuts a replica the last rebalanced split did not (a new straggler) after any
return, in both halves of those steps, each replica compared with the fastest step by
step. After each
:meth:`Rebalancer.plan`, ``last_plan`` (a :class:`PlanNote`) says what it decided and why.
The split is Falcon's Eq. 1 solved exactly (:func:`~.microbatch.solve_microbatches`) for a
step of ``max_i (m_i + stages - 1) t_i`` (with ``stages`` pipeline stages, the fill and
drain of the pipeline add ``stages - 1`` micro-batch slots to every replica's step). The
even split is kept, or returned to (*give back*), whenever its predicted step is within
``tolerance`` of the best; the split in effect is kept while it is within ``tolerance`` (no
flapping on noise).

Example (two replicas, 12 micro-batches each, replica 0 twice as slow)::

    rb = Rebalancer(dp_size=2, microbatches=12)
    for step in range(6):
        rb.observe(0, step, [0.02] * rb.counts[0])
        rb.observe(1, step, [0.01] * rb.counts[1])
    rb.plan()  # (8, 16)
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stragglers.errors import InputError
from stragglers.mitigate.microbatch import solve_microbatches

__all__ = ["BusyModel", "Estimate", "PlanNote", "Rebalancer", "best_split", "lower_median",
           "step_of"]


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


MEDIAN_SE = 1.2533  # a median's standard error over a mean's (normal steps)
SPREAD_FLOOR = 0.005  # one step's spread (log units) is taken as at least this


#: Croux & Rousseeuw (1992): 1.4826 MAD of ``n`` normal values is low on small ``n``, these
#: factors make its mean the standard deviation (``n / (n - 0.8)`` above 9)
_MAD_SMALL_N = np.array([1.0, 1.0, 1.196, 1.495, 1.363, 1.206, 1.200, 1.140, 1.129, 1.107])


def robust_spread(x: np.ndarray, center: np.ndarray | None = None) -> np.ndarray:
    """Per column of ``x`` (rows: steps; NaN: none), one step's spread that an outlier does
    not move: 1.4826 median absolute deviations about ``center`` (default: the column's
    median) with the small-sample factor of :data:`_MAD_SMALL_N` for the column's ``n``.
    The one estimator of every *band* here (the outlier band, the estimate's level-shift
    band, :meth:`Rebalancer._outlier_band`): uncorrected, 1.4826 MAD came out at 0.67,
    0.75, 0.79, 0.85, 0.88 of the true spread (medians) on 4, 5, 6, 8, 10 normal steps, and
    a band that narrow rejected good steps."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        c = np.nanmedian(x, axis=0) if center is None else center
        mad = np.nanmedian(np.abs(x - c), axis=0)
    n = np.sum(np.isfinite(x), axis=0)
    factor = np.where(n < _MAD_SMALL_N.size, _MAD_SMALL_N[np.minimum(n, _MAD_SMALL_N.size - 1)],
                      n / np.maximum(n - 0.8, 1.0))
    return np.asarray(1.4826 * mad * factor, dtype=np.float64)


def step_spread(*groups: np.ndarray) -> np.ndarray:
    """Per column, over ``groups`` of steps (rows; NaN: no step): one step's standard
    deviation about each group's own mean, pooled with ``sum(n_g) - groups`` degrees of
    freedom (an unbiased variance whatever the groups' sizes; NaN with none). The one
    estimator of every *standard error* here (of a median of steps, :func:`_median_se_unit`;
    of the estimate's mean of the steps it kept, ``Estimate.stderr``; the trials' noise,
    :meth:`Rebalancer.noise`): 1.4826 x the pooled MAD about each group's own median, used
    before, came out at 0.68, 0.78 and 0.90 of the true spread on two groups of 4, 6 and 12
    normal steps (medians of 20,000 seeded draws; the group's median sits among its own
    steps). Not robust: one outlier widens it, which makes each test that uses it hold back,
    never act."""
    ss = np.zeros(groups[0].shape[1:])
    n = np.zeros(groups[0].shape[1:])
    k = np.zeros(groups[0].shape[1:])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        for g in groups:
            m = np.nanmean(g, axis=0)
            ss = ss + np.nansum((g - m) ** 2, axis=0)
            c = np.sum(np.isfinite(g), axis=0)
            n, k = n + c, k + (c > 0)
        sd = np.sqrt(ss / np.maximum(n - k, 1))
    return np.asarray(np.where(n - k >= 1, sd, np.nan), dtype=np.float64)


def _median_se_unit(*groups: np.ndarray) -> np.ndarray:
    """Per column: :func:`step_spread` over ``groups``, floored at :data:`SPREAD_FLOOR`,
    times :data:`MEDIAN_SE`, so that a median of ``n`` steps has the standard error this /
    sqrt(n). The unit of every significance test on medians of steps here (a 3-standard-
    error test on the difference of two medians of 4 with no difference fired in 9.5% of
    seeded draws with the MAD, 1.1% with this)."""
    return MEDIAN_SE * np.maximum(step_spread(*groups), SPREAD_FLOOR)


def best_split_affine(fixed: np.ndarray, per_mb: np.ndarray, total: int,
                      stages: int = 1) -> np.ndarray:
    """The split of ``total`` micro-batches (each replica >= 1) that minimises ``max_i
    fixed_i + per_mb_i (m_i + stages - 1)``: the smallest step ``T`` at which the replicas
    can hold ``total`` micro-batches (a bisection over ``T``, vectorised), then the surplus
    taken from the replicas at the top. Every replica's cost rises with its count, so the
    minimal ``T`` is the optimum's step."""
    a = np.asarray(fixed, dtype=np.float64)
    b = np.maximum(np.asarray(per_mb, dtype=np.float64), 1e-12)
    k, n = stages - 1, a.size

    def fits(t: float) -> np.ndarray:
        return np.maximum(np.floor((t - a) / b * (1 + 1e-12)) - k, 1.0)

    lo = float(np.max(a + b * (1 + k)))
    hi = float(np.max(a + b * (total - n + 1 + k)))
    if fits(lo).sum() < total:
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if fits(mid).sum() >= total:
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1e-12 * hi:
                break
        lo = hi
    m = fits(lo).astype(np.int64)
    while m.sum() > total:  # the surplus: from the replicas whose cost is highest
        cost = np.where(m > 1, a + b * (m + k), -np.inf)
        top = np.argsort(-cost, kind="stable")[:int(m.sum() - total)]
        m[top[np.isfinite(cost[top])]] -= 1
    return m


@dataclass(frozen=True)
class BusyModel:
    """Each replica's compute seconds per step as an affine function of the micro-batches it
    runs: ``fixed_s + per_mb_s * (m + stages - 1)``. Proportional (``fixed_s`` 0) unless the
    steps that ran two different counts on a replica measured a significant fixed part
    (:meth:`Rebalancer.busy_model`); ``affine`` lists those replicas."""

    fixed_s: np.ndarray  # (dp,)
    per_mb_s: np.ndarray  # (dp,)
    affine: tuple[int, ...] = ()

    def step(self, counts: Sequence[int] | np.ndarray, stages: int = 1) -> float:
        """The predicted compute step of a split (the slowest replica's busy time)."""
        c = np.asarray(counts, dtype=np.float64) + (stages - 1)
        return float(np.max(self.fixed_s + self.per_mb_s * c))

    def best(self, total: int, stages: int = 1) -> np.ndarray:
        """The split of ``total`` micro-batches with the smallest :meth:`step`."""
        if not self.affine:
            return best_split(self.per_mb_s, total, stages, source="Rebalancer: times")
        return best_split_affine(self.fixed_s, self.per_mb_s, total, stages)

    def to_dict(self) -> dict[str, object]:
        return {"fixed_s": [round(float(x), 6) for x in self.fixed_s],
                "per_mb_s": [round(float(x), 6) for x in self.per_mb_s],
                "affine": list(self.affine)}


@dataclass(frozen=True)
class Estimate:
    """Each replica's robust seconds per micro-batch over the window, and what it used."""

    times_s: np.ndarray  # (dp,)
    relative: np.ndarray  # (dp,) times relative to the steps' lower median
    steps: int  # steps in the window
    rejected: int  # (replica, step) values rejected as outliers
    faster: tuple[int, ...] = ()  # replicas whose time fell in a level shift in the window
    # (dp,) the standard error of each ``relative`` (:func:`step_spread` of the window's
    # values / sqrt(n kept))
    stderr: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # (dp,) after a level shift: each replica's median relative time before it (else empty)
    before: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_dict(self) -> dict[str, object]:
        return {"times_s": [round(float(x), 6) for x in self.times_s],
                "relative": [round(float(x), 4) for x in self.relative],
                "stderr": [round(float(x), 4) for x in self.stderr],
                "steps": self.steps, "rejected": self.rejected, "faster": list(self.faster),
                "before": [round(float(x), 4) for x in self.before]}


@dataclass(frozen=True)
class _Trial:
    """A split on trial: the split before it, that split's measured compute steps relative
    to their common level (what the trial is judged against), in seconds, and their step
    numbers, and the predicted gain (the prior)."""

    before: tuple[int, ...]
    costs: np.ndarray
    costs_s: np.ndarray
    steps: np.ndarray
    gain: float


@dataclass(frozen=True)
class _TakenBack:
    """A trial taken back: the split tried, the split restored, and the steps that measured
    each (the restored split's steps before the trial, the trial's own)."""

    tried: tuple[int, ...]
    restored: tuple[int, ...]
    before_steps: np.ndarray
    trial_steps: np.ndarray


@dataclass(frozen=True)
class PlanNote:
    """What :meth:`Rebalancer.plan` decided after the last step observed, and why (a log
    line: ``reason`` one of the words below; the figures NaN where not computed).

    ``reason``: ``warming`` (fewer than ``min_steps`` steps with the split), ``trial taken
    back``, ``trial runs on``, ``cooldown``, ``no estimate``, ``recovered`` (a replica got
    faster in a level shift: the even split), ``even within tolerance``, ``kept within
    tolerance``, ``held back`` (a refinement away from even below the resolution),
    ``changed`` (a new split on trial), ``waiting`` (a refinement away from even while the
    last steps measured a replica it would cut faster than its level: a level shift
    starting; or a recovery nearer the others at its level, not at its bound), ``alike``
    (the replicas measure alike within noise on the split's last steps: the even split, not
    a trial), ``even first`` (the best split lies past even: even first), ``new onset``
    (leaving even after a give-back, with a first action's evidence on the steps at even),
    ``held at even`` (that evidence lacking),
    ``level shift`` (during the cooldown after a trial taken back, the split restored
    measured a replica the trial cut as slow as the trial did: the split for the new level).
    """

    step: int
    counts: tuple[int, ...]  # the split for the next step
    reason: str
    estimate: Estimate | None = None
    best: tuple[int, ...] = ()
    predicted_even_s: float = float("nan")
    predicted_now_s: float = float("nan")
    predicted_best_s: float = float("nan")
    noise: float = float("nan")  # relative spread of the measured steps with the split
    trial_change: float = float("nan")  # a trial's measured relative change (median)
    trial_resolution: float = float("nan")  # what its trial can resolve at that noise
    # the step of the split planned from the steps that ran it (NaN: fewer than min_steps)
    predicted_from_runs_s: float = float("nan")
    model: BusyModel | None = None  # the busy-time model the predictions used

    def to_dict(self) -> dict[str, object]:
        def r(x: float) -> float | None:
            return round(x, 6) if np.isfinite(x) else None

        return {"step": self.step, "counts": list(self.counts), "reason": self.reason,
                "estimate": self.estimate.to_dict() if self.estimate is not None else None,
                "best": list(self.best), "predicted_even_s": r(self.predicted_even_s),
                "predicted_now_s": r(self.predicted_now_s),
                "predicted_best_s": r(self.predicted_best_s), "noise": r(self.noise),
                "trial_change": r(self.trial_change),
                "trial_resolution": r(self.trial_resolution),
                "predicted_from_runs_s": r(self.predicted_from_runs_s),
                "model": self.model.to_dict() if self.model is not None else None}


class Rebalancer:
    """Micro-batch rebalancing across ``dp_size`` replicas of ``microbatches`` micro-batches
    each (the module docstring says how it measures and decides)."""

    #: the bounds of a replica's marginal seconds per micro-batch over its average where a
    #: fixed part was measured (:meth:`busy_model`)
    MARGINAL_SHARE = (0.25, 1.0)

    def __init__(self, dp_size: int, microbatches: int, *, stages: int = 1, window: int = 8,
                 min_steps: int = 4, tolerance: float = 0.03,
                 outlier_mads: float = 3.0, significance: float = 2.0) -> None:
        if dp_size < 1 or microbatches < 1 or stages < 1:
            raise InputError(f"Rebalancer: dp_size, microbatches and stages must be >= 1, got "
                             f"{dp_size}, {microbatches}, {stages}")
        if window < 1 or not 1 <= min_steps <= window:
            raise InputError(f"Rebalancer: expected 1 <= min_steps <= window, got min_steps "
                             f"{min_steps}, window {window}")
        if not (tolerance >= 0 and outlier_mads > 0 and significance >= 0):
            raise InputError("Rebalancer: tolerance and significance must be >= 0 and "
                             "outlier_mads > 0")
        self.dp, self.m, self.stages = dp_size, microbatches, stages
        self.window, self.min_steps = window, min_steps
        self.tolerance, self.outlier_mads = tolerance, outlier_mads
        self.significance = significance
        self.counts: tuple[int, ...] = (microbatches,) * dp_size
        self.even: tuple[int, ...] = self.counts
        self._steps = np.full(0, -1, dtype=np.int64)  # step numbers with a row
        self._times = np.full((0, dp_size), np.nan)  # (rows, dp): per-step median per mb
        self._ran = np.full((0, dp_size), np.nan)  # (rows, dp): micro-batches run (if known)
        self._since = -1  # first step run with the split in effect (its changes)
        self._hist_from = np.zeros(1, dtype=np.int64)  # splits in effect from these steps
        self._hist = np.full((1, dp_size), microbatches, dtype=np.int64)
        # a split on trial: the one before it and its measured steps; failed trials back off
        self._trial: _Trial | None = None
        # the last trial taken back, while its cooldown runs (None otherwise)
        self._taken_back: _TakenBack | None = None
        self._cooldown_until = -1
        self._backoff = 0
        self.changes = 0
        self.reverted = 0
        self.held_back = 0  # plans not tried: predicted gain below what can be resolved
        self._inconclusive = False
        # the side of even the last rebalanced split was on (sign of counts - even; None
        # before any): leaving even again, on either side, needs a new onset's evidence
        self._side: np.ndarray | None = None
        self.refused = 0  # departures from even refused: not a new onset's evidence
        # the even split in effect is a give-back (the replicas measured alike, or the slow
        # one recovered): leaving it needs a new onset in two disjoint halves of its steps
        self._given_back = False
        self._regime = -1  # the first step of the regime (reset): no estimate before it
        # the fixed part of the busy time is fitted on the steps from here: the split left
        # even or came back to it there (one episode's splits; the even split's steps hold
        # the onset, a give-back's the recovery: a level shift is not the split's effect)
        self._fit_from = -1
        self._trial_diff, self._trial_res = float("nan"), float("nan")
        self.last_plan: PlanNote | None = None  # what plan() decided last, and why

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

    def observe_steps(self, steps: np.ndarray, per_microbatch_s: np.ndarray,
                      ran: np.ndarray | None = None) -> None:
        """Vectorised :meth:`observe`: ``per_microbatch_s`` is (len(steps), dp) of each
        replica's seconds per micro-batch (NaN: not reported); ``ran`` (same shape), when
        known, the micro-batches each replica ran (a split applied later than planned is
        then measured as it ran)."""
        steps = np.asarray(steps, dtype=np.int64).reshape(-1)
        vals = np.asarray(per_microbatch_s, dtype=np.float64).reshape(steps.size, self.dp)
        runs = (np.full(vals.shape, np.nan) if ran is None else
                np.asarray(ran, dtype=np.float64).reshape(vals.shape))
        known, pos = np.unique(np.concatenate([self._steps, steps]), return_inverse=True)
        table = np.full((known.size, self.dp), np.nan)
        counts = np.full((known.size, self.dp), np.nan)
        old, new = pos[:self._steps.size], pos[self._steps.size:]
        table[old], counts[old] = self._times, self._ran
        table[new] = np.where(np.isfinite(vals), vals, table[new])
        counts[new] = np.where(np.isfinite(runs), runs, counts[new])
        keep = max(4 * self.window, 64)  # rows kept: enough for the window and the hold
        self._steps, self._times, self._ran = known[-keep:], table[-keep:], counts[-keep:]

    # -- estimate -------------------------------------------------------------------------
    def _complete(self, since: int = -1, split: tuple[int, ...] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Steps from ``since`` that every replica reported (and, with ``split``, that ran
        it where what ran is known), and their times."""
        ok = np.all(np.isfinite(self._times), axis=1) & (self._steps >= since)
        if split is not None:
            ran = self._ran
            ok &= np.all(~np.isfinite(ran) | (ran == np.asarray(split)), axis=1)
        return self._steps[ok], self._times[ok]

    def _counts_of(self, steps: np.ndarray) -> np.ndarray:
        """The micro-batches each replica ran in ``steps`` (known, else the split planned)."""
        idx = np.searchsorted(self._hist_from, steps, side="right") - 1
        planned = self._hist[np.maximum(idx, 0)].astype(np.float64)
        ran = self._ran[np.searchsorted(self._steps, steps)]
        return np.where(np.isfinite(ran), ran, planned)

    def estimate(self, since: int = -1, until: int | None = None) -> Estimate | None:
        """The robust times per micro-batch over the last ``window`` complete steps (from
        step ``since`` when given, before step ``until`` when given; None before
        ``min_steps`` such steps)."""
        all_steps, all_x = self._complete(since)
        if until is not None:
            all_steps, all_x = all_steps[all_steps < until], all_x[all_steps < until]
        x = all_x[-self.window:]
        if x.shape[0] < self.min_steps:
            return None
        common = lower_median(x, axis=1)  # per step: load on every replica cancels
        r = x / common[:, None]
        k = self.min_steps
        faster: tuple[int, ...] = ()
        before = np.zeros(0)
        if r.shape[0] > k:
            # a level shift (onset, recovery) inside the window: the steps since it only.
            # Compared with the earlier steps of the split in effect when there are 3 of
            # them (``_one_split_before``: also a stretch before a trial of another split):
            # where the split changes a replica's time per
            # micro-batch (replicas sharing cores), older steps of another split widen the
            # spread and hid a recovery. Else with the window's older steps, of any split:
            # a level to restart the window from, but no recovery, which is a drop
            # measured on steps that ran one split, before and after it (across a change
            # of split, a replica's time that fell can be the split's effect: the example
            # job's x1.5 straggler measured 1.24x instead of 2.17x on its first split,
            # still injected, and got everything back)
            recent = r[-k:]
            one = self._one_split_before(all_steps, all_x)
            older = one if one is not None else r[:-k]
            m_new, m_old = np.median(recent, axis=0), np.median(older, axis=0)
            moved = self._shifted(recent, older)
            if np.any(moved):
                r, common = recent, common[-k:]
                before = m_old
                if one is not None:
                    # faster: relative to the step's lower median, or to its mean over the
                    # replicas (in log), where a replica that recovered past the others'
                    # level shows as one that fell, not as the others that rose above the
                    # lower median
                    c_new, c_old = (np.exp(v - v.mean(axis=1, keepdims=True)) for v in (
                        np.log(recent), np.log(older)))
                    down = (moved & (m_new < m_old)) | (self._shifted(c_new, c_old) & (
                        np.median(c_new, axis=0) < np.median(c_old, axis=0)))
                    faster = tuple(int(i) for i in np.flatnonzero(down))
        med, band = self._outlier_band(r)
        keep = np.abs(r - med) <= band
        n = np.sum(keep, axis=0)
        rel = np.sum(np.where(keep, r, 0.0), axis=0) / n
        # the standard error of that mean: the standard deviation of all the window's steps
        # (seeded, sigma 0.1 on 4-10 steps: its median 0.84-0.92 of the mean's true spread,
        # 0.68-1.03 with 10% of steps outliers; the kept steps' MAD, used before, 0.58-0.83
        # and 0.41-0.57; the kept steps' standard deviation 0.75-0.87 and 0.51-0.61: which
        # steps are kept varies too). An outlier widens it: a new onset's test holds back
        spread = np.nan_to_num(step_spread(r), nan=0.0)
        return Estimate(times_s=rel * float(np.median(common)), relative=rel,
                        steps=int(r.shape[0]), rejected=int(np.sum(~keep)), faster=faster,
                        stderr=spread / np.sqrt(n), before=before)

    def _shifted(self, recent: np.ndarray, older: np.ndarray) -> np.ndarray:
        """Per replica, whether the median of ``recent`` (steps x replicas, relative times)
        moved from that of ``older`` by more than ``outlier_mads`` standard errors of the
        difference (each group's median's: :func:`_median_se_unit` of its own steps /
        sqrt(n), as the give-back's and the re-plan's tests; a recovery changes the
        spread), floored at 1% of the older level. (It was ``outlier_mads`` x one step's
        1.4826 MAD, the larger of the two groups', which is 0.67-0.79 of the spread on
        4-6 steps: about that many standard errors by chance, and with the MAD's
        small-sample factor a band wide enough to hide a recovery from a straggler that
        swung 1.2-3x.)"""
        m_new, m_old = np.median(recent, axis=0), np.median(older, axis=0)
        se = np.sqrt(_median_se_unit(recent) ** 2 / recent.shape[0]
                     + _median_se_unit(older) ** 2 / older.shape[0])
        return np.asarray(np.abs(m_new - m_old) > self.outlier_mads * np.maximum(
            se, 0.01 * m_old))

    def _one_split_before(self, steps: np.ndarray, x: np.ndarray) -> np.ndarray | None:
        """When the last ``min_steps`` of ``steps`` all ran the split in effect: the
        relative times of the last ``window - min_steps`` steps before them that ran it too
        (as many as the window holds before them when the split ran throughout; also an
        earlier stretch of it: a split restored after a trial has its steps before the
        trial), at least 3; else None. The split a step ran: as run where known, else as
        planned."""
        k = self.min_steps
        ran = self._counts_of(steps) if steps.size else np.zeros((0, self.dp))
        same = np.all(ran == np.asarray(self.counts), axis=1)
        if steps.size <= k or not bool(np.all(same[-k:])):
            return None
        older = (x / lower_median(x, axis=1)[:, None])[:-k][same[:-k]][
            -max(self.window - k, 3):]
        return older if older.shape[0] >= 3 else None

    def _outlier_band(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each replica's median of ``r`` (steps x replicas) and the band about it beyond
        which a step is an outlier: ``outlier_mads`` x one step's :func:`robust_spread`,
        floored at 1% of the level (identical values must not reject a 0.1% wobble)."""
        med = np.median(r, axis=0)
        return med, self.outlier_mads * np.maximum(robust_spread(r, med), 0.01 * med)

    def plan_estimate(self) -> Estimate | None:
        """The estimate :meth:`plan` decides on: :meth:`estimate` from the step given to
        :meth:`reset` (the start of the regime: a straggler's onset known by other means,
        such as the live loop's detector), none of the steps before it."""
        return self.estimate(since=self._regime)

    def predicted_step_s(self, counts: Sequence[int] | np.ndarray,
                         estimate: Estimate | None = None) -> float:
        """The compute step of a split at the estimated times, with each replica's busy
        time affine in its micro-batches where measured (:meth:`busy_model`; NaN before an
        estimate)."""
        est = estimate if estimate is not None else self.estimate()
        return float("nan") if est is None else self.busy_model(est).step(counts, self.stages)

    def _fixed_part(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per replica, from the complete steps since the regime began and the split last
        left or came back to even (the splits of one episode): the fixed seconds
        ``a`` and the marginal seconds per micro-batch ``b`` of its busy time ``a + b (m +
        stages - 1)`` (busy: seconds per micro-batch times the micro-batches run), fitted
        through the medians of the steps at its present count and at the last other count
        it ran (each with ``min_steps`` steps or more), and whether ``a`` is significant
        (``outlier_mads`` standard errors, from each median's standard error:
        :func:`_median_se_unit` of the relative deviations, pooled over both groups, /
        sqrt(n)). Vectorised over
        replicas; NaN where a replica ran one count only. Also the median busy seconds at
        the present count."""
        nan = np.full(self.dp, np.nan)
        steps, x = self._complete(max(self._regime, self._fit_from))
        if steps.size < 2 * self.min_steps:
            return nan, nan, nan, np.zeros(self.dp, dtype=bool)
        ran = self._counts_of(steps)
        busy = x * ran
        cur = ran[-1]
        rows = np.arange(steps.size)[:, None]
        last_other = np.max(np.where(ran != cur, rows, -1), axis=0)
        other = ran[np.maximum(last_other, 0), np.arange(self.dp)]

        def group(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            vals = np.where(mask, busy, np.nan)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
                med = np.nanmedian(vals, axis=0)
            return med, vals / med - 1, np.sum(mask, axis=0)

        b1, d1, n1 = group(ran == cur)
        b2, d2, n2 = group((ran == other) & (last_other >= 0))
        # one step's relative spread, pooled over both groups (a median of 4 steps' own
        # spread is too unsure), floored at 0.5%
        spread = _median_se_unit(d1, d2)
        with np.errstate(all="ignore"):
            se1 = spread * b1 / np.sqrt(np.maximum(n1, 1))
            se2 = spread * b2 / np.sqrt(np.maximum(n2, 1))
        k = self.stages - 1
        with np.errstate(all="ignore"):
            slope = (b1 - b2) / (cur - other)
            fixed = b1 - slope * (cur + k)
            se_a = np.sqrt(((other + k) * se1) ** 2 + ((cur + k) * se2) ** 2) / np.abs(
                cur - other)
        # a busy time that falls with more micro-batches is no effect of the split (a level
        # shift between the two groups of steps): not fitted
        ok = (last_other >= 0) & (n1 >= self.min_steps) & (n2 >= self.min_steps) & (slope > 0)
        fixed, slope = np.where(ok, fixed, np.nan), np.where(ok, slope, np.nan)
        # ``outlier_mads`` standard errors, as the level-shift test: tested at every plan
        significant = ok & (np.abs(fixed) > self.outlier_mads * se_a)
        return fixed, slope, b1, significant

    def busy_model(self, est: Estimate) -> BusyModel:
        """Each replica's busy time per step as a function of its micro-batches, at the
        level of ``est`` (its robust seconds per micro-batch, at the counts its steps ran):
        proportional (``m x t``) unless :meth:`_fixed_part` measured a significant fixed
        part on two counts; then the line through the median busy time at the split in
        effect with the fitted marginal share ``b / (a / (m + stages - 1) + b)``, bounded
        to ``MARGINAL_SHARE`` (a fixed
        part at most 3/4 of the busy time, never negative: a bound on the extrapolation,
        not a value fitted to any run). Where a replica's time per micro-batch rises when
        its micro-batches are cut (a per-step cost; a rank that idles more getting less of
        a shared core), the proportional model moves too few micro-batches at each plan and
        mispredicts every split it has not run."""
        t = np.asarray(est.times_s, dtype=np.float64)
        k = self.stages - 1
        fixed_fit, slope, busy_now, significant = self._fixed_part()
        if not np.any(significant):
            return BusyModel(np.zeros(self.dp), t)
        at = np.asarray(self.counts, dtype=np.float64) + k
        with np.errstate(all="ignore"):
            share = slope / (fixed_fit / at + slope)
        lo, hi = self.MARGINAL_SHARE
        affine = significant & np.isfinite(share) & (share < hi)
        share = np.where(affine, np.clip(share, lo, hi), 1.0)
        # the line through the median busy time at the split in effect (the estimate's
        # robust mean of times per micro-batch over a window that can hold two splits is
        # not the time at either count where it depends on the count)
        per_mb = np.where(affine, share * busy_now / at, t)
        fixed = np.where(affine, (1.0 - share) * busy_now, 0.0)
        return BusyModel(fixed, per_mb, tuple(int(i) for i in np.flatnonzero(affine)))

    # -- decision -------------------------------------------------------------------------
    def step_costs_s(self, since: int, last: int | None = None,
                     split: tuple[int, ...] | None = None,
                     relative: bool = False) -> np.ndarray:
        """The measured compute step ``max_i (m_i + stages - 1) x_i`` of each complete step
        from ``since`` (the ``last`` of them when given; ``m_i``: the split in effect in
        that step, ``x_i``: replica i's seconds per micro-batch); with ``split``, only the
        steps that ran it."""
        steps, x = self._complete(since, split)
        if last is not None:
            steps, x = steps[-last:], x[-last:]
        if steps.size == 0:
            return np.zeros(0)
        counts = self._counts_of(steps)
        if relative:  # in units of the step's common level: load on every replica cancels
            x = x / lower_median(x, axis=1)[:, None]
        return np.asarray(np.max((counts + (self.stages - 1)) * x, axis=1), dtype=np.float64)

    def predicted_from_runs_s(self, counts: Sequence[int] | np.ndarray) -> float:
        """The compute step of ``counts`` from the steps that ran it (of those kept, the
        last ``window``): their measured compute steps relative to each step's common level
        (median), times the present common level (the estimate's window). NaN when fewer
        than ``min_steps`` steps ran it. Where a replica's time per micro-batch depends on
        the split (replicas sharing cores; a sleeping straggler that wakes late when its
        core is busy), this is what the split did, where :meth:`predicted_step_s` assumes
        the times measured with another split."""
        split = tuple(int(c) for c in counts)
        steps, x = self._complete(split=split)
        ran = self._counts_of(steps) if steps.size else np.zeros((0, self.dp))
        ok = np.all(ran == np.asarray(split), axis=1)  # (what ran, else what was planned)
        steps, x = steps[ok][-self.window:], x[ok][-self.window:]
        if steps.size < self.min_steps:
            return float("nan")
        rel = x / lower_median(x, axis=1)[:, None]
        cost = np.max((np.asarray(split) + (self.stages - 1)) * rel, axis=1)
        _, recent = self._complete()
        level = float(np.median(lower_median(recent[-self.window:], axis=1)))
        return float(np.median(cost)) * level

    def measured_step_s(self, since: int, last: int | None = None,
                        split: tuple[int, ...] | None = None) -> float:
        """Median of :meth:`step_costs_s` (NaN when there is no step)."""
        c = self.step_costs_s(since, last, split)
        return float(np.median(c)) if c.size else float("nan")

    def noise(self, *samples: np.ndarray) -> float:
        """The relative spread of measured compute steps: each sample's steps relative to
        that sample's median, one step's :func:`step_spread` pooled over the samples (0
        with fewer than 2 steps). The MAD used before was 0.67-0.88 of the spread on the
        4-10 steps a trial and its split before have (a trial decided on noise), and 0
        where more than half the steps tie at the median (the fast replica's micro-batches,
        the step's common level, set every step's cost)."""
        rel = [(c / np.median(c) - 1)[:, None] for c in samples if c.size]
        if not rel:
            return 0.0
        sd = float(step_spread(*rel)[0])
        return sd if np.isfinite(sd) else 0.0

    def resolution(self, noise: float, n_new: int, n_before: int) -> float:
        """The relative difference between the medians of ``n_new`` and ``n_before``
        measured steps that ``significance`` standard errors span at ``noise`` (the
        standard error of a median: 1.2533 x the spread / sqrt(n))."""
        return float(self.significance * MEDIAN_SE * noise
                     * np.sqrt(1 / max(n_new, 1) + 1 / max(n_before, 1)))

    def _keep_trial(self, costs: np.ndarray, before: np.ndarray, gain: float,
                    even: bool) -> bool:
        """The trial's verdict so far: False (take it back) when its measured steps
        ``costs`` are significantly slower than ``before`` (the split before's), beyond
        ``tolerance`` for the even split; sets ``_inconclusive`` when neither significantly
        slower nor faster. Once ``window`` steps ran it, an inconclusive trial is weighed
        against the prediction: the posterior mean of the relative change, with the
        predicted one (``-gain``, spread ``gain``) as the prior, must not exceed the
        slack."""
        diff = float(np.median(costs) / np.median(before)) - 1
        res = self.resolution(self.noise(costs, before), costs.size, before.size)
        slack = self.tolerance if even else 0.0
        self._trial_diff, self._trial_res = diff, res
        self._inconclusive = -res < diff <= slack + res
        if diff > slack + res:
            return False
        if not self._inconclusive or costs.size < self.window:
            return True
        se2 = (res / self.significance) ** 2 if self.significance > 0 else 0.0
        if se2 == 0:
            return diff <= slack
        g = max(gain, self.tolerance, 1e-9)
        post = (diff / se2 - 1 / g) / (1 / se2 + 1 / g ** 2)
        return post <= slack

    def _switch(self, new: tuple[int, ...]) -> None:
        self._taken_back = None  # (a take-back sets it again after its switch)
        if new != self.even:
            self._side = np.sign(np.asarray(new) - np.asarray(self.even))
        since = int(self._steps[-1]) + 1 if self._steps.size else 0
        if self.even in (self.counts, new):
            self._fit_from = since
        self.counts, self._since = new, since
        self._hist_from = np.append(self._hist_from, since)
        self._hist = np.vstack([self._hist, np.asarray(new, dtype=np.int64)])
        self.changes += 1

    def plan(self) -> tuple[int, ...]:
        """The micro-batch counts per replica for the next step: the split in effect unless
        the measurements call for another (the even split whenever it is within
        ``tolerance`` of the best). Returned counts different from the last ones are taken
        to be in effect from the step after the last one observed.

        Every change is a *trial*, measured before it is kept (the module docstring says
        how): from ``min_steps`` steps with it, a trial significantly slower than the split
        before (:meth:`step_costs_s`, within ``tolerance`` for the even split) is taken back
        and no other change is tried for ``window`` steps, doubled after each failed trial
        in a row; an inconclusive one runs on up to ``window`` steps and is then weighed
        against its prediction; refinements away from even below the measurable gain are
        not tried (moves toward even are).
        (Where replicas share a resource — two ranks on the cores of one machine — a
        replica's time per micro-batch depends on the split, and the model ``m_i t_i``
        alone drifts.) A replica that got faster in a level shift (a
        recovery) makes the loop try the even split, also during a back-off."""
        if self.dp < 2 or not self._steps.size:
            return self.counts
        last = int(self._steps[-1])
        self._trial_diff, self._trial_res = float("nan"), float("nan")
        held, _ = self._complete(self._since, self.counts)
        if held.size < self.min_steps:
            return self._noted(last, "warming")
        back = self._back_to_even(held) if self.counts != self.even else None
        if back is not None:
            # the replicas measure alike over the last 2 x min_steps steps of the split, or the
            # slow one recovered (nearer the others' level than its own before), unlike
            # the steps before: straight back to even, whatever trial or back-off was
            # running (its regime is gone); not a trial itself: leaving even again needs a
            # new onset's evidence
            self._trial = None
            self._backoff, self._cooldown_until = 0, -1
            self._switch(self.even)
            self._given_back = True
            return self._noted(last, back, self.estimate())
        if self._trial is not None:
            prev, before, gain = self._trial.before, self._trial.costs, self._trial.gain
            before_s, before_steps = self._trial.costs_s, self._trial.steps
            costs = self.step_costs_s(int(held[0]), split=self.counts, relative=True)
            keep = self._keep_trial(costs, before, gain, self.counts == self.even)
            costs_s = self.step_costs_s(int(held[0]), split=self.counts)
            if not keep and before_s.size and float(
                    np.median(costs_s) / np.median(before_s)) - 1 < -self.resolution(
                    self.noise(costs_s, before_s), costs_s.size, before_s.size):
                # slower relative to the steps' common level but significantly faster in
                # seconds: the fast replica got faster (load left its core), not the split
                # slower; kept
                keep, self._inconclusive = True, False
            if not keep and not self._other_regime(prev):
                self._trial = None
                self._cooldown_until = last + self.window * 2 ** self._backoff
                self._backoff += 1
                self.reverted += 1
                tried = self.counts
                self._switch(prev)
                self._taken_back = _TakenBack(tried, prev, before_steps, held)
                return self._noted(last, "trial taken back")
            if keep and held.size < self.window and self._inconclusive:
                return self._noted(last, "trial runs on")  # (up to window steps)
            self._trial = None
            self._backoff = 0
        est = self.plan_estimate()
        if est is None:
            return self._noted(last, "no estimate")
        recovered = any(self.counts[i] < self.m for i in est.faster)
        shifted = False
        if last < self._cooldown_until and not recovered:
            # (a recovery ends the cooldown: the split it was for is gone)
            if not self._shifted_since_take_back():
                return self._noted(last, "cooldown", est)
            # the restored split measures the cut replica as slow as the trial did: the
            # trial met a level shift, not its own effect. The cooldown is void and the
            # plan starts again from the steps since the take-back (the new level)
            shifted = True
            self._taken_back = None
            self._cooldown_until = -1  # (the back-off stays: a re-plan taken back waits longer)
            self._regime = self._fit_from = self._since
            est = self.plan_estimate()
            if est is None:  # (min_steps steps ran the restored split since: not reached)
                return self._noted(last, "no estimate")
            recovered = any(self.counts[i] < self.m for i in est.faster)
        model = self.busy_model(est)  # the same model predicts and judges every split

        def cost(counts: Sequence[int] | np.ndarray) -> float:
            return model.step(counts, self.stages)

        best = model.best(self.m * self.dp, self.stages)
        limit = cost(best) * (1 + self.tolerance)
        # the split's recent steps relative to their common level, as trials are judged
        # (in seconds, machine-wide load jumps inflated the noise and held back refinements
        # the trial would have resolved)
        now = self.step_costs_s(self._since, est.steps, self.counts, relative=True)
        extra = {"best": tuple(int(c) for c in best),
                 "predicted_even_s": cost(self.even),
                 "predicted_now_s": cost(self.counts),
                 "predicted_best_s": cost(best), "noise": self.noise(now), "model": model}
        if recovered and self._fully_recovered(est):
            new, reason = self.even, "recovered"
        elif recovered and self._fully_recovered(est, bound=False):
            # nearer the others at its new level, not at its bound (its last steps can hold
            # the shift itself, or a low swing): the next steps say which
            new, reason = self.counts, "waiting"
        elif recovered and (self.toward_even(best) or self._crosses(best)):
            # faster, but nearer its old level than the others': the split for its new
            # level, toward even (past even: even first)
            new, reason = ((self.even, "even first") if self._crosses(best) else
                           (tuple(int(c) for c in best), "partly recovered"))
        elif cost(self.even) <= limit:
            new, reason = self.even, "even within tolerance"
        elif cost(self.counts) <= limit:
            new, reason = self.counts, "kept within tolerance"
        else:
            new, reason = tuple(int(c) for c in best), "changed"
            gain = 1 - cost(new) / cost(self.counts)
            if self.counts != self.even and self._crosses(new):
                # never past even in one move: even first, then a new onset's evidence
                new, reason = self.even, "even first"
            elif self.counts == self.even and self._side is not None:
                new, reason = self._new_onset()
            elif (self.counts != self.even and not self.toward_even(new)
                    and gain <= self.resolution(self.noise(now), self.window, now.size)):
                # a refinement away from even that its trial could not tell apart from the
                # split in effect at this noise: not tried
                self.held_back += 1
                new, reason = self.counts, "held back"
            elif (self.counts != self.even and not self.toward_even(new)
                    and self._faster_at_the_end(est, new)):
                # a refinement away from even while the last steps of a replica it would
                # cut further are outliers on the faster side (a level shift starting, such
                # as a recovery): wait for them
                new, reason = self.counts, "waiting"
        if new != self.counts:
            gain = 1 - cost(new) / cost(self.counts)
            now_s = self.step_costs_s(self._since, est.steps, self.counts)
            now_steps = self._complete(self._since, self.counts)[0][-est.steps:]
            self._trial = _Trial(self.counts, now, now_s, now_steps, gain)
            self._switch(new)
            if shifted and reason in ("changed", "new onset"):
                reason = "level shift"
            if recovered:  # a level shift: the steps before it are not this split's effect
                self._fit_from = self._since
            self._given_back = reason == "recovered"
        return self._noted(last, reason, est, **extra)

    def _shifted_since_take_back(self) -> bool:
        """Whether the split restored by the last trial taken back measures a replica the
        trial cut as slow as the trial did: the trial met a level shift (a straggler that
        worsened as the split changed), not its own effect. From the trial's steps alone the
        two look alike (a replica whose time per micro-batch rises when its micro-batches
        are cut: taking the trial back is right then); the steps after the take-back tell
        them apart: where the split was the cause, the replica's time falls back with it.
        Each replica's log time per micro-batch centred on the step's mean over the replicas
        (machine-wide load cancels), medians over three groups of steps: the restored
        split's before the trial, the trial's, and the restored split's since the take-back
        (at least ``min_steps``, the last ``window``). A shift when, for a replica the trial
        cut, the trial's median is above the one before by more than ``outlier_mads``
        standard errors (the trial saw it slower), the median since the take-back is above
        the one before by more than ``outlier_mads`` standard errors too (tested at every
        plan of the cooldown, as the level-shift test), and it is above the midpoint between
        the two (nearer the trial's level than its own before). The standard error of a
        median: 1.2533 x one step's spread / sqrt(n), the spread pooled over the groups
        before and since (not the trial's, which can hold the shift itself)."""
        tb = self._taken_back
        if tb is None or self.counts != tb.restored:
            return False
        _, after = self._complete(self._since, self.counts)
        after = after[-self.window:]
        if after.shape[0] < self.min_steps or tb.before_steps.size == 0:
            return False
        steps, x = self._complete()
        groups = [after, x[np.isin(steps, tb.before_steps)], x[np.isin(steps, tb.trial_steps)]]
        if min(g.shape[0] for g in groups) < 1:
            return False
        cut = np.asarray(tb.tried) < np.asarray(tb.restored)
        # centred on the step's mean over the replicas (not its lower median: with two
        # replicas half the ratios tie at 1, and a spread of ties is no spread)
        la, lb, lt = ((np.log(g) - np.log(g).mean(axis=1, keepdims=True))[:, cut]
                      for g in groups)
        ma, mb, mt = (np.median(v, axis=0) for v in (la, lb, lt))
        # one step's spread (:func:`_median_se_unit`) pooled over the steps before the
        # trial and after the take-back (the trial's can hold the shift itself); an
        # outlier only widens it, which keeps the cooldown
        spread = _median_se_unit(la, lb)
        se_after = spread * np.sqrt(1 / la.shape[0] + 1 / lb.shape[0])
        se_trial = spread * np.sqrt(1 / lt.shape[0] + 1 / lb.shape[0])
        rise, on_trial = ma - mb, mt - mb
        return bool(np.any((on_trial > self.outlier_mads * se_trial)
                           & (rise > self.outlier_mads * se_after) & (rise > on_trial / 2)))

    def _faster_at_the_end(self, est: Estimate, new: tuple[int, ...]) -> bool:
        """Whether one of the last ``min_steps // 2`` (at least 1) steps of ``est``'s window
        measured a replica that ``new`` gives fewer micro-batches than the split in effect
        faster, relative to the step's common level, than its median over the window by
        more than ``outlier_mads`` MADs (the estimate's own outlier rule,
        :meth:`_outlier_band`: those steps were rejected, and the estimate is the level
        before them)."""
        steps, x = self._complete(self._regime)
        x = x[-est.steps:]
        r = x / lower_median(x, axis=1)[:, None]
        med, band = self._outlier_band(r)
        low = r[-max(1, self.min_steps // 2):] < med - band
        cut = np.asarray(new) < np.asarray(self.counts)
        return bool(np.any(low[:, cut]))

    def _back_to_even(self, held: np.ndarray) -> str | None:
        """``alike`` when the last 2 x ``min_steps`` steps (on ``min_steps``, tested at
        every step, a steady x1.2 straggler under load passed for alike in 18 of 60 seeded
        runs; now 10), all with the split in effect, measure the replicas alike and unlike
        the steps before them in the window that ran the same split (at least 3: across a
        change of split, replicas measuring alike can be the split's effect on their
        speeds); else None. With each
        replica's log time per micro-batch centred on the step's mean over the replicas
        (machine-wide load cancels): the even split is within ``tolerance`` of the best at
        the recent steps' medians, and some replica's median moved by more than
        ``outlier_mads`` standard errors of the difference (each group's median's:
        :func:`_median_se_unit` of its own steps / sqrt(n); a recovery changes the spread).
        Medians of several
        steps: one step's ratio, or one outlier, moves neither."""
        k = 2 * self.min_steps
        steps, x = self._complete()
        steps, x = steps[-(k + self.window):], x[-(k + self.window):]
        if x.shape[0] < k + 3 or steps[-k] < int(held[0]):
            return None  # (the recent steps must all have run the split in effect)
        # the steps before them that ran the same split (at least 3): across a change of
        # split, replicas measuring alike can be the split's effect on their speeds
        same = np.isin(steps[:-k], held)
        if int(np.sum(same)) < 3:
            return None
        lx = np.log(x)
        d = lx - lx.mean(axis=1, keepdims=True)
        recent, older = d[-k:], d[:-k][same]

        m_new, m_old = np.median(recent, axis=0), np.median(older, axis=0)
        # each group's own spread (a recovery changes it: the straggler's own swing goes)
        se = np.sqrt(_median_se_unit(recent) ** 2 / recent.shape[0]
                     + _median_se_unit(older) ** 2 / older.shape[0])
        # ``outlier_mads`` standard errors, as the level-shift test: checked every step, a
        # replica steadily slower must not pass for a recovered one now and then
        moved = np.abs(m_new - m_old) > self.outlier_mads * se
        if not np.any(moved):
            return None
        # alike is a claim of equivalence: even within tolerance of the best not only at the
        # recent medians but at their bound ``significance`` standard errors toward the split
        # in effect (the replicas it cuts slower, the others faster). At the medians alone, a
        # steady x1.25 straggler whose last steps swung low passed for alike now and then
        se_new = _median_se_unit(recent) / np.sqrt(recent.shape[0])
        cut = np.asarray(self.counts) < np.asarray(self.even)
        t = np.exp(m_new + self.significance * np.where(cut, se_new, -se_new))
        best = best_split(t, self.m * self.dp, self.stages, source="Rebalancer: times")
        if step_of(self.even, t, self.stages) <= step_of(best, t, self.stages) * (
                1 + self.tolerance):
            return "alike"
        return None

    def _fully_recovered(self, est: Estimate, bound: bool = True) -> bool:
        """Whether each replica that got faster in the level shift is now nearer the others'
        level than its own level before (in log: at most half its old log excess over the
        fastest): the midpoint between two levels, where the new one is more likely.
        ``bound``: judged at the replica's level plus ``significance`` standard errors (a
        give-back); False: at its level alone (the loop then waits for more steps)."""
        if est.before.size != self.dp:
            return True
        i = np.asarray([j for j in est.faster if self.counts[j] < self.m], dtype=np.int64)
        # at the bound ``significance`` standard errors above its new level (a claim that it
        # is nearer the others: its last steps swinging low must not make it)
        new = np.log((est.relative[i] + bound * self.significance * est.stderr[i])
                     / np.min(est.relative))
        old = np.log(np.maximum(est.before[i] / np.min(est.before), 1.0))
        return bool(np.all(new <= old / 2))

    def _crosses(self, new: Sequence[int] | np.ndarray) -> bool:
        """Whether ``new`` puts a replica on the other side of even from the split in effect
        (fewer micro-batches than even where it had more, or the reverse)."""
        n, c, e = (np.asarray(v, dtype=np.int64) for v in (new, self.counts, self.even))
        return bool(np.any((n - e) * (c - e) < 0))

    def _new_onset(self) -> tuple[tuple[int, ...], str]:
        """Leaving even after a rebalanced split was given back: the evidence a first
        action has, on the steps at even only (none from before the return): at least
        ``min_steps`` of them, the replicas that would run fewer micro-batches measured
        slower than the fastest by more than ``significance`` standard errors, and the
        predicted gain above twice ``tolerance`` (a give-back comes with even within
        ``tolerance`` of the best: a band of one ``tolerance`` where neither moves). Then
        the best split for those steps (``new onset``), else even (``held at even``).
        After a give-back (:meth:`_new_onset_after_give_back`) the evidence is stronger,
        and so it is, however the split came back to even (a walk back by trials, ``even
        within tolerance``), for a best split that cuts a replica the last rebalanced split
        did not cut: a new straggler, not the one mitigated still slow at even (that one is
        re-detected on a first action's evidence)."""
        if self._given_back:
            return self._new_onset_after_give_back()
        est = self.estimate(since=self._since)
        if est is not None:
            t = est.times_s
            best = tuple(int(c) for c in best_split(t, self.m * self.dp, self.stages,
                                                    source="Rebalancer: times"))
            cut = np.asarray(best) < np.asarray(self.even)
            if self._side is not None and bool(np.any(cut & (self._side >= 0))):
                return self._new_onset_after_give_back()  # a new straggler
            gain = 1 - step_of(best, t, self.stages) / step_of(self.even, t, self.stages)
            lo = float(np.min(est.relative))
            slower = est.relative[cut] - lo > self.significance * est.stderr[cut]
            # a hysteresis band: the give-back came with even within ``tolerance`` of the
            # best, so leaving it needs more than twice that (no flapping around even)
            if best != self.even and bool(np.all(slower)) and gain > 2 * self.tolerance:
                return best, "new onset"
        self.refused += 1
        return self.even, "held at even"

    def _new_onset_after_give_back(self) -> tuple[tuple[int, ...], str]:
        """Leaving an even split that was a give-back (the replicas measured alike, or the
        slow one recovered): the steps at even since (the last 2 x ``window`` at most, at
        least 2 x ``min_steps``) cut in two disjoint halves, the replicas the best split cuts
        are slower than the fastest, step by step, in each half, and the best split gains
        more than twice ``tolerance`` over even in both. After a recovery each replica can
        swing on its own from step to step (a loaded machine: 0.8-1.3x); one window of
        ratios relative to each step's lower median, tested at every step, found one
        replica "slower" by chance (half the ratios of two replicas tie at 1: too small a
        spread) and the loop left even again; a strong new straggler passes both halves
        after 2 x ``min_steps`` steps."""
        done, _ = self._complete(self._since)
        n = min(done.size, 2 * self.window) // 2
        if n >= self.min_steps:
            cut = int(done[-n])
            recent = self.estimate(since=cut)
            older = self.estimate(since=int(done[-2 * n]), until=cut)
            if recent is not None and older is not None:
                best = tuple(int(c) for c in best_split(
                    recent.times_s, self.m * self.dp, self.stages, source="Rebalancer: times"))
                if (best != self.even
                        and self._slower_by_a_gain(recent, best, cut, None)
                        and self._slower_by_a_gain(older, best, int(done[-2 * n]), cut)):
                    return best, "new onset"
        self.refused += 1
        return self.even, "held at even"

    def _slower_by_a_gain(self, est: Estimate, best: tuple[int, ...], since: int,
                          before: int | None) -> bool:
        """Whether, over ``est``'s steps (the last ``est.steps`` complete ones from
        ``since``, before ``before`` when given), the replicas that ``best`` gives fewer
        micro-batches than even are slower than the fastest step by step (a paired test:
        the median of the log ratio of their times in the same step above ``significance``
        standard errors of a median, :func:`_median_se_unit`) and ``best`` gains more than
        twice ``tolerance`` over even at ``est``'s times."""
        t = est.times_s
        gain = 1 - step_of(best, t, self.stages) / step_of(self.even, t, self.stages)
        if gain <= 2 * self.tolerance:
            return False
        steps, x = self._complete(since)
        if before is not None:
            x = x[steps < before]
        x = x[-est.steps:]
        lx = np.log(x)
        d = lx[:, np.asarray(best) < np.asarray(self.even)] - lx[
            :, [int(np.argmin(est.relative))]]
        med = np.median(d, axis=0)
        se = _median_se_unit(d) / np.sqrt(d.shape[0])  # a median's
        return bool(np.all(med > self.significance * se))

    def _other_regime(self, prev: tuple[int, ...]) -> bool:
        """Whether the split before a trial moved micro-batches toward replicas the estimate
        now measures slower (another replica became the straggler during the trial): the
        trial's steps and those before it belong to different regimes, it is void (neither
        kept nor taken back on its measure) and the estimate decides."""
        est = self.estimate()
        if est is None or prev == self.even:
            return False
        best = best_split(est.times_s, self.m * self.dp, self.stages, source="Rebalancer: times")
        e = np.asarray(self.even)
        return bool(np.any((np.asarray(prev) - e) * (best - e) < 0))

    def toward_even(self, new: Sequence[int] | np.ndarray) -> bool:
        """Whether ``new`` lies between the split in effect and the even split (each
        replica's count moved toward its even count or not at all) and differs from it."""
        n, c, e = (np.asarray(v, dtype=np.int64) for v in (new, self.counts, self.even))
        return bool(np.any(n != c) and np.all((n - e) * (c - e) >= 0)
                    and np.all(np.abs(n - e) <= np.abs(c - e)))

    def _noted(self, step: int, reason: str, est: Estimate | None = None,
               **extra: Any) -> tuple[int, ...]:
        if "predicted_from_runs_s" not in extra:
            extra["predicted_from_runs_s"] = self.predicted_from_runs_s(self.counts)
        self.last_plan = PlanNote(step=step, counts=self.counts, reason=reason, estimate=est,
                                  trial_change=self._trial_diff,
                                  trial_resolution=self._trial_res, **extra)
        return self.counts

    def reset(self, counts: Sequence[int] | None = None, since: int = -1) -> None:
        """Set the split in effect (e.g. one applied by other means) from step ``since``;
        the plans' estimates use no step before ``since`` (a regime known by other means,
        such as a straggler's onset placed by a detector: the steps before it are of
        another level)."""
        c = tuple(int(x) for x in (counts if counts is not None else self.even))
        if len(c) != self.dp or sum(c) != self.m * self.dp or min(c) < 1:
            raise InputError(f"Rebalancer.reset: {list(c)} is not a split of "
                             f"{self.m * self.dp} micro-batches over {self.dp} replicas")
        self.counts, self._since = c, since
        self._regime = since  # the plans' estimates use no step before it
        self._fit_from = since
        # a fresh start (e.g. the live loop's give-back at the end of an episode): no side
        self._side = (np.sign(np.asarray(c) - np.asarray(self.even)) if c != self.even
                      else None)
        self._given_back = False
        self._hist_from = np.append(self._hist_from, max(since, 0))
        self._hist = np.vstack([self._hist, np.asarray(c, dtype=np.int64)])
        self._trial, self._backoff, self._cooldown_until = None, 0, -1
        self._taken_back = None
