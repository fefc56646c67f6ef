"""The simulator's shortcuts against plain full simulations, and the custom what-if API."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.analysis import analyze_table
from stragglers.analysis.custom import WhatIf
from stragglers.analysis.metrics import exact_worker_times
from stragglers.analysis.scenarios import Scenario
from stragglers.synth import SynthSpec, generate
from stragglers.trace import build_table


@pytest.fixture(scope="module")
def analysis():
    trace, meta, _ = generate(SynthSpec(dp=3, pp=3, microbatches=6, steps=4, jitter=0.05,
                                        seed=11, slow_workers=[(1, 2, 1.3)],
                                        gc_prob=0.3, gc_pause=0.05))
    return analyze_table(build_table(trace, meta))


def full_worker_time(engine, d, s):
    """Only worker (d, s) original, every DP rank simulated."""
    wm = np.zeros((engine.dp, engine.pp), dtype=bool)
    wm[d, s] = True
    return engine.run([Scenario.keep_workers("w", wm)])["w"]


def test_virtual_dp_ranks_equal_full_simulation(analysis):
    m = analysis.engine
    exact = exact_worker_times(m)
    for d in range(m.dp):
        for s in range(m.pp):
            assert np.allclose(exact[d, s], full_worker_time(m, d, s), rtol=0, atol=1e-12)
    for d in range(m.dp):
        wm = np.zeros((m.dp, m.pp), dtype=bool)
        wm[d, :] = True
        full = m.run([Scenario.keep_workers("rank", wm)])["rank"]
        assert np.allclose(analysis.result.metrics.attr_dp[d], full, atol=1e-12)


def test_custom_whatif_matches_analyses(analysis):
    m = analysis.engine
    wi = WhatIf(m)
    r = analysis.result.to_document()
    base = wi.simulate()
    assert base.mean == pytest.approx(np.mean(list(r["step_time"]["no_delay"].values())))
    ideal = wi.simulate(wi.ops().ideal())
    assert ideal.slowdown == pytest.approx(1.0)
    assert base.slowdown == pytest.approx(r["slowdown"])
    # M_W rem by hand: the top workers at their ideal values.
    sel = None
    for key in r["m_w"]["workers"]:
        d, s = (int(x) for x in key.split(","))
        one = wi.ops(dp_rank=d, stage=s)
        sel = one if sel is None else sel | one
    assert wi.simulate(sel.ideal()).mean == pytest.approx(r["m_w"]["t_rem"], rel=1e-12)
    # Stage attribution: only stage 1 original = everything else ideal.
    s1 = wi.simulate((~wi.ops(stage=1)).ideal())
    assert s1.slowdown == pytest.approx(r["attribution"]["stage"]["1"], rel=1e-12)


def test_custom_whatif_set_scale_and_errors(analysis):
    wi = WhatIf(analysis.engine)
    base = wi.simulate()
    slower = wi.simulate(wi.ops(optype="optimizer").scale(2.0))
    assert slower.mean > base.mean
    # The optimizer ends every step: doubling it lengthens every step.
    for st, t in slower.step_time.items():
        assert t > base.step_time[st]
    zero = wi.simulate(wi.ops(optype=["forward-compute", "backward-compute"]).set(0.0))
    assert zero.mean < base.mean
    one_step = wi.simulate(wi.ops(step=2, optype="optimizer").set(10.0))
    assert one_step.step_time[2] > 10.0 and one_step.step_time[1] == base.step_time[1]
    assert wi.ops(microbatch=0).count == 2 * analysis.engine.dp * analysis.engine.pp * 4
    from stragglers.errors import InputError

    with pytest.raises(InputError, match="unknown operation type"):
        wi.ops(optype="fwd")
    with pytest.raises(InputError, match="step 99"):
        wi.ops(step=99)


def _scenario_batches(engine):
    """A batch of each kind the engine simulates, with every mask it takes."""
    from stragglers.analysis.metrics import node_attribution_keys, optype_keys

    dp, pp, rng = engine.dp, engine.pp, np.random.default_rng(5)
    keys = node_attribution_keys(engine)
    value = engine.derived.value.astype(np.float64)
    return {
        "ideal": ("ideal", [Scenario.ideal("i")]),
        "full": ("full", [Scenario.original("o"),
                          *(Scenario.keep_workers(f"s{s}", np.eye(pp, dtype=bool)[s][None]
                                                  .repeat(dp, 0)) for s in range(pp)),
                          *(Scenario.keep_nodes(f"k{k}", keys == k)
                            for k in optype_keys(engine)),
                          Scenario.keep_workers("some", rng.random((dp, pp)) < 0.4)]),
        "virtual": ("virtual", [
            *(Scenario.keep_dp_rank(f"d{d}", d) for d in range(dp)),
            *(Scenario.keep_dp_rank(f"w{d}{s}", d, np.eye(pp, dtype=bool)[s])
              for d in range(dp) for s in range(pp))]),
        "masks": ("full", [Scenario("st", steps=rng.random(engine.n_steps) < 0.5,
                                    workers=rng.random((dp, pp)) < 0.5),
                           Scenario("nw", nodes=rng.random(engine.n_nodes) < 0.5,
                                    workers=rng.random((dp, pp)) < 0.5)]),
        "values": ("full", [Scenario.with_values("v", value * rng.uniform(0.5, 1.5,
                                                                          value.shape))]),
        "negative": ("full", [Scenario.with_values("n", value - 0.004)]),
    }


@pytest.mark.parametrize("rows,threads", [(None, "1"), (64, "1"), (64, "3")])
def test_batched_program_equals_the_level_by_level_simulation(analysis, monkeypatch, rows,
                                                               threads):
    """simulate_mixed (a node at a time over a pool of reused rows, kept values added
    whole ranks or scenarios at a time, the earliest start taken as 0 when no value is
    negative, chunks on several threads) gives, bit for bit, the step times of the plain
    level-by-level simulation of the same values, in batches of any size."""
    import stragglers.sim.simulator as sim

    monkeypatch.setenv("STRAGGLERS_SIM_THREADS", threads)
    if rows is not None:
        monkeypatch.setattr(sim, "ROW_BYTES", rows)  # one scenario per batch
    e = analysis.engine
    for name, (kind, group) in _scenario_batches(e).items():
        mixed = e._mixed(kind, group)
        want = sim.simulate(e.order, mixed, mixed.shape).step_time
        got = sim.simulate_mixed(e.order, mixed)
        np.testing.assert_array_equal(got, want, err_msg=name)


def test_a_scenario_asked_again_is_not_simulated_again(analysis, monkeypatch):
    import stragglers.analysis.engine as eng

    e = eng.prepare(analysis.engine.table)
    calls = []
    real = eng.simulate_mixed

    def counted(order, values):
        calls.append(values.shape[0])
        return real(order, values)

    monkeypatch.setattr(eng, "simulate_mixed", counted)
    wm = np.zeros((e.dp, e.pp), dtype=bool)
    wm[:, -1] = True
    first = e.run([Scenario.keep_workers("a", wm), Scenario.keep_workers("b", wm.copy())])
    again = e.run([Scenario.keep_workers("c", wm), Scenario.keep_dp_rank("d", 1)])
    assert calls == [1, 1]  # "b" and "c" are "a"; only "d" is new
    np.testing.assert_array_equal(first["a"], first["b"])
    np.testing.assert_array_equal(first["a"], again["c"])
    fresh = eng.prepare(analysis.engine.table).run([Scenario.keep_dp_rank("d", 1)])
    np.testing.assert_array_equal(again["d"], fresh["d"])
