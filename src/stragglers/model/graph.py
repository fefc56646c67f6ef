"""The dependency model of Megatron-style hybrid parallelism (whatif-model.md §2-§3).

The graph is built once, from DP rank 0 of the first step, over op identities (nodes of
an :class:`~stragglers.trace.table.OpTable`), and serves every DP rank and step. It holds

* intra-worker dependencies (``deps``): an op may not launch before these have ended;
* communication groups (``groups``): an op of a group moves data only once every member
  has launched; ``group_dp_sync`` marks groups that also wait for every DP rank.

Each rule of the model is one function below, named after the rule and quoting it:
:data:`STAGE_RULES` are the dependency rules of §2, applied to every stage in turn;
:data:`GROUP_RULES` form the communication groups of §3. :func:`build_graph` applies them
in that order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from stragglers.errors import ModelError
from stragglers.trace.schema import (
    ALL_TO_ALL,
    BACKWARD_COMPUTE,
    BACKWARD_RECV,
    BACKWARD_SEND,
    CLIP,
    COMPUTE_TYPES,
    EMBEDDING_ALL_REDUCE,
    FORWARD_COMPUTE,
    FORWARD_RECV,
    FORWARD_SEND,
    GC,
    GRADS_REDUCE_SCATTER,
    LAYERNORM_ALL_REDUCE,
    OPTIMIZER,
    OPTYPES,
    PARAMS_ALL_GATHER,
    SEPARATE_GRADS_ALL_REDUCE,
)
from stragglers.trace.table import OpTable

#: Tolerance of the timing rules that find P2P no-ops (seconds).
NOOP_TOLERANCE = 5e-5

#: The four P2P types, in a fixed order (the order lone no-op groups are formed in).
P2P_ORDER = (FORWARD_SEND, FORWARD_RECV, BACKWARD_SEND, BACKWARD_RECV)

#: Pipeline directions and the step from a compute op's model chunk to the chunk it
#: sends to (a recv receives from the chunk one step the other way).
DIRECTIONS = (("forward", 1), ("backward", -1))


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


class StageOps:
    """The ops of one stage (DP rank 0, first step) in ``(start_ts, seq_id, optype)``
    order, split by type; ``start``/``end`` map a node to its times."""

    def __init__(self, table: OpTable, stage: int) -> None:
        self.stage = stage
        #: The first or the last stage (P2P ops may be missing there, §2.4).
        self.is_edge = stage in (0, table.meta.pp_size - 1)
        nodes = np.flatnonzero(table.node_stage == stage)
        st = table.start[nodes, 0, 0]
        en = st + table.duration[nodes, 0, 0]
        names = np.array([OPTYPES[c] for c in table.node_optype[nodes]])
        order = np.lexsort((names, table.node_seq[nodes], st))
        self.nodes: list[int] = nodes[order].tolist()
        self.start = dict(zip(self.nodes, st[order].tolist(), strict=True))
        self.end = dict(zip(self.nodes, en[order].tolist(), strict=True))
        self.by_type: dict[str, list[int]] = {t: [] for t in OPTYPES}
        #: Compute ops (the compute stream) and their types, in order.
        self.compute: list[int] = []
        self.compute_types: list[str] = []
        for n, name in zip(self.nodes, names[order].tolist(), strict=True):
            self.by_type[name].append(n)
            if name in COMPUTE_TYPES:
                self.compute.append(n)
                self.compute_types.append(name)

    def last_to_end(self, nodes: list[int]) -> int:
        """The node of ``nodes`` that ends last (the first such in ``nodes`` on a tie)."""
        return max(nodes, key=lambda c: self.end[c])


class GraphBuilder:
    """The graph under construction: what the rules read and write."""

    def __init__(self, table: OpTable) -> None:
        n = table.n_nodes
        self.table = table
        self.dp_sync = table.meta.dp_synchronised
        self.names = [table.node_name(i) for i in range(n)]
        self.deps: list[set[int]] = [set() for _ in range(n)]
        self.noop_timing = np.zeros(n, dtype=bool)
        self.noop_chunk = np.zeros(n, dtype=bool)
        #: Paired (valid) P2P ops per (stage, optype), in compute order.
        self.paired: dict[tuple[int, str], list[int]] = {}
        self.groups: list[np.ndarray] = []
        self.group_dp_sync: list[bool] = []

    def depend(self, op: int, on: int) -> None:
        """``op`` may not launch before ``on`` has ended."""
        self.deps[op].add(on)

    def chain(self, ops: list[int]) -> None:
        """Each op of ``ops`` depends on the one before it."""
        for a, b in zip(ops, ops[1:], strict=False):
            self.deps[b].add(a)

    def group(self, members: list[int], dp_sync: bool) -> None:
        self.groups.append(np.array(members, dtype=np.int64))
        self.group_dp_sync.append(dp_sync)

    def error(self, message: str) -> ModelError:
        return ModelError(f"{self.table.source}: {message}")

    def finish(self) -> DependencyGraph:
        group_of = np.full(self.table.n_nodes, -1, dtype=np.int64)
        for g, members in enumerate(self.groups):
            group_of[members] = g
        return DependencyGraph(
            n_nodes=self.table.n_nodes, deps=[sorted(d) for d in self.deps],
            groups=self.groups, group_dp_sync=np.array(self.group_dp_sync, dtype=bool),
            group_of=group_of, noop_timing=self.noop_timing, noop_chunk=self.noop_chunk,
            node_names=self.names,
        )


# ---------------------------------------------------------------------------------------
# §2 Dependencies inside a worker, one stage at a time.


def compute_stream(g: GraphBuilder, ops: StageOps) -> None:
    """§2.1 Compute stream: "all forward/backward compute ops of a worker form one chain"."""
    g.chain(ops.compute)


def p2p_streams(g: GraphBuilder, ops: StageOps) -> None:
    """§2.2 P2P streams: "each of the four P2P types forms its own chain"."""
    for optype in P2P_ORDER:
        g.chain(ops.by_type[optype])


def dp_stream(g: GraphBuilder, ops: StageOps) -> None:
    """§2.3 DP stream (only when ``dp_size * dsp_size > 1``): "``params-all-gather`` and
    ``grads-reduce-scatter`` ops form one chain"."""
    if g.dp_sync:
        dp_types = (PARAMS_ALL_GATHER, GRADS_REDUCE_SCATTER)
        g.chain([x for x in ops.nodes if OPTYPES[g.table.node_optype[x]] in dp_types])


def p2p_to_compute(g: GraphBuilder, ops: StageOps) -> None:
    """§2.4 Matching P2P ops to compute, for direction ``t`` in {forward, backward}: no-ops
    by timing are set aside (:func:`noops_by_timing`); "the remaining recvs are matched in
    order to the ``t-compute`` ops (the k-th recv feeds the k-th compute); likewise sends
    (the k-th send carries the output of the k-th compute)" (:func:`matching_offset`,
    :func:`recv_feeds_compute`, :func:`compute_feeds_send`); matched ops whose peer model
    chunk lies outside the model are no-ops too (:func:`noops_by_chunk`)."""
    gmc = g.table.node_gmc
    for direction, chunk_step in DIRECTIONS:
        compute = ops.by_type[f"{direction}-compute"]
        recvs, sends = ops.by_type[f"{direction}-recv"], ops.by_type[f"{direction}-send"]
        if not compute:
            if recvs or sends:
                raise g.error(
                    f"stage {ops.stage} has {direction} P2P ops but no {direction}-compute to "
                    f"pair them with (e.g. {g.names[(recvs or sends)[0]]})")
            continue
        recvs, sends = noops_by_timing(g, ops, compute, recvs, sends)
        offset = matching_offset(g, ops, direction, "recv", recvs, compute)
        if offset is not None:
            fed = recv_feeds_compute(g, recvs, compute, offset)
            g.paired[(ops.stage, f"{direction}-recv")] = noops_by_chunk(
                g, recvs, [int(gmc[c]) - chunk_step for c in fed])
        offset = matching_offset(g, ops, direction, "send", sends, compute)
        if offset is not None:
            carried = compute_feeds_send(g, sends, compute, offset)
            g.paired[(ops.stage, f"{direction}-send")] = noops_by_chunk(
                g, sends, [int(gmc[c]) + chunk_step for c in carried])


def noops_by_timing(g: GraphBuilder, ops: StageOps, compute: list[int], recvs: list[int],
                    sends: list[int]) -> tuple[list[int], list[int]]:
    """§2.4: "the ``t-recv`` ops that start after the last ``t-compute`` start (+5e-5 s) and
    the ``t-send`` ops that end before the first ``t-compute`` end (−5e-5 s) are *no-ops*";
    "ops that are no-ops by timing get no compute dependency (only their stream chain)".

    Marks them in ``noop_timing``; returns the remaining (live) recvs and sends."""
    last_start = max(ops.start[c] for c in compute)
    first_end = ops.end[compute[0]]
    late = [r for r in recvs if ops.start[r] > last_start + NOOP_TOLERANCE]
    early = [x for x in sends if ops.end[x] < first_end - NOOP_TOLERANCE]
    g.noop_timing[late + early] = True
    noops = set(late + early)
    return [r for r in recvs if r not in noops], [x for x in sends if x not in noops]


def matching_offset(g: GraphBuilder, ops: StageOps, direction: str, kind: str,
                    live: list[int], compute: list[int]) -> int | None:
    """§2.4: "On the first/last stage a direction may have no such ops at all, or exactly
    one fewer recv than computes (then the first compute has no recv)" (and one fewer
    send: then the last compute has no send).

    Returns the position in ``compute`` of the op the first live ``kind`` op is matched to,
    or None when there is nothing to match; raises when the counts cannot be matched."""
    if len(live) == len(compute):
        return 0
    if len(live) == len(compute) - 1 and ops.is_edge:
        return 1 if kind == "recv" else 0
    if not live:
        return None
    raise g.error(
        f"stage {ops.stage} has {len(live)} {direction}-{kind} ops that cannot be matched to "
        f"its {len(compute)} {direction}-compute ops (first unpairable: {g.names[live[-1]]})")


def recv_feeds_compute(g: GraphBuilder, recvs: list[int], compute: list[int],
                       offset: int) -> list[int]:
    """§2.4: "recv k → compute k, and compute k−1 of the same direction → recv k (a recv is
    posted after the previous compute of its direction)". Recv k is matched to
    ``compute[k + offset]``; returns the compute op each recv feeds."""
    for k, recv in enumerate(recvs, start=offset):
        g.depend(compute[k], on=recv)
        if k >= 1:
            g.depend(recv, on=compute[k - 1])
    return compute[offset:offset + len(recvs)]


def compute_feeds_send(g: GraphBuilder, sends: list[int], compute: list[int],
                       offset: int) -> list[int]:
    """§2.4: "compute k → send k". Send k is matched to ``compute[k + offset]``; returns the
    compute op each send carries the output of."""
    for k, send in enumerate(sends, start=offset):
        g.depend(send, on=compute[k])
    return compute[offset:offset + len(sends)]


def noops_by_chunk(g: GraphBuilder, matched: list[int], peer_chunks: list[int]) -> list[int]:
    """§2.4: "A matched op is also a no-op when the peer model chunk ``gmc ± 1`` falls
    outside ``[0, vpp*pp)``"; "ops that are no-ops by model chunk keep the compute
    dependency. Both kinds are unpaired."

    Marks them in ``noop_chunk``; returns the paired ops, in order."""
    n_chunks = g.table.meta.vpp_size * g.table.meta.pp_size
    paired = []
    for op, peer in zip(matched, peer_chunks, strict=True):
        if 0 <= peer < n_chunks:
            paired.append(op)
        else:
            g.noop_chunk[op] = True
    return paired


def warmup_overlap(g: GraphBuilder, ops: StageOps) -> None:
    """§2.5 Warm-up overlap: "the first ``backward-send`` and first ``backward-recv`` (seq 0)
    depend on the forward compute two positions before the first backward compute in the
    compute chain"."""
    types = ops.compute_types
    if BACKWARD_COMPUTE not in types:
        return
    first_backward = types.index(BACKWARD_COMPUTE)
    if first_backward < 2 or types[first_backward - 2] != FORWARD_COMPUTE:
        return
    forward = ops.compute[first_backward - 2]
    for optype in (BACKWARD_SEND, BACKWARD_RECV):
        if ops.by_type[optype]:
            g.depend(min(ops.by_type[optype], key=lambda x: g.table.node_seq[x]), on=forward)


def by_chunk(g: GraphBuilder, nodes: list[int]) -> dict[int, list[int]]:
    """``nodes`` split by model chunk (``mc``), chunks in increasing order, order kept."""
    chunks: dict[int, list[int]] = {}
    for x in nodes:
        chunks.setdefault(int(g.table.node_mc[x]), []).append(x)
    return dict(sorted(chunks.items()))


def params_before_use(g: GraphBuilder, ops: StageOps) -> None:
    """§2.6 Parameters before use: "for each model chunk, its (last-launched)
    ``params-all-gather`` precedes the first forward compute of that chunk"."""
    forward = by_chunk(g, ops.by_type[FORWARD_COMPUTE])
    for mc, gathers in by_chunk(g, ops.by_type[PARAMS_ALL_GATHER]).items():
        if mc in forward:
            g.depend(forward[mc][0], on=gathers[-1])


def grads_after_use(g: GraphBuilder, ops: StageOps) -> None:
    """§2.7 Gradients after use (only with ``separate-grads-all-reduce``): "each model
    chunk's first ``grads-reduce-scatter`` follows the backward compute of that chunk that
    ends last"."""
    if not ops.by_type[SEPARATE_GRADS_ALL_REDUCE]:
        return
    backward = by_chunk(g, ops.by_type[BACKWARD_COMPUTE])
    for mc, scatters in by_chunk(g, ops.by_type[GRADS_REDUCE_SCATTER]).items():
        if mc in backward:
            g.depend(scatters[0], on=ops.last_to_end(backward[mc]))


def end_of_step_chain(dp_sync: bool, overlapped: bool) -> tuple[str, ...]:
    """§2.8 The end-of-step chain, as optypes in order (an absent type is skipped):

    - no DP: ``gc → layernorm-AR → [embedding-AR] → clip → optimizer``;
    - DP, overlapped: ``gc → layernorm-AR → [embedding-AR] → separate-grads-AR → clip →
      optimizer`` (the last ``grads-reduce-scatter`` joins in :func:`end_of_step`);
    - DP, not overlapped: ``gc → layernorm-AR → [embedding-AR] → grads-reduce-scatter
      0..n → clip → optimizer``.
    """
    gradients: tuple[str, ...] = ()
    if dp_sync:
        gradients = (SEPARATE_GRADS_ALL_REDUCE,) if overlapped else (GRADS_REDUCE_SCATTER,)
    return (GC, LAYERNORM_ALL_REDUCE, EMBEDDING_ALL_REDUCE, *gradients, CLIP, OPTIMIZER)


def end_of_step(g: GraphBuilder, ops: StageOps) -> None:
    """§2.8 End of step, per stage: "``gc`` follows the compute op that ends last. Then a
    chain" (:func:`end_of_step_chain`); with overlapped DP collectives the op after ``gc``
    in the chain also follows the last ``grads-reduce-scatter``
    ("``{last grads-reduce-scatter, gc} → layernorm-AR``").

    Extension (the project's model notes, docs/model-extensions.md): a stage without a
    ``gc`` op (profiler traces, any trace without GC spans) hangs the chain's first op off
    the compute op that ends last instead, so the end of the step never floats to its start;
    with a ``gc`` op this is the rule above unchanged."""
    gc = ops.by_type[GC]
    overlapped = bool(ops.by_type[SEPARATE_GRADS_ALL_REDUCE])
    chain = [x for optype in end_of_step_chain(g.dp_sync, overlapped) for x in ops.by_type[optype]]
    if ops.compute and chain:
        g.depend(chain[0], on=ops.last_to_end(ops.compute))
    g.chain(chain)
    scatters = ops.by_type[GRADS_REDUCE_SCATTER]
    after_gc = chain[len(gc):]
    if g.dp_sync and overlapped and scatters and after_gc:
        g.depend(after_gc[0], on=scatters[-1])


def all_to_all_in_compute(g: GraphBuilder, ops: StageOps) -> None:
    """Extension E2 (docs/model-extensions.md): an ``all-to-all`` (expert-parallel dispatch
    or combine, DLRM embeddings) blocks the compute stream. The all-to-all ops of a stage
    form one chain; each follows the compute op launched last before it and the next compute
    op follows it (``compute k → all-to-all → compute k+1``)."""
    a2a = ops.by_type[ALL_TO_ALL]
    if not a2a:
        return
    g.chain(a2a)
    position = {x: i for i, x in enumerate(ops.nodes)}
    where = np.array([position[c] for c in ops.compute], dtype=np.int64)
    for x in a2a:
        k = int(np.searchsorted(where, position[x]))  # compute ops before x: ops.compute[:k]
        if k > 0:
            g.depend(x, on=ops.compute[k - 1])
        if k < len(ops.compute):
            g.depend(ops.compute[k], on=x)


#: The rules of §2, applied to each stage in this order (then the project's extensions).
STAGE_RULES: tuple[Callable[[GraphBuilder, StageOps], None], ...] = (
    compute_stream, p2p_streams, dp_stream, p2p_to_compute, warmup_overlap,
    params_before_use, grads_after_use, end_of_step, all_to_all_in_compute,
)


# ---------------------------------------------------------------------------------------
# §3 Communication groups.


def p2p_pairs(g: GraphBuilder, stages: list[StageOps]) -> None:
    """§3: "each matched P2P pair (the k-th valid ``forward-send`` of stage s with the k-th
    valid ``forward-recv`` of stage s+1; ``backward-send`` of stage s with ``backward-recv``
    of stage s−1; same DP rank)". Interleaved schedules (vpp > 1) wrap around the pipeline."""
    pp = len(stages)
    wrap = g.table.meta.vpp_size > 1
    for s in range(pp):
        for direction, stage_step in DIRECTIONS:
            sends = g.paired.get((s, f"{direction}-send"), [])
            peer = (s + stage_step) % pp if wrap else s + stage_step
            recvs = g.paired.get((peer, f"{direction}-recv"), []) if 0 <= peer < pp else []
            if len(sends) != len(recvs):
                extra = sends[len(recvs)] if len(sends) > len(recvs) else recvs[len(sends)]
                raise g.error(
                    f"{len(sends)} {direction}-send op(s) of stage {s} but {len(recvs)} "
                    f"matching {direction}-recv op(s) of stage {peer}: {g.names[extra]} "
                    "cannot be paired")
            for send, recv in zip(sends, recvs, strict=True):
                g.group([send, recv], False)


def lone_noops(g: GraphBuilder, stages: list[StageOps]) -> None:
    """§3: "each P2P no-op alone". A P2P op that is neither paired nor a no-op is an error."""
    paired = {x for ops in g.paired.values() for x in ops}
    noop = g.noop_timing | g.noop_chunk
    for ops in stages:
        for optype in P2P_ORDER:
            for x in ops.by_type[optype]:
                if x in paired:
                    continue
                if not noop[x]:
                    raise g.error(f"{g.names[x]} has no peer")
                g.group([x], False)


def embedding_all_reduce(g: GraphBuilder, stages: list[StageOps]) -> None:
    """§3: "``embedding-grads-all-reduce`` of the first and last stage (same DP rank; alone
    when pp = 1)", paired by seq_id; it belongs to no other stage."""
    pp = len(stages)
    first = stages[0].by_type[EMBEDDING_ALL_REDUCE]
    if pp == 1:
        for x in first:
            g.group([x], False)
        return
    last = stages[-1].by_type[EMBEDDING_ALL_REDUCE]
    if len(first) != len(last):
        raise g.error(f"{len(first)} embedding-grads-all-reduce op(s) on stage 0 but "
                      f"{len(last)} on stage {pp - 1}: cannot pair them")
    for a, b in zip(first, last, strict=True):
        g.group([a, b], False)
    for ops in stages[1:-1]:
        if ops.by_type[EMBEDDING_ALL_REDUCE]:
            raise g.error(f"embedding-grads-all-reduce on middle stage {ops.stage}: "
                          "it belongs only to the first and last stage")


def clip(g: GraphBuilder, stages: list[StageOps]) -> None:
    """§3: "``optimizer-clip-main-grad`` of all stages", also "synchronised across all DP
    ranks of the same step" when there is DP."""
    clips = [ops.by_type[CLIP] for ops in stages]
    if len({len(c) for c in clips}) > 1:
        raise g.error(f"stages record different numbers of {CLIP} ops "
                      f"({[len(c) for c in clips]}): cannot form its group")
    for members in zip(*clips, strict=True):
        g.group(list(members), g.dp_sync)


def dp_collectives(g: GraphBuilder, stages: list[StageOps]) -> None:
    """§3: "``params-all-gather``, ``grads-reduce-scatter``, ``separate-grads-all-reduce``
    [...] are in addition synchronised across all DP ranks of the same step (without DP,
    i.e. ``dp_size * dsp_size = 1``, the three DP collectives are local ops)"."""
    if not g.dp_sync:
        return
    for ops in stages:
        for optype in (PARAMS_ALL_GATHER, GRADS_REDUCE_SCATTER, SEPARATE_GRADS_ALL_REDUCE):
            for x in ops.by_type[optype]:
                g.group([x], True)


def all_to_all(g: GraphBuilder, stages: list[StageOps]) -> None:
    """Extension E2: each ``all-to-all`` is a collective synchronised across all DP ranks of
    its stage in the same step (its group is the stage's DP ranks; alone without DP): no
    member moves data before the last one has launched, so the ranks that wait for a late
    one are not charged for it (its transfer time excludes the wait)."""
    for ops in stages:
        for x in ops.by_type[ALL_TO_ALL]:
            g.group([x], g.dp_sync)


#: The groups of §3, formed in this order (``layernorm-grads-all-reduce`` is in none), then
#: the project's extensions.
GROUP_RULES: tuple[Callable[[GraphBuilder, list[StageOps]], None], ...] = (
    p2p_pairs, lone_noops, embedding_all_reduce, clip, dp_collectives, all_to_all,
)


def build_graph(table: OpTable) -> DependencyGraph:
    """Build the dependency graph and communication groups of ``table`` (§2, §3)."""
    g = GraphBuilder(table)
    stages = [StageOps(table, s) for s in range(table.meta.pp_size)]
    for ops in stages:
        for rule in STAGE_RULES:
            rule(g, ops)
    for group_rule in GROUP_RULES:
        group_rule(g, stages)
    return g.finish()
