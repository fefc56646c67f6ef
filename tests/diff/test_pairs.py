"""Pairs of synthetic jobs whose change is known by construction: ``diff`` names the injected
change first (issue 32, item 3), and says "no change" on healthy runs of one job."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from stragglers.diff import Kind, Level, compare
from tests.diff.helpers import side


def first(a_kw: dict, b_kw: dict):
    diff = compare(side(**a_kw), side(**b_kw))
    assert diff.changed and diff.changes, diff.conclusion
    return diff, diff.changes[0]


def test_a_slow_worker_appears() -> None:
    diff, c = first({"seed": 0}, {"seed": 1, "slow_workers": [(1, 2, 1.5)]})
    assert (c.level, c.key, c.kind) == (Level.WORKER, "1,2", Kind.APPEARS)
    assert c.explained > 0.3  # a 1.5x worker of a ~2.1 s step
    assert diff.conclusion.endswith(c.text) and "new straggler" in c.text
    assert [s.key for s in diff.stragglers.new] == ["1,2"] and not diff.stragglers.gone
    # the worker's own part, not its stage or DP rank, carries the change
    row = next(r for r in diff.workers if r.key == "1,2")
    assert row.explained == pytest.approx(row.delta, rel=0.05)
    assert all(abs(r.explained) < diff.floor for r in diff.stages + diff.dp_ranks)


def test_a_slow_worker_goes() -> None:
    diff, c = first({"seed": 1, "slow_workers": [(1, 2, 1.5)]}, {"seed": 0})
    assert (c.level, c.key, c.kind) == (Level.WORKER, "1,2", Kind.GOES)
    assert c.explained < -0.3
    assert [s.key for s in diff.stragglers.gone] == ["1,2"] and not diff.stragglers.new


def test_a_slow_worker_moves() -> None:
    diff, c = first({"seed": 1, "slow_workers": [(0, 3, 1.5)]},
                    {"seed": 2, "slow_workers": [(1, 2, 1.5)]})
    assert (c.level, c.key, c.kind, c.moved_from) == (Level.WORKER, "1,2", Kind.MOVES, "0,3")
    assert c.explained > 0.3 and c.explained_gone is not None and c.explained_gone < -0.3
    assert [(x.key, y.key) for x, y in diff.stragglers.moved] == [("0,3", "1,2")]
    # the step time hardly moved: the move, not the step time, is the news
    assert abs(diff.figure("step_time").delta or 0) < 0.2


def test_a_heavier_last_stage() -> None:
    diff, c = first({"seed": 0}, {"seed": 1, "heavy_last_stage": 1.4})
    assert (c.level, c.key, c.kind) == (Level.STAGE, "3", Kind.APPEARS)
    assert "the last stage, every DP rank" in c.text
    # every worker of the stage changed alike: no worker is named on its own
    assert not [x for x in diff.changes if x.level == Level.WORKER]


def test_gc_added() -> None:
    diff, c = first({"seed": 0}, {"seed": 1, "gc_prob": 0.1, "gc_pause": 0.3})
    assert (c.level, c.key, c.kind) == (Level.OPTYPE, "gc", Kind.GROWS)
    row = next(r for r in diff.optypes if r.key == "gc")
    assert row.mean_op is not None and row.mean_op.a == 0 and row.mean_op.b > 0.01


def test_a_slow_data_loader_added() -> None:
    diff, c = first({"seed": 0}, {"seed": 1, "slow_loaders": [(2, 1.5, 1.0)]})
    assert (c.level, c.key, c.kind) == (Level.HOST, "worker 2,0", Kind.APPEARS)
    assert c.explained == pytest.approx(1.5, rel=0.05)
    assert "before the step's first op" in c.text
    host = diff.figure("host_time")
    assert host.significant and not diff.figure("straggling").significant
    assert len(diff.changes) == 1  # nothing else moved


def test_a_slow_worker_without_exact_s_w_is_where_its_dp_rank_and_stage_meet() -> None:
    diff = compare(side(seed=0, exact=False), side(seed=1, slow_workers=[(1, 2, 1.5)]))
    c = diff.changes[0]
    assert (c.level, c.key, c.kind) == (Level.WORKER, "1,2", Kind.APPEARS)
    assert "S_w is not compared" in c.text and not diff.workers
    assert ("workers", "A's S_w is the min(S_dp, S_stage) approximation (analysed with "
                       "--no-exact)") in diff.layout.not_compared


@pytest.mark.parametrize("layout", [{}, {"dp": 2, "pp": 4, "steps": 8},
                                    {"dp": 8, "pp": 2, "steps": 6, "jitter": 0.05},
                                    {"dp": 1, "pp": 4, "jitter": 0.05},
                                    {"dp": 4, "pp": 1, "jitter": 0.1}])
def test_healthy_runs_of_one_job_with_different_seeds_are_no_change(layout: dict) -> None:
    for s1, s2 in itertools.combinations(range(3), 2):
        diff = compare(side(seed=s1, **layout), side(seed=s2, **layout))
        assert not diff.changed, diff.conclusion
        assert diff.changes == () and diff.conclusion.startswith("no change")


#: The noise study the guide quotes: six layouts, 2-10% noise per op, 6-20 steps.
NOISE_LAYOUTS = [(2, 4, 8, 0.02), (4, 4, 12, 0.05), (8, 2, 6, 0.05), (2, 2, 20, 0.1),
                 (1, 4, 10, 0.05), (4, 1, 10, 0.05)]


def test_no_change_on_90_pairs_of_healthy_runs() -> None:
    """docs/guides/diff.md: "Over 90 pairs of healthy synthetic runs ... none was reported
    as a change at the default settings"."""
    pairs = 0
    for dp, pp, steps, jitter in NOISE_LAYOUTS:
        runs = [side(dp=dp, pp=pp, steps=steps, jitter=jitter, seed=s) for s in range(6)]
        for x, y in itertools.combinations(runs, 2):
            diff = compare(x, y)
            assert not diff.changed, (dp, pp, steps, jitter, diff.conclusion)
            pairs += 1
    assert pairs == 90


def test_a_run_against_itself_is_no_change() -> None:
    a = side(seed=1, slow_workers=[(1, 2, 1.5)])
    diff = compare(a, a)
    assert not diff.changed and diff.figure("step_time").test.p_value == 1.0


def test_a_noiseless_job_keeps_its_change() -> None:
    """No spread at all (no jitter): the test cannot run; the floor alone decides."""
    a, b = side(seed=0, jitter=0.0), side(seed=0, jitter=0.0, slow_workers=[(2, 1, 1.3)])
    diff = compare(a, b)
    assert (diff.changes[0].level, diff.changes[0].key) == (Level.WORKER, "2,1")
    assert not compare(a, side(seed=5, jitter=0.0)).changed


# -- layouts that differ ------------------------------------------------------------------
def test_dp_differs_compares_stages_not_workers() -> None:
    diff = compare(side(seed=0, dp=2), side(seed=1, slow_workers=[(3, 1, 1.5)]))
    assert diff.layout.differences == (("dp_size", "2", "4"),)
    skipped = dict(diff.layout.not_compared)
    assert "dp_ranks" in skipped and "workers" in skipped
    assert not diff.workers and not diff.dp_ranks and diff.stages
    c = diff.changes[0]
    assert (c.level, c.key) == (Level.STAGE, "1")  # the most specific place compared
    assert not diff.stragglers.compared and [s.key for s in diff.stragglers.b] == ["3,1"]


def test_pp_differs_compares_op_types_only() -> None:
    diff = compare(side(seed=0, dp=2, pp=4), side(seed=1, dp=2, pp=2, gc_prob=0.4))
    assert ("pp_size", "4", "2") in diff.layout.differences
    assert {w for w, _ in diff.layout.not_compared} >= {"stages", "workers"}
    assert not diff.stages and not diff.workers and diff.dp_ranks
    # the work per step changed with the layout, and GC was added: both are named
    kinds = [(c.level, c.key) for c in diff.changes]
    assert (Level.WORK, "") in kinds and (Level.OPTYPE, "gc") in kinds


def test_step_counts_differ_compare_distributions() -> None:
    diff = compare(side(seed=0, steps=8), side(seed=1, steps=20, slow_workers=[(1, 1, 1.4)]))
    assert diff.layout.same and any("8 steps, B 20" in n for n in diff.layout.notes)
    c = diff.changes[0]
    assert (c.level, c.key, c.kind) == (Level.WORKER, "1,1", Kind.APPEARS)
    assert not compare(side(seed=0, steps=8), side(seed=1, steps=20)).changed


def test_an_op_type_in_one_side_only_is_said_and_compared_with_no_excess() -> None:
    a = side(seed=0)
    blame = a.blame
    b = dataclasses.replace(side(seed=1), blame=dataclasses.replace(
        side(seed=1).blame, optype={k: x for k, x in side(seed=1).blame.optype.items()
                                   if k != "gc"}))
    diff = compare(a, b)
    assert "op type gc only in A" in diff.layout.notes
    row = next(r for r in diff.optypes if r.key == "gc")
    assert row.s_a == blame.optype["gc"] and row.s_b is None and row.excess_b == 0.0
    assert not diff.changed


def test_a_step_time_change_that_no_part_explains_alone_is_said() -> None:
    """B's work and straggling each grew by 0.6% of the step time (below the 1% floor), the
    step time by 1.2%: changed, but nothing is named."""
    a = side(seed=0)
    grow = 0.006 * float(a.actual.mean())
    b = dataclasses.replace(a, ideal=a.ideal + grow, nodelay=a.nodelay + 2 * grow,
                            actual=a.actual + 2 * grow)
    diff = compare(a, b)
    assert diff.changed and diff.changes == ()
    assert diff.figure("step_time").significant
    assert not diff.figure("ideal_step_time").significant
    assert not diff.figure("straggling").significant
    assert diff.conclusion.startswith("step time 2.144 s -> 2.169 s (+1.2%), beyond the "
                                      "steps' spread, but no part of it")
