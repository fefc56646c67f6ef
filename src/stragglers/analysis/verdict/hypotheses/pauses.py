"""``gc`` and ``pauses``: sporadic stalls inside compute, with or without evidence that they
are garbage collection (paper §5.4)."""

from __future__ import annotations

import numpy as np

from stragglers.analysis.metrics import Characterisation
from stragglers.analysis.verdict.base import Cause, Finding, not_applicable, portion
from stragglers.analysis.verdict.context import VerdictContext
from stragglers.analysis.workers import names
from stragglers.trace import schema


def gc_coverage(ctx: VerdictContext) -> float | None:
    """Share of the pauses' excess seconds that recorded GC time (inside the ops) covers;
    None when the trace records no GC time."""
    gc_s = ctx.gc_seconds
    pz = ctx.pauses
    if gc_s is None or pz.count == 0:
        return None
    c = pz.nodes
    vc = ctx.engine.derived.value[c].astype(np.float64)
    excess = np.where(pz.pause, vc - pz.typical[:, :, None], 0.0)
    covered = np.minimum(np.where(pz.pause, gc_s[c], 0.0), excess)
    total = float(excess.sum())
    return float(covered.sum()) / total if total > 0 else None


def _pause_sentence(ctx: VerdictContext, m: Characterisation) -> str:
    pz = ctx.pauses
    alike = "" if ctx.pause_blamed or not pz.workers else (
        "; on no worker more than on its peers beyond the noise")
    return (f"{pz.count} compute ops on {len(pz.workers)} worker(s) "
            f"({names(pz.workers, 6)}{alike}; "
            f"{pz.worker_step_share:.0%} of worker-steps) take over "
            f"{ctx.config.pause_factor:g}x their own worker's usual time, sporadically and "
            f"without their forward/backward partner; cutting them back removes "
            f"{portion(m.rem)} of the slowdown, alone they cause {portion(m.add)} (M_pause)")


class GcHypothesis:
    """Garbage collection, when it is *recorded*: gc ops (the probes' planned-GC spans or a
    framework's GC op) whose share is M_gc, or pauses inside compute ops that recorded GC time
    (GC callbacks) covers for at least ``gc_evidence`` of their excess. Without such evidence
    long ops are ``pauses``, never ``gc``."""

    cause = Cause.GC

    def test(self, ctx: VerdictContext) -> Finding:
        gc_nodes = ctx.engine.table.node_optype == schema.OPTYPE_CODE[schema.GC]
        coverage = gc_coverage(ctx)
        gates = {"gc_ops": bool(gc_nodes.any()), "gc_time_recorded": ctx.gc_seconds is not None,
                 "gc_coverage_of_pauses": coverage}
        m_ops = ctx.characterise("M_gc", nodes=gc_nodes) if gc_nodes.any() else None
        m_pause = ctx.pause_whatif
        pause_is_gc = coverage is not None and coverage >= ctx.config.gc_evidence
        best = m_ops
        text = ""
        if m_ops is not None:
            text = (f"gc ops explain {portion(m_ops.share)} of the slowdown (M_gc: rem "
                    f"{m_ops.rem:.2f}, add {m_ops.add:.2f}): GC is not coordinated across "
                    "workers")
        if pause_is_gc and m_pause is not None and (best is None or m_pause.share > best.share):
            best = m_pause
            text = (_pause_sentence(ctx, m_pause) + f"; recorded GC time covers "
                    f"{coverage:.0%} of their excess: garbage collection")
        if best is None:
            return not_applicable(self.cause, "no garbage collection is recorded (no gc ops, "
                                  "no GC time inside ops)", gates)
        workers = ctx.pause_blamed if best is m_pause else ()
        return Finding(cause=self.cause, applicable=True, m=best, workers=workers,
                       gates=gates, evidence=text)


class PausesHypothesis:
    """Uncoordinated stalls that are *not* evidenced as GC: unrecorded GC, OS jitter, CPU
    contention, data loading. A compute op is a pause when it is an outlier within its own
    worker (``pause_factor`` times that worker's median for the op), its forward/backward
    partner is not long too, and its worker's long ops are sporadic (at most
    ``pause_max_fraction``). Share: M_pause. Blamed: the workers hit whose pause time per
    step stands out from their DP peers' beyond the noise, most excess first
    (:attr:`VerdictContext.pause_blamed`)."""

    cause = Cause.PAUSES

    def test(self, ctx: VerdictContext) -> Finding:
        pz = ctx.pauses
        gates = pz.to_dict()
        if ctx.engine.n_steps < 3:
            return not_applicable(self.cause, "fewer than 3 steps: a worker's usual time per "
                                  "op cannot be told from its pauses", gates)
        m = ctx.pause_whatif
        if m is None:
            return not_applicable(self.cause, "no compute op is a sporadic outlier within its "
                                  "own worker", gates)
        coverage = gc_coverage(ctx)
        if coverage is not None and coverage >= ctx.config.gc_evidence:
            return not_applicable(self.cause, f"recorded GC time covers {coverage:.0%} of the "
                                  "pauses: they are garbage collection", gates, m)
        return Finding(cause=self.cause, applicable=True, m=m, workers=ctx.pause_blamed,
                       gates=gates, evidence=_pause_sentence(ctx, m)
                       + ("; no GC is recorded inside them" if coverage is None else
                          f"; recorded GC time covers only {coverage:.0%} of them"))
