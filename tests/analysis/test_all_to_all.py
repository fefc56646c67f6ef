"""Expert-parallel all-to-all as a synchronising collective (issue 23 item 2; the project's
model extension E2, docs/model-extensions.md), on traces built by hand.

dp 2 x pp 1, one step: forward, all-to-all (dispatch), forward, backward, optimizer. Worker 1
computes its first forward piece 1.9 s longer (2.9 s instead of 1 s): it arrives last at the
all-to-all, which worker 0 entered at 1.0 and so waited 1.9 s in. The all-to-all moves data
for 0.1 s once both have launched; everything after it takes the same time on both.
"""

from __future__ import annotations

import pytest

from stragglers.analysis import analyze_table
from stragglers.model import build_graph
from stragglers.trace import build_table, schema
from stragglers.trace.io import JobMeta
from tests.analysis import handmade
from tests.analysis.test_handbuilt import deps_of, node

TOL = 1e-9
F, B, OPT, A2A = handmade.F, handmade.B, handmade.OPT, schema.ALL_TO_ALL


def dlrm_like(slow_first: float = 2.9):
    w = {(0, 0): [(F, 0, 1), (A2A, 1, slow_first + 0.1), (F, slow_first + 0.1, slow_first + 1.1),
                  (B, slow_first + 1.1, slow_first + 3.1), (OPT, slow_first + 3.1,
                                                            slow_first + 3.6)],
         (1, 0): [(F, 0, slow_first), (A2A, slow_first, slow_first + 0.1),
                  (F, slow_first + 0.1, slow_first + 1.1), (B, slow_first + 1.1, slow_first + 3.1),
                  (OPT, slow_first + 3.1, slow_first + 3.6)]}
    meta = JobMeta(dp_size=2, pp_size=1, world_size=2, trial_name="a2a")
    return build_table(handmade.trace_from_workers(w, pp=1, steps=3), meta)


def test_all_to_all_sits_in_the_compute_stream_and_synchronises_dp_ranks():
    table = dlrm_like()
    g = build_graph(table)
    assert deps_of(g, table, 0, A2A) == {(0, F, 0)}
    assert deps_of(g, table, 0, F, 1) == {(0, F, 0), (0, A2A, 0)}
    a2a = node(table, 0, A2A)
    assert g.group_dp_sync[g.group_of[a2a]]  # synchronised across the DP ranks


def test_the_late_rank_is_blamed_and_its_waiter_is_not():
    a = analyze_table(dlrm_like()).result
    r = a.to_document()
    # the simulated step is the recorded one: 2.9 + 0.1 + 1 + 2 + 0.5
    assert r["step_time"]["no_delay"]["0"] == pytest.approx(6.5, abs=TOL)
    assert r["discrepancy"] == pytest.approx(1.0, abs=TOL)
    # the all-to-all's transfer excludes the wait: 0.1 s on both ranks
    assert a.metrics.worker_slowdown[1, 0] > 1.2
    assert a.metrics.worker_slowdown[0, 0] == pytest.approx(1.0, abs=1e-6)
    assert r["worker_score"]["0,0"] < r["worker_score"]["1,0"]
    scores = r["attribution"]["worker"]
    assert max(scores, key=scores.get) == "1,0"
    assert r["attribution"]["optype"]["all-to-all"] == pytest.approx(1.0, abs=1e-6)


def test_without_a_slow_rank_nobody_is_blamed():
    r = analyze_table(dlrm_like(slow_first=1.0)).result.to_document()
    assert r["slowdown"] == pytest.approx(1.0, abs=TOL)
    assert r["discrepancy"] == pytest.approx(1.0, abs=TOL)
