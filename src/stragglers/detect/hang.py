"""Hang localisation from the last operation each rank logged (MegaScale §5.2).

When a job hangs, every rank that is blocked in a communication call times out and logs the call
it was in; a rank whose GPU (or process) is itself stuck logs nothing.  Given the parallel
topology, each logged call says whom the rank was waiting for:

* a collective in its ``tp``, ``dp`` or ``pp`` group waits for every member of that group that is
  *not* in the same collective (same op and, when logged, same sequence number);
* a point-to-point call (``send``/``recv`` with a ``peer``) waits for that peer, unless the peer
  is in the matching call towards it.

This gives a waits-for graph.  The culprits are its *sinks* reachable from the waiting ranks:
strongly connected components with no edge leaving them.  A sink is explained as

* ``silent``: a rank that logged nothing while others wait for it (hung GPU/process);
* ``stuck_collective``: a group whose members are all in the same collective (nobody is missing,
  so the collective itself does not progress: suspect the group's links / NCCL);
* ``circular_wait``: ranks that wait for each other in different calls (mismatched collective
  order, a software bug).

Suspects are ordered by how many ranks (transitively) wait for them.

Topology layout: Megatron order, tensor parallel fastest:
``rank = (pp_index * dp + dp_index) * tp + tp_index``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

__all__ = ["HangDiagnosis", "LastOp", "Suspect", "Topology", "localize_hang"]

GROUP_KINDS = ("tp", "dp", "pp")


@dataclass(frozen=True)
class Topology:
    """A dp x pp x tp layout (tensor parallel index fastest)."""

    dp: int
    pp: int
    tp: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "pp", "tp"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def size(self) -> int:
        return self.dp * self.pp * self.tp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """``(pp_index, dp_index, tp_index)`` of a rank."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is outside a topology of {self.size} ranks")
        tp_i = rank % self.tp
        dp_i = (rank // self.tp) % self.dp
        pp_i = rank // (self.tp * self.dp)
        return pp_i, dp_i, tp_i

    def rank(self, pp_index: int, dp_index: int, tp_index: int = 0) -> int:
        return (pp_index * self.dp + dp_index) * self.tp + tp_index

    def group(self, rank: int, kind: str) -> tuple[int, ...]:
        """Members (sorted) of the ``kind`` group (``tp``/``dp``/``pp``) that contains ``rank``."""
        pp_i, dp_i, tp_i = self.coords(rank)
        if kind == "tp":
            return tuple(self.rank(pp_i, dp_i, t) for t in range(self.tp))
        if kind == "dp":
            return tuple(self.rank(pp_i, d, tp_i) for d in range(self.dp))
        if kind == "pp":
            return tuple(self.rank(p, dp_i, tp_i) for p in range(self.pp))
        raise ValueError(f"unknown group kind {kind!r}; use one of {', '.join(GROUP_KINDS)}")

    def group_name(self, rank: int, kind: str) -> str:
        pp_i, dp_i, tp_i = self.coords(rank)
        fixed = {"tp": f"pp={pp_i},dp={dp_i}", "dp": f"pp={pp_i},tp={tp_i}",
                 "pp": f"dp={dp_i},tp={tp_i}"}[kind]
        return f"{kind}[{fixed}]"


@dataclass(frozen=True)
class LastOp:
    """What a rank was doing when its call timed out."""

    op: str  # e.g. "allreduce", "allgather", "send", "recv"
    group: str  # "tp" | "dp" | "pp"
    peer: int | None = None  # for point-to-point calls
    seq: int | None = None  # collective sequence number, when logged


@dataclass(frozen=True)
class Suspect:
    ranks: tuple[int, ...]
    kind: str  # "silent" | "stuck_collective" | "circular_wait"
    waited_on_by: int
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"ranks": list(self.ranks), "kind": self.kind, "waited_on_by": self.waited_on_by,
                "reason": self.reason}


@dataclass(frozen=True)
class HangDiagnosis:
    suspects: tuple[Suspect, ...]
    waits_for: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    silent: tuple[int, ...] = ()

    @property
    def suspect_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for s in self.suspects for r in s.ranks}))

    def to_dict(self) -> dict[str, object]:
        return {
            "suspect_ranks": list(self.suspect_ranks),
            "suspects": [s.to_dict() for s in self.suspects],
            "silent": list(self.silent),
            "waits_for": {str(k): list(v) for k, v in sorted(self.waits_for.items())},
        }


P2P_OPS = {"send": "recv", "recv": "send", "isend": "irecv", "irecv": "isend"}


def _same_call(a: LastOp, b: LastOp) -> bool:
    return a.op == b.op and a.group == b.group and (a.seq is None or b.seq is None
                                                     or a.seq == b.seq)


def localize_hang(topology: Topology, last_ops: Mapping[int, LastOp],
                  silent: Iterable[int] | None = None) -> HangDiagnosis:
    """Suspects of a hang (see the module docstring).  Ranks absent from ``last_ops`` are taken
    as silent; ``silent`` may list them explicitly (it must not overlap ``last_ops``)."""
    n = topology.size
    for r, op in last_ops.items():
        topology.coords(r)
        if op.group not in GROUP_KINDS:
            raise ValueError(f"rank {r}: unknown group kind {op.group!r}")
        if op.peer is not None:
            topology.coords(op.peer)
    silent_set = set(range(n)) - set(last_ops)
    if silent is not None:
        given = set(silent)
        if given & set(last_ops):
            raise ValueError(f"ranks {sorted(given & set(last_ops))} are both silent and logged")
        silent_set = given | silent_set
    waits: dict[int, tuple[int, ...]] = {}
    for r, op in last_ops.items():
        if op.peer is not None:
            other = last_ops.get(op.peer)
            matched = (other is not None and other.peer == r
                       and P2P_OPS.get(op.op) == other.op)
            waits[r] = () if matched else (op.peer,)
        else:
            members = topology.group(r, op.group)
            waits[r] = tuple(m for m in members if m != r and not (
                m in last_ops and _same_call(last_ops[m], op)))
    rows = [r for r, ws in waits.items() for _ in ws]
    cols = [w for ws in waits.values() for w in ws]
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    ncomp, label = connected_components(graph, directed=True, connection="strong")
    # Component graph: a component is a sink when no edge leaves it.
    leaves = np.zeros(ncomp, dtype=bool)
    if rows:
        r_a = np.asarray(rows)
        c_a = np.asarray(cols)
        cross = label[r_a] != label[c_a]
        leaves[np.unique(label[r_a[cross]])] = True
    # Who (transitively) waits for each component.
    reach = _reverse_reach_counts(graph, label, ncomp)
    involved = set(waits) | {w for ws in waits.values() for w in ws}
    suspects: list[Suspect] = []
    for comp in range(ncomp):
        members = tuple(int(r) for r in np.flatnonzero(label == comp))
        if leaves[comp] or not (set(members) & involved):
            continue
        waited = int(reach[comp])
        if len(members) == 1 and members[0] in silent_set:
            r = members[0]
            if waited == 0:
                continue
            direct = sorted(k for k, ws in waits.items() if r in ws)
            suspects.append(Suspect(members, "silent", waited, (
                f"rank {r} logged nothing while ranks {direct} wait for it "
                f"({_describe_waiters(topology, last_ops, r, direct)})")))
        elif len(members) == 1:
            r = members[0]
            op = last_ops[r]
            if op.peer is not None:
                continue  # a matched p2p pair that is not waited on: not a culprit by itself
            group = topology.group(r, op.group)
            suspects.append(Suspect(tuple(group), "stuck_collective", waited, (
                f"every member of {topology.group_name(r, op.group)} {list(group)} is in "
                f"{op.op}{'' if op.seq is None else f' #{op.seq}'}: the collective itself does "
                "not progress (suspect its links or NCCL)")))
        else:
            calls = ", ".join(f"{r}:{last_ops[r].op}({last_ops[r].group})" for r in members
                              if r in last_ops)
            suspects.append(Suspect(members, "circular_wait", waited, (
                f"ranks {list(members)} wait for each other in different calls ({calls}): "
                "mismatched collective order")))
    # stuck collectives are found once per member: keep one per group
    uniq: dict[tuple[tuple[int, ...], str], Suspect] = {}
    for s in suspects:
        key = (s.ranks, s.kind)
        if key not in uniq or s.waited_on_by > uniq[key].waited_on_by:
            uniq[key] = s
    ordered = sorted(uniq.values(), key=lambda s: (-s.waited_on_by, s.ranks))
    return HangDiagnosis(tuple(ordered), waits, tuple(sorted(silent_set)))


def _reverse_reach_counts(graph: csr_matrix, label: np.ndarray, ncomp: int) -> np.ndarray:
    """For each component, the number of ranks outside it that can reach it."""
    rev = graph.T.tocsr()
    counts = np.zeros(ncomp, dtype=np.int64)
    for comp in range(ncomp):
        start = np.flatnonzero(label == comp)
        seen = np.zeros(graph.shape[0], dtype=bool)
        seen[start] = True
        frontier = start
        while frontier.size:
            nxt = rev[frontier].indices
            nxt = nxt[~seen[nxt]]
            seen[nxt] = True
            frontier = np.unique(nxt)
        counts[comp] = int(seen.sum()) - start.size
    return counts


def _describe_waiters(topology: Topology, last_ops: Mapping[int, LastOp], target: int,
                      waiters: list[int]) -> str:
    parts = []
    for w in waiters:
        op = last_ops[w]
        where = (f"{op.op} to/from it" if op.peer is not None
                 else f"{op.op} in {topology.group_name(w, op.group)}")
        parts.append(f"{w}: {where}")
    return "; ".join(parts)
