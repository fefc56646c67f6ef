"""The record-stream corpus (stragglers.evaluation.jobcorpus): determinism and true labels."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.evaluation.jobcorpus import (
    EVENT_LOSS,
    FAMILIES,
    MIN_EVENT_ITERS,
    SAMPLE_STRIDES,
    SCENARIOS,
    JobSeries,
    generate_job_corpus,
    generate_series,
)


@pytest.fixture(scope="module")
def corpus() -> list[JobSeries]:
    return generate_job_corpus(7, scale=0.1)


def _same(a: JobSeries, b: JobSeries) -> bool:
    return (a.events == b.events and np.array_equal(a.iter, b.iter)
            and np.array_equal(a.rank, b.rank)
            and np.array_equal(a.duration, b.duration, equal_nan=True)
            and np.array_equal(a.ts, b.ts, equal_nan=True))


def test_deterministic_per_seed_and_different_across_seeds(corpus) -> None:
    again = generate_job_corpus(7, scale=0.1)
    assert [s.name for s in corpus] == [s.name for s in again]
    assert all(_same(a, b) for a, b in zip(corpus, again, strict=True))
    other = generate_job_corpus(8, scale=0.1)
    assert not any(_same(a, b) for a, b in zip(corpus, other, strict=True))
    # a series does not depend on how many series the scale asks for
    assert _same(generate_series(7, "greyhound", "injected", 0),
                 next(s for s in corpus if s.name == "greyhound/injected/000"))


def test_every_family_and_scenario_is_present(corpus) -> None:
    assert {s.family for s in corpus} == set(FAMILIES)
    assert {(s.family, s.scenario) for s in corpus} == {(f, s) for f, s, _, _ in SCENARIOS}
    assert len(generate_job_corpus(0, scale=1.0, families=("flapping",))) == 24
    assert sum(c for _, _, c, _ in SCENARIOS) in range(190, 211)


def test_records_are_well_formed(corpus) -> None:
    for s in corpus:
        n = s.iter.size
        assert s.rank.dtype == np.int64 and s.iter.dtype == np.int64
        assert s.ts.dtype == np.float64 and s.duration.dtype == np.float64
        assert s.rank.size == s.ts.size == s.duration.size == s.level.size == n
        assert np.all(np.isfinite(s.ts) | np.isfinite(s.duration))  # one of them at least
        ok = np.isfinite(s.duration)
        assert np.all(s.duration[ok] > 0)
        for r in range(s.ranks):  # per rank, timestamps never go back
            t = s.ts[s.rank == r]
            t = t[np.isfinite(t)]
            assert np.all(np.diff(t) > 0)
        scenario_positive = {(f, sc): p for f, sc, _, p in SCENARIOS}[(s.family, s.scenario)]
        assert s.positive == scenario_positive, s.name


def test_labels_are_true_by_construction(corpus) -> None:
    checked = 0
    for s in corpus:
        factor = s.level / s.healthy
        for e in s.events:
            assert e.end_iter - e.start_iter >= MIN_EVENT_ITERS
            assert (e.kind == "minor") == (e.loss < EVENT_LOSS)
            assert e.peak_loss >= e.loss - 1e-12
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            if e.ranks:
                inside &= np.isin(s.rank, e.ranks)
                assert not np.any(factor[~np.isin(s.rank, e.ranks)] > 1 + 1e-9)
            assert inside.any()
            level = 1.0 / (1.0 - e.loss)
            if e.kind in ("step", "injected", "minor") and not s.mean_of_stride:
                overlaps = [o for o in s.events if o is not e and o.start_iter < e.end_iter
                            and e.start_iter < o.end_iter]
                if not overlaps:  # the level inside over the noise-free healthy level
                    assert np.allclose(factor[inside], level), s.name
                    checked += 1
                else:
                    assert np.all(factor[inside] >= level - 1e-9)
            if e.kind == "flapping":
                assert np.isclose(factor[inside].max(), level)
                assert np.isclose(factor[inside].min(), 1.0)  # fast phases inside
        if not s.events:
            assert np.allclose(factor, 1.0), s.name
    assert checked >= 8


def test_restarts_replay_iterations(corpus) -> None:
    restarts = [s for s in corpus if s.family == "restart"]
    assert restarts and all(s.restarts >= 1 for s in restarts)
    for s in restarts:
        back = np.flatnonzero(np.diff(s.iter) <= 0)
        assert back.size >= 1
        # the iteration number goes back and the timestamp jumps forward by the downtime
        t = s.ts
        if np.isfinite(t).all():
            gaps = np.diff(t)[back]
            assert np.all(gaps >= 60.0)
        # labelled iterations are never replayed
        for e in s.events:
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            assert np.unique(s.iter[inside]).size == inside.sum()


def test_sampled_families_have_their_stride(corpus) -> None:
    sampled = [s for s in corpus if s.family == "sampled"]
    assert {s.mean_of_stride for s in sampled} == {True, False}
    for s in sampled:
        assert s.stride in SAMPLE_STRIDES
        assert np.all(s.iter % s.stride == 0)
        assert np.all(np.diff(s.iter) == s.stride)
        for e in s.events:
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            assert inside.sum() >= 3
    others = [s for s in corpus if s.family != "sampled"]
    assert all(s.stride == 1 and not s.mean_of_stride for s in others)


def test_multirank_one_slow_rank(corpus) -> None:
    multi = [s for s in corpus if s.family == "multirank"]
    assert all(2 <= s.ranks <= 4 for s in multi)
    one = [e for s in multi if s.scenario == "one_slow" for e in s.events]
    assert one and all(len(e.ranks) == 1 for e in one)
    for s in multi:  # interleaved by iteration: ranks alternate
        assert set(s.rank[:s.ranks].tolist()) == set(range(s.ranks))


def test_missing_records_and_minor_events_appear() -> None:
    big = generate_job_corpus(0, scale=0.5)
    assert sum(s.dropped > 0 for s in big) >= 10
    assert {s.family for s in big if s.dropped} >= {"greyhound", "multirank"}
    assert any(e.kind == "minor" for s in big for e in s.events)
    assert any(not s.positive and s.events for s in big)  # a negative with a minor event
    for s in big:  # records of labelled events are never dropped
        for e in s.events:
            for r in (e.ranks or range(s.ranks)):
                it = s.iter[(s.rank == r) & (s.iter >= e.start_iter) & (s.iter < e.end_iter)]
                if s.restarts == 0:
                    assert np.all(np.diff(it) == s.stride), s.name
