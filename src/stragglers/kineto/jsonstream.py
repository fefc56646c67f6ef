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

Bounded by construction, whatever the bytes: the nesting depth of every value (``nesting``
limit) is checked on the bytes, before anything is parsed; one event, and the top-level keys
before and after the array, may not exceed ``kineto_event_bytes`` (the unfinished tail of a
chunk never grows beyond it); a key given twice in a parsed event (the parser would keep the
last value) is refused, naming the event and the field.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

from stragglers.limits import LIMITS, limit

#: Bytes read at a time: small enough that a chunk and its scan's arrays stay in the
#: processor's cache (2 MiB scanned about 1.3x faster per byte than 8 MiB here).
CHUNK = 2 << 20
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
#: Categories whose events the reader may keep column by column (``Batch.cats``): 1 GPU
#: kernels, 2 CUDA runtime/driver calls (launches).
COLUMN_CATEGORIES = {b"kernel": 1, b"cuda_runtime": 2, b"cuda_driver": 2}
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
    #: per parsed event, its top-level ``"cat"`` as read from the bytes: the code of
    #: :data:`COLUMN_CATEGORIES`, 0 for any other (or none); None where not known
    cats: np.ndarray | None = None


#: ``bytes.translate`` table keeping the bytes that make a JSON text's structure (quotes,
#: backslashes, brackets, commas) and mapping every other byte to 0: one pass in C finds
#: them all, where a numpy comparison per byte value is a pass each.
_SPECIAL = bytes(c if c in b'"\\{}[],' else 0 for c in range(256))


def _ss(hay: np.ndarray, needles: Any, side: Any = "left") -> Any:
    """``np.searchsorted(hay, needles, side)`` with the needles cast to the haystack's type
    first: positions are 32-bit integers (:func:`_structure`), and a search with 64-bit
    needles converts the whole haystack at every call. The needles are byte positions (or
    one before/after) of the same buffer, so they fit."""
    return np.searchsorted(hay, np.asarray(needles).astype(hay.dtype, copy=False), side)


def _specials(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Positions and values of the bytes of :data:`_SPECIAL` in ``buf``, found block by
    block and kept as 32-bit integers (a buffer below 2 GiB): a buffer of nothing but such
    bytes costs 5 bytes each, not the 8 of an int64 index plus its temporaries."""
    t = np.frombuffer(buf.translate(_SPECIAL), np.uint8)
    kind = np.int32 if t.size < 2**31 - 64 else np.int64
    parts = []
    for lo in range(0, t.size, _BLOCK):
        blk = np.flatnonzero(t[lo: lo + _BLOCK] != 0)
        blk += lo
        parts.append(blk.astype(kind))
    pos = np.concatenate(parts) if len(parts) > 1 else parts[0] if parts \
        else np.zeros(0, kind)
    return pos, t[pos]


def _escaped(pos: np.ndarray, val: np.ndarray) -> np.ndarray:
    """Of the quotes among ``pos``/``val`` (:func:`_specials`), those escaped by an odd run
    of backslashes before them (indices into ``pos``). Vectorised: the backslashes are
    among the positions too, and the length of the run before a quote is its distance to
    the run's start."""
    is_bs = val == 92
    maybe = np.flatnonzero(val[1:] == 34) + 1  # quotes right after a special byte
    maybe = maybe[is_bs[maybe - 1] & (pos[maybe - 1] == pos[maybe] - 1)]
    if not maybe.size:
        return maybe
    bs = pos[is_bs].astype(np.int64)
    run_start = bs[np.r_[True, np.diff(bs) != 1]]
    at = pos[maybe].astype(np.int64)
    start = run_start[np.searchsorted(run_start, at - 1, "right") - 1]
    return maybe[(at - start) % 2 == 1]


def _find_all(b: np.ndarray, pattern: bytes) -> np.ndarray:
    """Start positions of ``pattern`` in ``b``."""
    n = len(pattern)
    if b.size < n:
        return np.zeros(0, np.int64)
    cand = np.flatnonzero(b[: b.size - n + 1] == pattern[0])
    for i in range(1, n):
        cand = cand[b[cand + i] == pattern[i]]
    return cand


#: Occurrences of a byte pattern located one by one (``bytes.find``, memmem speed); more
#: than that in one chunk are located by :func:`_find_all` (vectorised).
_FEW = 256


def _find_bytes(buf: bytes, b: np.ndarray, pattern: bytes, end: int) -> np.ndarray:
    """Start positions of ``pattern`` in ``buf[:end]``: counted first (most chunks hold
    none or a few: a comparison pass per byte of the pattern is then wasted)."""
    n = buf.count(pattern, 0, end)
    if n > _FEW:
        return _find_all(b[:end], pattern)
    out = np.zeros(n, np.int64)
    at = -1
    for j in range(n):
        at = buf.find(pattern, at + 1, end)
        out[j] = at
    return out


def _structure(buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Of a JSON text that starts outside a string: the valid quotes, the positions of the
    brackets and commas outside strings, those bytes, and the nesting depth after each
    (relative to the start)."""
    pos, val = _specials(buf)
    is_q = val == 34
    is_q[_escaped(pos, val)] = False
    outside = (np.cumsum(is_q, dtype=np.int32) & 1) == 0  # even number of quotes up to it
    outside &= ~is_q
    outside &= val != 92
    s = pos[outside]
    ch = val[outside]
    return pos[is_q], s, ch, np.cumsum(_DELTA[ch], dtype=np.int32)


#: ``bytes.translate`` table keeping the brackets and mapping every other byte to 0.
_BRACKETS = bytes(c if c in b"{}[]" else 0 for c in range(256))


def _nonzero(t: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(t)`` found block by block and kept as 32-bit integers (a buffer
    below 2 GiB): a buffer of nothing but such bytes costs 4 bytes each, not the 8 of an
    int64 index plus its temporaries."""
    kind = np.int32 if t.size < 2**31 - 64 else np.int64
    parts = []
    for lo in range(0, t.size, _BLOCK):
        blk = np.flatnonzero(t[lo: lo + _BLOCK])
        blk += lo
        parts.append(blk.astype(kind))
    return np.concatenate(parts) if len(parts) > 1 else parts[0] if parts \
        else np.zeros(0, kind)


def _packed(mask: np.ndarray) -> np.ndarray:
    """A boolean mask as 64-bit words, one bit per byte (bit ``i % 64`` of word ``i // 64``)."""
    packed = np.packbits(mask, bitorder="little")
    pad = (-packed.size) % 8
    if pad:
        packed = np.concatenate([packed, np.zeros(pad, np.uint8)])
    return packed.view("<u8")


class _Bits:
    """A bit set over the bytes of a text (:func:`_packed`) with the running count of its
    words: the number of set bits before any position is a lookup, not a search."""

    def __init__(self, words: np.ndarray) -> None:
        self.words = words
        self.before = np.concatenate([[0], np.cumsum(np.bitwise_count(words),
                                                      dtype=np.int64)])

    def count_before(self, pos: np.ndarray) -> np.ndarray:
        """The number of set bits before each position (within the text)."""
        pos = np.asarray(pos, np.int64)
        w = pos >> 6
        low = self.words[w] & ((np.uint64(1) << (pos & 63).astype(np.uint64)) - np.uint64(1))
        return self.before[w] + np.bitwise_count(low)

    def at(self, pos: np.ndarray) -> np.ndarray:
        """Whether the bit of each position is set."""
        pos = np.asarray(pos, np.int64)
        bit = (self.words[pos >> 6] >> (pos & 63).astype(np.uint64)) & np.uint64(1)
        return bit.astype(bool)


class _Quotes(_Bits):
    """The valid quotes of a text that starts outside a string (those not escaped by an odd
    run of backslashes) as a :class:`_Bits`: whether a byte lies inside a string (an odd
    number of quotes before it) is a lookup, and no index of the quotes (a quarter of a
    trace's bytes are quotes) is built unless the text holds a backslash."""

    def __init__(self, buf: bytes, b: np.ndarray) -> None:
        self.escapes = b"\\" in buf
        mask = b == 34
        if self.escapes:  # drop the quotes escaped by an odd run of backslashes
            q = np.flatnonzero(mask)
            after = np.flatnonzero(b[np.maximum(q - 1, 0)] == 92)
            after = after[q[after] > 0]
            if after.size:
                bs = np.flatnonzero(b == 92)
                run_start = bs[np.r_[True, np.diff(bs) != 1]]
                at = q[after]
                start = run_start[np.searchsorted(run_start, at - 1, "right") - 1]
                mask[at[(at - start) % 2 == 1]] = False
            del q
        super().__init__(_packed(mask))

    def outside(self, pos: np.ndarray) -> np.ndarray:
        """Whether each position lies outside the strings (an even number of quotes
        before it)."""
        return (self.count_before(pos) & 1) == 0

    def inside_words(self) -> np.ndarray:
        """The bytes inside strings (with their opening quote, without the closing one) as
        words of bits: the running parity of the quote bits (a prefix XOR within each word,
        inverted after an odd number of quotes in the words before)."""
        x = self.words.copy()
        for shift in (1, 2, 4, 8, 16, 32):
            x ^= x << np.uint64(shift)
        # all ones after an odd number of quotes (0 - 1), else 0: one XOR, no mask index
        x ^= np.uint64(0) - (self.before[:-1] & 1).astype(np.uint64)
        return x


def _brackets(buf: bytes, b: np.ndarray
              ) -> tuple[_Quotes, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_structure` without the commas (the events' scan: most structural bytes of a
    trace are the commas between an event's keys, which it does not need) and with the
    quotes as a :class:`_Quotes` bit set: the brackets outside strings, those bytes and the
    nesting depth after each (relative to the start)."""
    quotes = _Quotes(buf, b)
    low = b & 0xDF  # { } have the bits of [ ] and 0x20
    br = _nonzero((low == 91) | (low == 93))
    del low
    s = br[quotes.outside(br)]
    ch = b[s]
    return quotes, s, ch, np.cumsum(_DELTA[ch], dtype=np.int32)


def _shifted(words: np.ndarray, k: int) -> np.ndarray:
    """A bit set (:func:`_packed`) moved down by ``k`` bits (0 < k < 64): bit ``p`` of the
    result is bit ``p + k`` of ``words`` (0 past the end)."""
    out = words >> np.uint64(k)
    out[:-1] |= words[1:] << np.uint64(64 - k)
    return out


def _bit_positions(words: np.ndarray) -> np.ndarray:
    """The positions of the set bits of a bit set (:func:`_packed`), ascending. Vectorised
    over the words holding any: their lowest bit taken at each round (a round per bit of
    the fullest word: a few for a sparse set)."""
    at = np.flatnonzero(words)
    v = words[at]
    base = at.astype(np.int64) * 64
    parts = []
    one = np.uint64(1)
    while v.size:
        parts.append(base + np.bitwise_count((v & (~v + one)) - one).astype(np.int64))
        v = v & (v - one)
        more = v != 0
        v, base = v[more], base[more]
    if not parts:
        return np.zeros(0, np.int64)
    return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))


def _find_quoted(b: np.ndarray, quotes: _Quotes, key: bytes, end: int) -> np.ndarray:
    """Start positions of ``key`` (a quoted string of 1 byte or more between its quotes,
    with no quote or backslash in it) in ``b[:end]`` whose opening quote is a valid quote
    (not escaped): a valid quote with the key's first byte after it and a quote ``len(key)
    - 1`` bytes on, found on the bit sets (a pass over the bytes for the first byte, not
    one per alignment of the key), then the other bytes compared."""
    n = len(key)
    cand = quotes.words & _shifted(_packed(b == key[1]), 1) & _shifted(quotes.words, n - 1)
    at = _bit_positions(cand)
    at = at[at <= end - n]
    for i in range(2, n - 1):
        at = at[b[at + i] == key[i]]
    return at


def _keys_named(buf: bytes, b: np.ndarray, quotes: _Quotes, key: bytes, end: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The keys ``key`` (quoted, no escapes in it) before ``end``, outside strings: the
    position of each key's opening quote and of the first byte of its value (past the
    ``:`` and whitespace)."""
    at = _find_quoted(b, quotes, key, end)
    at = at[quotes.outside(at)]
    if not at.size:
        return at, at
    colon = _past_space(buf, b, at + len(key), end)
    at, colon = at[colon < end], colon[colon < end]
    ok = b[colon] == 58
    at, colon = at[ok], colon[ok]
    return at, _past_space(buf, b, colon + 1, end)


def _key_colons(b: np.ndarray, quotes: _Quotes) -> _Bits:
    """The ``:`` outside strings (one after each key) as a :class:`_Bits`: keys are
    counted between any two positions without locating them."""
    return _Bits(_packed(b == 58) & ~quotes.inside_words())


_BLOCK = 1 << 20
#: Bytes of events parsed at once (the objects of one event beyond it are parsed alone).
PARSE_BYTES = 1 << 20
_JSON_KINDS = {b"[": "an array", b'"': "a string", b"t": "a boolean", b"f": "a boolean",
               b"n": "null", **{bytes([c]): "a number" for c in b"-0123456789"}}
_SCALAR_OR_ARRAY = np.zeros(256, bool)
_SCALAR_OR_ARRAY[[k[0] for k in _JSON_KINDS]] = True
_WS = np.zeros(256, bool)
_WS[[32, 9, 10, 13]] = True
_WS_RUN = re.compile(rb"[ \t\r\n]*")

#: depth change of a structural byte: +1 for ``{`` ``[``, -1 for ``}`` ``]``, 0 else
_DELTA = np.zeros(256, np.int8)
_DELTA[[123, 91]] = 1
_DELTA[[125, 93]] = -1


def nesting_message() -> str:
    cap = limit("nesting")
    return (f"nesting deeper than {cap} levels (set {LIMITS['nesting'].env} to raise the "
            "limit)")


def _too_long(what: str, index: int) -> EventSyntaxError:
    lim = LIMITS["kineto_event_bytes"]
    return EventSyntaxError(f"{what} longer than {limit(lim.name):,} bytes (the "
                            f"{lim.name} limit; set {lim.env} to raise it)", index)


def _key_before(buf: bytes, q: np.ndarray, s: np.ndarray, depth: np.ndarray, pos: int) -> str:
    """The top-level key whose value holds byte ``pos`` (depth 1 = inside the top object)."""
    j = np.flatnonzero((s < pos) & (depth == 1))  # the top object's ``{`` and commas
    if not j.size:
        return "?"
    k = int(np.searchsorted(q, s[j[-1]]))
    if k + 1 >= q.size:
        return "?"
    return buf[q[k] + 1: q[k + 1]].decode("utf-8", "replace")[:60]


def read_header(fh: Readable) -> tuple[bytes, bytes]:
    """Read up to the ``[`` of the top-level ``traceEvents``; return the top-level keys before
    it as a JSON object (``{...}``) and the bytes after the ``[``."""
    buf = b""
    cap = limit("kineto_event_bytes")
    nest = limit("nesting")
    while True:
        # doubling (each byte is scanned a few times), up to just beyond the limit
        chunk = fh.read(max(1 << 16, min(len(buf), cap + 1 - len(buf))))
        if not chunk:
            raise EventSyntaxError("field 'traceEvents' missing: not a profiler trace", -1)
        buf += chunk
        q, s, ch, depth = _structure(buf)
        found = -1
        for i in np.flatnonzero((depth == 2) & (ch == 91)).tolist():
            pos = int(s[i])
            k = int(np.searchsorted(q, pos)) - 1
            if k >= 1 and buf[q[k - 1] + 1: q[k]] == b"traceEvents" \
                    and buf[q[k] + 1: pos].strip() == b":":
                found = i
                break
        end = int(s[found]) if found >= 0 else len(buf)
        over = np.flatnonzero((depth > nest) & (s < end))
        if over.size:
            key = _key_before(buf, q, s, depth, int(s[over[0]]))
            raise EventSyntaxError(f"field '{key}' (before the traceEvents array): "
                                   f"{nesting_message()}", -1)
        if found >= 0:
            k = int(np.searchsorted(q, end)) - 1
            head = buf[: q[k - 1]].rstrip()
            if len(head) > cap:
                raise _too_long("the keys before the traceEvents array are", -1)
            head = head[:-1] if head.endswith(b",") else head
            return head + b"}", buf[end + 1:]
        if len(buf) > cap:
            raise _too_long("the keys before the traceEvents array are", -1)
        del q, s, ch, depth, over


def split_trailer(tail: bytes) -> tuple[bytes, int]:
    """The top-level keys after the events array (``tail``: the bytes after its ``]``) as a
    JSON object (``{...}``), and the number of bytes after the end of the document (0 in a
    well-formed file)."""
    q, s, ch, depth = _structure(tail)
    close = np.flatnonzero(depth < 0)
    if not close.size:
        raise EventSyntaxError("not a complete JSON file: it ends after the traceEvents "
                               "array (truncated?)", -1)
    end = int(s[close[0]])
    if (depth[: close[0]] + 1 > limit("nesting")).any():
        pos = int(s[np.flatnonzero(depth + 1 > limit("nesting"))[0]])
        key = _key_before(b"{" + tail, q + 1, s + 1, depth + 1, pos + 1)
        raise EventSyntaxError(f"field '{key}' (after the traceEvents array): "
                               f"{nesting_message()}", -1)
    body = tail[:end].strip()
    if body and not body.startswith(b","):
        raise EventSyntaxError("not valid JSON after the traceEvents array (a ',' or the "
                               "end of the object expected)", -1)
    return b"{" + body[1:] + b"}", len(tail[end + 1:].strip())


class _Keys(dict[str, Any]):
    """An object of :func:`loads_strict`: its keys given twice."""

    twice: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> _Keys:
    out = _Keys(pairs)
    out.twice = []
    if len(out) < len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                out.twice.append(k)
            seen.add(k)
    return out


def _first_twice(value: Any, path: str = "") -> str | None:
    """The path (``args.Seq``) of the first key given twice in a value of
    :func:`loads_strict`."""
    if isinstance(value, _Keys):
        if value.twice:
            return f"{path}.{value.twice[0]}" if path else value.twice[0]
        children: Any = ((f"{path}.{k}" if path else k, v) for k, v in value.items())
    elif isinstance(value, list):
        children = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for sub, v in children:
        found = _first_twice(v, sub)
        if found is not None:
            return found
    return None


def _int_strict(text: str) -> int:
    cap = limit("int_digits")
    if len(text.lstrip("-")) > cap:
        raise ValueError(f"an integer with {len(text.lstrip('-')):,} digits (limit {cap}; "
                         f"set {LIMITS['int_digits'].env} to raise it)")
    return int(text)


def _float_strict(text: str) -> float:
    value = float(text)
    if not np.isfinite(value):
        raise ValueError(f"number {text[:30]} overflows a 64-bit float")
    return value


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def loads_strict(text: bytes) -> Any:
    """Parse a (bounded, depth-checked) JSON text: a key given twice, a non-finite number
    and an integer longer than ``int_digits`` digits raise :class:`EventSyntaxError` (index
    -1) naming the field. Objects come back as dicts."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EventSyntaxError(f"bytes that are not UTF-8 (byte {exc.start:,}: {exc.reason})",
                               -1) from None
    try:
        value = json.loads(decoded, object_pairs_hook=_pairs, parse_int=_int_strict,
                           parse_float=_float_strict, parse_constant=_constant)
    except RecursionError:  # pragma: no cover - the depth is checked before
        raise EventSyntaxError(nesting_message(), -1) from None
    except ValueError as exc:
        msg = (f"{exc.msg} at character {exc.pos:,}" if isinstance(exc, json.JSONDecodeError)
               else str(exc))
        raise EventSyntaxError(f"not valid JSON ({msg})", -1) from None
    twice = _first_twice(value)
    if twice is not None:
        raise EventSyntaxError(f"field '{twice}' given twice", -1)
    return value


#: per width ``w`` (0 to :data:`_WIDTH`), the 64-bit words (:data:`_WIDTH` bytes, little
#: endian) with their first ``w`` bytes all ones, the others 0
_FIRST_BYTES = np.where(np.arange(_WIDTH)[None, :] < np.arange(_WIDTH + 1)[:, None], 0xFF,
                        0).astype(np.uint8).view("<u8")


def _names(b: np.ndarray, quotes: _Quotes, v0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The string values that start at ``v0`` (their first byte), up to :data:`_WIDTH`
    bytes each: the distinct ones (bytes) and the index of each value among them.
    Vectorised; the values are told apart by a 64-bit hash of their bytes, checked (on a
    collision they are sorted as strings)."""
    if b.size > _WIDTH:  # the bytes from each start on (rows near the end: clipped)
        idx = None
        win = np.lib.stride_tricks.sliding_window_view(b, _WIDTH + 1)[
            np.minimum(v0, b.size - _WIDTH - 1)]
        tail = np.flatnonzero(v0 > b.size - _WIDTH - 1)
        if tail.size:
            win[tail] = b[np.minimum(v0[tail, None] + np.arange(_WIDTH + 1), b.size - 1)]
    else:
        idx = np.minimum(v0[:, None] + np.arange(_WIDTH + 1), b.size - 1)
        win = b[idx]
    isq = win == 34
    if quotes.escapes:  # only the valid quotes end a string (an escaped one does not)
        if idx is None:
            idx = np.minimum(v0[:, None] + np.arange(_WIDTH + 1), b.size - 1)
        isq[isq] = quotes.at(idx[isq])
    isq[:, _WIDTH] = True
    width = np.argmax(isq, axis=1)
    # the bytes before the closing quote kept, the others zeroed: a word mask per width
    words = np.ascontiguousarray(win[:, :_WIDTH]).view("<u8") & _FIRST_BYTES[width]
    vals = words.view(np.uint8)
    h = words[:, 0] * np.uint64(0x9E3779B97F4A7C15)
    for j in range(1, words.shape[1]):
        h = (h ^ words[:, j]) * np.uint64(0xBF58476D1CE4E5B9)
    uniq, first, inv = np.unique(h, return_index=True, return_inverse=True)
    if not (words == words[first][inv]).all():  # pragma: no cover - a hash collision
        names, inv = np.unique(vals.view(f"S{_WIDTH}").ravel(), return_inverse=True)
        return names, inv
    return vals[first].view(f"S{_WIDTH}").ravel(), inv.ravel()


def _scan(buf: bytes, n0: int, only: frozenset[bytes] | None = None
          ) -> tuple[Iterator[Batch] | None, int, bool]:
    """Locate the complete events at the start of ``buf``; returns their batches (parsed
    lazily, about :data:`PARSE_BYTES` of events at a time, so that the parsed objects of a
    chunk are not all alive at once), the bytes consumed and whether the array ended. With
    ``only``, the events of those categories are parsed and all others skipped (not
    counted by category)."""
    b = np.frombuffer(buf, np.uint8)
    quotes, s, ch, depth = _brackets(buf, b)  # depth after each, relative to the array
    end_arr = np.flatnonzero(depth < 0)
    _check_depth(depth[: end_arr[0]] if end_arr.size else depth, ch, n0)
    stop = int(s[end_arr[0]]) if end_arr.size else len(buf)
    inside = s < stop
    ends = s[inside & (depth == 0) & ((ch == 125) | (ch == 93))]
    last = int(ends[-1]) + 1 if ends.size else 0
    if end_arr.size:
        last = stop
    region = s < last
    starts = s[region & (depth == 1) & (ch == 123)]
    ends = ends[ends < last]
    if not last:
        return None, 0, bool(end_arr.size)
    plain = starts.size == ends.size and _separated(b, starts, ends, last, n0 == 0)
    if not plain:  # scalars or nested arrays as events, or bad separators
        _not_objects(buf, _top_commas(buf, last), last, n0)
        body = buf[:last].strip().lstrip(b",")
        try:
            events = orjson.loads(b"[" + body + b"]") if body else []
        except orjson.JSONDecodeError as exc:
            raise EventSyntaxError(f"not valid JSON ({exc})", n0) from None
        return iter([Batch(events, np.arange(n0, n0 + len(events)), Counter(),
                           len(events))]), last, bool(end_arr.size)
    n = starts.size
    size = ends - starts + 1
    if n and int(size.max()) > limit("kineto_event_bytes"):
        raise _too_long("an event is", n0 + int(np.argmax(size > limit("kineto_event_bytes"))))
    keep = np.ones(n, bool) if only is None else np.zeros(n, bool)
    codes = np.zeros(n, np.int8)
    skipped: Counter[str] = Counter()
    cat, v0 = _keys_named(buf, b, quotes, _CAT, last) if n else (np.zeros(0, np.int64),) * 2
    if cat.size:
        owner = _ss(starts, cat, "right") - 1
        di = _ss(s, cat, "right") - 1
        top = (owner >= 0) & (depth[np.clip(di, 0, None)] == 1) & \
            (b[np.minimum(v0, b.size - 1)] == 34) & (v0 < last)
        owner, v0 = owner[top], v0[top] + 1  # a string value: its first byte
        names, inv = _names(b, quotes, v0)
        codes[owner] = np.array([COLUMN_CATEGORIES.get(nm, 0) for nm in names.tolist()],
                                np.int8)[inv]
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
                    at = _ss(starts, _find_bytes(buf, b, pattern, last), "right") - 1
                    hit[at[at >= 0]] = True
                skip &= ~(of_cat & hit[owner])
            keep[owner[skip]] = False
            counts = np.bincount(inv[skip], minlength=names.size)
            for code in np.flatnonzero(counts).tolist():
                skipped[names[code].decode("utf-8", "replace")] += int(counts[code])
    kept = np.flatnonzero(keep)
    # the second pass needs no arguments: an event's "args" object is left out
    args = None if only is None else _args_objects(buf, b, quotes, s, ch, depth, last,
                                                   starts, n)
    del s, ch, depth
    size = np.cumsum(ends[kept] - starts[kept] + 1)
    cuts = np.flatnonzero(np.diff(size // PARSE_BYTES)) + 1
    groups = np.split(kept, cuts) if kept.size else [kept]
    keys = _key_colons(b, quotes) if kept.size else None
    del quotes
    batches = (Batch(_parse(buf, keys, starts, ends, g, args, n0), n0 + g,
                     skipped if j == 0 else Counter(), n if j == 0 else 0,
                     codes[g] if only is None else None)
               for j, g in enumerate(groups))
    return batches, last, bool(end_arr.size)


def _parse(buf: bytes, keys: _Bits | None, starts: np.ndarray, ends: np.ndarray,
           kept: np.ndarray, args: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
           n0: int) -> list[Any]:
    """The events ``kept`` (indices into ``starts``/``ends``) parsed, with ``args``
    (:func:`_args_objects`) their ``args`` objects left out; a key given twice refused."""
    if not kept.size:
        return []
    if args is None:  # runs of consecutive events taken whole, with their separators
        cut = np.flatnonzero(np.diff(kept) != 1) + 1
        first, last = kept[np.r_[0, cut]], kept[np.r_[cut - 1, kept.size - 1]]
        # views of the buffer (not copies), and the array's brackets and commas among them:
        # the text for orjson is copied once
        view = memoryview(buf)
        parts: list[Any] = [b","] * (2 * first.size + 1)
        parts[0], parts[-1] = b"[", b"]"
        parts[1::2] = [view[a: e + 1] for a, e in zip(starts[first].tolist(),
                                                      ends[last].tolist(), strict=True)]
        text = b"".join(parts)
        del parts, view
    else:
        lo, hi, _ = args
        body = b",".join([buf[a: c] + b'"args":{}' + buf[d + 1: e + 1] if c >= 0 else
                          buf[a: e + 1] for a, e, c, d in
                          zip(starts[kept].tolist(), ends[kept].tolist(),
                              lo[kept].tolist(), hi[kept].tolist(), strict=True)])
        text = b"[" + body + b"]"
        del body
    try:
        events = orjson.loads(text)
    except orjson.JSONDecodeError:
        for i in kept.tolist():  # the error path: find the event
            try:
                orjson.loads(buf[starts[i]: ends[i] + 1])
            except orjson.JSONDecodeError as exc:
                raise EventSyntaxError(f"not valid JSON ({exc})", n0 + i) from None
        raise
    del text
    assert keys is not None
    _check_keys(buf, keys, starts, ends, kept, events, n0, args)
    return events


def _separated(b: np.ndarray, starts: np.ndarray, ends: np.ndarray, last: int,
               first: bool) -> bool:
    """The objects [starts, ends] are the array's values before ``last``, separated by
    single commas, with nothing else but whitespace between them (the buffer starts after
    the array's ``[`` when ``first``, else after a value). Vectorised over the bytes
    between the objects (a few per event)."""
    lo = np.r_[0, ends + 1].astype(np.int64)
    hi = np.r_[starts, last].astype(np.int64)
    size = hi - lo
    if (size < 0).any():  # pragma: no cover - the objects alternate with their gaps
        return False
    upto = np.cumsum(size)
    at = np.repeat(lo - upto + size, size) + np.arange(int(upto[-1]))
    gap = b[at]
    comma = gap == 44
    if not (_WS[gap] | comma).all():
        return False
    cum = np.r_[0, np.cumsum(comma)]
    per_gap = cum[upto] - cum[upto - size]
    want = np.ones(per_gap.size, np.int64)
    want[0] = 0 if first else 1
    want[-1] = 0
    if starts.size == 0:
        want[0] = 0
    return bool(np.array_equal(per_gap, want))


def _top_commas(buf: bytes, last: int) -> np.ndarray:
    """The positions of the commas between the array's values before ``last`` (the buffer
    starts inside the array, outside a value)."""
    _, s, ch, depth = _structure(buf)
    return s[(s < last) & (depth == 0) & (ch == 44)]


def _not_objects(buf: bytes, commas: np.ndarray, last: int, n0: int) -> None:
    """Refuse the first value of the array (before ``last``) that is not an object, without
    parsing the others (it would be refused by the reader anyway)."""
    b = np.frombuffer(buf, np.uint8)
    pos = _past_space(buf, b, np.r_[0, commas + 1].astype(np.int64), last)
    head = b[np.minimum(pos, b.size - 1)]
    bad = np.flatnonzero((pos < last) & _SCALAR_OR_ARRAY[head])
    if bad.size:
        kind = _JSON_KINDS[bytes([int(head[bad[0]])])]
        raise EventSyntaxError(f"each event must be a JSON object, got {kind}",
                               n0 + int(bad[0]))


def _past_space(buf: bytes, b: np.ndarray, pos: np.ndarray, end: int) -> np.ndarray:
    """Each position moved past the whitespace there (not beyond ``end``). Vectorised."""
    pos = np.minimum(pos, end)
    for _ in range(32):
        more = (pos < end) & _WS[b[np.minimum(pos, b.size - 1)]]
        if not more.any():
            return pos
        pos[more] += 1
    for j in np.flatnonzero((pos < end) & _WS[b[np.minimum(pos, b.size - 1)]]).tolist():
        m = _WS_RUN.match(buf, int(pos[j]), end)  # runs longer than 32 bytes (rare)
        pos[j] = m.end() if m else pos[j]
    return pos


def _check_depth(depth: np.ndarray, ch: np.ndarray, n0: int) -> None:
    """Refuse an event nested deeper than the ``nesting`` limit (the file's top object and
    the events array are the first two levels)."""
    cap = limit("nesting") - 2
    if not depth.size or int(depth.max()) <= cap:
        return
    j = int(np.argmax(depth > cap))
    starts = (depth[:j] == 1) & ((ch[:j] == 123) | (ch[:j] == 91))
    raise EventSyntaxError(nesting_message(), n0 + max(int(np.count_nonzero(starts)) - 1, 0))


def _check_keys(buf: bytes, colons: _Bits, starts: np.ndarray, ends: np.ndarray,
                kept: np.ndarray, events: list[Any], n0: int,
                args: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
    """Refuse a key given twice in a parsed event (``orjson`` keeps the last value).

    Vectorised: the keys of each event in the bytes (a ``:`` outside strings follows each
    key: ``colons``, :func:`_key_colons`) are counted and compared with the keys of the parsed
    event and of its ``args``; an event whose bytes hold more keys than that (a key given
    twice, or objects deeper than ``args``) is parsed again by a parser that sees every
    key. With ``args`` (the second pass: the ``args`` objects were left out of the parsed
    text, :func:`_args_objects`), the keys inside them are not counted."""
    a, e = starts[kept], ends[kept]
    in_bytes = colons.count_before(e) - colons.count_before(a)
    if args is not None:
        brace, hi = args[2][kept], args[1][kept]
        inner = colons.count_before(hi) - colons.count_before(np.maximum(brace, 0))
        in_bytes = in_bytes - np.where(brace >= 0, inner, 0)
    parsed = np.array([len(ev) + (len(x) if type(x := ev.get("args")) is dict else 0)
                       for ev in events], np.int64)  # objects: the values were located
    for i in np.flatnonzero(in_bytes != parsed).tolist():
        try:
            loads_strict(buf[a[i]: e[i] + 1])
        except EventSyntaxError as exc:
            if "given twice" in str(exc):
                raise EventSyntaxError(str(exc), n0 + int(kept[i])) from None


def _args_objects(buf: bytes, b: np.ndarray, quotes: _Quotes, s: np.ndarray, ch: np.ndarray,
                  depth: np.ndarray, last: int, starts: np.ndarray, n: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event: the byte range [lo, hi] from its top-level ``"args"`` key to the end of
    its object value, and the position of that object's ``{`` (-1 where it has none).
    Vectorised."""
    lo = np.full(n, -1)
    hi = np.full(n, -1)
    brace = np.full(n, -1)
    if not n:
        return lo, hi, brace
    key, value = _keys_named(buf, b, quotes, _ARGS, last)
    if not key.size:
        return lo, hi, brace
    i = _ss(s, value)  # the first bracket at or after the value
    ok = i < s.size
    key, value, i = key[ok], value[ok], i[ok]
    ok = (value == s[i]) & (ch[i] == 123) & (depth[i] == 2)  # an object, an event's own key
    key, i = key[ok], i[ok]
    top = np.flatnonzero(depth == 1)  # its end: the first byte back at the event's level
    j = _ss(top, i, "right")
    ok = j < top.size
    key, i, j = key[ok], i[ok], top[j[ok]]
    owner = _ss(starts, key, "right") - 1
    lo[owner], hi[owner], brace[owner] = key, s[j], s[i]
    return lo, hi, brace


def iter_event_batches(fh: Readable, trailer: list[bytes] | None = None,
                       only: frozenset[bytes] | None = None,
                       start: bytes | None = None) -> Iterator[Batch]:
    """Yield the used events of the ``traceEvents`` array, in batches, in file order. With
    ``trailer`` (a list), the bytes after the array (the top-level keys that follow it, up
    to ``kineto_event_bytes``) are appended to it once the array has ended. With ``only`` (a
    set of categories), only the events of those categories are parsed (a second pass for
    what the first one skipped). ``start``: the bytes after the array's ``[`` when the
    header was read already (:func:`read_header`)."""
    buf = start if start is not None else read_header(fh)[1]
    cap = limit("kineto_event_bytes")
    n = 0
    while True:
        batches, used, ended = _scan(buf, n, only)
        for batch in batches or ():
            count = batch.count
            yield batch
            del batch  # not alive while the next one is parsed
            n += count
        if ended:
            if trailer is not None:
                trailer.append(_rest(buf[used + 1:], fh, cap))
            return
        buf = buf[used:]
        if len(buf) > cap:
            raise _too_long("an event is", n)
        # no event completed: read as much again (an event longer than a chunk is scanned
        # a few times, not once per chunk)
        chunk = fh.read(CHUNK if used else max(CHUNK, len(buf)))
        if not chunk:
            raise EventSyntaxError("the file ends inside the traceEvents array "
                                   "(truncated?)", n)
        buf += chunk


def _rest(tail: bytes, fh: Readable, cap: int) -> bytes:
    """``tail`` and the rest of ``fh``: the part of the file after the events array."""
    parts = [tail]
    size = len(tail)
    while size <= cap:
        chunk = fh.read(min(CHUNK, cap + 1 - size))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
    raise _too_long("the keys after the traceEvents array are", -1)
