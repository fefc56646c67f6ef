"""The step time after a mitigation, predicted by the what-if simulator from the job's own
trace, before anything is applied (issue 11 pt 3).

Both predictions rewrite the trace's per-op values (durations of local ops, transfer
durations of communication ops, :class:`~stragglers.analysis.engine.WhatIfEngine`) and
simulate them as a :class:`~stragglers.analysis.scenarios.Scenario` with values of its own,
on the no-delay timeline; "before" is the trace's own values on that timeline.

* **S2, micro-batch assignment.** Each DP group's time per micro-batch ``t_i`` is the
  forward + backward compute per micro-batch of its slowest stage (the pipeline runs at the
  pace of its slowest stage), measured in the trace; :func:`~.microbatch.solve_microbatches`
  splits the ``m x dp`` micro-batches. The trace's schedule has ``m`` micro-batch slots per
  DP group, so the assignment is simulated by scaling every compute op of group ``i`` by
  ``m_i / m``: the group's compute per step becomes ``m_i t_i`` while the schedule keeps its
  shape. This is an approximation: the pipeline's fill and drain are those of ``m``
  micro-batches, not ``m_i`` (exact when the micro-batch count per group stays ``m``, close
  when ``m`` is much larger than the number of stages).
* **S3, a worker permutation.** Each worker's compute slowness ``f[d, s]`` is its mean
  compute per op relative to the median worker of its stage; after the permutation the
  position of a worker carries the factor of the worker moved there: compute ops at position
  ``(d, s)`` are scaled by ``f[moved here] / f[d, s]``. Links stay where they are (a
  link-reassignment plan moves no compute slowness; its effect needs per-link values the
  trace does not separate from the workers).
* **Sequence-length rebalancing.** Given each micro-batch's modelled cost before and after
  (:mod:`.seqlen`; arrays ``(steps, dp, micro-batches)`` in the trace's step order), every
  compute op of micro-batch ``(step, d, mb)`` is scaled by ``after / before``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stragglers.analysis.engine import WhatIfEngine, prepare
from stragglers.analysis.runner import load_table
from stragglers.analysis.scenarios import Scenario
from stragglers.errors import InputError
from stragglers.mitigate.microbatch import solve_microbatches
from stragglers.mitigate.topology import Move, TopologyPlan, consolidate
from stragglers.trace import schema

if TYPE_CHECKING:  # the planner imports this module only when asked for predictions
    from stragglers.mitigate.planner import Decision, Plan

__all__ = ["PredictedMoves", "PredictedSplit", "Prediction", "predict_decision",
           "predict_microbatch", "predict_permutation", "predict_plan", "predict_rebalance",
           "predict_trace", "worker_compute"]


@dataclass(frozen=True)
class PredictedSplit:
    """What S2's prediction used: each DP group's time per micro-batch, the micro-batches
    per group in the trace and the assignment simulated."""

    group_times_s: list[float]
    microbatches_per_group: int
    assignment: list[int]

    def to_dict(self) -> dict[str, object]:
        return {"group_times_s": list(self.group_times_s),
                "microbatches_per_group": self.microbatches_per_group,
                "assignment": list(self.assignment)}


@dataclass(frozen=True)
class PredictedMoves:
    """What S3's prediction used: each worker's compute factor (dp x pp) and the moves."""

    worker_factors: list[list[float]]
    moves: list[Move]

    def to_dict(self) -> dict[str, object]:
        return {"worker_factors": [list(row) for row in self.worker_factors],
                "moves": [mv.to_dict() for mv in self.moves]}


@dataclass(frozen=True)
class Prediction:
    """Mean step time on the no-delay timeline before and after the action."""

    action: str
    before_s: float
    after_s: float
    details: PredictedSplit | PredictedMoves | None = None

    @property
    def gain(self) -> float:
        """Fraction of the step time saved."""
        return 1.0 - self.after_s / self.before_s

    def summary(self) -> str:
        """The step times, then the assignment or the moves."""
        lines = [f"{self.action}: mean step time {self.before_s:.6g} s -> {self.after_s:.6g} s "
                 f"predicted ({self.gain * 100:.1f}% saved; no-delay timeline)"]
        if isinstance(self.details, PredictedSplit):
            lines.append("assignment: " + ",".join(str(m) for m in self.details.assignment))
        elif isinstance(self.details, PredictedMoves):
            lines.extend("  " + mv.describe() for mv in self.details.moves)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        out = {"action": self.action, "before_s": self.before_s, "after_s": self.after_s,
               "gain": self.gain}
        return out if self.details is None else {**out, **self.details.to_dict()}


def _compute_nodes(engine: WhatIfEngine) -> np.ndarray:
    codes = [schema.OPTYPE_CODE[t] for t in schema.COMPUTE_TYPES]
    return np.isin(engine.table.node_optype, codes)


def worker_compute(engine: WhatIfEngine) -> tuple[np.ndarray, int]:
    """Per worker (dp, pp): mean forward + backward compute per micro-batch; and the number
    of micro-batches per DP group in the trace's schedule."""
    compute = _compute_nodes(engine)
    value = engine.derived.value
    t = engine.table
    per = np.zeros((engine.dp, engine.pp))
    mbs = int(np.unique(t.node_mb[compute & (t.node_stage == 0)]).size)
    for s in range(engine.pp):  # one vectorised reduction per stage
        nodes = compute & (t.node_stage == s)
        n_mb = max(int(np.unique(t.node_mb[nodes]).size), 1)
        per[:, s] = value[nodes].sum(axis=0).mean(axis=1) / n_mb
    return per, mbs


def _mean_step(engine: WhatIfEngine, values: np.ndarray | None) -> float:
    scen = Scenario.original("run") if values is None else Scenario.with_values("run", values)
    return float(engine.run([scen])["run"].mean())


def predict_microbatch(engine: WhatIfEngine,
                       assignment: Sequence[int] | None = None) -> Prediction:
    """The step time after S2's optimal assignment (see the module docstring), or after
    ``assignment`` when given (micro-batches per DP group, e.g. the split a live loop
    applied: its own prediction, comparable with the step it then measured)."""
    per, m = worker_compute(engine)
    if engine.dp < 2:
        raise InputError(f"{engine.table.source}: one DP group: no micro-batches to move")
    t = per.max(axis=1)
    if assignment is None:
        split = solve_microbatches(t, m * engine.dp,
                                   source=f"{engine.table.source}: group times").assignment
    else:
        split = np.asarray(assignment, dtype=np.int64)
        if split.shape != (engine.dp,) or split.sum() != m * engine.dp or split.min() < 1:
            raise InputError(
                f"assignment {list(map(int, split.reshape(-1)))}: needs {engine.dp} counts "
                f">= 1 that add up to {m * engine.dp} (the trace's {m} micro-batches per "
                f"group x {engine.dp} groups)")
    scale = split / m
    values = engine.derived.value.astype(np.float64)
    compute = _compute_nodes(engine)
    values[compute] *= scale[None, :, None]
    return Prediction("microbatch", _mean_step(engine, None), _mean_step(engine, values),
                      PredictedSplit(t.tolist(), m, split.tolist()))


def predict_permutation(engine: WhatIfEngine, plan: TopologyPlan) -> Prediction:
    """The step time after moving workers as ``plan`` says (compute slowness moves along)."""
    if (plan.dp_size, plan.pp_size) != (engine.dp, engine.pp):
        raise InputError(f"plan for dp {plan.dp_size} x pp {plan.pp_size}, trace of dp "
                         f"{engine.dp} x pp {engine.pp}")
    per, _ = worker_compute(engine)
    factor = per / np.median(per, axis=0, keepdims=True)  # (dp, pp)
    flat = factor.T.reshape(-1)  # by worker index stage * dp + d
    moved_here = np.empty_like(flat)
    moved_here[plan.position] = flat  # position p now holds the worker w with position[w] = p
    scale = (moved_here / flat).reshape(engine.pp, engine.dp).T  # (dp, pp)
    values = engine.derived.value.astype(np.float64)
    t = engine.table
    compute = _compute_nodes(engine)
    for s in range(engine.pp):
        nodes = compute & (t.node_stage == s)
        values[nodes] *= scale[None, :, s, None]
    return Prediction(plan.kind, _mean_step(engine, None), _mean_step(engine, values),
                      PredictedMoves(np.round(factor, 6).tolist(), plan.moves))


def predict_rebalance(engine: WhatIfEngine, before_cost: np.ndarray, after_cost: np.ndarray
                      ) -> Prediction:
    """The step time after micro-batch costs change from ``before_cost`` to ``after_cost``
    (both ``(n_steps, dp, micro-batches)``, > 0)."""
    t = engine.table
    compute = _compute_nodes(engine)
    mbs = int(t.node_mb[compute].max()) + 1
    shape = (engine.n_steps, engine.dp, mbs)
    before = np.asarray(before_cost, dtype=np.float64)
    after = np.asarray(after_cost, dtype=np.float64)
    for name, arr in (("before", before), ("after", after)):
        if arr.shape != shape:
            raise InputError(f"{name} costs: shape {arr.shape}, the trace needs {shape} "
                             "(steps, DP ranks, micro-batches)")
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise InputError(f"{name} costs: every cost must be a finite number > 0")
    ratio = after / before  # (steps, dp, mb)
    values = engine.derived.value.astype(np.float64)
    nodes = np.flatnonzero(compute)
    # values[node, d, step] *= ratio[step, d, mb of node]
    values[nodes] *= ratio[:, :, t.node_mb[nodes]].transpose(2, 1, 0)
    return Prediction("rebalance", _mean_step(engine, None), _mean_step(engine, values))


def predict_decision(engine: WhatIfEngine, decision: Decision) -> Prediction | None:
    """The prediction for one planner decision from the job's trace: S2's assignment, or the
    consolidation of the decision's slow ranks for S3 on a computation fail-slow; None for
    the others (S1 changes nothing, S4 replaces hardware the trace knows nothing of)."""
    if decision.action == "microbatch":
        return predict_microbatch(engine)
    if decision.action == "topology" and decision.root_cause == "computation":
        plan = consolidate(engine.table.meta, list(decision.slow_ranks), source="decision")
        return predict_permutation(engine, plan)
    return None


def predict_trace(trace: str | Path, meta: str | Path, steps: str | None = None,
                  slow_ranks: list[int] | None = None) -> Prediction:
    """``mitigate predict``: the step time after S2 (default) or after the consolidation of
    ``slow_ranks``, from the trace (steps ``A:B`` of it when given) and its metadata."""
    table = load_table(trace, meta, steps)
    engine = prepare(table)
    if slow_ranks is not None:
        return predict_permutation(engine, consolidate(table.meta, slow_ranks))
    return predict_microbatch(engine)


def predict_plan(plan: Plan, trace: str | Path, meta: str | Path) -> None:
    """Add the what-if prediction from the job's trace to each S2 / S3 decision of ``plan``
    (in place: its episodes' decisions are replaced)."""
    engine = prepare(load_table(trace, meta))
    for ep in plan.episodes:
        for i, d in enumerate(ep.decisions):
            pred = predict_decision(engine, d)
            if pred is not None:
                ep.decisions[i] = replace(d, details=replace(d.details, whatif=pred))
