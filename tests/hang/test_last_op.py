"""Hang localisation on a dp 4 x pp 4 topology."""

from __future__ import annotations

import pytest

from stragglers.hang.last_op import LastOp, Topology, localize_hang

TOPO = Topology(dp=4, pp=4)


def test_topology_groups() -> None:
    assert TOPO.size == 16
    assert TOPO.coords(9) == (2, 1, 0)
    assert TOPO.group(9, "dp") == (8, 9, 10, 11)
    assert TOPO.group(9, "pp") == (1, 5, 9, 13)
    assert TOPO.group(9, "tp") == (9,)
    t3 = Topology(dp=2, pp=2, tp=2)
    assert t3.group(5, "tp") == (4, 5) and t3.group(5, "dp") == (5, 7)
    assert t3.group(5, "pp") == (1, 5)
    with pytest.raises(ValueError, match="outside"):
        TOPO.coords(16)


def _scenario(hung: int = 9) -> dict[int, LastOp]:
    """Rank 9 (stage 2, replica 1) hangs in a kernel and logs nothing.

    Its stage-2 data-parallel peers wait in the gradient allreduce; stage 1 of replica 1 waits to
    receive its gradients, stage 3 of replica 1 waits for its activations; the other ranks of
    stages 1 and 3 wait in their allreduce for those, and stage 0 of replica 1 waits on stage 1,
    with the rest of stage 0 in the allreduce.
    """
    ops: dict[int, LastOp] = {}
    for r in range(16):
        if r == hung:
            continue
        pp, dp, _ = TOPO.coords(r)
        if pp == 2 or dp != 1:
            ops[r] = LastOp("allreduce", "dp", seq=812)
        elif pp == 1:
            ops[r] = LastOp("recv", "pp", peer=9)
        elif pp == 3:
            ops[r] = LastOp("recv", "pp", peer=9)
        else:
            ops[r] = LastOp("recv", "pp", peer=5)
    return ops


def test_silent_rank_is_the_suspect() -> None:
    d = localize_hang(TOPO, _scenario())
    assert d.suspect_ranks == (9,)
    assert d.silent == (9,)
    (s,) = d.suspects
    assert s.kind == "silent" and s.waited_on_by == 15
    assert s.reason.startswith("rank 9 logged nothing while ranks [5, 8, 10, 11, 13] wait")
    assert d.waits_for[8] == (9,) and d.waits_for[4] == (5,) and d.waits_for[1] == (5,)
    assert d.waits_for[0] == (1,)


def test_stuck_collective_when_nobody_is_missing() -> None:
    ops = _scenario()
    ops[9] = LastOp("allreduce", "dp", seq=812)  # rank 9 is in the allreduce too
    # stage 1 / 3 of replica 1 wait on 9 through p2p that 9 does not answer
    d = localize_hang(TOPO, ops)
    kinds = {(s.kind, s.ranks) for s in d.suspects}
    assert ("stuck_collective", (8, 9, 10, 11)) in kinds
    assert all(s.kind != "silent" for s in d.suspects)


def test_mismatched_collective_order_is_a_circular_wait() -> None:
    ops = {r: LastOp("allreduce", "dp", seq=5) for r in range(16)}
    ops[8] = LastOp("allgather", "dp", seq=6)  # 8 skipped a collective: 9-11 wait for 8
    d = localize_hang(TOPO, ops)
    circ = [s for s in d.suspects if s.kind == "circular_wait"]
    assert len(circ) == 1 and circ[0].ranks == (8, 9, 10, 11)


def test_validation() -> None:
    with pytest.raises(ValueError, match="unknown group kind"):
        localize_hang(TOPO, {0: LastOp("allreduce", "xp")})
    with pytest.raises(ValueError, match="both silent and logged"):
        localize_hang(TOPO, {0: LastOp("allreduce", "dp")}, silent=[0])
    with pytest.raises(ValueError, match="dp must be"):
        Topology(dp=0, pp=1)


def test_large_topologies_stay_linear() -> None:
    """Half of every data-parallel group of 4096 ranks is silent: each logged rank waits for
    2,048 silent ones (4 million waits-for pairs), which the graph routes through one node."""
    topo = Topology(dp=4096, pp=1)
    ops = {r: LastOp("allreduce", "dp", seq=1) for r in range(0, 4096, 2)}
    diag = localize_hang(topo, ops)
    assert len(diag.suspects) == 2048
    assert {s.kind for s in diag.suspects} == {"silent"}
    assert {s.waited_on_by for s in diag.suspects} == {2048}
    assert diag.suspect_ranks == tuple(range(1, 4096, 2))
    assert "... (2048 ranks)]" in diag.suspects[0].reason
    # one silent rank, everyone else in the allreduce: all 4095 others wait for it
    ops = {r: LastOp("allreduce", "dp", seq=1) for r in range(4096) if r != 7}
    (sus,) = localize_hang(topo, ops).suspects
    assert sus.ranks == (7,) and sus.waited_on_by == 4095
