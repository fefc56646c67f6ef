"""``last_stage``: the last pipeline stage is heavier than the others (the loss layer,
paper §5.2) on every DP rank."""

from __future__ import annotations

import numpy as np

from stragglers.analysis.verdict.base import Cause, Finding, not_applicable, portion
from stragglers.analysis.verdict.context import VerdictContext


class LastStageHypothesis:
    """The last stage's compute per step — on *every* DP rank, i.e. the smallest over DP
    ranks, so that one slow worker on the last stage is not mistaken for the stage — is at
    least ``last_stage_ratio`` times the median of the other stages'. Share: M_S (its ops at
    ideal / only its ops original). Blamed: every worker of the last stage."""

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
        return Finding(
            cause=self.cause, applicable=True, m=m, workers=m.workers, gates=gates,
            evidence=f"the last stage computes {ratio:.2f}x as long per step as the others "
                     f"(on every DP rank) and explains {portion(m.share)} of the slowdown (M_S: "
                     f"rem {m.rem:.2f}, add {m.add:.2f})")
