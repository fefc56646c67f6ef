"""Reading PyTorch NCCL flight-recorder dumps (``TORCH_FR_BUFFER_SIZE``,
``TORCH_NCCL_DUMP_ON_TIMEOUT``): one file per rank, a pickled (or JSON) dict with ``version``,
``pg_config`` (group name -> ``{name, desc, ranks}``), ``pg_status`` (local group id ->
``{last_enqueued_collective, last_started_collective, last_completed_collective}``) and
``entries`` (the recorded collective and point-to-point calls, with ``process_group``
``(name, desc)``, ``pg_id`` (the local group id), ``collective_seq_id``, ``p2p_seq_id``,
``profiling_name``, ``state``, sizes, dtypes and times).

A pickle can run code while it is loaded, so dumps are read with :class:`PlainUnpickler`, which
refuses every global reference (classes, functions, ``copyreg`` extensions, persistent ids): only
the opcodes that build plain containers and scalars remain. A refused dump is a one-line
:class:`~stragglers.errors.InputError` and nothing of it has been executed.

A folder holds one dump per rank whose file name ends in the rank (``_dump_<rank>``,
``<prefix><rank>``, optionally ``.json``/``.pkl``); other files are counted and reported, not
read. Ranks of the job (``default_pg``, else every group) without a dump are *silent*.
"""

from __future__ import annotations

import errno
import io
import os
import pickle
import re
import reprlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stragglers.errors import InputError
from stragglers.inputs import DuplicateKey, loads_unique, nesting_depth, read_bytes
from stragglers.limits import LimitError, check_limit, limit

__all__ = [
    "FlightRecord",
    "FREntry",
    "GroupInfo",
    "GroupStatus",
    "PlainUnpickler",
    "RefusedPickle",
    "RankDump",
    "check_pickle",
    "load_dump",
    "parse_dump",
    "read_flight_recorder",
]

#: entry states of the recorder (``scheduled`` = enqueued, not yet seen started)
STATES = ("scheduled", "started", "completed")
_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?P<ext>\.json|\.pkl|\.pickle)?$")
_P2P = re.compile(r"^(?P<op>\S*(?:send|recv))\s+(?P<a>\d+)\s*(?P<dir>->|<-)\s*(?P<b>\d+)\s*$")


class RefusedPickle(pickle.UnpicklingError):
    """The pickle asks for more than plain containers and scalars."""


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain containers and scalars only: any global (class, function,
    ``copyreg`` extension) or persistent id is refused before it is looked up."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedPickle(
            f"the pickle references the global {module}.{name}; only plain containers and "
            "scalars are allowed (refused, nothing was executed)")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("the pickle uses a persistent id; only plain containers "
                                     "and scalars are allowed (refused, nothing was executed)")


class _Container:
    """A container built by a pickle, as :func:`check_pickle` sees it: its nesting depth
    so far, whether another container holds it already, and for a tuple or frozenset (the
    containers that are hashed) the values hashing it visits (shared parts counted each
    time they appear; 1 for anything else, whose hash stops there)."""

    __slots__ = ("depth", "held", "size")

    def __init__(self, depth: int, size: int = 1) -> None:
        self.depth = depth
        self.held = False
        self.size = size


_SCALAR = _Container(0)  # any number, text, bytes, None, boolean
_MARK = _Container(-1)


class _ScanError(ValueError):
    """A pickle beyond the limits, found by :func:`check_pickle` (no file in the message)."""


def _ops(codes: str) -> frozenset[int]:
    return frozenset(ord(c) for c in codes)


_OP_SCALAR_1 = _ops("UC\x8c")  # SHORT_BINSTRING, SHORT_BINBYTES, SHORT_BINUNICODE
_OP_SCALAR_4 = _ops("TBX")  # BINSTRING, BINBYTES, BINUNICODE
_OP_SCALAR_8 = _ops("\x8e\x96\x8d")  # BINBYTES8, BYTEARRAY8, BINUNICODE8
_OP_FIXED = {ord("K"): 1, ord("M"): 2, ord("J"): 4, ord("G"): 8}  # BININT1/2, BININT, BINFLOAT
_OP_NOARG_SCALAR = _ops("N\x88\x89")  # NONE, NEWTRUE, NEWFALSE
_OP_LINE_SCALAR = _ops("SVF")  # STRING, UNICODE, FLOAT (protocol 0)
_OP_EMPTY = _ops("]})\x8f")  # EMPTY_LIST, EMPTY_DICT, EMPTY_TUPLE, EMPTY_SET
_OP_HASHED = _ops("t\x85\x86\x87\x91")  # TUPLE, TUPLE1-3, FROZENSET: hashable containers
#: Globals, calls, persistent ids, out-of-band buffers (the unpickler refuses them), STOP.
_OP_END = _ops("cRbio\x81\x92\x82\x83\x84\x93PQ\x97\x98.")


def check_pickle(data: bytes) -> None:
    """Check a pickle before it is loaded, by following its opcodes without building
    anything. Refused (:class:`_ScanError`, naming the byte): a container nested deeper
    than ``nesting`` (a value nested 200,000 deep ends in a RecursionError when printed,
    and a tuple that deep used as a dict key crashes the interpreter while it is hashed);
    a tuple or frozenset whose hashing would visit more than ``shared_values`` values
    (memoised parts are shared, so 60 tuples of two copies of the previous one stand for
    2^60 values: hashing that key would never end); an integer longer than ``int_digits``
    digits; a container that holds itself, or one changed after another one holds it (which
    only a value that holds itself needs: ``pickle.dump`` of plain data never does it). A
    damaged pickle raises ValueError. The scan stops at the first opcode the unpickler
    refuses (:class:`PlainUnpickler`) and at ``STOP``; it takes about four times as long as
    loading."""
    cap = limit("nesting")
    max_size = limit("shared_values")
    max_digits = limit("int_digits")
    max_long = (max_digits * 10 + 23) // 24 + 1  # bytes of a long1/long4 of that many digits
    stack: list[_Container] = []
    push = stack.append
    memo: dict[int, _Container] = {}
    n = len(data)
    i = 0

    def error(at: int, what: str) -> _ScanError:
        return _ScanError(f"byte {at}: {what}")

    def top() -> _Container:
        """The value on top of the stack (not a mark: the unpickler's stack underflow)."""
        if stack[-1] is _MARK:
            raise ValueError("stack underflow")
        return stack[-1]

    def from_mark() -> list[_Container]:
        for k in range(len(stack) - 1, -1, -1):
            if stack[k] is _MARK:
                items = stack[k + 1:]
                del stack[k:]
                return items
        raise ValueError("no mark on the stack")

    def add(at: int, items: list[_Container]) -> None:
        if not stack or stack[-1].depth <= 0:
            raise ValueError("items added to a value that is not a container")
        target = stack[-1]
        if target.held and items:
            raise error(at, "a container changed after another one holds it (a value that "
                            "holds itself?); a dump is plain data")
        depth = target.depth
        for x in items:
            if x is _MARK:
                raise ValueError("a mark where a value belongs")
            if x is target:
                raise error(at, "a container that holds itself; a dump is plain data")
            x.held = True
            if x.depth >= depth:
                depth = x.depth + 1
        if depth > cap:
            raise error(at, f"a value nested deeper than {cap} levels (set "
                            "STRAGGLERS_MAX_NESTING to raise the limit)")
        target.depth = depth

    def build(at: int, items: list[_Container], hashed: bool) -> _Container:
        depth, size = 1, 1
        for x in items:
            if x is _MARK:
                raise ValueError("a mark where a value belongs")
            x.held = True
            if x.depth >= depth:
                depth = x.depth + 1
            size += x.size
        if depth > cap:
            raise error(at, f"a value nested deeper than {cap} levels (set "
                            "STRAGGLERS_MAX_NESTING to raise the limit)")
        if hashed and size > max_size:
            raise error(at, f"a tuple that stands for more than {max_size:,} values once its "
                            "shared parts are expanded (set STRAGGLERS_MAX_SHARED_VALUES to "
                            "raise the limit)")
        return _Container(depth, size if hashed else 1)

    try:
        while True:
            at = i
            c = data[i]
            i += 1
            if c in _OP_SCALAR_1:
                i += 1 + data[i]
                push(_SCALAR)
            elif c == 0x94:  # MEMOIZE
                memo[len(memo)] = top()
            elif c == 0x71:  # BINPUT
                memo[data[i]] = top()
                i += 1
            elif c == 0x68:  # BINGET
                push(memo[data[i]])
                i += 1
            elif c in _OP_FIXED:
                i += _OP_FIXED[c]
                push(_SCALAR)
            elif c == 0x28:  # MARK
                push(_MARK)
            elif c in _OP_EMPTY:
                push(_Container(1))
            elif c == 0x75 or c == 0x65 or c == 0x90:  # SETITEMS, APPENDS, ADDITEMS
                add(at, from_mark())
            elif c in _OP_NOARG_SCALAR:
                push(_SCALAR)
            elif c == 0x73 or c == 0x61:  # SETITEM, APPEND
                k = 2 if c == 0x73 else 1
                if len(stack) < k + 1:
                    raise ValueError("stack underflow")
                items = stack[-k:]
                del stack[-k:]
                add(at, items)
            elif c in _OP_HASHED or c == 0x6C or c == 0x64:  # tuples, frozenset, LIST, DICT
                if 0x85 <= c <= 0x87:
                    k = c - 0x84
                    if len(stack) < k:
                        raise ValueError("stack underflow")
                    items = stack[-k:]
                    del stack[-k:]
                else:
                    items = from_mark()
                push(build(at, items, c in _OP_HASHED))
            elif c in _OP_SCALAR_4 or c in _OP_SCALAR_8:
                w = 4 if c in _OP_SCALAR_4 else 8
                if i + w > n:
                    raise ValueError("pickle truncated")
                i += w + int.from_bytes(data[i:i + w], "little", signed=c == 0x54)
                push(_SCALAR)
            elif c == 0x72 or c == 0x6A:  # LONG_BINPUT, LONG_BINGET
                if i + 4 > n:
                    raise ValueError("pickle truncated")
                key = int.from_bytes(data[i:i + 4], "little")
                i += 4
                if c == 0x72:
                    memo[key] = top()
                else:
                    push(memo[key])
            elif c == 0x8A or c == 0x8B:  # LONG1, LONG4
                w = 1 if c == 0x8A else 4
                if i + w > n:
                    raise ValueError("pickle truncated")
                size = int.from_bytes(data[i:i + w], "little", signed=w == 4)
                if size > max_long:
                    raise error(at, f"an integer longer than {max_digits} digits (set "
                                    "STRAGGLERS_MAX_INT_DIGITS to raise the limit)")
                i += w + size
                push(_SCALAR)
            elif c == 0x95 or c == 0x80:  # FRAME, PROTO
                i += 8 if c == 0x95 else 1
            elif c == 0x30:  # POP
                stack.pop()
            elif c == 0x31:  # POP_MARK
                from_mark()
            elif c == 0x32:  # DUP
                push(top())
            elif c in _OP_END:
                return
            elif c in _OP_LINE_SCALAR or c in (0x49, 0x4C, 0x67, 0x70):  # INT, LONG, GET, PUT
                end = data.index(b"\n", i)
                line = data[i:end]
                i = end + 1
                if c == 0x49 or c == 0x4C:
                    if len(line) > max_digits + 2:
                        raise error(at, f"an integer longer than {max_digits} digits (set "
                                        "STRAGGLERS_MAX_INT_DIGITS to raise the limit)")
                    push(_SCALAR)
                elif c == 0x67:
                    push(memo[int(line)])
                elif c == 0x70:
                    memo[int(line)] = top()
                else:
                    push(_SCALAR)
            else:
                raise ValueError(f"unknown opcode {c:#x} at byte {at}")
            if i > n:
                raise ValueError("pickle truncated")
    except IndexError:
        raise ValueError("pickle truncated or stack underflow") from None
    except KeyError as exc:
        raise ValueError(f"memo key {exc} missing") from None


@dataclass(frozen=True)
class GroupInfo:
    """A process group as ``pg_config`` describes it: its global name, description and the
    global ranks in group-rank order."""

    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class GroupStatus:
    """Progress counters of one group on one rank (``pg_status``; -1 = none yet)."""

    enqueued: int
    started: int
    completed: int


@dataclass(frozen=True)
class FREntry:
    """One recorded call."""

    group: str  # process group name
    desc: str
    uid: int | None  # the rank's local group id (``pg_id``)
    seq: int  # collective_seq_id
    p2p_seq: int
    is_p2p: bool
    op: str  # profiling_name, e.g. "nccl:all_to_all", "nccl:send 0->3"
    state: str
    created_ns: int | None
    size: str  # "4096x5120" (first input), "" when not recorded
    dtype: str
    peer_local: int | None = None  # p2p: the group rank of the other side
    sends: bool = False  # p2p: this entry sends to peer_local
    retired: bool = False  # completed and retired by the recorder (gloo never sets state)

    @property
    def pending(self) -> bool:
        return self.state != "completed" and not self.retired


@dataclass(frozen=True)
class RankDump:
    """The dump of one rank."""

    rank: int
    path: str
    version: str
    groups: Mapping[str, GroupInfo]
    status: Mapping[int, GroupStatus]  # by local group id
    entries: tuple[FREntry, ...]


@dataclass(frozen=True)
class FlightRecord:
    """The dumps of a job, by rank, with the job's ranks and those without a dump."""

    dumps: Mapping[int, RankDump]
    world: tuple[int, ...]
    silent: tuple[int, ...]
    ignored_files: tuple[str, ...]
    source: str

    @property
    def groups(self) -> dict[str, GroupInfo]:
        """Every group named in any dump (a rank lists the groups it belongs to)."""
        return _all_groups(self.dumps)


def _all_groups(dumps: Mapping[int, RankDump]) -> dict[str, GroupInfo]:
    """Every group of the dumps; a group whose ranks differ between two dumps is an error."""
    out: dict[str, GroupInfo] = {}
    seen_in: dict[str, str] = {}
    for d in dumps.values():
        for name, g in d.groups.items():
            prev = out.get(name)
            if prev is not None and prev.ranks is not g.ranks and prev.ranks != g.ranks:
                raise InputError(f"{d.path}: pg_config[{name!r}]: ranks {_shown(list(g.ranks))} "
                                 f"but {seen_in[name]} says {_shown(list(prev.ranks))}")
            if prev is None or (not prev.desc and g.desc):
                out[name] = g
                seen_in.setdefault(name, d.path)
    return out


def load_dump(path: str | os.PathLike[str], rank: int,
              ranks_cache: dict[str, tuple[int, ...]] | None = None) -> RankDump:
    """Read one dump (pickle or JSON), a regular file bounded by the ``fr_dump_bytes``
    limit; its values nest at most ``nesting`` deep (checked before a pickle is loaded)."""
    p = Path(path)
    data = read_bytes(p, "flight-recorder dump", "fr_dump_bytes")
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:  # the standard parser: a key given twice is refused, not taken silently
            obj = loads_unique(data)
        except DuplicateKey as exc:
            raise InputError(f"{p}: {exc} (which one to take is not said)") from None
        except RecursionError:
            raise InputError(f"{p}: a value nested too deep to read (thousands of levels)"
                             ) from None
        except ValueError as exc:
            why = (str(exc).splitlines() or [""])[0][:200]
            raise InputError(f"{p}: not a valid JSON flight-recorder dump ({why})") from None
        cap = limit("nesting")
        if nesting_depth(obj, cap) > cap:
            raise InputError(f"{p}: a value nested deeper than {cap} levels (set "
                             "STRAGGLERS_MAX_NESTING to raise the limit)")
    elif data[:1] == b"\x80":
        try:
            check_pickle(data)
            obj = PlainUnpickler(io.BytesIO(data)).load()
        except (RefusedPickle, _ScanError) as exc:
            raise InputError(f"{p}: {exc}") from None
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
                AttributeError, OverflowError, MemoryError, UnicodeDecodeError) as exc:
            # a truncated or damaged pickle (the opcodes fail on a short or wrong stack)
            raise InputError(f"{p}: damaged pickle ({type(exc).__name__}: "
                             f"{_first_line(exc)})") from None
    else:
        raise InputError(f"{p}: not a flight-recorder dump (neither a pickle nor JSON)")
    return parse_dump(obj, str(p), rank, ranks_cache)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split())[:200] if text else type(exc).__name__


#: Integers of a dump are 64-bit (sequence ids, times in ns, group ids).
_INT64 = (-(2**63), 2**63 - 1)


def _int(v: Any, where: str, field: str, allow_none: bool = False) -> int | None:
    if v is None and allow_none:
        return None
    if type(v) is not int or not _INT64[0] <= v <= _INT64[1]:
        raise InputError(f"{where}: field '{field}': expected a 64-bit integer, got "
                         f"{_shown(v)}")
    return v


_COUNTER = re.compile(r"^-?\d{1,19}$")


def _counter(v: Any, where: str, field: str) -> int:
    """A ``pg_status`` counter: an integer, or (the JSON dump of PyTorch 2.11) its text."""
    if type(v) is int:
        return v
    if isinstance(v, str) and _COUNTER.match(v):
        return int(v)
    raise InputError(f"{where}: field '{field}': expected an integer, got {_shown(v)}")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 60


def _text(v: Any) -> str:
    """A name or description as text: a string as it is, an integer in decimal, anything
    else as its short form (:func:`_shown`)."""
    return v if isinstance(v, str) else str(v) if type(v) is int else _shown(v)


def _shown(v: Any) -> str:
    """A value for a message: at most 60 characters, nesting cut after 3 levels (a deep or
    huge value is never printed whole)."""
    text = _REPR.repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _ranks(v: Any, where: str, cache: dict[str, tuple[int, ...]] | None = None
           ) -> tuple[int, ...]:
    """A group's ranks (a list, or its text as PyTorch writes it); with ``cache``, equal texts
    share one checked tuple (every dump of a job lists the world group and its big groups)."""
    if isinstance(v, str) and cache is not None:
        hit = cache.get(v)
        if hit is not None:
            return hit
        cache[v] = _ranks(v, where)
        return cache[v]
    if isinstance(v, str):
        try:
            v = orjson.loads(v)
        except orjson.JSONDecodeError:
            raise InputError(f"{where}: field 'ranks': expected a list of ranks, got "
                             f"{_shown(v)}") from None
    if not isinstance(v, (list, tuple)) or not all(type(r) is int and r >= 0 for r in v):
        raise InputError(f"{where}: field 'ranks': expected a list of ranks >= 0, got "
                         f"{_shown(v)}")
    check_limit("topology_ranks", len(v), f"{where}: field 'ranks'")
    cap = limit("topology_ranks")
    top = max(v, default=0)
    if top >= cap:  # before any array is sized by the rank ids
        raise LimitError(f"{where}: field 'ranks': rank id {top:,} is beyond the limit of "
                         f"{cap:,} ranks of a job (ids 0..{cap - 1:,}; set "
                         "STRAGGLERS_MAX_TOPOLOGY_RANKS to raise it)")
    if len(set(v)) != len(v):
        raise InputError(f"{where}: field 'ranks': a rank appears twice in {_shown(v)}")
    return tuple(v)


def _first(v: Any, kind: type | tuple[type, ...]) -> Any:
    """The first element of a list of per-input values (``input_sizes``/``input_dtypes``)."""
    if isinstance(v, (list, tuple)) and v and isinstance(v[0], kind):
        return v[0]
    return None


def _size_text(v: Any) -> str:
    first = _first(v, (list, tuple))
    if first is None or not all(type(x) is int for x in first[:8]):
        return ""
    return "x".join(str(x) for x in first[:8])


def parse_dump(obj: Any, where: str, rank: int,
               ranks_cache: dict[str, tuple[int, ...]] | None = None) -> RankDump:
    """Check and convert a loaded dump; every problem names the file and field."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a dict at the top, got {type(obj).__name__}")
    for key in ("pg_config", "entries"):
        if key not in obj:
            raise InputError(f"{where}: field '{key}': missing (not a flight-recorder dump?)")
    version = obj.get("version", "")
    if not isinstance(version, str):
        version = _text(version)
    if "rank" in obj and obj["rank"] != rank:
        raise InputError(f"{where}: field 'rank': {_shown(obj['rank'])} but the file name "
                         f"says rank {rank}")
    cfg = obj["pg_config"]
    if not isinstance(cfg, dict):
        raise InputError(f"{where}: field 'pg_config': expected a dict, got "
                         f"{type(cfg).__name__}")
    check_limit("fr_entries", len(cfg), f"{where}: field 'pg_config'")
    groups: dict[str, GroupInfo] = {}
    for name, g in cfg.items():
        w = f"{where}: pg_config[{_shown(name)}]"
        if not isinstance(g, dict) or "ranks" not in g:
            raise InputError(f"{w}: expected {{name, desc, ranks}}, got {_shown(g)}")
        desc = g.get("desc", "")
        groups[_text(name)] = GroupInfo(_text(name), _text(desc),
                                      _ranks(g["ranks"], w, ranks_cache))
    status: dict[int, GroupStatus] = {}
    raw_status = obj.get("pg_status", {})
    if not isinstance(raw_status, dict):
        raise InputError(f"{where}: field 'pg_status': expected a dict")
    check_limit("fr_entries", len(raw_status), f"{where}: field 'pg_status'")
    for raw_uid, counters in raw_status.items():
        w = f"{where}: pg_status[{_shown(raw_uid)}]"
        try:
            uid = int(raw_uid)
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{w}: expected an integer group id") from None
        if not _INT64[0] <= uid <= _INT64[1]:
            raise InputError(f"{w}: expected a 64-bit integer group id")
        if not isinstance(counters, dict):
            raise InputError(f"{w}: expected a dict, got {_shown(counters)}")
        vals = [_counter(counters.get(f"last_{k}_collective", -1), w, f"last_{k}_collective")
                for k in ("enqueued", "started", "completed")]
        status[uid] = GroupStatus(*vals)
    entries = obj["entries"]
    if not isinstance(entries, (list, tuple)):
        raise InputError(f"{where}: field 'entries': expected a list")
    check_limit("fr_entries", len(entries), f"{where}: field 'entries'")
    parsed = tuple(_entry(e, f"{where}: entries[{i}]") for i, e in enumerate(entries))
    return RankDump(rank, where, version, groups, status, parsed)


def _entry(e: Any, where: str) -> FREntry:
    if not isinstance(e, dict):
        raise InputError(f"{where}: expected a dict, got {_shown(e)}")
    for key in ("process_group", "collective_seq_id", "profiling_name"):
        if key not in e:
            raise InputError(f"{where}: field '{key}': missing")
    pg = e["process_group"]
    if (not isinstance(pg, (list, tuple)) or len(pg) != 2
            or not all(isinstance(x, str) for x in pg)):
        raise InputError(f"{where}: field 'process_group': expected (name, desc), got "
                         f"{_shown(pg)}")
    op = e["profiling_name"]
    if not isinstance(op, str):
        raise InputError(f"{where}: field 'profiling_name': expected a string, got "
                         f"{_shown(op)}")
    state = e.get("state", "scheduled")
    if state not in STATES:
        raise InputError(f"{where}: field 'state': expected one of {', '.join(STATES)}, got "
                         f"{_shown(state)}")
    seq = _int(e["collective_seq_id"], where, "collective_seq_id")
    p2p_seq = _int(e.get("p2p_seq_id", 0), where, "p2p_seq_id")
    uid = _int(e.get("pg_id"), where, "pg_id", allow_none=True)
    created = _int(e.get("time_created_ns"), where, "time_created_ns", allow_none=True)
    m = _P2P.match(op.split(":", 1)[-1])
    is_p2p = e.get("is_p2p")
    if is_p2p is None:
        is_p2p = m is not None
    if type(is_p2p) is not bool:
        raise InputError(f"{where}: field 'is_p2p': expected true or false, got "
                         f"{_shown(is_p2p)}")
    peer = None
    sends = False
    if is_p2p and m is not None:  # "send 0->3": group rank 0 sends to group rank 3
        peer = int(m["b"])
        sends = m["dir"] == "->"
    retired = e.get("retired", False)
    if retired is None:
        retired = False
    if type(retired) is not bool:
        raise InputError(f"{where}: field 'retired': expected true or false, got "
                         f"{_shown(retired)}")
    dtype = _first(e.get("input_dtypes"), str) or ""
    assert seq is not None and p2p_seq is not None
    return FREntry(pg[0], pg[1], uid, seq, p2p_seq, is_p2p, op, state, created,
                   _size_text(e.get("input_sizes")), dtype, peer, sends, retired)


def _rank_files(folder: Path) -> tuple[dict[int, Path], list[str]]:
    """Dump files by rank (the most common prefix wins) and the names of the other files."""
    matches: list[tuple[str, int, Path]] = []
    other: list[str] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise InputError(f"{folder}: cannot list the folder ({exc.strerror or exc})") from None
    check_limit("topology_ranks", len(names), f"{folder}: files")
    for name in names:
        m = _NAME.match(name)
        if m is None or not (folder / name).is_file():
            other.append(name)
            continue
        matches.append((m["prefix"], int(m["rank"]), folder / name))
    if not matches:
        raise InputError(f"{folder}: no dump files (expected names ending in the rank, like "
                         "_dump_0)")
    prefix = Counter(p for p, _, _ in matches).most_common(1)[0][0]
    files: dict[int, Path] = {}
    for p, r, path in matches:
        if p != prefix:
            other.append(path.name)
            continue
        if r in files:
            raise InputError(f"{path}: rank {r} already has a dump ({files[r].name})")
        files[r] = path
    return files, sorted(other)


def read_flight_recorder(path: str | os.PathLike[str]) -> FlightRecord:
    """All dumps of a folder (or a single dump file, whose name carries its rank)."""
    p = Path(path)
    try:
        p.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(f"{p}: a loop of symbolic links, expected a folder of dumps"
                             ) from None
        raise InputError(f"{p}: no such folder") from None
    if p.is_dir():
        files, other = _rank_files(p)
    else:
        m = _NAME.match(p.name)
        if m is None:
            raise InputError(f"{p}: the file name does not end in the rank (like _dump_0)")
        files, other = {int(m["rank"]): p}, []
    for r in files:
        check_limit("topology_ranks", r + 1, f"{files[r]}: rank {r}")
    cache: dict[str, tuple[int, ...]] = {}
    dumps = {r: load_dump(f, r, cache) for r, f in sorted(files.items())}
    groups = _all_groups(dumps)  # once per group, not once per dump
    world: set[int] = set()
    for g in groups.values():
        if g.desc == "default_pg":
            world.update(g.ranks)
    if not world:
        for g in groups.values():
            world.update(g.ranks)
    outside = sorted(set(dumps) - world)
    if world and outside:
        raise InputError(f"{files[outside[0]]}: rank {outside[0]} is not a rank of the job "
                         f"({len(world)} ranks in its groups)")
    world.update(dumps)
    silent = tuple(sorted(world - set(dumps)))
    return FlightRecord(dumps, tuple(sorted(world)), silent, tuple(other), str(p))
