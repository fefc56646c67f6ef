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
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.trace.io import JobMeta

__all__ = ["TopologyPlan", "consolidate", "reassign_link"]


@dataclass(frozen=True)
class TopologyPlan:
    """A permutation of workers and what it achieves."""

    dp_size: int
    pp_size: int
    inner: int  # ranks per worker (tp x dsp)
    position: np.ndarray  # new worker index of each old worker index
    kind: str  # consolidation | link
    note: str
    details: dict[str, Any] = field(default_factory=dict)

    def where(self, worker: int) -> tuple[int, int]:
        """(dp, stage) of old worker ``worker`` after the plan."""
        p = int(self.position[worker])
        return p % self.dp_size, p // self.dp_size

    @property
    def moves(self) -> list[dict[str, Any]]:
        moved = np.flatnonzero(self.position != np.arange(self.position.size))
        return [{"worker": int(w), "from": [int(w) % self.dp_size, int(w) // self.dp_size],
                 "to": list(self.where(int(w)))} for w in moved]

    def rank_permutation(self) -> np.ndarray:
        """New rank of each old rank."""
        ranks = np.arange(self.position.size * self.inner)
        return self.position[ranks // self.inner] * self.inner + ranks % self.inner

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "note": self.note, "dp_size": self.dp_size,
                "pp_size": self.pp_size, "moves": self.moves,
                "worker_position": self.position.tolist(),
                "rank_permutation": self.rank_permutation().tolist(), **self.details}


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
                        {"slow_workers": slow.tolist(), "stages_before": before,
                         "stages_after": after,
                         "swaps": [[int(a), int(b)] for a, b in pairs]})


def reassign_link(meta: JobMeta, rank_a: int, rank_b: int, source: str = "--slow-link"
                  ) -> TopologyPlan:
    """Move the slow link between ``rank_a`` and ``rank_b`` from a DP edge onto a PP edge."""
    inner, _ = _workers(meta, [rank_a, rank_b], source)
    dp, pp = meta.dp_size, meta.pp_size
    n = dp * pp
    position = np.arange(n)
    a, b = rank_a // inner, rank_b // inner
    (da, sa), (db, sb) = (a % dp, a // dp), (b % dp, b // dp)
    details: dict[str, Any] = {"link": [int(rank_a), int(rank_b)], "workers": [a, b]}
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
        details["swaps"] = [[b, c]]
        note = (f"DP edge (stage {sa}, dp {da} <-> dp {db}) -> PP edge (dp {da}, stages "
                f"{min(sa, target_stage)} <-> {max(sa, target_stage)}): swap workers {b} and "
                f"{c}")
    return TopologyPlan(dp, pp, inner, position, "link", note, details)
