"""Communication call records: what a hooked ``torch.distributed`` call queues in the probe,
the JSON line it becomes in ``calls-rank-NNNNN.jsonl``, and the switch that keeps calls out
of the log.

:mod:`stragglers.probe.hooks` creates the records (through
:meth:`~stragglers.probe.recorder.Probe.record_call`), the probe's flusher writes them; both
import this module, which imports neither.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple


class EventStamp(NamedTuple):
    """A time taken on the GPU: a recorded ``torch.cuda.Event`` and the index of the probe's
    clock anchor it is read against."""

    event: Any
    anchor: int


#: A timer reading: the CPU clock (seconds) or a CUDA event.
Stamp = float | EventStamp


@dataclass(slots=True)
class CallRecord:
    """One communication call: its type (the ``torch.distributed`` function name), message
    size in bytes, the global ranks of its process group, the peer of a P2P call, the
    training step it was made in (-1 before the first step), and its start and end."""

    call_type: str
    size: int
    group: tuple[int, ...]
    peer: int | None
    step: int
    start: Stamp
    end: Stamp


def call_line(rank: int, call: CallRecord, start: float, end: float, offset: float) -> str:
    """The JSON line of ``call`` made by ``rank``, with its start and end (local clock,
    seconds) and the rank's clock offset to rank 0 (see :mod:`stragglers.probe.hooks`)."""
    rec: dict[str, Any] = {
        "rank": rank, "type": call.call_type, "size": call.size, "ts": start + offset,
        "duration": end - start, "group": list(call.group), "step": call.step,
    }
    if call.peer is not None:
        rec["peer"] = call.peer
    return json.dumps(rec)


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
