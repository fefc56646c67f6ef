"""Stream one rank's profiler trace (Chrome-trace JSON, gzipped or not) into compact columns.

The file is never loaded whole: it is decompressed and scanned in chunks
(:mod:`stragglers.kineto.jsonstream`: events of unused categories are counted from the bytes,
the others parsed by ``orjson``; the top-level keys before and after the events, bounded and
checked on the bytes first, by the standard parser), and only
what the importer uses is kept, as typed arrays (8 bytes per number). What is kept:

* ``ProfilerStep#N`` ranges (the steps);
* annotations whose name matches a schema pattern (:mod:`stragglers.kineto.patterns`);
* communication: ``record_param_comms`` CPU ops (with their process-group arguments and
  sequence number ``Seq`` where the profiler records it) and
  backend annotations (``nccl:all_reduce``, ``gloo:recv``, ...);
* GPU kernels (NCCL ones with their collective and group), and the CUDA runtime launches
  (correlation id → CPU time and thread) that tie each kernel to the CPU;
* device↔host memory copies (``gpu_memcpy`` named ``DtoH`` / ``HtoD``: time, stream,
  correlation id): a collective without NCCL kernels on CUDA tensors (gloo) copies its data
  through the host, and is timed by them (:mod:`stragglers.kineto.rankops`); other copies
  (device to device, ...) are counted;
* thread names (the autograd thread tells backward from forward);
* in a file without GPU kernels whose compute annotations overlap a communication call, a
  second pass reads the CPU ops of the threads that run those annotations (their
  times, and whether each is a collective call or wait: ``c10d::*``,
  ``_c10d_functional::*``, ``record_param_comms``): what a CPU-timed compute op spends in
  communication is not compute (:mod:`stragglers.kineto.rankops`).

Everything else is counted by category (``ignored``) and reported by the importer.

Error contract: a file that is not a regular file (a FIFO, a device, a socket: refused
before any read), not JSON, not a Chrome trace, truncated (gzip or JSON), not UTF-8,
followed by more data (a second gzip member or document), whose kept events have a field of
the wrong type, a key given twice, an integer beyond 64 bits, a negative ``dur`` or a
``ts``/``dur`` beyond the plausibility bounds (``timestamp_seconds``, ``op_seconds``) ends in
an :class:`~stragglers.errors.InputError` naming the file, the field and the event index
(``traceEvents[i]``). Sizes are checked while reading (``kineto_bytes`` of uncompressed JSON,
``kineto_events`` per file, ``kineto_event_bytes`` per event and for the keys around the
events, ``nesting`` on the bytes), before anything grows beyond them. Counters keyed by
input values (categories, unmatched annotation names) keep a bounded number of keys.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import math
import os
import stat
import threading
import zlib
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import eq, is_not
from pathlib import Path
from typing import IO, Any, NoReturn

import numpy as np

from stragglers.errors import InputError
from stragglers.kineto.jsonstream import (
    Batch,
    EventSyntaxError,
    iter_event_batches,
    loads_strict,
    read_header,
    split_trailer,
)
from stragglers.kineto.patterns import (
    COMM_ANNOTATION_RE,
    MB_RE,
    NCCL_KERNEL_RE,
    STEP_RE,
    Patterns,
)
from stragglers.limits import LIMITS, check_limit, limit
from stragglers.trace import schema

CHUNK = 1 << 20
#: The largest micro-batch number of an annotation name (``mb_id`` is a 32-bit integer).
MB_MAX = 2**31 - 1

#: Communication kinds (codes are the index).
COMM_KINDS: tuple[str, ...] = (
    "allreduce", "allgather", "reducescatter", "send", "recv", "sendrecv", "broadcast",
    "alltoall", "barrier", "reduce", "gather", "scatter", "other", "wait",
)
COMM_CODE = {k: i for i, k in enumerate(COMM_KINDS)}
#: Directions of the memory copies kept (``gpu_memcpy`` events named ``Memcpy DtoH ...`` /
#: ``Memcpy HtoD ...``; the others are counted, not kept).
DTOH, HTOD = 1, 2
#: Optypes timed as compute (by their compute kernels, else their CPU range less the time
#: their thread spends in communication).
COMPUTE_LIKE = frozenset({schema.FORWARD_COMPUTE, schema.BACKWARD_COMPUTE, schema.OPTIMIZER,
                          schema.GC})
COMPUTE_LIKE_CODES = np.array(sorted(schema.OPTYPE_CODE[t] for t in COMPUTE_LIKE),
                              dtype=np.int8)
#: CPU op names of collective calls and waits (the dispatcher's c10d ops, functional
#: collectives, the profiler's record of a collective)
COMM_CPU_OP_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::",
                        "record_param_comms")
_KIND_ALIASES = {
    "all_reduce": "allreduce", "allreduce_coalesced": "allreduce",
    "all_reduce_coalesced": "allreduce",
    "all_gather": "allgather", "_allgather_base": "allgather", "_all_gather_base": "allgather",
    "all_gather_into_tensor": "allgather", "allgather_into_tensor_coalesced": "allgather",
    "all_gather_into_tensor_coalesced": "allgather", "allgather_coalesced": "allgather",
    "reduce_scatter": "reducescatter", "_reduce_scatter_base": "reducescatter",
    "reduce_scatter_tensor": "reducescatter", "reduce_scatter_tensor_coalesced":
    "reducescatter", "reducescatter_coalesced": "reducescatter",
    "all_to_all": "alltoall", "alltoall_base": "alltoall", "all_to_all_single": "alltoall",
    "alltoallv": "alltoall",
}


def comm_kind(name: str) -> int:
    """Code of a collective name (``allreduce``, ``AllReduce``, ``all_gather``, ...)."""
    low = name.strip().lower()
    low = _KIND_ALIASES.get(low, low.replace("_", ""))
    return COMM_CODE.get(low, COMM_CODE["other"])


@dataclass(frozen=True)
class Group:
    """A process group as the trace describes it (any field may be unknown)."""

    ranks: tuple[int, ...] | None
    size: int | None
    desc: str | None


@dataclass
class RankEvents:
    """The kept events of one rank file, as numpy columns (times in microseconds)."""

    path: str
    rank: int
    world_size: int | None
    host: str | None
    pg_config: list[dict[str, Any]]
    n_events: int
    threads: dict[int, str]
    # ProfilerStep#N
    step_n: np.ndarray
    step_ts: np.ndarray
    step_end: np.ndarray
    # matched annotations
    ann_type: np.ndarray
    ann_mb: np.ndarray
    ann_ts: np.ndarray
    ann_end: np.ndarray
    ann_tid: np.ndarray
    ann_idx: np.ndarray
    # CPU communication events (record_param_comms, then nccl:* annotations)
    cc_kind: np.ndarray
    cc_group: np.ndarray
    cc_peer: np.ndarray
    cc_ts: np.ndarray
    cc_end: np.ndarray
    cc_tid: np.ndarray
    cc_idx: np.ndarray
    cc_rpc: np.ndarray  # True: record_param_comms; False: backend annotation
    cc_seq: np.ndarray  # record_param_comms' sequence number in its group (args.Seq), or -1
    #: record_param_comms' message (``In msg nelems``, ``Out msg nelems``, ``dtype``) as one
    #: number, the same on every rank for the same message; -1 when none is recorded
    cc_msg: np.ndarray
    # CUDA runtime launches
    rt_corr: np.ndarray
    rt_ts: np.ndarray
    rt_tid: np.ndarray
    # GPU kernels
    k_corr: np.ndarray
    k_ts: np.ndarray
    k_end: np.ndarray
    k_kind: np.ndarray  # comm kind code, -1 for compute kernels
    k_group: np.ndarray
    k_peer: np.ndarray
    k_idx: np.ndarray
    groups: list[Group]
    # device-to-host (DTOH) and host-to-device (HTOD) memory copies on the GPU
    m_corr: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    m_ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    m_end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    m_dir: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    m_stream: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ignored: Counter[str] = field(default_factory=Counter)
    names_unmatched: Counter[str] = field(default_factory=Counter)
    skipped: bool = False  # a collapsed (TP/CP) rank: only its header was read
    #: ``baseTimeNanoseconds``: the event times are microseconds after it (None: absent, the
    #: times are the profiler clock's own)
    base_ns: int | None = None
    #: CPU ops of the threads of the compute annotations, read (``cpu_read``) only in a file
    #: without GPU kernels whose compute annotations overlap a communication call:
    #: start, end, thread, and whether the op is a collective call or wait
    cpu_read: bool = False
    cpu_ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cpu_end: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cpu_tid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cpu_comm: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


class _Cols:
    def __init__(self, spec: dict[str, str]) -> None:
        self.cols = {k: array(t) for k, t in spec.items()}

    def add(self, **values: Any) -> None:
        for k, v in values.items():
            self.cols[k].append(v)

    def np(self, name: str) -> np.ndarray:
        """The column as a numpy array over the column's own memory (not a copy: the
        columns are not appended to once read, and a copy would double them at the end of
        the read, the peak of memory of a rank file)."""
        a = self.cols[name]
        return np.frombuffer(a, dtype=a.typecode) if len(a) else np.zeros(0, a.typecode)


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"))


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is (``a FIFO``, ``a socket``, ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def not_regular(path: Path, mode: int) -> InputError:
    return InputError(f"{path}: not a regular file ({file_kind(mode)}): a profiler trace is "
                      "read from a regular file (or a link to one)")


def _open(path: Path) -> IO[bytes]:
    """The file's bytes, decompressed if gzipped; refused unless it is a regular file (a
    FIFO, a device or a socket would block or never end: it is opened without blocking and
    checked before any read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(path, mode)
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    magic = fh.read(2)
    fh.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=fh, mode="rb")  # type: ignore[return-value]
    return fh


class _Bounds:
    """Plausibility bounds of the event times, in microseconds (``timestamp_seconds``,
    ``op_seconds``): beyond them a value is a unit or recording error (and would be lost in
    float rounding or written out as a time the analysis refuses)."""

    def __init__(self) -> None:
        self.ts = limit("timestamp_seconds") * 1e6
        self.dur = limit("op_seconds") * 1e6

    def why(self, key: str, v: Any) -> str:
        """The reason a ``ts`` or ``dur`` value is refused (it is a number)."""
        if key == "dur" and v < 0:
            return f"field 'dur' is negative ({v!r:.30}): a duration cannot be negative"
        name = "timestamp_seconds" if key == "ts" else "op_seconds"
        lim = LIMITS[name]
        return (f"field '{key}' is {v!r:.30} us, beyond {limit(name):,} s ({lim.what}; wrong "
                f"unit? set {lim.env} to raise the bound)")


def _num(ev: dict[str, Any], key: str, where: str, bounds: _Bounds) -> float:
    v = ev.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{where}: field '{key}' must be a number, got {v!r:.60}")
    f = float(v)
    if not math.isfinite(f):
        raise InputError(f"{where}: field '{key}' is not finite ({v!r})")
    if not ((-bounds.ts <= f <= bounds.ts) if key == "ts" else (0.0 <= f <= bounds.dur)):
        raise InputError(f"{where}: {bounds.why(key, f)}")
    return f


def _int(value: Any, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InputError(f"{where}: field '{key}' must be an integer, got {value!r:.60}")
    try:
        return int(value)
    except ValueError:
        raise InputError(f"{where}: field '{key}' must be an integer, got {value!r:.60}"
                         ) from None


def _ranks_list(value: Any, where: str) -> tuple[int, ...] | None:
    """``Process Group Ranks``: a list, or its string form ``"[0, 1]"``."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().strip("[]").strip()
        if not text:
            return None
        parts = text.split(",")
        check_limit("topology_ranks", len(parts), f"{where}: field 'Process Group Ranks'")
        return tuple(_int(p.strip(), where, "Process Group Ranks") for p in parts)
    if isinstance(value, list):
        check_limit("topology_ranks", len(value), f"{where}: field 'Process Group Ranks'")
        return tuple(_int(p, where, "Process Group Ranks") for p in value)
    raise InputError(f"{where}: field 'Process Group Ranks' must be a list of ranks")


#: Types of the values :meth:`_Reader.columns` keeps as they are (``bool`` is not ``int``).
_INT = frozenset({int})
_NUM = frozenset({int, float})
_STR = frozenset({str})
_DICT = frozenset({dict})
#: Integers up to this magnitude are exact as floats, and so are sums of two of them:
#: :meth:`_Reader.columns` gives the values (and ``ts + dur``) :meth:`_Reader.event` gives.
_EXACT = float(1 << 52)


class _Reader:
    def __init__(self, path: Path, patterns: Patterns) -> None:
        self.path = path
        self.patterns = patterns
        self.threads: dict[int, str] = {}
        self.steps = _Cols({"n": "q", "ts": "d", "end": "d"})
        self.ann = _Cols({"type": "b", "mb": "q", "ts": "d", "end": "d", "tid": "q",
                          "idx": "q"})
        self.cc = _Cols({"kind": "b", "group": "q", "peer": "q", "ts": "d", "end": "d",
                         "tid": "q", "idx": "q", "rpc": "b", "seq": "q", "msg": "q"})
        self.rt = _Cols({"corr": "q", "ts": "d", "tid": "q"})
        self.k = _Cols({"corr": "q", "ts": "d", "end": "d", "kind": "b", "group": "q",
                        "peer": "q", "idx": "q"})
        self.m = _Cols({"corr": "q", "ts": "d", "end": "d", "dir": "b", "stream": "q"})
        # bound appends of the hot columns (runtime launches and kernels)
        self.rt_corr, self.rt_ts, self.rt_tid = (self.rt.cols[k].append
                                                 for k in ("corr", "ts", "tid"))
        (self.k_corr, self.k_ts, self.k_end, self.k_kind, self.k_group, self.k_peer,
         self.k_idx) = (self.k.cols[k].append for k in
                        ("corr", "ts", "end", "kind", "group", "peer", "idx"))
        self.groups: dict[Group, int] = {}
        self.ignored: Counter[str] = Counter()
        self.unmatched: Counter[str] = Counter()
        self._name_cache: dict[str, tuple[int, int]] = {}
        self.n = 0
        self.bounds = _Bounds()
        self.ts_lo, self.ts_hi, self.dur_hi = -self.bounds.ts, self.bounds.ts, self.bounds.dur
        self._held_k: Any = ()  # a batch's compute kernels kept by :meth:`columns`

    def group_id(self, args: dict[str, Any], where: str) -> int:
        ranks = _ranks_list(args.get("Process Group Ranks"), where)
        size_raw = args.get("Group size")
        size = _int(size_raw, where, "Group size") if size_raw is not None else None
        desc = args.get("Process Group Description") or args.get("Process Group Name")
        if ranks is None and size is None and desc is None:
            return -1
        g = Group(ranks, size if size is not None else (len(ranks) if ranks else None),
                  str(desc) if desc is not None else None)
        return self.groups.setdefault(g, len(self.groups))

    def peer(self, args: dict[str, Any], kind: int, where: str) -> int:
        key = "Dst Rank" if kind == COMM_CODE["send"] else "Src Rank"
        v = args.get(key)
        if v is None:
            v = args.get("Dst Rank", args.get("Src Rank"))
        if v is None:
            return -1
        return _int(v, where, key)

    def classify_annotation(self, name: str) -> tuple[int, int]:
        """(code, mb): code >= 0 an optype; -2 a step; -3 a comm annotation; -1 nothing."""
        hit = self._name_cache.get(name)
        if hit is not None:
            return hit
        m = STEP_RE.match(name)
        if m:
            out = (-2, int(m.group(1)))
        else:
            optype = self.patterns.match(name)
            if optype is not None:
                mb = MB_RE.search(name)
                digits = mb.group(1) if mb else ""
                out = (schema.OPTYPE_CODE[optype],
                       -1 if not mb else int(digits) if len(digits) <= 10 else MB_MAX + 1)
            else:
                c = COMM_ANNOTATION_RE.match(name)
                out = (-3, comm_kind(c.group(1))) if c else (-1, -1)
        if len(self._name_cache) < 100_000 and len(name) <= 200 \
                and not name.startswith("ProfilerStep#"):
            self._name_cache[name] = out
        return out

    def where(self, i: int) -> str:
        return f"{self.path}: traceEvents[{i}]"

    def event(self, ev: Any, i: int) -> None:
        """Keep what the importer uses of one event (the hot loop: cheap checks first)."""
        args: Any
        tid: Any
        ts: Any
        if type(ev) is not dict:
            raise InputError(f"{self.where(i)}: each event must be a JSON object, got "
                             f"{type(ev).__name__}")
        ph = ev.get("ph")
        if ph != "X":
            if ph == "M" and ev.get("name") == "thread_name":
                args = ev.get("args")
                tid = ev.get("tid")
                if type(tid) is int and type(args) is dict:
                    self.threads[tid] = str(args.get("name", ""))[:_NAME_CHARS]
            _tally(self.ignored, "metadata" if ph == "M" else f"ph {_short(ph)}")
            return
        cat = ev.get("cat")
        if cat == "cuda_runtime" or cat == "cuda_driver":
            args = ev.get("args")
            corr: Any = args.get("correlation") if type(args) is dict else None
            if corr is None:
                self.ignored[cat] += 1
                return
            ts = ev.get("ts")
            tid = ev.get("tid")
            if type(corr) is not int or type(tid) is not int \
                    or not _in(ts, self.ts_lo, self.ts_hi):
                self._bad(ev, i, ("args.correlation", corr, int), ("tid", tid, int),
                          ("ts", ts, "ts"))
            self.rt_corr(corr)
            self.rt_ts(ts)
            self.rt_tid(tid)
            return
        name: Any = ev.get("name")
        if cat == "gpu_memcpy":
            if type(name) is not str:
                self._bad(ev, i, ("name", name, str))
            direction = DTOH if "DtoH" in name else HTOD if "HtoD" in name else 0
            if not direction:
                self.ignored[cat] += 1
                return
            args = ev.get("args")
            ts, dur = ev.get("ts"), ev.get("dur")
            corr = args.get("correlation") if type(args) is dict else None
            stream = args.get("stream", ev.get("tid")) if type(args) is dict else None
            if type(corr) is not int or type(stream) is not int \
                    or not _in(ts, self.ts_lo, self.ts_hi) or not _in(dur, 0.0, self.dur_hi):
                self._bad(ev, i, ("args", args, dict), ("args.correlation", corr, int),
                          ("args.stream", stream, int), ("ts", ts, "ts"), ("dur", dur, "dur"))
            self.m.add(corr=corr, ts=ts, end=ts + dur, dir=direction, stream=stream)
            return
        if cat == "kernel":
            args = ev.get("args")
            ts, dur = ev.get("ts"), ev.get("dur")
            corr = args.get("correlation", -1) if type(args) is dict else None
            if type(corr) is not int or not _in(ts, self.ts_lo, self.ts_hi) \
                    or not _in(dur, 0.0, self.dur_hi) or type(name) is not str:
                self._bad(ev, i, ("args", args, dict), ("args.correlation", corr, int),
                          ("ts", ts, "ts"), ("dur", dur, "dur"), ("name", name, str))
            self.k_corr(corr)
            self.k_ts(ts)
            self.k_end(ts + dur)
            self.k_idx(i)
            m = NCCL_KERNEL_RE.match(name) if name.startswith("nccl") else None
            if m is None:
                self.k_kind(-1)
                self.k_group(-1)
                self.k_peer(-1)
                return
            coll = args.get("Collective name")
            kind = comm_kind(coll if isinstance(coll, str) else m.group(1))
            self.k_kind(kind)
            self.k_group(self.group_id(args, self.where(i)))
            self.k_peer(self.peer(args, kind, self.where(i)))
            return
        if cat == "cpu_op":
            if name != "record_param_comms":
                self.ignored["cpu_op"] += 1
                return
            where = self.where(i)
            args = ev.get("args")
            args = args if isinstance(args, dict) else {}
            coll = args.get("Collective name")
            kind = comm_kind(coll) if isinstance(coll, str) else -1
            ts = _num(ev, "ts", where, self.bounds)
            seq = args.get("Seq", args.get("seq"))
            self.cc.add(kind=kind, group=self.group_id(args, where),
                        peer=self.peer(args, kind, where), ts=ts,
                        end=ts + _num(ev, "dur", where, self.bounds),
                        tid=_int(ev.get("tid"), where, "tid"),
                        idx=i, rpc=1, seq=-1 if seq is None else _int(seq, where, "Seq"),
                        msg=_msg_key(args))
            return
        if cat == "user_annotation":
            if type(name) is not str:
                self._bad(ev, i, ("name", name, str))
            code, extra = self.classify_annotation(name)
            if code == -1:
                _tally(self.unmatched, _short(name), 1_000)
                return
            where = self.where(i)
            ts = _num(ev, "ts", where, self.bounds)
            end = ts + _num(ev, "dur", where, self.bounds)
            tid = _int(ev.get("tid"), where, "tid")
            if code == -2:
                self.steps.add(n=extra, ts=ts, end=end)
            elif code == -3:
                self.cc.add(kind=extra, group=-1, peer=-1, ts=ts, end=end, tid=tid, idx=i, rpc=0,
                            seq=-1, msg=-1)
            else:
                if extra > MB_MAX:
                    raise InputError(f"{where}: field 'name': the micro-batch number of "
                                     f"{name!r:.80} is beyond {MB_MAX:,} (mb_id is a 32-bit "
                                     "integer)")
                self.ann.add(type=code, mb=extra, ts=ts, end=end, tid=tid, idx=i)
            return
        _tally(self.ignored, _short(cat))

    def columns(self, batch: Batch) -> list[int] | None:
        """Keep a batch's CUDA launches and compute kernels (the bulk of a kernel-dense
        trace) column by column, with the values and checks of :meth:`event`; return the
        positions (in the batch) of its other events, for :meth:`event` in file order, then
        :meth:`columns_done`. The categories come from the bytes (``batch.cats``: exact,
        the event's only top-level ``"cat"``); a launch without a correlation id, an event
        whose ``ph`` is not ``X`` and an NCCL kernel are among the others. None (nothing
        kept) where a launch or compute kernel would be refused or is out of the ordinary
        (a field of another type, a value out of bounds or beyond 2^52, an integer beyond
        64 bits): the batch is then read event by event (:meth:`event` says why)."""
        cats = batch.cats
        if cats is None:
            return None
        is_rt, is_k = cats == 2, cats == 1
        if not is_k.any() and not is_rt.any():
            return None
        events = batch.events
        get: Any = dict.get
        hold = np.zeros(len(events), bool)  # kept here
        rt_pos = np.flatnonzero(is_rt)
        rts = list(map(events.__getitem__, rt_pos.tolist()))
        args = list(map(get, rts, repeat("args")))
        if not set(map(type, args)) <= _DICT:
            return None
        corr = list(map(get, args, repeat("correlation")))
        ph = list(map(get, rts, repeat("ph")))
        # counted in C (``==``, as ``eq``); the mask is built only where one is left out
        if ph.count("X") != len(ph) or None in corr:
            ok = np.fromiter(map(eq, ph, repeat("X")), bool, len(rts))
            ok &= np.fromiter(map(is_not, corr, repeat(None)), bool, len(rts))
            rts, corr = list(compress(rts, ok)), list(compress(corr, ok))
            rt_pos = rt_pos[ok]
        ts = list(map(get, rts, repeat("ts")))
        tid = list(map(get, rts, repeat("tid")))
        if not (set(map(type, corr)) <= _INT and set(map(type, tid)) <= _INT
                and set(map(type, ts)) <= _NUM):
            return None
        k_pos = np.flatnonzero(is_k)
        kev = list(map(events.__getitem__, k_pos.tolist()))
        name = list(map(get, kev, repeat("name")))
        if not set(map(type, name)) <= _STR:
            return None
        ph = list(map(get, kev, repeat("ph")))
        nccl = list(map(str.startswith, name, repeat("nccl")))
        if ph.count("X") != len(ph) or True in nccl:
            ok = np.fromiter(map(eq, ph, repeat("X")), bool, len(kev))
            ok &= ~np.fromiter(nccl, bool, len(kev))
            kev = list(compress(kev, ok))
            k_pos = k_pos[ok]
        kargs = list(map(get, kev, repeat("args")))
        if not set(map(type, kargs)) <= _DICT:
            return None
        kcorr = list(map(get, kargs, repeat("correlation"), repeat(-1)))
        kts = list(map(get, kev, repeat("ts")))
        kdur = list(map(get, kev, repeat("dur")))
        if not (set(map(type, kcorr)) <= _INT and set(map(type, kts)) <= _NUM
                and set(map(type, kdur)) <= _NUM):
            return None
        try:
            c_rt, c_tid, c_k = (np.array(v, np.int64) for v in (corr, tid, kcorr))
            t_rt, t_k, d_k = (np.array(v, np.float64) for v in (ts, kts, kdur))
        except OverflowError:  # an integer beyond 64 bits (or a float's range)
            return None
        lo, hi = max(self.ts_lo, -_EXACT), min(self.ts_hi, _EXACT)
        for t in (t_rt, t_k):
            if t.size and not (lo <= t.min() and t.max() <= hi):
                return None
        if d_k.size and not (0.0 <= d_k.min() and d_k.max() <= min(self.dur_hi, _EXACT)):
            return None
        for name_, v in (("corr", c_rt), ("ts", t_rt), ("tid", c_tid)):
            self.rt.cols[name_].frombytes(v.tobytes())
        hold[rt_pos] = True
        hold[k_pos] = True
        self._held_k = (k_pos, len(self.k.cols["ts"]), {
            "corr": c_k, "ts": t_k, "end": t_k + d_k, "kind": np.full(c_k.size, -1, np.int8),
            "group": np.full(c_k.size, -1, np.int64), "peer": np.full(c_k.size, -1, np.int64),
            "idx": batch.index[k_pos].astype(np.int64)})
        return np.flatnonzero(~hold).tolist()

    def columns_done(self, slow_k: list[int]) -> None:
        """After the other events of a batch (:meth:`columns`), ``slow_k`` the positions of
        those :meth:`event` kept as kernels (NCCL ones, ...): the batch's compute kernels
        put among them, in file order."""
        k_pos, n0, new = self._held_k
        self._held_k = ()
        cols = self.k.cols
        if slow_k:  # merged by position in the batch
            order = np.argsort(np.r_[k_pos, slow_k], kind="stable")
            for key, a in cols.items():
                tail = np.frombuffer(a, a.typecode)[n0:].copy()
                del a[n0:]
                new[key] = np.r_[new[key].astype(a.typecode), tail][order]
        for key, a in cols.items():
            a.frombytes(new[key].astype(a.typecode, copy=False).tobytes())

    def cpu_ops(self, fh: IO[bytes], tids: set[int]) -> _Cols:
        """Second pass: the CPU ops of threads ``tids`` (start, end, thread, collective call
        or wait). Only the ``cpu_op`` events are parsed."""
        cols = _Cols({"ts": "d", "end": "d", "tid": "q", "comm": "b"})
        c_ts, c_end, c_tid, c_comm = (cols.cols[k].append for k in ("ts", "end", "tid", "comm"))
        prefixes = COMM_CPU_OP_PREFIXES
        ts_lo, ts_hi, dur_hi = self.ts_lo, self.ts_hi, self.dur_hi
        for batch in iter_event_batches(_CountingReader(fh, self.path),
                                        only=frozenset({b"cpu_op"})):
            for ev, i in zip(batch.events, batch.index.tolist(), strict=True):
                if type(ev) is not dict or ev.get("ph") != "X" or ev.get("cat") != "cpu_op":
                    continue
                tid = ev.get("tid")
                if type(tid) is not int or tid not in tids:  # not a thread of ``tids``
                    continue
                ts: Any
                dur: Any
                name: Any
                ts, dur, name = ev.get("ts"), ev.get("dur"), ev.get("name")
                if not _in(ts, ts_lo, ts_hi) or not _in(dur, 0.0, dur_hi) \
                        or type(name) is not str:
                    self._bad(ev, i, ("ts", ts, "ts"), ("dur", dur, "dur"), ("name", name, str))
                c_ts(ts)
                c_end(ts + dur)
                c_tid(tid)
                c_comm(name.startswith(prefixes))
            del batch  # not alive while the next batch is parsed
            ev = None
        return cols

    def _bad(self, ev: dict[str, Any], i: int, *checks: tuple[str, Any, Any]) -> NoReturn:
        """Raise for the first field of ``checks`` that has the wrong type or (``"ts"``,
        ``"dur"``: a number) a value beyond its bounds."""
        words = {int: "an integer", float: "a number", str: "a string", dict: "an object",
                 "ts": "a number", "dur": "a number"}
        for field_name, value, kind in checks:
            ok = (_finite(value) if kind in (float, "ts", "dur") else
                  type(value) is kind if kind is not int else
                  isinstance(value, int) and not isinstance(value, bool))
            if not ok:
                raise InputError(f"{self.where(i)}: field '{field_name}' must be "
                                 f"{words[kind]}, got {value!r:.60}")
            if kind == "ts" and not _in(value, self.ts_lo, self.ts_hi) or \
                    kind == "dur" and not _in(value, 0.0, self.dur_hi):
                raise InputError(f"{self.where(i)}: {self.bounds.why(kind, value)}")
        raise AssertionError("_bad called without a bad field")  # pragma: no cover


#: The longest thread name kept, and category or ``ph`` text counted (characters).
_NAME_CHARS = 1000
_SHORT_CHARS = 60
#: The counter key of what is counted beyond the distinct keys kept (:func:`_tally`).
OTHER = "(other values)"


def _short(value: Any) -> str:
    """A category or ``ph`` of the input as a bounded counter key."""
    text = value if isinstance(value, str) else repr(value)[:_SHORT_CHARS + 1]
    return text if len(text) <= _SHORT_CHARS else text[:_SHORT_CHARS] + "..."


def _tally(counter: Counter[str], key: str, distinct: int = 64) -> None:
    """Count ``key``; beyond ``distinct`` keys, a new one is counted as :data:`OTHER` (the
    input chooses the keys: their number must not grow with it)."""
    if key in counter or len(counter) < distinct:
        counter[key] += 1
    else:
        counter[OTHER] += 1


def _in(v: Any, lo: float, hi: float) -> bool:
    """``v`` is a number (not a bool) in [lo, hi] (so finite)."""
    t = type(v)
    return (t is float or t is int) and lo <= v <= hi


def _msg_key(args: dict[str, Any]) -> int:
    """The message of a ``record_param_comms`` call as one number (CRC-32 of its element
    counts and type, the same in every process; older traces: its input shapes and types),
    or -1 when the call records none."""
    parts: tuple[Any, ...] = (args.get("In msg nelems"), args.get("Out msg nelems"),
                              args.get("dtype"))
    if all(v is None for v in parts):
        parts = (args.get("Input Dims"), args.get("Input type"))
        if all(v is None for v in parts):
            return -1
    return zlib.crc32("|".join(str(v) for v in parts).encode())


def _finite(v: Any) -> bool:
    t = type(v)
    return (t is float and math.isfinite(v)) or t is int


class _CountingReader:
    """Read a (decompressed) stream in chunks, counting bytes against the limit."""

    def __init__(self, fh: IO[bytes], path: Path) -> None:
        self.fh, self.path, self.total = fh, path, 0
        self.cap = limit("kineto_bytes")

    def read(self, size: int = -1) -> bytes:
        try:
            chunk = self.fh.read(size if size >= 0 else CHUNK)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise InputError(f"{self.path}: damaged or truncated gzip data after "
                             f"{self.total:,} bytes ({exc})") from None
        self.total += len(chunk)
        if self.total > self.cap:
            check_limit("kineto_bytes", self.total, f"{self.path} (uncompressed)")
        return chunk


def _base_ns(value: Any, where: str) -> int | None:
    """``baseTimeNanoseconds``: a non-negative integer (or absent), within the plausibility
    bound of a time (``timestamp_seconds``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{where}: field 'baseTimeNanoseconds' must be a non-negative "
                         f"integer, got {value!r:.60}")
    if value > limit("timestamp_seconds") * 10**9:
        lim = LIMITS["timestamp_seconds"]
        raise InputError(f"{where}: field 'baseTimeNanoseconds' is {value} ns, beyond "
                         f"{limit(lim.name):,} s ({lim.what}; wrong "
                         f"unit? set {lim.env} to raise the bound)")
    return value


def _top_keys(text: bytes, p: Path, where: str) -> dict[str, Any]:
    """The top-level keys ``where`` (before or after the events array) as a dict."""
    try:
        doc = loads_strict(text)
    except EventSyntaxError as exc:
        raise InputError(f"{p}: {exc} {where}") from None
    if not isinstance(doc, dict):  # pragma: no cover - the bytes are an object
        raise InputError(f"{p}: not a JSON object {where}")
    return doc


#: The garbage collector's first threshold while a rank file is read (:func:`_few_collections`)
GC_THRESHOLD = 200_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] = ()


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """Fewer collections of the young generation while events are parsed: the parser
    makes a dict per event (none in a reference cycle: freed when its batch is done), and
    at the default threshold (700 allocations) the collector ran about every 20 events,
    looking at each of them again (about 10% of the reader's CPU time on a generated
    kernel-dense trace). Process-wide, so counted: the first reader raises the threshold
    and the last one restores it (threads of a Dask worker read files side by side)."""
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(_gc_saved[0], GC_THRESHOLD), *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)


def read_rank_file(path: str | Path, patterns: Patterns,
                   keep_rank: Any = None) -> RankEvents:
    """Stream ``path`` into a :class:`RankEvents`.

    ``keep_rank(rank, distributedInfo)`` (optional) is asked once it is known; when it
    returns False the events are not read (a collapsed TP/CP rank; when ``distributedInfo``
    comes after the events, they are read and dropped).
    """
    with _few_collections():
        return _read_rank_file(path, patterns, keep_rank)


def _read_rank_file(path: str | Path, patterns: Patterns, keep_rank: Any,
                    after_batch: Any = None) -> RankEvents:
    """``after_batch(reader)`` (optional) is called after each batch of events is kept (it
    may drop rows from the end of the launch and kernel columns: a window of the file,
    :mod:`stragglers.kineto.windowed`); the kernels it drops count as the file's when the
    second pass is decided (the CPU ops of a file without GPU kernels: read in either
    case, so that its events are the one-pass events)."""
    p = Path(path)
    reader = _Reader(p, patterns)
    max_events = limit("kineto_events")
    skipped = False
    counting: _CountingReader | None = None
    cpu: _Cols | None = None
    i = -1
    dropped = 0  # kernels dropped by ``after_batch``
    try:
        with _open(p) as fh:
            counting = _CountingReader(fh, p)
            head, start = read_header(counting)
            top = _top_keys(head, p, "before the traceEvents array")
            info = top.get("distributedInfo")
            if info is not None:
                rank, world = _rank_of(info, p)
                skipped = keep_rank is not None and not keep_rank(rank, info)
            if not skipped:
                trailer: list[bytes] = []
                try:
                    for batch in iter_event_batches(counting, trailer, start=start):
                        if reader.n + batch.count > max_events:
                            check_limit("kineto_events", reader.n + batch.count, str(p))
                        others = reader.columns(batch)
                        if others is None:  # event by event
                            for ev, i in zip(batch.events, batch.index.tolist(),
                                             strict=True):
                                reader.event(ev, i)
                        else:
                            evs, idx = batch.events, batch.index
                            kernels = reader.k.cols["ts"]
                            slow_k = []  # the others kept as kernels
                            for j in others:
                                ev, i = evs[j], int(idx[j])
                                before = len(kernels)
                                reader.event(ev, i)
                                if len(kernels) != before:
                                    slow_k.append(j)
                            reader.columns_done(slow_k)
                        reader.ignored.update(batch.skipped)
                        reader.n += batch.count
                        del batch  # not alive while the next batch is parsed
                        ev = None
                        if after_batch is not None:
                            kept = len(reader.k.cols["ts"])
                            after_batch(reader)
                            dropped += kept - len(reader.k.cols["ts"])
                except OverflowError:  # an integer beyond the 64-bit columns
                    raise InputError(f"{reader.where(i)}: {_too_big(ev)}") from None
                text, after = split_trailer(trailer[0])
                if after:
                    raise InputError(f"{p}: {after:,} bytes after the end of the JSON "
                                     "document (a second gzip member or a second JSON "
                                     "document?)")
                tail = _top_keys(text, p, "after the traceEvents array")
                twice = sorted(set(top) & set(tail))
                if twice:
                    raise InputError(f"{p}: field '{twice[0]}' given twice (before and "
                                     "after the traceEvents array)")
                top |= tail
                if info is None and "distributedInfo" in tail:
                    info = tail["distributedInfo"]
                    rank, world = _rank_of(info, p)
                    skipped = keep_rank is not None and not keep_rank(rank, info)
        if info is None:
            raise InputError(f"{p}: field 'distributedInfo' missing: the rank of this trace "
                             "is unknown (record the trace in a torch.distributed job)")
        if not skipped:
            tids = _cpu_timed_threads(reader, dropped)
            if tids:
                with _open(p) as fh:
                    cpu = reader.cpu_ops(fh, tids)
    except OSError as exc:
        raise InputError(f"{p}: cannot read the trace file ({exc.strerror or exc})") from None
    except EventSyntaxError as exc:
        at = f", byte {counting.total:,} of the uncompressed data" if counting else ""
        if exc.index < 0:
            raise InputError(f"{p}: {exc}") from None
        raise InputError(f"{p}: traceEvents[{exc.index}]{at}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: bytes that are not UTF-8 near traceEvents[{reader.n}] "
                         f"({exc.reason})") from None
    host = top.get("host_name")
    pg = info.get("pg_config") if isinstance(info, dict) else None
    pg_config = pg if isinstance(pg, list) else []
    if not skipped and reader.n == 0:
        raise InputError(f"{p}: field 'traceEvents' missing or empty: not a profiler trace")
    if skipped:  # a collapsed rank: its events are not used (read only when its
        reader = _Reader(p, patterns)  # distributedInfo comes after them)
    groups = [g for g, _ in sorted(reader.groups.items(), key=lambda kv: kv[1])]
    s, a, c, r, k, m = reader.steps, reader.ann, reader.cc, reader.rt, reader.k, reader.m
    out = RankEvents(
        path=str(p), rank=rank, world_size=world,
        host=host if isinstance(host, str) else None,
        pg_config=pg_config, n_events=reader.n, threads=reader.threads,
        step_n=s.np("n"), step_ts=s.np("ts"), step_end=s.np("end"),
        ann_type=a.np("type").astype(np.int8), ann_mb=a.np("mb"), ann_ts=a.np("ts"),
        ann_end=a.np("end"), ann_tid=a.np("tid"), ann_idx=a.np("idx"),
        cc_kind=c.np("kind").astype(np.int8), cc_group=c.np("group"), cc_peer=c.np("peer"),
        cc_ts=c.np("ts"), cc_end=c.np("end"), cc_tid=c.np("tid"), cc_idx=c.np("idx"),
        cc_rpc=c.np("rpc").astype(bool), cc_seq=c.np("seq"), cc_msg=c.np("msg"),
        rt_corr=r.np("corr"), rt_ts=r.np("ts"), rt_tid=r.np("tid"),
        k_corr=k.np("corr"), k_ts=k.np("ts"), k_end=k.np("end"),
        k_kind=k.np("kind").astype(np.int8), k_group=k.np("group"), k_peer=k.np("peer"),
        k_idx=k.np("idx"), groups=groups,
        m_corr=m.np("corr"), m_ts=m.np("ts"), m_end=m.np("end"),
        m_dir=m.np("dir").astype(np.int8), m_stream=m.np("stream"), ignored=reader.ignored,
        names_unmatched=reader.unmatched, skipped=skipped,
        base_ns=_base_ns(top.get("baseTimeNanoseconds"), str(p)),
    )
    if cpu is not None:
        out.cpu_read = True
        out.cpu_ts, out.cpu_end = cpu.np("ts"), cpu.np("end")
        out.cpu_tid, out.cpu_comm = cpu.np("tid"), cpu.np("comm").astype(bool)
    return out


def _too_big(ev: Any) -> str:
    """The field of an event whose integer does not fit the 64-bit columns."""
    fields: list[tuple[str, Any]] = list(ev.items()) if isinstance(ev, dict) else []
    args = ev.get("args") if isinstance(ev, dict) else None
    if isinstance(args, dict):
        fields += [(f"args.{k}", v) for k, v in args.items()]
    for name, v in fields:
        if isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**63:
            return f"field '{name}' is {v}, beyond the 64-bit integer range"
    return "an integer beyond the 64-bit range"  # pragma: no cover


def _cpu_timed_threads(reader: _Reader, dropped: int = 0) -> set[int]:
    """The threads whose CPU ops the importer needs: in a file without GPU kernels (its
    compute annotations are timed by their CPU range; ``dropped``: kernels no longer in the
    reader's columns), those of the compute annotations that overlap a communication call
    (record_param_comms, nccl:*/gloo:* ranges, on any thread of the rank). Empty when
    none."""
    if len(reader.k.cols["ts"]) or dropped or not len(reader.cc.cols["end"]):
        return set()
    a = reader.ann
    types, ts, end, tid = a.np("type"), a.np("ts"), a.np("end"), a.np("tid")
    compute = np.isin(types, COMPUTE_LIKE_CODES)
    if not compute.any():
        return set()
    ts, end, tid = ts[compute], end[compute], tid[compute]
    c_ts, c_end = reader.cc.np("ts"), reader.cc.np("end")
    order = np.argsort(c_ts, kind="stable")
    run_end = np.maximum.accumulate(c_end[order])  # latest end of the calls started so far
    n = np.searchsorted(c_ts[order], end, "left")  # the calls started before each range ends
    overlaps = (n > 0) & (run_end[np.clip(n - 1, 0, None)] > ts)
    return {int(t) for t in np.unique(tid[overlaps])}


def _rank_of(info: Any, p: Path) -> tuple[int, int | None]:
    where = f"{p}: distributedInfo"
    if not isinstance(info, dict):
        raise InputError(f"{where}: must be an object")
    if "rank" not in info:
        raise InputError(f"{where}: field 'rank' missing")
    rank = _int(info["rank"], where, "rank")
    world = info.get("world_size")
    w = _int(world, where, "world_size") if world is not None else None
    if rank < 0 or (w is not None and not 0 <= rank < w):
        raise InputError(f"{where}: field 'rank' {rank} is outside 0..world_size-1")
    return rank, w
