"""Stream the ``traceEvents`` array of a Chrome-trace JSON file in batches of parsed events.

The file is read in chunks (``CHUNK`` bytes). In each chunk the event objects are located
with vectorised byte scans (numpy: string quotes, escapes, bracket depth outside strings),
each event's top-level ``"cat"`` value is read from the bytes, and only the events of the
categories the importer uses are parsed (``orjson``, all of a chunk at once); the others are
counted by category without building Python objects (most of a profiler trace: CPU ops,
flow arrows, memory copies other than device<->host ones). The incomplete tail of a chunk is
carried into the next one. Memory stays at a few chunks whatever the file size; any JSON
layout works (Kineto's indented one, or minified). Events whose category is not used are
checked for string and bracket structure only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

CHUNK = 8 << 20
#: The part of the file before the events array (header keys) may not exceed this.
MAX_HEADER = 64 << 20
#: Categories never used by the importer: counted, not parsed (except the events of
#: :data:`PARSE_IF`).
SKIP_CATEGORIES = frozenset({b"cpu_op", b"ac2g", b"fwdbwd", b"gpu_memcpy", b"gpu_memset",
                             b"gpu_user_annotation", b"python_function", b"Trace",
                             b"overhead", b"cuda_profiler_range", b"cpu_instant_event"})
#: Events of these skipped categories that hold one of the byte strings are parsed all the
#: same: ``record_param_comms`` CPU ops, device<->host memory copies.
PARSE_IF: dict[bytes, tuple[bytes, ...]] = {b"cpu_op": (b"record_param_comms",),
                                            b"gpu_memcpy": (b"DtoH", b"HtoD")}
_CAT = b'"cat"'
_ARGS = b'"args"'
_WIDTH = 24


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class EventSyntaxError(Exception):
    """Bytes that are not a JSON event array; ``index`` is the event it was found in (-1:
    before the array)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


@dataclass
class Batch:
    """Parsed events of one chunk, their indices in the array, and what was skipped."""

    events: list[Any]
    index: np.ndarray
    skipped: Counter[str]
    count: int  # events of the chunk, parsed or skipped


def _valid_quotes(b: np.ndarray) -> np.ndarray:
    """Positions of the quotes that delimit strings (not escaped by an odd backslash run)."""
    q = np.flatnonzero(b == 34)
    prev = q[q > 0]
    maybe = prev[b[prev - 1] == 92]
    if not maybe.size:
        return q
    escaped = []
    for pos in maybe.tolist():  # rare: quotes inside strings
        run, j = 0, pos - 1
        while j >= 0 and b[j] == 92:
            run += 1
            j -= 1
        if run % 2:
            escaped.append(pos)
    return np.setdiff1d(q, np.array(escaped, dtype=q.dtype), assume_unique=True)


def _find_all(b: np.ndarray, pattern: bytes) -> np.ndarray:
    """Start positions of ``pattern`` in ``b``."""
    n = len(pattern)
    if b.size < n:
        return np.zeros(0, np.int64)
    cand = np.flatnonzero(b[: b.size - n + 1] == pattern[0])
    for i in range(1, n):
        cand = cand[b[cand + i] == pattern[i]]
    return cand


def _find_array_start(fh: Readable) -> bytes:
    """Read up to the ``[`` of the top-level ``traceEvents``; return the bytes after it."""
    buf = b""
    while True:
        chunk = fh.read(1 << 16 if len(buf) < CHUNK else CHUNK)
        if not chunk:
            raise EventSyntaxError("field 'traceEvents' missing: not a profiler trace", -1)
        buf += chunk
        b = np.frombuffer(buf, np.uint8)
        q = _valid_quotes(b)
        s = np.flatnonzero((b == 123) | (b == 125) | (b == 91) | (b == 93))
        s = s[(np.searchsorted(q, s) % 2) == 0]
        delta = np.where((b[s] == 123) | (b[s] == 91), 1, -1)
        depth_before = np.cumsum(delta) - delta
        for pos in s[(depth_before == 1) & (b[s] == 91)].tolist():
            k = int(np.searchsorted(q, pos)) - 1
            if k >= 1 and buf[q[k - 1] + 1: q[k]] == b"traceEvents" \
                    and buf[q[k] + 1: pos].strip() == b":":
                return buf[pos + 1:]
        if len(buf) > MAX_HEADER:
            raise EventSyntaxError(f"field 'traceEvents' missing: no events array in the "
                                   f"first {MAX_HEADER:,} bytes", -1)


def _scan(buf: bytes, n0: int, only: frozenset[bytes] | None = None
          ) -> tuple[Batch | None, int, bool]:
    """Parse the complete events at the start of ``buf``; returns the batch, the bytes
    consumed and whether the array ended. With ``only``, the events of those categories
    are parsed and all others skipped (not counted by category)."""
    b = np.frombuffer(buf, np.uint8)
    q = _valid_quotes(b)
    s = np.flatnonzero((b == 123) | (b == 125) | (b == 91) | (b == 93) | (b == 44))
    s = s[(np.searchsorted(q, s) % 2) == 0]  # outside strings
    ch = b[s]
    delta = np.where((ch == 123) | (ch == 91), 1, np.where(ch == 44, 0, -1))
    depth = np.cumsum(delta)  # after each char, relative to inside the array
    end_arr = np.flatnonzero(depth < 0)
    stop = int(s[end_arr[0]]) if end_arr.size else len(buf)
    inside = s < stop
    ends = s[inside & (depth == 0) & (delta == -1)]
    last = int(ends[-1]) + 1 if ends.size else 0
    if end_arr.size:
        last = stop
    region = s < last
    starts = s[region & (depth == 1) & (ch == 123)]
    ends = ends[ends < last]
    commas = s[region & (depth == 0) & (ch == 44)]
    if not last:
        return None, 0, bool(end_arr.size)
    # the array's values must be objects separated by single commas
    plain = (starts.size == ends.size and (starts.size == 0 or
             (commas.size in (starts.size - 1, starts.size)
              and not buf[:starts[0] if starts.size else last].strip(b" \t\r\n,")
              and not buf[ends[-1] + 1 if ends.size else 0:last].strip(b" \t\r\n,"))))
    if not plain:  # scalars or nested arrays as events: parse everything, let the reader
        body = buf[:last].strip().lstrip(b",")  # name the offending element
        try:
            events = orjson.loads(b"[" + body + b"]") if body else []
        except orjson.JSONDecodeError as exc:
            raise EventSyntaxError(f"not valid JSON ({exc})", n0) from None
        return Batch(events, np.arange(n0, n0 + len(events)), Counter(), len(events)), last, \
            bool(end_arr.size)
    n = starts.size
    keep = np.ones(n, bool) if only is None else np.zeros(n, bool)
    skipped: Counter[str] = Counter()
    cat = _find_all(b[:last], _CAT)
    if cat.size and n:
        k = np.searchsorted(q, cat)
        ok = (k + 3 < q.size)
        k, cat = k[ok], cat[ok]
        ok = (q[k] == cat) & (k % 2 == 0) & (q[k + 1] == cat + 4)
        k, cat = k[ok], cat[ok]
        owner = np.searchsorted(starts, cat, "right") - 1
        di = np.searchsorted(s, cat, "right") - 1
        top = (owner >= 0) & (depth[np.clip(di, 0, None)] == 1)
        k, owner = k[top], owner[top]
        v0, v1 = q[k + 2] + 1, q[k + 3]
        width = np.minimum(v1 - v0, _WIDTH)
        idx = np.minimum(v0[:, None] + np.arange(_WIDTH), len(buf) - 1)
        vals = np.where(np.arange(_WIDTH) < width[:, None], b[idx], 0).astype(np.uint8)
        names, inv = np.unique(vals.view(f"S{_WIDTH}").ravel(), return_inverse=True)
        if only is not None:
            keep[owner[np.array([nm in only for nm in names.tolist()], bool)[inv]]] = True
        skip_name = np.array([nm in SKIP_CATEGORIES for nm in names.tolist()], bool)
        skip = skip_name[inv]
        if only is None and skip.any():
            for category, patterns in PARSE_IF.items():
                of_cat = np.array([nm == category for nm in names.tolist()], bool)[inv]
                if not (skip & of_cat).any():
                    continue
                hit = np.zeros(n, bool)
                for pattern in patterns:
                    at = np.searchsorted(starts, _find_all(b[:last], pattern), "right") - 1
                    hit[at[at >= 0]] = True
                skip &= ~(of_cat & hit[owner])
            keep[owner[skip]] = False
            for code, count in zip(*np.unique(inv[skip], return_counts=True), strict=True):
                skipped[names[code].decode("utf-8", "replace")] += int(count)
    kept = np.flatnonzero(keep)
    if only is None:
        body = b",".join([buf[a: e + 1] for a, e in zip(starts[kept].tolist(),
                                                         ends[kept].tolist(), strict=True)])
    else:  # the second pass needs no arguments: an event's "args" object is left out
        lo, hi = _args_objects(buf, b, q, s, ch, depth, last, starts, n)
        body = b",".join([buf[a: c] + b'"args":{}' + buf[d + 1: e + 1] if c >= 0 else
                          buf[a: e + 1] for a, e, c, d in
                          zip(starts[kept].tolist(), ends[kept].tolist(),
                              lo[kept].tolist(), hi[kept].tolist(), strict=True)])
    try:
        events = orjson.loads(b"[" + body + b"]")
    except orjson.JSONDecodeError:
        for i in kept.tolist():  # the error path: find the event
            try:
                orjson.loads(buf[starts[i]: ends[i] + 1])
            except orjson.JSONDecodeError as exc:
                raise EventSyntaxError(f"not valid JSON ({exc})", n0 + i) from None
        raise
    return Batch(events, n0 + kept, skipped, n), last, bool(end_arr.size)


def _args_objects(buf: bytes, b: np.ndarray, q: np.ndarray, s: np.ndarray, ch: np.ndarray,
                  depth: np.ndarray, last: int, starts: np.ndarray, n: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per event: the byte range [lo, hi] from its top-level ``"args"`` key to the end of
    its object value (-1 where it has none). Vectorised."""
    lo = np.full(n, -1)
    hi = np.full(n, -1)
    key = _find_all(b[:last], _ARGS)
    if not key.size or not n:
        return lo, hi
    k = np.searchsorted(q, key)
    ok = k + 1 < q.size
    k, key = k[ok], key[ok]
    ok = (q[k] == key) & (k % 2 == 0) & (q[k + 1] == key + len(_ARGS) - 1)
    key = key[ok]
    i = np.searchsorted(s, key + len(_ARGS))  # the first structural byte after the key
    ok = i < s.size
    key, i = key[ok], i[ok]
    ok = (ch[i] == 123) & (depth[i] == 2)  # an object, the value of an event's own key
    key, i = key[ok], i[ok]
    top = np.flatnonzero(depth == 1)  # its end: the first byte back at the event's level
    j = np.searchsorted(top, i, "right")
    ok = j < top.size
    key, j = key[ok], top[j[ok]]
    owner = np.searchsorted(starts, key, "right") - 1
    lo[owner], hi[owner] = key, s[j]
    return lo, hi


def iter_event_batches(fh: Readable, trailer: list[bytes] | None = None,
                       only: frozenset[bytes] | None = None) -> Iterator[Batch]:
    """Yield the used events of the ``traceEvents`` array, in batches, in file order. With
    ``trailer`` (a list), the bytes after the array (the top-level keys that follow it, up
    to ``MAX_HEADER``) are appended to it once the array has ended. With ``only`` (a set of
    categories), only the events of those categories are parsed (a second pass for what the
    first one skipped)."""
    buf = _find_array_start(fh)
    n = 0
    while True:
        batch, used, ended = _scan(buf, n, only)
        if batch is not None:
            yield batch
            n += batch.count
        if ended:
            if trailer is not None:
                trailer.append(_rest(buf[used + 1:], fh))
            return
        buf = buf[used:]
        chunk = fh.read(CHUNK)
        if not chunk:
            raise EventSyntaxError("the file ends inside the traceEvents array "
                                   "(truncated?)", n)
        buf += chunk


def _rest(tail: bytes, fh: Readable) -> bytes:
    """``tail`` and the rest of ``fh``: the part of the file after the events array."""
    parts = [tail]
    size = len(tail)
    while size <= MAX_HEADER:
        chunk = fh.read(CHUNK)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
    raise EventSyntaxError(f"more than {MAX_HEADER:,} bytes after the traceEvents array", -1)
