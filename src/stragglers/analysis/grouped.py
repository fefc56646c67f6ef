"""Sums of op rows by group (a stage, an op type), a row at a time.

``np.add.at`` adds element by element through a slow generic path (seconds for the
(k, dp, n_steps) rows of 16k workers); these add whole rows, in the same order and in
float64, so that the sums are bit for bit those of ``np.add.at(out, groups, rows)``.
"""

from __future__ import annotations

import numpy as np


def sum_rows(source: np.ndarray, rows: np.ndarray, groups: np.ndarray, n_groups: int
             ) -> np.ndarray:
    """``out[g]`` = the sum of ``source[rows[i]]`` over the i with ``groups[i] == g``
    (float64, added in the order of ``rows``): ``np.add.at(out, groups, source[rows])``
    without gathering the rows."""
    out = np.zeros((n_groups, *source.shape[1:]))
    for r, g in zip(rows.tolist(), groups.tolist(), strict=True):
        np.add(out[g], source[r], out=out[g])
    return out


def sum_by(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """``out[g]`` = the sum of ``values[i]`` over the i with ``groups[i] == g`` (float64, in
    index order): ``np.add.at(out, groups, values)``."""
    return sum_rows(values, np.arange(len(groups)), groups, n_groups)
