"""The S2 rebalancer for a user's own loop (``stragglers.mitigate.Rebalancer``) on hand-built
per-micro-batch time series with a known optimum: a steady straggler, other load on a
replica's core (outliers), load on every core at once, recovery and give-back, the
pipeline's fill and drain."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stragglers.errors import InputError
from stragglers.mitigate import Rebalancer
from stragglers.mitigate.microbatch import solve_microbatches
from stragglers.mitigate.rebalance import PlanNote, best_split, best_split_affine, step_of


def _run(rb: Rebalancer, slow: np.ndarray, load: np.ndarray, core: np.ndarray,
         base: float = 0.01, seed: int = 0) -> list[tuple[int, ...]]:
    """Feed steps 0..n-1: replica i's micro-batches take ``base * slow[s, i] * load[s] *
    core[s, i]`` (+-2% noise each); the plan after each step."""
    rng = np.random.default_rng(seed)
    plans = []
    for s in range(slow.shape[0]):
        for i in range(rb.dp):
            t = base * slow[s, i] * load[s] * core[s, i]
            rb.observe(i, s, t * rng.uniform(0.98, 1.02, size=rb.counts[i]))
        plans.append(rb.plan())
    return plans


@pytest.mark.parametrize(("factor", "optimum"), [(2.0, (8, 16)), (1.5, (10, 14))])
def test_steady_straggler_gets_the_optimum(factor: float, optimum: tuple[int, int]) -> None:
    """Replica 0 x``factor`` from the start; the optimum is the exact solver's."""
    assert tuple(solve_microbatches([factor, 1.0], 24).assignment) == optimum
    n = 12
    slow = np.ones((n, 2))
    slow[:, 0] = factor
    plans = _run(Rebalancer(2, 12), slow, np.ones(n), np.ones((n, 2)))
    assert plans[:3] == [(12, 12)] * 3  # min_steps (4) steps before the first plan
    assert plans[3] == optimum and plans[-1] == optimum


def test_loaded_core_outliers_and_common_load_do_not_move_the_split() -> None:
    """Replica 0 x2. The whole machine's load varies x1 to x3 from step to step (every
    replica at once), and other load on the healthy replica's core stretches it x3 in 2
    of every 8 steps, the slow one's x2.5 in 1 of 8: the split stays the optimum (8, 16)
    from the first plan on, with no change in between (a plain mean of the window would give
    the healthy replica 1.5x its time and take micro-batches from it)."""
    n = 40
    rng = np.random.default_rng(1)
    slow = np.ones((n, 2))
    slow[:, 0] = 2.0
    core = np.ones((n, 2))
    core[np.isin(np.arange(n) % 8, (4, 6)), 1] = 3.0
    core[np.arange(n) % 8 == 1, 0] = 2.5
    rb = Rebalancer(2, 12)
    plans = _run(rb, slow, rng.uniform(1.0, 3.0, size=n), core)
    assert set(plans[3:]) == {(8, 16)}
    assert rb.changes == 1
    est = rb.estimate()
    assert est is not None and est.rejected >= 2
    assert est.relative[0] / est.relative[1] == pytest.approx(2.0, rel=0.05)


def test_gives_back_after_each_recovery_and_stays_even_on_noise() -> None:
    """Replica 1 x2 in steps 10-29 and again 40-59, healthy otherwise: rebalanced within 5
    steps of each onset, even again within 5 steps of each recovery (the window holds 8
    steps; a level shift inside it restarts it), and even throughout the healthy steps
    despite +-2% noise (the tolerance, 3%)."""
    n = 75
    slow = np.ones((n, 2))
    slow[10:30, 1] = 2.0
    slow[40:60, 1] = 2.0
    plans = _run(Rebalancer(2, 12), slow, np.ones(n), np.ones((n, 2)), seed=3)
    changes = [s for s in range(1, n) if plans[s] != plans[s - 1]]
    assert changes[0] in range(10, 15) and plans[changes[0]] == (16, 8)
    after = [s for s in changes if plans[s] == (12, 12)]
    assert len(after) == 2 and after[0] in range(30, 35) and after[1] in range(60, 65)
    assert all(plans[s] == (12, 12) for s in range(0, 10))
    assert all(plans[s] == (16, 8) for s in range(15, 30)) and plans[-1] == (12, 12)
    assert len(changes) == 4  # on, off, on, off: no flapping


def test_pipeline_fill_and_drain_in_the_split_and_the_prediction() -> None:
    """pp 2 (2 stages): replica i's step has m_i + 1 micro-batch slots. One replica of four
    x1.5, 8 micro-batches each: 5 on it (6 x 1.5 = 9 slots) against 9, 9, 9 (10 slots):
    step 10 slots; the plain makespan split (6, 9, 9, 8) would take 7 x 1.5 = 10.5."""
    t = np.array([1.5, 1.0, 1.0, 1.0])
    counts = best_split(t, 32, stages=2)
    assert counts.tolist() == [5, 9, 9, 9]
    assert step_of(counts, t, 2) == pytest.approx(10.0)
    assert step_of([6, 9, 9, 8], t, 2) == pytest.approx(10.5)
    assert step_of([8, 8, 8, 8], t, 2) == pytest.approx(13.5)
    n = 8
    slow = np.ones((n, 4))
    slow[:, 0] = 1.5
    rb = Rebalancer(4, 8, stages=2)
    assert _run(rb, slow, np.ones(n), np.ones((n, 4)))[-1] == (5, 9, 9, 9)
    assert rb.predicted_step_s(rb.counts) == pytest.approx(0.01 * 10, rel=0.03)


def test_bad_input_is_refused() -> None:
    rb = Rebalancer(2, 4)
    with pytest.raises(InputError, match="replica 2 is outside 0..1"):
        rb.observe(2, 0, 0.1)
    with pytest.raises(InputError, match="replica 0, step 3: expected finite"):
        rb.observe(0, 3, [0.1, float("nan")])
    with pytest.raises(InputError, match="min_steps <= window"):
        Rebalancer(2, 4, window=3, min_steps=4)


def test_a_split_that_measures_slower_is_taken_back() -> None:
    """Replicas that share a resource (two ranks on the cores of one loaded machine): replica
    0 is x1.5, and each micro-batch moved to replica 1 stretches replica 0's micro-batches
    by another 20%. Moving any is worse than the even split (10 on replica 0: 10 x 1.5 x
    1.4 = 21 against 18), but the per-micro-batch model alone sees replica 0 ever slower and
    keeps moving more (down to 7: 7 x 1.5 x 2 = 21). Each change is a trial measured before
    it is kept: the even split comes back, and failed trials back off (window, then twice
    as long)."""
    rb = Rebalancer(2, 12)
    cost = []
    for s in range(60):
        m1 = rb.counts[1]
        t0 = 0.01 * 1.5 * (1 + 0.2 * (m1 - 12))
        rb.observe(0, s, [t0] * rb.counts[0])
        rb.observe(1, s, [0.01] * m1)
        cost.append(max(rb.counts[0] * t0, m1 * 0.01))
        rb.plan()
    assert rb.counts == (12, 12)
    assert 1 <= rb.reverted <= 3 and rb.changes == 2 * rb.reverted
    # at most min_steps (4) steps per failed trial ran slower than the even split's 0.18 s
    assert sum(c > 0.18 + 1e-9 for c in cost) <= 4 * rb.reverted


def _loaded(rb: Rebalancer, factor: float, couple: float, seed: int, n: int = 40,
            machine: float = 0.3, core: float = 0.1,
            reverts: list[tuple[tuple[int, ...], tuple[int, ...]]] | None = None
            ) -> Rebalancer:
    """Feed ``n`` steps of replica 0 x``factor`` on a loaded machine: every step, the whole
    machine's load stretches both replicas by one lognormal factor (sigma ``machine``) and
    each replica's own core by another (sigma ``core``): the spread measured on the example
    job at load 12 (the measured compute step 0.29-0.32 relative to its median, the
    replicas' ratio 0.10-0.22; docs/benchmarks/mitigate.md). With ``couple``, each
    micro-batch moved to replica 1 stretches replica 0's by ``couple`` more (replicas
    sharing cores). ``reverts`` collects each trial taken back (the split tried, the one
    restored)."""
    rng = np.random.default_rng(seed)
    for s in range(n):
        load = np.exp(rng.normal(0.0, machine))
        own = np.exp(rng.normal(0.0, core, size=2))
        t0 = 0.01 * factor * (1 + couple * (rb.counts[1] - 12)) * load * own[0]
        rb.observe(0, s, t0 * rng.uniform(0.98, 1.02, size=rb.counts[0]))
        rb.observe(1, s, 0.01 * load * own[1] * rng.uniform(0.98, 1.02, size=rb.counts[1]))
        tried, taken_back = rb.counts, rb.reverted
        rb.plan()
        if reverts is not None and rb.reverted > taken_back:
            reverts.append((tried, rb.counts))
    return rb


def test_under_load_a_better_split_is_kept() -> None:
    """Replica 0 x1.2: (11, 13) takes 13.2 micro-batch times against the even split's 14.4,
    8% less, in every step whatever the load. At the load-12 noise, a trial judged on
    4-step medians ("slower than before" = taken back) took it back in most runs; judged
    as a statistical decision (taken back only when significantly slower, an inconclusive
    trial run on, the prediction as the prior) it is kept in most, and the loop does not
    keep moving the split (a refinement it cannot resolve at this noise is not tried).
    A return to even that the noisy estimate calls for is tried, and taken back when it
    measures slower (a trial of (12, 12) reverted to (11, 13) is right here): what must be
    rare is (11, 13) taken back to even. Judged relative to the steps' common level, where
    the machine-wide load cancels, that happened in 4 runs of 60 (in seconds: 8, with all
    take-backs of any kind in 14 runs; the 4-step rule: 45 runs)."""
    runs, wrong = [], 0
    for seed in range(60):
        reverts: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        runs.append(_loaded(Rebalancer(2, 12, window=10), 1.2, 0.0, seed, reverts=reverts))
        wrong += ((11, 13), (12, 12)) in reverts
    assert wrong / len(runs) <= 0.15
    assert float(np.median([rb.changes for rb in runs])) <= 3  # the 4-step rule: 4
    assert sum(rb.counts == (11, 13) for rb in runs) / len(runs) >= 0.75


def test_under_load_a_worse_split_is_still_taken_back() -> None:
    """Replicas sharing cores, replica 0 x1.5, each micro-batch moved to replica 1 stretching
    replica 0's by 30%: the first trial, (10, 14) (predicted 15 against 18), runs 10 x 1.5
    x 1.6 = 24, a third slower than the even split. At the same load-12 noise, it is taken
    back in nearly every run, and the loop ends on the even split in most."""
    runs = [_loaded(Rebalancer(2, 12, window=10), 1.5, 0.3, seed) for seed in range(60)]
    assert sum(rb.reverted > 0 for rb in runs) / len(runs) >= 0.8
    assert sum(rb.counts == (12, 12) for rb in runs) / len(runs) >= 0.5


def _coupled(rb: Rebalancer, seed: int, factor: float, couple: float, machine: float,
             onset: int, recovery: int, n: int) -> list[tuple[int, ...]]:
    """Feed ``n`` steps, replica 0 x``factor`` in steps onset..recovery-1; the plan after each.
    Every step the whole machine's load stretches both replicas by one lognormal factor
    (sigma ``machine``), each replica's core by another (sigma 0.03), each micro-batch +-2%.
    A replica running fewer than its even share idles in the step and lends its core to the
    other load: its micro-batches take ``1 + couple * (M - m_i) / M`` longer (measured on the
    example job at load 5: 7 of 24 micro-batches on the recovered rank, x1.5 per
    micro-batch: ``couple`` 1.2). The times per micro-batch depend on the split."""
    rng = np.random.default_rng(seed)
    plans = []
    for s in range(n):
        f = factor if onset <= s < recovery else 1.0
        load = np.exp(rng.normal(0.0, machine))
        own = np.exp(rng.normal(0.0, 0.03, size=2))
        for i in range(2):
            m = rb.counts[i]
            t = 0.01 * (f if i == 0 else 1.0) * (1 + couple * max(rb.m - m, 0) / rb.m)
            rb.observe(i, s, t * load * own[i] * rng.uniform(0.98, 1.02, size=m))
        plans.append(rb.plan())
    return plans


def test_gives_back_after_recovery_when_the_split_stretches_the_measure() -> None:
    """Replica 0 x1.5 in steps 10-39, the machine-wide load varying x1.35 (lognormal sigma
    0.3) from step to step, and the split-dependent measure seen in the example job's logs
    (``_coupled``, ``couple`` 1.2): after the recovery the replica with fewer micro-batches
    still looks slower. In every one of 40 seeded runs the split is even again within 20
    steps of the recovery and stays even to the end (step 69). Before trials were judged
    relative to the step's common level, a recovery ended the cooldown of a failed trial
    and moves toward even were exempt from ``held_back``, 7 of 40 never gave back. Since a
    recovery must be shown at its bound (``significance`` standard errors), not at its
    level: 1 of 40 within 25 steps (23: the split (8, 16) made the recovered replica
    measure 1.43x, at its bound past the midpoint to its old 2.1x)."""
    late = []
    for seed in range(40):
        plans = _coupled(Rebalancer(2, 12, window=10), seed, 1.5, 1.2, 0.3, 10, 40, 70)
        back = next((s for s in range(40, 70) if set(plans[s:]) == {(12, 12)}), None)
        if back is None or back > 60:
            late.append(seed)
            assert back is not None and back <= 65, (seed, back)
    assert len(late) <= 1, late


def test_a_machine_wide_load_jump_does_not_undo_a_good_split() -> None:
    """Replica 0 x2 from the start: (8, 16) from the first plan (step 3). From step 5, in
    the split's trial, the whole machine's load doubles and stays (another job started):
    both replicas' micro-batches take twice as long. The trial is judged on steps relative
    to their common level (the lower median over the replicas), where the load cancels: kept,
    no change after the first. (In seconds, the trial measured 2 x 16 / 24 = 1.33 times the
    even split's steps and was taken back.)"""
    rng = np.random.default_rng(5)
    rb = Rebalancer(2, 12)
    plans = []
    for s in range(30):
        load = 2.0 if s >= 5 else 1.0
        for i in range(2):
            t = 0.01 * (2.0 if i == 0 else 1.0) * load
            rb.observe(i, s, t * rng.uniform(0.98, 1.02, size=rb.counts[i]))
        plans.append(rb.plan())
    assert plans[3] == (8, 16) and set(plans[3:]) == {(8, 16)}
    assert rb.reverted == 0 and rb.changes == 1


def test_a_move_toward_even_is_not_held_back() -> None:
    """The split in effect is (7, 17) (set with ``reset``), but replica 0 is x1.5: the best
    split is (10, 14), 18% faster (17 against 14 micro-batch times). At the load-12 noise
    (machine sigma 0.3, each core 0.1) the resolution of a trial exceeds 18%: a refinement
    away from even would be held back, but a move toward even is a partial give-back, tried
    like the return to even: the split moves to (10, 14) (or nearer even) within 2 windows
    in at least 9 of 10 runs, where ``held_back`` kept (7, 17) in most."""
    moved = 0
    for seed in range(10):
        rb = Rebalancer(2, 12, window=10)
        rb.reset((7, 17), since=0)
        _loaded(rb, 1.5, 0.0, seed, n=20)
        moved += rb.counts[0] >= 10
    assert moved >= 9


def test_each_plan_says_why() -> None:
    """``last_plan`` after each plan: warming up for ``min_steps`` steps, then the first
    change (x2: (8, 16)) with the estimate behind it (replica 0 twice replica 1, a standard
    error per replica), then the trial running; JSON-ready for a decision log."""
    rb = Rebalancer(2, 12)
    reasons = []
    for s in range(6):
        rb.observe(0, s, [0.02] * rb.counts[0])
        rb.observe(1, s, [0.01] * rb.counts[1])
        rb.plan()
        assert rb.last_plan is not None and rb.last_plan.step == s
        reasons.append(rb.last_plan.reason)
        if s == 3:
            note = json.loads(json.dumps(rb.last_plan.to_dict()))
            assert note["counts"] == [8, 16] and note["best"] == [8, 16]
            assert note["estimate"]["relative"] == [2.0, 1.0]
            assert note["estimate"]["stderr"] == [0.0, 0.0]
    assert reasons == ["warming"] * 3 + ["changed"] + ["warming"] * 2


def test_a_trial_across_a_change_of_straggler_is_void() -> None:
    """Replica 1 x2 in steps 0-19, replica 0 x2 from step 24 (the other load moved to the
    other core). (16, 8) from step 3; replica 1's recovery makes the loop try the even
    split (step 22), and in that trial replica 0 turns slow: the trial's steps and the ones
    before it belong to different stragglers. Taken back, it restored (16, 8), the worst split now
    (16 x 2 = 32 micro-batch times against 24 even), for a back-off of 8 steps; void, the
    estimate decides: (8, 16) once the steps at even show it (a new onset after a
    give-back: two halves of 2 x ``min_steps`` steps), and (16, 8) never comes back."""
    n = 50
    slow = np.ones((n, 2))
    slow[:20, 1] = 2.0
    slow[24:, 0] = 2.0
    rb = Rebalancer(2, 12)
    plans = _run(rb, slow, np.ones(n), np.ones((n, 2)), seed=2)
    assert plans[3] == (16, 8)
    back = next(s for s in range(20, n) if plans[s] == (12, 12))
    assert back <= 24
    assert (16, 8) not in plans[back:]
    assert plans[back + 2 * rb.min_steps] == (8, 16)
    assert plans[-1] == (8, 16) and rb.reverted == 0


def test_held_back_judges_the_noise_as_trials_do() -> None:
    """``held_back`` weighs a refinement's predicted gain against what its trial can
    resolve: the noise must be the trials' own, relative to each step's common level.
    The split in effect is (10, 14) (``reset``) while replica 0 now runs x2: (8, 16) is
    20% faster (16 against 20 micro-batch times). The whole machine's load varies x1.35
    from step to step (lognormal sigma 0.3, both replicas at once), each core +-3%: the
    relative noise resolves 20% easily. Judged in seconds (the machine-wide load in the
    noise) the refinement was held back in most of 20 runs; now it is made in all. A gain
    below the relative resolution (3%: (10, 14) -> (9, 15) at x1.55, each core sigma
    0.1: the estimate wanders too) is still held back in most runs (16 of 20)."""
    moved = 0
    for seed in range(20):
        rb = Rebalancer(2, 12, window=10)
        rb.reset((10, 14), since=0)
        _loaded(rb, 2.0, 0.0, seed, n=8, machine=0.3, core=0.03)
        moved += rb.counts == (8, 16) and rb.held_back == 0
    assert moved == 20
    held = 0
    for seed in range(20):
        rb = Rebalancer(2, 12, window=10)
        rb.reset((10, 14), since=0)
        _loaded(rb, 1.55, 0.0, seed, n=12, machine=0.3, core=0.1)
        held += rb.held_back > 0
    assert held >= 14


def test_a_recovery_is_seen_after_a_change_of_split() -> None:
    """Replicas sharing cores: replica 0's time per micro-batch depends on the split
    (1.8x replica 1's at (10, 14), 2.1x at (8, 16), set at step 6), and it recovers at step
    9 (1.4x at (8, 16): the split still stretches it). At step 12 the window (10 steps)
    holds both splits' steps before the recovery: their spread together (1.8 and 2.1) hid
    the level shift to 1.4, and the loop walked back one micro-batch at a time; against the
    older steps of the split in effect (2.1) it is a recovery: the even split at once."""
    rng = np.random.default_rng(3)
    rb = Rebalancer(2, 12, window=10)
    rb.reset((10, 14), since=0)
    for s in range(13):
        if s == 6:
            rb.reset((8, 16), since=6)
        r0 = 1.8 if s < 6 else (2.1 if s < 9 else 1.4)
        for i, f in enumerate((r0, 1.0)):
            rb.observe(i, s, 0.01 * f * rng.uniform(0.99, 1.01, size=rb.counts[i]))
    est = rb.estimate()
    assert est is not None and est.faster == (0,)
    assert rb.plan() == (12, 12) and rb.last_plan is not None
    assert rb.last_plan.reason == "recovered"


def _ratios(rb: Rebalancer, f0: np.ndarray, f1: np.ndarray, seed: int,
            machine: float = 0.2) -> list[tuple[tuple[int, ...], str]]:
    """Feed one step per entry: replica i's micro-batches take ``0.01 * f_i[s]`` times one
    machine-wide lognormal load per step (sigma ``machine``, both replicas at once), each
    micro-batch +-2%; the plan after each step and its reason."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(f0.size):
        load = np.exp(rng.normal(0.0, machine))
        for i, f in enumerate((f0[s], f1[s])):
            rb.observe(i, s, 0.01 * f * load * rng.uniform(0.98, 1.02, size=rb.counts[i]))
        rb.plan()
        assert rb.last_plan is not None
        out.append((rb.counts, rb.last_plan.reason))
    return out


def test_straight_back_to_even_when_the_replicas_measure_alike() -> None:
    """A sleeping straggler on a loaded machine (the example job's x1.5 rounds): replica 0
    x2.3 with its own spread (lognormal sigma 0.3: 1.5-3.3 from step to step, as logged) on
    the split (7, 17), recovered at step 20 (x1, sigma 0.05). The recent steps measure the
    replicas alike while the older ones' spread hid the level shift from the 3-MAD test:
    the loop walked back one move per trial ((8, 16), (10, 14), ...). Now the even split
    comes within 3 x ``min_steps`` steps of the recovery (the replicas measured alike on
    2 x ``min_steps`` steps: on ``min_steps``, tested at every step, the steady x1.2
    straggler under load of test_under_load_a_better_split_is_kept passed for alike in 18
    of its 60 seeded runs; now 10), after at most one move, and stays: in every one of 20
    seeded runs; and never during the slow phase."""
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        f0 = np.concatenate([2.3 * np.exp(rng.normal(0.0, 0.3, 20)),
                             np.exp(rng.normal(0.0, 0.05, 20))])
        rb = Rebalancer(2, 12, window=10)
        rb.reset((7, 17), since=0)
        plans = _ratios(rb, f0, np.ones(40), seed)
        assert all(c != (12, 12) for c, _ in plans[:20]), seed
        back = next(s for s in range(20, 40) if plans[s][0] == (12, 12))
        assert back <= 20 + 3 * rb.min_steps, (seed, plans)
        assert {c for c, _ in plans[back:]} == {(12, 12)}, (seed, plans)
        assert len({c for c, _ in plans[19:back]}) <= 2, (seed, plans)


def test_never_past_even_toward_the_formerly_healthy_replica_in_one_move() -> None:
    """The split (11, 13) for a slow replica 0 (x1.25 +-15%); at step 12 replica 0 recovers
    and replica 1 turns x1.4 (the machine's other load moved to its core). The estimate of
    the steps after the level shift calls for (15, 9) at once (the example job's x1.5 round
    1 went from (11, 13) to (14, 10) so, on 4 steps). Now the first change from step 12 is
    to even, and
    the move past it comes only as a ``new onset``: after ``min_steps`` steps at even, on
    those steps alone, replica 1 significantly slower. (In 1 of the 10 seeded runs the
    first 4 steps measured replica 0 x1.09 and the loop was at even before step 12: no
    move from a rebalanced split to test there; at most 2 such runs.)"""
    at_even = 0
    for seed in range(10):
        rng = np.random.default_rng(200 + seed)
        f0 = np.concatenate([1.25 * np.exp(rng.normal(0.0, 0.15, 12)), np.ones(18)])
        f1 = np.concatenate([np.ones(12), np.full(18, 1.4)])
        rb = Rebalancer(2, 12, window=10)
        rb.reset((11, 13), since=0)
        plans = _ratios(rb, f0, f1, seed, machine=0.1)
        changes = [(s, c, why) for s, (c, why) in enumerate(plans)
                   if c != (plans[s - 1][0] if s else (11, 13))]
        past = [x for x in changes if x[1][0] > 12]
        assert past and past[0][2] == "new onset", (seed, changes)
        if plans[11][0] == (12, 12):
            at_even += 1
            continue
        after = [x for x in changes if x[0] >= 12]
        assert after[0][1] == (12, 12), (seed, changes)
        assert past[0][0] - after[0][0] >= rb.min_steps
    assert at_even <= 2


def test_no_flapping_around_even_after_a_give_back() -> None:
    """After the give-back the formerly slow replica stays x1.12 (the example job's x2 round
    2 after its recovery: 1.0-1.3): (11, 13) would be 3.3% faster than even, within the
    band between the give-back (even within ``tolerance``, 3%) and a new onset (more than
    twice that): the split stays even (``held at even``) where the loop went back to (11,
    13) (the first change from even needs only ``tolerance``), 5 seeds."""
    for seed in range(5):
        f0 = np.concatenate([np.full(12, 1.8), np.full(28, 1.12)])
        rb = Rebalancer(2, 12, window=10)
        rb.reset((9, 15), since=0)
        plans = _ratios(rb, f0, np.ones(40), seed, machine=0.05)
        back = next(s for s in range(12, 40) if plans[s][0] == (12, 12))
        assert back <= 12 + rb.min_steps + 1
        assert {c for c, _ in plans[back:]} == {(12, 12)}, (seed, plans)
        assert any(why == "held at even" for _, why in plans[back:])


def test_a_partial_recovery_is_not_a_give_back() -> None:
    """The split (7, 17) for replica 0 at x3.1; from step 10 it runs x1.9, still slow (the
    example job's x1.5 round 1 at step 51: the sleeping straggler's ratio fell from 3.1 to
    1.9 for a few steps). The level shift made the loop give everything back (the even
    split, 12 x 1.9 = 22.8 micro-batch times against 16 for (8, 16)) until its trial took
    it back. A faster replica nearer its old level than the others' (in log) gets the split
    for its new level, toward even: (8, 16), never even while it stays slow."""
    for seed in range(5):
        f0 = np.concatenate([np.full(10, 3.1), np.full(14, 1.9)])
        rb = Rebalancer(2, 12, window=10)
        rb.reset((7, 17), since=0)
        plans = _ratios(rb, f0, np.ones(24), seed, machine=0.05)
        assert (12, 12) not in [c for c, _ in plans], (seed, plans)
        assert plans[-1][0] == (8, 16) and "partly recovered" in [w for _, w in plans]


def test_a_split_is_predicted_from_the_steps_that_ran_it() -> None:
    """Replicas sharing cores (as in ``test_a_split_that_measures_slower_is_taken_back``):
    replica 0 x1.5, each micro-batch moved to replica 1 stretching replica 0's by 20%. The
    split tried first is predicted from the times measured at the even split, where replica
    0 ran x1.5: too fast by a quarter or more. Once it has run, its step predicted from the
    steps that ran it is what it did (within 2%), and the plan's note carries it."""
    rb = Rebalancer(2, 12)
    tried = None
    for s in range(40):
        m1 = rb.counts[1]
        t0 = 0.01 * 1.5 * (1 + 0.2 * (m1 - 12))
        rb.observe(0, s, [t0] * rb.counts[0])
        rb.observe(1, s, [0.01] * m1)
        if rb.plan() != (12, 12) and tried is None:
            tried, before = rb.counts, rb.predicted_step_s(rb.counts)
            assert np.isnan(rb.predicted_from_runs_s(tried))  # not run yet
    assert tried is not None and rb.counts == (12, 12) and rb.reverted >= 1
    truth = max(tried[0] * 0.015 * (1 + 0.2 * (tried[1] - 12)), tried[1] * 0.01)
    assert before < 0.8 * truth  # from the even split's times
    assert abs(rb.predicted_from_runs_s(tried) / truth - 1) < 0.02
    assert np.isnan(rb.predicted_from_runs_s((3, 21)))  # never ran
    assert rb.last_plan is not None
    assert abs(rb.last_plan.predicted_from_runs_s / (12 * 0.015) - 1) < 0.02


def test_the_noise_is_not_zero_where_most_steps_tie() -> None:
    """Where the fast replica sets most steps' cost (exactly ``m x 1`` relative to the
    step's common level), more than half the steps equal the median and the MAD is 0: a
    trial's resolution was 0 and a 1% difference "significant". The noise is one step's
    standard deviation relative to the median (here sqrt((4^2 + 4^2 + 1^2 - 9 x (1/9)^2) /
    8) / 16), pooled over samples with one degree of freedom per sample's mean."""
    rb = Rebalancer(2, 12)
    c = np.array([16.0, 16.0, 16.0, 16.0, 16.0, 20.0, 12.0, 16.0, 17.0])
    assert rb.noise(c) == pytest.approx(float(np.std(c, ddof=1)) / 16)
    d = np.array([10.0, 12.0])
    assert rb.noise(c, d) == pytest.approx(np.sqrt(
        (np.sum((c / 16 - np.mean(c / 16)) ** 2) + np.sum((d / 11 - 1) ** 2)) / (11 - 2)))
    assert rb.noise(np.full(6, 16.0)) == 0.0  # all alike: no spread


def test_a_trial_is_kept_when_the_fast_replica_got_faster() -> None:
    """Replica 0 takes 70 ms per micro-batch throughout; replica 1 45 ms at the even split,
    and 30 ms from the first step of the trial of (9, 15) on (other load left its core, as
    in the example job's x1.5 round 1 at step 45). Relative to the step's common level (the
    faster replica) the trial measures slower (21 against 18.7 micro-batch times): it was
    taken back. In seconds it is a quarter faster (0.63 s against 0.84 s), significantly:
    kept, no trial taken back, and the split stays cut for replica 0."""
    rng = np.random.default_rng(11)
    rb = Rebalancer(2, 12)
    for s in range(24):
        t1 = 0.045 if rb.counts == (12, 12) and s < 4 else 0.03
        for i, t in enumerate((0.07, t1)):
            rb.observe(i, s, t * rng.uniform(0.98, 1.02, size=rb.counts[i]))
        rb.plan()
    assert rb.changes >= 1 and rb.reverted == 0
    assert rb.counts[0] < 12


def test_a_new_onset_needs_a_whole_window_at_even() -> None:
    """After the give-back both replicas are healthy but each swings on its own from step
    to step (lognormal sigma 0.15 per replica: ratios 0.8-1.3, as the example job's rounds
    logged at load 2-4 after the injection): 4 steps at even, tested at every step, measured
    one replica "significantly" slower by chance, and the loop left even again 5 times in
    the 6 rounds of a benchmark run (here: in 19 of 20 seeded runs of 60 steps). A new onset
    after a give-back now needs a paired test (step by step, not relative to each step's
    lower median, where half of two replicas' ratios tie at 1) in two disjoint halves of
    the steps at even: the split leaves even in at most 2 of 20 runs, while a real new
    straggler (x1.6 from 20 steps after the give-back) is still rebalanced within two
    windows."""
    left = 0
    for seed in range(20):
        rng = np.random.default_rng([seed, 7])
        f0 = np.concatenate([np.full(12, 1.8), np.exp(rng.normal(0.0, 0.15, 60))])
        f1 = np.concatenate([np.ones(12), np.exp(rng.normal(0.0, 0.15, 60))])
        rb = Rebalancer(2, 12, window=10)
        rb.reset((9, 15), since=0)
        plans = _ratios(rb, f0, f1, seed, machine=0.05)
        back = next(s for s in range(12, 72) if plans[s][0] == (12, 12))
        left += any(c != (12, 12) for c, _ in plans[back:])
    assert left <= 2
    for seed in range(5):
        rng = np.random.default_rng([seed, 8])
        f0 = np.concatenate([np.full(12, 1.8), np.ones(20), np.full(40, 1.6)])
        f0 = f0 * np.exp(rng.normal(0.0, 0.05, f0.size))
        rb = Rebalancer(2, 12, window=10)
        rb.reset((9, 15), since=0)
        plans = _ratios(rb, f0, np.ones(f0.size), seed, machine=0.05)
        moved = [s for s in range(32, 72) if plans[s][0][0] < 12]
        assert moved and moved[0] <= 32 + 2 * rb.window, (seed, plans[30:])


def _walked_back(seed: int, then0: np.ndarray, then1: np.ndarray
                 ) -> tuple[list[tuple[tuple[int, ...], str]], int | None]:
    """Replica 0 x1.6 on the split (9, 15), then a gradual recovery (x1.25 for 8 steps,
    x1.12 for 12, x1 for 8: the example job's x1.5 round 2 at load 2, 1.77 -> 1.22 ->
    1.11-1.23), each replica +-5% of its own per step; from step 40 replica i runs
    ``then_i``. The plans, and the step at which the split came back to even by trials
    (``even within tolerance``: no give-back) and stayed even to step 39 (else None)."""
    rng = np.random.default_rng([seed, 30])
    f0 = np.concatenate([np.full(12, 1.6), np.full(8, 1.25), np.full(12, 1.12), np.ones(8),
                         then0])
    f1 = np.concatenate([np.ones(40), then1])
    f0, f1 = (f * np.exp(rng.normal(0.0, 0.05, f.size)) for f in (f0, f1))
    rb = Rebalancer(2, 12, window=10)
    rb.reset((9, 15), since=0)
    plans = _ratios(rb, f0, f1, seed, machine=0.05)
    even = [s for s in range(1, 40) if plans[s][0] == (12, 12) != plans[s - 1][0]]
    ok = (bool(even) and plans[even[-1]][1] == "even within tolerance"
          and {c for c, _ in plans[even[-1]:40]} == {(12, 12)}
          and all(w not in ("alike", "recovered") for _, w in plans[:40]))
    return plans, even[-1] if ok else None


def test_a_walk_back_to_even_is_left_for_a_new_straggler_only_on_a_give_backs_evidence(
        ) -> None:
    """After a gradual recovery the loop walks back to even one trial at a time (``even
    within tolerance``, not a give-back), and leaving even then needed 4 steps at even
    only: a 6-step burst on the healthy replica (x1.75 from step 42, as replica 1 in the
    example job's x1.5 round 2 at load 2, steps 80-85) cut it, to (15, 9)/(16, 8), in
    every one of the 8 seeded runs (of 12) that walked back; now in 1. A split that cuts
    a replica the last rebalanced split did not cut is a new straggler: it needs the
    give-back's evidence (two halves of the steps at even). The straggler that was
    mitigated, slow again at even (x1.5 from step 40), is re-detected on a first action's
    evidence (or its trial of even taken back), within ``min_steps`` steps (counting every
    return to even as a give-back took 9-13)."""
    walked, cut = 0, 0
    for seed in range(12):
        burst = np.ones(28)
        burst[2:8] = 1.75
        plans, back = _walked_back(seed, np.ones(28), burst)
        if back is None:
            continue
        walked += 1
        cut += any(c[1] < 12 for c, _ in plans[back:])
    assert walked >= 6 and cut <= 1, (walked, cut)
    walked = 0
    for seed in range(12):
        plans, back = _walked_back(seed, np.full(28, 1.5), np.ones(28))
        if back is None:
            continue
        walked += 1
        again = next(s for s in range(40, 68) if plans[s][0][0] < 12)
        assert again - 40 <= 4, (seed, plans[38:])
        assert plans[again][1] in ("new onset", "trial taken back"), (seed, plans[38:])
    assert walked >= 6


@pytest.mark.parametrize(("factor", "before", "now"), [(1.6, 4, 14), (2.0, 11, 16)])
def test_the_first_estimate_starts_at_the_onset_given(factor: float, before: int,
                                                      now: int) -> None:
    """A straggler's onset known by other means (the live loop's detector, 5 steps late):
    replica 0 x``factor`` from step 12, the first plan at step 17, on a loaded machine
    (machine-wide lognormal sigma 0.2, each replica's own 0.1: healthy ratios 0.8-1.3, as
    the example job's at load 6). The window of 10 steps held 4 healthy ones, which the
    3-MAD rejection keeps at this noise: the estimate came out low and the first split
    short of the optimum (the example job's x1.5 round 0 at load 6: 1.47 where the slow
    steps ran 1.5-2.2, then (10, 14) taken back). With ``reset(since=onset)`` the plans
    estimate from the onset on: the first split is the exact solver's optimum in ``now``
    of 20 seeded runs (before: ``before``), and the mean compute step over the 13 steps
    from the first plan is within 2.5% of the optimum's (before: 3.1-5.0% above)."""
    opt = tuple(int(c) for c in solve_microbatches([factor, 1.0], 24).assignment)
    t = np.array([factor, 1.0])
    hits, excess = 0, []
    for seed in range(20):
        rng = np.random.default_rng([seed, 31])
        f0 = np.where(np.arange(30) >= 12, factor, 1.0) * np.exp(rng.normal(0.0, 0.1, 30))
        f1 = np.exp(rng.normal(0.0, 0.1, 30))
        rb = Rebalancer(2, 12, window=10)
        first, cost = None, 0.0
        for s in range(30):
            load = np.exp(rng.normal(0.0, 0.2))
            for i, f in enumerate((f0[s], f1[s])):
                rb.observe(i, s, 0.01 * f * load * rng.uniform(0.98, 1.02, size=rb.counts[i]))
            if s == 17:
                rb.reset(since=12)
            if s >= 17:
                rb.plan()
                first = rb.counts if first is None and rb.counts != (12, 12) else first
                cost += step_of(rb.counts, t)
        hits += first == opt
        excess.append(cost / 13 / step_of(opt, t) - 1)
    assert hits >= (before + now) // 2 + 1, hits
    assert float(np.mean(excess)) <= 0.025, excess


def _affine(rb: Rebalancer, fixed: tuple[float, float], per_mb: tuple[float, float],
            n: int, seed: int) -> list[PlanNote]:
    """Feed ``n`` steps where replica i's busy time is ``fixed[i] + per_mb[i] * m_i`` for
    the ``m_i`` micro-batches it runs (a per-step cost on the replica), times one
    machine-wide lognormal load per step (sigma 0.05) and each replica's own (sigma 0.02);
    its micro-batches each take the busy time over ``m_i``. The plan's note after each."""
    rng = np.random.default_rng(seed)
    notes = []
    for s in range(n):
        load = np.exp(rng.normal(0.0, 0.05))
        for i in range(2):
            m = rb.counts[i]
            busy = (fixed[i] + per_mb[i] * m) * load * np.exp(rng.normal(0.0, 0.02))
            rb.observe(i, s, np.full(m, busy / m))
        rb.plan()
        assert rb.last_plan is not None
        notes.append(rb.last_plan)
    return notes


def test_a_per_step_cost_is_fitted_and_the_split_predicted_with_it() -> None:
    """Replica 0's busy time is 0.18 s + 0.01 s per micro-batch, replica 1's 0.01 s per
    micro-batch: at even replica 0 measures 2.5x per micro-batch, and its time per
    micro-batch rises as its micro-batches are cut (as the example job's sleeping straggler
    did: x1.46 at even, x1.87-2.2 on the first split). The optimum is (3, 21) (0.21 s
    both). The first split, from one count, is the proportional model's (7, 17) or (6, 18),
    predicted 24-31% fast (nothing else can be known yet). From the second split on, the
    busy time is fitted on the two splits the episode ran: every later change is predicted
    within 5% (the proportional model: (4, 20) 5-14% fast) and the loop reaches (3, 21) by
    its third change in 9 of 10 runs (the proportional model: 1 of 10, by trials of one
    micro-batch each) and ends there in 10 of 10."""
    fixed, per_mb = (0.18, 0.0), (0.01, 0.01)

    def true_step(c: tuple[int, ...]) -> float:
        return max(fixed[i] + per_mb[i] * c[i] for i in range(2))

    assert tuple(best_split_affine(np.array(fixed), np.array(per_mb), 24)) == (3, 21)
    third = 0
    for seed in range(10):
        rb = Rebalancer(2, 12)
        notes = _affine(rb, fixed, per_mb, 30, seed)
        changed = [nt for nt in notes if nt.reason == "changed"]
        assert changed[0].counts in ((6, 18), (7, 17)), seed  # proportional: one count
        assert notes[-1].counts == (3, 21), seed
        for note in changed[2:]:
            assert note.model is not None and note.model.affine == (0,), seed
            assert note.predicted_best_s == pytest.approx(true_step(note.counts), rel=0.05)
        third += changed[2].counts == (3, 21)
    assert third >= 8


def test_one_count_seen_or_no_fixed_part_keeps_the_proportional_model() -> None:
    """Before a second count ran (the first action from even), and where the busy time is
    proportional (replica 0 x2 steadily), the model is ``m x t``: the first split is the
    exact solver's for the measured times, and a steady straggler's optimum (8, 16) is
    reached and kept with no fixed part fitted."""
    rb = Rebalancer(2, 12)
    notes = _affine(rb, (0.0, 0.0), (0.02, 0.01), 20, 0)
    assert notes[3].counts == (8, 16) and notes[-1].counts == (8, 16)
    assert all(nt.model is None or nt.model.affine == () for nt in notes)


@pytest.mark.parametrize("stages", [1, 2])
def test_the_affine_split_is_exact(stages: int) -> None:
    """:func:`best_split_affine` against every split of 2 and 3 replicas (random fixed
    and per-micro-batch seconds): the smallest ``max_i a_i + b_i (m_i + stages - 1)``."""
    import itertools

    rng = np.random.default_rng(stages)
    for _ in range(40):
        dp = int(rng.integers(2, 4))
        total = int(rng.integers(dp, 13))
        a, b = rng.uniform(0, 0.3, dp) * (rng.uniform(size=dp) < 0.7), rng.uniform(0.01, 0.05, dp)
        got = best_split_affine(a, b, total, stages)
        assert got.sum() == total and got.min() >= 1
        best = min(max(a + b * (np.array(c) + stages - 1))
                   for c in itertools.product(range(1, total + 1), repeat=dp) if sum(c) == total)
        assert max(a + b * (got + stages - 1)) == pytest.approx(best, rel=1e-9)


def test_a_refinement_waits_for_last_steps_that_measure_the_straggler_faster() -> None:
    """(8, 16) for replica 0 at x2; from step 13 it runs x3.5 (the best split now (5, 19)),
    and at step 16 it recovers (x1). The plan after step 16 has the 4 steps 13-16: the
    last is an outlier on the faster side and rejected, so the estimate still says x3.5
    (the example job's x2 round 1 at step 66: the last two steps, 1.01 and 0.75, rejected,
    a refinement to (5, 19) made one step after the injection ended). It waits (the split
    stays (8, 16)); a rise with no such step still refines to (5, 19)."""
    for recover in (True, False):
        rb = Rebalancer(2, 12, window=10)
        rb.reset((8, 16), since=13)
        f0 = np.array([2.0] * 13 + [3.5] * 3 + [1.0 if recover else 3.5])
        plans = _ratios(rb, f0, np.ones(f0.size), seed=0, machine=0.0)
        assert plans[-1] == (((8, 16), "waiting") if recover else ((5, 19), "changed"))


def _worsening(seed: int, couple: float, jump: float) -> tuple[list[tuple[tuple[int, ...],
                                                                         str]], float]:
    """Replica 0 x1.3 from step 12 (an onset the detector placed there, given by
    ``reset(since=12)`` at the first plan, step 17: the first split (10, 14)); from step 19,
    the trial's second step, it runs x``jump`` (a straggler that worsened as the split
    changed). With ``couple``, cutting its micro-batches stretches its own: ``1 + couple
    (M - m) / M`` (a time per micro-batch that depends on the split). One machine-wide
    lognormal load per step (sigma 0.2) and each replica's own (sigma 0.08), each
    micro-batch +-2%. The plans from step 17 with their reasons, and the mean compute step
    over steps 22-35 (in units of the healthy micro-batch) over the optimum's for x``jump``
    (1 where it is the optimum throughout)."""
    rng = np.random.default_rng([seed, 46])
    rb = Rebalancer(2, 12, window=10)
    f = np.where(np.arange(36) >= 19, jump, 1.3)
    f[:12] = 1.0
    plans, cost = [], []
    for s in range(36):
        load = np.exp(rng.normal(0.0, 0.2))
        own = np.exp(rng.normal(0.0, 0.08, size=2))
        t0 = f[s] * (1 + couple * max(12 - rb.counts[0], 0) / 12)
        for i, t in enumerate((t0, 1.0)):
            rb.observe(i, s, 0.01 * t * load * own[i] * rng.uniform(0.98, 1.02,
                                                                    size=rb.counts[i]))
        if s >= 22:
            cost.append(max(rb.counts[0] * t0, float(rb.counts[1])))
        if s == 17:
            rb.reset(since=12)
        if s >= 17:
            rb.plan()
            assert rb.last_plan is not None
            plans.append((rb.counts, rb.last_plan.reason))
    opt = step_of(solve_microbatches([jump, 1.0], 24).assignment, [jump, 1.0])
    return plans, float(np.mean(cost)) / opt


def test_a_trial_taken_back_when_the_straggler_worsened_re_plans_on_the_new_level() -> None:
    """The example job's x2 round 2 (load 1.6-2.0): an onset from the machine's own x1.2-1.4
    before the injection gave (10, 14); the injection (x2.3) came with the trial's second
    step, the trial measured slower and was taken back, and the even split ran 10 slow steps
    (the back-off's ``window``) before (7, 17). From the trial's steps alone a straggler
    that worsened looks like one whose time per micro-batch rises when it is cut; the steps
    at even after the take-back tell them apart. Here replica 0 runs x2.3 from step 19:
    the first split is taken back at step 21 (22 in one run), and the split for x2.3
    ((7, 17), (6, 18) or (8, 16)) follows on the ``min_steps`` steps at even since
    (``level shift``, step 25-26) in 20 of 20 seeded runs; the code before held even to
    step 31 (the cooldown) in 20 of 20. The mean compute step over steps 22-35 is 18-24%
    above the optimum's (was 45-47%). The control (``couple`` 2.4: the first split is
    slower because replica 0's micro-batches stretch when it is cut; x1.3 at even all
    along): a trial taken back in 19 of 20 runs, and the split restored holds through the
    cooldown (no ``level shift``) in every one."""
    control_back = 0
    for seed in range(20):
        plans, excess = _worsening(seed, 0.0, 2.3)
        reasons = [r for _, r in plans]
        assert "trial taken back" in reasons, (seed, plans)
        back = reasons.index("trial taken back")
        assert plans[back][0] == (12, 12), (seed, plans)
        shift = next(i for i in range(back + 1, len(plans)) if plans[i][0] != (12, 12))
        assert plans[shift][0] in ((6, 18), (7, 17), (8, 16)), (seed, plans)
        assert plans[shift][1] == "level shift", (seed, plans)
        assert shift - back <= 4 + 1, (seed, plans)  # min_steps steps at even (+ the last)
        assert excess <= 1.25, (seed, excess)
        plans, _ = _worsening(seed, 2.4, 1.3)
        reasons = [r for _, r in plans]
        assert "level shift" not in reasons, (seed, plans)
        if "trial taken back" in reasons:
            control_back += 1
            back = reasons.index("trial taken back")
            assert all(c == plans[back][0] for c, _ in plans[back:back + 10]), (seed, plans)
    assert control_back >= 15, control_back


def _shared_cores(seed: int, factor: float, couple: float = 0.8, onset: int = 12,
                  recovery: int = 42, n: int = 66) -> list[tuple[int, tuple[int, ...], str]]:
    """Replicas sharing cores, as the example job's x1.5 round 0 logged them (load 1.3):
    each replica's time per micro-batch rises with the micro-batches it runs and falls
    when they are cut, ``1 + couple (m_i - M) / M`` (at (8, 16) replica 0 measured 46-56 ms
    instead of 62-67, replica 1 42 ms instead of 27-30: ``couple`` about 0.8). Replica 0
    x``factor`` in steps onset..recovery-1; the first plan 5 steps after the onset, from
    it (``reset(since=onset)``, as the live loop does); one machine-wide lognormal load per
    step (sigma 0.2) and each replica's own (sigma 0.08). The plans with their reasons."""
    rng = np.random.default_rng([seed, 20])
    rb = Rebalancer(2, 12, window=10)
    out = []
    for s in range(n):
        f = factor if onset <= s < recovery else 1.0
        load = np.exp(rng.normal(0.0, 0.2))
        own = np.exp(rng.normal(0.0, 0.08, size=2))
        for i in range(2):
            m = rb.counts[i]
            t = (f if i == 0 else 1.0) * (1 + couple * (m - 12) / 12)
            rb.observe(i, s, 0.01 * t * load * own[i] * rng.uniform(0.98, 1.02, size=m))
        if s == onset + 5:
            rb.reset(since=onset)
        if s >= onset + 5:
            rb.plan()
            assert rb.last_plan is not None
            out.append((s, rb.counts, rb.last_plan.reason))
    return out


def test_a_drop_across_a_change_of_split_is_not_a_recovery() -> None:
    """The example job's x1.5 round 0 gave everything back at step 49, the straggler still
    injected to 64: on its first split replica 0's time relative to replica 1's fell from
    2.17 to 1.24, because the split moved both replicas' speeds (``_shared_cores``), and
    the level-shift test compared those steps with the even split's. A recovery is now a
    drop measured on steps of one split (any earlier stretch of it, at least 3 steps),
    and faster is also judged relative to the step's mean over the replicas (a straggler
    that recovers past the other shows as itself falling). Seeded, x2 (the optimum at
    these speeds (10, 14)): the code before gave back (``recovered`` / ``alike``) during
    the slow phase in 86 of 100 runs (seeds 0-99), now 4; here none in 10 of 10 seeds
    (0-9, the code before: 9), and the even split comes within 10 steps of the recovery
    and stays in 9 of 10 (median over seeds 0-99: 3 steps, the code before 6; with faster
    judged relative to the lower median only, replica 0 recovering below replica 1 showed
    as replica 1 rising: 17 steps in 20 of 40 seeds)."""
    false_back, late = [], 0
    for seed in range(10):
        out = _shared_cores(seed, 2.0)
        if any(r in ("recovered", "alike") for s, _, r in out if s < 42):
            false_back.append(seed)
        back = next((s for s, _, _ in out if s >= 42
                     and all(c == (12, 12) for s2, c, _ in out if s2 >= s)), None)
        late += back is None or back > 42 + 10
    assert false_back == []
    assert late <= 1


def test_one_spread_estimator_is_right_on_small_groups() -> None:
    """The standard error behind every significance test on medians of steps (the give-back
    ``alike``, the fixed part, a new onset, the level-shift re-plan): on two groups of 4, 6
    and 12 normal steps of known sigma (seeded, 4000 draws), one step's spread is within 8%
    of sigma (median), and a 3-standard-error test on the difference of the two groups'
    medians, with no difference, fires in at most 2.5% of draws. The pooled MAD about each
    group's own median, used before: 0.68, 0.78, 0.90 of sigma, and 9.5% at 4 steps."""
    from stragglers.mitigate.rebalance import MEDIAN_SE, _median_se_unit

    rng = np.random.default_rng(30)
    for n in (4, 6, 12):
        x = rng.normal(0.0, 0.1, (4000, 2, n))
        unit = np.array([_median_se_unit(d[0][:, None], d[1][:, None])[0] for d in x])
        assert abs(float(np.median(unit / MEDIAN_SE)) / 0.1 - 1) <= 0.08, n
        diff = np.median(x[:, 0], axis=1) - np.median(x[:, 1], axis=1)
        assert float(np.mean(np.abs(diff) > 3 * unit * np.sqrt(2 / n))) <= 0.025, n


def test_the_noise_of_trials_and_estimates_is_not_under_estimated() -> None:
    """Seeded steps of known spread (lognormal sigma 0.1). The trials' noise: a trial of 4
    or 10 steps against 10 steps of the same split (no difference) is decided (its median's
    change beyond the resolution, ``significance`` 2 standard errors: nominally 4.6%) in
    at most 6.5% of 1500 draws (the pooled MAD used before: 11.5% and 9.0%). The estimate:
    its ``stderr`` on 4 and 10 steps is at least 0.8 of the true spread of ``relative``
    over the draws (median; the kept steps' MAD before: 0.58 and 0.83), and the outlier
    band rejects at most 4.5 of 100 clean steps at 4 (the uncorrected MAD: 5.7)."""
    rb = Rebalancer(2, 12)
    for n in (4, 10):
        rng = np.random.default_rng([n, 7])
        c = 16 * np.exp(rng.normal(0.0, 0.1, (1500, n)))
        b = 16 * np.exp(rng.normal(0.0, 0.1, (1500, 10)))
        diff = np.median(c, axis=1) / np.median(b, axis=1) - 1
        res = np.array([rb.resolution(rb.noise(c[d], b[d]), n, 10) for d in range(1500)])
        assert float(np.mean(np.abs(diff) > res)) <= 0.065, n
    for n in (4, 10):
        rng = np.random.default_rng([n, 8])
        x0 = 0.02 * np.exp(rng.normal(0.0, 0.1, (1000, n)))
        rel, se, rejected = [], [], 0
        for d in range(1000):
            r = Rebalancer(2, 12, window=n, min_steps=n)
            r.observe_steps(np.arange(n), np.stack([x0[d], np.full(n, 0.01)], axis=1))
            est = r.estimate()
            assert est is not None
            rel.append(est.relative[0])
            se.append(est.stderr[0])
            rejected += est.rejected
        assert float(np.median(se)) >= 0.8 * float(np.std(rel)), n
        if n == 4:
            assert rejected <= 0.045 * 1000 * n


def test_a_steady_straggler_is_not_given_back_on_a_low_swing() -> None:
    """Replica 0 x1.25 (its own lognormal sigma 0.15) on its split (11, 13), never
    recovering, the machine's load sigma 0.1. A give-back (``alike``, ``recovered``) says
    the replicas are alike: it now needs even within ``tolerance`` of the best at the
    slow replica's bound ``significance`` standard errors above its recent level, not at
    the level itself (4-8 steps that swung low passed), and a recovery seen only at the
    level waits for the next steps. False give-backs in 40 seeded runs of 40 steps: at
    most 3 (now 2; the code before: 6, with the spread estimators alone 4; seeds
    1000-1099: 13 -> 6 of 100)."""
    false = 0
    for seed in range(1000, 1040):
        rng = np.random.default_rng([seed, 31])
        f0 = 1.25 * np.exp(rng.normal(0.0, 0.15, 40))
        rb = Rebalancer(2, 12, window=10)
        rb.reset((11, 13), since=0)
        plans = _ratios(rb, f0, np.ones(40), seed, machine=0.1)
        false += any(why in ("alike", "recovered") for _, why in plans)
    assert false <= 3, false
