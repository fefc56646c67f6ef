"""Where each rank sits in the job: DP rank, pipeline stage, and its tensor/context-parallel
index (ranks of the same DP rank and stage collapse into one worker, represented by the rank
whose TP/CP index is 0, i.e. the lowest rank of its tensor-parallel group).

From the trace's ``distributedInfo.pg_config`` when it describes the rank's
``DATA_PARALLEL_GROUP`` / ``PIPELINE_MODEL_PARALLEL_GROUP`` / ``TENSOR_MODEL_PARALLEL_GROUP``
(the rank's index in the group's ``ranks``), else from the metadata's sizes in Megatron's
rank order (tensor fastest, then context, data, pipeline):
``rank = inner + tp*cp * (dp_rank + dp_size * stage)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from stragglers.errors import InputError
from stragglers.kineto.reader import Group
from stragglers.trace.io import JobMeta

_DP_RE = re.compile(r"^DATA_PARALLEL_GROUP$|^mp_dp\b|^dp$")
_PP_RE = re.compile(r"^PIPELINE_MODEL_PARALLEL_GROUP$|^pp$")
_TP_RE = re.compile(r"^TENSOR_MODEL_PARALLEL_GROUP$|^tp$")


@dataclass(frozen=True)
class Position:
    """A rank's place in the job."""

    rank: int
    dp_rank: int
    stage: int
    inner: int  # index among the TP x CP ranks of its worker; 0 represents the worker
    source: str  # "pg_config" or "megatron order"


def megatron_position(rank: int, meta: JobMeta) -> Position:
    inner_size = meta.tp_size * meta.dsp_size
    inner = rank % inner_size
    dp = (rank // inner_size) % meta.dp_size
    stage = rank // (inner_size * meta.dp_size)
    return Position(rank, dp, stage, inner, "megatron order")


def _own_group(pg_config: list[Any], rx: re.Pattern[str], rank: int, source: str
               ) -> tuple[int, ...] | None:
    for g in pg_config:
        if not isinstance(g, dict):
            continue
        desc = str(g.get("pg_desc", ""))
        ranks = g.get("ranks")
        if rx.search(desc) and isinstance(ranks, list) and rank in ranks:
            bad = [r for r in ranks if isinstance(r, bool) or not isinstance(r, int)]
            if bad:  # not dropped: the rank's index in the group is its position
                raise InputError(f"{source}: distributedInfo.pg_config {desc[:60]}: field "
                                 f"'ranks' holds {bad[0]!r:.40}, not a rank")
            return tuple(ranks)
    return None


def position(rank: int, pg_config: list[Any], meta: JobMeta, source: str) -> Position:
    """The rank's position: pg_config groups where named, Megatron's order otherwise."""
    if rank >= meta.world_size:
        raise InputError(f"{source}: distributedInfo field 'rank' {rank} is outside the "
                         f"metadata's world_size {meta.world_size}")
    base = megatron_position(rank, meta)
    dp_g = _own_group(pg_config, _DP_RE, rank, source)
    pp_g = _own_group(pg_config, _PP_RE, rank, source)
    tp_g = _own_group(pg_config, _TP_RE, rank, source)
    if dp_g is None and pp_g is None and tp_g is None:
        return base
    for name, g, size in (("DATA_PARALLEL_GROUP", dp_g, meta.dp_size),
                          ("PIPELINE_MODEL_PARALLEL_GROUP", pp_g, meta.pp_size),
                          ("TENSOR_MODEL_PARALLEL_GROUP", tp_g, meta.tp_size)):
        if g is not None and len(g) != size:
            raise InputError(f"{source}: distributedInfo.pg_config {name} has {len(g)} ranks "
                             f"but the metadata says {size}")
    dp = dp_g.index(rank) if dp_g else base.dp_rank
    stage = pp_g.index(rank) if pp_g else base.stage
    inner = tp_g.index(rank) if tp_g else base.inner
    return Position(rank, dp, stage, inner, "pg_config")


class JobLayout:
    """Every rank's (DP rank, stage, TP/CP index) in the job: the traced ranks' own
    positions, Megatron's order for the others; and the class of a process group."""

    def __init__(self, meta: JobMeta, known: dict[int, Position]) -> None:
        world = meta.world_size
        self.meta = meta
        pos = [known.get(r) or megatron_position(r, meta) for r in range(world)]
        self.dp = np.array([p.dp_rank for p in pos])
        self.stage = np.array([p.stage for p in pos])
        self.inner = np.array([p.inner for p in pos])

    def group_class(self, g: Group | None) -> str:
        meta = self.meta
        whole_is_dp = meta.pp_size == 1 and meta.tp_size == 1 and meta.dsp_size == 1
        if g is None or (g.ranks is None and g.size is None):
            return "dp" if whole_is_dp else "unknown"
        if g.ranks is None:
            if g.size == meta.world_size:
                return "dp" if whole_is_dp else "world"
            return "dp" if whole_is_dp else "unknown"
        r = np.array([x for x in g.ranks if 0 <= x < meta.world_size], dtype=np.int64)
        if r.size != len(g.ranks) or r.size == 0:
            return "unknown"
        if r.size == meta.world_size and not whole_is_dp:
            return "world"
        st, dp, inner = self.stage[r], self.dp[r], self.inner[r]
        same_st, same_dp = (st == st[0]).all(), (dp == dp[0]).all()
        if same_st and not same_dp and (inner == inner[0]).all():
            return "dp"
        if same_st and same_dp:
            return "tp"
        if same_dp and set(st.tolist()) == {0, meta.pp_size - 1} and r.size == 2:
            return "embedding"
        if same_dp:
            return "pp"
        return "other"


#: Process-group classes (:meth:`JobLayout.group_class`); codes are the index.
CLASSES = ("unknown", "dp", "world", "embedding", "tp", "pp", "other")
