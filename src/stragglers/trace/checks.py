"""Row-level checks of a trace against its metadata (whatif-model.md §1).

Each check raises :class:`~stragglers.errors.InputError` with one line naming the file,
the field and an example row. Checks that need the dense op table (missing or duplicate
ops, the same op set on every worker and step) are in :mod:`stragglers.trace.table`.

Besides ranges and consistency with the metadata, values must be plausible: an op longer
than the ``op_seconds`` limit (one day) or a ``start_ts`` beyond ``timestamp_seconds`` is a
unit or recording error (and sums of such values overflow float32), a trace whose compute
ops all last 0 s holds no timing. Timestamp precision is checked against the durations it
must resolve (:func:`timestamp_precision`): far too coarse is an error, merely coarse is a
*caveat*, a one-line reason, returned by :func:`check_rows`, that makes any result from
the trace untrustworthy.
"""

from __future__ import annotations

import numpy as np

from stragglers.errors import InputError
from stragglers.limits import LIMITS, limit
from stragglers.trace.io import JobMeta, TraceColumns
from stragglers.trace.schema import COMPUTE_TYPES, OPTYPE_CODE

#: Timestamp resolution (spacing between representable start times) at or above this
#: fraction of the median compute duration is an error, above PRECISION_CAVEAT a caveat.
#: Tuned on the reference traces AR and ST with their timestamps shifted by 2**6..2**24 s
#: and 1.7e9 s and stored as float32 (the precision of epoch seconds): below 1e-3 the
#: slowdown S moves by less than 4e-4 (relative); from 1e-3 to 1e-2 by up to 3e-3; from
#: 1.4e-2 (ST) and 2.1e-2 (AR) on, the P2P matching fails or S is off by 2.5% to 45%
#: (float32 epoch seconds, resolution 128 s: ratio ~350, S = 1.23 instead of 1.97 on AR).
#: The reference traces themselves are at 1.0e-5 (AR) and 1.7e-6 (ST).
PRECISION_REJECT = 1e-2
PRECISION_CAVEAT = 1e-3
#: Share of compute ops with duration 0 above which a caveat is recorded (a compute op takes
#: time; zeros mean a timer or recording problem). The reference traces have none.
ZERO_COMPUTE_CAVEAT = 0.01


def _fail(trace: TraceColumns, mask: np.ndarray, field: str, what: str) -> None:
    if mask.any():
        i = int(np.flatnonzero(mask)[0])
        n = int(mask.sum())
        raise InputError(
            f"{trace.source}: field '{field}' {what} in {n} row(s), e.g. {trace.where(i)}: "
            f"{trace.row(i)}"
        )


def check_rows(trace: TraceColumns, meta: JobMeta) -> list[str]:
    """Check value ranges, plausibility and metadata consistency, row by row (vectorised).

    Returns the caveats (see the module docstring); raises on errors.
    """
    _check_values(trace)
    _fail(trace, (trace.dp_rank < 0) | (trace.dp_rank >= meta.dp_size), "dp_rank",
          f"is outside [0, dp_size={meta.dp_size}) of the metadata")
    _fail(trace, (trace.stage < 0) | (trace.stage >= meta.pp_size), "stage",
          f"is outside [0, pp_size={meta.pp_size}) of the metadata")
    _fail(trace, (trace.rank < 0) | (trace.rank >= meta.world_size), "rank",
          f"is outside [0, world_size={meta.world_size}) of the metadata")
    _fail(trace, trace.seq_id < 0, "seq_id", "is negative")
    is_compute = np.isin(trace.optype, [OPTYPE_CODE[t] for t in COMPUTE_TYPES])
    _fail(trace, is_compute & ((trace.mc < 0) | (trace.mc >= meta.vpp_size)), "mc",
          f"of a compute op is outside [0, vpp_size={meta.vpp_size})")
    _fail(trace, ~is_compute & ((trace.mc < -1) | (trace.mc >= meta.vpp_size)), "mc",
          f"of a non-compute op is outside [-1, vpp_size={meta.vpp_size})")
    # In place, one array of the rows; |mc| <= vpp_size and stage < pp_size (checked above).
    wide = (meta.vpp_size + 1) * meta.pp_size >= 2**31
    expected_gmc: np.ndarray = trace.mc.astype(np.int64 if wide else np.int32)
    expected_gmc *= meta.pp_size
    expected_gmc += trace.stage
    _fail(trace, is_compute & (trace.gmc != expected_gmc), "gmc",
          f"of a compute op is not mc * pp_size + stage (pp_size={meta.pp_size} in the "
          "metadata)")
    del expected_gmc
    _fail(trace, is_compute & (trace.mb_id < 0), "mb_id", "of a compute op is negative")

    # Metadata contradicting the trace: every DP rank and stage must appear.
    for name, size in (("dp_rank", meta.dp_size), ("stage", meta.pp_size)):
        present = np.zeros(size, dtype=bool)
        present[getattr(trace, name)] = True
        if not present.all():
            absent = np.flatnonzero(~present)
            raise InputError(
                f"{trace.source}: the metadata says {name} ranges over 0..{size - 1} but "
                f"{name} {absent[0]} has no rows ({len(absent)} value(s) absent)"
            )
    _check_chunks(trace, meta, is_compute)

    # One global rank per worker and one worker per rank.
    worker: np.ndarray = trace.dp_rank.astype(np.int32 if meta.n_workers < 2**31 else np.int64)
    worker *= meta.pp_size
    worker += trace.stage
    rank_of = np.empty(meta.n_workers, dtype=trace.rank.dtype)
    rank_of[worker] = trace.rank  # any row's rank; every row must agree with it
    bad = trace.rank != rank_of[worker]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"{trace.source}: field 'rank' differs within one worker "
                         f"(dp_rank {trace.dp_rank[i]}, stage {trace.stage[i]}), e.g. "
                         f"{trace.where(i)}: {trace.row(i)}")
    values, counts = np.unique(rank_of, return_counts=True)
    if (counts > 1).any():
        r = values[counts > 1][0]
        ws = np.flatnonzero(rank_of == r)[:2]
        raise InputError(
            f"{trace.source}: field 'rank' {r} is used by two workers (dp_rank, stage) = "
            f"{divmod(int(ws[0]), meta.pp_size)} and {divmod(int(ws[1]), meta.pp_size)}"
        )
    if trace.host is not None:  # one host per worker
        host_of = np.empty(meta.n_workers, dtype=trace.host.dtype)
        host_of[worker] = trace.host
        bad = trace.host != host_of[worker]
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            r = int(np.flatnonzero((worker == worker[i]) & ~bad)[0])
            raise InputError(
                f"{trace.source}: field 'host' differs within one worker (dp_rank "
                f"{trace.dp_rank[i]}, stage {trace.stage[i]}): "
                f"{trace.host_names[int(trace.host[i])]!r} at {trace.where(i)}, "
                f"{trace.host_names[int(trace.host[r])]!r} at {trace.where(r)}")
    return _compute_caveats(trace, is_compute) + timestamp_precision(trace, is_compute)


def _check_values(trace: TraceColumns) -> None:
    """Durations and timestamps: finite, not negative, not implausibly large."""
    _fail(trace, ~np.isfinite(trace.start_ts), "start_ts", "is not a finite number")
    _fail(trace, ~np.isfinite(trace.duration), "duration", "is not a finite number")
    _fail(trace, trace.duration < 0, "duration", "is negative")
    max_op = limit("op_seconds")
    _fail(trace, trace.duration > max_op, "duration",
          f"exceeds {max_op:,} s ({LIMITS['op_seconds'].what}; wrong unit? set "
          f"{LIMITS['op_seconds'].env} to raise the bound)")
    if trace.gc_s is not None:  # compared in the duration's precision (float32 files)
        _fail(trace, trace.gc_s < 0, "gc_s", "is negative")
        _fail(trace, trace.gc_s.astype(trace.duration.dtype) > trace.duration, "gc_s",
              "exceeds the op's duration (GC seconds inside the op)")
    max_ts = limit("timestamp_seconds")
    _fail(trace, np.abs(trace.start_ts) > max_ts, "start_ts",
          f"exceeds {max_ts:.3g} s in absolute value (milli- or nanoseconds instead of "
          f"seconds? set {LIMITS['timestamp_seconds'].env} to raise the bound)")


def _check_chunks(trace: TraceColumns, meta: JobMeta, is_compute: np.ndarray) -> None:
    """Every stage must run compute ops of every model chunk 0..vpp_size-1: a vpp_size the
    trace does not have (``vpp_size: 2`` on a 1F1B trace) contradicts it."""
    vpp, pp = meta.vpp_size, meta.pp_size
    if not is_compute.any():
        raise InputError(f"{trace.source}: the trace has no forward-compute or "
                         "backward-compute ops")
    n_compute = int(is_compute.sum())
    if vpp > n_compute:
        raise InputError(f"{trace.source}: the metadata says vpp_size {vpp} but the trace has "
                         f"only {n_compute} compute op(s) (field 'mc' cannot span 0..{vpp - 1})")
    pairs = np.unique(trace.stage[is_compute].astype(np.int64) * vpp + trace.mc[is_compute])
    if len(pairs) == pp * vpp:
        return
    per_stage = np.bincount(pairs // vpp, minlength=pp)
    s = int(np.flatnonzero(per_stage < vpp)[0])
    have = sorted(int(c) for c in pairs[pairs // vpp == s] % vpp)
    if not have:
        raise InputError(f"{trace.source}: stage {s} has no compute ops")
    raise InputError(
        f"{trace.source}: the metadata says vpp_size {vpp} but the compute ops of stage {s} "
        f"have field 'mc' in {{{', '.join(map(str, have[:8]))}}} only: model chunks "
        f"0..{vpp - 1} must all appear (is vpp_size right?)")


def _compute_caveats(trace: TraceColumns, is_compute: np.ndarray) -> list[str]:
    comp = trace.duration[is_compute]
    zero = int((comp == 0).sum())
    if zero == len(comp):
        raise InputError(f"{trace.source}: field 'duration' is 0 for every compute op "
                         f"({zero} rows): the trace holds no compute timing")
    if zero > ZERO_COMPUTE_CAVEAT * len(comp):
        return [f"{zero} of {len(comp)} compute ops have duration 0 (a timer or recording "
                "problem?)"]
    return []


def timestamp_precision(trace: TraceColumns, is_compute: np.ndarray | None = None
                        ) -> list[str]:
    """Compare the resolution of ``start_ts`` with the median compute duration.

    The resolution is the spacing between adjacent representable values at the largest
    start or end time (``np.spacing`` in the trace's float type: 128 s for float32 epoch
    seconds), or 1 s when the column stored integers. At or above ``PRECISION_REJECT`` of the
    median (positive) compute duration the trace is refused; above ``PRECISION_CAVEAT`` a
    caveat is returned.
    """
    if is_compute is None:
        is_compute = np.isin(trace.optype, [OPTYPE_CODE[t] for t in COMPUTE_TYPES])
    comp = trace.duration[is_compute]
    comp = comp[comp > 0]
    if comp.size == 0:
        return []
    median = float(np.median(comp))
    dtype = np.result_type(trace.start_ts.dtype, trace.duration.dtype)
    start = trace.start_ts
    top = max(float(np.abs(start).max()), float(np.abs(start + trace.duration).max()))
    resolution = max(float(np.spacing(dtype.type(top))), trace.start_resolution)
    ratio = resolution / median
    what = (f"field 'start_ts' has a resolution of {resolution:.3g} s ({dtype.name} values up "
            f"to {top:.4g} s"
            + (", stored as integers" if trace.start_resolution >= resolution else "")
            + f"), {ratio:.2g}x the median compute duration {median:.3g} s")
    if ratio >= PRECISION_REJECT:
        raise InputError(f"{trace.source}: {what}: too coarse to order the ops (limit "
                         f"{PRECISION_REJECT:g}x; store start_ts as float64, or relative to "
                         "the job start)")
    if ratio > PRECISION_CAVEAT:
        return [f"{what}: waits and op order below that resolution are lost (limit "
                f"{PRECISION_CAVEAT:g}x)"]
    return []
