"""Row-level checks of a trace against its metadata (whatif-model.md §1).

Each check raises :class:`~stragglers.errors.InputError` with one line naming the file,
the field and an example row. Checks that need the dense op table (missing or duplicate
ops, the same op set on every worker and step) are in :mod:`stragglers.trace.table`.
"""

from __future__ import annotations

import numpy as np

from stragglers.errors import InputError
from stragglers.trace.io import JobMeta, TraceColumns
from stragglers.trace.schema import COMPUTE_TYPES, OPTYPE_CODE


def _fail(trace: TraceColumns, mask: np.ndarray, field: str, what: str) -> None:
    if mask.any():
        i = int(np.flatnonzero(mask)[0])
        n = int(mask.sum())
        raise InputError(
            f"{trace.source}: field '{field}' {what} in {n} row(s), e.g. row {i}: {trace.row(i)}"
        )


def validate_rows(trace: TraceColumns, meta: JobMeta) -> None:
    """Check value ranges and metadata consistency, row by row (vectorised)."""
    _fail(trace, trace.duration < 0, "duration", "is negative")
    _fail(trace, (trace.dp_rank < 0) | (trace.dp_rank >= meta.dp_size), "dp_rank",
          f"is outside [0, dp_size={meta.dp_size}) of the metadata")
    _fail(trace, (trace.stage < 0) | (trace.stage >= meta.pp_size), "stage",
          f"is outside [0, pp_size={meta.pp_size}) of the metadata")
    _fail(trace, trace.seq_id < 0, "seq_id", "is negative")
    is_compute = np.isin(trace.optype, [OPTYPE_CODE[t] for t in COMPUTE_TYPES])
    _fail(trace, is_compute & ((trace.mc < 0) | (trace.mc >= meta.vpp_size)), "mc",
          f"of a compute op is outside [0, vpp_size={meta.vpp_size})")
    n_chunks = meta.vpp_size * meta.pp_size
    _fail(trace, is_compute & ((trace.gmc < 0) | (trace.gmc >= n_chunks)), "gmc",
          f"of a compute op is outside [0, vpp_size*pp_size={n_chunks})")
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

    # One global rank per worker and one worker per rank.
    worker = trace.dp_rank.astype(np.int64) * meta.pp_size + trace.stage
    rank_of = np.empty(meta.n_workers, dtype=trace.rank.dtype)
    rank_of[worker] = trace.rank  # any row's rank; every row must agree with it
    bad = trace.rank != rank_of[worker]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"{trace.source}: field 'rank' differs within one worker "
                         f"(dp_rank {trace.dp_rank[i]}, stage {trace.stage[i]}), e.g. row "
                         f"{i}: {trace.row(i)}")
    values, first, counts = np.unique(rank_of, return_index=True, return_counts=True)
    if (counts > 1).any():
        r = values[counts > 1][0]
        ws = np.flatnonzero(rank_of == r)[:2]
        raise InputError(
            f"{trace.source}: field 'rank' {r} is used by two workers (dp_rank, stage) = "
            f"{divmod(int(ws[0]), meta.pp_size)} and {divmod(int(ws[1]), meta.pp_size)}"
        )
