"""``sequence_length``: microbatches of different sequence lengths (paper §5.3)."""

from __future__ import annotations

import numpy as np

from stragglers.analysis.verdict.base import Cause, Finding, not_applicable, portion
from stragglers.analysis.verdict.context import VerdictContext

#: Standard errors by which a worker's median speed must differ from the stage's mean for
#: equal microbatches to keep it (a persistent worker speed, not sequence lengths).
SPEED_SE = 3.0


def even_microbatches(ctx: VerdictContext) -> np.ndarray:
    """Values with every compute op replaced by the step's mean over the microbatches and DP
    ranks of its stage, direction and model chunk, times its worker's own speed: what if all
    sequences (microbatches) had the same length. Differences between stages and steps stay,
    and so does a worker that is slower (or faster) at *every* step: equal sequences do not
    make a slow GPU fast. A worker's speed is the median over steps of its compute in a step
    over the stage's mean compute in that step, kept when it differs from 1 by at least
    ``SPEED_SE`` standard errors of that median (1.2533 x the ratios' robust scale / sqrt
    steps), else 1: random sequence lengths put a worker above the mean in some steps and
    below in others, so its median ratio stays within noise of 1."""
    t = ctx.engine.table
    value = ctx.values64()
    c = ctx.compute_nodes
    stages = t.node_stage[c]
    speed = {}
    for st in np.unique(stages):
        work = value[c[stages == st]].sum(axis=0)  # (dp, steps): the worker's compute
        mean = work.mean(axis=0, keepdims=True)
        ratio = np.divide(work, mean, out=np.ones_like(work), where=mean > 0)
        med = np.median(ratio, axis=1)
        scale = 1.4826 * np.median(np.abs(ratio - med[:, None]), axis=1)
        se = 1.2533 * scale / np.sqrt(ratio.shape[1])
        speed[int(st)] = np.where(np.abs(med - 1.0) >= SPEED_SE * se, med, 1.0)
    keys = stages * 1_000_000 + t.node_optype[c] * 1000 + t.node_mc[c]
    for key in np.unique(keys):
        nodes = c[keys == key]
        f = speed[int(key // 1_000_000)]
        value[nodes] = value[nodes].mean(axis=(0, 1), keepdims=True) * f[None, :, None]
    return value


class SequenceLengthHypothesis:
    """Forward and backward compute of the same microbatch correlate within worker-steps (at
    least ``seq_correlation``, on log times pooled over every stage: a long sequence is long
    in both directions on every stage, unlike a pause or a slow worker) and forward times
    spread (at least ``seq_spread``). Share: M_seq, the share removed when every microbatch
    of a step is made equally long, each worker keeping its own speed (rem only)."""

    cause = Cause.SEQUENCE_LENGTH

    def test(self, ctx: VerdictContext) -> Finding:
        fb = ctx.fb_signal
        corr, spread = fb["log_correlation_within"], fb["forward_spread_within"]
        cfg = ctx.config
        gates = {"fb_correlation": fb["correlation"],
                 "fb_correlation_within": fb["correlation_within"],
                 "fb_log_correlation_within": corr, "forward_spread_within": spread,
                 "stage": fb["stage"]}
        if corr is None or spread is None:
            return not_applicable(self.cause, "too few forward/backward pairs to correlate",
                                  gates)
        if corr < cfg.seq_correlation or spread < cfg.seq_spread:
            return not_applicable(
                self.cause, f"forward/backward correlation {corr:.2f} (needs "
                f"{cfg.seq_correlation:.2f}) and forward spread {spread:.0%} (needs "
                f"{cfg.seq_spread:.0%}) within worker-steps", gates)
        m = ctx.with_values("M_seq", even_microbatches(ctx))
        return Finding(
            cause=self.cause, applicable=True, m=m, gates=gates,
            evidence=f"forward and backward times of the same microbatch correlate (r = "
                     f"{corr:.2f} on log times within worker-steps) and forward times spread by "
                     f"{spread:.0%}: microbatches of different sequence lengths; equal "
                     f"microbatches remove {portion(m.share)} of the slowdown (M_seq)")
