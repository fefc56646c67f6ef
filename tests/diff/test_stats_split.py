"""The significance test against the steps' spread, and the split of the workers' change
into what a stage shares, what a DP rank shares and each worker's own part (hand-built
inputs with known answers)."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.diff.compare import shared, split
from stragglers.diff.stats import shift, welch_p


def test_welch_against_a_hand_computed_value() -> None:
    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([3.0, 4.0, 5.0, 6.0, 7.0])
    # t = (5 - 2.5) / sqrt(1.6667/4 + 2.5/5) = 2.611; Welch df = 6.97 -> p = 0.0350
    assert welch_p(a, b) == pytest.approx(0.0350, abs=5e-4)


def test_no_spread_and_one_step() -> None:
    same = np.full(5, 2.0)
    assert welch_p(same, same) == 1.0
    assert welch_p(same, same + 0.1) == 0.0
    assert welch_p(np.array([2.0]), same) is None
    one = shift(np.array([2.0]), np.array([2.5]), alpha=0.01, floor=0.1)
    assert one.p_value is None and one.significant  # no test: the floor decides
    assert not shift(np.array([2.0]), np.array([2.05]), 0.01, 0.1).significant


def test_a_change_must_pass_the_test_and_the_floor() -> None:
    rng = np.random.default_rng(0)
    a = 2.0 + 0.01 * rng.standard_normal(50)
    tiny = shift(a, a + 0.01, alpha=0.01, floor=0.02)  # significant but below the floor
    assert tiny.p_value is not None and tiny.p_value < 0.01 and not tiny.significant
    noisy = shift(a, a[::-1] + 0.5 * rng.standard_normal(50), alpha=0.01, floor=0.02)
    assert not noisy.significant or abs(noisy.delta) >= 0.02
    big = shift(a, a + 0.1, alpha=0.01, floor=0.02)
    assert big.significant and big.delta == pytest.approx(0.1)
    assert big.relative == pytest.approx(0.1 / a.mean())


def test_shared_is_what_every_peer_has() -> None:
    x = np.array([[0.4, -0.1], [0.5, -0.2], [0.45, 0.3]])
    np.testing.assert_array_equal(shared(x, axis=0), [0.4, 0.0])
    np.testing.assert_array_equal(shared(-x[:, :1], axis=0), [-0.4])


def test_split_names_a_stage_a_dp_rank_and_a_worker() -> None:
    dp, pp = 4, 3
    change = np.zeros((dp, pp))
    change[:, 2] += 0.5     # the last stage on every DP rank
    change[1, :] += 0.2     # DP rank 1 on every stage
    change[3, 0] += 0.7     # one worker
    c_s, c_d, own = split(change)
    np.testing.assert_allclose(c_s, [0.0, 0.0, 0.5])
    np.testing.assert_allclose(c_d, [0.0, 0.2, 0.0, 0.0])
    expected = np.zeros((dp, pp))
    expected[3, 0] = 0.7
    np.testing.assert_allclose(own, expected, atol=1e-12)
    np.testing.assert_allclose(c_s[None, :] + c_d[:, None] + own, change)


def test_split_with_one_dp_rank_or_one_stage() -> None:
    c_s, c_d, own = split(np.array([[0.1, 0.6, 0.0]]))  # dp 1: a stage is its worker
    np.testing.assert_allclose(c_s, [0.1, 0.6, 0.0])
    assert not own.any() and not c_d.any()
    c_s, c_d, own = split(np.array([[0.3], [0.0], [0.0]]))  # pp 1: a DP rank is its worker
    assert not c_s.any() and not c_d.any()
    np.testing.assert_allclose(own[:, 0], [0.3, 0.0, 0.0])
