"""``worker``: individual slow workers (a slow GPU, host or NIC; paper §5.1)."""

from __future__ import annotations

import numpy as np

from stragglers.analysis.verdict.base import Cause, Finding, not_applicable, portion
from stragglers.analysis.verdict.context import VerdictContext
from stragglers.analysis.workers import Worker, names


def suspect_workers(ctx: VerdictContext) -> list[Worker]:
    """Workers that are slow on their own, worst first: exact S_w − 1 at least
    ``suspect_share`` of S − 1, and standing out from their stage's other DP ranks (the other
    rank when dp = 2, the median when dp > 2, the job's median when dp = 1) by at least
    ``stand_out`` of S_w − 1, so that a uniformly heavy stage does not make every worker a
    suspect."""
    cfg = ctx.config
    sw = ctx.metrics.worker_slowdown
    excess = ctx.metrics.slowdown - 1.0
    if excess <= 0:
        return []
    dp, pp = sw.shape
    if dp == 1:
        ref = np.full_like(sw, np.median(sw))
    elif dp == 2:
        ref = sw[::-1]
    else:
        ref = np.median(sw, axis=0, keepdims=True)
    big = sw - 1.0 >= cfg.suspect_share * excess
    stands_out = sw - ref >= cfg.stand_out * (sw - 1.0)
    flat = np.where(big & stands_out, sw, -np.inf).ravel()
    order = np.argsort(-flat, kind="stable")
    return [Worker(int(i) // pp, int(i) % pp) for i in order if np.isfinite(flat[i])]


class WorkerHypothesis:
    """Workers that stand out from their peers by exact S_w (:func:`suspect_workers`), whose
    own work per step exceeds their DP peers' beyond the step-to-step noise (a paired t-test
    over the steps, :attr:`VerdictContext.beyond_noise`), and that are *steadily* slow in
    their own work: a suspect whose excess time above the ideal lies
    mostly (over half) in communication ops is the end of a slow link (see
    ``communication``); one whose excess comes mostly (over ``sporadic_limit``) from sporadic
    pauses is a paused worker, not a slow one (see ``pauses``); with one DP
    rank, a last stage that is structurally heavy is the stage, not a worker; at most
    ``max_suspect_fraction`` of the workers. Share: the suspects' M (rem and add)."""

    cause = Cause.WORKER

    def test(self, ctx: VerdictContext) -> Finding:
        cfg, dp, pp = ctx.config, ctx.dp, ctx.pp
        suspects = suspect_workers(ctx)
        sw = ctx.metrics.worker_slowdown
        paused, structural, linked, noise = [], [], [], []
        steady = []
        for w in suspects:
            if not ctx.beyond_noise[w.dp_rank, w.stage]:
                noise.append(w)
                continue
            own = ctx.worker_excess[w.dp_rank, w.stage]
            sporadic = ctx.pauses.excess[w.dp_rank, w.stage] / own if own > 0 else 0.0
            comm = ctx.comm_excess[w.dp_rank, w.stage] / own if own > 0 else 0.0
            if comm > 0.5:
                linked.append(w)
            elif sporadic > cfg.sporadic_limit:
                paused.append(w)
            elif (dp == 1 and w.stage == pp - 1 and pp > 1
                  and ctx.last_stage_ratio >= cfg.last_stage_ratio):
                structural.append(w)
            else:
                steady.append(w)
        gates = {"suspects": [w.key for w in suspects[:16]],
                 "paused_suspects": [w.key for w in paused[:16]],
                 "structural_last_stage": [w.key for w in structural],
                 "communication_bound": [w.key for w in linked[:16]],
                 "within_noise": [w.key for w in noise[:16]],
                 "max_s_w": float(sw.max()), "method": ctx.metrics.worker_method}
        limit = max(1, int(cfg.max_suspect_fraction * dp * pp))
        if not steady:
            why = "no worker stands out from its peers by S_w"
            if linked:
                why = (f"the workers that stand out ({names(linked)}) lose their time mostly in "
                       "communication (see communication)")
            elif paused:
                why = f"the workers that stand out ({names(paused)}) are slow by sporadic pauses"
            elif structural:
                why = "with one DP rank the slow last stage is the stage, not a worker"
            elif noise:
                why = (f"the workers that stand out ({names(noise)}) are not slower than their "
                       "DP peers beyond the step-to-step noise")
            return not_applicable(self.cause, why, gates)
        if len(steady) > limit:
            return not_applicable(self.cause, f"{len(steady)} workers stand out: too many "
                                  f"(over {limit}) to be individual stragglers", gates)
        m = ctx.characterise("M_suspects", workers=tuple(steady))
        return Finding(
            cause=self.cause, applicable=True, m=m, workers=tuple(steady), gates=gates,
            evidence=f"{len(steady)} worker(s) {names(steady)} stand out (exact S_w up to "
                     f"{float(sw.max()):.3f}) and explain {portion(m.share)} of the slowdown (rem "
                     f"{m.rem:.2f}, add {m.add:.2f}; M_W of the top 3% = "
                     f"{ctx.metrics.m_w.rem:.2f})")
