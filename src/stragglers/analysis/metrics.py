"""What-if metrics (whatif-model.md §5): timelines, discrepancy, slowdown S, waste,
attribution by DP rank / stage / optype (overall and per step), exact worker slowdown
S_w, the min-approximation worker score, M_W, M_S and the forward/backward signal.

Every figure comes from batches of simulated scenarios; see
:class:`stragglers.sim.MixedValues` for how a scenario mixes original and ideal values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stragglers.analysis.model import WhatIfModel
from stragglers.trace import schema as S

#: Attribution is meaningful only above this slowdown (§5).
ATTRIBUTION_THRESHOLD = 1.03
#: Share of workers characterised by M_W (§5, Eq. 5).
MW_FRACTION = 0.03


@dataclass
class Characterisation:
    """M metric of a set of ops: ``rem`` removes their slowness from the no-delay
    timeline, ``add`` puts only their slowness into the ideal one (Eq. 5)."""

    rem: float
    add: float
    t_ori: float
    t_ideal: float
    t_rem: float
    t_add: float
    workers: list[tuple[int, int]] = field(default_factory=list)

    @classmethod
    def from_times(cls, t_ori: float, t_ideal: float, t_rem: float, t_add: float,
                   workers: list[tuple[int, int]] | None = None) -> Characterisation:
        gap = t_ori - t_ideal
        rem = (t_ori - t_rem) / gap if gap > 0 else 0.0
        add = (t_add - t_ideal) / gap if gap > 0 else 0.0
        return cls(rem=rem, add=add, t_ori=t_ori, t_ideal=t_ideal, t_rem=t_rem, t_add=t_add,
                   workers=list(workers or []))

    def to_dict(self) -> dict:
        return {"rem": self.rem, "add": self.add, "t_ori": self.t_ori,
                "t_ideal": self.t_ideal, "t_rem": self.t_rem, "t_add": self.t_add,
                "workers": [f"{d},{s}" for d, s in self.workers]}


@dataclass
class Metrics:
    steps: np.ndarray
    actual: np.ndarray
    nodelay: np.ndarray
    ideal: np.ndarray
    attr_dp: np.ndarray  # (dp, S) step times with only DP rank d original
    attr_stage: np.ndarray  # (pp, S)
    attr_optype: dict[str, np.ndarray]  # key -> (S,)
    worker_exact: np.ndarray | None  # (dp, pp, S) or None
    m_w: Characterisation
    m_s: Characterisation
    m_comm: Characterisation
    m_gc: Characterisation
    m_seq: Characterisation
    m_pause: Characterisation
    pauses: dict
    fb: dict
    stage_compute: np.ndarray  # (pp,) median over DP ranks of compute seconds per step
    comm_excess: np.ndarray  # (dp, pp) communication seconds per step above ideal

    @property
    def discrepancy(self) -> float:
        return float(self.actual.mean() / self.nodelay.mean())

    @property
    def slowdown(self) -> float:
        return float(self.nodelay.mean() / self.ideal.mean())

    @property
    def waste(self) -> float:
        return 1.0 - 1.0 / self.slowdown

    def s_of(self, times: np.ndarray) -> np.ndarray:
        """Slowdown over the ideal timeline: mean over the last axis."""
        return times.mean(axis=-1) / self.ideal.mean()

    @property
    def worker_score(self) -> np.ndarray:
        """Published approximation of S_w: min(S_dp=d, S_stage=s), shape (dp, pp)."""
        return np.minimum(self.s_of(self.attr_dp)[:, None], self.s_of(self.attr_stage)[None, :])

    @property
    def worker_slowdown(self) -> np.ndarray:
        """Exact S_w (dp, pp) where computed, else the min approximation."""
        if self.worker_exact is None:
            return self.worker_score
        return self.s_of(self.worker_exact)


def optype_keys(model: WhatIfModel) -> list[str]:
    """Attribution keys of the op types present, in schema order."""
    present = {S.ATTRIBUTION_TYPE[S.OPTYPES[c]] for c in np.unique(model.table.node_optype)}
    seen: list[str] = []
    for t in S.OPTYPES:
        k = S.ATTRIBUTION_TYPE[t]
        if k in present and k not in seen:
            seen.append(k)
    return seen


def exact_worker_times(model: WhatIfModel) -> np.ndarray:
    """Step times (dp, pp, S) with only worker (d, s) original: one scenario per worker,
    each simulated with one original and one ideal virtual DP rank."""
    dp, pp = model.dp, model.pp
    d = np.repeat(np.arange(dp), pp)
    s = np.tile(np.arange(pp), dp)
    dp_map = model.virtual_dp_map(d)
    wm = np.zeros((dp * pp, dp_map.shape[1], pp), dtype=bool)
    wm[np.arange(dp * pp), 0, s] = True
    times = model.step_times(model.mixed(dp_map, worker_mask=wm))
    return times.reshape(dp, pp, -1)


def top_workers(score: np.ndarray, ranks: np.ndarray, fraction: float = MW_FRACTION
                ) -> list[tuple[int, int]]:
    """The ⌈n·fraction⌉ workers with the highest score, ties to the lower global rank."""
    dp, pp = score.shape
    n = math.ceil(dp * pp * fraction)
    flat_rank = ranks.ravel()
    order = np.lexsort((flat_rank, -score.ravel()))[:n]
    return [(int(i // pp), int(i % pp)) for i in order]


def _fb_signal(model: WhatIfModel) -> dict:
    """Forward/backward compute correlation of the same microbatch (§5.3) and the spread
    of forward times; ``*_within`` versions remove each worker-step's mean first so that
    a slow worker or step does not look like sequence-length variation."""
    t = model.table
    pp = model.pp
    stage = 1 if pp > 2 else 0
    sel = t.node_stage == stage
    if t.meta.vpp_size > 1:
        sel &= t.node_mc != 0
    fwd = np.flatnonzero(sel & (t.node_optype == S.OPTYPE_CODE[S.FORWARD_COMPUTE]))
    bwd = np.flatnonzero(sel & (t.node_optype == S.OPTYPE_CODE[S.BACKWARD_COMPUTE]))
    key_f = t.node_mc[fwd] * 1_000_000 + t.node_mb[fwd]
    key_b = t.node_mc[bwd] * 1_000_000 + t.node_mb[bwd]
    common, fi, bi = np.intersect1d(key_f, key_b, return_indices=True)
    out: dict[str, Any] = {"stage": stage, "n_pairs": int(len(common) * model.dp * model.n_steps),
           "correlation": None, "correlation_within": None, "forward_spread": None,
           "forward_spread_within": None}
    if len(common) < 2:
        return out
    x = t.duration[fwd[fi]]  # (m, dp, S)
    y = t.duration[bwd[bi]]

    def corr(a: np.ndarray, b: np.ndarray) -> float | None:
        a, b = a.ravel(), b.ravel()
        if a.std() == 0 or b.std() == 0:
            return None
        return float(np.corrcoef(a, b)[0, 1])

    xm, ym = x.mean(axis=0, keepdims=True), y.mean(axis=0, keepdims=True)
    out["correlation"] = corr(x, y)
    out["correlation_within"] = corr(x - xm, y - ym)
    out["forward_spread"] = float(x.std() / x.mean()) if x.mean() > 0 else None
    rel = (x - xm) / np.where(xm > 0, xm, 1.0)
    out["forward_spread_within"] = float(rel.std())
    return out


def stage_compute_time(model: WhatIfModel) -> np.ndarray:
    """Per stage: median over DP ranks of the mean compute seconds per step."""
    t = model.table
    compute = np.isin(t.node_optype, [S.OPTYPE_CODE[x] for x in S.COMPUTE_TYPES])
    per_worker = np.zeros((model.dp, model.pp))
    for s in range(model.pp):
        nodes = compute & (t.node_stage == s)
        per_worker[:, s] = t.duration[nodes].sum(axis=0, dtype=np.float64).mean(axis=1)
    return np.median(per_worker, axis=0)


def comm_excess(model: WhatIfModel) -> np.ndarray:
    """Per worker: mean seconds per step its communication ops take above ideal."""
    t = model.table
    keys = np.array([S.ATTRIBUTION_TYPE[S.OPTYPES[c]] for c in t.node_optype])
    comm = np.isin(keys, list(S.COMM_ATTRIBUTION_KEYS))
    out = np.zeros((model.dp, model.pp))
    for s in range(model.pp):
        nodes = np.flatnonzero(comm & (t.node_stage == s))
        excess = model.derived.value[nodes] - model.ideal[nodes][:, None, None]
        out[:, s] = np.clip(excess, 0.0, None).sum(axis=0).mean(axis=1)
    return out


#: A compute op this many times its typical value (median over DP ranks and steps) is a
#: pause candidate.
PAUSE_FACTOR = 1.5


def _compute_mask(model: WhatIfModel) -> np.ndarray:
    return np.isin(model.table.node_optype, [S.OPTYPE_CODE[x] for x in S.COMPUTE_TYPES])


def even_microbatches(model: WhatIfModel) -> np.ndarray:
    """Values with every compute op replaced by the step's mean over the microbatches and
    DP ranks of its stage, direction and model chunk: what if all sequences (microbatches)
    had the same length. Differences between stages and steps stay."""
    t = model.table
    value = model.derived.value.astype(np.float64)
    compute = _compute_mask(model)
    keys = t.node_stage * 1_000_000 + t.node_optype * 1000 + t.node_mc
    for key in np.unique(keys[compute]):
        nodes = np.flatnonzero(compute & (keys == key))
        value[nodes] = value[nodes].mean(axis=(0, 1), keepdims=True)
    return value


def without_pauses(model: WhatIfModel) -> tuple[np.ndarray, dict]:
    """Values with every compute op longer than PAUSE_FACTOR x its typical value cut back
    to that typical value (median over DP ranks and steps of the same op), and where
    those long ops are: uncoordinated pauses (GC) hit random workers and steps."""
    value = model.derived.value.astype(np.float64)
    compute = np.flatnonzero(_compute_mask(model))
    typical = np.median(value[compute].reshape(len(compute), -1), axis=1)[:, None, None]
    long_op = value[compute] > PAUSE_FACTOR * typical
    value[compute] = np.where(long_op, typical, value[compute])
    per_node = long_op.sum(axis=2)  # (k, dp)
    stage = model.table.node_stage[compute]
    per_worker = np.stack([per_node[stage == s].sum(axis=0) for s in range(model.pp)], axis=1)
    n = int(long_op.sum())
    info = {"long_compute_ops": n, "workers_hit": int((per_worker > 0).sum()),
            "top_worker_share": float(per_worker.max() / n) if n else 0.0,
            "worker_step_share": float(long_op.any(axis=0).mean()) if n else 0.0}
    return value, info


def _rem_only(model: WhatIfModel, t_ori: float, t_ideal: float,
              values: np.ndarray) -> Characterisation:
    """M (rem) of replacing the no-delay values by ``values``."""
    times = model.step_times(model.mixed(model.full_dp_map(1), orig=values))
    t = float(times.mean())
    return Characterisation.from_times(t_ori, t_ideal, t, t_ideal)


def compute_metrics(model: WhatIfModel, exact_workers: bool = True) -> Metrics:
    """All figures of §5 for a prepared model."""
    t = model.table
    dp, pp, n = model.dp, model.pp, t.n_nodes
    keys = optype_keys(model)
    node_key = np.array([S.ATTRIBUTION_TYPE[S.OPTYPES[c]] for c in t.node_optype])
    is_comm_type = np.isin(node_key, list(S.COMM_ATTRIBUTION_KEYS))
    is_gc = node_key == S.GC

    # Ideal timeline: every value ideal; every DP rank identical (V = 1).
    ideal = model.step_times(model.mixed(np.zeros((1, 1), dtype=np.int64),
                                         node_mask=np.zeros((n, 1), dtype=bool)))[0]

    # One batch over all DP ranks: no-delay, per stage, per optype, M_S, M_comm, M_gc.
    n_b = 1 + pp + len(keys) + 6
    node_mask = np.ones((n, n_b), dtype=bool)
    worker_mask = np.ones((n_b, dp, pp), dtype=bool)
    b = 1
    for s in range(pp):
        worker_mask[b + s] = False
        worker_mask[b + s, :, s] = True
    b += pp
    for k, key in enumerate(keys):
        node_mask[:, b + k] = node_key == key
    b += len(keys)
    last = pp - 1
    worker_mask[b, :, last] = False          # M_S rem: last stage ideal
    worker_mask[b + 1] = False
    worker_mask[b + 1, :, last] = True       # M_S add: only last stage original
    node_mask[:, b + 2] = ~is_comm_type      # M_comm rem / add
    node_mask[:, b + 3] = is_comm_type
    node_mask[:, b + 4] = ~is_gc             # M_gc rem / add
    node_mask[:, b + 5] = is_gc
    times = model.step_times(model.mixed(model.full_dp_map(n_b), node_mask, worker_mask))
    nodelay = times[0]
    attr_stage = times[1:1 + pp]
    attr_optype = {key: times[1 + pp + k] for k, key in enumerate(keys)}
    t_ori, t_ideal = float(nodelay.mean()), float(ideal.mean())
    mb = times[b:b + 6].mean(axis=1)
    last_workers = [(d, last) for d in range(dp)]
    m_s = Characterisation.from_times(t_ori, t_ideal, float(mb[0]), float(mb[1]), last_workers)
    m_comm = Characterisation.from_times(t_ori, t_ideal, float(mb[2]), float(mb[3]))
    m_gc = Characterisation.from_times(t_ori, t_ideal, float(mb[4]), float(mb[5]))

    pauses = without_pauses(model)

    # Per DP rank: only rank d original, with virtual ranks.
    dp_map = model.virtual_dp_map(np.arange(dp))
    attr_dp = model.step_times(model.mixed(dp_map, worker_mask=model.virtual_worker_mask(dp_map)))
    metrics = Metrics(
        steps=t.steps, actual=t.step_times(), nodelay=nodelay, ideal=ideal,
        attr_dp=attr_dp, attr_stage=attr_stage, attr_optype=attr_optype,
        worker_exact=exact_worker_times(model) if exact_workers else None,
        m_w=m_s, m_s=m_s, m_comm=m_comm, m_gc=m_gc,
        m_seq=_rem_only(model, t_ori, t_ideal, even_microbatches(model)),
        m_pause=_rem_only(model, t_ori, t_ideal, pauses[0]), pauses=pauses[1],
        fb=_fb_signal(model),
        stage_compute=stage_compute_time(model), comm_excess=comm_excess(model),
    )
    metrics.m_w = characterise_workers(model, metrics,
                                       top_workers(metrics.worker_score, t.ranks))
    return metrics


def characterise_workers(model: WhatIfModel, metrics: Metrics,
                         workers: list[tuple[int, int]]) -> Characterisation:
    """M of a set of workers (Eq. 5): rem and add variants."""
    dp, pp = model.dp, model.pp
    chosen = np.zeros((dp, pp), dtype=bool)
    for d, s in workers:
        chosen[d, s] = True
    wm = np.stack([~chosen, chosen])
    times = model.step_times(model.mixed(model.full_dp_map(2), worker_mask=wm)).mean(axis=1)
    return Characterisation.from_times(float(metrics.nodelay.mean()),
                                       float(metrics.ideal.mean()),
                                       float(times[0]), float(times[1]), workers)
