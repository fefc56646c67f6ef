"""Issue 29: what the default detector missed on data it had not seen, on hand-built streams
through the watcher a user runs.  Each answer is known by construction: short strong
episodes declared before they end, gradual ramps and humps, slowdowns of exactly the
threshold, onsets inside a warm-up that is not over, and call records through restarts and
reconfigurations (iteration counting).  Healthy counterparts (checkpoint stalls, scheduled
drifts, start-up humps, healthy warm-ups, healthy restarts) raise nothing."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from stragglers.detect.watch import Watcher
from stragglers.evaluation.bocd import make_detector
from stragglers.evaluation.jobcorpus import generate_call_job
from stragglers.logs.records import IterationRecord

ALERTS = ("onset", "change", "flapping")


def _run(iters: np.ndarray, dur: np.ndarray, **kw: object) -> list[dict]:
    w = Watcher(detector_factory=lambda: make_detector("robust", **kw))
    items = [(i + 1, IterationRecord(rank=0, iter=int(it), duration=float(d)))
             for i, (it, d) in enumerate(zip(iters, dur, strict=True))]
    return [e.to_dict() for e in w.process_items(items) + w.finish()]


def _alerts(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] in ("onset", "flapping") or (
        e["event"] == "change" and e["level_s"] > e["previous_s"])]


def _healthy(seed: int, n: int, noise: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """``n`` iterations of 0.5 s with log-normal noise and a first iteration 5x slower."""
    rng = np.random.default_rng(seed)
    x = 0.5 * np.exp(rng.normal(0.0, noise, n))
    x[0] *= 5.0
    return np.arange(1, n + 1), x


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("length", [10, 14, 20])
def test_a_short_strong_episode_is_declared_before_it_ends(seed, length) -> None:
    """+100 % for 10-20 iterations (a stalled loader, a noisy neighbour): declared at most
    9 points after it began, before its last iteration (with the former 12-iteration stall
    rule: 13 points after, after a 10- or 12-iteration episode had ended)."""
    it, x = _healthy(seed, 800)
    x[400:400 + length] *= 2.0
    alerts = _alerts(_run(it, x))
    assert len(alerts) == 1 and alerts[0]["job_iteration"] == 401
    assert alerts[0]["declared_job_iteration"] - 401 <= 8
    assert alerts[0]["declared_job_iteration"] < 401 + length


@pytest.mark.parametrize("seed", range(4))
def test_stalls_of_up_to_6_iterations_are_still_spikes(seed) -> None:
    """The price of declaring sooner: checkpoint-like stalls of 1-6 iterations at 1.3-3x,
    every 100-300 iterations, are still not a level."""
    rng = np.random.default_rng(100 + seed)
    it, x = _healthy(seed, 4000)
    c = 150
    while c < 3990:
        x[c:c + int(rng.integers(1, 7))] *= rng.uniform(1.3, 3.0)
        c += int(rng.integers(100, 301))
    assert _alerts(_run(it, x)) == []


def _ramp(seed: int, ramp: int, rise: float, at: int = 1500) -> tuple[np.ndarray, np.ndarray]:
    """Thermal throttling: from iteration ``at`` the time rises as 1 - exp(-3 t / ramp) to
    ``rise`` and holds."""
    it, x = _healthy(seed, 4000)
    t = np.arange(it.size - at, dtype=float)
    x[at:] *= 1.0 + rise * (1.0 - np.exp(-3.0 * t / ramp))
    return it, x


@pytest.mark.parametrize(("ramp", "rise"), [(40, 0.17), (100, 0.2), (200, 0.28), (200, 0.17)])
def test_a_gradual_thermal_ramp_is_an_onset(ramp, rise) -> None:
    """Ramps of 40-200 iterations to +17-28 % (the issue's held-back misses): an onset
    placed inside the ramp (a stretch whose latest half has reached the level, or the
    slope view: the healthy level rose by the threshold within ``rise_iters``)."""
    it, x = _ramp(1, ramp, rise)
    alerts = _alerts(_run(it, x))
    assert len(alerts) == 1 and alerts[0]["event"] == "onset", alerts
    assert 1495 <= alerts[0]["job_iteration"] <= 1500 + ramp
    assert alerts[0]["declared_job_iteration"] <= 1500 + ramp + 60


@pytest.mark.parametrize("seed", range(3))
def test_a_scheduled_drift_is_still_a_drift(seed) -> None:
    """+12 % spread over 2,000 iterations (a sequence-length schedule), linear or in 4 steps
    of 3 %: drift events, never an onset."""
    it, x = _healthy(seed, 5000)
    lin = x * (1.0 + 0.12 * np.clip((it - 1000) / 2000.0, 0.0, 1.0))
    steps = x * (1.0 + 0.03 * np.searchsorted([1000, 1600, 2300, 3000], it, side="right"))
    for y in (lin, steps):
        ev = _run(it, y)
        assert _alerts(ev) == []
        assert any(e["event"] == "drift" for e in ev)


def _hump(seed: int, at: int, rise: int, hold: int, decay: int, level: float
          ) -> tuple[np.ndarray, np.ndarray]:
    it, x = _healthy(seed, 3000)
    shape = np.concatenate([(np.arange(rise) + 1.0) / rise, np.ones(hold),
                            1.0 - (np.arange(decay) + 1.0) / (decay + 1.0)])
    x[at:at + shape.size] *= 1.0 + level * shape
    return it, x


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("level", [0.15, 0.25])
def test_a_gradual_hump_is_found_within_20_points(seed, level) -> None:
    """A hump that rises over 8 points, holds for 20 and decays over 10 (the shape of the
    issue's held-back real misses), after the job's start-up: found within 20 points of its
    start, and only once (its decay is no alert)."""
    it, x = _hump(seed, 1200, 8, 20, 10, level)
    alerts = _alerts(_run(it, x))
    assert len(alerts) == 1 and 1201 <= alerts[0]["job_iteration"] <= 1209, alerts
    assert alerts[0]["declared_job_iteration"] - 1201 <= 20


@pytest.mark.parametrize("seed", range(3))
def test_a_start_up_hump_is_the_start_not_an_onset(seed) -> None:
    """One value every 5 iterations: at iterations 100-300 of the job the level climbs
    +15 % over 10 values and settles back over 40 (a mixture-of-experts router balancing:
    ``dsv3-h100`` of ``../shared/real/megatron-iter``).  In the first ``startup_iters``
    iterations only a step is an onset; the same hump later is one."""
    rng = np.random.default_rng(seed)
    n = 1200
    it = 5 * np.arange(1, n + 1)
    shape = np.interp(it, [0, 100, 150, 190, 400, 10**6], [0, 0, 1, 1, 0.05, 0])
    x = 12.0 * (1.0 + 0.15 * shape) * np.exp(rng.normal(0.0, 0.004, n))
    x[0] *= 20.0
    assert _alerts(_run(it, x)) == []
    late = np.interp(it, [0, 3100, 3150, 3190, 3400, 10**6], [0, 0, 1, 1, 0.05, 0])
    y = 12.0 * (1.0 + 0.15 * late) * np.exp(rng.normal(0.0, 0.004, n))
    alerts = _alerts(_run(it, y))
    assert len(alerts) == 1 and 3100 <= alerts[0]["job_iteration"] <= 3150


@pytest.mark.parametrize("seed", range(6))
def test_a_slowdown_of_exactly_the_threshold_is_found(seed) -> None:
    """+10.0 % (the threshold) for 300 iterations in 1 % noise: found (the estimate of the
    new level scatters around +10 %; the former rule, estimate >= +10 %, missed about half
    of them)."""
    it, x = _healthy(seed, 2000)
    x[1000:1300] *= 1.10
    alerts = _alerts(_run(it, x))
    assert len(alerts) == 1 and 995 <= alerts[0]["job_iteration"] <= 1010, alerts


@pytest.mark.parametrize("seed", range(3))
def test_minor_shifts_are_not_reported(seed) -> None:
    """+6 % for 2,000 iterations (a re-allocation to slightly slower nodes) stays below."""
    it, x = _healthy(seed, 4000)
    x[1500:3500] *= 1.06
    assert _alerts(_run(it, x)) == []


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("at", "hump"), [(9, 0.0), (14, 0.0), (25, 0.0), (14, 0.3), (25, 0.3)])
def test_a_slowdown_inside_the_warm_up_is_found(seed, at, hump) -> None:
    """+30 % from iteration ``at`` of the job, while the warm-up (a first iteration 5x,
    maybe a +30 % hump decaying over 30 iterations) has not settled: the warm-up ends when
    the level settles and the level it had settled on before the rise is the healthy one;
    the onset is placed at ``at`` and declared within 10 points.  (With the former fixed
    minimum of 20 iterations the warm-up ended at the slow level: nothing was found.)  A
    step 1-2 points before the settle test passes on a hump still decaying 1 % an
    iteration (iteration 9 here) is not found on 2 of these 3 seeds: the first healthy
    level mixes both (docs/detection.md)."""
    it, x = _healthy(seed, 600)
    x *= 1.0 + hump * np.clip(1.0 - (it - 1) / 30.0, 0.0, None) ** 2
    x[at - 1:at + 299] *= 1.3
    alerts = _alerts(_run(it, x))
    assert len(alerts) == 1 and at - 1 <= alerts[0]["job_iteration"] <= at + 2, alerts
    assert alerts[0]["declared_job_iteration"] - at <= 10


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("amp", "length"), [(0.0, 1), (0.3, 30), (0.4, 200)])
def test_a_healthy_warm_up_raises_nothing(seed, amp, length) -> None:
    it, x = _healthy(seed, 800, noise=0.02)
    x *= 1.0 + amp * np.clip(1.0 - (it - 1) / length, 0.0, None) ** 2
    ev = _run(it, x)
    assert _alerts(ev) == []
    summary = ev[-1]
    assert summary["warmup_ends"]["0"] <= 40  # it ends when the level settles


def _noisy_start(seed: int, n: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """A start that does not settle: until iteration ``end`` the healthy 0.5 s (1 % noise)
    has log-normal noise of 20 % on top, and one point in four is 1.5-3x (the DDP probe's
    busy times of a loaded 2-core run, tests/detect/test_steps.py)."""
    rng = np.random.default_rng(seed)
    it, x = _healthy(seed, n)
    k = end - 1
    x[1:k] *= np.exp(rng.normal(0.0, 0.2, k - 1))
    x[1:k] *= np.where(rng.random(k - 1) < 0.25, rng.uniform(1.5, 3.0, k - 1), 1.0)
    return it, x


def test_a_noisy_healthy_warm_up_raises_nothing() -> None:
    """Forty such starts (40 noisy iterations) and no slowdown: the lowest 5-point window of
    a noisy start lies below the latest one by chance, but by less than the windows'
    spread (the test of a level inside the warm-up, ``warm_start``): no onset in any."""
    found = []
    for seed in range(40):
        it, x = _noisy_start(seed, 400, 40)
        found += [(seed, e["job_iteration"]) for e in _alerts(_run(it, x))]
    assert found == []


def _watch_calls(seed: int, with_step: bool) -> tuple[list[dict], dict]:
    job = generate_call_job(seed, ranks=2, restarts=3, with_step=with_step)
    w = Watcher()
    lines = [(i, orjson.dumps(c.to_dict())) for i, c in enumerate(job.records, start=1)]
    events = [e.to_dict() for e in w.process_lines(lines) + w.finish()]
    return events, {"executed": job.executed, "job_iterations": job.job_iterations}


@pytest.mark.parametrize("seed", [0, 1, 3, 5])
def test_call_records_through_restarts_and_reconfigurations(seed) -> None:
    """Call records of a healthy data-parallel job that restarts three times (parameter
    broadcasts at every start, replayed iterations, half the restarts reconfigured: other
    buckets, other all-gathers, another iteration time).  Without ``step``: the period is
    found anew after every restart (the former tracker kept the old anchor and turned the
    reconfigured iterations into false onsets on these seeds) and every executed iteration
    is counted (within 0.5 %)."""
    events, truth = _watch_calls(seed, with_step=False)
    assert _alerts(events) == []
    summary = events[-1]
    for r in (0, 1):
        n = truth["executed"][r]
        assert abs(summary["iterations"][str(r)] - n) <= 0.005 * n
    assert summary["job_iterations"] == {}  # no iteration numbers: none counted


@pytest.mark.parametrize("seed", [0, 1, 3, 5])
def test_call_records_with_step_count_the_job_iterations(seed) -> None:
    """With ``step`` (as the probe writes it) the steps number the iterations: restarts are
    segments (the step goes back), ``job_iterations`` counts every step once (the replayed
    ones too: ``iterations`` counts them again, as executed), exactly."""
    events, truth = _watch_calls(seed, with_step=True)
    assert _alerts(events) == []
    summary = events[-1]
    assert summary["segments"].get("restart", 0) >= 2
    for r in (0, 1):
        assert summary["job_iterations"][str(r)] == truth["job_iterations"]
        n = truth["executed"][r]
        assert abs(summary["iterations"][str(r)] - n) <= 0.005 * n


def test_a_slowdown_named_by_steps_is_placed_at_its_step() -> None:
    """A call-record job slowed 1.5x from step 1,500 on: the onset names step 1,500."""
    rng = np.random.default_rng(0)
    lines, ts, k = [], 1000.0, 0
    for step in range(1, 3001):
        dur = 0.2 * (1.5 if step >= 1500 else 1.0) * float(np.exp(rng.normal(0, 0.01)))
        for j, size in enumerate((4 << 20, 8 << 20, 8 << 20)):
            k += 1
            lines.append((k, orjson.dumps({"rank": 0, "type": "all_reduce", "size": size,
                                           "ts": ts + dur * j / 3, "step": step})))
        ts += dur
    w = Watcher()
    events = [e.to_dict() for e in w.process_lines(lines) + w.finish()]
    alerts = _alerts(events)
    assert len(alerts) == 1 and alerts[0]["job_iteration"] == 1500
    assert events[-1]["job_iterations"] == {"0": 3000}


def test_the_documented_warm_up_default_is_the_codes() -> None:
    """The watch guide and the detection page state the warm-up default of the default
    detector (and of the others) that the code uses (issue 29: the guide said 100, the
    detector used 20)."""
    import re
    from pathlib import Path

    from stragglers.detect.detector import DEFAULT_METHOD
    from stragglers.detect.warmup import DEFAULT_MIN_ITERS

    docs = Path(__file__).resolve().parents[2] / "docs"
    default = make_detector(DEFAULT_METHOD).default_warmup_iters
    others = make_detector("bocd_verify").default_warmup_iters
    assert others == DEFAULT_MIN_ITERS
    guide = " ".join((docs / "guides" / "watch.md").read_text().split())
    m = re.search(r"\*\*Warm-up\*\* \(`--warmup ITERS`, default (\d+) for the default "
                  r"detector `(\w+)`, (\d+) for the other methods", guide)
    assert m is not None, "the watch guide no longer states the warm-up default"
    assert (int(m[1]), m[2], int(m[3])) == (default, DEFAULT_METHOD, others)
    page = (docs / "detection.md").read_text()
    row = re.search(r"^\| warm-up \| `--warmup` \| (\d+) \|", page, re.M)
    assert row is not None and int(row[1]) == default
    assert f"**default {default} for `{DEFAULT_METHOD}`**" in page
    assert f"{others} for the other methods" in page
    # and what the watcher does when no --warmup is given
    assert Watcher().warmup_iters == default


def test_a_motif_that_repeats_itself_is_reduced_to_its_root() -> None:
    from stragglers.detect.period import primitive_period

    assert primitive_period(np.array([1, 2, 1, 2, 1, 2])) == 2
    assert primitive_period(np.array([1, 2, 3, 1, 2, 4])) == 6
    assert primitive_period(np.array([5, 5, 5, 5])) == 1


def test_the_period_tracker_survives_a_restart_that_changes_the_calls() -> None:
    """One rank's calls of a job that restarts three times (start-up broadcasts, other
    buckets after a reconfiguration), fed to one period tracker without any reset: the
    window that mixes both patterns reached the ACF threshold at a multiple of the new
    period, and the former tracker raised ``motif is not primitive`` (a ``watch`` crash on
    valid input); it now counts every executed iteration (within 0.5 %)."""
    from stragglers.detect.period import CallEncoder, PeriodTracker

    job = generate_call_job(6, with_step=False)
    enc, tracker, n = CallEncoder(), PeriodTracker(), 0
    for c in (c for c in job.records if c.rank == 0):
        out = tracker.feed_one(c.ts, enc.code((c.type, c.size)))
        n += sum(k for _, _, k in out or ())
    assert abs(n - job.executed[0]) <= 0.005 * job.executed[0]


@pytest.mark.parametrize("start", [200, 500])  # in the start-up (300 iterations) and after
@pytest.mark.parametrize("low_at", [1, 2, 3, 4])
def test_one_low_point_early_in_a_new_level_does_not_hide_the_onset(start: int,
                                                                    low_at: int) -> None:
    """A +30 % level of 60 points from ``start``; its point ``low_at`` is back at the healthy
    level.  That point ends the candidate stretch (fewer than 80 % of 2-4 points beyond the
    midpoint) and its first points become healthy points; they also became the "points just
    before" the next stretch, which in the start-up must be a step from them: the level
    looked like no step and was never an onset (a development Lightning run).  Now the
    onset comes from the point after the low one; the level's time counts from after the
    point back at the healthy level (a cluster of bursts returns there, a level does not:
    test_bursts_in_a_cluster_are_not_a_level), so it is declared at most ``low_at + 1``
    points later."""
    from stragglers.detect.robust import RobustLevelDetector

    for seed in range(3):
        x = 0.1 * np.exp(np.random.default_rng(seed).normal(0.0, 0.01, start + 200))
        x[start:start + 60] *= 1.3
        clean = x.copy()
        x[start + low_at] = 0.1
        runs = []
        for series in (clean, x):
            det = RobustLevelDetector()
            runs.append([a for v in series for a in det.update(float(v))
                         if a.kind == "onset"])
        (ref,), (got,) = runs
        assert ref.index == start
        assert start <= got.index <= start + low_at + 1
        assert got.declared_at <= ref.declared_at + low_at + 1


@pytest.mark.parametrize("gap", [2, 3])
def test_two_stalls_with_healthy_points_between_are_not_a_level(gap: int) -> None:
    """Two stalls of 5 iterations (2.9x, then 1.8x) with ``gap`` healthy iterations between
    them: two stalls, no onset (a rule that let one low point pass inside a new level
    joined them; this guards against it)."""
    from stragglers.detect.robust import RobustLevelDetector

    for seed in range(3):
        x = 0.1 * np.exp(np.random.default_rng(seed).normal(0.0, 0.01, 900))
        x[600:605] *= 2.9
        x[605 + gap:610 + gap] *= 1.8
        det = RobustLevelDetector()
        assert [a.kind for v in x for a in det.update(float(v))] == []


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("first", [3, 4, 5])
def test_bursts_in_a_cluster_are_not_a_level(seed: int, first: int) -> None:
    """Communication bursts that come in a cluster: ``first`` iterations at 1.5x, one
    iteration back at the healthy level, then 4 at 2x (9-10 iterations, 80-90 % of them
    beyond the midpoint, longer than a stall).  The healthy point between them says the
    series was healthy there: the level's time counts from after it, 4 iterations, a stall.
    Before, the stretch held 80 % beyond the midpoint for more than ``stall_iters`` and was
    taken for a level (false onsets in ``ckpt_burst`` negatives)."""
    from stragglers.detect.robust import RobustLevelDetector

    x = 0.1 * np.exp(np.random.default_rng(seed).normal(0.0, 0.01, 900))
    x[600:600 + first] *= 1.5
    x[601 + first:605 + first] *= 2.0
    det = RobustLevelDetector()
    assert [a.kind for v in x for a in det.update(float(v))] == []


@pytest.mark.parametrize("seed", range(4))
def test_a_jittery_level_is_still_found(seed: int) -> None:
    """The guard: congestion of +25 % whose per-iteration factor varies (x exp(N(0, 0.5)),
    some points near +5 %) for 40 iterations is found within 20 iterations; its low points
    are low points of the new level, not returns to the healthy one."""
    from stragglers.detect.robust import RobustLevelDetector

    rng = np.random.default_rng(50 + seed)
    x = 0.1 * np.exp(rng.normal(0.0, 0.01, 900))
    x[600:640] *= 1.0 + 0.25 * np.exp(rng.normal(0.0, 0.5, 40) - 0.125)
    det = RobustLevelDetector()
    onsets = [a for v in x for a in det.update(float(v)) if a.kind == "onset"]
    assert len(onsets) == 1 and 600 <= onsets[0].index <= 603
    assert onsets[0].declared_at - 600 <= 20


@pytest.mark.parametrize("seed", range(4))
def test_intermittent_episodes_are_no_flapping_that_hides_a_slowdown(seed) -> None:
    """Three short episodes (+40 % for 12 iterations) 300 iterations apart are slow for a
    small share of the time: separate onsets, not a flapping rank whose later onsets are
    folded in.  The slowdown (+30 % for 200 iterations) that follows is declared as its own
    onset within 10 points (before: folded into a flapping event, no alert)."""
    it, x = _healthy(seed, 2600)
    for a in (1000, 1300, 1600):
        x[a:a + 12] *= 1.4
    x[1900:2100] *= 1.3
    alerts = _alerts(_run(it, x))
    assert [a["event"] for a in alerts] == ["onset"] * 4
    assert [a["job_iteration"] for a in alerts] == [1001, 1301, 1601, 1901]
    assert alerts[-1]["declared_job_iteration"] - 1901 <= 10


@pytest.mark.parametrize("seed", range(3))
def test_a_slowdown_after_a_flapping_is_not_folded_into_it(seed) -> None:
    """A link flaps (+30 % for 30 iterations, fast for 30) from 2,000 to 2,600; 600
    healthy iterations later (less than flap_window_iters) a slowdown of +30 % for 200
    iterations begins.  The healthy gap is 20 times the flapping's fast phases: the flapping
    ended (a recovery noted flapping) and the slowdown is its own onset, within 10 points
    (before: folded into the flapping, no alert)."""
    it, x = _healthy(seed, 3800)
    phase = ((it - 2000) // 30) % 2 == 0
    x[(it > 2000) & (it <= 2600) & phase] *= 1.3
    x[3200:3400] *= 1.3
    ev = _run(it, x)
    alerts = _alerts(ev)
    assert [a["event"] for a in alerts] == ["onset", "onset", "flapping", "onset"]
    assert alerts[-1]["job_iteration"] == 3201
    assert alerts[-1]["declared_job_iteration"] - 3201 <= 10
    ends = [e for e in ev if e["event"] == "recovery" and e.get("note") == "flapping"]
    assert ends and 2565 <= ends[0]["job_iteration"] <= 2640  # its last slow phase ended


@pytest.mark.parametrize("seed", range(3))
def test_a_long_slowdown_among_short_episodes_is_no_flapping(seed) -> None:
    """A 12-iteration episode, a 300-iteration slowdown, another 12-iteration episode: three
    onsets within flap_window_iters, slow about half the time, but no alike phases of a
    cycle.  Each is its own onset, and so is the slowdown that follows 500 iterations later
    (before: a flapping that folded it in)."""
    it, x = _healthy(seed, 2800)
    x[1000:1012] *= 1.4
    x[1200:1500] *= 1.3
    x[1700:1712] *= 1.4
    x[2200:2260] *= 1.3
    alerts = _alerts(_run(it, x))
    assert [a["event"] for a in alerts] == ["onset"] * 4
    assert [a["job_iteration"] for a in alerts] == [1001, 1201, 1701, 2201]


@pytest.mark.parametrize("seed", range(3))
def test_a_slowdown_that_outlasts_the_flapping_phases_is_an_onset(seed) -> None:
    """A link flaps (+30 % for 30 iterations, fast for 30) from 2,000; after its last fast
    phase the rank stays slow (+30 %) for 400 iterations.  Once it has been slow three
    times as long as a slow phase the flapping is over and the slowdown is an onset from
    where it began (before: nothing until flap_window_iters without an onset)."""
    it, x = _healthy(seed, 3800)
    phase = ((it - 2000) // 30) % 2 == 0
    x[(it > 2000) & (it <= 2600) & phase] *= 1.3
    x[(it > 2600) & (it <= 3000)] *= 1.3
    ev = _run(it, x)
    alerts = _alerts(ev)
    assert [a["event"] for a in alerts] == ["onset", "onset", "flapping", "onset"]
    assert 2598 <= alerts[-1]["job_iteration"] <= 2606
    assert alerts[-1]["declared_job_iteration"] <= 2601 + 3 * 30 + 15


@pytest.mark.parametrize("seed", range(4))
def test_a_noise_point_after_a_stall_does_not_make_it_a_level(seed) -> None:
    """A stall of 8 iterations at +20 % followed by one noise point at +6 % (beyond the
    slow limit, +4.9 %, but nearer the healthy level than the stall's): the stall lasted 8
    iterations, no onset (before: 9 points beyond the slow limit, an onset).  A 10-iteration
    episode is still one."""
    it, x = _healthy(seed, 1200, noise=0.005)
    x[400:408] *= 1.2
    x[408] *= 1.06
    x[800:810] *= 1.2
    alerts = _alerts(_run(it, x))
    assert [(a["event"], a["job_iteration"]) for a in alerts] == [("onset", 801)]


@pytest.mark.parametrize("seed", range(3))
def test_a_flapping_whose_own_episode_stays_slow_ends_with_a_steady_change(seed) -> None:
    """Two 30-iteration phases 30 apart, then the third episode (the one that makes it
    flapping) stays slow for 400 iterations: once it has lasted three slow phases the
    flapping is over, said by a change noted steady (no folded recovery to report; before:
    a recovery at iteration 0 with no levels), and the episode's end is a recovery."""
    it, x = _healthy(seed, 3000)
    x[2000:2030] *= 1.3
    x[2060:2090] *= 1.3
    x[2120:2520] *= 1.3
    ev = [e for e in _run(it, x) if e["event"] in ("onset", "flapping", "recovery", "change")]
    assert [e["event"] for e in ev] == ["onset", "recovery", "onset", "recovery", "flapping",
                                        "change", "recovery"]
    assert ev[5]["note"] == "steady" and 2121 + 90 <= ev[5]["job_iteration"] <= 2121 + 110
    assert 2515 <= ev[6]["job_iteration"] <= 2530
    assert all(e["job_iteration"] > 1000 for e in ev)
