"""Numpy routines on the shapes of the analysis, bit for bit what the general ones give.

* sums of op rows by group (a stage, an op type), a row at a time: ``np.add.at`` adds
  element by element through a slow generic path (seconds for the (k, dp, n_steps) rows of
  16k workers); these add whole rows, in the same order and in float64, so that the sums
  are those of ``np.add.at(out, groups, rows)``;
* the median along the last (steps) axis by sorting each short row (numpy's vectorised
  sort), three times faster than ``np.median``'s partition on rows of tens of values.
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


def median_last(x: np.ndarray) -> np.ndarray:
    """``np.median(x, axis=-1)``: the middle value of each sorted row, or the mean of the two
    middle ones (as ``np.median`` takes them); ``np.median`` itself where a value is NaN."""
    n = x.shape[-1]
    if n == 0 or np.isnan(x).any():
        return np.asarray(np.median(x, axis=-1))
    s = np.sort(x, axis=-1)
    half = n // 2
    return np.asarray(np.mean(s[..., half - 1:half + 1] if n % 2 == 0 else s[..., half:half + 1],
                              axis=-1))
