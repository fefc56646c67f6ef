"""The shared option types refuse NaN, infinity and values outside their range."""

from __future__ import annotations

import argparse

import pytest

from stragglers import options


@pytest.mark.parametrize("func,good,bad", [
    (options.finite_float, ["-1.5", "0", "1e300"], ["nan", "inf", "-inf", "x", ""]),
    (options.positive_float, ["1e-9", "3"], ["0", "-1", "nan", "inf"]),
    (options.non_negative_float, ["0", "2.5"], ["-1e-9", "nan", "-inf"]),
    (options.probability, ["0", "0.5", "1"], ["1.01", "-0.1", "nan"]),
    (options.factor, ["0.5", "2"], ["0", "-2", "inf"]),
    (options.slowdown_factor, ["1", "1.5"], ["0.99", "nan", "inf"]),
    (options.positive_int, ["1", "42"], ["0", "-3", "1.5", "1e3", "9" * 19]),
    (options.non_negative_int, ["0", "7"], ["-1", "x"]),
])
def test_ranges(func, good, bad):
    for text in good:
        func(text)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            func(text)


def test_composites_name_the_part():
    assert options.worker_factor("3,1:1.5") == (3, 1, 1.5)
    assert options.prob_seconds("0.2:1") == (0.2, 1.0)
    for func, text, needle in [
            (options.worker_factor, "0,0:nan", "factor in '0,0:nan'"),
            (options.worker_factor, "-1,0:2", "DP rank in '-1,0:2'"),
            (options.worker_factor, "0:2", "expected DP,STAGE:FACTOR"),
            (options.prob_seconds, "nan:1", "probability in 'nan:1'"),
            (options.prob_seconds, "0.5:-10", "seconds in '0.5:-10'"),
            (options.prob_seconds, "0.5", "expected PROB:SECONDS")]:
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            func(text)
        assert needle in str(exc.value)
