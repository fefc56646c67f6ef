"""``last_stage``: the last pipeline stage is heavier than the others (the loss layer,
paper §5.2) on every DP rank."""

from __future__ import annotations

import numpy as np

from stragglers.analysis.metrics import Characterisation
from stragglers.analysis.verdict.base import Cause, Finding, not_applicable, portion
from stragglers.analysis.verdict.context import VerdictContext


def rebalanced_last_stage(ctx: VerdictContext) -> np.ndarray:
    """Values with the last stage's compute rebalanced: each compute op type (forward,
    backward) of the last stage scaled so that its mean over the stage's ops, DP ranks and
    steps is that op type's ideal value, every op's own variation (a long microbatch, a
    slow step) kept. This removes the stage's heaviness, and only that: M_S, which sets the
    stage's ops to their ideal values, removes their sequence-length and other variation
    too, and so takes for the stage's share what other causes do on it."""
    t, e = ctx.engine.table, ctx.engine
    value = ctx.values64()
    c = ctx.compute_nodes
    last = c[t.node_stage[c] == ctx.pp - 1]
    for code in np.unique(t.node_optype[last]):
        nodes = last[t.node_optype[last] == code]
        mean = float(value[nodes].mean())
        if mean > 0:
            value[nodes] *= float(e.ideal_value[nodes].mean()) / mean
    return value


class LastStageHypothesis:
    """The last stage's compute per step — on *every* DP rank, i.e. the smallest over DP
    ranks, so that one slow worker on the last stage is not mistaken for the stage — is at
    least ``last_stage_ratio`` times the median of the other stages'. Share: M_last, the
    share removed when the stage's compute is rebalanced (:func:`rebalanced_last_stage`);
    add: M_S's (only the stage's ops original). Blamed: every worker of the last stage."""

    cause = Cause.LAST_STAGE

    def test(self, ctx: VerdictContext) -> Finding:
        pp = ctx.pp
        if pp < 2:
            return not_applicable(self.cause, "the job has one pipeline stage")
        wc = ctx.worker_compute  # (dp, pp)
        others = float(np.median(np.median(wc[:, :-1], axis=0)))
        ratio = ctx.last_stage_ratio
        median_ratio = float(np.median(wc[:, -1])) / others if others > 0 else 0.0
        gates = {"last_stage_compute_ratio": ratio,
                 "last_stage_compute_ratio_median": median_ratio,
                 "threshold": ctx.config.last_stage_ratio}
        m = ctx.metrics.m_s
        if ratio < ctx.config.last_stage_ratio:
            return not_applicable(
                self.cause, f"the last stage computes {ratio:.2f}x the other stages on its "
                f"lightest DP rank (needs {ctx.config.last_stage_ratio:.2f}x)", gates, m)
        rebalanced = ctx.with_values("M_last", rebalanced_last_stage(ctx), workers=m.workers)
        m_last = Characterisation(m.nodelay, m.ideal, rebalanced.rem_time, m.add_time,
                                  m.workers)
        return Finding(
            cause=self.cause, applicable=True, m=m_last, workers=m.workers, gates=gates,
            evidence=f"the last stage computes {ratio:.2f}x as long per step as the others "
                     f"(on every DP rank); rebalancing it removes {portion(m_last.share)} of the "
                     f"slowdown (rem {m_last.rem:.2f}, add {m.add:.2f}; M_S: rem {m.rem:.2f})")
