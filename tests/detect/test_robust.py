"""The default detector (robust levels) on hand-built streams, one per nuisance and event kind
of issue 19, through the watcher a user runs.  Every answer is known by construction; each
case also says whether the previous default (``bocd_verify``) gets it wrong."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.signal import lfilter

from stragglers.detect.robust import RobustLevelDetector
from stragglers.detect.watch import Watcher
from stragglers.evaluation.bocd import make_detector
from stragglers.logs.records import IterationRecord


def _noise(rng: np.random.Generator, n: int, scale: float, df: float = 4.0) -> np.ndarray:
    """Heavy-tailed (Student-t) noise on log time, clipped to +-5 scales."""
    return np.clip(rng.standard_t(df, n), -5, 5) * scale


def _spikes(rng: np.random.Generator, x: np.ndarray, count: int, lo: float = 1.3,
            hi: float = 4.0) -> None:
    at = rng.choice(x.size, size=count, replace=False)
    x[at] *= rng.uniform(lo, hi, size=count)


def _run(iters: np.ndarray, dur: np.ndarray, method: str = "robust", *,
         ts: np.ndarray | None = None, rank: int = 0, **kw: object) -> list[dict]:
    w = Watcher(detector_factory=lambda: make_detector(method, **kw))
    items = [(i + 1, IterationRecord(rank=rank, iter=int(it), duration=float(d),
                                     ts=None if ts is None else float(ts[i])))
             for i, (it, d) in enumerate(zip(iters, dur, strict=True))]
    return [e.to_dict() for e in w.process_items(items) + w.finish()]


def _kinds(events: list[dict], *kinds: str) -> list[tuple[str, int]]:
    return [(e["event"], e["job_iteration"]) for e in events if e["event"] in kinds]


ALERTS = ("onset", "change", "flapping")


def _plateau_among_spikes(seed: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """One value every 5 iterations (single iterations), 2,400 values: a warm-up hump of
    +9 %, a level that wanders by +-2 % between checkpoints every 1,000 iterations, about 100
    isolated spikes, and a +14 % plateau of 1,200 iterations with sharp edges (on a low
    stretch of the wander, so it is only 12 % above the warm-up hump's top)."""
    rng = np.random.default_rng(seed)
    n = 2400
    it = 5 * np.arange(1, n + 1)
    block = (it - 1) // 1000  # checkpoints every 1,000 iterations: +2 %, -2 %, +2 %, ...
    level = np.where(block % 2 == 0, 1.02, 0.98) * (1 + 0.005 * rng.uniform(-1, 1, n))
    level *= 1.0 + 0.09 * np.exp(-(((it - 400) / 150.0) ** 2))  # warm-up hump
    start, end = 6000, 7200
    level[(it > start) & (it <= end)] *= 1.14
    x = 12.0 * level * np.exp(_noise(rng, n, 0.006))
    at = rng.choice(n // 4, size=100, replace=False) * 4  # isolated: 4 values apart at least
    x[at] *= rng.uniform(1.3, 4.0, size=at.size)
    return it, x, start, end


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_plateau_of_14_percent_among_spikes_and_a_wandering_level_is_found(seed) -> None:
    it, x, start, end = _plateau_among_spikes(seed)
    ev = _run(it, x)
    alerts = _kinds(ev, *ALERTS)
    assert len(alerts) == 1 and alerts[0][0] == "onset"
    assert start - 5 <= alerts[0][1] <= start + 15
    onset = next(e for e in ev if e["event"] == "onset")
    assert onset["declared_job_iteration"] - start <= 30  # 6 values of 5 iterations
    (rec,) = _kinds(ev, "recovery")
    assert end - 5 <= rec[1] <= end + 15


def _restart_replay(seed: int, after: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """3,000 iterations at 1 s, then a restart from the checkpoint of iteration 2,500
    (replayed), 300 s later, with a re-warm-up (first iteration 5x, then +30 % decaying over
    about 100 iterations) and the job back at ``after`` times its old level."""
    rng = np.random.default_rng(seed)
    a = np.arange(1, 3001)
    b = np.arange(2501, 6001)
    xa = np.exp(_noise(rng, a.size, 0.01))
    warm = 1.0 + 0.30 * np.exp(-np.arange(b.size) / 35.0)
    warm[0] = 5.0
    xb = after * warm * np.exp(_noise(rng, b.size, 0.01))
    x = np.concatenate([xa, xb])
    ts = np.cumsum(x)
    ts[a.size:] += 300.0
    return np.concatenate([a, b]), x, ts


@pytest.mark.parametrize("after", [1.0, 0.85, 1.2])
def test_a_restart_that_replays_iterations_is_a_new_segment_with_its_own_warm_up(after) -> None:
    it, x, ts = _restart_replay(0, after)
    ev = _run(it, x, ts=ts)
    assert _kinds(ev, *ALERTS) == []
    assert [e["reason"] for e in ev if e["event"] == "segment"] == ["restart"]


def test_the_previous_default_judges_the_re_warm_up_against_the_old_level() -> None:
    it, x, ts = _restart_replay(0, 1.2)
    assert _kinds(_run(it, x, "bocd_verify", ts=ts), "onset")


def test_a_resume_after_idle_time_is_a_new_segment() -> None:
    """The iteration number goes on but the clock jumped 10 minutes: a stop and resume, its
    warm-up not judged against the old level (which it comes back within the threshold of:
    a level 10 % slower after a stop and resume is declared, test_watch_resume_rise.py)."""
    rng = np.random.default_rng(3)
    it = np.arange(1, 4001)
    x = np.exp(_noise(rng, it.size, 0.01)) * np.where(it > 2000, 1.04, 1.0)
    x[2000] = 6.0
    x[2001:2100] *= 1.0 + 0.3 * np.exp(-np.arange(99) / 30.0)
    ts = np.cumsum(x)
    ts[2000:] += 600.0
    ev = _run(it, x, ts=ts)
    assert [e["reason"] for e in ev if e["event"] == "segment"] in (["idle"], ["clock_step"])
    assert _kinds(ev, *ALERTS) == []


def _checkpoint_stalls(seed: int, slow: bool) -> tuple[np.ndarray, np.ndarray]:
    """Asynchronous checkpoints every 200 iterations stall 3-6 iterations at 1.5-3x; with
    ``slow``, iterations 3,000-3,099 are 12 % slower."""
    rng = np.random.default_rng(seed)
    it = np.arange(1, 6001)
    x = 0.5 * np.exp(_noise(rng, it.size, 0.01))
    for c in range(200, 6000, 200):
        k = int(rng.integers(3, 7))
        x[c:c + k] *= rng.uniform(1.5, 3.0)
    if slow:
        x[3000:3100] *= 1.12
    return it, x


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_checkpoint_stalls_of_3_to_6_iterations_are_not_a_level(seed) -> None:
    it, x = _checkpoint_stalls(seed, slow=False)
    assert _kinds(_run(it, x), *ALERTS) == []
    it, x = _checkpoint_stalls(seed, slow=True)
    alerts = _kinds(_run(it, x), *ALERTS)
    assert len(alerts) == 1 and alerts[0][0] == "onset" and 2996 <= alerts[0][1] <= 3010


def _flapping(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A link slow (+30 %) for 30 iterations, fast for 30, from iteration 2,000 to 2,600."""
    rng = np.random.default_rng(seed)
    it = np.arange(1, 4001)
    x = np.exp(_noise(rng, it.size, 0.01))
    phase = ((it - 2000) // 30) % 2 == 0
    x[(it > 2000) & (it <= 2600) & phase] *= 1.3
    return it, x


def test_flapping_is_one_event_with_the_fraction_of_time_slow() -> None:
    it, x = _flapping(0)
    ev = _run(it, x)
    flap = [e for e in ev if e["event"] == "flapping"]
    assert len(flap) == 1 and 2110 <= flap[0]["job_iteration"] <= 2130  # the third episode
    assert 1990 <= flap[0]["since_job_iteration"] <= 2010
    assert 0.35 <= flap[0]["slow_fraction"] <= 0.65
    # the onsets before it and nothing after it until it ends with a recovery
    kinds = [e["event"] for e in ev if e["event"] in (*ALERTS, "recovery")]
    assert kinds[:kinds.index("flapping")].count("onset") == 2
    assert kinds[kinds.index("flapping") + 1:] == ["recovery"]
    end = next(e for e in ev if e["event"] == "recovery" and e.get("note") == "flapping")
    assert end["job_iteration"] >= 2600 and summary_slow(ev) == []


def summary_slow(events: list[dict]) -> list[int]:
    return events[-1]["slow_ranks"]


def test_the_previous_default_does_not_report_flapping_as_such() -> None:
    it, x = _flapping(0)
    assert not [e for e in _run(it, x, "bocd_verify") if e["event"] == "flapping"]


def test_a_staircase_drift_by_schedule_is_a_drift_not_an_onset() -> None:
    """Iterations +2.5 % slower every 600 iterations, six times (+16 % in all), with noise
    that grows from 1 % to 2 %, as a sequence-length or attention-window warm-up does."""
    rng = np.random.default_rng(5)
    it = np.arange(1, 4501)
    steps = np.minimum(it // 600, 6)
    x = 0.15 * 1.025 ** steps * np.exp(_noise(rng, it.size, 0.01 + 0.01 * it / it.size))
    ev = _run(it, x)
    assert _kinds(ev, *ALERTS) == []
    drift = [e for e in ev if e["event"] == "drift"]
    assert len(drift) == 1 and drift[0]["level_s"] / drift[0]["previous_s"] >= 1.10


def test_the_previous_default_raises_onsets_on_the_staircase() -> None:
    rng = np.random.default_rng(5)
    it = np.arange(1, 4501)
    steps = np.minimum(it // 600, 6)
    x = 0.15 * 1.025 ** steps * np.exp(_noise(rng, it.size, 0.01 + 0.01 * it / it.size))
    assert _kinds(_run(it, x, "bocd_verify"), "onset")


def _averaged(seed: int, k: int, slow_values: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Means of k iterations, one value per k iterations; stalls in 2-value clusters (k =
    10) or single values (k = 100); a +15 % slowdown covering ``slow_values`` values from
    the value of 1,000 * k."""
    rng = np.random.default_rng(seed)
    n = 2000
    it = k * np.arange(1, n + 1)
    x = 2.0 * np.exp(_noise(rng, n, 0.01 / math.sqrt(k)))
    cluster = 2 if k < 100 else 1  # stalls of up to 20 iterations; isolated 100-means
    for c in rng.choice(np.arange(50, n - 3), size=20, replace=False):
        x[c:c + cluster] *= rng.uniform(1.2, 2.0)
    start = 1000
    x[start:start + slow_values] *= 1.15
    return it, x, int(it[start])


@pytest.mark.parametrize(("k", "values"), [(10, 6), (100, 3)])
def test_averaged_sampling_is_judged_in_iterations(k, values) -> None:
    it, x, first = _averaged(1, k, values)
    alerts = _kinds(_run(it, x), *ALERTS)
    assert len(alerts) == 1 and alerts[0][0] == "onset" and alerts[0][1] == first


def test_the_previous_default_misses_a_slowdown_of_three_100_iteration_means() -> None:
    it, x, first = _averaged(1, 100, 3)
    assert not [a for a in _kinds(_run(it, x, "bocd_verify"), "onset") if a[1] >= first - 100]


def test_never_stuck_a_worse_level_is_a_change_and_a_return_recovers() -> None:
    rng = np.random.default_rng(7)
    it = np.arange(1, 6001)
    level = np.ones(it.size)
    level[1000:3000] = 1.15  # an episode (perhaps a false onset: a re-partition)
    level[2000:3000] = 1.15 * 1.3  # worse while it is open
    level[4000:4500] = 1.2  # a later, separate event
    x = np.exp(_noise(rng, it.size, 0.01)) * level
    ev = _run(it, x)
    got = [(k, i // 10 * 10) for k, i in _kinds(ev, "onset", "change", "recovery")]
    assert [k for k, _ in got] == ["onset", "change", "recovery", "onset", "recovery"]
    assert [i for _, i in got] == [1000, 2000, 3000, 4000, 4500]


def _noise_regime(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Noise that gets noisier: 1 % until iteration 3,000, then 6 % (Student-t with 3 degrees
    of freedom, autocorrelated: AR(1) with 0.5), no slowdown."""
    rng = np.random.default_rng(seed)
    it = np.arange(1, 6001)
    z = np.clip(rng.standard_t(3, it.size), -6, 6) / math.sqrt(3)
    e = lfilter([math.sqrt(1 - 0.25)], [1, -0.5], z)
    return it, np.exp(e * np.where(it > 3000, 0.06, 0.01))


@pytest.mark.slow
def test_a_noise_regime_that_gets_noisier_raises_nothing() -> None:
    for seed in range(10):
        it, x = _noise_regime(seed)
        assert _kinds(_run(it, x), *ALERTS) == []


@pytest.mark.slow
def test_the_previous_default_raises_onsets_when_the_noise_gets_noisier() -> None:
    alarms = sum(bool(_kinds(_run(*_noise_regime(seed), "bocd_verify"), *ALERTS))
                 for seed in range(10))
    assert alarms >= 2  # 3 of the 10 seeds when written


def test_several_ranks_one_slow_names_that_rank() -> None:
    rng = np.random.default_rng(11)
    w = Watcher()
    items = []
    for i in range(1, 3001):
        for r in range(4):
            d = float(np.exp(_noise(rng, 1, 0.01))[0]) * (1.2 if r == 2 and i > 2000 else 1.0)
            items.append((len(items) + 1, IterationRecord(rank=r, iter=i, duration=d)))
    ev = [e.to_dict() for e in w.process_items(items) + w.finish()]
    assert [(e["rank"], e["job_iteration"]) for e in ev if e["event"] in ALERTS] == [(2, 2001)]


def test_parameters_have_units_and_are_checked() -> None:
    with pytest.raises(ValueError):
        RobustLevelDetector(threshold=0)
    with pytest.raises(ValueError):
        RobustLevelDetector(persist_fraction=0.2)
    det = RobustLevelDetector(stall_seconds=30.0)
    # 20 iterations of 1 s at +50 %: longer than 8 iterations but not than 30 s
    alarms = []
    for i in range(200):
        alarms += det.observe(1.5 if 100 <= i < 120 else 1.0, i)
    assert alarms == []
    det = RobustLevelDetector()
    for i in range(200):
        alarms += det.observe(1.5 if 100 <= i < 120 else 1.0, i)
    assert [a.kind for a in alarms] == ["onset", "recovery"] and alarms[0].iteration == 100
