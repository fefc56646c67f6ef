"""Ring and tree validation passes for sizes 2-9: coverage and disjointness."""

from __future__ import annotations

import pytest

from stragglers.validate.plan import (
    check_plan,
    ring_edges,
    ring_passes,
    tree_edges,
    tree_passes,
)


@pytest.mark.parametrize("n", range(2, 10))
def test_ring(n: int) -> None:
    passes = ring_passes(n)
    assert len(passes) == (2 if n % 2 == 0 else 3)
    assert check_plan(passes, ring_edges(n)) == []
    assert sum(len(p) for p in passes) == n
    both = ring_passes(n, bidirectional=True)
    assert check_plan(both, ring_edges(n) + [(b, a) for a, b in ring_edges(n)]) == []


@pytest.mark.parametrize("n", range(2, 10))
def test_tree(n: int) -> None:
    passes = tree_passes(n)
    assert len(passes) == 4
    assert check_plan(passes, tree_edges(n)) == []
    assert sum(len(p) for p in passes) == n - 1
    both = tree_passes(n, bidirectional=True)
    assert check_plan(both, tree_edges(n) + [(b, a) for a, b in tree_edges(n)]) == []


def test_exact_small_plans() -> None:
    assert ring_passes(4) == [[(0, 1), (2, 3)], [(1, 2), (3, 0)]]
    assert ring_passes(5) == [[(0, 1), (2, 3)], [(1, 2), (3, 4)], [(4, 0)]]
    assert ring_passes([10, 20]) == [[(10, 20)], [(20, 10)]]
    # heap layout: 0 root; 1,2 depth 1; 3..6 depth 2; 7,8 depth 3
    assert tree_passes(9) == [[(3, 1), (5, 2)], [(4, 1), (6, 2)], [(1, 0), (7, 3)],
                              [(2, 0), (8, 3)]]


def test_check_plan_catches_bad_plans() -> None:
    edges = ring_edges(4)
    assert check_plan([[(0, 1), (1, 2)], [(2, 3), (3, 0)]], edges) == [
        "pass 1: ranks [1] are in more than one transfer",
        "pass 2: ranks [3] are in more than one transfer",
    ]
    problems = check_plan([[(0, 1), (2, 3)], [(1, 2)]], edges)
    assert problems == ["edge 3->0: covered 0 times, required 1"]
    assert check_plan([[(0, 1), (2, 3)], [(1, 2), (3, 0)], [(0, 1)]], edges) == [
        "edge 0->1: covered 2 times, required 1"]
    with pytest.raises(ValueError, match="at least 2"):
        ring_passes(1)
    with pytest.raises(ValueError, match="distinct"):
        tree_passes([1, 1, 2])
