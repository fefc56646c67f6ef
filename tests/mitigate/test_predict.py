"""What-if predictions of S2 and S3 against synthetic jobs generated with the predicted
state (the generator's own timeline is the truth)."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.analysis.engine import prepare
from stragglers.errors import InputError
from stragglers.mitigate.predict import predict_microbatch, predict_permutation
from stragglers.mitigate.topology import consolidate
from stragglers.synth import SynthSpec
from stragglers.synth.generator import generate
from stragglers.trace.table import build_table

DP, PP, MB = 4, 4, 16


def _job(slow):
    spec = SynthSpec(dp=DP, pp=PP, microbatches=MB, steps=3, seed=1)
    spec.slow_workers = list(slow)
    trace, meta, _ = generate(spec)
    table = build_table(trace, meta)
    return prepare(table), meta, float(table.step_times().mean())


def test_s2_prediction_matches_the_rebalanced_job() -> None:
    # DP group 1 is slow x2 on every stage: 64 micro-batches, per-micro-batch times
    # (1, 2, 1, 1) x 0.18 s -> optimum 19 units: group 1 gets 9 (18 units), the others 55
    engine, _, measured_slow = _job([(1, s, 2.0) for s in range(PP)])
    _, _, healthy = _job([])
    pred = predict_microbatch(engine)
    assert pred.details.microbatches_per_group == MB
    assert pred.details.assignment[1] == 9 and sum(pred.details.assignment) == 64
    assert pred.before_s == pytest.approx(measured_slow, rel=1e-9)
    # truth: a job whose groups' computes take m_i / 16 of their time per slot
    factors = [(2.0 if d == 1 else 1.0) * m / MB
               for d, m in enumerate(pred.details.assignment)]
    assert min(factors) > 1.0  # expressible as injected slow workers
    _, _, truth = _job([(d, s, f) for d, f in enumerate(factors) for s in range(PP)])
    assert pred.after_s == pytest.approx(truth, rel=1e-6)
    assert healthy < pred.after_s < measured_slow
    # most of the slowdown removed
    assert (measured_slow - pred.after_s) / (measured_slow - healthy) > 0.6


def test_s2_prediction_of_a_given_split_matches_that_job() -> None:
    """A split other than the optimum (what a live loop applied, e.g. one micro-batch off):
    predicted against a job generated with that split, and slower than the optimum's."""
    engine, _, measured_slow = _job([(1, s, 2.0) for s in range(PP)])
    split = [17, 12, 17, 18]
    pred = predict_microbatch(engine, split)
    assert pred.details.assignment == split
    factors = [(2.0 if d == 1 else 1.0) * m / MB for d, m in enumerate(split)]
    _, _, truth = _job([(d, s, f) for d, f in enumerate(factors) for s in range(PP)])
    assert pred.after_s == pytest.approx(truth, rel=1e-6)
    assert predict_microbatch(engine).after_s < pred.after_s < measured_slow
    optimum = predict_microbatch(engine)
    same = predict_microbatch(engine, optimum.details.assignment)
    assert same.after_s == optimum.after_s
    for bad in ([16, 16, 16], [16, 16, 16, 17], [0, 20, 22, 22]):
        with pytest.raises(InputError, match="needs 4 counts >= 1 that add up to 64"):
            predict_microbatch(engine, bad)


@pytest.mark.parametrize("slow", [
    [(1, 0, 1.5), (2, 1, 1.5)],
    [(1, 0, 1.5), (1, 2, 1.5)],
    [(0, 1, 1.5), (1, 2, 1.5), (2, 0, 1.5)],
])
def test_s3_prediction_matches_the_permuted_job(slow) -> None:
    engine, meta, measured = _job(slow)
    plan = consolidate(meta, [s * DP + d for d, s, _ in slow])
    pred = predict_permutation(engine, plan)
    assert pred.before_s == pytest.approx(measured, rel=1e-9)
    moved = [(*plan.where(s * DP + d), f) for d, s, f in slow]
    _, _, truth = _job(moved)
    assert pred.after_s == pytest.approx(truth, rel=1e-6)


def test_prediction_errors() -> None:
    engine, _, _ = _job([])
    other = consolidate(generate(SynthSpec(dp=2, pp=2, microbatches=2, steps=1))[1], [0])
    with pytest.raises(InputError, match="plan for dp 2 x pp 2, trace of dp 4 x pp 4"):
        predict_permutation(engine, other)
    single, _, _ = (lambda t: (prepare(build_table(t[0], t[1])), 0, 0))(
        generate(SynthSpec(dp=1, pp=2, microbatches=4, steps=1)))
    with pytest.raises(InputError, match="one DP group"):
        predict_microbatch(single)
    assert np.isfinite(predict_microbatch(engine).after_s)


def test_rebalance_prediction_recovers_the_even_job(monkeypatch) -> None:
    # a job generated with known micro-batch costs (mean 1) on its computes: predicting
    # "every micro-batch at cost 1" must give the step time of the same job generated even
    from stragglers.mitigate.predict import predict_rebalance
    from stragglers.synth import generator
    from stragglers.trace import schema

    spec = SynthSpec(dp=2, pp=2, microbatches=4, steps=3, seed=3)
    trace, meta, _ = generate(spec)
    healthy = float(build_table(trace, meta).step_times().mean())
    rng = np.random.default_rng(1)
    cost = rng.lognormal(0.0, 0.8, (3, 2, 4))  # (steps, dp, micro-batches)
    cost /= cost.mean()
    plain = generator._values

    def with_costs(spec, table, rng):  # the generator's values, computes rescaled
        val, gc_time = plain(spec, table, rng)  # (values, recorded GC seconds)
        compute = np.isin(table.node_optype,
                          [schema.OPTYPE_CODE[t] for t in schema.COMPUTE_TYPES])
        idx = np.flatnonzero(compute)
        val[idx] *= cost[:, :, table.node_mb[idx]].transpose(2, 1, 0)
        return val, gc_time

    monkeypatch.setattr(generator, "_values", with_costs)
    trace, meta, _ = generate(spec)
    table = build_table(trace, meta)
    engine = prepare(table)
    pred = predict_rebalance(engine, cost, np.ones_like(cost))
    assert pred.before_s == pytest.approx(float(table.step_times().mean()), rel=1e-9)
    assert pred.before_s > healthy * 1.05  # the imbalance slowed the job
    assert pred.after_s == pytest.approx(healthy, rel=1e-6)
    with pytest.raises(InputError, match="the trace needs"):
        predict_rebalance(engine, cost[:2], cost[:2])


def test_plan_with_trace_predicts_its_decisions(tmp_path, capsys) -> None:
    import json

    from stragglers.cli import main

    out = tmp_path / "job"
    assert main(["synth", "--dp", "4", "--pp", "2", "--microbatches", "8", "--steps", "2",
                 "--slow-worker", "1,1:2", "--out", str(out)]) == 0
    capsys.readouterr()
    # the slow worker (dp 1, stage 1) is rank 5; its onset as watch reports it
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"event": "onset", "rank": 5, "iteration": 0,
                                  "declared_iteration": 3, "level_s": 2.0,
                                  "healthy_s": 1.0}) + "\n"
                      + json.dumps({"event": "summary", "iterations": {"5": 100}}) + "\n")
    meta = str(out / "meta.yaml")
    assert main(["mitigate", "plan", str(events), "--meta", meta, "--trace",
                 str(out / "trace.parquet"), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    by = {d["strategy"]: d for d in plan["decisions"]}
    s2 = by["S2"]["details"]["whatif"]
    assert s2["after_s"] < s2["before_s"] and s2["assignment"][1] < 8
    assert "whatif" in by["S3"]["details"] and "whatif" not in by["S1"]["details"]
    assert main(["mitigate", "plan", str(events), "--meta", meta, "--trace",
                 str(out / "trace.parquet")]) == 0
    assert "what-if from the trace: step" in capsys.readouterr().out
