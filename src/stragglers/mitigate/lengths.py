"""Reading per-micro-batch sequence lengths (``mitigate seqlen fit --lengths FILE``).

One JSON object per line: ``{"step": int, "dp_rank": int, "mb": int, "lengths": [int, ...]}``
— the lengths of the sequences a data loader put into micro-batch ``mb`` of DP rank
``dp_rank`` at step ``step`` (``mb`` is the trace's ``mb_id``). Every line is checked under
the error contract (``FILE:LINE: field ...``); a (step, dp_rank, mb) given twice is an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from stragglers.errors import InputError
from stragglers.inputs import JSONLineError, check_file, iter_lines, parse_json_line
from stragglers.limits import check_limit

__all__ = ["MicrobatchLengths", "read_lengths"]


@dataclass(frozen=True)
class MicrobatchLengths:
    """Per micro-batch: its key (n x 3: step, dp_rank, mb), sum of lengths and of squares."""

    keys: np.ndarray
    sum_len: np.ndarray
    sum_sq: np.ndarray


def read_lengths(path: str | os.PathLike[str]) -> MicrobatchLengths:
    p = check_file(path, "lengths file")
    keys: list[tuple[int, int, int]] = []
    sums: list[float] = []
    squares: list[float] = []
    seen: dict[tuple[int, int, int], int] = {}
    sequences = 0
    try:
        for lineno, raw in iter_lines(p):
            where = f"{p}:{lineno}"
            try:
                rec = parse_json_line(raw)
            except JSONLineError as exc:
                raise InputError(f"{where}: {exc}") from None
            if rec is None:
                continue
            if not isinstance(rec, dict):
                raise InputError(f"{where}: expected a JSON object {{step, dp_rank, mb, "
                                 "lengths}")
            key = []
            for name in ("step", "dp_rank", "mb"):
                v = rec.get(name)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    raise InputError(f"{where}: field {name!r}: expected an integer >= 0, "
                                     f"got {v!r}"[:300])
                key.append(v)
            ls = rec.get("lengths")
            if not isinstance(ls, list) or not ls:
                raise InputError(f"{where}: field 'lengths': expected a non-empty list of "
                                 "sequence lengths")
            sequences += len(ls)
            check_limit("seqlen_sequences", sequences, f"{where}: field 'lengths'")
            for i, v in enumerate(ls):
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise InputError(f"{where}: field 'lengths[{i}]': expected an integer "
                                     f">= 1, got {v!r}"[:300])
            k = (key[0], key[1], key[2])
            if k in seen:
                raise InputError(f"{where}: step {k[0]}, dp_rank {k[1]}, mb {k[2]} already "
                                 f"given on line {seen[k]}")
            seen[k] = lineno
            arr = np.asarray(ls, dtype=np.float64)
            keys.append(k)
            sums.append(float(arr.sum()))
            squares.append(float((arr**2).sum()))
    except OSError as exc:
        raise InputError(f"{p}: cannot read the lengths file ({exc.strerror or exc})") from None
    if not keys:
        raise InputError(f"{p}: no micro-batch lengths")
    return MicrobatchLengths(np.asarray(keys, dtype=np.int64).reshape(-1, 3),
                             np.asarray(sums), np.asarray(squares))
