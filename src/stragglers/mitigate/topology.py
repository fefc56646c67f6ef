"""S3, topology adjustment (Falcon §5.3): which worker goes where at the next restart.

A *worker* is one (DP rank, pipeline stage) position: ranks are numbered as the synthetic
traces and the probes number them, ``rank // (tp x dsp) = stage x dp_size + dp``. A plan is
a permutation of workers, :attr:`TopologyPlan.position`: the worker that is physically
``w`` (old worker index) takes the position ``position[w]`` (new worker index) at restart;
:meth:`TopologyPlan.rank_permutation` expands it to ranks (the tp x dsp ranks of a worker
move together: tensor parallelism stays inside a node).

* **Straggler consolidation.** Every worker of a stage waits for the slowest of the stage,
  so slow workers cost as many slow stages as they occupy. The plan packs them into the
  minimal ``ceil(#slow / dp_size)`` stages, choosing interior stages first (the first and
  last stages carry the embedding and the loss), among those the stages that already hold
  the most slow workers (fewest moves), then the lower stage index. Slow workers already in a
  chosen stage stay; each other slow worker swaps with a healthy worker of a chosen stage
  (both in (stage, dp) order).
* **Link reassignment.** A slow link between two workers of the same stage carries the
  stage's heavy DP gradient traffic; between the same DP rank of adjacent stages it carries
  the light PP activations. The plan keeps the first worker in place and swaps the second
  with the worker at the first's DP rank in the next stage (the previous one for the last
  stage), so the link joins adjacent stages of one pipeline: it now carries PP traffic only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.trace.io import JobMeta, read_meta

__all__ = ["ConsolidationDetails", "LinkDetails", "Move", "TopologyPlan", "consolidate",
           "plan_topology", "reassign_link"]


@dataclass(frozen=True)
class Move:
    """A worker that changes position: (dp, stage) before and after."""

    worker: int
    src: tuple[int, int]
    dst: tuple[int, int]

    def describe(self) -> str:
        return (f"worker {self.worker}: (dp {self.src[0]}, stage {self.src[1]}) -> "
                f"(dp {self.dst[0]}, stage {self.dst[1]})")

    def to_dict(self) -> dict[str, object]:
        return {"worker": self.worker, "from": list(self.src), "to": list(self.dst)}


@dataclass(frozen=True)
class ConsolidationDetails:
    """What a consolidation changes: the slow workers, their stages before and after, and the
    swaps (pairs of worker indices) that do it."""

    slow_workers: list[int]
    stages_before: list[int]
    stages_after: list[int]
    swaps: list[list[int]]

    def to_dict(self) -> dict[str, object]:
        return {"slow_workers": list(self.slow_workers),
                "stages_before": list(self.stages_before),
                "stages_after": list(self.stages_after),
                "swaps": [list(s) for s in self.swaps]}


@dataclass(frozen=True)
class LinkDetails:
    """A link reassignment: the link's ranks, their workers and the swap (None: nothing
    to move)."""

    link: list[int]
    workers: list[int]
    swaps: list[list[int]] | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"link": list(self.link), "workers": list(self.workers)}
        if self.swaps is not None:
            out["swaps"] = [list(s) for s in self.swaps]
        return out


@dataclass(frozen=True)
class TopologyPlan:
    """A permutation of workers and what it achieves."""

    dp_size: int
    pp_size: int
    inner: int  # ranks per worker (tp x dsp)
    position: np.ndarray  # new worker index of each old worker index
    kind: str  # consolidation | link
    note: str
    details: ConsolidationDetails | LinkDetails

    def where(self, worker: int) -> tuple[int, int]:
        """(dp, stage) of old worker ``worker`` after the plan."""
        p = int(self.position[worker])
        return p % self.dp_size, p // self.dp_size

    @property
    def moves(self) -> list[Move]:
        moved = np.flatnonzero(self.position != np.arange(self.position.size)).tolist()
        return [Move(w, (w % self.dp_size, w // self.dp_size), self.where(w)) for w in moved]

    def rank_permutation(self) -> np.ndarray:
        """New rank of each old rank."""
        ranks = np.arange(self.position.size * self.inner)
        return self.position[ranks // self.inner] * self.inner + ranks % self.inner

    def summary(self) -> str:
        """The note, then one line per worker moved."""
        return "\n".join([self.note, *("  " + mv.describe() for mv in self.moves)])

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "note": self.note, "dp_size": self.dp_size,
                "pp_size": self.pp_size, "moves": [mv.to_dict() for mv in self.moves],
                "worker_position": self.position.tolist(),
                "rank_permutation": self.rank_permutation().tolist(),
                **self.details.to_dict()}


def _workers(meta: JobMeta, ranks: list[int], source: str) -> tuple[int, np.ndarray]:
    inner = meta.tp_size * meta.dsp_size
    n = meta.dp_size * meta.pp_size
    check_limit("topology_ranks", n * inner, f"{source}: ranks of the job")
    arr = np.asarray(ranks, dtype=np.int64)
    bad = np.flatnonzero((arr < 0) | (arr >= n * inner))
    if bad.size:
        raise InputError(f"{source}: rank {int(arr[bad[0]])} is outside the job's "
                         f"{n * inner} ranks")
    return inner, np.unique(arr // inner)


def consolidate(meta: JobMeta, slow_ranks: list[int], source: str = "--slow-ranks"
                ) -> TopologyPlan:
    """Pack the workers of ``slow_ranks`` into the fewest stages, interior first."""
    check_limit("topology_ranks", len(slow_ranks), source)
    inner, slow = _workers(meta, slow_ranks, source)
    dp, pp = meta.dp_size, meta.pp_size
    n = dp * pp
    position = np.arange(n)
    if slow.size == 0:
        raise InputError(f"{source}: no slow ranks given")
    need = math.ceil(slow.size / dp)
    stage_of = slow // dp
    before = sorted({int(s) for s in stage_of})
    per_stage = np.bincount(stage_of, minlength=pp)
    interior = np.ones(pp, dtype=bool)
    if pp > 2:
        interior[[0, pp - 1]] = False
    # interior first, then most slow workers already there, then the lower index
    order = np.lexsort((np.arange(pp), -per_stage, ~interior))
    chosen = np.sort(order[:need])
    in_chosen = np.isin(stage_of, chosen)
    outside = slow[~in_chosen]
    targets = np.concatenate([np.arange(s * dp, (s + 1) * dp) for s in chosen])
    free = targets[~np.isin(targets, slow)]
    pairs = list(zip(outside.tolist(), free[:outside.size].tolist(), strict=True))
    for a, b in pairs:
        position[a], position[b] = b, a
    after = sorted({int(position[w]) // dp for w in slow})
    note = (f"{slow.size} slow worker(s) in {len(before)} stage(s) -> {len(after)} "
            f"(minimum {need}), {len(pairs)} swap(s)")
    return TopologyPlan(dp, pp, inner, position, "consolidation", note,
                        ConsolidationDetails(slow.tolist(), before, after,
                                             [[int(a), int(b)] for a, b in pairs]))


def reassign_link(meta: JobMeta, rank_a: int, rank_b: int, source: str = "--slow-link"
                  ) -> TopologyPlan:
    """Move the slow link between ``rank_a`` and ``rank_b`` from a DP edge onto a PP edge."""
    inner, _ = _workers(meta, [rank_a, rank_b], source)
    dp, pp = meta.dp_size, meta.pp_size
    n = dp * pp
    position = np.arange(n)
    a, b = rank_a // inner, rank_b // inner
    (da, sa), (db, sb) = (a % dp, a // dp), (b % dp, b // dp)
    swaps = None
    if a == b:
        note = "both ranks are in one worker (tensor parallel, inside a node): nothing to move"
    elif da == db and abs(sa - sb) == 1:
        note = "the link already carries PP traffic only: nothing to move"
    elif sa != sb:
        note = "the two workers share no DP or PP group: the link carries no training traffic"
    elif pp < 2:
        raise InputError(f"{source}: one pipeline stage: a DP link cannot become a PP link")
    else:
        target_stage = sa + 1 if sa + 1 < pp else sa - 1
        c = target_stage * dp + da  # the worker whose place b takes
        position[b], position[c] = c, b
        swaps = [[b, c]]
        note = (f"DP edge (stage {sa}, dp {da} <-> dp {db}) -> PP edge (dp {da}, stages "
                f"{min(sa, target_stage)} <-> {max(sa, target_stage)}): swap workers {b} and "
                f"{c}")
    return TopologyPlan(dp, pp, inner, position, "link", note,
                        LinkDetails([int(rank_a), int(rank_b)], [a, b], swaps))


def plan_topology(meta_path: str | Path, slow_ranks: list[int] | None = None,
                  slow_link: tuple[int, int] | None = None) -> TopologyPlan:
    """``mitigate topology``: the consolidation of ``slow_ranks``, else the reassignment of
    ``slow_link``, for the job of the metadata file ``meta_path``."""
    meta = read_meta(meta_path)
    if slow_ranks is not None:
        return consolidate(meta, slow_ranks)
    if slow_link is None:
        raise InputError("give the slow ranks or the slow link")
    return reassign_link(meta, *slow_link)
