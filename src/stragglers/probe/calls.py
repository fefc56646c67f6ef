"""Communication calls in the probe: what a hooked ``torch.distributed`` call queues, the
:class:`~stragglers.callrecord.CallRecord` it becomes once its times are read (one line of
``calls-rank-NNNNN.jsonl``), and the switch that keeps calls out of the log.

:mod:`stragglers.probe.hooks` queues the calls (through
:meth:`~stragglers.probe.recorder.Probe.record_call`), the probe's flusher writes them; both
import this module, which imports neither.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from stragglers.callrecord import CallRecord, rank_list_name


class EventStamp(NamedTuple):
    """A time taken on the GPU: a recorded ``torch.cuda.Event`` and the index of the probe's
    clock anchor it is read against."""

    event: Any
    anchor: int


#: A timer reading: the CPU clock (seconds) or a CUDA event.
Stamp = float | EventStamp


@dataclass(slots=True)
class PendingCall:
    """A communication call queued in the probe, its times not read yet: its type (the
    ``torch.distributed`` function name), message size in bytes, the global ranks of its
    process group, the peer of a P2P call, the training step it was made in (-1 before the
    first step), and its start and end."""

    call_type: str
    size: int
    group: tuple[int, ...]
    peer: int | None
    step: int
    start: Stamp
    end: Stamp

    def record(self, rank: int, start: float, end: float, offset: float) -> CallRecord:
        """The record of this call made by ``rank``, with its start and end read (local
        clock, seconds) and the rank's clock offset to rank 0 (see
        :mod:`stragglers.probe.hooks`)."""
        return CallRecord(rank, self.call_type, self.size, start + offset,
                          rank_list_name(self.group), end - start, step=self.step,
                          peer=self.peer)


_state = threading.local()


def recording_suppressed() -> bool:
    """Whether this thread is inside :func:`suppressed`."""
    return bool(getattr(_state, "depth", 0))


@contextlib.contextmanager
def suppressed() -> Iterator[None]:
    """Within this block (this thread), hooked calls are not recorded: calls nested inside a
    recorded call, and the probe's own clock alignment."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
