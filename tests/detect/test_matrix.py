"""C4D delay matrix classification and late senders."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.detect.matrix import classify_matrix, delay_matrix, late_senders


def _messages(n: int, slow=lambda s, d: 1.0, seed: int = 0):
    rng = np.random.default_rng(seed)
    src, dst, lat = [], [], []
    for s in range(n):
        for d in range(n):
            if s == d:
                continue
            for _ in range(5):
                src.append(s)
                dst.append(d)
                lat.append(10e-6 * slow(s, d) * rng.uniform(0.97, 1.03))
    return src, dst, lat


def _kinds(findings):
    return sorted((f.kind, f.src, f.dst) for f in findings)


def test_matrix_is_the_median_per_connection() -> None:
    m = delay_matrix([0, 0, 0, 1], [1, 1, 1, 0], [1.0, 5.0, 2.0, 3.0], n_ranks=3)
    assert m[0, 1] == 2.0 and m[1, 0] == 3.0
    assert np.isnan(m[2]).all() and np.isnan(m[0, 0])
    m2 = delay_matrix([0, 0], [1, 1], [1.0, 2.0])
    assert m2.shape == (2, 2) and m2[0, 1] == 1.5
    with pytest.raises(ValueError, match="out of range"):
        delay_matrix([0], [5], [1.0], n_ranks=3)


@pytest.mark.parametrize(
    ("slow", "expected"),
    [
        (lambda s, d: 3.0 if s == 3 else 1.0, [("source", 3, None)]),
        (lambda s, d: 2.5 if d == 5 else 1.0, [("destination", None, 5)]),
        (lambda s, d: 4.0 if (s, d) == (2, 6) else 1.0, [("connection", 2, 6)]),
        (lambda s, d: 3.0 if s == 1 or (s, d) == (4, 7) else 1.0,
         [("connection", 4, 7), ("source", 1, None)]),
        (lambda s, d: 1.0, []),
    ],
)
def test_bad_row_column_cell(slow, expected) -> None:
    m = delay_matrix(*_messages(8, slow))
    assert _kinds(classify_matrix(m)) == expected


def test_late_sender_in_a_ring() -> None:
    n = 8
    src = [i for i in range(n) for _ in range(10)]
    dst = [(i + 1) % n for i in range(n) for _ in range(10)]
    wait = [0.050 if s == 6 else 0.001 for s in src]
    found = late_senders(src, dst, wait)
    assert [(f.sender, f.receivers) for f in found] == [(6, (7,))]
    assert found[0].ratio == pytest.approx(50.0)
    assert late_senders(src, dst, [0.001] * len(src)) == []
