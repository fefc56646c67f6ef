"""``communication``: slow transfers (links, NICs, switches) — every communication op."""

from __future__ import annotations

import numpy as np

from stragglers.analysis.metrics import node_attribution_keys
from stragglers.analysis.verdict.base import Cause, Finding, not_applicable, portion
from stragglers.analysis.verdict.context import VerdictContext
from stragglers.analysis.workers import Worker, names
from stragglers.trace import schema


class CommunicationHypothesis:
    """All communication ops (P2P, DP collectives, layernorm/embedding all-reduce, clip):
    their share is M_comm. Transfer durations exclude the time spent waiting for peers
    (whatif-model.md §3), so a slow worker does not show here. Blamed: the workers whose
    communication runs longest above its ideal (at least half the worst one's excess) and,
    with DP peers, whose communication time per step exceeds its peers' on the same stage
    beyond the step-to-step noise (:attr:`VerdictContext.comm_beyond_noise`): communication
    that is slow on every worker alike (a loaded machine, a slow fabric) blames nobody."""

    cause = Cause.COMMUNICATION

    def test(self, ctx: VerdictContext) -> Finding:
        keys = node_attribution_keys(ctx.engine)
        comm = np.isin(keys, list(schema.COMM_ATTRIBUTION_KEYS))
        if not comm.any():
            return not_applicable(self.cause, "the trace has no communication ops")
        m = ctx.characterise("M_comm", nodes=comm)
        workers = self._workers(ctx)
        return Finding(
            cause=self.cause, applicable=True, m=m, workers=workers,
            gates={"comm_excess_max_s": float(ctx.comm_excess.max())},
            evidence=f"communication ops explain {portion(m.share)} of the slowdown (M_comm: rem "
                     f"{m.rem:.2f}, add {m.add:.2f})"
                     + (f"; longest above ideal on {names(workers)}" if workers else
                        "; on every worker alike (no worker's communication stands out from "
                        "its peers' beyond the noise)"))

    @staticmethod
    def _workers(ctx: VerdictContext, limit: int = 8) -> tuple[Worker, ...]:
        ex = ctx.comm_excess
        if ex.max() <= 0:
            return ()
        pp = ex.shape[1]
        flat = ex.ravel()
        order = np.argsort(-flat, kind="stable")[:limit]
        out = ctx.comm_beyond_noise.ravel()
        return tuple(Worker(int(i) // pp, int(i) % pp) for i in order
                     if flat[i] >= 0.5 * flat.max() and out[i])
