"""Root-cause verdict from the what-if metrics (paper §5).

Each hypothesis is tested by a what-if: remove the slowness of the ops it blames from
the no-delay timeline and see which share of the slowdown disappears (the ``rem``
characterisation of Eq. 5). The most specific hypothesis that explains at least
``EXPLAIN`` of the slowdown wins:

1. ``communication``: all communication ops at their ideal value (M_comm);
2. ``gc``: all gc ops at their ideal value (M_gc), i.e. uncoordinated GC pauses;
3. ``worker``: the suspect workers (exact S_w − 1 ≥ ``SUSPECT`` · (S − 1), at most a
   quarter of the job), unless they are exactly the last stage;
4. ``last_stage``: the last stage (M_S) when it is also the slowest stage;
5. ``sequence_length``: forward and backward times of the same microbatch correlate
   (within each worker-step, so a slow worker does not count) and forward times spread.

Below the slowdown threshold (default 1.1) the verdict is ``none``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stragglers.analysis.metrics import Characterisation, Metrics

DEFAULT_THRESHOLD = 1.1
#: Share of the slowdown a hypothesis must explain.
EXPLAIN = 0.5
#: A worker is a suspect when its own slowdown is this share of the job's.
SUSPECT = 0.25
#: Sequence-length signal: correlation within worker-steps and spread of forward times.
SEQ_CORRELATION = 0.8
SEQ_SPREAD = 0.05

CAUSES = ("worker", "last_stage", "sequence_length", "gc", "communication", "none")


@dataclass
class Verdict:
    cause: str
    workers: list[tuple[int, int]]
    confidence: float
    evidence: list[str]
    signals: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"cause": self.cause, "workers": [f"{d},{s}" for d, s in self.workers],
                "confidence": round(float(self.confidence), 4), "evidence": self.evidence,
                "signals": self.signals}


def suspect_workers(metrics: Metrics) -> list[tuple[int, int]]:
    """Workers whose own slowdown is a large share of the job's, worst first."""
    sw = metrics.worker_slowdown
    excess = metrics.slowdown - 1.0
    if excess <= 0:
        return []
    flat = sw.ravel()
    order = np.argsort(-flat, kind="stable")
    pp = sw.shape[1]
    return [(int(i // pp), int(i % pp)) for i in order if flat[i] - 1.0 >= SUSPECT * excess]


def decide(metrics: Metrics, m_suspects: Characterisation | None,
           suspects: list[tuple[int, int]], threshold: float = DEFAULT_THRESHOLD) -> Verdict:
    """Pick the root cause; ``m_suspects`` is the characterisation of ``suspects``."""
    s = metrics.slowdown
    dp, pp = metrics.attr_dp.shape[0], metrics.attr_stage.shape[0]
    stage_s = metrics.s_of(metrics.attr_stage)
    fb = metrics.fb
    signals = {
        "slowdown": s, "m_w": metrics.m_w.rem, "m_s": metrics.m_s.rem,
        "m_comm": metrics.m_comm.rem, "m_gc": metrics.m_gc.rem,
        "m_suspects": None if m_suspects is None else m_suspects.rem,
        "fb_correlation": fb["correlation"], "fb_correlation_within": fb["correlation_within"],
        "forward_spread_within": fb["forward_spread_within"],
    }
    if s < threshold:
        conf = 1.0 - max(0.0, (s - 1.0) / (threshold - 1.0))
        return Verdict("none", [], conf, [
            f"slowdown S = {s:.3f} is below the threshold {threshold:.2f}: no straggler "
            f"problem worth acting on ({100 * (1 - 1 / max(s, 1e-12)):.1f}% of GPU time)"],
            signals)
    last_workers = [(d, pp - 1) for d in range(dp)]
    ev: list[str] = [f"slowdown S = {s:.3f} ({100 * metrics.waste:.1f}% of GPU time wasted)"]
    cands: list[tuple[str, float, list[tuple[int, int]], str]] = []
    cands.append(("communication", metrics.m_comm.rem, suspects,
                  f"communication ops at their ideal time remove {metrics.m_comm.rem:.0%} "
                  "of the slowdown (M_comm)"))
    cands.append(("gc", metrics.m_gc.rem, suspects,
                  f"gc ops at their ideal (coordinated) time remove {metrics.m_gc.rem:.0%} "
                  "of the slowdown (M_gc)"))
    only_last = sorted(suspects) == sorted(last_workers)
    if m_suspects is not None and suspects and not only_last \
            and len(suspects) <= max(1, dp * pp // 4):
        cands.append(("worker", m_suspects.rem, suspects,
                      f"fixing {len(suspects)} suspect worker(s) "
                      f"{', '.join(f'{d},{st}' for d, st in suspects[:8])} removes "
                      f"{m_suspects.rem:.0%} of the slowdown (M of the suspects; "
                      f"M_W of the top 3% = {metrics.m_w.rem:.2f})"))
    if int(np.argmax(stage_s)) == pp - 1 and pp > 1:
        cands.append(("last_stage", metrics.m_s.rem, last_workers,
                      f"the last stage at its ideal time removes {metrics.m_s.rem:.0%} of the "
                      f"slowdown (M_S); it is the slowest stage (S_stage = {stage_s[-1]:.3f})"))
    for cause, share, workers, text in cands:
        if share >= EXPLAIN:
            return Verdict(cause, workers, min(1.0, share), [*ev, text], signals)
    corr, spread = fb["correlation_within"], fb["forward_spread_within"]
    if corr is not None and spread is not None and corr >= SEQ_CORRELATION \
            and spread >= SEQ_SPREAD:
        ev.append(f"forward and backward times of the same microbatch correlate "
                  f"(r = {corr:.2f} within worker-steps) and forward times spread by "
                  f"{spread:.0%}: microbatches of different sequence lengths")
        best = max((c[1] for c in cands), default=0.0)
        return Verdict("sequence_length", [], max(0.0, min(1.0, corr * (1 - best))), ev, signals)
    cause, share, workers, text = max(cands, key=lambda c: c[1])
    ev.append(text)
    ev.append(f"no hypothesis explains {EXPLAIN:.0%} of the slowdown: weak verdict")
    return Verdict(cause, workers, max(0.0, min(1.0, share)), ev, signals)
