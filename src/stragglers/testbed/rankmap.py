"""``--rank-map``: which (dp, stage) role each process rank of the example job takes.

The file is the JSON of a topology plan (``stragglers mitigate topology``: its
``rank_permutation`` lists the new position of each rank, and ``dp_size`` / ``pp_size`` must
match the job), or a bare JSON list of the same meaning. Rank ``r`` takes the role of position
``p = rank_permutation[r]``: ``(dp, stage) = (p % dp, p // dp)``. With checkpoints, a rank
loads the checkpoint of its new role, so training continues with the roles moved between
processes.
"""

from __future__ import annotations

from pathlib import Path

from stragglers.errors import InputError
from stragglers.inputs import load_json, read_text


def identity(dp: int, pp: int) -> list[int]:
    """The default map: rank ``r`` at position ``r``."""
    return list(range(dp * pp))


def load_rank_map(path: str | Path, dp: int, pp: int) -> list[int]:
    """Position of each rank from ``path``; checked to be a permutation of ``dp * pp``."""
    raw = load_json(read_text(Path(path)), str(path))
    if isinstance(raw, dict):
        for key, want in (("dp_size", dp), ("pp_size", pp)):
            if key in raw and raw[key] != want:
                raise InputError(f"{path}: field {key!r}: {raw[key]!r} but the job has {want}")
        perm = raw.get("rank_permutation")
    else:
        perm = raw
    n = dp * pp
    if not isinstance(perm, list) or len(perm) != n:
        raise InputError(f"{path}: field 'rank_permutation': expected a list of {n} positions")
    for row, p in enumerate(perm):
        if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < n:
            raise InputError(f"{path}: field 'rank_permutation' row {row}: expected a position "
                             f"in [0, {n}), got {p!r}")
    if len(set(perm)) != n:
        raise InputError(f"{path}: field 'rank_permutation': not a permutation (a position "
                         "appears twice)")
    return perm
