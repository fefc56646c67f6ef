"""Vectorised simulation of one dependency graph over DP ranks, steps and scenarios
(whatif-model.md §4).

Times have shape ``(B, V, S)``: B scenarios (timelines simulated at once), V DP ranks
(real or "virtual": see :class:`MixedValues`) and S steps, all relative to each step's
start. Nodes are evaluated level by level (:mod:`stragglers.model.order`): a local op
starts when its dependencies have ended plus its launch delay and ends after its own
duration; a communication group starts when its last member has launched (for
DP-synchronised groups: on any DP rank) and each member ends at group start plus its
own transfer duration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stragglers.model.order import EvaluationOrder

ValuesFn = Callable[[np.ndarray], np.ndarray]

#: Memory budget for one batch of the per-node end-time array (bytes).
BATCH_BYTES = 96 * 2**20
DTYPE = np.float64


@dataclass
class SimResult:
    """``step_time`` (B, S); ``start``/``end`` (n_nodes, B, V, S) when kept."""

    step_time: np.ndarray
    start: np.ndarray | None = None
    end: np.ndarray | None = None


class MixedValues:
    """Op values for a batch of scenarios that mix original and ideal values.

    For scenario b, virtual DP rank v and node n, the value is the original one of real
    DP rank ``dp_map[b, v]`` where ``node_mask[n, b] & worker_mask[b, v, stage(n)] &
    step_mask[b, s]``, else the ideal value of node n. A mask left as None is all True.
    Virtual ranks let a scenario in which only DP rank d differs from the ideal be
    simulated with V = 2 (rank d and one ideal rank standing for all the others).
    """

    def __init__(self, orig: np.ndarray, ideal: np.ndarray, node_stage: np.ndarray,
                 dp_map: np.ndarray, node_mask: np.ndarray | None = None,
                 worker_mask: np.ndarray | None = None,
                 step_mask: np.ndarray | None = None) -> None:
        self.orig, self.ideal, self.node_stage = orig, ideal, node_stage
        self.dp_map = dp_map
        self.node_mask, self.worker_mask, self.step_mask = node_mask, worker_mask, step_mask

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.dp_map.shape[0], self.dp_map.shape[1], self.orig.shape[2])

    def batch(self, sl: slice) -> MixedValues:
        return MixedValues(
            self.orig, self.ideal, self.node_stage, self.dp_map[sl],
            None if self.node_mask is None else self.node_mask[:, sl],
            None if self.worker_mask is None else self.worker_mask[sl],
            None if self.step_mask is None else self.step_mask[sl],
        )

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        orig = self.orig[idx[:, None, None], self.dp_map[None]]  # (k, B, V, S)
        mask = None
        if self.node_mask is not None:
            mask = self.node_mask[idx][:, :, None, None]
        if self.worker_mask is not None:
            wm = np.moveaxis(self.worker_mask[:, :, self.node_stage[idx]], 2, 0)[..., None]
            mask = wm if mask is None else mask & wm
        if self.step_mask is not None:
            sm = self.step_mask[None, :, None, :]
            mask = sm if mask is None else mask & sm
        if mask is None:
            return orig
        return np.where(mask, orig, self.ideal[idx][:, None, None, None])


def _latest(times: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``times[index].max(axis=1)`` for a (k, width) index with a small width, one column at
    a time: maxima of whole rows, without a reduction over a short strided axis."""
    out = times[index[:, 0]]
    for j in range(1, index.shape[1]):
        np.maximum(out, times[index[:, j]], out=out)
    return out


def simulate(order: EvaluationOrder, values: ValuesFn, shape: tuple[int, int, int],
             delays: ValuesFn | None = None, keep: bool = False) -> SimResult:
    """Simulate one batch of timelines of the given (B, V, S) shape."""
    n = order.n_nodes
    end = np.empty((n + 2, *shape), dtype=DTYPE)
    end[order.pad] = -np.inf
    end[order.zero] = 0.0
    starts = np.empty((n, *shape), dtype=DTYPE) if keep else None
    min_start = np.full(shape, np.inf)
    for lv in order.levels:
        if lv.local.size:
            st = _latest(end, lv.local_deps)
            if delays is not None:
                st += delays(lv.local)
            end[lv.local] = st + values(lv.local)
            np.minimum(min_start, st.min(axis=0), out=min_start)
            if starts is not None:
                starts[lv.local] = st
        if lv.members.size:
            st = _latest(end, lv.member_deps)
            if delays is not None:
                st += delays(lv.members)
            # Group start: the latest launch of its members (much faster than
            # maximum.reduceat over the leading axis, which loops over tiny groups).
            gs = _latest(st, lv.group_members)
            if lv.group_sync.any():
                synced = gs.max(axis=2, keepdims=True)
                gs = np.where(lv.group_sync[:, None, None, None], synced, gs)
            end[lv.members] = gs[lv.member_group] + values(lv.members)
            np.minimum(min_start, st.min(axis=0), out=min_start)
            if starts is not None:
                starts[lv.members] = st
    ends = end[:n]
    step_time = ends.max(axis=(0, 2)) - min_start.min(axis=1)
    return SimResult(step_time=step_time, start=starts, end=ends if keep else None)


def simulate_mixed(order: EvaluationOrder, values: MixedValues) -> np.ndarray:
    """Step times (B, S) of a batch of mixed scenarios, in memory-bounded chunks."""
    b_total, v, s = values.shape
    per_scenario = (order.n_nodes + 2) * v * s * 8
    chunk = max(1, int(BATCH_BYTES // per_scenario))
    out = np.empty((b_total, s))
    for lo in range(0, b_total, chunk):
        sl = slice(lo, min(lo + chunk, b_total))
        part = values.batch(sl)
        out[sl] = simulate(order, part, part.shape).step_time
    return out
