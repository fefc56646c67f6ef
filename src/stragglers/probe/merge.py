"""Merge per-rank probe files into one trace + metadata in the analyzer's schema (§1).

Input: a directory with one ``rank-NNNNN.jsonl`` per process (written by
:class:`~stragglers.probe.Probe`) and the job metadata (parallel degrees). Output:
``trace.parquet`` with the columns ``dp_rank, stage, rank, step, optype, start_ts, duration,
seq_id, mc, mb_id, gmc`` (and ``gc_s``, seconds of garbage collection inside each op, when
every rank recorded it: ``ProbeConfig.record_gc``; and ``host``, the host name each rank
file's header gives, when every worker's file gives one) and ``meta.yaml`` with ``trial_name,
run_id, dp_size, dsp_size, pp_size, tp_size, vpp_size, world_size``.

What merging does:

* keeps one process per worker (DP rank × PP stage): TP and CP ranks run in lock-step, so only
  the files with ``tp_rank == 0`` and ``cp_rank == 0`` are used;
* aligns timestamps on rank 0's clock with the offsets each rank measured (interpolated
  between measurements, :class:`~stragglers.probe.clock.OffsetTrack`);
* keeps the steps that every worker finished (a ``step_end`` record in every file); others,
  e.g. the step a crash interrupted, are dropped and counted;
* checks every record (types, finite numbers, a span's end not before its start, a span
  shorter than the ``op_seconds`` limit): a bad line is an error naming the file and line,
  except a last line that cannot be parsed at all (a process killed mid-write), which is
  left out and reported (:attr:`MergeResult.incomplete_lines`);
* expands combined spans (one record, several op types) into one row per type;
* numbers ``seq_id`` per (worker, step, optype) by start time and fills ``mc``/``gmc``/``mb_id``
  by the schema's conventions (:func:`stragglers.probe.ops.normalise_ids`);
* expresses ``start_ts`` in seconds from the step's earliest start over all workers (the
  reference traces' origin), so that float precision does not depend on the run's length;
* checks the structure the analyzer's dependency model relies on
  (:func:`stragglers.probe.check.check_trace`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stragglers.atomic import StagedDir, check_out_dir
from stragglers.errors import InputError
from stragglers.inputs import JSONLineError, check_file, iter_lines, load_yaml, parse_json_line
from stragglers.limits import LIMITS, limit
from stragglers.probe.clock import ClockSample, OffsetTrack
from stragglers.probe.ops import OPTYPES, normalise_ids
from stragglers.trace.io import JobMeta

TRACE_COLUMNS: tuple[str, ...] = (
    "dp_rank", "stage", "rank", "step", "optype", "start_ts", "duration",
    "seq_id", "mc", "mb_id", "gmc",
)
META_KEYS: tuple[str, ...] = (
    "trial_name", "run_id", "dp_size", "dsp_size", "pp_size", "tp_size", "vpp_size",
    "world_size",
)
_DTYPES = {
    "dp_rank": "int16", "stage": "int16", "rank": "int32", "step": "int64",
    "start_ts": "float64", "duration": "float64", "seq_id": "int32", "mc": "int16",
    "mb_id": "int32", "gmc": "int32",
}


@dataclass(frozen=True, slots=True)
class RankHeader:
    """What the merge takes from a rank file's header: the process's global rank, its
    parallel coordinates, whether it recorded GC time, and its host name (None when the
    header has none)."""

    rank: int
    dp_rank: int
    stage: int
    tp_rank: int = 0
    cp_rank: int = 0
    gc_recorded: bool = False
    host: str | None = None


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """A checked span record: its step, op types, start and end on the rank's clock
    (seconds), microbatch and model chunk (-1 when not given), seconds of GC inside it (None
    when not recorded) and its line in the file."""

    step: int
    optypes: tuple[str, ...]
    start: float
    end: float
    mb_id: int
    mc: int
    gc_s: float | None
    line: int


@dataclass
class RankRecords:
    """What one rank file holds.

    ``incomplete`` describes the last line when it could not be read (typical of a process
    killed while writing): it is left out, and reported by the merge; None otherwise.
    """

    path: Path
    header: RankHeader
    samples: list[ClockSample]
    spans: list[SpanRecord]
    step_ends: set[int]
    incomplete: str | None = None


@dataclass
class _Reading:
    """A rank file being read: the records so far (the header once seen)."""

    header: RankHeader | None = None
    samples: list[ClockSample] = field(default_factory=list)
    spans: list[SpanRecord] = field(default_factory=list)
    step_ends: set[int] = field(default_factory=set)
    incomplete: str | None = None


@dataclass
class MergeResult:
    """A merged trace, its metadata, and what was left out."""

    trace: Any  # pandas.DataFrame
    meta: JobMeta
    steps: list[int]
    dropped_steps: list[int]
    problems: list[str]
    max_clock_rtt: float
    #: One line per rank file whose incomplete last line was left out.
    incomplete_lines: list[str] = field(default_factory=list)


class _RecordError(ValueError):
    """A record field of the wrong type or value (the message names the field)."""


def _int(obj: dict[str, Any], key: str, default: int | None = None, lo: int = 0) -> int:
    if key not in obj:
        if default is None:
            raise _RecordError(f"lacks field '{key}'")
        return default
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v < 2**31:
        raise _RecordError(f"field '{key}' must be an integer in [{lo}, 2**31), got "
                           f"{repr(v)[:40]}")
    return v


def _num(obj: dict[str, Any], key: str) -> float:
    if key not in obj:
        raise _RecordError(f"lacks field '{key}'")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise _RecordError(f"field '{key}' must be a finite number, got {repr(v)[:40]}")
    return float(v)


def _span(obj: dict[str, Any], lineno: int) -> SpanRecord:
    step = _int(obj, "step")
    optypes = obj.get("optypes")
    if not isinstance(optypes, list) or not optypes or not all(
            isinstance(t, str) for t in optypes):
        raise _RecordError(f"field 'optypes' must be a non-empty list of operation types, "
                           f"got {repr(optypes)[:60]}")
    unknown = [t for t in optypes if t not in OPTYPES]
    if unknown:
        raise _RecordError(f"unknown operation type {unknown[0][:60]!r}")
    start, end = _num(obj, "start"), _num(obj, "end")
    if end < start:
        raise _RecordError(f"span ends before it starts (start {start!r}, end {end!r})")
    cap = limit("op_seconds")
    if end - start > cap:
        raise _RecordError(f"span lasts {end - start:.4g} s, beyond the limit of {cap:,} s "
                           f"({LIMITS['op_seconds'].env} raises it)")
    gc_s = None
    if "gc_s" in obj:
        gc_s = _num(obj, "gc_s")
        if not 0.0 <= gc_s <= end - start:
            raise _RecordError(f"field 'gc_s' must be in [0, end - start = {end - start!r}] "
                               f"(GC seconds inside the span), got {gc_s!r}")
    return SpanRecord(step, tuple(optypes), start, end, _int(obj, "mb_id", -1, lo=-1),
                      _int(obj, "mc", -1, lo=-1), gc_s, lineno)


def _add_record(rec: _Reading, obj: Any, lineno: int) -> None:
    if not isinstance(obj, dict):
        raise _RecordError(f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind == "header":
        if rec.header is not None:
            raise _RecordError("a second header record")
        host = obj.get("host")
        if host is not None and (not isinstance(host, str) or not host):
            raise _RecordError(f"field 'host' must be a non-empty string, got "
                               f"{repr(host)[:40]}")
        rec.header = RankHeader(_int(obj, "rank"), _int(obj, "dp_rank"), _int(obj, "stage"),
                                _int(obj, "tp_rank", 0), _int(obj, "cp_rank", 0),
                                obj.get("gc_recorded") is True, host)
    elif kind == "span":
        span = _span(obj, lineno)
        if rec.header is not None and rec.header.gc_recorded and span.gc_s is None:
            raise _RecordError("lacks field 'gc_s' (the header says GC time is recorded)")
        rec.spans.append(span)
    elif kind == "step_end":
        rec.step_ends.add(_int(obj, "step"))
    elif kind == "clock":
        rtt = _num(obj, "rtt")
        if rtt < 0:
            raise _RecordError(f"field 'rtt' is negative ({rtt!r})")
        rec.samples.append(ClockSample(_num(obj, "local"), _num(obj, "offset"), rtt))
    else:
        raise _RecordError(f"unknown record kind {repr(kind)[:40]}")


def read_rank_file(path: str | os.PathLike[str]) -> RankRecords:
    """Parse one ``rank-NNNNN.jsonl``.

    Every record is checked (types, finite numbers, a span's end not before its start); a bad
    line is an :class:`~stragglers.errors.InputError` naming the file and line, except the
    last line when it cannot be parsed at all: a process killed mid-write leaves such a line,
    so it is left out and described in :attr:`RankRecords.incomplete`.
    """
    path = check_file(path, "probe rank file")
    rec = _Reading()
    pending: tuple[int, bytes] | None = None

    def handle(lineno: int, raw: bytes, last: bool) -> None:
        try:
            obj = parse_json_line(raw)
        except JSONLineError as exc:
            if last:
                rec.incomplete = (f"{path.name} line {lineno} ({exc}; a process killed while "
                                  "writing?)")
                return
            raise InputError(f"{path}: line {lineno}: {exc}") from None
        if obj is None:
            return
        try:
            _add_record(rec, obj, lineno)
        except _RecordError as exc:
            raise InputError(f"{path}: line {lineno}: {exc}") from None

    try:
        for lineno, raw in iter_lines(path):
            if not raw.strip():
                continue
            if pending is not None:
                handle(*pending, last=False)
            pending = (lineno, raw)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the rank file ({exc.strerror or exc})"
                         ) from None
    if pending is not None:
        handle(*pending, last=True)
    if rec.header is None:
        raise InputError(f"{path}: no header record (is this a probe rank file?)")
    return RankRecords(path, rec.header, rec.samples, rec.spans, rec.step_ends, rec.incomplete)


def load_meta(source: str | os.PathLike[str] | dict[str, Any] | JobMeta | None,
              in_dir: Path | None = None) -> JobMeta:
    """Read and complete job metadata (defaults: tp/dsp/vpp 1, run_id 0, trial from the dir).

    ``source=None`` uses ``job.yaml`` that rank 0 writes into the probe directory; a
    :class:`~stragglers.trace.io.JobMeta` is taken as it is.
    """
    if isinstance(source, JobMeta):
        return source
    if source is None:
        if in_dir is None or not (in_dir / "job.yaml").exists():
            raise InputError("no --meta given and no job.yaml in the probe directory")
        source = in_dir / "job.yaml"
    if isinstance(source, dict):
        raw: Any = dict(source)
        where = "metadata"
    else:
        where = str(source)
        raw = load_yaml(source, "metadata file")
    if not isinstance(raw, dict):
        raise InputError(f"{where}: expected a mapping with dp_size, pp_size, ...")
    if "trial_name" not in raw and "name" not in raw:
        raw["trial_name"] = in_dir.name if in_dir else "probe"
    return JobMeta.from_dict(raw, source=where)


def meta_mapping(meta: JobMeta) -> dict[str, Any]:
    """The metadata as ``meta.yaml`` holds it: the keys of the reference files in their order,
    and ``labels`` when there are any."""
    return {key: getattr(meta, key) for key in META_KEYS} | (
        {"labels": meta.labels} if meta.labels else {})


def _workers(records: Iterable[RankRecords], meta: JobMeta
             ) -> dict[tuple[int, int], RankRecords]:
    chosen: dict[tuple[int, int], RankRecords] = {}
    for rec in records:
        h = rec.header
        if h.tp_rank != 0 or h.cp_rank != 0:
            continue
        dp, stage = h.dp_rank, h.stage
        if not (0 <= dp < meta.dp_size and 0 <= stage < meta.pp_size):
            raise InputError(
                f"{rec.path}: worker dp_rank={dp} stage={stage} is outside dp_size="
                f"{meta.dp_size} pp_size={meta.pp_size} of the metadata")
        if (dp, stage) in chosen:
            raise InputError(
                f"two rank files for worker dp_rank={dp} stage={stage}: "
                f"{chosen[(dp, stage)].path.name} and {rec.path.name}")
        chosen[(dp, stage)] = rec
    missing = [(d, s) for s in range(meta.pp_size) for d in range(meta.dp_size)
               if (d, s) not in chosen]
    if missing:
        shown = ", ".join(f"dp_rank={d} stage={s}" for d, s in missing[:4])
        raise InputError(f"no rank file for {len(missing)} worker(s): {shown}")
    return chosen


def _gc_recorded(workers: dict[tuple[int, int], RankRecords]) -> bool:
    """Whether every worker's file records GC time (then the trace gets ``gc_s``); files
    that disagree are an error (the ranks ran with different ``record_gc``)."""
    files = sorted(workers.values(), key=lambda rec: rec.path.name)
    recorded = [rec for rec in files if rec.header.gc_recorded]
    if recorded and len(recorded) != len(files):
        other = next(rec for rec in files if not rec.header.gc_recorded)
        raise InputError(f"{recorded[0].path}: records GC time (gc_recorded) but {other.path} "
                         "does not: record every rank with the same ProbeConfig.record_gc")
    return bool(recorded)


def _hosts_named(workers: dict[tuple[int, int], RankRecords]) -> bool:
    """Whether every worker's file names its host (then the trace gets ``host``); files
    that disagree are an error (some headers name the host, others do not)."""
    files = sorted(workers.values(), key=lambda rec: rec.path.name)
    named = [rec for rec in files if rec.header.host is not None]
    if named and len(named) != len(files):
        other = next(rec for rec in files if rec.header.host is None)
        raise InputError(f"{other.path}: line 1: the header lacks field 'host', which "
                         f"{named[0].path.name} has: merge rank files of one probe run")
    return bool(named)


def build_trace(records: list[RankRecords], meta: JobMeta, check: bool = True
                ) -> MergeResult:
    """Turn parsed rank files into the merged trace (see the module docstring).

    ``check=False`` skips the structure checks (their Python loops take a while on traces of
    thousands of workers).
    """
    import numpy as np
    import pandas as pd

    workers = _workers(records, meta)
    pp, dp_size = meta.pp_size, meta.dp_size
    gc_recorded = _gc_recorded(workers)
    hosts_named = _hosts_named(workers)
    all_steps: set[int] = set()
    complete: set[int] | None = None
    for rec in workers.values():
        all_steps |= rec.step_ends | {s.step for s in rec.spans}
        complete = set(rec.step_ends) if complete is None else complete & rec.step_ends
    steps = sorted(complete or set())
    dropped = sorted(all_steps - set(steps))
    if not steps:
        raise InputError("no step was finished by every worker: nothing to merge")
    keep = set(steps)

    cols: dict[str, list[Any]] = {c: [] for c in
                                  ("dp_rank", "stage", "rank", "step", "optype", "start",
                                   "duration", "mc", "mb_id", "gmc", "order", "gc_s")}
    max_rtt = 0.0
    for (dp, stage), rec in sorted(workers.items()):
        track = OffsetTrack(rec.samples)
        if rec.samples:
            max_rtt = max(max_rtt, max(s.rtt for s in rec.samples))
        rank = stage * dp_size + dp
        for order, span in enumerate(rec.spans):
            step = span.step
            if step not in keep:
                continue
            start_local, end_local = span.start, span.end
            start = track.align(start_local)
            for optype in span.optypes:
                mc, gmc, mb = normalise_ids(optype, span.mb_id, span.mc, stage, pp)
                if optype in ("forward-compute", "backward-compute") and mc >= meta.vpp_size:
                    raise InputError(f"{rec.path}: line {span.line}: model chunk (field "
                                     f"'mc') {mc} >= vpp_size {meta.vpp_size} of the "
                                     "metadata")
                cols["dp_rank"].append(dp)
                cols["stage"].append(stage)
                cols["rank"].append(rank)
                cols["step"].append(step)
                cols["optype"].append(optype)
                cols["start"].append(start)
                cols["duration"].append(end_local - start_local)
                cols["mc"].append(mc)
                cols["mb_id"].append(mb)
                cols["gmc"].append(gmc)
                cols["order"].append(order)
                cols["gc_s"].append(span.gc_s)
    frame = pd.DataFrame(cols)
    frame = frame.sort_values(["dp_rank", "stage", "step", "optype", "start", "order"],
                              kind="stable")
    frame["seq_id"] = frame.groupby(["dp_rank", "stage", "step", "optype"]).cumcount()
    origin = frame.groupby("step")["start"].transform("min")
    frame["start_ts"] = frame["start"] - origin
    frame = frame.sort_values(["step", "rank", "start_ts", "seq_id", "optype"], kind="stable")
    columns = list(TRACE_COLUMNS) + (["gc_s"] if gc_recorded else [])
    trace = frame[columns].reset_index(drop=True)
    trace = trace.astype(_DTYPES | ({"gc_s": "float64"} if gc_recorded else {}))
    trace["optype"] = pd.Categorical(trace["optype"],
                                     categories=[t for t in OPTYPES if t in set(trace["optype"])])
    if hosts_named:  # per worker: one host name per rank file, looked up by (dp, stage)
        names = sorted({rec.header.host or "" for rec in workers.values()})
        code = np.zeros((dp_size, pp), dtype=np.int32)
        for (dp, stage), rec in workers.items():
            code[dp, stage] = names.index(rec.header.host or "")
        trace["host"] = pd.Categorical.from_codes(
            code[trace["dp_rank"].to_numpy(), trace["stage"].to_numpy()], categories=names)
    from stragglers.probe.check import check_trace

    problems = check_trace(trace, meta, clock_tolerance=1e-3 + max_rtt) if check else []
    if np.isnan(trace["start_ts"].to_numpy()).any():
        problems.append("NaN timestamps after alignment")
    incomplete = [rec.incomplete for rec in records if rec.incomplete]
    return MergeResult(trace, meta, steps, dropped, problems, max_rtt, incomplete)


def merge_dir(
    in_dir: str | os.PathLike[str],
    meta: str | os.PathLike[str] | dict[str, Any] | JobMeta | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    strict: bool = True,
    check: bool = True,
) -> MergeResult:
    """Merge the rank files of ``in_dir``; write ``trace.parquet`` and ``meta.yaml`` to ``out_dir``.

    With ``strict`` a trace that breaks the structure the analyzer relies on raises
    :class:`~stragglers.errors.InputError` (nothing is written); ``check=False`` skips the
    structure checks altogether. The two files appear together or not at all
    (:class:`~stragglers.atomic.StagedDir`), the trace last.
    """
    from stragglers.probe.settings import write_job_yaml

    if out_dir is not None:  # first: a bad output folder is reported before any work
        check_out_dir(out_dir)
    src = Path(in_dir)
    if not src.is_dir():
        raise InputError(f"{src}: not a directory")
    files = sorted(src.glob("rank-*.jsonl"))
    if not files:
        raise InputError(f"{src}: no rank-*.jsonl probe files")
    job_meta = load_meta(meta, src)
    result = build_trace([read_rank_file(f) for f in files], job_meta, check=check)
    if strict and result.problems:
        shown = "; ".join(result.problems[:3])
        more = f" (+{len(result.problems) - 3} more)" if len(result.problems) > 3 else ""
        raise InputError(f"{src}: merged trace is inconsistent: {shown}{more}")
    if out_dir is not None:
        with StagedDir(out_dir) as stage:
            write_job_yaml(meta_mapping(result.meta), stage.path("meta.yaml"))
            result.trace.to_parquet(stage.path("trace.parquet"), index=False)
            stage.commit_last("trace.parquet")
    return result
