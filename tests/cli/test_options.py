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
    (options.nice_increment, ["0", "10", "19"], ["-1", "20", "x"]),
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


def test_range_factories_name_the_range():
    poll = options.finite_range(0, inclusive=False, high=3600)
    assert poll("0.5") == 0.5 and poll("3600") == 3600.0
    window = options.int_range(4)
    jobs = options.int_range(1, 256)
    assert window("4") == 4 and jobs("256") == 256
    for func, text, needle in [
            (poll, "nan", "expected a finite number > 0 and <= 3600, got 'nan'"),
            (poll, "0", "expected a finite number > 0 and <= 3600"),
            (poll, "3601", "expected a finite number > 0 and <= 3600"),
            (options.finite_range(1.0), "-1", "expected a finite number >= 1, got '-1'"),
            (poll, "x", "expected a number, got 'x'"),
            (window, "2", "expected an integer >= 4, got '2'"),
            (jobs, "100000", "expected an integer >= 1 and <= 256"),
            (jobs, "1.5", "expected an integer, got '1.5'")]:
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            func(text)
        assert needle in str(exc.value)


def test_more_composites():
    assert options.rank_value("2:50") == (2, 50.0)
    assert options.rank_factor("1:1.5") == (1, 1.5)
    assert options.span("16-1024") == (16, 1024)
    assert options.key_value("run=a=b") == ("run", "a=b")
    assert options.slowdown_factors("1.2, 2,") == [1.2, 2.0]
    assert options.port("0") == 0 and options.port("65535") == 65535
    assert options.rank_list("1, 6,,-1") == [1, 6, -1]  # which ranks exist: the job's to say
    assert options.rank_list("") == [] and options.rank_pair("2,3") == (2, 3)
    assert options.cost_coefficients("1e-8,2e-5,0.005") == (1e-8, 2e-5, 0.005)
    for func, text, needle in [
            (options.rank_value, "-1:5", "rank in '-1:5'"),
            (options.rank_value, "1:0", "value in '1:0'"),
            (options.rank_factor, "1:0.5", "factor in '1:0.5'"),
            (options.rank_factor, "1", "expected RANK:FACTOR"),
            (options.span, "16", "expected MIN-MAX (integers)"),
            (options.span, "a-4", "MIN in 'a-4'"),
            (options.key_value, "=x", "expected KEY=VALUE"),
            (options.slowdown_factors, ",", "no factor given"),
            (options.slowdown_factors, "1.2,0.5", "expected factors >= 1 like 1.2,1.5,2.0"),
            (options.port, "65536", "expected a port 0-65535"),
            (options.rank_list, "1,x", "rank 2 'x' is not an integer"),
            (options.rank_pair, "1", "expected two ranks A,B, got 1"),
            (options.rank_pair, "1,2,3", "expected two ranks A,B, got 3"),
            (options.cost_coefficients, "0,1", "expected A,B,C (three numbers), got '0,1'"),
            (options.cost_coefficients, "1,x,0", "b 'x' is not a number"),
            (options.cost_coefficients, "1,1,nan", "c must be a finite number >= 0"),
            (options.cost_coefficients, "0,0,1", "a and b are both 0")]:
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            func(text)
        assert needle in str(exc.value)
