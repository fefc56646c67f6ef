"""Dependency rules, simulation and metrics on traces worked out by hand (handmade.py)."""

from __future__ import annotations

import numpy as np
import pytest

from stragglers.analysis import analyze_table
from stragglers.analysis.verdict import VerdictConfig
from stragglers.model import build_graph
from stragglers.trace import build_table, schema
from tests.analysis import handmade

TOL = 1e-9


def node(table, stage: int, optype: str, seq: int = 0) -> int:
    hit = np.flatnonzero((table.node_stage == stage)
                         & (table.node_optype == schema.OPTYPE_CODE[optype])
                         & (table.node_seq == seq))
    assert len(hit) == 1
    return int(hit[0])


def deps_of(graph, table, stage, optype, seq=0) -> set[tuple[int, str, int]]:
    n = node(table, stage, optype, seq)
    return {(int(table.node_stage[d]), schema.OPTYPES[table.node_optype[d]],
             int(table.node_seq[d])) for d in graph.deps[n]}


@pytest.fixture(scope="module")
def two():
    trace, meta = handmade.two_by_two()
    table = build_table(trace, meta)
    return table, build_graph(table), analyze_table(table)


def test_two_by_two_dependencies(two):
    table, g, _ = two
    # recv -> compute; params before first forward; compute -> send.
    assert deps_of(g, table, 1, handmade.F) == {(1, handmade.FR, 0), (1, handmade.PAG, 0)}
    assert deps_of(g, table, 0, handmade.F) == {(0, handmade.PAG, 0)}
    assert deps_of(g, table, 0, handmade.FS) == {(0, handmade.F, 0)}
    # Compute chain; backward recv feeds backward compute.
    assert deps_of(g, table, 0, handmade.B) == {(0, handmade.F, 0), (0, handmade.BR, 0)}
    # gc follows the compute that ends last; then the non-overlapped DP chain.
    assert deps_of(g, table, 0, handmade.GC) == {(0, handmade.B, 0)}
    assert deps_of(g, table, 0, handmade.LN) == {(0, handmade.GC, 0)}
    assert deps_of(g, table, 0, handmade.EMB) == {(0, handmade.LN, 0)}
    assert deps_of(g, table, 0, handmade.RS) == {(0, handmade.EMB, 0), (0, handmade.PAG, 0)}
    assert deps_of(g, table, 1, handmade.RS) == {(1, handmade.EMB, 0), (1, handmade.PAG, 0)}
    assert deps_of(g, table, 0, handmade.CLIP) == {(0, handmade.RS, 0)}
    assert deps_of(g, table, 0, handmade.OPT) == {(0, handmade.CLIP, 0)}
    # Groups: P2P pairs, embedding of first+last stage, clip of all stages; DP sync.
    groups = {tuple(sorted((int(table.node_stage[m]), schema.OPTYPES[table.node_optype[m]])
                           for m in members)): bool(sync)
              for members, sync in zip(g.groups, g.group_dp_sync, strict=True)}
    assert groups[((0, handmade.FS), (1, handmade.FR))] is False
    assert groups[((0, handmade.BR), (1, handmade.BS))] is False
    assert groups[((0, handmade.EMB), (1, handmade.EMB))] is False
    assert groups[((0, handmade.CLIP), (1, handmade.CLIP))] is True
    assert groups[((0, handmade.RS),)] is True and groups[((1, handmade.PAG),)] is True
    assert not any(handmade.LN in [x[1] for x in k] for k in groups)


def test_two_by_two_figures(two):
    _, _, a = two
    r = a.result.to_document()
    ideal, nodelay = 7.86, 8.36
    for st in r["steps"]:
        assert r["step_time"]["actual"][str(st)] == pytest.approx(nodelay, abs=TOL)
        assert r["step_time"]["no_delay"][str(st)] == pytest.approx(nodelay, abs=TOL)
        assert r["step_time"]["ideal"][str(st)] == pytest.approx(ideal, abs=TOL)
    assert r["discrepancy"] == pytest.approx(1.0, abs=TOL)
    assert r["slowdown"] == pytest.approx(nodelay / ideal, abs=TOL)
    att = r["attribution"]
    assert att["dp_rank"] == pytest.approx({"0": 1.0, "1": nodelay / ideal}, abs=TOL)
    assert att["stage"] == pytest.approx({"0": 8.61 / ideal, "1": 7.61 / ideal}, abs=TOL)
    assert att["optype"]["forward-compute"] == pytest.approx(nodelay / ideal, abs=TOL)
    assert att["optype"]["backward-compute"] == pytest.approx(1.0, abs=TOL)
    assert att["worker"] == pytest.approx(
        {"0,0": 1.0, "0,1": 1.0, "1,0": 8.61 / ideal, "1,1": 1.0}, abs=TOL)
    assert r["worker_score"] == pytest.approx(
        {"0,0": 1.0, "0,1": 7.61 / ideal, "1,0": nodelay / ideal, "1,1": 7.61 / ideal},
        abs=TOL)
    assert r["m_w"]["workers"] == ["1,0"]
    assert r["m_w"]["rem"] == pytest.approx(1.5, abs=1e-8)
    assert r["m_w"]["add"] == pytest.approx(1.5, abs=1e-8)
    assert r["m_s"]["rem"] == pytest.approx(-0.5, abs=1e-8)
    assert r["m_s"]["add"] == pytest.approx(-0.5, abs=1e-8)
    # S = 1.064 is below the default verdict threshold of 1.1 ...
    assert r["verdict"]["cause"] == "none"
    # ... and above a lower one, where the slow worker is named.
    v = analyze_table(a.engine.table, config=VerdictConfig(threshold=1.05)).result
    v = v.to_document()["verdict"]
    assert v["cause"] == "worker" and v["workers"] == ["1,0"]
    counts = r["counts"]
    assert counts["transfer_clipped_to_zero"] == 0
    assert counts["launch_delay_clipped_to_zero"] == 0


def test_one_by_four_pipeline():
    trace, meta = handmade.one_by_four()
    a = analyze_table(build_table(trace, meta))
    r = a.result.to_document()
    assert r["step_time"]["no_delay"]["0"] == pytest.approx(13.16, abs=TOL)
    assert r["step_time"]["actual"]["0"] == pytest.approx(13.16, abs=TOL)
    assert r["slowdown"] == pytest.approx(1.0, abs=TOL)
    assert r["verdict"]["cause"] == "none"
    g, t = a.engine.graph, a.engine.table
    # backward-send of stage s pairs with backward-recv of stage s-1.
    pairs = {tuple(sorted((int(t.node_stage[m]), schema.OPTYPES[t.node_optype[m]]) for m in grp))
             for grp in g.groups}
    for s in (1, 2, 3):
        assert ((s - 1, handmade.BR), (s, handmade.BS)) in pairs
        assert ((s - 1, handmade.FS), (s, handmade.FR)) in pairs
    assert ((0, handmade.EMB), (3, handmade.EMB)) in pairs
    # No DP: DP chain absent and clip is synchronised across stages only.
    clip = [grp for grp in g.groups if len(grp) == 4]
    assert len(clip) == 1 and not g.group_dp_sync[g.group_of[clip[0][0]]]


def test_launch_gap_is_discrepancy_not_slowdown():
    trace, meta = handmade.one_by_four(handmade.one_by_four_workers(gap=0.05))
    r = analyze_table(build_table(trace, meta)).result.to_document()
    assert r["step_time"]["actual"]["0"] == pytest.approx(13.21, abs=TOL)
    assert r["step_time"]["no_delay"]["0"] == pytest.approx(13.16, abs=TOL)
    assert r["discrepancy"] == pytest.approx(13.21 / 13.16, abs=TOL)
    assert r["slowdown"] == pytest.approx(1.0, abs=TOL)


def _late_recv(send_end: float, recv_start: float):
    w = handmade.one_by_four_workers()
    w[(0, 2)] = [op if op[0] != handmade.FS else (handmade.FS, 3.2, send_end) for op in w[(0, 2)]]
    w[(0, 3)] = [op if op[0] != handmade.FR else (handmade.FR, recv_start, 3.3) for op in w[(0, 3)]]
    return handmade.one_by_four(w)


def test_negative_transfer_at_or_below_10ms_is_clipped_and_counted():
    # The send ends 20 ms before its receiver is posted: transfer -0.02 -> 0 (clipped);
    # the recv's transfer is 3.3 - 3.24 = 0.06, so the no-delay forward wave gains 0.04.
    trace, meta = _late_recv(send_end=3.22, recv_start=3.24)
    a = analyze_table(build_table(trace, meta))
    r = a.result.to_document()
    assert r["counts"]["transfer_clipped_to_zero"] == 1
    assert r["counts"]["transfer_negative_kept"] == 0
    assert r["step_time"]["no_delay"]["0"] == pytest.approx(13.12, abs=TOL)
    t = a.engine.table
    assert a.engine.derived.value[node(t, 2, handmade.FS), 0, 0] == 0.0
    assert a.engine.derived.value[node(t, 3, handmade.FR), 0, 0] == pytest.approx(0.06, abs=TOL)


def test_small_negative_transfer_is_kept():
    trace, meta = _late_recv(send_end=3.2, recv_start=3.205)
    a = analyze_table(build_table(trace, meta))
    r = a.result.to_document()
    assert r["counts"]["transfer_clipped_to_zero"] == 0
    assert r["counts"]["transfer_negative_kept"] == 1
    t = a.engine.table
    assert a.engine.derived.value[node(t, 2, handmade.FS), 0, 0] == pytest.approx(-0.005, abs=TOL)
    assert r["step_time"]["no_delay"]["0"] == pytest.approx(13.155, abs=TOL)


def test_negative_launch_delay_rule():
    # Stage 3's backward starts 20 ms before its forward ends (recorded clock skew):
    # launch delay -0.02 <= -10 ms is clipped; -5 ms would be kept.
    for shift, clipped, kept in ((-0.02, 1, 0), (-0.005, 0, 1)):
        w = handmade.one_by_four_workers()
        w[(0, 3)] = [op if op[0] != handmade.B else (handmade.B, 4.3 + shift, 6.3)
                     for op in w[(0, 3)]]
        a = analyze_table(build_table(*handmade.one_by_four(w)))
        c = a.result.to_document()["counts"]
        assert c["launch_delay_clipped_to_zero"] == clipped
        assert c["launch_delay_negative_kept"] >= kept
        t = a.engine.table
        d = a.engine.derived.delay[node(t, 3, handmade.B), 0, 0]
        assert d == (0.0 if clipped else pytest.approx(shift, abs=TOL))


def test_timelines_draw_a_kept_negative_transfer_with_zero_length(tmp_path):
    """A kept negative transfer (-5 ms) cannot be drawn: every timeline is still written
    (it raised before), the op drawn with zero length and counted in its metadata."""
    import json

    from stragglers.analysis.timelines import TIMELINES, write_timeline

    trace, meta = _late_recv(send_end=3.2, recv_start=3.205)
    a = analyze_table(build_table(trace, meta))
    counts = {}
    for which in TIMELINES:
        path = write_timeline(a.engine, which, tmp_path / f"{which}.json")
        doc = json.loads(path.read_text())
        assert all(e["dur"] >= 0 for e in doc["traceEvents"] if e["ph"] == "X")
        counts[which] = doc["otherData"]["metadata"]["negative_durations_drawn_as_zero"]
    assert counts == {"original": 0, "no-delay": 1, "ideal": 0}, counts
