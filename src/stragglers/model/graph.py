"""The dependency model of Megatron-style hybrid parallelism (whatif-model.md §2-§3).

The graph is built once, from DP rank 0 of the first step, over op identities (nodes of
an :class:`~stragglers.trace.table.OpTable`), and serves every DP rank and step. It holds

* intra-worker dependencies (``deps``): an op may not launch before these have ended;
* communication groups (``groups``): an op of a group moves data only once every member
  has launched; ``group_dp_sync`` marks groups that also wait for every DP rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stragglers.errors import ModelError
from stragglers.trace import schema as S
from stragglers.trace.table import OpTable

#: Tolerance of the timing rules that find P2P no-ops (seconds).
NOOP_TOLERANCE = 5e-5


@dataclass
class DependencyGraph:
    """Dependencies and communication groups over the nodes of an op table."""

    n_nodes: int
    deps: list[list[int]]
    groups: list[np.ndarray]
    group_dp_sync: np.ndarray
    group_of: np.ndarray
    noop_timing: np.ndarray
    noop_chunk: np.ndarray
    node_names: list[str] = field(repr=False)

    @property
    def is_comm(self) -> np.ndarray:
        return self.group_of >= 0

    def n_edges(self) -> int:
        return sum(len(d) for d in self.deps)


class _StageOps:
    """The ops of one stage in (start_ts, seq_id, optype) order, split by type."""

    def __init__(self, table: OpTable, stage: int) -> None:
        nodes = np.flatnonzero(table.node_stage == stage)
        st = table.start[nodes, 0, 0]
        en = st + table.duration[nodes, 0, 0]
        names = np.array([S.OPTYPES[c] for c in table.node_optype[nodes]])
        order = np.lexsort((names, table.node_seq[nodes], st))
        self.nodes = nodes[order]
        self.start = dict(zip(self.nodes.tolist(), st[order].tolist(), strict=True))
        self.end = dict(zip(self.nodes.tolist(), en[order].tolist(), strict=True))
        self.by_type: dict[str, list[int]] = {t: [] for t in S.OPTYPES}
        for n, name in zip(self.nodes.tolist(), names[order].tolist(), strict=True):
            self.by_type[name].append(n)
        self.compute = [n for n in self.nodes.tolist()
                        if S.OPTYPES[table.node_optype[n]] in S.COMPUTE_TYPES]


def build_graph(table: OpTable) -> DependencyGraph:
    """Build the dependency graph and communication groups of ``table`` (§2, §3)."""
    meta = table.meta
    n = table.n_nodes
    names = [table.node_name(i) for i in range(n)]
    deps: list[set[int]] = [set() for _ in range(n)]
    noop_timing = np.zeros(n, dtype=bool)
    noop_chunk = np.zeros(n, dtype=bool)
    dp_sync = meta.dp_synchronised
    n_chunks = meta.vpp_size * meta.pp_size
    stages = [_StageOps(table, s) for s in range(meta.pp_size)]
    # Valid (paired) P2P ops per stage and type, in order.
    valid: dict[tuple[int, str], list[int]] = {}

    def chain(ops: list[int]) -> None:
        for a, b in zip(ops, ops[1:], strict=False):
            deps[b].add(a)

    for s, ops in enumerate(stages):
        bt = ops.by_type
        chain(ops.compute)
        for t in S.P2P_TYPES:
            chain(bt[t])
        if dp_sync:
            chain([x for x in ops.nodes.tolist()
                   if S.OPTYPES[table.node_optype[x]] in (S.PARAMS_ALL_GATHER,
                                                           S.GRADS_REDUCE_SCATTER)])
        # §2.4: match P2P ops to the compute of their direction.
        for direction, sign in (("forward", 1), ("backward", -1)):
            comp = bt[f"{direction}-compute"]
            recvs, sends = bt[f"{direction}-recv"], bt[f"{direction}-send"]
            if not comp:
                if recvs or sends:
                    raise ModelError(
                        f"{table.source}: stage {s} has {direction} P2P ops but no "
                        f"{direction}-compute to pair them with (e.g. {names[(recvs or sends)[0]]})"
                    )
                continue
            last_start = max(ops.start[c] for c in comp)
            first_end = ops.end[comp[0]]
            live_r = []
            for r in recvs:
                if ops.start[r] > last_start + NOOP_TOLERANCE:
                    noop_timing[r] = True
                else:
                    live_r.append(r)
            live_s = []
            for x in sends:
                if ops.end[x] < first_end - NOOP_TOLERANCE:
                    noop_timing[x] = True
                else:
                    live_s.append(x)
            edge = s in (0, meta.pp_size - 1)
            for kind, live in (("recv", live_r), ("send", live_s)):
                if len(live) == len(comp):
                    offset = 0
                elif len(live) == len(comp) - 1 and edge:
                    offset = 1 if kind == "recv" else 0
                elif not live:
                    continue
                else:
                    raise ModelError(
                        f"{table.source}: stage {s} has {len(live)} {direction}-{kind} ops that "
                        f"cannot be matched to its {len(comp)} {direction}-compute ops "
                        f"(first unpairable: {names[live[-1]]})"
                    )
                paired = []
                for k, op in enumerate(live):
                    c = comp[k + offset]
                    if kind == "recv":
                        deps[c].add(op)
                        if k + offset >= 1:
                            deps[op].add(comp[k + offset - 1])
                        peer = table.node_gmc[c] - sign
                    else:
                        deps[op].add(c)
                        peer = table.node_gmc[c] + sign
                    if peer < 0 or peer >= n_chunks:
                        noop_chunk[op] = True
                    else:
                        paired.append(op)
                valid[(s, f"{direction}-{kind}")] = paired
        # §2.5: warm-up overlap.
        first_b = next((i for i, c in enumerate(ops.compute)
                        if S.OPTYPES[table.node_optype[c]] == S.BACKWARD_COMPUTE), None)
        if first_b is not None and first_b >= 2:
            f = ops.compute[first_b - 2]
            if S.OPTYPES[table.node_optype[f]] == S.FORWARD_COMPUTE:
                for t in (S.BACKWARD_SEND, S.BACKWARD_RECV):
                    if bt[t]:
                        first = min(bt[t], key=lambda x: table.node_seq[x])
                        deps[first].add(f)
        # §2.6: parameters before use (the last-launched all-gather of each chunk).
        for mc in sorted({int(table.node_mc[x]) for x in bt[S.PARAMS_ALL_GATHER]}):
            ags = [x for x in bt[S.PARAMS_ALL_GATHER] if table.node_mc[x] == mc]
            fwd = [c for c in bt[S.FORWARD_COMPUTE] if table.node_mc[c] == mc]
            if fwd:
                deps[fwd[0]].add(ags[-1])
        overlapped = bool(bt[S.SEPARATE_GRADS_ALL_REDUCE])
        # §2.7: gradients after use.
        if overlapped:
            for mc in sorted({int(table.node_mc[x]) for x in bt[S.GRADS_REDUCE_SCATTER]}):
                rs = [x for x in bt[S.GRADS_REDUCE_SCATTER] if table.node_mc[x] == mc]
                bwd = [c for c in bt[S.BACKWARD_COMPUTE] if table.node_mc[c] == mc]
                if bwd:
                    deps[rs[0]].add(max(bwd, key=lambda c: ops.end[c]))
        # §2.8: end of step.
        tail: list[list[int]] = []
        if dp_sync and overlapped:
            tail = [bt[S.GC], bt[S.LAYERNORM_ALL_REDUCE], bt[S.EMBEDDING_ALL_REDUCE],
                    bt[S.SEPARATE_GRADS_ALL_REDUCE], bt[S.CLIP], bt[S.OPTIMIZER]]
        elif dp_sync:
            tail = [bt[S.GC], bt[S.LAYERNORM_ALL_REDUCE], bt[S.EMBEDDING_ALL_REDUCE],
                    bt[S.GRADS_REDUCE_SCATTER], bt[S.CLIP], bt[S.OPTIMIZER]]
        else:
            tail = [bt[S.GC], bt[S.LAYERNORM_ALL_REDUCE], bt[S.EMBEDDING_ALL_REDUCE],
                    bt[S.CLIP], bt[S.OPTIMIZER]]
        flat = [x for seg in tail for x in seg]
        if ops.compute and bt[S.GC]:
            deps[bt[S.GC][0]].add(max(ops.compute, key=lambda c: ops.end[c]))
        chain(flat)
        if dp_sync and overlapped and bt[S.GRADS_REDUCE_SCATTER] and len(flat) > len(bt[S.GC]):
            deps[flat[len(bt[S.GC])]].add(bt[S.GRADS_REDUCE_SCATTER][-1])

    groups, group_dp = _build_groups(table, stages, valid, noop_timing | noop_chunk, names)
    group_of = np.full(n, -1, dtype=np.int64)
    for g, members in enumerate(groups):
        group_of[members] = g
    return DependencyGraph(
        n_nodes=n, deps=[sorted(d) for d in deps], groups=groups,
        group_dp_sync=np.array(group_dp, dtype=bool), group_of=group_of,
        noop_timing=noop_timing, noop_chunk=noop_chunk, node_names=names,
    )


def _build_groups(table: OpTable, stages: list[_StageOps],
                  valid: dict[tuple[int, str], list[int]], noop: np.ndarray,
                  names: list[str]) -> tuple[list[np.ndarray], list[bool]]:
    meta = table.meta
    pp = meta.pp_size
    dp_sync = meta.dp_synchronised
    groups: list[np.ndarray] = []
    group_dp: list[bool] = []

    def add(members: list[int], sync: bool) -> None:
        groups.append(np.array(members, dtype=np.int64))
        group_dp.append(sync)

    # P2P pairs: forward-send of s with forward-recv of s+1; backward-send of s with
    # backward-recv of s-1 (interleaved schedules wrap around the pipeline).
    wrap = meta.vpp_size > 1
    for s in range(pp):
        for direction, step in (("forward", 1), ("backward", -1)):
            sends = valid.get((s, f"{direction}-send"), [])
            peer = s + step
            if wrap:
                peer %= pp
            recvs = valid.get((peer, f"{direction}-recv"), []) if 0 <= peer < pp else []
            if len(sends) != len(recvs):
                extra = sends[len(recvs)] if len(sends) > len(recvs) else recvs[len(sends)]
                raise ModelError(
                    f"{table.source}: {len(sends)} {direction}-send op(s) of stage {s} but "
                    f"{len(recvs)} matching {direction}-recv op(s) of stage {peer}: "
                    f"{names[extra]} cannot be paired"
                )
            for a, b in zip(sends, recvs, strict=True):
                add([a, b], False)
    paired = {x for g in groups for x in g.tolist()}
    for ops in stages:
        for t in S.P2P_TYPES:
            for x in ops.by_type[t]:
                if x not in paired:
                    if not noop[x]:
                        raise ModelError(f"{table.source}: {names[x]} has no peer")
                    add([x], False)
    # Embedding all-reduce: first and last stage of the same DP rank (by seq_id).
    emb_first = stages[0].by_type[S.EMBEDDING_ALL_REDUCE]
    emb_last = stages[-1].by_type[S.EMBEDDING_ALL_REDUCE] if pp > 1 else []
    if pp > 1 and len(emb_first) != len(emb_last):
        raise ModelError(f"{table.source}: {len(emb_first)} embedding-grads-all-reduce op(s) on "
                         f"stage 0 but {len(emb_last)} on stage {pp - 1}: cannot pair them")
    for k, a in enumerate(emb_first):
        add([a, emb_last[k]] if pp > 1 else [a], False)
    for s in range(1, pp - 1):
        if stages[s].by_type[S.EMBEDDING_ALL_REDUCE]:
            raise ModelError(f"{table.source}: embedding-grads-all-reduce on middle stage {s}: "
                             "it belongs only to the first and last stage")
    # Gradient clipping: all stages, all DP ranks.
    clips = [ops.by_type[S.CLIP] for ops in stages]
    if len({len(c) for c in clips}) > 1:
        raise ModelError(f"{table.source}: stages record different numbers of {S.CLIP} ops "
                         f"({[len(c) for c in clips]}): cannot form its group")
    for k in range(len(clips[0])):
        add([c[k] for c in clips], dp_sync)
    # DP collectives: synchronised across the DP ranks of one stage.
    if dp_sync:
        for ops in stages:
            for t in (S.PARAMS_ALL_GATHER, S.GRADS_REDUCE_SCATTER, S.SEPARATE_GRADS_ALL_REDUCE):
                for x in ops.by_type[t]:
                    add([x], True)
    return groups, group_dp
