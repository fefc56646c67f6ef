"""Sequence-length rebalancing: the cost model fitted from a trace, greedy partitioning."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stragglers.errors import InputError
from stragglers.mitigate.seqlen import (
    CostModel,
    fit_cost_model,
    in_order,
    microbatch_compute,
    rebalance,
)
from stragglers.synth import SynthSpec
from stragglers.synth.generator import generate
from stragglers.trace import schema

LINEAR = CostModel(a=0.0, b=1.0, c=0.0)


def test_fit_recovers_injected_model() -> None:
    # a synthetic job without noise; on stage 1 each micro-batch's forward + backward compute
    # is rescaled to a known a sum L^2 + b sum L + c of lengths drawn per micro-batch
    trace, _, _ = generate(SynthSpec(dp=2, pp=2, microbatches=6, steps=4, seed=2))
    rng = np.random.default_rng(5)
    lengths = {key: rng.integers(64, 4096, size=rng.integers(1, 5))
               for key in itertools.product(range(4), range(2), range(6))}
    a, b, c = 2e-8, 3e-5, 0.01
    compute = np.isin(trace.optype, [schema.OPTYPE_CODE[t] for t in schema.COMPUTE_TYPES])
    for i in np.flatnonzero(compute & (trace.stage == 1)):
        ls = lengths[(int(trace.step[i]), int(trace.dp_rank[i]), int(trace.mb_id[i]))]
        share = trace.duration[i] / 0.18  # forward 0.06 + backward 0.12 per micro-batch
        trace.duration[i] = share * (a * np.sum(ls**2.0) + b * np.sum(ls) + c)
    keys, durations = microbatch_compute(trace, stage=1)
    assert keys.shape == (4 * 2 * 6, 3)
    ls = [lengths[tuple(k)] for k in keys.tolist()]
    model = fit_cost_model([np.sum(x**2.0) for x in ls], [np.sum(x) for x in ls], durations)
    assert model.a == pytest.approx(a, rel=1e-4) and model.b == pytest.approx(b, rel=1e-3)
    assert model.c == pytest.approx(c, rel=1e-3) and model.r2 > 0.9999
    with pytest.raises(InputError, match="no compute ops on stage 5"):
        microbatch_compute(trace, stage=5)
    with pytest.raises(InputError, match="collinear"):
        fit_cost_model([4.0] * 4, [2.0] * 4, [1.0, 1.1, 0.9, 1.0])  # every mb alike


def test_known_greedy_answer() -> None:
    part = rebalance([8, 7, 6, 5, 4], LINEAR, dp=2, microbatches=1)
    # largest first: 8 -> 0, 7 -> 1, 6 -> 1 (13), 5 -> 0 (13), 4 -> 0 (the lower on a tie)
    assert [sorted(b[0].tolist()) for b in part.batches] == [[0, 3, 4], [1, 2]]
    assert part.rank_cost.tolist() == [17.0, 13.0]


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(1, 50), min_size=1, max_size=8), bins=st.integers(2, 3))
def test_greedy_within_graham_bound(lengths: list[int], bins: int) -> None:
    """LPT is within (4/3 - 1/(3m)) of the optimal makespan (Graham 1969): brute force."""
    part = rebalance(lengths, LINEAR, dp=bins, microbatches=1)
    best = min(max(sum(x for x, g in zip(lengths, assign, strict=True) if g == b)
                   for b in range(bins))
               for assign in itertools.product(range(bins), repeat=len(lengths)))
    assert part.makespan <= (4 / 3 - 1 / (3 * bins)) * best + 1e-9
    used = np.sort(np.concatenate([m for r in part.batches for m in r]))
    assert used.tolist() == list(range(len(lengths)))  # each sequence exactly once


def test_long_tail_balanced_and_budget() -> None:
    rng = np.random.default_rng(0)
    lengths = np.minimum(np.ceil(rng.lognormal(6.5, 1.0, 512)), 32768)
    model = CostModel(a=1e-8, b=2e-5, c=0.005)
    base = in_order(lengths, model, dp=8, microbatches=8)
    part = rebalance(lengths, model, dp=8, microbatches=8)
    assert part.makespan < base.makespan
    # near the average load: the greedy rule leaves less than the largest sequence of slack
    assert part.makespan - part.rank_cost.mean() <= model.sequence_cost(lengths).max()
    # within a rank, micro-batches as even as the greedy rule makes them
    assert np.all(part.microbatch_cost.max(axis=1) - part.microbatch_cost.min(axis=1)
                  <= model.sequence_cost(lengths).max() + 1e-12)
    budget = 16_000.0  # the longest sequence has 14,272 tokens
    capped = rebalance(lengths, model, dp=8, microbatches=8, max_tokens=budget)
    tokens = [[lengths[m].sum() for m in r] for r in capped.batches]
    assert np.max(tokens) <= budget
    with pytest.raises(InputError, match="fits in no micro-batch"):
        rebalance(lengths, model, dp=8, microbatches=8, max_tokens=100.0)
    with pytest.raises(InputError, match="finite number > 0"):
        rebalance([1.0, float("nan")], model, dp=2, microbatches=1)


def test_fit_cost_cli_from_written_trace(tmp_path, monkeypatch, capsys) -> None:
    """A job written with micro-batch computes set by known lengths and a, b, c; the lengths
    file lists all but one micro-batch, plus one the trace does not have."""
    import json

    from stragglers.cli import main
    from stragglers.synth import generator, write_synth

    a, b, c = 3e-8, 2e-5, 0.004
    rng = np.random.default_rng(7)
    lengths = {k: rng.integers(100, 5000, size=rng.integers(1, 4))
               for k in itertools.product(range(3), range(2), range(4))}
    cost = np.zeros((3, 2, 4))
    for (s, d, m), ls in lengths.items():
        cost[s, d, m] = a * np.sum(ls**2.0) + b * np.sum(ls) + c
    plain = generator._values

    def with_costs(spec, table, rng):  # computes of stage 1 take the micro-batch's cost
        val, gc_time = plain(spec, table, rng)  # (values, recorded GC seconds)
        compute = np.isin(table.node_optype,
                          [schema.OPTYPE_CODE[t] for t in schema.COMPUTE_TYPES])
        idx = np.flatnonzero(compute & (table.node_stage == 1))
        share = val[idx] / 0.18  # forward 0.06 + backward 0.12 of a micro-batch
        val[idx] = share * cost[:, :, table.node_mb[idx]].transpose(2, 1, 0)
        return val, gc_time

    monkeypatch.setattr(generator, "_values", with_costs)
    paths = write_synth(SynthSpec(dp=2, pp=2, microbatches=4, steps=3, seed=1), tmp_path / "j")
    rows = [{"step": s, "dp_rank": d, "mb": m, "lengths": ls.tolist()}
            for (s, d, m), ls in lengths.items() if (s, d, m) != (0, 0, 0)]
    rows.append({"step": 9, "dp_rank": 0, "mb": 0, "lengths": [5]})
    lfile = tmp_path / "lengths.jsonl"
    lfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["mitigate", "fit-cost", str(paths["trace"]), "--lengths", str(lfile),
                 "--stage", "1", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["a"] == pytest.approx(a, rel=1e-3) and fit["b"] == pytest.approx(b, rel=1e-3)
    assert fit["c"] == pytest.approx(c, rel=1e-2) and fit["r2"] > 0.9999
    assert (fit["microbatches"], fit["trace_only"], fit["lengths_only"]) == (23, 1, 1)
    lfile.write_text('{"step": 0, "dp_rank": 0, "mb": 0, "lengths": [3]}\n'
                     '{"step": 0, "dp_rank": 0, "mb": 0, "lengths": [4]}\n')
    assert main(["mitigate", "fit-cost", str(paths["trace"]), "--lengths", str(lfile)]) == 2
    assert "lengths.jsonl:2: step 0, dp_rank 0, mb 0 already given on line 1" in \
        capsys.readouterr().err
    lfile.write_text('{"step": 0, "dp_rank": 0, "mb": 0, "lengths": [3, 0]}\n')
    assert main(["mitigate", "fit-cost", str(paths["trace"]), "--lengths", str(lfile)]) == 2
    assert "field 'lengths[1]': expected an integer >= 1" in capsys.readouterr().err


def test_rebalance_cli(capsys) -> None:
    import json

    from stragglers.cli import main

    argv = ["mitigate", "rebalance", "--lengths", "8,7,6,5,4", "--model", "0,1,0", "--dp",
            "2", "--microbatches", "1"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["makespan"] == 17.0 and out["in_order_makespan"] == 21.0  # 8+7+6 | 5+4
    assert out["batches"] == [[[0, 3, 4]], [[1, 2]]]
    for bad, needle in ((["--model", "1,x,0"], "--model: b 'x' is not a number"),
                        (["--model", "0,0,1"], "a and b are both 0"),
                        (["--lengths", "3,-1"], "--lengths: length 2 '-1' must be")):
        args = list(argv)
        i = args.index(bad[0])
        args[i + 1] = bad[1]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err


def test_fit_keeps_coefficients_non_negative() -> None:
    # Times linear in tokens (a = 0, c = 0.05) with a dip on the longest micro-batch: the
    # unconstrained fit bends a below 0; the fit must stay at a >= 0 and give the best such fit.
    sum_len = np.array([100.0, 200, 300, 400, 500, 600])
    sum_sq = sum_len**2 / 2
    durations = 0.05 + 0.001 * sum_len
    durations[-1] -= 0.08
    x = np.column_stack([sum_sq, sum_len, np.ones(6)])
    free = np.linalg.lstsq(x, durations, rcond=None)[0]
    assert free[0] < 0  # the premise: unconstrained, the quadratic term is negative
    model = fit_cost_model(sum_sq, sum_len, durations)
    assert min(model.a, model.b, model.c) >= 0
    # optimal among non-negative fits: here a = 0 and (b, c) is the plain line fit
    line = np.linalg.lstsq(x[:, 1:], durations, rcond=None)[0]
    assert model.a == 0 and (model.b, model.c) == pytest.approx(tuple(line), rel=1e-9)
