"""Narrowing down to suspicious communication groups (Falcon-Detect §4.3, "Profiling").

Input: per-call profiles ``(group, rank, type, size, transfer time, wait time)``: the transfer time
is what a CUDA event around the NCCL kernel measures once data flows, the wait time how long the
call waited for its peers before that.

Comparable groups are groups that run the same kind of call: calls are classed by
``(type, size)`` and, for every class seen in at least two groups, each group's median transfer
time is compared with the median over those groups.  A group's *transfer ratio* is the median of
its per-class ratios, its *wait ratio* likewise (against the class median wait, floored at
``wait_floor`` of the class median transfer time so that near-zero waits do not explode).

Verdicts:

* ``slow_transfer``: transfer ratio > ``factor`` (1.1, Falcon): the group's data moves slowly, a
  link or NIC on its path is suspect;
* ``waiting_for_peer``: transfer normal, but the group waits more than ``factor`` times the
  comparable groups and the excess wait is at least ``min_excess`` of the class transfer time:
  the group is healthy but idles for a peer that arrives late, i.e. a compute straggler;
  ``late_ranks`` lists the members that waited least (they are the ones the others wait for);
* ``ok`` otherwise.  Groups with no comparable group get ``incomparable``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from stragglers.logs.records import CallRecord

__all__ = ["GroupFinding", "narrow_down", "narrow_down_records"]


@dataclass(frozen=True)
class GroupFinding:
    group: str
    verdict: str  # "slow_transfer" | "waiting_for_peer" | "ok" | "incomparable"
    transfer_ratio: float
    wait_ratio: float
    transfer_s: float  # median transfer time of the group's calls
    wait_s: float  # median wait of the group's calls
    calls: int
    late_ranks: tuple[int, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "group": self.group, "verdict": self.verdict,
            "transfer_ratio": round(self.transfer_ratio, 4),
            "wait_ratio": round(self.wait_ratio, 4), "transfer_s": self.transfer_s,
            "wait_s": self.wait_s, "calls": self.calls, "late_ranks": list(self.late_ranks),
        }


def _group_medians(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median of ``values`` per distinct row of ``keys`` (sorted by key)."""
    order = np.lexsort(keys.T[::-1])
    k = keys[order]
    v = values[order]
    change = np.flatnonzero(np.any(k[1:] != k[:-1], axis=1)) + 1
    bounds = np.concatenate([[0], change, [k.shape[0]]])
    med = np.array([np.median(v[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    return k[bounds[:-1]], med


def narrow_down(
    group: Sequence[str], rank: Sequence[int], kind: Sequence[str], size: Sequence[int],
    transfer: Sequence[float], wait: Sequence[float] | None = None, *,
    factor: float = 1.1, wait_floor: float = 0.05, min_excess: float = 0.1,
) -> list[GroupFinding]:
    """Classify every communication group (definitions in the module docstring)."""
    n = len(group)
    if not (len(rank) == len(kind) == len(size) == len(transfer) == n):
        raise ValueError("profile columns must have the same length")
    if n == 0:
        return []
    gnames, gi = np.unique(np.asarray(group, dtype=str), return_inverse=True)
    _, ci = np.unique(np.array([f"{k}\x00{s}" for k, s in zip(kind, size, strict=True)]),
                      return_inverse=True)
    tr = np.asarray(transfer, dtype=float)
    wt = np.zeros(n) if wait is None else np.asarray(wait, dtype=float)
    rk = np.asarray(rank, dtype=np.int64)
    keys = np.stack([ci, gi], axis=1)
    gc_keys, gc_tr = _group_medians(keys, tr)
    _, gc_wt = _group_medians(keys, wt)
    cls = gc_keys[:, 0]
    ncls = int(cls.max()) + 1
    groups_per_class = np.bincount(cls, minlength=ncls)
    class_tr = np.zeros(ncls)
    class_wt = np.zeros(ncls)
    for c in np.flatnonzero(groups_per_class >= 2):
        sel = cls == c
        class_tr[c] = np.median(gc_tr[sel])
        class_wt[c] = np.median(gc_wt[sel])
    comparable = groups_per_class[cls] >= 2
    tr_ratio = np.where(comparable, gc_tr / np.where(class_tr[cls] > 0, class_tr[cls], 1.0),
                        np.nan)
    wt_base = np.maximum(class_wt[cls], wait_floor * class_tr[cls])
    wt_ratio = np.where(comparable & (wt_base > 0), gc_wt / np.where(wt_base > 0, wt_base, 1.0),
                        np.nan)
    excess = np.where(comparable & (class_tr[cls] > 0),
                      (gc_wt - class_wt[cls]) / np.where(class_tr[cls] > 0, class_tr[cls], 1.0),
                      np.nan)
    findings = []
    for g, name in enumerate(gnames):
        sel = gc_keys[:, 1] == g
        mask = gi == g
        t_ratio = float(np.nanmedian(tr_ratio[sel])) if np.any(comparable[sel]) else np.nan
        w_ratio = float(np.nanmedian(wt_ratio[sel])) if np.any(comparable[sel]) else np.nan
        w_excess = float(np.nanmedian(excess[sel])) if np.any(comparable[sel]) else np.nan
        late: tuple[int, ...] = ()
        if np.isnan(t_ratio):
            verdict = "incomparable"
        elif t_ratio > factor:
            verdict = "slow_transfer"
        elif w_ratio > factor and w_excess >= min_excess:
            verdict = "waiting_for_peer"
            late = _late_ranks(rk[mask], wt[mask])
        else:
            verdict = "ok"
        findings.append(GroupFinding(
            group=str(name), verdict=verdict, transfer_ratio=t_ratio, wait_ratio=w_ratio,
            transfer_s=float(np.median(tr[mask])), wait_s=float(np.median(wt[mask])),
            calls=int(mask.sum()), late_ranks=late,
        ))
    order = {"slow_transfer": 0, "waiting_for_peer": 1, "ok": 2, "incomparable": 3}
    findings.sort(key=lambda f: (order[f.verdict], -(f.transfer_ratio if f.transfer_ratio
                                                     == f.transfer_ratio else 0.0), f.group))
    return findings


def _late_ranks(ranks: np.ndarray, waits: np.ndarray) -> tuple[int, ...]:
    """Members whose median wait is below half the median of the other members' waits."""
    ur, inv = np.unique(ranks, return_inverse=True)
    if ur.size < 2:
        return ()
    med = np.array([np.median(waits[inv == i]) for i in range(ur.size)])
    overall = float(np.median(med))
    late = ur[med < 0.5 * overall]
    return tuple(int(r) for r in late)


def narrow_down_records(records: Iterable[CallRecord], **kwargs: float) -> list[GroupFinding]:
    """:func:`narrow_down` over call records that carry ``group`` and ``duration``."""
    rows = [r for r in records if r.group is not None and r.duration is not None]
    return narrow_down(
        [str(r.group) for r in rows], [r.rank for r in rows], [r.type for r in rows],
        [r.size for r in rows], [float(r.duration or 0.0) for r in rows],
        [r.wait or 0.0 for r in rows], **kwargs,
    )
