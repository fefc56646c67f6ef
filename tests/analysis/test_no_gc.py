"""The end-of-step chain of a trace without ``gc`` ops (issue 23, item 1): it hangs off the
compute op that ends last, in every DP mode (docs/model-extensions.md §E1).

Profiler traces (and any trace without GC spans) have no ``gc`` op; the chain
``layernorm-AR → ... → clip → optimizer`` must still follow the last compute op instead of
being simulated at the step's start beside the forward pass. Each trace below is built by
hand and its step time worked out on paper.
"""

from __future__ import annotations

import pytest

from stragglers.analysis import analyze_table
from stragglers.model import build_graph
from stragglers.trace import build_table
from stragglers.trace.io import JobMeta
from tests.analysis import handmade
from tests.analysis.test_handbuilt import deps_of

TOL = 1e-9
F, B, GC, LN, RS, CLIP, OPT = (handmade.F, handmade.B, handmade.GC, handmade.LN, handmade.RS,
                               handmade.CLIP, handmade.OPT)
SAR = "separate-grads-all-reduce"


def no_gc(workers: dict[tuple[int, int], handmade.Worker]) -> dict[tuple[int, int],
                                                                   handmade.Worker]:
    return {k: [op for op in ops if op[0] != GC] for k, ops in workers.items()}


def step_times(table) -> dict[str, float]:
    r = analyze_table(table).result.to_document()
    return {which: r["step_time"][which]["0"] for which in ("actual", "no_delay", "ideal")}


def test_world_size_one_forward_backward_optimizer():
    """dp 1 x pp 1: forward 1, backward 2, optimizer 0.5 (the single-rank DDP trace of the
    issue): the step is 3.5, not forward + backward with the optimizer beside the forward."""
    workers = {(0, 0): [(F, 0, 1), (B, 1, 3), (OPT, 3, 3.5)]}
    meta = JobMeta(dp_size=1, pp_size=1, world_size=1, trial_name="w1")
    table = build_table(handmade.trace_from_workers(workers, pp=1, steps=2), meta)
    g = build_graph(table)
    assert deps_of(g, table, 0, OPT) == {(0, B, 0)}
    times = step_times(table)
    assert times["no_delay"] == pytest.approx(3.5, abs=TOL)
    assert times["actual"] == pytest.approx(3.5, abs=TOL)


def test_no_dp_pipeline_without_gc():
    """dp 1 x pp 4 (handmade.one_by_four without gc ops, which took 0 s): step 13.16."""
    trace, meta = handmade.one_by_four(no_gc(handmade.one_by_four_workers()))
    table = build_table(trace, meta)
    g = build_graph(table)
    for stage in range(4):
        assert deps_of(g, table, stage, LN) == {(stage, B, 0)}
    times = step_times(table)
    assert times["no_delay"] == pytest.approx(13.16, abs=TOL)
    assert times["actual"] == pytest.approx(13.16, abs=TOL)


def test_dp_not_overlapped_without_gc():
    """dp 2 x pp 2, DP collectives not overlapped (handmade.two_by_two without gc ops):
    the figures are those with gc (no-delay 8.36, ideal 7.86)."""
    trace, meta = handmade.two_by_two()
    w = {
        (0, 0): [(handmade.PAG, 0, .1), (F, .1, 1.1), (handmade.FS, 1.1, 1.2),
                 (handmade.BR, 0, 4.3), (B, 4.3, 6.3), (LN, 6.3, 6.31),
                 (handmade.EMB, 6.31, 6.51), (RS, 6.51, 8.01), (CLIP, 8.01, 8.06),
                 (OPT, 8.06, 8.36)],
        (0, 1): [(handmade.PAG, 0, .1), (handmade.FR, 0, 1.2), (F, 1.2, 2.2), (B, 2.2, 4.2),
                 (handmade.BS, 4.2, 4.3), (LN, 4.2, 4.21), (handmade.EMB, 4.21, 6.51),
                 (RS, 6.51, 8.01), (CLIP, 8.01, 8.06), (OPT, 8.06, 8.36)],
        (1, 0): [(handmade.PAG, 0, .1), (F, .1, 2.1), (handmade.FS, 2.1, 2.2),
                 (handmade.BR, 0, 5.3), (B, 5.3, 7.3), (LN, 7.3, 7.31),
                 (handmade.EMB, 7.31, 7.51), (RS, 7.51, 8.01), (CLIP, 8.01, 8.06),
                 (OPT, 8.06, 8.36)],
        (1, 1): [(handmade.PAG, 0, .1), (handmade.FR, 0, 2.2), (F, 2.2, 3.2), (B, 3.2, 5.2),
                 (handmade.BS, 5.2, 5.3), (LN, 5.2, 5.21), (handmade.EMB, 5.21, 7.51),
                 (RS, 7.51, 8.01), (CLIP, 8.01, 8.06), (OPT, 8.06, 8.36)],
    }
    table = build_table(handmade.trace_from_workers(w, pp=2, steps=2), meta)
    g = build_graph(table)
    assert deps_of(g, table, 0, LN) == {(0, B, 0)}
    assert deps_of(g, table, 1, LN) == {(1, B, 0)}
    r = analyze_table(table).result.to_document()
    for st in r["steps"]:
        assert r["step_time"]["no_delay"][str(st)] == pytest.approx(8.36, abs=TOL)
        assert r["step_time"]["actual"][str(st)] == pytest.approx(8.36, abs=TOL)
        assert r["step_time"]["ideal"][str(st)] == pytest.approx(7.86, abs=TOL)
    assert r["discrepancy"] == pytest.approx(1.0, abs=TOL)


def test_dp_not_overlapped_without_gc_or_layernorm():
    """dp 2 x pp 1, DDP-like (what an import of a DDP job gives): forward, backward, the
    gradient all-reduce (grads-reduce-scatter), optimizer; no gc, no layernorm. Worker 1
    computes 0.5 s longer; the all-reduce is synchronised: 1 + 2.5 + 0.5 + 0.25 = 4.25."""
    w = {(0, 0): [(F, 0, 1), (B, 1, 3), (RS, 3.5, 4.0), (OPT, 4.0, 4.25)],
         (1, 0): [(F, 0, 1.5), (B, 1.5, 3.5), (RS, 3.5, 4.0), (OPT, 4.0, 4.25)]}
    meta = JobMeta(dp_size=2, pp_size=1, world_size=2, trial_name="ddp")
    table = build_table(handmade.trace_from_workers(w, pp=1, steps=2), meta)
    g = build_graph(table)
    assert deps_of(g, table, 0, RS) == {(0, B, 0)}
    times = step_times(table)
    assert times["no_delay"] == pytest.approx(4.25, abs=TOL)
    assert times["actual"] == pytest.approx(4.25, abs=TOL)


def test_dp_overlapped_without_gc():
    """dp 2 x pp 1, DP collectives overlapped (a separate-grads-all-reduce): without gc the
    op after it in the chain follows both the last compute op and the last
    grads-reduce-scatter (``{last RS, last compute} → layernorm-AR``). Worker 1's forward
    is 0.5 s longer: RS ends at 4.0 on both, then LN 0.01, SAR 0.1, clip 0.05, optimizer
    0.3: step 4.46."""
    w = {(0, 0): [(F, 0, 1), (B, 1, 3), (RS, 3, 4.0), (LN, 4.0, 4.01), (SAR, 4.01, 4.11),
                  (CLIP, 4.11, 4.16), (OPT, 4.16, 4.46)],
         (1, 0): [(F, 0, 1.5), (B, 1.5, 3.5), (RS, 3.5, 4.0), (LN, 4.0, 4.01),
                  (SAR, 4.01, 4.11), (CLIP, 4.11, 4.16), (OPT, 4.16, 4.46)]}
    meta = JobMeta(dp_size=2, pp_size=1, world_size=2, trial_name="overlapped")
    table = build_table(handmade.trace_from_workers(w, pp=1, steps=2), meta)
    g = build_graph(table)
    assert deps_of(g, table, 0, LN) == {(0, B, 0), (0, RS, 0)}
    assert deps_of(g, table, 0, SAR) == {(0, LN, 0)}
    times = step_times(table)
    assert times["no_delay"] == pytest.approx(4.46, abs=TOL)
    assert times["actual"] == pytest.approx(4.46, abs=TOL)


def test_gc_still_heads_the_chain_when_present():
    """With a gc op the rule is §2.8 unchanged: gc follows the last compute, LN follows gc."""
    trace, meta = handmade.two_by_two()
    table = build_table(trace, meta)
    g = build_graph(table)
    assert deps_of(g, table, 0, GC) == {(0, B, 0)}
    assert deps_of(g, table, 0, LN) == {(0, GC, 0)}
