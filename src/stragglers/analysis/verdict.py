"""Root-cause verdict from the what-if metrics (paper §5).

Each hypothesis names a set of ops and is tested by what-ifs (Eq. 5): ``rem`` — the share
of the slowdown that disappears when those ops take their ideal time in the no-delay
timeline — and ``add`` — the share that those ops alone cause when put into the ideal
timeline. A hypothesis's *share* is the larger of the two, so that two causes that each
hide the other (a slow worker and a heavy last stage) are both found. Hypotheses, in
order of specificity:

1. ``communication``: all communication ops (M_comm);
2. ``gc``: all gc ops (M_gc): uncoordinated GC pauses; or, when GC is not recorded as
   its own op, pauses inside compute ops (M_pause: compute ops longer than 1.5x their
   typical value cut back), provided they hit several workers at random (no worker holds
   more than half of them) and forward and backward of a microbatch do not move together;
3. ``worker``: the individual suspects: workers whose exact S_w − 1 is at least
   ``SUSPECT`` · (S − 1) and who stand out from their stage's peers (at most a quarter of
   the job);
4. ``sequence_length``: every microbatch of a worker-step made equally long (M_seq),
   provided forward and backward times of the same microbatch correlate within each
   worker-step (so a slow worker does not count) and forward times spread;
5. ``last_stage``: the last stage (M_S), when its compute per step is at least
   ``LAST_STAGE_RATIO`` times the other stages' (the loss layer).

The first hypothesis whose share reaches ``EXPLAIN`` is the cause; the others whose share
reaches ``CONTRIBUTE`` are listed as contributing. Below the slowdown threshold (default
1.1) the verdict is ``none``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stragglers.analysis.metrics import Characterisation, Metrics

DEFAULT_THRESHOLD = 1.1
EXPLAIN = 0.5
CONTRIBUTE = 0.2
SUSPECT = 0.25
LAST_STAGE_RATIO = 1.05
SEQ_CORRELATION = 0.5
SEQ_SPREAD = 0.05
#: Pauses are "uncoordinated" when no worker holds more than this share of them.
PAUSE_TOP_SHARE = 0.5

CAUSES = ("worker", "last_stage", "sequence_length", "gc", "communication", "none")


@dataclass
class Verdict:
    cause: str
    workers: list[tuple[int, int]]
    confidence: float
    evidence: list[str]
    contributing: list[dict] = field(default_factory=list)
    signals: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"cause": self.cause, "workers": [f"{d},{s}" for d, s in self.workers],
                "confidence": round(float(self.confidence), 4), "evidence": self.evidence,
                "contributing": self.contributing, "signals": self.signals}


def suspect_workers(metrics: Metrics) -> list[tuple[int, int]]:
    """Workers that are slow on their own, worst first: a large share of the job's
    slowdown, and standing out from the median of their stage (of the whole job when
    dp = 1), so that a uniformly heavy stage does not make every worker a suspect."""
    sw = metrics.worker_slowdown
    excess = metrics.slowdown - 1.0
    if excess <= 0:
        return []
    dp, pp = sw.shape
    if dp == 1:
        ref = np.full_like(sw, np.median(sw))
    elif dp == 2:
        ref = sw[::-1]  # the other DP rank of the stage
    else:
        ref = np.median(sw, axis=0, keepdims=True)
    big = sw - 1.0 >= SUSPECT * excess
    stands_out = sw - ref >= 0.5 * (sw - 1.0)
    flat = np.where(big & stands_out, sw, -np.inf).ravel()
    order = np.argsort(-flat, kind="stable")
    return [(int(i // pp), int(i % pp)) for i in order if np.isfinite(flat[i])]


def comm_workers(metrics: Metrics, limit: int = 8) -> list[tuple[int, int]]:
    """Workers whose communication ops run longest above their ideal values, worst first
    (those with at least half the worst worker's excess)."""
    ex = metrics.comm_excess
    if ex.max() <= 0:
        return []
    pp = ex.shape[1]
    order = np.argsort(-ex.ravel(), kind="stable")
    keep = [i for i in order[:limit] if ex.ravel()[i] >= 0.5 * ex.max()]
    return [(int(i // pp), int(i % pp)) for i in keep]


def _share(m: Characterisation | None) -> float:
    return 0.0 if m is None else max(m.rem, m.add)


def _names(workers: list[tuple[int, int]], limit: int = 8) -> str:
    text = ", ".join(f"{d},{s}" for d, s in workers[:limit])
    return text + (f" (+{len(workers) - limit} more)" if len(workers) > limit else "")


def decide(metrics: Metrics, m_suspects: Characterisation | None,
           suspects: list[tuple[int, int]], threshold: float = DEFAULT_THRESHOLD) -> Verdict:
    """Pick the root cause; ``m_suspects`` characterises ``suspects``."""
    s = metrics.slowdown
    dp, pp = metrics.attr_dp.shape[0], metrics.attr_stage.shape[0]
    fb = metrics.fb
    others = np.delete(metrics.stage_compute, pp - 1) if pp > 1 else metrics.stage_compute
    last_ratio = float(metrics.stage_compute[-1] / np.median(others)) if pp > 1 else 1.0
    corr, spread = fb["correlation_within"], fb["forward_spread_within"]
    signals = {
        "slowdown": s, "m_w": metrics.m_w.rem, "m_s": metrics.m_s.rem,
        "m_s_add": metrics.m_s.add, "m_comm": metrics.m_comm.rem,
        "m_comm_add": metrics.m_comm.add, "m_gc": metrics.m_gc.rem,
        "m_gc_add": metrics.m_gc.add,
        "m_seq": metrics.m_seq.rem, "m_pause": metrics.m_pause.rem,
        "pauses": metrics.pauses,
        "m_suspects": None if m_suspects is None else m_suspects.rem,
        "m_suspects_add": None if m_suspects is None else m_suspects.add,
        "last_stage_compute_ratio": last_ratio,
        "fb_correlation": fb["correlation"], "fb_correlation_within": corr,
        "forward_spread_within": spread,
    }
    if s < threshold:
        conf = 1.0 - max(0.0, (s - 1.0) / (threshold - 1.0))
        return Verdict("none", [], conf, [
            f"slowdown S = {s:.3f} is below the threshold {threshold:.2f}: no straggler "
            f"problem worth acting on ({100 * (1 - 1 / max(s, 1e-12)):.1f}% of GPU time)"],
            signals=signals)
    ev = [f"slowdown S = {s:.3f} ({100 * metrics.waste:.1f}% of GPU time wasted)"]
    cands: list[tuple[str, float, list[tuple[int, int]], str]] = []
    mc, mg = metrics.m_comm, metrics.m_gc
    cands.append(("communication", _share(mc), comm_workers(metrics),
                  f"communication ops explain {_share(mc):.0%} of the slowdown (M_comm: "
                  f"rem {mc.rem:.2f}, add {mc.add:.2f})"))
    cands.append(("gc", _share(mg), [],
                  f"gc pauses explain {_share(mg):.0%} of the slowdown (M_gc: rem "
                  f"{mg.rem:.2f}, add {mg.add:.2f}): GC is not coordinated across workers"))
    pz = metrics.pauses
    uncorrelated = corr is None or corr < SEQ_CORRELATION
    if pz["workers_hit"] >= 2 and pz["top_worker_share"] <= PAUSE_TOP_SHARE and uncorrelated:
        mp = metrics.m_pause
        cands.append(("gc", mp.rem, [],
                      f"{pz['long_compute_ops']} compute ops on {pz['workers_hit']} workers "
                      f"({pz['worker_step_share']:.0%} of worker-steps) run over "
                      "1.5x their typical time, at random and with no matching backward: "
                      f"uncoordinated pauses (GC inside compute); cutting them back removes "
                      f"{mp.rem:.0%} of the slowdown (M_pause)"))
    structural_last = pp > 1 and last_ratio >= LAST_STAGE_RATIO
    individual = [w for w in suspects if not (dp == 1 and structural_last and w[1] == pp - 1)]
    if individual and m_suspects is not None and len(individual) <= max(1, dp * pp // 4):
        ms = m_suspects
        cands.append(("worker", _share(ms), individual,
                      f"{len(individual)} worker(s) {_names(individual)} stand out (exact S_w "
                      f"up to {metrics.worker_slowdown.max():.3f}) and explain "
                      f"{_share(ms):.0%} of the slowdown (rem {ms.rem:.2f}, add {ms.add:.2f}; "
                      f"M_W of the top 3% = {metrics.m_w.rem:.2f})"))
    elif not (structural_last and all(w[1] == pp - 1 for w in metrics.m_w.workers)):
        # No worker stands out from its peers: the paper's M_W of the top 3% (rem only:
        # adding one worker of a uniformly slow stage alone would look like the stage).
        mw = metrics.m_w
        cands.append(("worker", mw.rem, mw.workers,
                      f"the top 3% of workers by score, {_names(mw.workers)}, explain "
                      f"{mw.rem:.0%} of the slowdown (M_W)"))
    seq = corr is not None and spread is not None and corr >= SEQ_CORRELATION \
        and spread >= SEQ_SPREAD
    if seq:
        mq = metrics.m_seq
        cands.append(("sequence_length", mq.rem, [],
                      f"forward and backward times of the same microbatch correlate (r = "
                      f"{corr:.2f} within worker-steps) and forward times spread by "
                      f"{spread:.0%}: microbatches of different sequence lengths; equal "
                      f"microbatches remove {mq.rem:.0%} of the slowdown (M_seq)"))
    if structural_last:
        m = metrics.m_s
        cands.append(("last_stage", _share(m), [(d, pp - 1) for d in range(dp)],
                      f"the last stage computes {last_ratio:.2f}x as long per step as the "
                      f"others and explains {_share(m):.0%} of the slowdown (M_S: rem "
                      f"{m.rem:.2f}, add {m.add:.2f})"))
    chosen = next((c for c in cands if c[1] >= EXPLAIN), None)
    weak = chosen is None
    if chosen is None:
        chosen = max(cands, key=lambda c: c[1])
    cause, share, workers, text = chosen
    ev.append(text)
    contributing = []
    for c in cands:
        if c[0] != cause and c[1] >= CONTRIBUTE:
            ev.append("also: " + c[3])
            contributing.append({"cause": c[0], "share": round(c[1], 4),
                                 "workers": [f"{d},{x}" for d, x in c[2]]})
    if weak:
        ev.append(f"no hypothesis explains {EXPLAIN:.0%} of the slowdown: weak verdict")
    return Verdict(cause, workers, max(0.0, min(1.0, share)), ev, contributing, signals)
