"""The what-if engine of one trace: its op table, dependency graph, evaluation order, derived
values and ideal values, and the simulation of named scenarios (whatif-model.md §4-§5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from stragglers.analysis.scenarios import Scenario
from stragglers.model import (
    DependencyGraph,
    DerivedDurations,
    EvaluationOrder,
    build_graph,
    derive_durations,
    evaluation_order,
)
from stragglers.phases import phase
from stragglers.sim import MixedValues, SimResult, simulate, simulate_mixed
from stragglers.trace.schema import ideal_is_mean
from stragglers.trace.table import OpTable


@dataclass(frozen=True)
class WhatIfEngine:
    """A trace prepared for what-if simulation (built by :func:`prepare`).

    ``ideal_value`` (n_nodes,) is each op identity's ideal value: the mean (compute-like) or
    median (communication-like) of its op type over all DP ranks, stages, steps and
    microbatches (§5).
    """

    table: OpTable
    graph: DependencyGraph
    order: EvaluationOrder
    derived: DerivedDurations
    ideal_value: np.ndarray
    #: Step times of the scenarios simulated so far (those with the trace's own values), by
    #: what they keep original: a scenario asked for again is not simulated again.
    _done: dict[tuple[object, ...], np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    @property
    def dp(self) -> int:
        return self.table.meta.dp_size

    @property
    def pp(self) -> int:
        return self.table.meta.pp_size

    @property
    def n_steps(self) -> int:
        return len(self.table.steps)

    @property
    def n_nodes(self) -> int:
        return self.table.n_nodes

    @cached_property
    def values_nonnegative(self) -> bool:
        """Every derived and ideal value is >= 0 (the simulator then knows that each step's
        earliest start is 0 without tracking it)."""
        return bool(self.derived.value.min(initial=0.0) >= 0
                    and self.ideal_value.min(initial=0.0) >= 0)

    # -- scenarios --------------------------------------------------------------------------
    def run(self, scenarios: Sequence[Scenario]) -> dict[str, np.ndarray]:
        """Step times (n_steps,) of each scenario, by name.

        Scenarios that can share one simulation batch are simulated together: all-ideal ones
        with a single DP rank (every rank runs the same timeline), single-DP-rank ones with
        two virtual ranks, the others with every DP rank; scenarios that bring their own
        values are batched with those that bring the same array. A scenario that keeps the
        same ops original as one simulated before (here or in an earlier call) takes its
        step times.
        """
        names = [s.name for s in scenarios]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"scenario name {dup!r} is used twice")
        batches: dict[tuple[str, int], list[Scenario]] = {}
        same: dict[str, tuple[object, ...]] = {}
        pending: set[tuple[object, ...]] = set()
        for sc in scenarios:
            kind = ("ideal" if sc.all_ideal else "virtual" if sc.only_dp_rank is not None
                    else "full")
            what = _kept(kind, sc)
            if what is not None:
                same[sc.name] = what
                if what in self._done or what in pending:
                    continue
                pending.add(what)
            key = (kind, 0 if sc.values is None else id(sc.values))
            batches.setdefault(key, []).append(sc)
        out: dict[str, np.ndarray] = {}
        for (kind, _), group in batches.items():
            times = simulate_mixed(self.order, self._mixed(kind, group))
            for sc, t in zip(group, times, strict=True):
                out[sc.name] = t
                if sc.name in same:
                    self._done[same[sc.name]] = t.copy()
        return {n: out[n] if n in out else self._done[same[n]].copy() for n in names}

    def _mixed(self, kind: str, group: list[Scenario]) -> MixedValues:
        """The batch of ``group`` as :class:`MixedValues` (masks stacked along the batch)."""
        n, dp, pp, ns = self.n_nodes, self.dp, self.pp, self.n_steps
        b = len(group)
        given = group[0].values
        own = given is None
        orig = self.derived.value if given is None else given
        nonnegative = self.values_nonnegative if own else None
        if kind == "ideal":
            return MixedValues(orig, self.ideal_value, self.table.node_stage,
                               np.zeros((b, 1), dtype=np.int64),
                               node_mask=np.zeros((n, b), dtype=bool),
                               nonnegative=bool(self.ideal_value.min(initial=0.0) >= 0))
        if kind == "virtual":
            ranks = np.array([sc.only_dp_rank for sc in group], dtype=np.int64)
            if np.any((ranks < 0) | (ranks >= dp)):
                raise ValueError(f"only_dp_rank outside 0..{dp - 1}: {ranks.tolist()}")
            dp_map = ranks[:, None] if dp == 1 else np.stack([ranks, (ranks + 1) % dp], 1)
        else:
            dp_map = np.broadcast_to(np.arange(dp)[None], (b, dp))
        v = dp_map.shape[1]
        node_mask = worker_mask = step_mask = None
        if any(sc.nodes is not None for sc in group):
            node_mask = np.ones((n, b), dtype=bool)
            for i, sc in enumerate(group):
                if sc.nodes is not None:
                    node_mask[:, i] = sc.nodes
        if kind == "virtual":
            # Virtual rank 0 is the original DP rank (on the stages asked for); rank 1 ideal.
            worker_mask = np.zeros((b, v, pp), dtype=bool)
            for i, sc in enumerate(group):
                worker_mask[i, 0, :] = True if sc.workers is None else sc.workers.reshape(-1)
        elif any(sc.workers is not None for sc in group):
            worker_mask = np.ones((b, dp, pp), dtype=bool)
            for i, sc in enumerate(group):
                if sc.workers is not None:
                    worker_mask[i] = sc.workers
        if any(sc.steps is not None for sc in group):
            step_mask = np.ones((b, ns), dtype=bool)
            for i, sc in enumerate(group):
                if sc.steps is not None:
                    step_mask[i] = sc.steps
        return MixedValues(orig, self.ideal_value, self.table.node_stage, dp_map, node_mask,
                           worker_mask, step_mask, nonnegative)

    # -- timelines --------------------------------------------------------------------------
    def timeline(self, scenario: Scenario, with_delays: bool = False) -> SimResult:
        """One scenario over every DP rank with start and end times kept, (n_nodes, 1, dp,
        n_steps); ``with_delays`` adds the launch delays (the actual timeline, re-simulated)."""
        if scenario.only_dp_rank is not None:
            raise ValueError("timeline(): a single-DP-rank scenario has no full timeline")
        values = self._mixed("full", [scenario])
        delay = self.derived.delay
        delays = (lambda idx: delay[idx][:, None]) if with_delays else None
        return simulate(self.order, values, values.shape, delays=delays, keep=True)


def _kept(kind: str, sc: Scenario) -> tuple[object, ...] | None:
    """What a scenario with the trace's own values keeps original, as a key (None for a
    scenario with values of its own: those are not remembered)."""
    if sc.values is not None:
        return None
    if kind == "ideal":
        return ("ideal",)

    def mask(a: np.ndarray | None) -> object:
        return None if a is None else (a.shape, np.asarray(a, dtype=bool).tobytes())

    return (kind, sc.only_dp_rank, mask(sc.nodes), mask(sc.workers), mask(sc.steps))


def ideal_values(table: OpTable, value: np.ndarray) -> np.ndarray:
    """Per-node ideal value: the mean (compute-like) or median (communication-like) of the
    node's op type over all DP ranks, stages, steps and microbatches (§5)."""
    ideal = np.empty(table.n_nodes)
    codes = np.unique(table.node_optype)
    use_mean = ideal_is_mean(codes)
    for code, mean in zip(codes, use_mean, strict=True):
        nodes = table.node_optype == code
        v = value[nodes].ravel()
        ideal[nodes] = v.mean() if mean else np.median(v)
    return ideal


def prepare(table: OpTable) -> WhatIfEngine:
    """Build the dependency model of a validated op table and its derived and ideal values."""
    with phase("graph"):
        graph = build_graph(table)
        order = evaluation_order(graph)
    with phase("derive"):
        derived = derive_durations(table, graph)
    with phase("ideal"):
        ideal = ideal_values(table, derived.value)
    return WhatIfEngine(table=table, graph=graph, order=order, derived=derived,
                        ideal_value=ideal)
