"""How early can any detector declare a rise made of intermittent long iterations?

An oracle that knows, for each labelled slowdown of the sparse-stall families, the healthy
distribution of the iteration time (the generator's counterfactual healthy series) and the
slowed one (the span's own iterations): Page's CUSUM of the log-likelihood ratio of the two
(binned log time over the healthy median, 0.5 pseudo-counts a bin), started at zero at the
label's start, with the threshold ``log N`` for ``N`` = the negatives' iterations of the
family and seeds (an average run length to a false alarm of at least ``N`` for independent
points: at most about one false alarm in all the negatives).  Both distributions are the
marginal ones (the oracle ignores the order of the points) and are learnt on the very points
it is scored on: an optimistic oracle, so its delay is a floor for the detector's, not a
target.  Beside it, the robust detector's own delay of the same event (``watch_stream``).

    PYTHONPATH=src python bench/bench_stall_bound.py --seed 0 --seed 1 \
        --family lossy_link --family gc_pause --family prefetch
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict

import numpy as np

from stragglers.evaluation.detect_eval_jobs import score_alerts, watch_stream
from stragglers.evaluation.jobcorpus import LEAD_ITERS, JobSeries, generate_job_corpus

BINS = 40  # quantile bins of the pooled healthy and slowed log times


def _times(s: JobSeries) -> np.ndarray:
    """Seconds per iteration of a one-rank series (from the timestamps where no duration)."""
    d = np.asarray(s.duration, dtype=float)
    if np.isnan(d).any():
        ts = np.asarray(s.ts, dtype=float)
        d = np.diff(ts, prepend=ts[0] - (ts[1] - ts[0]))
    return d


def _cusum_first(llr: np.ndarray, h: float) -> int:
    """Index of the first point where Page's sum (from zero) reaches ``h`` (-1: never)."""
    w = 0.0
    for i, v in enumerate(llr):  # one pass, stops at the crossing
        w = max(0.0, w + v)
        if w >= h:
            return i
    return -1


def _top(llr: np.ndarray) -> float:
    """The largest value of Page's sum (from zero) over ``llr``."""
    w = top = 0.0
    for v in llr:
        w = max(0.0, w + v)
        top = max(top, w)
    return top


def oracle(s: JobSeries, lo: int, hi: int, h: float) -> tuple[int, float, float]:
    """(delay, KL per iteration, threshold) of one event over records ``[lo, hi)``: the
    threshold is ``h`` or, where the sum on the series' healthy counterfactual (after the
    warm-up) reaches that, just above its largest value there (no false alarm on it)."""
    x = _times(s)
    xh = x * np.asarray(s.healthy) / np.asarray(s.level)
    ref = float(np.median(xh[LEAD_ITERS:]))
    z, zh = np.log(x / ref), np.log(xh / ref)
    z0, z1 = zh[LEAD_ITERS:], z[lo:hi]
    edges = np.unique(np.quantile(np.concatenate([z0, z1]), np.linspace(0, 1, BINS + 1)))
    edges[0], edges[-1] = -np.inf, np.inf
    p0 = np.histogram(z0, edges)[0] + 0.5
    p1 = np.histogram(z1, edges)[0] + 0.5
    p0, p1 = p0 / p0.sum(), p1 / p1.sum()
    lr = np.log(p1 / p0)
    kl = float((p1 * lr).sum())
    at = np.clip(np.searchsorted(edges, z, side="right") - 1, 0, lr.size - 1)
    llr = lr[at]
    top = _top(lr[np.clip(np.searchsorted(edges, z0, side="right") - 1, 0, lr.size - 1)])
    h = max(h, 1.001 * top)
    return _cusum_first(llr[lo:], h), kl, h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, action="append", required=True)
    ap.add_argument("--family", action="append", required=True)
    ap.add_argument("--no-detector", action="store_true", help="the oracle alone")
    a = ap.parse_args()
    for fam in a.family:
        streams = [s for seed in a.seed for s in generate_job_corpus(seed, families=(fam,))]
        n_neg = sum(s.iter.size for s in streams if not s.positive)
        h = math.log(n_neg)
        rows: dict[str, list[tuple[int, int, float, int]]] = defaultdict(list)
        raised = 0
        for s in streams:
            if not s.positive or s.ranks != 1:
                continue
            res = None if a.no_detector else watch_stream(s, "robust")
            it = np.asarray(s.iter)
            for e in s.events:
                if e.kind == "minor":
                    continue
                lo = int(np.searchsorted(it, e.start_iter))
                hi = int(np.searchsorted(it, e.end_iter))
                d, kl, he = oracle(s, lo, hi, h)
                raised += he > h
                det = -2
                if res is not None:
                    sc = score_alerts([e], res.alerts, stride=s.stride)
                    det = sc.delays[0] if sc.delays else -1
                rows[e.kind].append((d, det, kl, hi - lo))
        print(f"{fam} seeds {a.seed}: threshold log({n_neg}) = {h:.1f}, raised above the"
              f" healthy counterfactual's largest sum for {raised} of"
              f" {sum(len(v) for v in rows.values())} events")
        every = [r for v in rows.values() for r in v]
        for kind, v in sorted(rows.items()) + [("all", every)]:
            od = np.array([r[0] for r in v if r[0] >= 0])
            dd = np.array([r[1] for r in v if r[1] >= 0])
            miss_o = sum(r[0] < 0 for r in v)
            miss_d = sum(r[1] == -1 for r in v)
            kl = np.array([r[2] for r in v])
            span = np.array([r[3] for r in v])
            det = ("" if a.no_detector else
                   f" | detector {np.mean(dd):6.1f} / {np.median(dd):5.0f}"
                   f" ({miss_d} missed)" if dd.size else " | detector -")
            print(f"  {kind:<10} events {len(v):3d} span median {np.median(span):5.0f} | KL/it"
                  f" median {np.median(kl):.3f} | oracle delay mean / median"
                  f" {np.mean(od) if od.size else math.nan:6.1f} /"
                  f" {np.median(od) if od.size else math.nan:5.0f}"
                  f" ({miss_o} never){det};"
                  f" oracle <= 10: {np.mean(od <= 10) if od.size else 0:.0%}")


if __name__ == "__main__":
    main()
