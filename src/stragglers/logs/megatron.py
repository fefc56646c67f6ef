"""Readers for what Megatron-LM users have: training logs and the ``iteration-time`` JSON.

Training log (``--format megatron-log``)
----------------------------------------
Megatron-LM prints one line per logging interval on the last rank::

     [2025-01-10 07:43:21] iteration      100/  500000 | consumed samples: 51200 | elapsed time
     per iteration (ms): 1234.5 | learning rate: ... | lm loss: ... |

(one line in the log).  A line is an *iteration line* when it holds ``iteration N/ M |``; it
gives an :class:`~stragglers.logs.records.IterationRecord` with ``iter = N``, ``duration`` =
the elapsed time per iteration in seconds (Megatron's average over the logging interval) and
``ts`` = the bracketed timestamp when there is one (read as UTC).  Logs of several ranks can be
combined in one stream when each line carries the rank prefix that ``torchrun`` writes
(``[rank3]:`` or ``[default3]:``); lines without a prefix are rank 0.  Every other line (start-up
messages, timers, evaluation) is *text*: counted, not an error.  An iteration line whose
iteration number or elapsed time cannot be read is a bad record (a :class:`RecordError` naming
the line and the field).

Iteration-time JSON (``--format megatron-json``)
------------------------------------------------
Megatron's functional tests and golden values store ``{"start_step", "end_step",
"step_interval", "values": {step: seconds | "nan"}}``, alone or under the key
``"iteration-time"`` of a file with other curves.  Each value is the time of one iteration
(sampled every ``step_interval`` steps); ``"nan"`` marks a step where the job restarted or did
not log: a *gap*, not data.  Values are taken in increasing step order.  A value that is neither
a positive finite number nor ``"nan"``, and a key that is not an integer step, are bad records
named by their step (their *position*: the index of the value in ``values``, counted from 1,
stands for the line).
"""

from __future__ import annotations

import calendar
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stragglers.errors import InputError
from stragglers.limits import check_limit, limit
from stragglers.logs.records import INT_MAX, IterationRecord, RecordError, shown_value

__all__ = [
    "FORMATS",
    "Gap",
    "MegatronSeries",
    "decide_format",
    "guess_format",
    "parse_log_line",
    "rank_from_content",
    "rank_from_name",
    "read_iteration_json",
    "series_items",
    "sniff_format",
    "sniff_file_format",
]

FORMATS = ("auto", "jsonl", "megatron-log", "megatron-json")

_ITER = re.compile(rb"\biteration\s+(\S+?)\s*/\s*(\S+?)\s*\|")
_ELAPSED = re.compile(rb"elapsed time per iteration \(ms\):\s*([^\s|]*)")
_PREFIX = re.compile(rb"^\s*\[(?:rank|default)(\d{1,9})\]\s*:")
_STAMP = re.compile(rb"^\s*\[(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(\.\d+)?\]")


def _number(raw: bytes) -> float | None:
    try:
        v = float(raw)
    except ValueError:
        return None
    return v


def parse_log_line(text: bytes | str, *, source: str = "<input>", line: int = 0,
                   default_rank: int = 0) -> IterationRecord | None:
    """The iteration record of one Megatron log line; ``None`` for any other line.  The rank
    is the line's ``torchrun`` prefix, else ``default_rank`` (the rank of the file).

    Raises :class:`RecordError` for an iteration line whose fields cannot be read."""
    raw = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    m = _ITER.search(raw)
    if m is None:
        return None
    where = f"{source}:{line}"
    if not raw.isascii():  # ASCII is UTF-8 (the usual log line: no decoding needed)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordError(f"{where}: not UTF-8 text (bad byte at column {exc.start + 1})",
                              "not_utf8") from None
    it_raw = m.group(1)
    if not it_raw.isdigit() or len(it_raw) > 18 or int(it_raw) > INT_MAX:
        raise RecordError(f"{where}: field 'iteration': expected an integer >= 0, got "
                          f"{shown_value(it_raw.decode())}")
    rank = default_rank
    rest = raw[: m.start()]
    pm = _PREFIX.match(rest)
    if pm is not None:
        rank = int(pm.group(1))
        rest = rest[pm.end():]
    it = int(it_raw)
    e = _ELAPSED.search(raw, m.end())
    if e is None:
        raise RecordError(f"{where}: field 'elapsed time per iteration (ms)': missing from "
                          "the iteration line", iteration=it)
    ms = _number(e.group(1))
    if ms is None or not math.isfinite(ms) or ms <= 0:
        raise RecordError(f"{where}: field 'elapsed time per iteration (ms)': expected a "
                          f"number > 0, got {shown_value(e.group(1).decode())}", iteration=it)
    ts: float | None = None
    sm = _STAMP.match(rest)
    if sm is not None:
        secs = _stamp_seconds(sm.group(1))
        if secs is None:
            raise RecordError(f"{where}: field 'timestamp': expected YYYY-MM-DD HH:MM:SS, got "
                              f"{shown_value(sm.group(1).decode())}", iteration=it)
        ts = secs + (float(sm.group(2)) if sm.group(2) else 0.0)
    return IterationRecord(rank=rank, iter=it, ts=ts, duration=ms / 1000.0)


_DAYS: dict[bytes, int | None] = {}  # "YYYY-MM-DD" -> seconds of its midnight (UTC), None: bad


def _stamp_seconds(stamp: bytes) -> float | None:
    """``YYYY-MM-DD HH:MM:SS`` (or with ``T``) read as UTC, in seconds since the epoch; None
    when it is no such time.  The same as ``calendar.timegm(time.strptime(...))`` (seconds
    0-61 as strptime accepts), with the date's midnight computed once per date (strptime
    was a quarter of the cost of a log line)."""
    day = stamp[:10]
    base = _DAYS.get(day, -1)
    if base == -1:
        try:
            base = calendar.timegm(time.strptime(day.decode(), "%Y-%m-%d"))
        except ValueError:
            base = None
        if len(_DAYS) >= 4096:
            _DAYS.clear()
        _DAYS[day] = base
    h, m, s = int(stamp[11:13]), int(stamp[14:16]), int(stamp[17:19])
    if base is None or h > 23 or m > 59 or s > 61:
        return None
    return float(base + 3600 * h + 60 * m + s)


@dataclass(frozen=True)
class Gap:
    """Steps of a Megatron series without data (``"nan"``: a restart or a step not logged)."""

    rank: int
    first_step: int
    last_step: int
    values: int


@dataclass(frozen=True)
class MegatronSeries:
    """An ``iteration-time`` series: steps in increasing order and their values (NaN: gap);
    ``errors`` are the values or keys that could not be read (position, error)."""

    steps: list[int]
    values: list[float]
    errors: list[tuple[int, RecordError]]
    start_step: int | None
    end_step: int | None
    step_interval: int | None


def read_iteration_json(path: str | Path) -> MegatronSeries:
    """Read a Megatron ``iteration-time`` JSON file (see the module docstring).

    A file that cannot be read raises :class:`InputError`, one that is not such a document
    :class:`RecordError` (one line naming the file and the field); single bad values are
    returned in ``errors``."""
    from stragglers.inputs import read_bytes  # YAML behind it: not at watch start-up

    p = Path(path)
    data = read_bytes(p, "iteration-time JSON file", "megatron_json_bytes")
    return parse_iteration_json(data, str(p))


def parse_iteration_json(data: bytes, source: str) -> MegatronSeries:
    """:func:`read_iteration_json` on bytes already read."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"{source}:{exc.lineno}: not valid JSON "
                          f"({str(exc).split(': line ')[0]} at column {exc.colno})",
                          "not_json") from None
    from stragglers.inputs import nesting_depth

    cap = limit("nesting")
    if nesting_depth(doc, cap) > cap:
        raise RecordError(f"{source}: a value nested deeper than {cap} levels (set "
                          "STRAGGLERS_MAX_NESTING to raise the limit)", "not_json")
    if type(doc) is not dict:
        raise RecordError(f"{source}: expected a JSON object with 'values' or "
                          "'iteration-time'", "not_object")
    prefix = ""
    if "values" not in doc and "iteration-time" in doc:
        doc = doc["iteration-time"]
        prefix = "iteration-time."
        if type(doc) is not dict:
            raise RecordError(f"{source}: field 'iteration-time': expected an object, got "
                             f"{shown_value(doc)}")
    values = doc.get("values")
    if type(values) is not dict:
        raise RecordError(f"{source}: field '{prefix}values': expected an object "
                         f"{{step: seconds}}, got {shown_value(values)}")
    meta: dict[str, int | None] = {}
    for key in ("start_step", "end_step", "step_interval"):
        v = doc.get(key)
        if v is not None and (type(v) is not int or v < 0):
            raise RecordError(f"{source}: field '{prefix}{key}': expected an integer >= 0, got "
                             f"{shown_value(v)}")
        meta[key] = v
    check_limit("detect_records", len(values), f"{source}: field '{prefix}values'")
    errors: list[tuple[int, RecordError]] = []
    rows: list[tuple[int, float, int]] = []
    for pos, (key, v) in enumerate(values.items(), start=1):
        where = f"{source}: field '{prefix}values.{key}' (value {pos})"
        if not (key.isdigit() and len(key) <= 18):
            errors.append((pos, RecordError(f"{where}: expected an integer step as the key, "
                                            f"got {shown_value(key)}")))
            continue
        x = _value(v)
        if x is None:
            errors.append((pos, RecordError(f"{where}: expected seconds > 0 or \"nan\", got "
                                            f"{shown_value(v)}", iteration=int(key))))
            continue
        rows.append((int(key), x, pos))
    rows.sort()
    return MegatronSeries(
        steps=[r[0] for r in rows], values=[r[1] for r in rows], errors=errors,
        start_step=meta["start_step"], end_step=meta["end_step"],
        step_interval=meta["step_interval"])


def _value(v: Any) -> float | None:
    if type(v) is str:
        return math.nan if v.strip().lower() == "nan" else None
    if type(v) in (int, float) and math.isfinite(v) and v > 0:
        return float(v)
    return None


def series_items(series: MegatronSeries, rank: int = 0
                 ) -> list[tuple[int, IterationRecord | RecordError | Gap]]:
    """The series as watcher items ``(position, record | error | gap)`` in step order; a run
    of ``"nan"`` values is one :class:`Gap`."""
    items: list[tuple[int, IterationRecord | RecordError | Gap]] = [
        (pos, err) for pos, err in series.errors]
    gap_first: int | None = None
    gap_n = 0
    last_step = 0
    for k, (step, x) in enumerate(zip(series.steps, series.values, strict=True), start=1):
        if x != x:
            if gap_first is None:
                gap_first = step
            gap_n += 1
            last_step = step
            continue
        if gap_first is not None:
            items.append((k - 1, Gap(rank, gap_first, last_step, gap_n)))
            gap_first, gap_n = None, 0
        items.append((k, IterationRecord(rank=rank, iter=step, duration=x)))
    if gap_first is not None:
        items.append((len(series.steps), Gap(rank, gap_first, last_step, gap_n)))
    return items


_DIGITS = re.compile(r"\d+")


def rank_from_name(name: str) -> int | None:
    """The rank of a per-rank log file from its name: the last run of digits in the file name
    without its extensions (``train_rank3.log`` -> 3, ``log_4711_12.out`` -> 12, ``rank-007``
    -> 7); ``None`` when the name holds no digits (or more than 9 in that run)."""
    base = Path(name).name.split(".", 1)[0] or Path(name).name
    runs = _DIGITS.findall(base)
    if not runs or len(runs[-1]) > 9:
        return None
    return int(runs[-1])


_ANY_PREFIX = re.compile(rb"^\s*\[(?:rank|default)(\d{1,9})\]\s*:", re.MULTILINE)


def rank_from_content(head: bytes) -> int | None:
    """The rank of a log from its first bytes: the first ``torchrun`` line prefix
    (``[rank3]:``, ``[default3]:``); ``None`` when there is none."""
    m = _ANY_PREFIX.search(head)
    return None if m is None else int(m.group(1))


def decide_format(head: bytes, at_end: bool = False) -> str | None:
    """The input format from the first bytes of an input, or None while they do not tell
    (read more; ``at_end``: ``head`` is the whole input).

    ``megatron-json`` for one JSON document with ``values``/``iteration-time``; ``jsonl``
    when the first non-blank line is a JSON object (a damaged first record too: the watcher
    counts it); for text: the first complete line that decides, ``megatron-log`` for a line
    with ``iteration N/ M |`` and ``jsonl`` for a JSON object, however much start-up text
    comes before it. An empty input is ``jsonl`` (nothing to read)."""
    text = head.lstrip()
    if not text:
        return "jsonl" if at_end else None
    if text.startswith(b"{"):
        nl = text.find(b"\n")
        if nl < 0 and not at_end:
            if b'"iteration-time"' in text or b'"step_interval"' in text:
                return "megatron-json"  # one document on a line longer than the bytes read
            return None
        first = (text if nl < 0 else text[:nl]).strip()
        if first == b"{":
            return "megatron-json"  # a document over several lines
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError:
            if b'"iteration-time"' in first or b'"step_interval"' in first:
                return "megatron-json"  # one document longer than the bytes looked at
            return "jsonl"  # a bad first record: counted as such by the watcher
        if type(obj) is dict and ("iteration-time" in obj or "values" in obj):
            return "megatron-json"
        return "jsonl"
    lines = text.split(b"\n")
    if not at_end:
        lines.pop()  # perhaps not complete yet
    for line in lines:
        if _ITER.search(line) is not None:
            return "megatron-log"
        body = line.strip()
        if body.startswith(b"{") and body.endswith(b"}"):
            try:
                obj = orjson.loads(body)
            except orjson.JSONDecodeError:
                continue
            if type(obj) is dict:
                return "jsonl"
    return None


def guess_format(head: bytes) -> str:
    """The input format from the first bytes of an input when no more can be read
    (:func:`decide_format` with ``head`` taken as all there is): text that does not decide
    (lines that are neither JSON objects nor iteration lines: a Megatron log still in its
    start-up) is ``megatron-log``, whose other lines the watcher counts as text; bytes that
    are not UTF-8 text are ``jsonl`` (each line a counted bad record). Prefer
    :func:`sniff_format`, which reads on until the input decides."""
    fmt = decide_format(head, at_end=True)
    if fmt is not None:
        return fmt
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not just a character cut at the end
            return "jsonl"
    return "megatron-log"


#: Bytes read at a time while a format is being told.
_SNIFF_CHUNK = 1 << 16


def sniff_format(read: Callable[[int], bytes], source: str,
                 max_bytes: int | None = None) -> tuple[str, bytes]:
    """``--format auto``: read from ``read`` (a file's or a stream's ``read``) until the
    input decides its format (:func:`decide_format`) or ends, at most ``max_bytes``
    (``format_probe_bytes``); returns the format and the bytes read, which the caller
    reads first (nothing of a pipe is lost). An input that ends, or reaches the limit,
    without deciding is an :class:`InputError` naming it: give ``--format``."""
    cap = limit("format_probe_bytes") if max_bytes is None else max_bytes
    buf = b""
    while True:
        chunk = read(min(_SNIFF_CHUNK, cap + 1 - len(buf)))
        if isinstance(chunk, str):  # a text stream (tests, embedding)
            chunk = chunk.encode("utf-8", "surrogateescape")
        buf += chunk
        at_end = not chunk
        fmt = decide_format(buf, at_end=at_end)
        if fmt is not None:
            return fmt, buf
        if at_end or len(buf) > cap:
            break
    what = "its" if at_end else f"its first {cap:,} bytes"
    raise InputError(f"{source}: cannot tell the format from {what}: no JSON record and no "
                     "Megatron iteration line ('iteration N/ M |'); give --format jsonl, "
                     "megatron-log or megatron-json (set STRAGGLERS_MAX_FORMAT_PROBE_BYTES to "
                     "read further)")


def sniff_file_format(path: str) -> str:
    """:func:`sniff_format` of a regular file (it is not kept open)."""
    from stragglers.inputs import open_regular

    with open_regular(path, "input file") as fh:
        try:
            return sniff_format(fh.read, path)[0]
        except OSError as exc:
            raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
