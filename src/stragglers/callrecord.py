"""The call record: one communication call, one line of a ``calls-rank-NNNNN.jsonl`` file.

The probe's comm hooks write it (:mod:`stragglers.probe.hooks`), the detectors read it
(:mod:`stragglers.logs.records` validates a line into a :class:`CallRecord`, with the field
table). This module imports nothing of either side, so that both can import it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallRecord", "rank_list_name"]

_RANK_LIST = re.compile(r"\[(?:\d+(?:,\d+)*)?\]")


@functools.lru_cache(maxsize=4096)
def rank_list_name(ranks: tuple[int, ...]) -> str:
    """The group name of a list of global ranks, in the given order: ``"[1,3]"``."""
    return "[" + ",".join(str(r) for r in ranks) + "]"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One communication call: the global rank that made it, its type (e.g. ``"all_reduce"``),
    message size in bytes, start time in seconds, and optionally its group (a name, or a
    rank list named by :func:`rank_list_name`), transfer time, time spent waiting for peers,
    training step and the peer of a point-to-point call.

    ``step`` and ``peer`` go to and come from the line but are not compared: detection does
    not use them."""

    rank: int
    type: str
    size: int
    ts: float
    group: str | None = None
    duration: float | None = None
    wait: float | None = None
    step: int | None = field(default=None, compare=False)
    peer: int | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the line (a rank-list group as the list of its ranks); absent
        optional fields are left out."""
        out: dict[str, Any] = {"rank": self.rank, "type": self.type, "size": self.size,
                               "ts": self.ts}
        if self.duration is not None:
            out["duration"] = self.duration
        if self.wait is not None:
            out["wait"] = self.wait
        if self.group is not None:
            ranks = _group_ranks(self.group)
            out["group"] = self.group if ranks is None else list(ranks)
        if self.step is not None:
            out["step"] = self.step
        if self.peer is not None:
            out["peer"] = self.peer
        return out



@functools.lru_cache(maxsize=4096)
def _group_ranks(name: str) -> tuple[int, ...] | None:
    """The ranks of a rank-list group name, None for another name."""
    if _RANK_LIST.fullmatch(name) is None:
        return None
    return tuple(int(r) for r in name[1:-1].split(",") if r)
