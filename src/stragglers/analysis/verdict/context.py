"""The evidence the hypotheses share: the engine and metrics of one trace, the verdict's
configuration, and figures computed once on first use (per-worker compute time, the
forward/backward signal, communication excess, pauses within each worker)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from stragglers.analysis.engine import WhatIfEngine
from stragglers.analysis.grouped import median_last, sum_by, sum_rows
from stragglers.analysis.healthy import blame_beyond_noise
from stragglers.analysis.metrics import Characterisation, Metrics, characterise
from stragglers.analysis.scenarios import Scenario
from stragglers.analysis.verdict.config import VerdictConfig
from stragglers.analysis.workers import Worker
from stragglers.trace import schema

_COMPUTE_CODES = [schema.OPTYPE_CODE[t] for t in sorted(schema.COMPUTE_TYPES)]
#: Cells (op identity x DP rank x step) of the temporaries of a figure computed a few op
#: identities at a time.
_CHUNK_CELLS = 1 << 22


@dataclass(frozen=True)
class PauseEvidence:
    """Compute ops that are sporadic outliers *within their own worker*.

    ``typical`` (k, dp): each compute op identity's median over steps on each DP rank (its
    worker's usual time for that op); ``pause`` (k, dp, n_steps): the ops counted as pauses;
    ``excess`` (dp, pp): seconds per step those pauses add on each worker; ``candidates``:
    ops over the factor before the partner and sporadic checks; ``dropped_partner``: of those,
    ops whose forward/backward partner of the same microbatch is long too (sequence length,
    not a pause); ``dropped_steady``: ops on workers where most ops are long (a slow worker,
    not pauses).
    """

    nodes: np.ndarray
    typical: np.ndarray
    pause: np.ndarray
    excess: np.ndarray
    candidates: int
    dropped_partner: int
    dropped_steady: int
    steady_workers: tuple[Worker, ...]

    @property
    def count(self) -> int:
        return int(self.pause.sum())

    @property
    def workers(self) -> tuple[Worker, ...]:
        """Workers hit by pauses, most excess first."""
        pp = self.excess.shape[1]
        flat = self.excess.ravel()
        order = np.argsort(-flat, kind="stable")
        return tuple(Worker(int(i) // pp, int(i) % pp) for i in order if flat[i] > 0)

    @property
    def worker_step_share(self) -> float:
        """Share of (op identity's worker, step) cells with at least one pause."""
        if self.pause.size == 0:
            return 0.0
        return float(self.pause.any(axis=0).mean())

    def to_dict(self) -> dict[str, Any]:
        total = float(self.excess.sum())
        top = float(self.excess.max()) if self.excess.size else 0.0
        return {"long_compute_ops": self.candidates, "pauses": self.count,
                "workers_hit": len(self.workers),
                "workers": [w.key for w in self.workers[:16]],
                "excess_s_per_step": total,
                "top_worker_share": top / total if total > 0 else 0.0,
                "worker_step_share": self.worker_step_share,
                "not_pauses_partner_long": self.dropped_partner,
                "not_pauses_steady_worker": self.dropped_steady,
                "steady_workers": [w.key for w in self.steady_workers[:16]]}


class VerdictContext:
    """Evidence of one trace for the hypotheses; every figure is computed at most once."""

    def __init__(self, engine: WhatIfEngine, metrics: Metrics, config: VerdictConfig) -> None:
        self.engine = engine
        self.metrics = metrics
        self.config = config

    # -- basic views ------------------------------------------------------------------------
    @property
    def dp(self) -> int:
        return self.engine.dp

    @property
    def pp(self) -> int:
        return self.engine.pp

    @cached_property
    def compute_nodes(self) -> np.ndarray:
        """Op identities of forward and backward compute."""
        return np.flatnonzero(np.isin(self.engine.table.node_optype, _COMPUTE_CODES))

    def characterise(self, name: str, *, nodes: np.ndarray | None = None,
                     workers: tuple[Worker, ...] | None = None) -> Characterisation:
        """rem and add what-ifs of a set of op identities or workers."""
        m = self.metrics
        return characterise(self.engine, name, m.nodelay, m.ideal, nodes=nodes, workers=workers)

    def with_values(self, name: str, rem_values: np.ndarray,
                    add_values: np.ndarray | None = None,
                    workers: tuple[Worker, ...] = ()) -> Characterisation:
        """M metric of replacing the no-delay values by ``rem_values`` (rem) and of running
        ``add_values`` instead of the ideal ones (add)."""
        scenarios = [Scenario.with_values(f"{name}/rem", rem_values)]
        if add_values is not None:
            scenarios.append(Scenario.with_values(f"{name}/add", add_values))
        times = self.engine.run(scenarios)
        m = self.metrics
        return Characterisation(m.nodelay, m.ideal, times[f"{name}/rem"],
                                times.get(f"{name}/add"), workers)

    def values64(self) -> np.ndarray:
        """A fresh float64 copy of the derived values (n_nodes, dp, n_steps)."""
        return self.engine.derived.value.astype(np.float64)

    def ideal_values(self) -> np.ndarray:
        """A fresh (n_nodes, dp, n_steps) array of every op's ideal value."""
        e = self.engine
        return np.broadcast_to(e.ideal_value[:, None, None], e.derived.value.shape).copy()

    # -- per-worker figures -----------------------------------------------------------------
    def _per_worker(self, per_node: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Sum rows ``per_node`` (k, dp) of op identities ``nodes`` by their stage → (dp, pp)."""
        return sum_by(per_node, self.engine.table.node_stage[nodes], self.pp).T

    @cached_property
    def worker_compute(self) -> np.ndarray:
        """Mean compute seconds per step of every worker (dp, pp)."""
        c = self.compute_nodes
        per_node = np.empty((len(c), self.dp))
        for part, dur in self._compute_chunks(self.engine.table.duration):
            per_node[part] = dur.mean(axis=2)
        return self._per_worker(per_node, c)

    def _per_step_beyond_noise(self, nodes: np.ndarray) -> np.ndarray:
        """(dp, pp) bool: the worker's per-step sum over ``nodes`` exceeds its DP peers' on
        the same stage beyond the noise (significant, and by at least their step-to-step
        spread: :func:`~stragglers.analysis.healthy.blame_beyond_noise`); all True with one
        DP rank or one step."""
        e = self.engine
        if self.dp < 2 or e.n_steps < 2:
            return np.ones((self.dp, self.pp), dtype=bool)
        per_step = sum_rows(e.derived.value, nodes, e.table.node_stage[nodes], self.pp)
        return blame_beyond_noise(per_step).T

    @cached_property
    def comm_beyond_noise(self) -> np.ndarray:
        """(dp, pp) bool: the worker's communication time per step (transfer durations of its
        communication ops) exceeds its DP peers' beyond the noise."""
        keys = np.array([schema.ATTRIBUTION_TYPE[t] for t in schema.OPTYPES])[
            self.engine.table.node_optype]
        return self._per_step_beyond_noise(
            np.flatnonzero(np.isin(keys, list(schema.COMM_ATTRIBUTION_KEYS))))

    @cached_property
    def beyond_noise(self) -> np.ndarray:
        """(dp, pp) bool: the worker's own work per step (its compute-like ops) exceeds its DP
        peers' on the same stage beyond the noise: significantly (a paired one-sided t-test)
        and by at least their step-to-step spread
        (:func:`~stragglers.analysis.healthy.blame_beyond_noise`). All True with one DP rank
        or one step: there are no peers or no spread to test against."""
        return self._per_step_beyond_noise(
            np.flatnonzero(schema.ideal_is_mean(self.engine.table.node_optype)))

    @cached_property
    def last_stage_ratio(self) -> float:
        """The last stage's compute per step on its lightest DP rank over the median of the
        other stages' (0 with one stage)."""
        if self.pp < 2:
            return 0.0
        wc = self.worker_compute
        others = float(np.median(np.median(wc[:, :-1], axis=0)))
        return float(wc[:, -1].min()) / others if others > 0 else 0.0

    @cached_property
    def comm_excess(self) -> np.ndarray:
        """Per worker: mean seconds per step its communication ops take above ideal."""
        e = self.engine
        keys = np.array([schema.ATTRIBUTION_TYPE[t] for t in schema.OPTYPES])[
            e.table.node_optype]
        nodes = np.flatnonzero(np.isin(keys, list(schema.COMM_ATTRIBUTION_KEYS)))
        return self._per_worker(self._mean_excess(nodes), nodes)

    @cached_property
    def worker_excess(self) -> np.ndarray:
        """Per worker: mean seconds per step all its ops take above their ideal values."""
        nodes = np.arange(self.engine.n_nodes)
        return self._per_worker(self._mean_excess(nodes), nodes)

    def _mean_excess(self, nodes: np.ndarray) -> np.ndarray:
        """(k, dp): each op identity's mean seconds per step above its ideal value (0 where
        below), computed a few op identities at a time."""
        e = self.engine
        out = np.empty((len(nodes), self.dp))
        per = max(1, _CHUNK_CELLS // max(1, self.dp * e.n_steps))
        for lo in range(0, len(nodes), per):
            c = nodes[lo:lo + per]
            excess = e.derived.value[c] - e.ideal_value[c][:, None, None]
            np.clip(excess, 0.0, None, out=excess)
            out[lo:lo + per] = excess.mean(axis=2)
        return out

    @cached_property
    def partner(self) -> np.ndarray:
        """For each compute node (position in :attr:`compute_nodes`): the position of the
        compute of the other direction for the same microbatch and model chunk on the same
        stage, or -1."""
        t = self.engine.table
        c = self.compute_nodes
        where: dict[tuple[int, int, int, int], int] = {}
        for i, n in enumerate(c.tolist()):
            where[(int(t.node_stage[n]), int(t.node_mc[n]), int(t.node_mb[n]),
                   int(t.node_optype[n]))] = i
        fwd, bwd = (schema.OPTYPE_CODE[schema.FORWARD_COMPUTE],
                    schema.OPTYPE_CODE[schema.BACKWARD_COMPUTE])
        out = np.full(len(c), -1, dtype=np.int64)
        for (stage, mc, mb, opt), i in where.items():
            other = bwd if opt == fwd else fwd
            out[i] = where.get((stage, mc, mb, other), -1)
        return out

    @cached_property
    def fb_signal(self) -> dict[str, Any]:
        """Forward/backward compute correlation of the same microbatch (§5.3) and the spread
        of forward times; ``*_within`` versions remove each worker-step's mean first so that
        a slow worker or step does not look like sequence-length variation."""
        t = self.engine.table
        stage = 1 if self.pp > 2 else 0
        sel = t.node_stage == stage
        if t.meta.vpp_size > 1:
            sel &= t.node_mc != 0
        fwd = np.flatnonzero(sel & (t.node_optype == schema.OPTYPE_CODE[
            schema.FORWARD_COMPUTE]))
        bwd = np.flatnonzero(sel & (t.node_optype == schema.OPTYPE_CODE[
            schema.BACKWARD_COMPUTE]))
        key_f = t.node_mc[fwd] * 1_000_000 + t.node_mb[fwd]
        key_b = t.node_mc[bwd] * 1_000_000 + t.node_mb[bwd]
        common, fi, bi = np.intersect1d(key_f, key_b, return_indices=True)
        out: dict[str, Any] = {
            "stage": stage, "n_pairs": int(len(common) * self.dp * self.engine.n_steps),
            "correlation": None, "correlation_within": None, "forward_spread": None,
            "forward_spread_within": None, "log_correlation_within": None}
        if len(common) < 2:
            return out
        x = t.duration[fwd[fi]].astype(np.float64)  # (m, dp, S)
        y = t.duration[bwd[bi]].astype(np.float64)

        def corr(a: np.ndarray, b: np.ndarray) -> float | None:
            a, b = a.ravel(), b.ravel()
            if a.std() == 0 or b.std() == 0:
                return None
            return float(np.corrcoef(a, b)[0, 1])

        xm, ym = x.mean(axis=0, keepdims=True), y.mean(axis=0, keepdims=True)
        out["log_correlation_within"] = self._log_correlation_within()
        out["correlation"] = corr(x, y)
        out["correlation_within"] = corr(x - xm, y - ym)
        out["forward_spread"] = float(x.std() / x.mean()) if x.mean() > 0 else None
        rel = (x - xm) / np.where(xm > 0, xm, 1.0)
        out["forward_spread_within"] = float(rel.std())
        return out

    def _log_correlation_within(self) -> float | None:
        """Correlation of log forward and log backward compute times of the same microbatch
        over *every* stage, each centred on its worker-step's mean: a long sequence is long
        in both directions on every stage. Logs make a worker's or step's factor an offset
        that the centring removes, and damp the single long outliers that CPU stalls add to
        one direction only; pooling the stages gives p times the pairs of one stage."""
        t = self.engine.table
        fwd_code = schema.OPTYPE_CODE[schema.FORWARD_COMPUTE]
        bwd_code = schema.OPTYPE_CODE[schema.BACKWARD_COMPUTE]
        sel = np.ones(len(t.node_stage), dtype=bool)
        if t.meta.vpp_size > 1:
            sel &= t.node_mc != 0
        fwd = np.flatnonzero(sel & (t.node_optype == fwd_code))
        bwd = np.flatnonzero(sel & (t.node_optype == bwd_code))

        def key(n: np.ndarray) -> np.ndarray:
            return ((t.node_stage[n].astype(np.int64) * 1_000 + t.node_mc[n]) * 1_000_000
                    + t.node_mb[n])

        _, fi, bi = np.intersect1d(key(fwd), key(bwd), return_indices=True)
        if len(fi) < 2:
            return None
        x = np.log(np.maximum(t.duration[fwd[fi]].astype(np.float64), 1e-12))
        y = np.log(np.maximum(t.duration[bwd[bi]].astype(np.float64), 1e-12))
        stage = t.node_stage[fwd[fi]]
        groups, inverse = np.unique(stage, return_inverse=True)
        count = np.bincount(inverse, minlength=len(groups)).astype(np.float64)
        for a in (x, y):
            sums = sum_by(a, inverse, len(groups))
            a -= (sums / count[:, None, None])[inverse]
        if x.std() == 0 or y.std() == 0:
            return None
        return float(np.corrcoef(x.ravel(), y.ravel())[0, 1])

    # -- pauses -----------------------------------------------------------------------------
    @cached_property
    def pauses(self) -> PauseEvidence:
        """Compute ops that take at least ``pause_factor`` times their own worker's typical
        time for that op (and ``pause_min_excess`` of the ideal step longer), whose partner
        of the same microbatch is not long too, on workers where such ops are sporadic."""
        cfg, e = self.config, self.engine
        c = self.compute_nodes
        k, dp, ns = len(c), self.dp, e.n_steps
        floor = cfg.pause_min_excess * float(self.metrics.ideal.mean())
        partner_factor = 1.0 + (cfg.pause_factor - 1.0) / 2.0
        typical = np.zeros((k, dp))
        cand = np.zeros((k, dp, ns), dtype=bool)
        long = np.zeros((k, dp, ns), dtype=bool)  # ratio >= partner_factor
        # A few op identities at a time: no (k, dp, n_steps) float arrays.
        for part, vc in self._compute_chunks():
            if ns:
                typical[part] = median_last(vc)
            safe = np.where(typical[part] > 0, typical[part], np.inf)
            ratio = vc / safe[:, :, None]
            excess = vc - typical[part][:, :, None]
            cand[part] = (ratio >= cfg.pause_factor) & (excess >= floor)
            long[part] = ratio >= partner_factor
        partner = self.partner
        has = partner >= 0
        together = np.zeros_like(cand)
        together[has] = cand[has] & long[partner[has]]
        del long
        kept = cand & ~together
        # Sporadic: on each worker at most pause_max_fraction of its compute ops.
        stage = e.table.node_stage[c]
        per_worker_ops = np.bincount(stage, minlength=self.pp) * max(ns, 1)  # per DP rank
        hits = self._per_worker(kept.sum(axis=2), c)  # (dp, pp)
        frac = hits / np.maximum(per_worker_ops[None, :], 1)
        steady = frac > cfg.pause_max_fraction
        pause = kept & ~steady.T[stage][:, :, None]
        excess_sum = np.zeros((k, dp))
        for part, vc in self._compute_chunks():
            excess = vc - typical[part][:, :, None]
            excess_sum[part] = np.where(pause[part], excess, 0.0).sum(axis=2)
        pause_excess = self._per_worker(excess_sum, c) / max(ns, 1)
        steady_w = tuple(Worker(int(d), int(s)) for d, s in zip(*np.nonzero(steady & (hits > 0)),
                                                                 strict=True))
        return PauseEvidence(
            nodes=c, typical=typical, pause=pause, excess=pause_excess,
            candidates=int(cand.sum()), dropped_partner=int(together.sum()),
            dropped_steady=int((kept & ~pause).sum()), steady_workers=steady_w)

    def _compute_chunks(self, source: np.ndarray | None = None
                        ) -> Iterator[tuple[slice, np.ndarray]]:
        """Positions in :attr:`compute_nodes` and their rows of ``source`` (the derived
        values when None) as float64, a few op identities at a time."""
        e, c = self.engine, self.compute_nodes
        rows = e.derived.value if source is None else source
        per = max(1, _CHUNK_CELLS // max(1, self.dp * e.n_steps))
        for lo in range(0, len(c), per):
            part = slice(lo, min(lo + per, len(c)))
            yield part, rows[c[part]].astype(np.float64)

    @cached_property
    def pause_blamed(self) -> tuple[Worker, ...]:
        """The workers hit by pauses (most excess first) whose pause time per step exceeds
        their DP peers' beyond the noise (:func:`~stragglers.analysis.healthy.
        blame_beyond_noise`): sporadic stalls that hit every worker alike (uncoordinated GC,
        a loaded machine) blame nobody. With one DP rank every worker hit."""
        pz = self.pauses
        if self.dp < 2 or self.engine.n_steps < 2 or pz.count == 0:
            return pz.workers
        c = pz.nodes
        vc = self.engine.derived.value[c].astype(np.float64)
        excess = np.where(pz.pause, vc - pz.typical[:, :, None], 0.0)
        per_step = sum_by(excess, self.engine.table.node_stage[c], self.pp)
        out = blame_beyond_noise(per_step).T  # (dp, pp)
        return tuple(w for w in pz.workers if out[w.dp_rank, w.stage])

    @cached_property
    def pause_whatif(self) -> Characterisation | None:
        """M of the pauses: rem cuts them back to their worker's typical time; add puts only
        them (their original values) into the ideal timeline. None without pauses."""
        pz = self.pauses
        if pz.count == 0:
            return None
        c = pz.nodes
        vc = self.engine.derived.value[c].astype(np.float64)
        rem = self.values64()
        rem[c] = np.where(pz.pause, pz.typical[:, :, None], vc)
        add = self.ideal_values()
        add[c] = np.where(pz.pause, vc, add[c])
        return self.with_values("M_pause", rem, add, pz.workers)

    @cached_property
    def gc_seconds(self) -> np.ndarray | None:
        """Seconds of garbage collection recorded inside each op (n_nodes, dp, n_steps), when
        the trace carries them (the probes' GC callbacks), else None."""
        value = getattr(self.engine.table, "gc_seconds", None)
        return None if value is None else np.asarray(value, dtype=np.float64)
