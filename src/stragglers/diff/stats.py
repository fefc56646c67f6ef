"""Is a change larger than the steps' own spread? Welch's two-sample t-test on per-step
values (the two runs may have different step counts: their distributions are compared, not
step ids), and a floor below which a difference is too small to matter whatever the test
says.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

#: Relative variance below which a side's steps count as identical (a noiseless synthetic
#: job): the test cannot run, and any difference of the means beyond the floor is real.
_NO_SPREAD = 1e-24


@dataclass(frozen=True)
class Shift:
    """Mean of A, mean of B and their difference (B − A); ``p_value``: Welch's two-sided
    p-value (None where a side has one step: no spread to test against); ``significant``:
    ``p_value < alpha`` (or no test possible) and ``|delta| >= floor``."""

    a: float
    b: float
    p_value: float | None
    significant: bool

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def relative(self) -> float | None:
        """The change relative to A (None where A is 0)."""
        return None if self.a == 0 else self.delta / abs(self.a)


def welch_p(xa: np.ndarray, xb: np.ndarray) -> float | None:
    """Two-sided p-value of Welch's t-test of equal means; None with fewer than two values
    on a side; 0 or 1 where neither side varies (the means differ or not)."""
    na, nb = xa.shape[0], xb.shape[0]
    if na < 2 or nb < 2:
        return None
    ma, mb = float(xa.mean()), float(xb.mean())
    va, vb = float(xa.var(ddof=1)), float(xb.var(ddof=1))
    scale = max(ma * ma, mb * mb, 1e-300)
    if va / scale <= _NO_SPREAD and vb / scale <= _NO_SPREAD:
        return 1.0 if abs(mb - ma) <= 1e-9 * max(abs(ma), abs(mb), 1e-300) else 0.0
    from scipy import stats

    with warnings.catch_warnings():  # nearly identical values: the floor decides anyway
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_ind(xb, xa, equal_var=False).pvalue)
    return p if math.isfinite(p) else (1.0 if abs(mb - ma) <= 0 else 0.0)


def shift(xa: np.ndarray, xb: np.ndarray, alpha: float, floor: float) -> Shift:
    """The change of a per-step quantity from ``xa`` to ``xb``: significant when Welch's test
    rejects equal means at ``alpha`` (or cannot run: one step) and the means differ by at
    least ``floor``."""
    a, b = float(np.mean(xa)), float(np.mean(xb))
    p = welch_p(np.asarray(xa, dtype=float), np.asarray(xb, dtype=float))
    big = abs(b - a) >= floor
    return Shift(a=a, b=b, p_value=p, significant=bool(big and (p is None or p < alpha)))
