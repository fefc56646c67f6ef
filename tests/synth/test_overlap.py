"""Overlapping causes with a known answer by construction (issue 20): every pair of causes
that can overlap, in two strengths, and the truth measured by generating the job without
each cause (``stragglers.synth.overlap``; ``python bench/overlap_matrix.py`` prints the
matrix docs/benchmarks/verdict.md shows)."""

from __future__ import annotations

from functools import cache

import pytest

from stragglers.synth.overlap import BOUNDARY, CASES, OverlapRow, evaluate, matrix_markdown

PAIRS = {("sequence_length", "last_stage"), ("worker", "last_stage"), ("gc", "worker"),
         ("communication", "worker")}


@cache
def row(name: str) -> OverlapRow:
    return evaluate(next(c for c in CASES + BOUNDARY if c.name == name))


def test_every_pair_in_two_strengths_either_cause_dominating():
    assert {c.causes for c in CASES} == PAIRS
    for pair in PAIRS:
        strong = {c.strong for c in CASES if c.causes == pair}
        assert strong == set(pair), pair


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_the_verdict_names_the_cause_whose_removal_removes_more(name):
    r = row(name)
    t = r.truth
    # The truth is measured, and it is the cause the case was built to make dominant, by
    # both measures of the removal (S of each job, and step time over the full job's ideal).
    assert t.truth == t.case.strong and t.clear
    assert t.removed(t.truth) > t.removed(next(c for c in t.case.causes if c != t.truth))
    assert r.verdict == t.truth, r.evidence
    assert r.confidence >= 0.9


def test_both_causes_are_named_in_one_line_when_each_explains_most():
    r = row("last>worker")
    line = next(e for e in r.evidence if "each explain most of the slowdown" in e)
    assert line.endswith("the last stage (94% removed) and worker 1,3 (55%)")


def test_a_weaker_cause_whose_ops_alone_cause_more_is_not_named():
    """seq>last: the heavy last stage would cause 79% alone (add) and M_S removes 60%, but
    taking it out of the generator removes 14% of S (equal microbatches: 55%). The old rule
    (the larger of rem and add) named last_stage; M_last removes 37%."""
    r = row("seq>last")
    rem, add = r.shares["last_stage"]
    assert rem is not None and add is not None and add > r.shares["sequence_length"][0] > rem
    assert r.verdict == "sequence_length"


def test_the_boundary_case_has_no_answer_by_construction():
    t = row("seq~last").truth
    assert not t.clear  # by S: sequence length; by step time: the last stage


def test_the_matrix_is_printed():
    text = matrix_markdown([row(c.name) for c in CASES])
    assert "8/8 verdicts" in text and "| truth \\ verdict |" in text
