"""JSON-lines records read by the detectors and the ``stragglers watch`` command.

One JSON object per line.  The record kind is given by ``"kind"`` or, when absent, inferred from
the fields (``iter`` -> iteration record, ``src``/``dst`` -> message record, ``type`` -> call
record).  Unknown extra fields are ignored.

Call record (``"kind": "call"``): one communication call as an NCCL/gloo shim or a probe logs it.

============  ========  ======================================================================
field         type      meaning
============  ========  ======================================================================
``rank``      int >= 0  global rank that issued the call
``type``      str       call type, e.g. ``"allreduce"``, ``"allgather"``, ``"send"``
``size``      int >= 0  message size in bytes
``ts``        number    start timestamp in seconds (any epoch; non-decreasing per rank)
``group``     str       optional communication group name, e.g. ``"dp0"``
``duration``  number    optional transfer time of the call in seconds (>= 0)
``wait``      number    optional time spent waiting for peers before the transfer (>= 0)
============  ========  ======================================================================

Iteration record (``"kind": "iter"``): a framework or probe that knows its iteration boundaries.

============  ========  ======================================================================
``rank``      int >= 0  rank
``iter``      int >= 0  iteration number (increasing per rank)
``ts``        number    optional end timestamp of the iteration in seconds
``duration``  number    optional iteration time in seconds (> 0); if absent, the difference of
                        consecutive ``ts`` of the same rank is used
============  ========  ======================================================================

At least one of ``ts`` and ``duration`` is required.

Message record (``"kind": "msg"``): one transport-level message (C4D delay matrix).

============  ========  ======================================================================
``src``       int >= 0  sending rank
``dst``       int >= 0  receiving rank
``latency``   number    message latency in seconds (>= 0)
``size``      int >= 0  optional message size in bytes
``wait``      number    optional time the receiver waited for the data (>= 0)
============  ========  ======================================================================
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stragglers.errors import InputError

__all__ = [
    "CallRecord",
    "IterationRecord",
    "MessageRecord",
    "Record",
    "RecordError",
    "parse_line",
    "parse_record",
    "read_records",
]


class RecordError(InputError):
    """A JSON-lines record that cannot be used; the message names source, line and field."""


@dataclass(frozen=True, slots=True)
class CallRecord:
    rank: int
    type: str
    size: int
    ts: float
    group: str | None = None
    duration: float | None = None
    wait: float | None = None


@dataclass(frozen=True, slots=True)
class IterationRecord:
    rank: int
    iter: int
    ts: float | None = None
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class MessageRecord:
    src: int
    dst: int
    latency: float
    size: int | None = None
    wait: float | None = None


Record = CallRecord | IterationRecord | MessageRecord


class _Ctx:
    def __init__(self, obj: dict[str, Any], source: str, line: int) -> None:
        self.obj = obj
        self.where = f"{source}:{line}"

    def fail(self, field: str, what: str) -> RecordError:
        value = self.obj.get(field, None)
        shown = "missing" if field not in self.obj else json.dumps(value)[:60]
        return RecordError(f"{self.where}: field '{field}': expected {what}, got {shown}")

    def int_(self, field: str, required: bool = True) -> int | None:
        if field not in self.obj or self.obj[field] is None:
            if required:
                raise self.fail(field, "an integer >= 0")
            return None
        v = self.obj[field]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            if isinstance(v, float) and v.is_integer() and v >= 0:
                return int(v)
            raise self.fail(field, "an integer >= 0")
        return v

    def num(self, field: str, required: bool = True, positive: bool = False,
            nonneg: bool = True) -> float | None:
        if field not in self.obj or self.obj[field] is None:
            if required:
                raise self.fail(field, "a number")
            return None
        v = self.obj[field]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(field, "a finite number")
        if positive and v <= 0:
            raise self.fail(field, "a number > 0")
        if nonneg and v < 0:
            raise self.fail(field, "a number >= 0")
        return float(v)

    def str_(self, field: str, required: bool = True) -> str | None:
        if field not in self.obj or self.obj[field] is None:
            if required:
                raise self.fail(field, "a non-empty string")
            return None
        v = self.obj[field]
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if not isinstance(v, str) or not v:
            raise self.fail(field, "a non-empty string")
        return v


def parse_record(obj: Any, *, source: str = "<input>", line: int = 0) -> Record:
    """Validate one decoded JSON value and return the typed record (raises :class:`RecordError`)."""
    if not isinstance(obj, dict):
        raise RecordError(f"{source}:{line}: expected a JSON object, got {type(obj).__name__}")
    c = _Ctx(obj, source, line)
    kind = obj.get("kind")
    if kind is None:
        if "iter" in obj:
            kind = "iter"
        elif "src" in obj or "dst" in obj:
            kind = "msg"
        elif "type" in obj:
            kind = "call"
        else:
            raise RecordError(
                f"{source}:{line}: field 'kind': cannot tell the record kind (no 'kind', 'iter', "
                "'type' or 'src' field)"
            )
    if kind == "call":
        return CallRecord(
            rank=c.int_("rank"), type=c.str_("type"), size=c.int_("size"),  # type: ignore[arg-type]
            ts=c.num("ts", nonneg=False),  # type: ignore[arg-type]
            group=c.str_("group", required=False), duration=c.num("duration", required=False),
            wait=c.num("wait", required=False),
        )
    if kind == "iter":
        ts = c.num("ts", required=False, nonneg=False)
        dur = c.num("duration", required=False, positive=True)
        if ts is None and dur is None:
            raise c.fail("ts", "a number (an iteration record needs 'ts' or 'duration')")
        return IterationRecord(rank=c.int_("rank"), iter=c.int_("iter"), ts=ts,  # type: ignore
                               duration=dur)
    if kind == "msg":
        return MessageRecord(
            src=c.int_("src"), dst=c.int_("dst"), latency=c.num("latency"),  # type: ignore
            size=c.int_("size", required=False), wait=c.num("wait", required=False),
        )
    raise c.fail("kind", "one of 'call', 'iter', 'msg'")


def parse_line(text: str, *, source: str = "<input>", line: int = 0) -> Record | None:
    """Parse one JSON-lines line; blank lines give ``None``."""
    text = text.strip()
    if not text:
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(
            f"{source}:{line}: not valid JSON ({exc.msg} at column {exc.colno})"
        ) from None
    return parse_record(obj, source=source, line=line)


def iter_lines(lines: Iterable[str], source: str) -> Iterator[Record]:
    """Parse lines strictly: the first bad record raises :class:`RecordError`."""
    for i, text in enumerate(lines, start=1):
        rec = parse_line(text, source=source, line=i)
        if rec is not None:
            yield rec


def read_records(path: str | Path) -> list[Record]:
    """Read a whole JSON-lines file strictly (any bad line raises :class:`RecordError`)."""
    p = Path(path)
    try:
        with p.open(encoding="utf-8") as fh:
            return list(iter_lines(fh, str(p)))
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from None
