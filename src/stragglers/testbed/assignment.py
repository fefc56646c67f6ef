"""Live S2 in the example job: a per-DP micro-batch assignment applied at a step boundary.

The controller (``stragglers mitigate run``) writes an *action file* atomically; the job polls
it at the top of every step (``--action-file``). The file is one JSON object::

    {"schema": "stragglers.action/1", "seq": 3, "step": 120, "kind": "microbatch",
     "assignment": [3, 5]}

``seq`` (integer >= 1) numbers the actions: an action with a ``seq`` not above the last one
taken is stale and ignored. ``step`` (integer >= 0) is the first step it applies to: it is
taken at the start of the first step ``>= step`` (a step already past applies at the next
step boundary). ``assignment`` gives each DP replica's micro-batch count ``m_i >= 1`` with
``sum m_i = dp * M`` (``M`` = ``--microbatches``).

Every rank applies it at the same step: rank 0 reads the file (only when its modification
time or size changed) and broadcasts the assignment in effect over the world group at the
top of every step, a collective every rank takes part in unconditionally (no deadlock: no
rank's participation depends on what it read). A file that is not valid is logged (one line
on stderr naming the file and field), counted and ignored; the job never stops for it.

Loss and gradients are unchanged by the assignment. Global micro-batch ``g`` (``0 <= g <
dp * M``) always holds the data of ``(replica g // M, micro-batch g % M)`` of the even
split, and replica ``i`` runs the global micro-batches ``o_i .. o_i + m_i - 1`` with
``o_i = m_0 + ... + m_{i-1}``: the samples of a step are the same whatever the assignment.
Each micro-batch's loss is divided by ``M`` and the DP gradient reduction sums, then divides
by ``dp``: every micro-batch contributes ``loss_g / (dp * M)`` wherever it runs, which is the
weighted averaging the assignment needs (only the order of the float sums changes).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from stragglers.errors import InputError
from stragglers.inputs import read_text
from stragglers.mitigate.action import ACTION_SCHEMA, MicrobatchAction, parse_action

__all__ = ["ACTION_SCHEMA", "LiveAssignment", "MicrobatchAction", "parse_action"]

class LiveAssignment:
    """The micro-batch assignment in effect on one rank of the example job.

    Without an action file it is the even split and :meth:`poll` does nothing (no
    collective). With one, :meth:`poll` must be called by every rank at the top of every
    step (see the module docstring)."""

    def __init__(self, action_file: str, rank: int, dp: int, dp_rank: int, microbatches: int,
                 device: Any) -> None:
        self.path = Path(action_file) if action_file else None
        self.rank, self.dp, self.dp_rank, self.m = rank, dp, dp_rank, microbatches
        self.device = device
        self.counts: tuple[int, ...] = (microbatches,) * dp
        self.seq = 0
        self.pending: MicrobatchAction | None = None
        self.seen: tuple[int, int] | None = None  # (mtime_ns, size) of the last file read
        self.applied: list[dict[str, Any]] = []
        self.errors = 0
        self.stale = 0

    # -- rank 0: the file ---------------------------------------------------------------
    def _read(self) -> None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        except OSError as exc:
            self._error(f"{self.path}: cannot read the action file ({exc.strerror or exc})")
            return
        key = (st.st_mtime_ns, st.st_size)
        if key == self.seen:
            return
        self.seen = key
        try:
            action = parse_action(read_text(self.path, "action file"), str(self.path),
                                  self.dp, self.m)
        except InputError as exc:
            self._error(str(exc))
            return
        latest = self.pending.seq if self.pending is not None else self.seq
        if action.seq <= latest:
            self.stale += 1
            return
        self.pending = action

    def _error(self, message: str) -> None:
        self.errors += 1
        print(f"stragglers example job: action ignored: {message}", file=sys.stderr, flush=True)

    # -- every rank ---------------------------------------------------------------------
    def poll(self, step: int) -> None:
        """At the top of ``step``: take the pending action if its step has come (rank 0),
        then agree on the assignment in effect (a broadcast from rank 0)."""
        if self.path is None:
            return
        import torch
        import torch.distributed as dist

        if self.rank == 0:
            self._read()
            if self.pending is not None and self.pending.step <= step:
                self.seq, self.counts = self.pending.seq, self.pending.assignment
                self.pending = None
        state = torch.tensor([self.seq, *self.counts], dtype=torch.int64, device=self.device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.broadcast(state, src=0)
        seq, *counts = (int(v) for v in state.tolist())
        if seq != (self.applied[-1]["seq"] if self.applied else 0):
            self.applied.append({"seq": seq, "step": step, "assignment": counts})
        self.seq, self.counts = seq, tuple(counts)

    def count(self) -> int:
        """Micro-batches this rank's replica runs in the current step."""
        return self.counts[self.dp_rank]

    def source(self, mb: int) -> tuple[int, int]:
        """``(replica, micro-batch)`` of the even split whose data local micro-batch ``mb``
        of this replica carries (its global micro-batch, see the module docstring)."""
        g = sum(self.counts[:self.dp_rank]) + mb
        return g // self.m, g % self.m

    def report(self) -> dict[str, Any]:
        """What happened: the assignments taken (seq, first step, counts), errors, stale."""
        return {"action_file": str(self.path) if self.path else None, "applied": self.applied,
                "errors": self.errors, "stale": self.stale}
