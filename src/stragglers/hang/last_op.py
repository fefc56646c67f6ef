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

from stragglers.errors import InputError
from stragglers.limits import limit
from stragglers.logs.records import decode_json, iter_file_lines, rank_field, shown_value

__all__ = ["HangDiagnosis", "LastOp", "Suspect", "Topology", "hang_report", "localize_hang",
           "read_last_ops"]

GROUP_KINDS = ("tp", "dp", "pp")
#: the groups :func:`localize_hang` knows: the topology's, and ``world`` (every rank: a
#: barrier, a gradient-norm all-reduce)
TRACKED_GROUPS = (*GROUP_KINDS, "world")


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
        if kind == "world":
            return tuple(range(self.size))
        raise ValueError(f"unknown group kind {kind!r}; use one of {', '.join(GROUP_KINDS)}")

    def group_name(self, rank: int, kind: str) -> str:
        if kind == "world":
            return "world"
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
    kind: str  # "silent" | "stuck_collective" | "circular_wait" | "not_joined" (dumps)
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
            # tuples, shared between ranks that wait for the same members (no copies)
            "waits_for": {str(k): v for k, v in sorted(self.waits_for.items())},
        }


P2P_OPS = {"send": "recv", "recv": "send", "isend": "irecv", "irecv": "isend"}


def _same_call(a: LastOp, b: LastOp) -> bool:
    return a.op == b.op and a.group == b.group and (a.seq is None or b.seq is None
                                                     or a.seq == b.seq)


def localize_hang(topology: Topology, last_ops: Mapping[int, LastOp],
                  silent: Iterable[int] | None = None) -> HangDiagnosis:
    """Suspects of a hang (see the module docstring).  Ranks absent from ``last_ops`` are taken
    as silent; ``silent`` may list them explicitly (it must not overlap ``last_ops``).

    Cost: group members and the waits of a collective are computed once per (group, call); the
    waits-for graph routes each shared list of waits through one extra node, so it has O(ranks)
    edges even when half a group waits for the other half; how many ranks wait for each
    candidate is counted with ancestor bitsets over the condensed graph."""
    n = topology.size
    for r, op in last_ops.items():
        topology.coords(r)
        if op.group not in TRACKED_GROUPS:
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
    groups: dict[tuple[str, int], tuple[int, ...]] = {}
    shared: dict[tuple[tuple[int, ...], LastOp], tuple[int, ...]] = {}
    node_of: dict[tuple[int, ...], int] = {}  # extra graph node per shared waits tuple
    rows: list[int] = []
    cols: list[int] = []
    for r, op in last_ops.items():
        if op.peer is not None:
            other = last_ops.get(op.peer)
            matched = (other is not None and other.peer == r
                       and P2P_OPS.get(op.op) == other.op)
            waits[r] = () if matched else (op.peer,)
            if not matched:
                rows.append(r)
                cols.append(op.peer)
            continue
        gkey = (op.group, _group_key(topology, r, op.group))
        members = groups.get(gkey)
        if members is None:
            members = groups[gkey] = topology.group(r, op.group)
        key = (members, op)
        ws = shared.get(key)
        if ws is None:
            ws = shared[key] = tuple(m for m in members if not (
                m in last_ops and _same_call(last_ops[m], op)))
        if r in ws:  # r is not in its own call's set (a seq that matches nobody): own list
            mine = tuple(m for m in ws if m != r)
            waits[r] = mine
            rows += [r] * len(mine)
            cols += mine
            continue
        waits[r] = ws
        if len(ws) <= 1:
            rows += [r] * len(ws)
            cols += ws
            continue
        node = node_of.get(ws)
        if node is None:
            node = node_of[ws] = n + len(node_of)
            rows += [node] * len(ws)
            cols += ws
        rows.append(r)
        cols.append(node)
    total = n + len(node_of)
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(total, total))
    ncomp, label = connected_components(graph, directed=True, connection="strong")
    # Component graph: a component is a sink when no edge leaves it.
    leaves = np.zeros(ncomp, dtype=bool)
    if rows:
        r_a = np.asarray(rows)
        c_a = np.asarray(cols)
        cross = label[r_a] != label[c_a]
        leaves[np.unique(label[r_a[cross]])] = True
    distinct = {id(ws): ws for ws in waits.values()}
    involved = set(waits) | {w for ws in distinct.values() for w in ws}
    rank_label = label[:n]
    order = np.argsort(rank_label, kind="stable")
    bounds = np.flatnonzero(np.diff(rank_label[order])) + 1
    members_of = {int(rank_label[g[0]]): tuple(sorted(g.tolist()))
                  for g in np.split(order, bounds) if g.size}
    candidates = sorted({int(label[r]) for r in involved if not leaves[int(label[r])]})
    waited_by = waiter_counts(rows, cols, label, ncomp, n, candidates)
    # Direct waiters of a rank, through the shared waits tuples (a rank holds one tuple).
    holders: dict[int, list[int]] = {}
    tuples: dict[int, tuple[int, ...]] = {}
    for k, ws in waits.items():
        if ws:
            holders.setdefault(id(ws), []).append(k)
            tuples[id(ws)] = ws
    refs: dict[int, list[int]] = {}
    for key_id, ws in tuples.items():
        for w in ws:
            if w in silent_set:
                refs.setdefault(w, []).append(key_id)
    stuck_seen: dict[tuple[tuple[int, ...], LastOp], int] = {}
    suspects: list[Suspect] = []
    for comp in candidates:
        members = members_of[comp]
        waited = waited_by[comp]
        if len(members) == 1 and members[0] in silent_set:
            r = members[0]
            if waited == 0:
                continue
            lists = [holders[k] for k in refs.get(r, [])]
            count = sum(len(x) for x in lists)
            direct = sorted(x for lst in lists for x in lst[:16])[:16]
            shown = _few(direct) if count <= 16 else f"{str(direct)[:-1]}, ... ({count} ranks)]"
            suspects.append(Suspect(members, "silent", waited, (
                f"rank {r} logged nothing while ranks {shown} wait for it "
                f"({_describe_waiters(topology, last_ops, r, direct[:8])}"
                f"{'; ...' if count > 8 else ''})")))
        elif len(members) == 1:
            r = members[0]
            op = last_ops[r]
            if op.peer is not None:
                continue  # a matched p2p pair that is not waited on: not a culprit by itself
            group = groups[(op.group, _group_key(topology, r, op.group))]
            at = stuck_seen.get((group, op))
            if at is not None:
                # another member of the same stuck collective: keep the largest count
                prev = suspects[at]
                if waited > prev.waited_on_by:
                    suspects[at] = Suspect(group, prev.kind, waited, prev.reason)
                continue
            stuck_seen[(group, op)] = len(suspects)
            suspects.append(Suspect(tuple(group), "stuck_collective", waited, (
                f"every member of {topology.group_name(r, op.group)} {_few(list(group))} is in "
                f"{op.op}{'' if op.seq is None else f' #{op.seq}'}: the collective itself does "
                "not progress (suspect its links or NCCL)")))
        else:
            calls = ", ".join(f"{r}:{last_ops[r].op}({last_ops[r].group})" for r in members[:8]
                              if r in last_ops)
            suspects.append(Suspect(members, "circular_wait", waited, (
                f"ranks {_few(list(members))} wait for each other in different calls ({calls}"
                f"{', ...' if len(members) > 8 else ''}): mismatched collective order")))
    # stuck collectives are found once per member: keep one per group
    uniq: dict[tuple[tuple[int, ...], str], Suspect] = {}
    for s in suspects:
        key2 = (s.ranks, s.kind)
        if key2 not in uniq or s.waited_on_by > uniq[key2].waited_on_by:
            uniq[key2] = s
    ordered = sorted(uniq.values(), key=lambda s: (-s.waited_on_by, s.ranks))
    return HangDiagnosis(tuple(ordered), waits, tuple(sorted(silent_set)))


def _few(ranks: list[int], shown: int = 16) -> str:
    """``[a, b, c]``, or the first ``shown`` and how many more."""
    if len(ranks) <= shown:
        return str(ranks)
    return f"{str(ranks[:shown])[:-1]}, ... ({len(ranks)} ranks)]"


def _group_key(topology: Topology, rank: int, kind: str) -> int:
    """An id of the ``kind`` group of ``rank`` (equal for all its members)."""
    if kind == "world":
        return 0
    pp_i, dp_i, tp_i = topology.coords(rank)
    if kind == "tp":
        return pp_i * topology.dp + dp_i
    if kind == "dp":
        return pp_i * topology.tp + tp_i
    return dp_i * topology.tp + tp_i


def waiter_counts(rows: list[int], cols: list[int], label: np.ndarray, ncomp: int, n: int,
                  wanted: list[int]) -> dict[int, int]:
    """For each component in ``wanted``: the number of ranks (nodes below ``n``) outside it
    that reach it, i.e. wait for it directly or transitively.

    Ancestor sets are propagated as bitsets over the condensed graph in topological order
    (one pass over its edges; ``components x ranks / 8`` bytes)."""
    if not wanted:
        return {}
    words = (n + 63) // 64
    own = np.zeros((ncomp, words), dtype=np.uint64)
    ranks = np.arange(n)
    np.bitwise_or.at(own, (label[:n], ranks // 64),
                     np.left_shift(np.uint64(1), (ranks % 64).astype(np.uint64)))
    anc = np.zeros((ncomp, words), dtype=np.uint64)
    if rows:
        src = label[np.asarray(rows, dtype=np.int64)]
        dst = label[np.asarray(cols, dtype=np.int64)]
        cross = src != dst
        edges = np.unique(np.stack([src[cross], dst[cross]], axis=1), axis=0)
        indeg = np.bincount(edges[:, 1], minlength=ncomp)
        out_start = np.searchsorted(edges[:, 0], np.arange(ncomp + 1))
        ready = np.flatnonzero(indeg == 0).tolist()
        while ready:
            u = ready.pop()
            targets = edges[out_start[u] : out_start[u + 1], 1]
            if not targets.size:
                continue
            carry = anc[u] | own[u]
            anc[targets] |= carry
            indeg[targets] -= 1
            ready += targets[indeg[targets] == 0].tolist()
    return {c: int(np.bitwise_count(anc[c]).sum()) for c in wanted}


def _describe_waiters(topology: Topology, last_ops: Mapping[int, LastOp], target: int,
                      waiters: list[int]) -> str:
    parts = []
    for w in waiters:
        op = last_ops[w]
        where = (f"{op.op} to/from it" if op.peer is not None
                 else f"{op.op} in {topology.group_name(w, op.group)}")
        parts.append(f"{w}: {where}")
    return "; ".join(parts)


def read_last_ops(path: str, topo: Topology) -> dict[int, LastOp]:
    """The last operation of each rank from a JSON-lines file, one object a rank: ``rank``,
    ``op`` (a non-empty string), ``group`` (``tp``, ``dp`` or ``pp``), optional ``peer`` and
    ``seq``; an :class:`~stragglers.errors.InputError` names the line and the field."""
    ops: dict[int, LastOp] = {}
    cap = limit("record_bytes")
    for i, raw in iter_file_lines(path):
        if not raw.strip():
            continue
        where = f"{path}:{i}"
        if len(raw) > cap:
            raise InputError(f"{where}: record of {len(raw):,} bytes exceeds the limit of "
                             f"{cap:,} (set STRAGGLERS_MAX_RECORD_BYTES to raise it)")
        obj = decode_json(raw, where)
        if type(obj) is not dict:
            raise InputError(f"{where}: expected a JSON object")
        for key in ("rank", "op", "group"):
            if key not in obj:
                raise InputError(f"{where}: field '{key}': missing")
        ops_rank = rank_field(obj, "rank", topo.size, where)
        op = obj["op"]
        if type(op) is not str or not op:
            raise InputError(f"{where}: field 'op': expected a non-empty string, got "
                             f"{shown_value(op)}")
        if obj["group"] not in GROUP_KINDS:
            raise InputError(f"{where}: field 'group': expected tp, dp or pp, got "
                             f"{shown_value(obj['group'])}")
        peer = None if obj.get("peer") is None else rank_field(obj, "peer", topo.size, where)
        seq = obj.get("seq")
        if seq is not None and (type(seq) is not int or not 0 <= seq < 2**63):
            raise InputError(f"{where}: field 'seq': expected an integer >= 0, got "
                             f"{shown_value(seq)}")
        if ops_rank in ops:
            raise InputError(f"{where}: field 'rank': rank {ops_rank} appears twice")
        ops[ops_rank] = LastOp(op=op, group=obj["group"], peer=peer, seq=seq)
    return ops


def hang_report(topo: Topology, logged: int, diag: HangDiagnosis) -> str:
    """The text report of ``stragglers detect hang`` (``logged``: ranks with a last op)."""
    lines = [f"topology dp={topo.dp} pp={topo.pp} tp={topo.tp}: {logged} ranks logged, "
             f"{len(diag.silent)} silent {list(diag.silent)}"]
    if not diag.suspects:
        lines.append("no suspect: nobody waits for a silent rank or a stuck group")
    for sus in diag.suspects:
        lines.append(f"suspect {list(sus.ranks)} [{sus.kind}], waited on by {sus.waited_on_by} "
                     f"ranks: {sus.reason}")
    return "\n".join(lines) + "\n"
