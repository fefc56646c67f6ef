"""JSON-lines records read by the detectors and the ``stragglers watch`` command.

One JSON object per line (UTF-8).  The record kind is given by ``"kind"`` or, when absent,
inferred from the fields (``iter`` -> iteration record, ``busy`` -> step record,
``src``/``dst`` -> message record, ``type`` -> call record).  Values are taken as they are,
never converted: an integer field holding ``3.0``, ``"3"`` or ``true`` is an error, and so
is a number that is not finite.
Fields outside the schema are allowed (they are counted by ``watch``, see
:func:`unknown_fields`).

Call record (``"kind": "call"``): one communication call as an NCCL/gloo shim or a probe logs it
(:class:`~stragglers.callrecord.CallRecord`, whose ``to_dict`` writes the line).

============  ========  ======================================================================
field         type      meaning
============  ========  ======================================================================
``rank``      int >= 0  global rank that issued the call
``type``      str       call type, e.g. ``"allreduce"``, ``"allgather"``, ``"send"``
``size``      int >= 0  message size in bytes
``ts``        number    start timestamp in seconds (any epoch; non-decreasing per rank)
``group``     str|list  optional communication group: a name (``"dp0"``) or the list of its
                        global ranks as :mod:`stragglers.probe` writes it (named ``"[1,3]"``)
``duration``  number    optional transfer time of the call in seconds (>= 0)
``wait``      number    optional time spent waiting for peers before the transfer (>= 0)
``step``      int >= -1 optional training step (written by the probe, -1 before the first
                        step; kept, not used)
``peer``      int >= 0  optional peer rank of a point-to-point call (kept, not used)
============  ========  ======================================================================

Iteration record (``"kind": "iter"``): a framework or probe that knows its iteration boundaries.

============  ========  ======================================================================
``rank``      int >= 0  rank
``iter``      int >= 0  the job's iteration number (increasing per rank; see ``watch`` for
                        restarts and jumps)
``ts``        number    optional end timestamp of the iteration in seconds
``duration``  number    optional iteration time in seconds (> 0); if absent, the difference of
                        consecutive ``ts`` of the same rank is used
============  ========  ======================================================================

At least one of ``ts`` and ``duration`` is required.

Step record (``"kind": "step"``, format version 1): one training step of one rank as the loop
probe and the framework callbacks write it (:mod:`stragglers.probe.loop`, one
``steps-rank-NNNNN.jsonl`` per rank in the probe folder). ``watch`` detects on ``busy``: the
rank's own time, not the time it waited for the others.

============  ========  ======================================================================
``v``         int       optional format version; only ``1`` is read (a later version is a
                        ``bad_field``, not misread)
``rank``      int >= 0  global rank
``step``      int >= 0  the training step (increasing per rank, as ``iter``)
``ts``        number    optional end of the step in seconds (the probe: on rank 0's clock)
``busy``      number    seconds of the step that the rank spent on its own work (> 0): the
                        time from the end of its previous step (the start of the first one)
                        to the end of this one, less ``wait``: compute, host time, data
                        loading
``wait``      number    seconds of the step spent waiting in synchronisation with the other
                        ranks (>= 0): the gradient synchronisation, a collective before the
                        forward, the probe's own clock alignment
============  ========  ======================================================================

Message record (``"kind": "msg"``): one transport-level message (C4D delay matrix).

============  ========  ======================================================================
``src``       int >= 0  sending rank
``dst``       int >= 0  receiving rank
``latency``   number    message latency in seconds (>= 0)
``size``      int >= 0  optional message size in bytes
``wait``      number    optional time the receiver waited for the data (>= 0)
============  ========  ======================================================================

Integers are limited to 64 bits (``0 <= value < 2**63``) and rank ids (``rank``, ``peer``,
``src``, ``dst``, the ranks of a ``group``) to 32 bits (``0 <= value < 2**31``); a line is
limited to ``STRAGGLERS_MAX_RECORD_BYTES`` bytes (1 MiB) and a JSON value to 1,024 levels of nesting
(the parser's own limit).  Every problem is a :class:`RecordError` whose message names the
source, the line and the field.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stragglers.callrecord import CallRecord, rank_list_name
from stragglers.errors import InputError
from stragglers.inputs import DuplicateKey, loads_unique, open_regular
from stragglers.limits import check_limit, limit

__all__ = [
    "CallRecord",
    "IterationRecord",
    "MessageRecord",
    "Record",
    "RecordError",
    "StepRecord",
    "decode_json",
    "iter_file_lines",
    "parse_line",
    "parse_record",
    "other_kinds",
    "rank_field",
    "read_records",
    "unknown_fields",
]

INT_MAX = 2**63 - 1
#: Largest rank id (``rank``, ``peer``, ``src``, ``dst``, the ranks of a ``group``): rank ids
#: are 32-bit (what torch.distributed and NCCL use, and the service's database columns).
RANK_MAX = 2**31 - 1
_RANK_FIELDS = frozenset({"rank", "peer", "src", "dst"})

KNOWN_FIELDS: dict[str, frozenset[str]] = {
    "call": frozenset({"kind", "rank", "type", "size", "ts", "group", "duration", "wait",
                       "step", "peer"}),
    "iter": frozenset({"kind", "rank", "iter", "ts", "duration"}),
    "msg": frozenset({"kind", "src", "dst", "latency", "size", "wait"}),
    "step": frozenset({"kind", "v", "rank", "step", "ts", "busy", "wait"}),
}
#: The step record format version this module reads (field ``v``).
STEP_FORMAT_VERSION = 1


class RecordError(InputError):
    """A JSON-lines record that cannot be used; the message names source, line and field.

    ``reason`` is a short key (``not_json``, ``not_utf8``, ``bad_field``, ``not_object``,
    ``unknown_kind``, ``too_long``) by which ``watch`` counts the records it skips;
    ``iteration`` is the job's iteration number of the record when it could be read.
    """

    def __init__(self, message: str, reason: str = "bad_field",
                 iteration: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.iteration = iteration  # the job iteration the bad record stands for, when readable


@dataclass(frozen=True, slots=True)
class IterationRecord:
    rank: int
    iter: int
    ts: float | None = None
    duration: float | None = None


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One training step of one rank: its own time (``busy``) and its synchronisation wait
    (``wait``), seconds; ``ts`` its end."""

    rank: int
    step: int
    busy: float
    wait: float
    ts: float | None = None

    def as_iteration(self) -> IterationRecord:
        """The iteration record ``watch`` detects on: the rank's busy time per step."""
        return IterationRecord(rank=self.rank, iter=self.step, ts=self.ts, duration=self.busy)


@dataclass(frozen=True, slots=True)
class MessageRecord:
    src: int
    dst: int
    latency: float
    size: int | None = None
    wait: float | None = None


Record = CallRecord | IterationRecord | MessageRecord | StepRecord


def _shown(obj: dict[str, Any], field: str) -> str:
    if field not in obj:
        return "missing"
    return shown_value(obj[field])


def shown_value(value: Any) -> str:
    """A JSON value for an error message: at most 60 characters, ASCII only (so that no line
    separator such as U+0085 or U+2028 can split the one-line message)."""
    text = orjson.dumps(value).decode()
    text = text if len(text) <= 60 else text[:57] + "..."
    return text.encode("ascii", "backslashreplace").decode("ascii")


class _Ctx:
    __slots__ = ("obj", "where")

    def __init__(self, obj: dict[str, Any], where: str) -> None:
        self.obj = obj
        self.where = where

    def fail(self, field: str, what: str) -> RecordError:
        return RecordError(f"{self.where}: field '{field}': expected {what}, got "
                           f"{_shown(self.obj, field)}")

    def int_(self, field: str, required: bool = True, low: int = 0) -> int | None:
        v = self.obj.get(field)
        if v is None:
            if required:
                raise self.fail(field, f"an integer >= {low}")
            return None
        high = RANK_MAX if field in _RANK_FIELDS else INT_MAX
        if type(v) is not int or not low <= v <= high:
            raise self.fail(field, f"an integer >= {low}" if type(v) is not int or v < low
                            else f"a rank id <= {high} (32 bits)" if high == RANK_MAX
                            else f"an integer <= {high} (64 bits)")
        return v

    def num(self, field: str, required: bool = True, positive: bool = False,
            nonneg: bool = True) -> float | None:
        v = self.obj.get(field)
        if v is None:
            if required:
                raise self.fail(field, "a number")
            return None
        t = type(v)
        if t is float:
            if not math.isfinite(v):
                raise self.fail(field, "a finite number")
        elif t is int:
            v = float(v)
        else:
            raise self.fail(field, "a number")
        if positive and v <= 0:
            raise self.fail(field, "a number > 0")
        if nonneg and v < 0:
            raise self.fail(field, "a number >= 0")
        return float(v)

    def str_(self, field: str, required: bool = True) -> str | None:
        v = self.obj.get(field)
        if v is None:
            if required:
                raise self.fail(field, "a non-empty string")
            return None
        if type(v) is not str or not v:
            raise self.fail(field, "a non-empty string")
        if _CONTROL.search(v) is not None:
            raise self.fail(field, "a string without control characters (NUL, newline, ...)")
        return v

    def group(self) -> str | None:
        v = self.obj.get("group")
        if v is None:
            return None
        if type(v) is str and v:
            if _CONTROL.search(v) is not None:
                raise self.fail("group", "a group name without control characters (NUL, "
                                "newline, ...)")
            return v
        if type(v) is list and v and all(type(x) is int and 0 <= x <= RANK_MAX for x in v):
            return rank_list_name(tuple(sorted(v)))
        if type(v) is list and v and all(type(x) is int for x in v):
            raise self.fail("group", f"a non-empty list of rank ids 0..{RANK_MAX} (32 bits)")
        raise self.fail("group", "a non-empty string or a non-empty list of ranks")


def record_kind(obj: dict[str, Any]) -> str | None:
    """The kind of a decoded record (``call``, ``iter``, ``msg``, ``step``), or None when
    unknown."""
    kind = obj.get("kind")
    if kind is None:
        if "iter" in obj:
            return "iter"
        if "busy" in obj:
            return "step"
        if "src" in obj or "dst" in obj:
            return "msg"
        if "type" in obj:
            return "call"
        return None
    return kind if type(kind) is str and kind in KNOWN_FIELDS else None


def unknown_fields(obj: dict[str, Any], kind: str) -> list[str]:
    """Fields of ``obj`` that the schema of ``kind`` does not know (e.g. a misspelling)."""
    known = KNOWN_FIELDS[kind]
    return [k for k in obj if k not in known]


def parse_record(obj: Any, *, source: str = "<input>", line: int = 0) -> Record:
    """Validate one decoded JSON value and return the typed record (raises :class:`RecordError`)."""
    where = f"{source}:{line}"
    if type(obj) is not dict:
        raise RecordError(f"{where}: expected a JSON object, got {_json_type(obj)}",
                          "not_object")
    c = _Ctx(obj, where)
    kind = record_kind(obj)
    if kind == "iter":
        ts = c.num("ts", required=False, nonneg=False)
        dur = c.num("duration", required=False, positive=True)
        if ts is None and dur is None:
            raise c.fail("ts", "a number (an iteration record needs 'ts' or 'duration')")
        return IterationRecord(rank=c.int_("rank"), iter=c.int_("iter"), ts=ts,  # type: ignore
                               duration=dur)
    if kind == "call":
        step = c.int_("step", required=False, low=-1)  # -1: before the first step
        peer = c.int_("peer", required=False)
        return CallRecord(
            rank=c.int_("rank"), type=c.str_("type"), size=c.int_("size"),  # type: ignore[arg-type]
            ts=c.num("ts", nonneg=False),  # type: ignore[arg-type]
            group=c.group(), duration=c.num("duration", required=False),
            wait=c.num("wait", required=False), step=step, peer=peer,
        )
    if kind == "step":
        v = obj.get("v")
        if v is not None and (type(v) is not int or v != STEP_FORMAT_VERSION):
            raise c.fail("v", f"{STEP_FORMAT_VERSION} (the step record format version this "
                         "stragglers reads)")
        return StepRecord(rank=c.int_("rank"), step=c.int_("step"),  # type: ignore[arg-type]
                          busy=c.num("busy", positive=True),  # type: ignore[arg-type]
                          wait=c.num("wait"),  # type: ignore[arg-type]
                          ts=c.num("ts", required=False, nonneg=False))
    if kind == "msg":
        return MessageRecord(
            src=c.int_("src"), dst=c.int_("dst"), latency=c.num("latency"),  # type: ignore
            size=c.int_("size", required=False), wait=c.num("wait", required=False),
        )
    if "kind" in obj:
        raise RecordError(f"{where}: field 'kind': expected one of 'call', 'iter', 'msg', "
                          f"'step', got {_shown(obj, 'kind')}", "unknown_kind")
    raise RecordError(f"{where}: field 'kind': cannot tell the record kind (no 'kind', 'iter', "
                      "'busy', 'type' or 'src' field)", "unknown_kind")


def _json_type(obj: Any) -> str:
    return {list: "an array", str: "a string", int: "a number", float: "a number",
            bool: "a boolean", type(None): "null"}.get(type(obj), type(obj).__name__)


#: Control characters, refused in the text fields of a record (a NUL is not storable text on
#: PostgreSQL, a newline or an escape sequence would change what a log or terminal shows).
_CONTROL = re.compile("[\x00-\x1f\x7f]")
#: The end of an object key (a string, then its colon): counted to notice a key given twice.
_KEY_END = re.compile(r'"\s*:')
_KEY_END_B = re.compile(rb'"\s*:')


def _duplicate_key(text: str) -> str | None:
    """The first key given twice in one object of the JSON ``text`` (None when there is
    none), found by the standard parser (orjson silently keeps the last of equal keys)."""
    try:
        loads_unique(text)
    except DuplicateKey as exc:
        return exc.key
    except (ValueError, RecursionError):
        return None
    return None


def decode_json(data: bytes | str, where: str) -> Any:
    """Decode one JSON text; errors name ``where`` and say whether the bytes are not UTF-8.
    A key given twice in an object is refused (the reader would keep one of them silently)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as uexc:
            raise RecordError(f"{where}: not UTF-8 text (bad byte at column {uexc.start + 1})",
                              "not_utf8") from None
        msg = str(exc).split(": line ")[0]
        if msg.startswith("number is infinity"):
            msg = "number out of range (a float beyond 1.8e308, or an integer this long)"
        raise RecordError(f"{where}: not valid JSON ({msg} at column {exc.colno})",
                          "not_json") from None
    if type(value) is dict:
        # fewer keys than key ends in the text: nested objects, a string holding '":', or a
        # key given twice; only the last is worth the second, exact parse
        ends = _KEY_END_B.findall(data) if isinstance(data, bytes) else _KEY_END.findall(data)
        if len(ends) > len(value):
            text = data.decode("utf-8") if isinstance(data, bytes) else data
            key = _duplicate_key(text)
            if key is not None:
                raise RecordError(f"{where}: field '{shown_value(key)[1:-1]}': given twice (which "
                                  "one to take is not said)", "bad_field")
    return value


def parse_line(text: bytes | str, *, source: str = "<input>", line: int = 0,
               max_bytes: int | None = None) -> Record | None:
    """Parse one JSON-lines line; blank lines give ``None``.  Lines longer than ``max_bytes``
    (default: the ``record_bytes`` limit) are refused."""
    if not text.strip():
        return None
    cap = limit("record_bytes") if max_bytes is None else max_bytes
    if len(text) > cap:
        raise RecordError(f"{source}:{line}: record of {len(text):,} bytes exceeds the limit of "
                          f"{cap:,} (set STRAGGLERS_MAX_RECORD_BYTES to raise it)", "too_long")
    return parse_record(decode_json(text, f"{source}:{line}"), source=source, line=line)


def iter_file_lines(path: str | Path, what: str = "JSON-lines file"
                    ) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of every line of a file, read in large blocks.

    The file must exist and be a regular file (not a folder, a named pipe, a device or a
    socket: :func:`~stragglers.inputs.open_regular`); a line longer than the ``record_bytes`` limit
    is refused (:class:`RecordError`) without being held in memory whole.
    """
    p = Path(path)
    cap = limit("record_bytes")
    lineno = 0
    try:
        # a regular file only: a named pipe, a device or a socket is refused before reading
        with open_regular(p, what) as fh:
            rest = b""
            while True:
                block = fh.read(1 << 20)
                if not block:
                    break
                parts = (rest + block).split(b"\n")
                rest = parts.pop()
                for part in parts:
                    lineno += 1
                    yield lineno, part
                if len(rest) > cap:
                    raise RecordError(f"{p}:{lineno + 1}: record longer than the limit of "
                                      f"{cap:,} bytes (set STRAGGLERS_MAX_RECORD_BYTES to raise "
                                      "it)", "too_long")
            if rest:
                yield lineno + 1, rest
    except OSError as exc:
        raise InputError(f"{p}: cannot read the {what} ({exc.strerror or exc})") from None


def read_records(path: str | Path) -> list[Record]:
    """Read a whole JSON-lines file strictly (any bad line raises :class:`RecordError`).

    At most ``detect_records`` records are read (checked before each is kept)."""
    cap = limit("detect_records")
    line_cap = limit("record_bytes")
    out: list[Record] = []
    source = str(path)
    for lineno, raw in iter_file_lines(path):
        rec = parse_line(raw, source=source, line=lineno, max_bytes=line_cap)
        if rec is not None:
            if len(out) >= cap:
                check_limit("detect_records", len(out) + 1, f"{source}:{lineno}")
            out.append(rec)
    return out


def other_kinds(records: Sequence[Record], wanted: type) -> dict[str, int]:
    """Records of other kinds than ``wanted``, counted by kind (``call``, ``iter``, ``msg``):
    what a command that reads one kind reports as skipped, rather than dropping silently."""
    names = {CallRecord: "call", IterationRecord: "iter", MessageRecord: "msg",
             StepRecord: "step"}
    return dict(sorted(Counter(names[type(r)] for r in records if type(r) is not wanted).items()))


def rank_field(obj: dict[str, Any], key: str, size: int, where: str) -> int:
    """Field ``key`` of ``obj``, which must be a rank ``0..size-1`` (``where``: file:line)."""
    v = obj[key]
    if type(v) is not int or not 0 <= v < size:
        raise InputError(f"{where}: field '{key}': expected an integer 0..{size - 1}, got "
                         f"{shown_value(v)}")
    return v
