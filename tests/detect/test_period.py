"""ACF period and iteration times from hand-made call sequences."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.detect.period import (
    CallEncoder,
    IterationTimes,
    PeriodTracker,
    acf,
    choose_anchor,
    find_motif,
    find_period,
    iteration_times,
)

# One iteration of a ZeRO-like job: RS, AG, AG, AR(loss) -> 4 calls, AG repeated.
MOTIF = [("reduce_scatter", 4096), ("allgather", 2048), ("allgather", 2048), ("allreduce", 8)]


def _sequence(iter_times: list[float], motif=MOTIF):
    """Calls of consecutive iterations; call j of an iteration starts at start + 0.1 * j * T."""
    enc = CallEncoder()
    ts, codes = [], []
    start = 100.0
    for t in iter_times:
        for j, call in enumerate(motif):
            ts.append(start + 0.1 * j * t)
            codes.append(enc.code(call))
        start += t
    return np.array(ts), np.array(codes)


def test_acf_is_one_exactly_at_the_period() -> None:
    codes = np.tile([0, 1, 1, 2], 50)
    a = acf(codes, 12)
    assert a[0] == pytest.approx(1.0)
    assert a[4] == pytest.approx(1.0) and a[8] == pytest.approx(1.0)
    assert np.all(a[[1, 2, 3, 5, 6, 7]] < 0.5)
    assert find_period(codes, 12) == 4
    assert find_period(np.tile([3, 1, 4, 1, 5, 9, 2], 30), 50) == 7
    assert find_period(np.full(40, 2), 10) == 1
    assert find_period(np.random.default_rng(0).integers(0, 5, 300), 100) is None


def test_acf_matches_the_definition() -> None:
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 4, 60)
    onehot = np.eye(4)[codes]
    mu = onehot.mean(axis=0)
    c = onehot - mu
    denom = (c * c).sum() / 60
    for k in range(1, 10):
        num = (c[:-k] * c[k:]).sum() / (60 - k)
        assert acf(codes, 9)[k] == pytest.approx(num / denom, abs=1e-12)


def test_motif_and_anchor() -> None:
    codes = np.r_[[7, 7], np.tile([0, 1, 1, 2], 5)]
    motif = find_motif(codes, 4)
    assert motif is not None and motif.tolist() == [0, 1, 1, 2]
    anchor = choose_anchor(motif)
    assert anchor == (0, 1)  # smallest rotation [0,1,1,2]; every bigram is unique
    assert choose_anchor(np.array([5, 5, 5, 6]), min_anchor=1) == (6,)
    # the bigram (0, 1) occurs twice in the cyclic motif [0,1,0,1,2]; (1, 0) is the first unique
    assert choose_anchor(np.array([0, 1, 0, 1, 2])) == (1, 0)
    assert choose_anchor(np.array([1, 2, 0, 1, 0])) == (1, 0)  # same motif, other phase
    assert choose_anchor(np.array([0, 0, 1, 0, 0, 1, 1]), min_anchor=1) == (1, 1)


def test_clean_sequence_gives_exact_iteration_times() -> None:
    times = [1.0] * 60 + [1.5] * 60
    ts, codes = _sequence(times)
    its = iteration_times(ts, codes, window=64)
    per = its.per_iteration()
    assert per.size == 119
    np.testing.assert_allclose(per, times[:-1], atol=1e-9)
    assert set(its.period.tolist()) == {4}


def test_dropped_and_inserted_calls() -> None:
    times = [1.0] * 50 + [2.0] * 50
    ts, codes = _sequence(times)
    # drop the 1st call of iteration 20 (inside the anchor), drop a non-anchor call of iteration
    # 70, insert a stray call in iteration 40 and an extra anchor-like call in iteration 80
    drop = [20 * 4, 70 * 4 + 2]
    ts2, codes2 = np.delete(ts, drop), np.delete(codes, drop)
    pos = 40 * 4 - 1 + 2
    ts2 = np.insert(ts2, pos, ts2[pos - 1] + 0.01)
    codes2 = np.insert(codes2, pos, 9)
    its = iteration_times(ts2, codes2, window=64)
    per = its.per_iteration()
    assert per.size == 99
    np.testing.assert_allclose(per, times[:-1], atol=1e-9)
    assert its.n_iters.tolist().count(2) == 1  # the hidden anchor of iteration 20


def test_spurious_anchor_is_ignored() -> None:
    motif8 = [*MOTIF, ("send", 64), ("recv", 64), ("send", 64), ("recv", 64)]
    times = [1.0] * 40
    ts, codes = _sequence(times, motif8)
    # a stray (reduce_scatter, allgather) pair just after an anchor recreates the anchor bigram
    pos = 10 * 8 + 2
    ts2 = np.insert(ts, pos, [ts[pos - 1] + 0.01, ts[pos - 1] + 0.02])
    codes2 = np.insert(codes, pos, [0, 1])
    per = iteration_times(ts2, codes2, window=64).per_iteration()
    assert per.size == 39
    np.testing.assert_allclose(per, 1.0, atol=1e-9)


def test_period_change_after_repartition() -> None:
    ts1, c1 = _sequence([1.0] * 100)
    new_motif = [("allreduce", 8), ("send", 64), ("recv", 64), ("send", 64), ("recv", 64),
                 ("allgather", 4096)]
    enc = CallEncoder()
    for call in MOTIF:
        enc.code(call)
    start = ts1[-1] + 1.0 - 0.3
    ts2, c2 = [], []
    for _ in range(80):
        for j, call in enumerate(new_motif):
            ts2.append(start + 0.05 * j)
            c2.append(enc.code(call))
        start += 2.5
    ts = np.r_[ts1, ts2]
    codes = np.r_[c1, c2]
    its = iteration_times(ts, codes, window=96)
    per = its.per_iteration()
    assert set(its.period.tolist()) == {4, 6}
    assert np.sum(np.isclose(per, 1.0)) == 99
    assert np.sum(np.isclose(per, 2.5)) == 79
    assert per.size == 99 + 79  # only the iteration that straddles the change is lost


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_streaming_equals_batch(chunk: int) -> None:
    times = list(np.random.default_rng(4).uniform(0.9, 1.1, 150))
    ts, codes = _sequence(times)
    codes = np.delete(codes, [33, 301])
    ts = np.delete(ts, [33, 301])
    batch = iteration_times(ts, codes, window=64)
    tr = PeriodTracker(window=64)
    parts = [tr.feed(ts[i : i + chunk], codes[i : i + chunk]) for i in range(0, ts.size, chunk)]
    stream = IterationTimes.concat(parts)
    np.testing.assert_array_equal(stream.end_ts, batch.end_ts)
    np.testing.assert_array_equal(stream.duration, batch.duration)
    np.testing.assert_array_equal(stream.n_iters, batch.n_iters)


def test_tracker_validation() -> None:
    with pytest.raises(ValueError, match="window"):
        PeriodTracker(window=2)
    with pytest.raises(ValueError, match="same length"):
        PeriodTracker().feed([1.0, 2.0], [1])
