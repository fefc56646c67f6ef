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

from dataclasses import dataclass

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
    return checked_rows(trace, meta).caveats


@dataclass(frozen=True)
class RowChecks:
    """What :func:`checked_rows` found: the caveats, and the global rank of each worker
    (``ranks[dp_rank * pp_size + stage]``)."""

    caveats: list[str]
    ranks: np.ndarray


def _is_compute(optype: np.ndarray) -> np.ndarray:
    """Rows of forward or backward compute (``np.isin`` by comparisons: no sort)."""
    codes = sorted(OPTYPE_CODE[t] for t in COMPUTE_TYPES)
    out = optype == codes[0]
    for c in codes[1:]:
        out |= optype == c
    return out


def checked_rows(trace: TraceColumns, meta: JobMeta) -> RowChecks:
    """:func:`check_rows`, and each worker's global rank.

    Where the columns' minima and maxima already prove every range check, the checks'
    masks are not built (:func:`_plainly_in_range`); where a sample of the rows already
    has every worker, and every row agrees with it, the workers are not counted row by row
    (:func:`_workers_from_sample`). Any other trace goes through the checks one by one,
    which name the first problem.
    """
    is_compute = _is_compute(trace.optype)
    plain = _plainly_in_range(trace, meta, is_compute)
    if not plain:
        _check_ranges(trace, meta, is_compute)
    _check_gmc(trace, meta, is_compute)
    if not plain:
        _fail(trace, is_compute & (trace.mb_id < 0), "mb_id", "of a compute op is negative")
    ranks = _workers_from_sample(trace, meta, is_compute)
    if ranks is None:
        ranks = _check_workers(trace, meta, is_compute)
    if trace.host is not None:  # one host per worker
        worker = _worker_of_rows(trace, meta)
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
        del worker, bad
    comp = trace.duration[is_compute]
    caveats = _compute_caveats(trace, comp)
    # Durations are >= 0 here, so no end is below the earliest start: the largest
    # |start| or |end| is the largest of |start| and end.
    s_lo, s_hi = _min_max(trace.start_ts)
    top = max(float(abs(s_lo)), float(abs(s_hi)), _max_sum(trace.start_ts, trace.duration))
    return RowChecks(caveats + _precision(trace, comp, top), ranks)


def _worker_of_rows(trace: TraceColumns, meta: JobMeta, lo: int = 0,
                    hi: int | None = None) -> np.ndarray:
    """``dp_rank * pp_size + stage`` of rows ``lo:hi`` (in range: checked before)."""
    worker: np.ndarray = trace.dp_rank[lo:hi].astype(
        np.int32 if meta.n_workers < 2**31 else np.int64)
    worker *= meta.pp_size
    worker += trace.stage[lo:hi]
    return worker


def _check_workers(trace: TraceColumns, meta: JobMeta, is_compute: np.ndarray) -> np.ndarray:
    """Every DP rank and stage appears, every stage computes every model chunk, one global
    rank per worker and one worker per rank, checked row by row; raises on the first
    problem. Returns each worker's rank."""
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
    worker = _worker_of_rows(trace, meta)
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
    return rank_of


#: Rows per block of :func:`_workers_from_sample`'s pass over the rows (its temporaries
#: stay in a core's cache).
_BLOCK = 1 << 16


def sample_rows(n: int, size: int) -> np.ndarray:
    """About ``2 * size`` of ``n`` rows: every k-th row (a whole run of rows of one worker
    or step is not missed) and as many at random, with a fixed seed (a value that recurs
    with a period in the file is not missed either)."""
    if n <= 2 * size:
        return np.arange(n)
    strided = np.arange(0, n, n // size)
    return np.concatenate([strided, np.random.default_rng(0).integers(0, n, size)])


def _workers_from_sample(trace: TraceColumns, meta: JobMeta, is_compute: np.ndarray
                         ) -> np.ndarray | None:
    """Each worker's rank when a sample of the rows (every k-th) proves what
    :func:`_check_workers` checks: every worker appears in it (so every DP rank and stage
    does), its compute ops have every (stage, model chunk) pair, its workers' ranks are
    distinct, and every row of the trace has its worker's rank. None when it does not (the
    trace may still be valid): then the checks are made row by row."""
    n, n_workers = len(trace), meta.n_workers
    vpp, pp = meta.vpp_size, meta.pp_size
    if n_workers >= 2**31 or pp * vpp >= 2**31:
        return None
    rows = sample_rows(n, max(1 << 16, 16 * n_workers))
    worker = trace.dp_rank[rows].astype(np.int64) * pp + trace.stage[rows]
    rank_of = np.full(n_workers, -1, dtype=np.int64)
    rank_of[worker] = trace.rank[rows]
    if (rank_of < 0).any() or len(np.unique(rank_of)) != n_workers:
        return None
    # gmc = mc * pp + stage for compute ops (checked): one value per (stage, chunk) pair.
    pairs = np.zeros(pp * vpp, dtype=bool)
    pairs[trace.gmc[rows][is_compute[rows]]] = True
    if not pairs.all():
        return None
    for lo in range(0, n, _BLOCK):
        w = trace.dp_rank[lo:lo + _BLOCK].astype(np.int64)
        w *= pp
        w += trace.stage[lo:lo + _BLOCK]
        if not np.array_equal(trace.rank[lo:lo + _BLOCK], rank_of[w]):
            return None
    return rank_of.astype(trace.rank.dtype)


def _min_max(x: np.ndarray) -> tuple[float, float]:
    return (x.min(), x.max()) if x.size else (0, 0)


def _plainly_in_range(trace: TraceColumns, meta: JobMeta, is_compute: np.ndarray) -> bool:
    """True when the columns' minima and maxima prove every check of
    :func:`_check_ranges` (which then passes, and need not build its masks); False when
    they do not (the trace may still be valid). Comparisons are made in the columns' own
    types, as those checks make them."""
    s_lo, s_hi = _min_max(trace.start_ts)
    d_lo, d_hi = _min_max(trace.duration)
    max_ts, max_op = limit("timestamp_seconds"), limit("op_seconds")
    if not (np.isfinite(s_lo) and np.isfinite(s_hi) and np.isfinite(d_lo)
            and np.isfinite(d_hi)):
        return False
    if abs(s_lo) > max_ts or abs(s_hi) > max_ts or d_lo < 0 or d_hi > max_op:
        return False
    if trace.gc_s is not None:
        return False  # checked against each op's duration: the checks themselves
    for col, top in ((trace.dp_rank, meta.dp_size), (trace.stage, meta.pp_size),
                     (trace.rank, meta.world_size)):
        lo, hi = _min_max(col)
        if lo < 0 or hi >= top:
            return False
    vpp = meta.vpp_size
    mc_lo, mc_hi = _min_max(trace.mc)
    if _min_max(trace.seq_id)[0] < 0 or mc_lo < -1 or mc_hi >= vpp:
        return False
    # Compute ops: mc >= 0 and mb_id >= 0.
    if mc_lo < 0 and trace.mc.min(where=is_compute, initial=0) < 0:
        return False
    return bool(trace.mb_id.min(where=is_compute, initial=0) >= 0)


def _check_ranges(trace: TraceColumns, meta: JobMeta, is_compute: np.ndarray) -> None:
    """The range checks up to ``mc``, one mask each, in order: raises on the first that
    fails (``gmc`` and then ``mb_id`` are checked next)."""
    _check_values(trace)
    _fail(trace, (trace.dp_rank < 0) | (trace.dp_rank >= meta.dp_size), "dp_rank",
          f"is outside [0, dp_size={meta.dp_size}) of the metadata")
    _fail(trace, (trace.stage < 0) | (trace.stage >= meta.pp_size), "stage",
          f"is outside [0, pp_size={meta.pp_size}) of the metadata")
    _fail(trace, (trace.rank < 0) | (trace.rank >= meta.world_size), "rank",
          f"is outside [0, world_size={meta.world_size}) of the metadata")
    _fail(trace, trace.seq_id < 0, "seq_id", "is negative")
    _fail(trace, is_compute & ((trace.mc < 0) | (trace.mc >= meta.vpp_size)), "mc",
          f"of a compute op is outside [0, vpp_size={meta.vpp_size})")
    _fail(trace, ~is_compute & ((trace.mc < -1) | (trace.mc >= meta.vpp_size)), "mc",
          f"of a non-compute op is outside [-1, vpp_size={meta.vpp_size})")


def _check_gmc(trace: TraceColumns, meta: JobMeta, is_compute: np.ndarray) -> None:
    """``gmc`` of a compute op is ``mc * pp_size + stage``."""
    # In place, one array of the rows; |mc| <= vpp_size and stage < pp_size (checked).
    wide = (meta.vpp_size + 1) * meta.pp_size >= 2**31
    expected_gmc: np.ndarray = trace.mc.astype(np.int64 if wide else np.int32)
    expected_gmc *= meta.pp_size
    expected_gmc += trace.stage
    bad = trace.gmc != expected_gmc
    del expected_gmc
    bad &= is_compute
    _fail(trace, bad, "gmc",
          f"of a compute op is not mc * pp_size + stage (pp_size={meta.pp_size} in the "
          "metadata)")


def _max_sum(a: np.ndarray, b: np.ndarray, chunk: int = 1 << 22) -> float:
    """``float((a + b).max())`` computed a chunk at a time (no array of the rows' size)."""
    top = -np.inf
    for lo in range(0, len(a), chunk):
        top = max(top, float((a[lo:lo + chunk] + b[lo:lo + chunk]).max()))
    return top


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


def _compute_caveats(trace: TraceColumns, comp: np.ndarray) -> list[str]:
    """Caveats about the compute ops' durations ``comp``."""
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
    start = trace.start_ts
    top = max(float(np.abs(start).max()), float(np.abs(start + trace.duration).max()))
    return _precision(trace, trace.duration[is_compute], top)


#: Relative margin by which the median must clear the caveat's bound for
#: :func:`_precision` to skip computing it.
_MEDIAN_MARGIN = 1e-6


def _precision(trace: TraceColumns, comp: np.ndarray, top: float) -> list[str]:
    """:func:`timestamp_precision` of the compute durations ``comp`` (>= 0) and the largest
    |start| or |end| ``top``. When fewer than half of the positive durations lie below
    the bound at which the resolution would matter, the median is above it: no caveat, and
    the median (a partial sort of the rows) is not computed."""
    if not comp.size:
        return []
    dtype = np.result_type(trace.start_ts.dtype, trace.duration.dtype)
    resolution = max(float(np.spacing(dtype.type(top))), trace.start_resolution)
    bound = resolution / PRECISION_CAVEAT * (1 + _MEDIAN_MARGIN)
    zero = int(np.count_nonzero(comp == 0))
    positive = comp.size - zero
    if positive and np.all(comp >= 0):
        below = int(np.count_nonzero(comp < bound)) - zero
        if below <= (positive - 1) // 2:
            return []
    comp = comp[comp > 0]
    if comp.size == 0:
        return []
    median = float(np.median(comp))
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
