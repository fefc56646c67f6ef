"""A worker — one DP rank × PP stage position (TP/CP ranks collapsed) — and its "d,s" key."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np


class Worker(NamedTuple):
    """Worker ``(dp_rank, stage)``; its key in result.json is ``"dp_rank,stage"``."""

    dp_rank: int
    stage: int

    @property
    def key(self) -> str:
        return f"{self.dp_rank},{self.stage}"

    @classmethod
    def parse(cls, key: str) -> Worker:
        """``"d,s"`` → Worker; raises ValueError on anything else."""
        d, s = key.split(",")
        return cls(int(d), int(s))


def worker_mask(workers: Iterable[Worker], dp: int, pp: int) -> np.ndarray:
    """Boolean (dp, pp) mask of ``workers``."""
    mask = np.zeros((dp, pp), dtype=bool)
    for w in workers:
        mask[w.dp_rank, w.stage] = True
    return mask


def workers_by_flat_index(indices: Iterable[int], pp: int) -> tuple[Worker, ...]:
    """Workers of flat indices ``d * pp + s``, in the given order."""
    return tuple(Worker(int(i) // pp, int(i) % pp) for i in indices)


def names(workers: Iterable[Worker], limit: int = 8) -> str:
    """"1,0, 2,3 (+4 more)": at most ``limit`` keys."""
    ws = list(workers)
    text = ", ".join(w.key for w in ws[:limit])
    return text + (f" (+{len(ws) - limit} more)" if len(ws) > limit else "")
