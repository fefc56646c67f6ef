"""What-if metrics (whatif-model.md §5): timelines, discrepancy, slowdown S, waste,
attribution by DP rank / stage / op type (overall and per step), exact worker slowdown S_w,
the published min-approximation worker score, M_W and M_S.

:func:`compute_metrics` builds one frozen :class:`Metrics` from named scenarios
(:mod:`stragglers.analysis.scenarios`) simulated by the engine. The verdict's own what-ifs
live with its hypotheses (:mod:`stragglers.analysis.verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from stragglers.analysis.engine import WhatIfEngine
from stragglers.analysis.healthy import HealthyReference, healthy_reference
from stragglers.analysis.launch import LAUNCH_THRESHOLD, LaunchAttribution, compute_launch
from stragglers.analysis.scenarios import Scenario, removal_and_addition
from stragglers.analysis.workers import Worker, worker_mask, workers_by_flat_index
from stragglers.phases import phase
from stragglers.trace import schema

#: Attribution is meaningful only above this slowdown (§5).
ATTRIBUTION_THRESHOLD = 1.03
#: Share of workers characterised by M_W (§5, Eq. 5).
MW_FRACTION = 0.03


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view (the array itself stays writable for its owner)."""
    v = np.asarray(a).view()
    v.setflags(write=False)
    return v


@dataclass(frozen=True)
class Characterisation:
    """An M metric (Eq. 5) of a set of ops, kept per step so that it can be resampled.

    ``rem_time``: step times with those ops at their ideal values (everything else as in the
    no-delay timeline); ``add_time``: step times with only those ops original (everything
    else ideal). Either may be absent when that what-if is not defined for the set. ``rem``
    is the share of the slowdown that disappears when the ops are fixed; ``add`` the share
    they cause alone.
    """

    nodelay: np.ndarray
    ideal: np.ndarray
    rem_time: np.ndarray | None
    add_time: np.ndarray | None
    workers: tuple[Worker, ...] = ()

    @property
    def t_ori(self) -> float:
        return float(self.nodelay.mean())

    @property
    def t_ideal(self) -> float:
        return float(self.ideal.mean())

    @property
    def t_rem(self) -> float | None:
        return None if self.rem_time is None else float(self.rem_time.mean())

    @property
    def t_add(self) -> float | None:
        return None if self.add_time is None else float(self.add_time.mean())

    @property
    def rem(self) -> float | None:
        return None if self.rem_time is None else _rem(self.t_ori, self.t_ideal,
                                                       float(self.rem_time.mean()))

    @property
    def add(self) -> float | None:
        return None if self.add_time is None else _add(self.t_ori, self.t_ideal,
                                                       float(self.add_time.mean()))

    @property
    def share(self) -> float:
        """The removal share ``rem`` bounded to [0, 1] (``add`` when no removal what-if is
        defined): how much of the slowdown disappears when these ops alone are fixed, the
        way the study's M_W and M_S are defined (§5, Eq. 5). A ``rem`` above 1 means that
        fixing these ops alone leaves the job faster than the ideal timeline (the other ops
        run below their averages): they explain all of the slowdown, and the share says
        "all" (1); a negative ``rem`` (fixing them makes the job slower) is 0."""
        raw = self.rem if self.rem is not None else self.add
        return 0.0 if raw is None else min(1.0, max(0.0, raw))

    def resampled(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``share`` and ``add`` over resampled steps: ``index`` (B, n) of step positions
        → two (B,) arrays (``add`` is NaN where it has no what-if; both 0 where the
        resample has no slowdown)."""
        t_ori = self.nodelay[index].mean(axis=1)
        t_ideal = self.ideal[index].mean(axis=1)
        gap = t_ori - t_ideal
        safe = np.where(gap > 0, gap, 1.0)
        add = np.full(index.shape[0], np.nan)
        if self.add_time is not None:
            add = np.where(gap > 0, (self.add_time[index].mean(axis=1) - t_ideal) / safe, 0.0)
        if self.rem_time is not None:
            raw = np.where(gap > 0, (t_ori - self.rem_time[index].mean(axis=1)) / safe, 0.0)
        else:
            raw = np.nan_to_num(add, nan=0.0)
        return np.clip(raw, 0.0, 1.0), add


def _rem(t_ori: float, t_ideal: float, t_rem: float) -> float:
    gap = t_ori - t_ideal
    return (t_ori - t_rem) / gap if gap > 0 else 0.0


def _add(t_ori: float, t_ideal: float, t_add: float) -> float:
    gap = t_ori - t_ideal
    return (t_add - t_ideal) / gap if gap > 0 else 0.0


@dataclass(frozen=True)
class Metrics:
    """Every figure of §5 for one trace. Step-time arrays have shape (n_steps,) and follow
    ``steps``; ``attr_dp`` is (dp, n_steps), ``attr_stage`` (pp, n_steps), ``attr_optype``
    maps an attribution key to (n_steps,), ``worker_exact`` is (dp, pp, n_steps) or None when
    exact S_w was not computed."""

    steps: np.ndarray
    actual: np.ndarray
    nodelay: np.ndarray
    ideal: np.ndarray
    attr_dp: np.ndarray
    attr_stage: np.ndarray
    attr_optype: Mapping[str, np.ndarray]
    worker_exact: np.ndarray | None
    ranks: np.ndarray
    m_w: Characterisation
    m_s: Characterisation
    #: Launch attribution (§5): None below a discrepancy of :data:`LAUNCH_THRESHOLD`.
    launch: LaunchAttribution | None = None
    #: The ideal timeline over healthy peers (S_h, docs/model-extensions.md E4).
    healthy: HealthyReference | None = None

    @property
    def dp(self) -> int:
        return int(self.attr_dp.shape[0])

    @property
    def pp(self) -> int:
        return int(self.attr_stage.shape[0])

    @property
    def discrepancy(self) -> float:
        return float(self.actual.mean() / self.nodelay.mean())

    @property
    def slowdown(self) -> float:
        return float(self.nodelay.mean() / self.ideal.mean())

    @property
    def slowdown_healthy(self) -> float:
        """S_h: the no-delay timeline against the ideal one over healthy peers (S when it
        was not computed)."""
        return self.slowdown if self.healthy is None else self.healthy.slowdown(self.nodelay)

    @property
    def waste(self) -> float:
        return 1.0 - 1.0 / self.slowdown

    @property
    def attribution_meaningful(self) -> bool:
        return self.slowdown >= ATTRIBUTION_THRESHOLD

    @property
    def step_slowdown(self) -> np.ndarray:
        return self.nodelay / self.ideal

    def s_of(self, times: np.ndarray) -> np.ndarray:
        """Slowdown of step times over the ideal timeline (mean over the last axis)."""
        return np.asarray(times.mean(axis=-1) / self.ideal.mean())

    @property
    def s_dp(self) -> np.ndarray:
        return self.s_of(self.attr_dp)

    @property
    def s_stage(self) -> np.ndarray:
        return self.s_of(self.attr_stage)

    @property
    def s_optype(self) -> dict[str, float]:
        return {k: float(self.s_of(v)) for k, v in self.attr_optype.items()}

    @property
    def worker_score(self) -> np.ndarray:
        """Published approximation of S_w: min(S_dp=d, S_stage=s), shape (dp, pp)."""
        return np.minimum(self.s_dp[:, None], self.s_stage[None, :])

    @property
    def worker_method(self) -> str:
        return "exact" if self.worker_exact is not None else "min-approximation"

    @property
    def worker_slowdown(self) -> np.ndarray:
        """Exact S_w (dp, pp) where computed, else the min approximation."""
        if self.worker_exact is None:
            return self.worker_score
        return self.s_of(self.worker_exact)


def optype_keys(engine: WhatIfEngine) -> list[str]:
    """Attribution keys of the op types present, in schema order."""
    present = {schema.ATTRIBUTION_TYPE[schema.OPTYPES[c]]
               for c in np.unique(engine.table.node_optype)}
    seen: list[str] = []
    for t in schema.OPTYPES:
        k = schema.ATTRIBUTION_TYPE[t]
        if k in present and k not in seen:
            seen.append(k)
    return seen


def node_attribution_keys(engine: WhatIfEngine) -> np.ndarray:
    """Attribution key of every op identity (n_nodes,), e.g. ``forward-pp-comm``."""
    keys = np.array([schema.ATTRIBUTION_TYPE[t] for t in schema.OPTYPES])
    return keys[engine.table.node_optype]


def top_workers(score: np.ndarray, ranks: np.ndarray, fraction: float = MW_FRACTION
                ) -> tuple[Worker, ...]:
    """The ⌈n·fraction⌉ workers with the highest score, ties to the lower global rank."""
    dp, pp = score.shape
    n = math.ceil(dp * pp * fraction)
    order = np.lexsort((ranks.ravel(), -score.ravel()))[:n]
    return workers_by_flat_index(order, pp)


def characterise(engine: WhatIfEngine, name: str, nodelay: np.ndarray, ideal: np.ndarray, *,
                 nodes: np.ndarray | None = None,
                 workers: tuple[Worker, ...] | None = None) -> Characterisation:
    """M metric (rem and add) of a set of ops: op identities ``nodes`` or ``workers``."""
    mask = None if workers is None else worker_mask(workers, engine.dp, engine.pp)
    rem, add = removal_and_addition(name, nodes=nodes, workers=mask)
    times = engine.run([rem, add])
    return Characterisation(nodelay, ideal, times[rem.name], times[add.name],
                            tuple(workers or ()))


def exact_worker_times(engine: WhatIfEngine) -> np.ndarray:
    """Step times (dp, pp, n_steps) with only worker (d, s) original: one scenario per
    worker, each simulated with one original and one ideal virtual DP rank; the workers of
    one stage at a time (in a batch whose scenarios all keep the same stage, the simulator
    adds the kept values a whole virtual rank at a time)."""
    dp, pp = engine.dp, engine.pp
    out = np.empty((dp, pp, engine.n_steps))
    for s in range(pp):
        stages = np.zeros(pp, dtype=bool)
        stages[s] = True
        scenarios = [Scenario.keep_dp_rank(f"worker {d},{s}", d, stages) for d in range(dp)]
        times = engine.run(scenarios)
        out[:, s] = np.stack([times[sc.name] for sc in scenarios])
    return out


def compute_metrics(engine: WhatIfEngine, exact_workers: bool = True) -> Metrics:
    """All figures of §5 for an engine."""
    table = engine.table
    dp, pp = engine.dp, engine.pp
    keys = optype_keys(engine)
    node_key = node_attribution_keys(engine)
    stage_only = [np.zeros((dp, pp), dtype=bool) for _ in range(pp)]
    for s, m in enumerate(stage_only):
        m[:, s] = True
    last_stage = tuple(Worker(d, pp - 1) for d in range(dp))
    ms_rem, ms_add = removal_and_addition("M_S", workers=worker_mask(last_stage, dp, pp))
    scenarios = [
        Scenario.ideal("ideal"),
        Scenario.original("no_delay"),
        *(Scenario.keep_workers(f"stage {s}", m) for s, m in enumerate(stage_only)),
        *(Scenario.keep_nodes(f"optype {k}", node_key == k) for k in keys),
        ms_rem, ms_add,
        *(Scenario.keep_dp_rank(f"dp_rank {d}", d) for d in range(dp)),
    ]
    with phase("simulate"):
        times = engine.run(scenarios)
    nodelay, ideal = _frozen(times["no_delay"]), _frozen(times["ideal"])
    with phase("S_w"):
        worker_exact = _frozen(exact_worker_times(engine)) if exact_workers else None
    attr_dp = _frozen(np.stack([times[f"dp_rank {d}"] for d in range(dp)]))
    attr_stage = _frozen(np.stack([times[f"stage {s}"] for s in range(pp)]))
    s_dp = attr_dp.mean(axis=1) / ideal.mean()
    s_stage = attr_stage.mean(axis=1) / ideal.mean()
    score = np.minimum(s_dp[:, None], s_stage[None, :])
    mw_workers = top_workers(score, table.ranks)
    with phase("launch"):
        actual = _frozen(table.step_times())
        launch = (compute_launch(engine, nodelay, actual)
                  if actual.mean() / nodelay.mean() >= LAUNCH_THRESHOLD else None)
    with phase("healthy"):
        healthy = healthy_reference(engine)
    with phase("M_W"):
        m_w = characterise(engine, "M_W", nodelay, ideal, workers=mw_workers)
    return Metrics(
        steps=_frozen(table.steps), actual=actual, launch=launch, healthy=healthy,
        nodelay=nodelay, ideal=ideal, attr_dp=attr_dp, attr_stage=attr_stage,
        attr_optype=MappingProxyType({k: _frozen(times[f"optype {k}"]) for k in keys}),
        worker_exact=worker_exact, ranks=_frozen(table.ranks.copy()), m_w=m_w,
        m_s=Characterisation(nodelay, ideal, times["M_S/rem"], times["M_S/add"], last_stage),
    )
