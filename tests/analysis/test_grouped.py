"""Row sums by group: bit for bit what ``np.add.at`` gives (float64 sums of float32 rows,
added in row order), without its element-by-element path."""

from __future__ import annotations

import numpy as np

from stragglers.analysis.grouped import sum_by, sum_rows


def test_sums_by_group_equal_add_at_bit_for_bit():
    rng = np.random.default_rng(0)
    values = (rng.random((50, 7, 9)) * 10 ** rng.uniform(-6, 3, (50, 1, 1))).astype(np.float32)
    groups = rng.integers(0, 4, 50)
    want = np.zeros((5, 7, 9))
    np.add.at(want, groups, values)
    got = sum_by(values, groups, 5)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)
    rows = rng.permutation(50)[:30]
    want = np.zeros((5, 7, 9))
    np.add.at(want, groups[:30], values[rows])
    np.testing.assert_array_equal(sum_rows(values, rows, groups[:30], 5), want)


def test_median_of_the_last_axis_equals_np_median():
    from stragglers.analysis.grouped import median_last

    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 44):
        x = rng.random((3, 5, n))
        x[0, 0] = 0.25  # ties
        np.testing.assert_array_equal(median_last(x), np.median(x, axis=-1))
    x = rng.random((2, 6))
    x[1, 2] = np.nan
    np.testing.assert_array_equal(median_last(x), np.median(x, axis=-1))  # NaN rows stay NaN
