"""The layout of the metadata (``dp_size``, ``pp_size``, ``tp_size``, ``dsp_size``) checked
against what the rank traces show, before anything is built from it.

A contradiction is an :class:`~stragglers.errors.InputError` naming the file, the field and
what contradicts it; nothing is dropped on a layout the trace does not support:

* **positions**: two rank files at the same place in the job (DP rank, stage, TP/CP index);
* **send/recv peers** (``Dst Rank`` / ``Src Rank``, global ranks): a pipeline send or recv
  joins neighbouring stages of one DP rank (or ranks of one worker: TP/CP traffic); a peer
  elsewhere, or outside the job, contradicts the layout;
* **pipeline**: with ``pp_size > 1`` every traced worker sends or receives point-to-point
  through a transfer the import keeps (a ``send``/``recv`` call or kernel that names its peer,
  or a P2P annotation); a worker with none shows no pipeline parallelism (e.g. a
  data-parallel-only job imported with ``pp_size 2``), and a worker whose transfers all lack
  a peer (gloo's ``gloo:send`` ranges) cannot be linked to its neighbours: both refused;
* **tensor/context parallelism**: with ``tp_size * dsp_size > 1`` the ranks of a worker other
  than its TP/CP index 0 are collapsed into it and their files are not read. That needs
  evidence in the trace: a ``TENSOR_MODEL_PARALLEL_GROUP`` / ``CONTEXT_PARALLEL_GROUP`` /
  ``DATA_PARALLEL_GROUP`` / ``PIPELINE_MODEL_PARALLEL_GROUP`` in ``distributedInfo.pg_config``,
  or a collective in a tensor- or data-parallel group of this layout (by its ranks, or by a
  size that only a TP/CP group has). Without any, a rank would be dropped on the metadata's
  word alone: refused (e.g. ``tp_size 2`` on a data-parallel job, which drops the odd ranks).
"""

from __future__ import annotations

import re

import numpy as np

from stragglers.errors import InputError
from stragglers.kineto.layout import CLASSES, JobLayout, Position
from stragglers.kineto.rankops import UNRESOLVED, RankOps
from stragglers.kineto.reader import COMM_CODE
from stragglers.trace import schema
from stragglers.trace.io import JobMeta

_NAMED_GROUP_RE = re.compile(r"^(TENSOR_MODEL|CONTEXT|DATA|PIPELINE_MODEL)_PARALLEL_GROUP$"
                             r"|^(tp|cp|dp|pp)$|^mp_dp\b")
#: Op types and communication kinds of point-to-point transfers.
P2P_OPTYPES = np.array([schema.OPTYPE_CODE[t] for t in (
    schema.FORWARD_SEND, schema.FORWARD_RECV, schema.BACKWARD_SEND, schema.BACKWARD_RECV)])
P2P_KINDS = np.array([COMM_CODE["send"], COMM_CODE["recv"], COMM_CODE["sendrecv"]])
_DIRECTED = np.array([COMM_CODE["send"], COMM_CODE["recv"]])
_DP, _TP = CLASSES.index("dp"), CLASSES.index("tp")


def _where(lay: JobLayout, rank: int) -> str:
    return f"rank {rank} (dp rank {lay.dp[rank]}, stage {lay.stage[rank]})"


def _sizes(meta: JobMeta) -> str:
    return (f"dp_size {meta.dp_size}, pp_size {meta.pp_size}, tp_size {meta.tp_size}, "
            f"dsp_size {meta.dsp_size}")


def check_layout(by_rank: dict[int, RankOps], known: dict[int, Position], lay: JobLayout,
                 meta: JobMeta) -> None:
    """Raise an :class:`InputError` for the first contradiction (module docstring)."""
    _check_positions(by_rank, known)
    read = [ops for _, ops in sorted(by_rank.items()) if not ops.skipped]
    for ops in read:
        _check_peers(ops, lay, meta)
    if meta.pp_size > 1:
        for ops in read:
            if known[ops.rank].inner == 0:
                _check_pipeline(ops, lay, meta)
    if meta.tp_size * meta.dsp_size > 1:
        _check_inner(by_rank, known, lay, meta)


def _check_positions(by_rank: dict[int, RankOps], known: dict[int, Position]) -> None:
    seen: dict[tuple[int, int, int], int] = {}
    for rank in sorted(by_rank):
        p = known[rank]
        key = (p.dp_rank, p.stage, p.inner)
        if key in seen:
            other = seen[key]
            raise InputError(
                f"{by_rank[rank].path}: distributedInfo ({p.source}) puts rank {rank} at dp "
                f"rank {p.dp_rank}, stage {p.stage}, TP/CP index {p.inner}, where rank {other} "
                f"({by_rank[other].path}) already is")
        seen[key] = rank


def _check_peers(ops: RankOps, lay: JobLayout, meta: JobMeta) -> None:
    kind = ops.comm
    p2p = (ops.optype == UNRESOLVED) & ((kind == COMM_CODE["send"]) | (kind == COMM_CODE["recv"]))
    p2p &= ops.peer >= 0
    if not p2p.any():
        return
    peer = ops.peer
    outside = p2p & (peer >= meta.world_size)
    inside = np.clip(peer, 0, meta.world_size - 1)
    me = ops.rank
    same_dp = lay.dp[inside] == lay.dp[me]
    d_stage = np.abs(lay.stage[inside] - lay.stage[me])
    bad = outside | (p2p & ~(same_dp & (d_stage <= 1)))
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    send = kind[i] == COMM_CODE["send"]
    field = "Dst Rank" if send else "Src Rank"
    where = f"{ops.path}: traceEvents[{ops.idx[i]}]: field '{field}' {peer[i]}"
    if outside[i]:
        raise InputError(f"{where} is outside the metadata's world_size {meta.world_size}")
    what = f"a send to {_where(lay, int(peer[i]))}" if send else \
        f"a recv from {_where(lay, int(peer[i]))}"
    raise InputError(
        f"{where}: {what} on {_where(lay, me)} contradicts the layout ({_sizes(meta)}): "
        "pipeline send/recv joins neighbouring stages of one DP rank")


def _check_pipeline(ops: RankOps, lay: JobLayout, meta: JobMeta) -> None:
    """Only the transfers the import keeps link the stages: P2P annotations, and send/recv
    calls or kernels that name their peer. Those without one (gloo's ``gloo:send`` ranges,
    a batch's ``SendRecv`` kernel) are dropped and counted (:mod:`.assemble`)."""
    p2p = (ops.optype == UNRESOLVED) & np.isin(ops.comm, P2P_KINDS)
    linked = np.isin(ops.optype, P2P_OPTYPES) | (
        p2p & np.isin(ops.comm, _DIRECTED) & (ops.peer >= 0))
    if linked.any():
        return
    where = f"{ops.path}: metadata field 'pp_size' is {meta.pp_size}, but"
    if p2p.any():
        raise InputError(
            f"{where} none of the {int(p2p.sum())} send/recv calls of {_where(lay, ops.rank)} "
            "names its peer ('Dst Rank' / 'Src Rank'; e.g. gloo:send ranges): the pipeline "
            "stages cannot be linked (name them with record_function ranges forward-send, "
            "forward-recv, backward-send, backward-recv, or record them under NCCL)")
    raise InputError(
        f"{where} {_where(lay, ops.rank)} records no send/recv (no point-to-point call, kernel "
        "or annotation): the trace shows no pipeline parallelism")


def _inner_evidence(by_rank: dict[int, RankOps], known: dict[int, Position], lay: JobLayout,
                    meta: JobMeta) -> bool:
    """Whether the traces show tensor/context parallelism (module docstring)."""
    for ops in by_rank.values():
        for g in ops.pg_config:
            if isinstance(g, dict) and _NAMED_GROUP_RE.search(str(g.get("pg_desc", ""))):
                return True
    if any(p.source == "pg_config" for p in known.values()):
        return True
    inner_sizes = {meta.tp_size, meta.dsp_size, meta.tp_size * meta.dsp_size} - {
        1, meta.dp_size, meta.world_size}
    for ops in by_rank.values():
        for g in ops.groups:
            if g.ranks is not None and len(set(g.ranks)) > 1:
                if CLASSES.index(lay.group_class(g)) in (_DP, _TP):
                    return True
            elif g.ranks is None and g.size in inner_sizes:
                return True
    return False


def _check_inner(by_rank: dict[int, RankOps], known: dict[int, Position], lay: JobLayout,
                 meta: JobMeta) -> None:
    collapsed = sorted(r for r, p in known.items() if p.inner != 0)
    if not collapsed or _inner_evidence(by_rank, known, lay, meta):
        return
    r = collapsed[0]
    rep = np.flatnonzero((lay.dp == lay.dp[r]) & (lay.stage == lay.stage[r]) & (lay.inner == 0))
    into = f"rank {int(rep[0])}'s worker" if rep.size else "its worker"
    field = "tp_size" if meta.tp_size > 1 else "dsp_size"
    value = meta.tp_size if meta.tp_size > 1 else meta.dsp_size
    raise InputError(
        f"{by_rank[r].path}: metadata field '{field}' is {value}: rank {r} would be collapsed "
        f"into {into} and its trace not read, but nothing in the traces shows tensor/context "
        "parallelism (no TENSOR_MODEL_PARALLEL_GROUP, CONTEXT_PARALLEL_GROUP or "
        "DATA_PARALLEL_GROUP in distributedInfo.pg_config, no collective in a tensor- or "
        "data-parallel group of this layout)")
