"""Slow-iteration detection on an iteration-time series (Falcon-Detect §4.2).

The detectors share one streaming interface (:class:`Detector`: ``update(x) -> alarms``);
besides the robust default (:mod:`stragglers.detect.robust`):

``bocd_verify``
    Bayesian online change-point detection followed by the verification step: a change point is
    accepted only if the mean iteration time after it differs from the mean before it by at least
    ``threshold`` (10 % by default).  This is Falcon's BOCD+V.
``bocd``
    The same change points without verification (``threshold=0``, ``min_segment=1``): every
    confident change point is reported.  Falcon's "BOCD" baseline.
``sliding_window``
    Falcon's slide-window baseline: a fail-slow is reported when the median of the last
    ``window`` iterations exceeds the median of the ``window`` iterations before them by more than
    ``threshold``; it ends when the median comes back within ``threshold`` of the healthy median.

BOCD model (Adams & MacKay 2007, Falcon appendix 9.1)
-----------------------------------------------------
The series fed to :class:`BOCD` is modelled as segments of i.i.d. Normal observations with
unknown mean and precision under a conjugate Normal-Gamma prior ``(mu0, kappa0, alpha0, beta0)``,
separated by change points that occur with a constant hazard ``H``.  The run length ``r_t`` is the
number of observations that precede ``x_t`` in its segment (``r_t = 0``: ``x_t`` starts a new
segment, i.e. a change point at ``t``; the first observation always has ``r_1 = 0``).  The exact
recursion is::

    P(r_t = 0,   x_1..t) = H     * pi_prior(x_t)        * P(x_1..t-1)
    P(r_t = r+1, x_1..t) = (1-H) * pi_r(x_t | run stats) * P(r_t-1 = r, x_1..t-1)

where ``pi`` is the Student-t posterior predictive of the Normal-Gamma model.  One update costs
O(number of run lengths kept) and is vectorised over run lengths; the per-run-length constants
(``lgamma`` terms) are tabulated once.

Pruning (documented approximation).  The exact posterior keeps one entry per past time step, so a
long healthy regime makes every update O(t).  ``prune_below`` drops run lengths whose posterior
mass is below that value and ``max_runs`` keeps at most that many run lengths (the least probable
ones are dropped, never the most probable one); the dropped mass is renormalised away and
accumulated in :attr:`BOCD.dropped_mass`.  With both disabled (``prune_below=0``,
``max_runs=None``) the posterior is exact; the tests check both the exact and the default
detector configuration against a brute-force enumeration of all segmentations (to 1e-9) on short
series, and check on long series that the pruned detector raises the same alarms as the exact one.
The detector uses ``max_runs=512, prune_below=1e-12``: on the benchmark corpus (seed 0, every 10th
series) that drops about 1.5e-6 of posterior mass per update, and on the 12 shortest of those
series the alarms are identical to the exact posterior's (``bench/detect_eval.py --pruning``).

Detection rule
--------------
After each update, the candidate change point is the start ``tau`` of the most probable run.  It
is *confident* when the posterior mass of run lengths within ``location_tolerance`` (2) of the
most probable one is at least ``cp_threshold`` (0.9, as in Falcon).  A confident candidate that
starts more than ``location_tolerance`` points after the current regime start and already spans
``min_segment`` (8) points is verified against the *reference level* of the current regime (the
outlier-trimmed mean, :func:`robust_stats`, of its first ``reference_points`` = 30 points, so a
checkpoint iteration does not move the level): the outlier-trimmed mean of the candidate's points
(its latest 30 at most) must differ from the reference by at least ``threshold`` (10 %) plus
``margin_se`` (1) standard errors of the difference of the two means (relative jitter estimated
from the MAD of either window).  The margin only matters for short, noisy candidates: a 3-point
bump in 5 % jitter is not a 10 % slowdown.  If verified, a new regime starts at ``tau``.

Additions to Falcon's rule, documented here and switched off for the plain ``bocd`` baseline:

* a candidate that stays unverified for ``2 * reference_points`` points is absorbed into the
  regime (typically the run BOCD restarts after a spike);
* ``drift_check``: every ``reference_points / 2`` points of a regime longer than
  ``2 * reference_points``, the trimmed mean of its latest 30 points is verified the same way.
  BOCD absorbs a slow ramp (MFU decline) into one run, so without this check a gradual drift is
  only seen very late or not at all.

Rules for real training logs (issue 9: real Megatron-LM runs have spikes, clusters of spikes,
restarts and a level that wanders), active when ``persist_fraction > 0`` (BOCD+V):

* *spikes are not a level* (``persist_fraction`` = 0.8, ``min_segment`` = 8): a candidate is
  verified only when at least 80 % of its points lie beyond the midpoint between the regime
  level and the candidate level, and it spans at least 8 points; an upward candidate is
  verified on the smallest of its trimmed mean, its median and the trimmed mean of its points
  that are not spikes (:func:`without_spikes`: at most ``SPIKE_FACTOR`` = 1.2 times its lower
  quartile; spikes only go up).  A cluster of spikes with healthy iterations between them, or
  up to 6 spikes in a row, never opens a slow period, and spikes on a level 9 % higher (a
  saw-tooth peak) do not make it look 10 % higher;
* *a level that started earlier*: BOCD restarts its run at a spike inside a new level, so the
  candidate's start is moved back over the points just before it that already lie beyond the
  midpoint between the regime level and the candidate's level without its spikes (a candidate
  that begins with a cluster of spikes on top of a new level reaches back to where the level
  began), and its confidence is the posterior mass of all runs started since then
  (``BOCD.mass_since``) rather than the mass near one run length;
* *a slow period that starts on a lower step*: when healthy, the start of an upward
  candidate also moves back over a lower step just before it (a communication slowdown that
  a computation slowdown joins a few points later, shorter than ``min_segment``): at least
  ``min_segment // 2`` points beyond the midpoint between the regime level and the slow
  limit whose level without spikes is itself slow.  The onset is then located and declared
  from the first slow point, not from the upper step;
* *a new level inside an older candidate*: spikes in BOCD's current run widen its variance
  (a Normal model), so a new level right after them looks like more of that run for several
  points and the candidate stays the older run, a mixture of both levels.  When the
  candidate fails, its trailing points that lie beyond the midpoint between the regime level
  and the median of the latest ``min_segment`` points without their spikes are verified as a
  candidate of their own (at least ``min_segment`` of them, the same verification);
* *the reference still forms among spikes*: while a regime has fewer than 30 reference points,
  they are taken from its points before the current candidate (frequent spikes keep BOCD
  proposing short runs, which would otherwise leave the regime without a reference);
* *a return always recovers*: when slow, a candidate below the slow limit needs to be only
  half-way back from the slow level (beyond the noise), not ``threshold`` below it, to give
  the ``recovery`` (a slow level 10-20 % above healthy returning to it used to stay "slow");
* *the healthy band* (``band_points`` = 1000): the median of the latest 30 points, every 15
  points of a healthy regime, that lies more than ``threshold / 2`` above the healthy level is
  held as the possible top of the band, and becomes it once the level comes back below
  ``threshold / 4`` above healthy.  For ``band_points`` points after that (counted again from
  each recovery), the job is slow only from ``max(healthy * (1 + threshold), band top * (1 +
  threshold / 4))``: a job whose speed wanders by 11 % between checkpoints (a saw-tooth) is
  not slow at each peak; a level that only goes up (a drift) never widens the band.  A
  level the job ran at while healthy and then left for a lower healthy level is in the band
  too: the regime before a ``speedup`` (a series that starts on a saw-tooth peak) and the
  healthy level before a slow period that recovers onto a trough.  While the band holds, the
  start of an upward candidate moves back only over points beyond the midpoint between the
  band's top and the new level (a saw-tooth peak just before a slow period is not part of
  it);
* *slow is slow from any healthy level*: from a healthy regime above the healthy level (a
  saw-tooth peak verified as a ``change``), an upward candidate needs to reach the slow
  limit (at least ``threshold / 2`` above that regime, plus the noise margin), not
  ``threshold`` above it.

Alarm kinds:

* ``onset``: the job was healthy and the new level is at least the slow limit
  (``(1 + threshold)`` times the healthy level, or above the healthy band, see above);
* ``change``: the job was already slow and stays slow at a different level (ladder steps,
  compound slowdowns, partial recovery);
* ``recovery``: the job was slow and the new level is within ``threshold`` of the healthy level;
* ``speedup``: the job was healthy and became faster (the healthy level is lowered).

The healthy level is the reference level of the first regime (or of the latest ``speedup``).
``severity`` is the throughput loss ``1 - healthy_level / level`` of the new regime.  BOCD runs on
``log(iteration time)``, so the prior is scale-free: ``mu0`` is the log of the first iteration
time and ``beta0 / alpha0`` is the expected squared relative jitter.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy.special import gammaln

from stragglers.detect.detector import Alarm, Detector, median_sorted
from stragglers.detect.robust import RobustLevelDetector
from stragglers.detect.spikes import SPIKE_FACTOR
from stragglers.detect.warmup import DEFAULT_MIN_ITERS

__all__ = [
    "BOCD",
    "BOCDDetector",
    "BOCDVerifyDetector",
    "METHODS",
    "NormalGammaPrior",
    "SlidingWindowDetector",
    "make_detector",
    "robust_mean",
    "robust_stats",
    "run_detector",
]


@dataclass(frozen=True)
class NormalGammaPrior:
    """Conjugate prior of a Normal segment: mean ~ N(mu0, 1/(kappa0*tau)), tau ~ Gamma(alpha0,
    beta0)."""

    mu0: float = 0.0
    kappa0: float = 0.01
    alpha0: float = 1.0
    beta0: float = 1e-3

    def __post_init__(self) -> None:
        for name in ("kappa0", "alpha0", "beta0"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"NormalGammaPrior.{name} must be a positive number, got {value}")
        if not math.isfinite(self.mu0):
            raise ValueError(f"NormalGammaPrior.mu0 must be finite, got {self.mu0}")


class _Tables:
    """Per-run-length constants of the Student-t predictive, ``[a, a + 1/2, c, kf, ik]`` by
    observation count ``n``; they depend on ``kappa0`` and ``alpha0`` only, so every detector
    with the same prior shape shares one table (grown on demand) instead of holding its own."""

    __slots__ = ("kappa0", "alpha0", "rows", "size", "first")

    def __init__(self, kappa0: float, alpha0: float) -> None:
        self.kappa0 = kappa0
        self.alpha0 = alpha0
        self.size = 0
        self.rows: np.ndarray = np.empty((5, 0))
        self.grow(256)

    def grow(self, size: int) -> None:
        n = np.arange(size, dtype=float)
        kappa = self.kappa0 + n
        alpha = self.alpha0 + n / 2.0
        rows = np.empty((5, size))
        rows[0] = alpha
        rows[1] = alpha + 0.5
        rows[2] = gammaln(alpha + 0.5) - gammaln(alpha) - 0.5 * np.log(
            2.0 * np.pi * (kappa + 1.0) / kappa
        )
        rows[3] = kappa / (2.0 * (kappa + 1.0))
        rows[4] = 1.0 / (kappa + 1.0)
        self.rows = rows
        self.size = size
        self.first: list[float] = rows[:, 0].tolist()  # the constants at n = 0


_TABLES: dict[tuple[float, float], _Tables] = {}


def _tables(kappa0: float, alpha0: float) -> _Tables:
    key = (float(kappa0), float(alpha0))
    tab = _TABLES.get(key)
    if tab is None:
        tab = _TABLES[key] = _Tables(*key)
    return tab


class BOCD:
    """Online run-length posterior of Adams & MacKay's BOCD with a Normal-Gamma model.

    Runs are stored oldest first; ``n`` is the number of observations in each run *including* the
    latest one, so the run length of the paper is ``n - 1``.
    """

    def __init__(
        self,
        prior: NormalGammaPrior,
        hazard: float,
        *,
        max_runs: int | None = None,
        prune_below: float = 0.0,
    ) -> None:
        if not 0.0 < hazard < 1.0:
            raise ValueError(f"hazard must be in (0, 1), got {hazard}")
        if max_runs is not None and max_runs < 2:
            raise ValueError(f"max_runs must be at least 2, got {max_runs}")
        if not 0.0 <= prune_below < 1.0:
            raise ValueError(f"prune_below must be in [0, 1), got {prune_below}")
        self.prior = prior
        self.hazard = float(hazard)
        self.max_runs = max_runs
        self.prune_below = float(prune_below)
        self.t = 0
        self.log_evidence = 0.0
        self.dropped_mass = 0.0
        self._len = 0
        self._tab = _tables(prior.kappa0, prior.alpha0)
        self._cap = 0
        empty: np.ndarray = np.empty(0)
        self._n: np.ndarray = empty.astype(np.int64)
        self._state: np.ndarray = np.empty((5, 0))  # rows: w, mu, b, log b, aux
        self._grow_buffers(64)
        self._log_beta0 = math.log(prior.beta0)

    # -- buffers ------------------------------------------------------------------------------
    def _grow_buffers(self, cap: int) -> None:
        def grow(old: np.ndarray | None, dtype: type) -> np.ndarray:
            new: np.ndarray = np.empty(cap, dtype=dtype)
            if old is not None:
                new[: self._len] = old[: self._len]
            return new

        first = self._cap == 0
        self._n = grow(None if first else self._n, np.int64)
        state = np.empty((5, cap))
        state[:, : self._len] = self._state[:, : self._len]
        self._state = state
        self._w, self._mu, self._b, self._lb, self._aux = state
        self._cap = cap

    # -- update -------------------------------------------------------------------------------
    def update(self, x: float, aux: float | None = 0.0) -> None:
        """Absorb observation ``x``; ``aux`` is summed per run (e.g. the raw iteration time);
        ``None`` skips that sum (then :meth:`run_aux_sum` is meaningless)."""
        x = float(x)
        if not math.isfinite(x):
            raise ValueError(f"BOCD observation must be finite, got {x}")
        p = self.prior
        h = self.hazard
        tab = self._tab
        r0 = tab.first  # a, a + 1/2, c, kf, ik at n = 0
        d0 = x - p.mu0
        b0n = p.beta0 + r0[3] * d0 * d0
        lb0n = math.log(b0n)
        lp0 = r0[2] + r0[0] * self._log_beta0 - r0[1] * lb0n
        L = self._len
        if L == 0:
            self.log_evidence = lp0
            w0 = 1.0
        else:
            nmax = int(self._n[0]) + 2
            if nmax >= tab.size:
                tab.grow(max(2 * tab.size, nmax + 1))
            n = self._n[:L]
            mu = self._mu[:L]
            b = self._b[:L]
            lb = self._lb[:L]
            w = self._w[:L]
            # The same floating-point operations as the textbook form, done in place.
            ta, ta5, tc, tkf, tik = tab.rows.take(n, axis=1)
            d = x - mu
            t = d * d
            t *= tkf
            b += t  # b_n
            ta *= lb
            lp = ta  # a * log(b)
            np.log(b, out=lb)  # log(b_n)
            ta5 *= lb
            lp -= ta5
            lp += tc
            m = max(float(lp[lp.argmax()]), lp0)  # = lp.max(), without the reduce overhead
            lp -= m
            np.exp(lp, out=lp)
            w *= lp
            s = float(w.sum())
            e0 = math.exp(lp0 - m)
            z = h * e0 + (1.0 - h) * s
            w *= (1.0 - h) / z
            w0 = h * e0 / z
            self.log_evidence += m + math.log(z)
            d *= tik
            mu += d
            if aux is not None:
                self._aux[:L] += aux
            n += 1
        if L + 1 > self._cap:
            self._grow_buffers(2 * self._cap)
        self._n[L] = 1
        self._w[L] = w0
        self._mu[L] = p.mu0 + d0 * r0[4]
        self._b[L] = b0n
        self._lb[L] = lb0n
        self._aux[L] = 0.0 if aux is None else aux
        self._len = L + 1
        self.t += 1
        self._prune()

    def _prune(self) -> None:
        L = self._len
        w = self._w[:L]
        keep: np.ndarray | None = None
        if self.prune_below > 0.0 and float(w[w.argmin()]) < self.prune_below:
            mask = w >= self.prune_below
            if not mask.all():
                mask[int(np.argmax(w))] = True
                keep = np.flatnonzero(mask)
        if self.max_runs is not None and (L if keep is None else keep.size) > self.max_runs:
            target = self.max_runs - self.max_runs // 8
            cand = np.arange(L) if keep is None else keep
            top = np.argpartition(w[cand], cand.size - target)[cand.size - target :]
            keep = np.sort(cand[top])
        if keep is None:
            return
        k = keep.size
        dropped = 1.0 - float(w[keep].sum())
        self.dropped_mass += max(dropped, 0.0)
        self._n[:k] = self._n[keep]
        self._state[:, :k] = self._state[:, keep]
        self._w[:k] /= self._w[:k].sum()
        self._len = k

    # -- queries ------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of run lengths currently kept."""
        return self._len

    def run_lengths(self) -> np.ndarray:
        """Run lengths ``r_t`` currently kept (oldest run first)."""
        return self._n[: self._len] - 1

    def probabilities(self) -> np.ndarray:
        """Posterior ``P(r_t = r | x_1..t)`` aligned with :meth:`run_lengths`."""
        return self._w[: self._len].copy()

    def posterior(self) -> np.ndarray:
        """Dense posterior over run lengths ``0..t-1`` (index = run length)."""
        out = np.zeros(self.t)
        out[self.run_lengths()] = self._w[: self._len]
        return out

    def map_index(self) -> int:
        """Index (into the kept runs) of the most probable run."""
        return int(self._w[: self._len].argmax())

    def run_count(self, index: int) -> int:
        """Number of observations in the kept run ``index`` (run length + 1)."""
        return int(self._n[index])

    def run_aux_sum(self, index: int) -> float:
        """Sum of ``aux`` over the observations of the kept run ``index``."""
        return float(self._aux[index])

    def mass_since(self, count: int) -> float:
        """Posterior mass of runs of at most ``count`` observations (started since then)."""
        return float(self._w[: self._len][self._n[: self._len] <= count].sum())

    def mass_near(self, count: int, tolerance: int) -> float:
        """Posterior mass of runs whose observation count is within ``tolerance`` of ``count``."""
        n = self._n[: self._len]
        return float(self._w[: self._len][np.abs(n - count) <= tolerance].sum())


class _PositionsOnly(ABC):
    """The :class:`Detector` interface of a detector that takes positions only: no
    iteration numbers, no segments, no candidate stretch."""

    segmented = False
    default_warmup_iters = DEFAULT_MIN_ITERS

    @property
    def candidate_open(self) -> bool:
        return False

    @abstractmethod
    def update(self, x: float) -> list[Alarm]:
        """Absorb one iteration time (seconds, > 0) and return the alarms it triggers."""

    def observe(self, x: float, iteration: int, span: int = 1) -> list[Alarm]:
        return self.update(x)

    def new_segment(self) -> list[Alarm]:
        return []


def robust_stats(values: np.ndarray, k: float = 4.0, floor: float = 0.01) -> tuple[float, float]:
    """Outlier-trimmed mean and robust relative spread of ``values``.

    Points further than ``k`` robust standard deviations (``1.4826 * MAD``, floored at ``floor``
    times the median) from the median are dropped before averaging, so a single checkpoint or
    evaluation iteration does not move the level.  The spread is ``1.4826 * MAD / median``.
    """
    v = np.asarray(values, dtype=float)
    med = float(np.median(v))
    mad = 1.4826 * float(np.median(np.abs(v - med)))
    scale = max(mad, floor * abs(med))
    kept = v[np.abs(v - med) <= k * scale]
    mean = float(kept.mean()) if kept.size else med
    return mean, (mad / abs(med) if med else 0.0)


def _pairwise_sum(a: list[float]) -> float:
    """``np.sum`` of a float64 array of at most 128 values, bit for bit: numpy's pairwise
    summation (8 running sums, then the remainder), in plain Python for small inputs."""
    n = len(a)
    if n < 8:
        res = -0.0
        for x in a:
            res += x
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = a[:8]
    end = n - n % 8
    for i in range(8, end, 8):
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(end, n):
        res += a[i]
    return res


def robust_stats_small(values: list[float], k: float = 4.0, floor: float = 0.01
                       ) -> tuple[float, float]:
    """:func:`robust_stats` of at most 128 values given as a list, in plain Python (no numpy
    call overhead) and with the same result bit for bit (same medians, numpy's pairwise sum
    for the mean)."""
    if not 0 < len(values) <= 128:
        return robust_stats(np.asarray(values, dtype=float), k, floor)
    med = median_sorted(sorted(values))
    mad = 1.4826 * median_sorted(sorted([abs(x - med) for x in values]))
    scale = max(mad, floor * abs(med))
    lim = k * scale
    kept = [x for x in values if abs(x - med) <= lim]
    mean = _pairwise_sum(kept) / len(kept) if kept else med
    return mean, (mad / abs(med) if med else 0.0)


def without_spikes(values: list[float]) -> list[float]:
    """The points of a candidate segment that are not spikes: at most ``SPIKE_FACTOR`` (1.2)
    times its lower quartile.  Spikes only go up, so the lower quartile is the segment's level
    even when up to three quarters of its points are spikes (a cluster of spikes at the start of
    a slow period), where a median or a MAD-trimmed mean is pulled up by them."""
    s = sorted(values)
    cap = SPIKE_FACTOR * s[len(s) // 4]
    return [v for v in values if v <= cap]


def robust_mean(values: np.ndarray, k: float = 4.0, floor: float = 0.01) -> float:
    """Outlier-trimmed mean of ``values`` (see :func:`robust_stats`)."""
    return robust_stats(values, k, floor)[0]


def _check_positive(x: float, name: str) -> float:
    x = float(x)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} needs positive finite iteration times, got {x}")
    return x


@dataclass
class _Regime:
    start: int
    ref: float
    ref_points: int
    spread: float
    slow: bool
    defines_healthy: bool


class BOCDVerifyDetector(_PositionsOnly):
    """BOCD plus verification (Falcon's BOCD+V); see the module docstring for the exact rule."""

    name = "bocd_verify"

    def __init__(
        self,
        *,
        threshold: float = 0.10,
        hazard: float = 1.0 / 500.0,
        cp_threshold: float = 0.9,
        min_segment: int = 8,
        location_tolerance: int = 2,
        reference_points: int = 30,
        min_reference: int = 5,
        jitter_prior: float = 0.03,
        kappa0: float = 0.01,
        alpha0: float = 1.0,
        max_runs: int | None = 512,
        prune_below: float = 1e-12,
        drift_check: bool = True,
        margin_se: float = 1.0,
        persist_fraction: float = 0.8,
        band_points: int = 1000,
    ) -> None:
        if threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {threshold}")
        if min_segment < 1 or reference_points < 1 or min_reference < 1:
            raise ValueError("min_segment, reference_points and min_reference must be >= 1")
        if not 0.0 < cp_threshold <= 1.0:
            raise ValueError(f"cp_threshold must be in (0, 1], got {cp_threshold}")
        self.threshold = float(threshold)
        self.hazard = float(hazard)
        self.cp_threshold = float(cp_threshold)
        self.min_segment = int(min_segment)
        self.location_tolerance = int(location_tolerance)
        self.reference_points = int(reference_points)
        self.min_reference = int(min_reference)
        self.jitter_prior = float(jitter_prior)
        self.kappa0 = float(kappa0)
        self.alpha0 = float(alpha0)
        self.max_runs = max_runs
        self.prune_below = float(prune_below)
        self.drift_check = bool(drift_check)
        self.margin_se = float(margin_se)
        if not 0.0 <= persist_fraction <= 1.0:
            raise ValueError(f"persist_fraction must be in [0, 1], got {persist_fraction}")
        self.persist_fraction = float(persist_fraction)
        self.band_points = int(band_points)
        self.reset()

    def reset(self) -> None:
        """Forget everything (a new series)."""
        self.bocd: BOCD | None = None
        self._t = -1
        self._recent: deque[float] = deque(maxlen=2 * self.reference_points)
        self._regime = _Regime(
            start=0, ref=math.nan, ref_points=0, spread=0.0, slow=False, defines_healthy=True
        )
        self.healthy_level = math.nan
        self._pending_high = math.nan  # highest healthy level since the level was last low
        self._band_high = math.nan  # top of the healthy band (confirmed by a return)
        self._band_t = -1

    def _healthy_sample(self, level: float) -> None:
        """A level seen while healthy.  Levels above ``healthy * (1 + threshold / 2)`` are held
        as the possible top of the healthy band, and become it once the level has come back
        down (below ``healthy * (1 + threshold / 4)``) without an alarm (a job whose speed
        wanders, e.g. a saw-tooth between checkpoints); a level that only goes up (a drift)
        never widens the band."""
        if self.band_points <= 0 or self._regime.slow:
            return
        if level > self.healthy_level * (1.0 + 0.5 * self.threshold):
            if not level <= self._pending_high:
                self._pending_high = level
        elif (self._pending_high == self._pending_high
              and level <= self.healthy_level * (1.0 + 0.25 * self.threshold)):
            expired = self._t - self._band_t > self.band_points
            if expired or not self._pending_high <= self._band_high:
                self._band_high = self._pending_high
            self._band_t = self._t
            self._pending_high = math.nan

    def _slow_limit(self) -> float:
        """Level from which the job is slow: ``threshold`` above the healthy level, and a
        quarter of ``threshold`` above the top of the healthy band seen in the last
        ``band_points``."""
        limit = self.healthy_level * (1.0 + self.threshold)
        top = self._band_top()
        if top == top:
            limit = max(limit, top * (1.0 + 0.25 * self.threshold))
        return limit

    def _band_top(self) -> float:
        """Top of the healthy band while it holds (``band_points``), else NaN."""
        if self._band_high == self._band_high and self._t - self._band_t <= self.band_points:
            return self._band_high
        return math.nan

    def _prior(self, x: float) -> NormalGammaPrior:
        return NormalGammaPrior(
            mu0=math.log(x),
            kappa0=self.kappa0,
            alpha0=self.alpha0,
            beta0=self.alpha0 * self.jitter_prior**2,
        )

    def update(self, x: float) -> list[Alarm]:
        x = _check_positive(x, self.name)
        if self.bocd is None:
            self.bocd = BOCD(
                self._prior(x), self.hazard, max_runs=self.max_runs, prune_below=self.prune_below
            )
        self._t += 1
        t = self._t
        bocd = self.bocd
        bocd.update(math.log(x), aux=None)  # run sums come from _recent (see below)
        self._recent.append(x)
        reg = self._regime
        big = self.reference_points
        if (self.band_points > 0 and t % (big // 2 or 1) == 0 and t - reg.start >= big
                and not reg.slow):
            self._healthy_sample(median_sorted(sorted(self._recent_values(big))))
        j = bocd.map_index()
        count = bocd.run_count(j)
        tau = t - count + 1
        if tau > reg.start + self.location_tolerance and count >= 2 * big:
            # A candidate that never verified in 2 * reference_points points is part of the
            # regime (e.g. the run that BOCD restarted after a spike).
            reg.start = tau
        if tau <= reg.start + self.location_tolerance:
            # No distinct candidate: the point belongs to the current regime.
            length = t - reg.start + 1
            if reg.ref_points < big:
                self._grow_reference(length)
            elif self.drift_check and length >= 2 * big and length % (big // 2 or 1) == 0:
                values = self._recent_values(big)
                recent, spread = robust_stats_small(values)
                if self._differs(recent, spread, big) and self._persists(values, recent):
                    return [self._accept(t - big + 1, t, recent, big)]
                self._healthy_sample(recent)
            return []
        if reg.ref_points < big and self.persist_fraction > 0.0:
            # Spikes keep BOCD proposing short runs: the reference still grows from the
            # regime's points before the candidate.
            before = tau - reg.start
            if before > reg.ref_points and t - tau + 1 < len(self._recent):
                self._grow_reference(before, skip=t - tau + 1)
        if reg.ref_points < self.min_reference:
            return []
        if self.persist_fraction > 0.0:
            tau, count = self._extend(tau, t, count)
        if count < self.min_segment:
            return []
        # Cheap gate on the plain mean of the candidate run before the outlier-trimmed mean.
        # count < 2 * reference_points here (longer candidates were absorbed above), so the
        # run's points are the last `count` of _recent; summed in order, as BOCD's aux would.
        last = list(self._recent)
        plain = 0.0
        for v in last[len(last) - count :]:
            plain += v
        plain /= count
        if self.threshold > 0 and abs(plain - reg.ref) < 0.5 * self.threshold * reg.ref:
            return self._trailing(t, count)
        if self.persist_fraction > 0.0:
            # Confidence that the level changed at or after tau: the mass of all runs that
            # started since then (a spike inside a new level splits it between two runs).
            if bocd.mass_since(count + self.location_tolerance) < self.cp_threshold:
                return []
        elif bocd.mass_near(count, self.location_tolerance) < self.cp_threshold:
            return []
        return self._verify(tau, t, count) or self._trailing(t, count)

    def _trailing(self, t: int, count: int) -> list[Alarm]:
        """A new level inside an older candidate run: its trailing points that lie beyond the
        midpoint between the regime level and the spike-free level of the latest
        ``min_segment`` points, verified as a candidate of their own (spikes in the older run
        widen its variance so much that BOCD takes several points to start a new run)."""
        if self.persist_fraction <= 0.0:
            return []
        m0 = self.min_segment
        window = self._recent
        n = len(window)
        if n < m0 or count <= m0:
            return []
        ref = self._regime.ref
        # Cheap gate: the latest min_segment points all lie a quarter of the threshold or
        # more beyond the regime level, on one side (else their midpoint test fails anyway).
        hi = ref * (1.0 + 0.25 * self.threshold)
        lo = ref * (1.0 - 0.25 * self.threshold)
        if lo <= window[-1] <= hi:
            return []
        above = below = 0
        for i in range(n - m0, n):
            v = window[i]
            if v > hi:
                above += 1
            elif v < lo:
                below += 1
        if above < m0 and below < m0:
            return []
        recent = list(window)
        level = median_sorted(sorted(without_spikes(recent[n - m0:])))
        mid = 0.5 * (level + ref)
        up = level > ref
        limit = min(n, count - 1, 2 * self.reference_points - 1)
        m = 0
        while m < limit:
            v = recent[n - 1 - m]
            if (v > mid) if up else (v < mid):
                m += 1
            else:
                break
        if m < m0:
            return []
        return self._verify(t - m + 1, t, m)

    def _verify(self, tau: int, t: int, count: int) -> list[Alarm]:
        """Verification of the candidate of the latest ``count`` points (from ``tau``)."""
        big = self.reference_points
        k = min(count, big)
        values = self._recent_values(k)
        after, spread = robust_stats_small(values)
        level = after
        if self.persist_fraction > 0.0 and after > self._regime.ref:
            # Spikes are not a level: an upward candidate is verified on the smallest of its
            # trimmed mean, its median and the trimmed mean of its points that are not spikes
            # (spikes inside a few points of a slightly higher level do not make it a slow one).
            level = min(after, median_sorted(sorted(values)),
                        robust_stats_small(without_spikes(values))[0])
        if not self._differs(level, spread, k) or not self._persists(values, after):
            return []
        return [self._accept(tau, t, after, count, judged=level)]

    def _grow_reference(self, length: int, skip: int = 0) -> None:
        """(Re)compute the regime's reference level from its first points (at most
        ``reference_points``), ``skip`` being the latest points that are not part of it."""
        reg = self._regime
        reg.ref_points = min(length, self.reference_points)
        recent = list(self._recent)
        if skip:
            recent = recent[:-skip]
        values = recent[-reg.ref_points:] if reg.ref_points < len(recent) else recent
        reg.ref_points = len(values)
        reg.ref, reg.spread = robust_stats_small(values)
        if reg.defines_healthy:
            self.healthy_level = reg.ref
        if reg.ref_points == self.reference_points:
            self._healthy_sample(reg.ref)

    def _extend(self, tau: int, t: int, count: int) -> tuple[int, int]:
        """Move the candidate's start back over the points just before it that already lie
        beyond the midpoint between the regime level and the candidate level (a spike inside
        a new level makes BOCD restart its run: the level began earlier)."""
        recent = list(self._recent)
        n = len(recent)
        k = min(count, self.reference_points)
        level = median_sorted(sorted(without_spikes(recent[n - k:])))
        ref = self._regime.ref
        up = level > ref
        base = ref
        if up and not self._regime.slow:
            # Points within the healthy band are healthy: beyond the midpoint between the
            # band's top and the new level (a saw-tooth peak just before a slow period).
            top = self._band_top()
            if top < level:
                base = max(ref, top)
        mid = 0.5 * (level + base)
        limit = min(n - count, tau - self._regime.start - self.location_tolerance - 1,
                    2 * self.reference_points - count)
        back = 0
        while back < limit:
            v = recent[n - count - back - 1]
            if (v > mid) if up else (v < mid):
                back += 1
            else:
                break
        if up and not self._regime.slow and back < limit:
            back += self._lower_step(recent, n - count - back, limit - back)
        return tau - back, count + back

    def _lower_step(self, recent: list[float], end: int, limit: int) -> int:
        """A slow period that starts on a lower step (a communication slowdown that a
        computation slowdown joins a few points later, both slow): the points just before
        ``recent[end]`` that lie beyond the midpoint between the regime level and the slow
        limit, when there are at least ``min_segment // 2`` of them and their level without
        spikes is itself slow.  Their number (0 when they are no slow step)."""
        slow = self._slow_limit()
        low = 0.5 * (self._regime.ref + slow)
        b = 0
        while b < limit and recent[end - b - 1] > low:
            b += 1
        if b < max(1, self.min_segment // 2):
            return 0
        step = without_spikes(recent[end - b:end])
        return b if median_sorted(sorted(step)) >= slow else 0

    def _persists(self, values: list[float], level: float) -> bool:
        """Spikes are not a level: at least ``persist_fraction`` of the candidate's points lie
        beyond the midpoint between the regime level and the candidate level (a cluster of
        spikes with healthy iterations between them does not)."""
        if self.persist_fraction <= 0.0:
            return True
        mid = 0.5 * (level + self._regime.ref)
        if level > self._regime.ref:
            beyond = sum(1 for v in values if v > mid)
        else:
            beyond = sum(1 for v in values if v < mid)
        return beyond >= self.persist_fraction * len(values)

    def _recent_values(self, k: int) -> list[float]:
        recent = list(self._recent)
        return recent[-k:] if k < len(recent) else recent

    def _differs(self, level: float, spread: float, points: int) -> bool:
        """Verification: the relative difference to the regime level must reach ``threshold``
        plus ``margin_se`` standard errors of the difference of the two means."""
        reg = self._regime
        if level == reg.ref:
            return False
        rel = abs(level - reg.ref) / reg.ref
        se = max(spread, reg.spread) * math.sqrt(1.0 / points + 1.0 / reg.ref_points)
        need = self.threshold
        healthy = self.healthy_level
        if (reg.slow and self.persist_fraction > 0.0 and level < reg.ref
                and level < self._slow_limit()):
            # Back to the healthy level: a return always counts, even from a slow level less
            # than ``threshold`` above it (half the way back is enough, beyond the noise).
            need = min(need, 0.5 * (reg.ref - healthy) / reg.ref)
        elif not reg.slow and self.persist_fraction > 0.0 and level > reg.ref:
            # From a healthy regime above the healthy level (a saw-tooth peak taken as a
            # `change`), a slow level needs to reach the slow limit, not to lie ``threshold``
            # above that regime (at least half of it, beyond the noise).
            slow = self._slow_limit()
            need = min(need, max((slow - reg.ref) / reg.ref, 0.5 * self.threshold))
        return rel >= need + self.margin_se * se

    def _classify(self, before: float, after: float) -> tuple[str, bool]:
        slow = self._regime.slow
        slow_limit = self._slow_limit()
        if not slow:
            if after >= slow_limit and after > before:
                return "onset", True
            return ("speedup", False) if after < before else ("change", False)
        if after < slow_limit:
            return "recovery", False
        return "change", True

    def _accept(self, tau: int, t: int, after: float, count: int,
                judged: float | None = None) -> Alarm:
        """A new regime from ``tau``: ``after`` is its level (trimmed mean), ``judged`` the
        level it was verified on (spikes left out), which also decides whether it is slow."""
        before = self._regime.ref
        healthy = self.healthy_level
        kind, slow = self._classify(before, after if judged is None else judged)
        k = min(count, self.reference_points)
        ref, spread = robust_stats_small(self._recent_values(k))
        speedup = kind == "speedup"
        self._regime = _Regime(
            start=tau, ref=ref, ref_points=k, spread=spread, slow=slow, defines_healthy=speedup
        )
        if speedup:
            self.healthy_level = ref
        elif not slow:
            self.healthy_level = min(healthy, ref)
        # A level the job ran at while healthy, left for a lower healthy level, is within its
        # band: the regime before a speedup (a series that starts on a saw-tooth peak), the
        # healthy level before a slow period that recovers onto a trough.  Held as the
        # possible top of the band, confirmed by _healthy_sample below.
        high = before if speedup else healthy if kind == "recovery" else math.nan
        if high > self.healthy_level * (1.0 + 0.5 * self.threshold):
            if not high <= self._pending_high:
                self._pending_high = high
        if slow:
            self._pending_high = math.nan  # a level that went on up to a slow one
        else:
            if kind == "recovery" and self._band_high == self._band_high:
                self._band_t = t  # the band still describes the job after a slow period
            self._healthy_sample(ref)
        severity = max(0.0, 1.0 - self.healthy_level / after)
        return Alarm(
            kind=kind,
            index=tau,
            declared_at=t,
            level_before=before,
            level_after=after,
            healthy_level=self.healthy_level,
            severity=severity,
        )


class BOCDDetector(BOCDVerifyDetector):
    """Plain BOCD (no verification): every confident change point is reported at once, as an
    ``onset`` when the level after it is higher than before and as a ``recovery`` otherwise."""

    name = "bocd"

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("threshold", 0.0)
        kwargs.setdefault("min_segment", 1)
        kwargs.setdefault("drift_check", False)
        kwargs.setdefault("margin_se", 0.0)
        kwargs.setdefault("persist_fraction", 0.0)
        kwargs.setdefault("band_points", 0)
        super().__init__(**kwargs)  # type: ignore[arg-type]

    def _classify(self, before: float, after: float) -> tuple[str, bool]:
        return ("onset", True) if after > before else ("recovery", False)


@dataclass
class SlidingWindowDetector(_PositionsOnly):
    """Falcon's slide-window baseline (median of the last ``window`` points vs the median of the
    ``window`` points before them, ``threshold`` relative change).

    While healthy, an onset is raised at the first ``t`` where ``median(x[t-w+1..t]) >
    (1 + threshold) * median(x[t-2w+1..t-w])``; the healthy level is frozen to that earlier median
    and the onset index is estimated as ``t - w // 2 + 1``.  While slow, a recovery is raised at the
    first ``t`` where ``median(x[t-w+1..t]) <= (1 + threshold) * healthy``.
    """

    window: int = 20
    threshold: float = 0.10
    name: str = field(default="sliding_window", init=False)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window must be >= 1, got {self.window}")
        self.reset()

    def reset(self) -> None:
        """Forget everything (a new series)."""
        self._buf: deque[float] = deque(maxlen=2 * self.window)
        self._t = -1
        self._slow = False
        self._healthy = math.nan
        self._level_before = math.nan

    def update(self, x: float) -> list[Alarm]:
        x = _check_positive(x, self.name)
        self._t += 1
        self._buf.append(x)
        w = self.window
        if len(self._buf) < 2 * w:
            return []
        arr = np.fromiter(self._buf, float)
        cur = float(np.median(arr[w:]))
        prev = float(np.median(arr[:w]))
        return self._step(self._t, cur, prev)

    def _step(self, t: int, cur: float, prev: float) -> list[Alarm]:
        lim = 1.0 + self.threshold
        if not self._slow:
            if cur > lim * prev:
                self._slow = True
                self._healthy = prev
                return [self._alarm("onset", t, prev, cur)]
        elif cur <= lim * self._healthy:
            self._slow = False
            return [self._alarm("recovery", t, self._level_before, cur)]
        return []

    def _alarm(self, kind: str, t: int, before: float, after: float) -> Alarm:
        self._level_before = after
        return Alarm(
            kind=kind,
            index=t - self.window // 2 + 1,
            declared_at=t,
            level_before=before,
            level_after=after,
            healthy_level=self._healthy,
            severity=max(0.0, 1.0 - self._healthy / after),
        )

    def detect(self, series: Iterable[float]) -> list[Alarm]:
        """Batch equivalent of feeding ``series`` to a fresh detector (vectorised medians; the
        state machine jumps from one threshold crossing to the next)."""
        x = np.asarray(list(series) if not isinstance(series, np.ndarray) else series, float)
        if x.size and not (np.all(np.isfinite(x)) and np.all(x > 0)):
            raise ValueError(f"{self.name} needs positive finite iteration times")
        self.reset()
        w = self.window
        if x.size < 2 * w:
            self._t = x.size - 1
            return []
        win = np.lib.stride_tricks.sliding_window_view(x, w)
        med = np.median(win, axis=1)  # med[i] = median(x[i..i+w-1])
        cur = med[w:]  # window ending at t = i + 2w - 1
        prev = med[:-w]
        times = np.arange(2 * w - 1, x.size)
        lim = 1.0 + self.threshold
        alarms: list[Alarm] = []
        pos = 0
        while pos < cur.size:
            if not self._slow:
                hits = np.flatnonzero(cur[pos:] > lim * prev[pos:])
            else:
                hits = np.flatnonzero(cur[pos:] <= lim * self._healthy)
            if hits.size == 0:
                break
            i = pos + int(hits[0])
            alarms += self._step(int(times[i]), float(cur[i]), float(prev[i]))
            pos = i + 1
        self._t = x.size - 1
        self._buf.extend(x[-2 * w :].tolist())
        return alarms


class FalconDetector(BOCDVerifyDetector):
    """Falcon's BOCD+V as published: BOCD plus verification, without the additions for real
    logs (no persistence or spike rules, no healthy band, no drift check)."""

    name = "falcon"

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("persist_fraction", 0.0)
        kwargs.setdefault("band_points", 0)
        kwargs.setdefault("drift_check", False)
        super().__init__(**kwargs)  # type: ignore[arg-type]


def _robust(**kwargs: object) -> Detector:
    return RobustLevelDetector(**kwargs)  # type: ignore[arg-type]


METHODS: dict[str, Callable[..., Detector]] = {
    "robust": _robust,
    "bocd_verify": BOCDVerifyDetector,
    "falcon": FalconDetector,
    "bocd": BOCDDetector,
    "sliding_window": SlidingWindowDetector,
}


def make_detector(method: str, **kwargs: object) -> Detector:
    """Build a detector by method name: ``robust`` (the default), ``bocd_verify`` (BOCD+V
    with the rules for real logs of issue 9), ``falcon`` (BOCD+V as published), ``bocd``,
    ``sliding_window``."""
    try:
        cls = METHODS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}") from None
    return cls(**kwargs)


def run_detector(detector: Detector, series: Iterable[float]) -> list[Alarm]:
    """Feed a whole series to ``detector`` (streaming updates) and collect the alarms."""
    if isinstance(detector, SlidingWindowDetector):
        return detector.detect(series)
    alarms: list[Alarm] = []
    for x in np.asarray(series, dtype=float).tolist():
        alarms += detector.update(x)
    return alarms
