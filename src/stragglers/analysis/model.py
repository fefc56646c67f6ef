"""A prepared what-if model of one trace: table, graph, evaluation order, derived values
and ideal values, with helpers to simulate batches of scenarios (whatif-model.md §5)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglers.model import (
    DependencyGraph,
    DerivedDurations,
    EvaluationOrder,
    build_graph,
    derive_durations,
    evaluation_order,
)
from stragglers.sim import MixedValues, SimResult, simulate, simulate_mixed
from stragglers.trace.schema import ideal_is_mean
from stragglers.trace.table import OpTable


@dataclass
class WhatIfModel:
    table: OpTable
    graph: DependencyGraph
    order: EvaluationOrder
    derived: DerivedDurations
    ideal: np.ndarray  # (n_nodes,) ideal value of each node (per optype)

    @property
    def dp(self) -> int:
        return self.table.meta.dp_size

    @property
    def pp(self) -> int:
        return self.table.meta.pp_size

    @property
    def n_steps(self) -> int:
        return len(self.table.steps)

    def mixed(self, dp_map: np.ndarray, node_mask: np.ndarray | None = None,
              worker_mask: np.ndarray | None = None,
              step_mask: np.ndarray | None = None, orig: np.ndarray | None = None
              ) -> MixedValues:
        return MixedValues(self.derived.value if orig is None else orig, self.ideal,
                           self.table.node_stage, dp_map, node_mask, worker_mask, step_mask)

    def full_dp_map(self, batch: int) -> np.ndarray:
        return np.broadcast_to(np.arange(self.dp)[None], (batch, self.dp))

    def step_times(self, values: MixedValues) -> np.ndarray:
        """Simulated step times (B, S) of a batch of scenarios."""
        return simulate_mixed(self.order, values)

    def timeline(self, values: MixedValues, with_delays: bool = False) -> SimResult:
        """One scenario simulated with start and end times kept (B must be 1)."""
        delays = (lambda idx: self.derived.delay[idx][:, None]) if with_delays else None
        return simulate(self.order, values, values.shape, delays=delays, keep=True)

    def virtual_dp_map(self, ranks: np.ndarray) -> np.ndarray:
        """(B, V) map for scenarios in which only DP rank ``ranks[b]`` is original.

        All other DP ranks then run identical ideal timelines, so one virtual rank stands
        for all of them (V = 2; V = 1 when the job has one DP rank)."""
        ranks = np.asarray(ranks, dtype=np.int64)
        if self.dp == 1:
            return ranks[:, None]
        return np.stack([ranks, (ranks + 1) % self.dp], axis=1)

    def virtual_worker_mask(self, dp_map: np.ndarray) -> np.ndarray:
        """Worker mask (B, V, pp) that keeps virtual rank 0 original on every stage."""
        wm = np.zeros((*dp_map.shape, self.pp), dtype=bool)
        wm[:, 0, :] = True
        return wm


def ideal_values(table: OpTable, value: np.ndarray) -> np.ndarray:
    """Per-node ideal value: the mean (compute-like) or median (communication-like) of
    the node's optype over all DP ranks, stages, steps and microbatches (§5)."""
    ideal = np.empty(table.n_nodes)
    codes = np.unique(table.node_optype)
    use_mean = ideal_is_mean(codes)
    for code, mean in zip(codes, use_mean, strict=True):
        nodes = table.node_optype == code
        v = value[nodes].ravel()
        ideal[nodes] = v.mean() if mean else np.median(v)
    return ideal


def prepare(table: OpTable) -> WhatIfModel:
    """Build the dependency model of a validated op table."""
    graph = build_graph(table)
    order = evaluation_order(graph)
    derived = derive_durations(table, graph)
    return WhatIfModel(table=table, graph=graph, order=order, derived=derived,
                       ideal=ideal_values(table, derived.value))
