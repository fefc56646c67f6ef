"""BOCD against brute force, and the three detectors on series with known change points."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import gammaln

from stragglers.evaluation.bocd import (
    BOCD,
    BOCDDetector,
    BOCDVerifyDetector,
    NormalGammaPrior,
    SlidingWindowDetector,
    make_detector,
    robust_mean,
    run_detector,
)


def _segment_log_evidence(x: np.ndarray, p: NormalGammaPrior) -> float:
    """Closed-form Normal-Gamma marginal likelihood of one segment (not the sequential form)."""
    n = x.size
    m = float(x.mean())
    kn = p.kappa0 + n
    an = p.alpha0 + n / 2
    bn = p.beta0 + 0.5 * float(((x - m) ** 2).sum()) + p.kappa0 * n * (m - p.mu0) ** 2 / (2 * kn)
    return float(
        gammaln(an) - gammaln(p.alpha0) + p.alpha0 * math.log(p.beta0) - an * math.log(bn)
        + 0.5 * math.log(p.kappa0 / kn) - n / 2 * math.log(2 * math.pi)
    )


def _brute_force(x: np.ndarray, p: NormalGammaPrior, h: float):
    """Run-length posteriors and log evidence by enumerating every segmentation of x[:t]."""
    posts, evid = [], []
    for t in range(1, x.size + 1):
        post = np.zeros(t)
        logs = []
        for cuts in itertools.product((0, 1), repeat=t - 1):
            starts = [0] + [i + 1 for i, c in enumerate(cuts) if c]
            bounds = [*starts, t]
            lj = sum(_segment_log_evidence(x[a:b], p) for a, b in itertools.pairwise(bounds))
            k = len(starts) - 1
            lj += k * math.log(h) + (t - 1 - k) * math.log(1 - h)
            post[t - 1 - starts[-1]] += math.exp(lj)
            logs.append(lj)
        evid.append(float(np.logaddexp.reduce(logs)))
        posts.append(post / post.sum())
    return posts, evid


SERIES = {
    "change": np.r_[np.full(5, 0.0), np.full(6, 1.0)] + 0.05 * np.sin(np.arange(11) * 1.7),
    "spike": np.r_[np.zeros(5), 3.0, np.zeros(5)] + 0.02 * np.cos(np.arange(11) * 2.3),
    "noise": np.random.default_rng(7).normal(0.3, 0.2, 12),
}


@pytest.mark.parametrize("name", sorted(SERIES))
@pytest.mark.parametrize("config", ["exact", "detector_default"])
def test_bocd_matches_brute_force(name: str, config: str) -> None:
    x = SERIES[name]
    prior = NormalGammaPrior(mu0=0.1, kappa0=0.5, alpha0=1.5, beta0=0.05)
    hazard = 0.15
    if config == "exact":
        b = BOCD(prior, hazard)
    else:  # the pruning the streaming detector uses
        d = BOCDVerifyDetector()
        b = BOCD(prior, hazard, max_runs=d.max_runs, prune_below=d.prune_below)
    posts, evid = _brute_force(x, prior, hazard)
    for t, v in enumerate(x):
        b.update(v)
        np.testing.assert_allclose(b.posterior(), posts[t], rtol=0, atol=1e-9)
        assert b.log_evidence == pytest.approx(evid[t], abs=1e-9)


def test_change_point_posterior_concentrates_on_the_change() -> None:
    b = BOCD(NormalGammaPrior(mu0=0.0, kappa0=0.5, alpha0=1.5, beta0=0.05), 0.1)
    for v in SERIES["change"]:
        b.update(v)
    # 11 points, the change is at index 5: the most probable run has 6 points (run length 5).
    assert int(np.argmax(b.posterior())) == 5


def test_pruning_bounds_support_and_keeps_the_alarms() -> None:
    rng = np.random.default_rng(3)
    x = np.exp(rng.normal(0, 0.03, 2500))
    x[800:1500] *= 1.3
    x[1200] *= 3.0
    exact = BOCDVerifyDetector(max_runs=None, prune_below=0.0)
    pruned = BOCDVerifyDetector(max_runs=64)
    a_exact = run_detector(exact, x)
    a_pruned = run_detector(pruned, x)
    assert a_exact == a_pruned
    assert [a.kind for a in a_exact] == ["onset", "recovery"]
    assert pruned.bocd is not None and pruned.bocd.size <= 64
    assert exact.bocd is not None and exact.bocd.size > 64


def _series(levels: list[tuple[int, float]], jitter: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lv = np.concatenate([np.full(n, v) for n, v in levels])
    return 0.8 * lv * np.exp(rng.normal(0, jitter, lv.size))


@pytest.mark.parametrize("seed", range(4))
def test_step_event_onset_and_recovery(seed: int) -> None:
    x = _series([(300, 1.0), (200, 1.25), (300, 1.0)], 0.02, seed)
    alarms = run_detector(make_detector("bocd_verify"), x)
    assert [a.kind for a in alarms] == ["onset", "recovery"]
    onset, rec = alarms
    assert abs(onset.index - 300) <= 2
    assert onset.declared_at - 300 <= 10
    assert onset.severity == pytest.approx(0.2, abs=0.02)
    assert abs(rec.index - 500) <= 2


def test_ladder_and_compound_levels() -> None:
    x = _series([(300, 1.0), (150, 1.3), (150, 1.8), (150, 2.6), (200, 1.0)], 0.02, 11)
    alarms = run_detector(make_detector("bocd_verify"), x)
    assert [a.kind for a in alarms] == ["onset", "change", "change", "recovery"]
    assert all(abs(a.index - i) <= 2 for a, i in zip(alarms, (300, 450, 600, 750), strict=True))
    sev = [a.severity for a in alarms[:3]]
    assert sev == sorted(sev)
    assert sev[-1] == pytest.approx(1 - 1 / 2.6, abs=0.02)


def test_spikes_and_jitter_do_not_raise_alarms() -> None:
    for seed in range(6):
        x = _series([(3000, 1.0)], 0.05, 100 + seed)
        x[[400, 1500, 2400]] *= np.array([3.0, 4.0, 1.8])
        assert run_detector(make_detector("bocd_verify"), x) == []


def test_plain_bocd_reports_a_spike_as_onset() -> None:
    x = _series([(600, 1.0)], 0.01, 5)
    x[300] *= 4.0
    alarms = run_detector(BOCDDetector(), x)
    onsets = [a for a in alarms if a.kind == "onset"]
    assert onsets and onsets[0].index == 300 and onsets[0].declared_at == 300
    assert run_detector(BOCDVerifyDetector(), x) == []


def test_gradual_drift_is_flagged_by_the_regime_check() -> None:
    lv = np.r_[np.ones(500), np.linspace(1.0, 1.3, 3000), np.full(300, 1.3)]
    x = 0.5 * lv * np.exp(np.random.default_rng(2).normal(0, 0.02, lv.size))
    alarms = run_detector(make_detector("bocd_verify"), x)
    assert alarms and alarms[0].kind == "onset"
    crossing = 500 + int(np.argmax(np.linspace(1.0, 1.3, 3000) >= 1 / 0.9))
    assert crossing - 200 <= alarms[0].declared_at <= crossing + 100
    # BOCD alone absorbs the slow ramp: without the regime check the drift is not caught in time.
    late = run_detector(BOCDVerifyDetector(drift_check=False), x)
    assert all(a.declared_at > crossing + 100 for a in late)


def test_sliding_window_batch_equals_streaming() -> None:
    x = _series([(200, 1.0), (80, 1.4), (150, 1.0), (60, 2.0), (100, 1.0)], 0.03, 9)
    det = SlidingWindowDetector()
    stream = [a for v in x for a in det.update(v)]
    batch = SlidingWindowDetector().detect(x)
    assert stream == batch
    assert [a.kind for a in batch] == ["onset", "recovery", "onset", "recovery"]
    # the median of 20 points crosses once 10 of them are slow
    assert batch[0].declared_at == 209 and batch[0].index == 200


def test_sliding_window_misses_short_events() -> None:
    x = _series([(200, 1.0), (8, 1.5), (200, 1.0)], 0.01, 1)
    assert SlidingWindowDetector().detect(x) == []
    assert [a.kind for a in run_detector(make_detector("bocd_verify"), x)] == [
        "onset", "recovery"]


def test_robust_mean_ignores_a_spike() -> None:
    assert robust_mean(np.r_[np.full(29, 1.0), 5.0]) == pytest.approx(1.0)
    assert robust_mean(np.array([1.0, 1.02, 0.98])) == pytest.approx(1.0)


def test_bad_values_are_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        make_detector("bocd_verify").update(0.0)
    with pytest.raises(ValueError, match="positive"):
        SlidingWindowDetector().update(float("nan"))
    with pytest.raises(ValueError, match="unknown method"):
        make_detector("magic")
    with pytest.raises(ValueError, match="hazard"):
        BOCD(NormalGammaPrior(), 1.5)
    with pytest.raises(ValueError, match="kappa0"):
        NormalGammaPrior(kappa0=0.0)
    with pytest.raises(ValueError, match="finite"):
        BOCD(NormalGammaPrior(), 0.1).update(float("inf"))


@pytest.mark.parametrize("seed", range(5))
def test_spikes_at_the_start_of_a_slow_period_do_not_delay_it(seed: int) -> None:
    """A slow period (2x) that begins with a cluster of spikes (4-6x on top of it: 5 of its
    first 8 points) is declared within 10 points of its start and located at it; the same
    spikes on the healthy level raise nothing (the two cases of semi-real series, issue 9)."""
    rng = np.random.default_rng(seed)
    x = np.exp(rng.normal(0, 0.01, 700))
    x[300:500] *= 2.0
    spikes = np.array([306, 308, 310, 311, 312])
    slow = x.copy()
    slow[spikes] *= rng.uniform(2.0, 3.0, spikes.size)
    alarms = run_detector(make_detector("bocd_verify"), slow)
    assert [a.kind for a in alarms] == ["onset", "recovery"]
    assert abs(alarms[0].index - 300) <= 2 and alarms[0].declared_at - 300 <= 10
    healthy = np.exp(rng.normal(0, 0.01, 700))
    healthy[spikes] *= rng.uniform(4.0, 6.0, spikes.size)
    assert run_detector(make_detector("bocd_verify"), healthy) == []


@pytest.mark.parametrize("seed", range(5))
def test_a_slow_period_on_a_short_lower_step_is_declared_from_its_start(seed: int) -> None:
    """A compound slowdown: a communication slowdown (1.55x) that a computation slowdown
    joins 7 points later (2.3x), shorter than ``min_segment`` on its lower step.  The onset
    is located at the first slow point and declared within 10 points of it (the synthetic
    event ``communication/compound/024`` of corpus seed 2 was declared 14 points late, on
    the upper step).  A lower step that is not slow (5 %) is not taken for the start."""
    rng = np.random.default_rng(seed)
    x = np.exp(rng.normal(0, 0.03, 600))
    x[300:307] *= 1.55
    x[307:400] *= 2.3
    alarms = run_detector(make_detector("bocd_verify"), x)
    assert alarms[0].kind == "onset"
    assert abs(alarms[0].index - 300) <= 2 and alarms[0].declared_at - 300 <= 10
    assert [a.kind for a in alarms[1:]] in (["change", "recovery"], ["recovery"])
    assert abs(alarms[-1].index - 400) <= 2
    mild = np.exp(rng.normal(0, 0.03, 600))
    mild[300:307] *= 1.05
    mild[307:400] *= 2.3
    alarms = run_detector(make_detector("bocd_verify"), mild)
    assert [a.kind for a in alarms] == ["onset", "recovery"]
    assert abs(alarms[0].index - 307) <= 2 and alarms[0].declared_at - 307 <= 10


def _sawtooth_cycle(low: float, high: float) -> np.ndarray:
    """One cycle of a level that climbs between checkpoints and drops back (the real
    Nemotron-3 run of ``../shared/real/megatron-iter`` climbs 10-11 % over 135 points): 60
    points at ``high``, 45 at ``low``, a 30-point ramp back up."""
    return np.r_[np.full(60, high), np.full(45, low), np.linspace(low, high, 30)]


@pytest.mark.parametrize("seed", range(4))
def test_a_sawtooth_that_starts_on_a_higher_peak_raises_no_onset(seed: int) -> None:
    """The series starts on a peak 12 % above the trough, then the saw-tooth climbs 10.5 %
    between checkpoints: the first level is taken as the top of the healthy band when the job
    speeds up, so no later peak is an onset (semi-real ``nemotron-gb200/039`` of seed 1;
    before, every peak was an onset and every drop a recovery)."""
    rng = np.random.default_rng(seed)
    cycle = np.r_[np.full(45, 1.0), np.linspace(1.0, 1.105, 30), np.full(60, 1.105)]
    level = np.r_[np.full(40, 1.12), np.tile(cycle, 7)]
    x = level * np.exp(rng.normal(0, 0.004, level.size))
    kinds = [a.kind for a in run_detector(make_detector("bocd_verify"), x)]
    assert "onset" not in kinds and "speedup" in kinds


@pytest.mark.parametrize("seed", range(4))
def test_a_recovery_onto_a_sawtooth_trough_keeps_the_peaks_healthy(seed: int) -> None:
    """A 2x slow period that starts on a saw-tooth peak and recovers onto a trough (9.5 %
    below the healthy level before it) is one onset and one recovery: the later peaks,
    10.5 % above that trough, are within the healthy band (semi-real ``nemotron-gb200/048``
    and ``/022``; before, every later peak was an onset)."""
    rng = np.random.default_rng(seed)
    level = np.tile(_sawtooth_cycle(0.905, 1.0), 12)
    level[270:330] *= 2.0
    x = level * np.exp(rng.normal(0, 0.004, level.size))
    alarms = run_detector(make_detector("bocd_verify"), x)
    slow = [a for a in alarms if a.kind in ("onset", "recovery")]
    assert [(a.kind, a.index) for a in slow] == [("onset", 270), ("recovery", 330)]


@pytest.mark.parametrize("seed", range(6))
def test_a_slow_period_right_after_a_sawtooth_peak_is_located_at_its_start(seed: int) -> None:
    """A 19 % slow period that begins where a saw-tooth peak (8-10.5 % above the trough)
    ends: the peak's points lie beyond the midpoint between the healthy level and the slow
    one, but within the healthy band, so the onset is located at the slow period's start
    (semi-real ``nemotron-gb200/058`` of seed 1: located 6 points early, on the peak).
    Before, the start moved back over the peak and the mixture of both was not slow: the
    slow period was missed (a ``change``)."""
    rng = np.random.default_rng(seed)
    cycle = np.r_[np.full(45, 1.0), np.linspace(1.0, 1.08, 30), np.linspace(1.08, 1.105, 60)]
    level = np.tile(cycle, 9)
    level[540:840] = 1.19
    x = level * np.exp(rng.normal(0, 0.004, level.size))
    alarms = [a for a in run_detector(make_detector("bocd_verify"), x)
              if a.kind in ("onset", "recovery")]
    assert [a.kind for a in alarms] == ["onset", "recovery"]
    assert abs(alarms[0].index - 540) <= 2 and alarms[0].declared_at - 540 <= 10
    assert abs(alarms[1].index - 840) <= 2
