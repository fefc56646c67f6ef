"""Suspicious-group narrowing: slow transfer vs waiting for a peer."""

from __future__ import annotations

import numpy as np

from stragglers.detect.narrow import narrow_down, narrow_down_records
from stragglers.logs.records import CallRecord


def _profile():
    rng = np.random.default_rng(0)
    rows = []
    for g in range(8):  # 8 data-parallel groups of 4 ranks, same allreduce and allgather
        for r in range(4):
            rank = 4 * g + r
            for kind, size, base in (("allreduce", 1 << 26, 0.050), ("allgather", 1 << 24, 0.012)):
                for _ in range(20):
                    tr = base * rng.uniform(0.98, 1.02)
                    wait = 0.002 * rng.uniform(0.5, 1.5)
                    if g == 3:  # congested link: transfers 30 % slower
                        tr *= 1.3
                    if g == 5:  # rank 21 computes slowly: the others wait for it
                        wait = 0.0001 if rank == 21 else 0.030 * rng.uniform(0.9, 1.1)
                    rows.append((f"dp{g}", rank, kind, size, tr, wait))
    return rows


def test_slow_transfer_and_waiting_groups() -> None:
    rows = _profile()
    found = narrow_down(*[list(c) for c in zip(*rows, strict=True)])
    verdicts = {f.group: f.verdict for f in found}
    assert verdicts == {f"dp{g}": ("slow_transfer" if g == 3 else "waiting_for_peer" if g == 5
                                   else "ok") for g in range(8)}
    assert found[0].group == "dp3" and abs(found[0].transfer_ratio - 1.3) < 0.03
    assert found[1].group == "dp5" and found[1].late_ranks == (21,)


def test_just_below_the_factor_is_ok_and_incomparable_groups() -> None:
    rows = [(f"g{g}", g, "allreduce", 8, 1.0 if g else 1.09, 0.0) for g in range(5)]
    rows.append(("pp0", 9, "send", 64, 5.0, 0.0))  # no comparable group
    found = narrow_down(*[list(c) for c in zip(*rows, strict=True)])
    assert {f.group: f.verdict for f in found} == {
        "g0": "ok", "g1": "ok", "g2": "ok", "g3": "ok", "g4": "ok", "pp0": "incomparable"}
    rows[0] = ("g0", 0, "allreduce", 8, 1.11, 0.0)
    found = narrow_down(*[list(c) for c in zip(*rows, strict=True)])
    assert found[0].group == "g0" and found[0].verdict == "slow_transfer"


def test_from_records() -> None:
    recs = [CallRecord(g, "allreduce", 8, float(i), f"dp{g}", 2.0 if g == 1 else 1.0, 0.0)
            for g in range(4) for i in range(3)]
    recs.append(CallRecord(0, "allreduce", 8, 9.0))  # no profile: ignored
    found = narrow_down_records(recs)
    assert [(f.group, f.verdict, f.calls) for f in found][0] == ("dp1", "slow_transfer", 3)
    assert narrow_down([], [], [], [], []) == []
