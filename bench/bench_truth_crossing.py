"""When does the truth of a labelled slowdown reach the threshold, and when is it declared?

For each labelled event of the chosen families and seeds: the robust detector's delay (as the
scorer counts it: the first matching alert's declared iteration less the label's start), the
view that declared it (the alert's note: empty for the main view, ``mean``, ``periods``,
``resumed_slower`` ...), and when the generator's noise-free truth (``level / healthy`` of the
event's first slow rank, or rank 0 where every rank is slow) first reaches ``1 + threshold``:
the median of its latest 16 records, and the mean of its latest 32 (so at least 15 and 31
records in; the span's length where it never does), counted in iterations (in sampled series
those windows span 16-32 records of many iterations each: no bound there).  A delay far
beyond both is the detector's; a delay near them is the label's (a climb labelled from its
first step), which no detector with that threshold can shorten.  Sums per family and kind.

    PYTHONPATH=src python bench/bench_truth_crossing.py --seed 0 --seed 1 --family fabric
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from stragglers.evaluation.detect_eval_jobs import _inside, tolerance, watch_stream
from stragglers.evaluation.jobcorpus import JobSeries, generate_job_corpus

MEDIAN_STEPS = 16  # the truth's level: the median of this many latest steps ...
MEAN_STEPS = 32  # ... and its mean: the mean of this many


@dataclass(frozen=True)
class Row:
    family: str
    kind: str
    delay: int | None  # None: not found
    note: str
    cross: int  # the earlier of the two crossings (iterations after the label's start)


def _first(v: np.ndarray, lead: int, n: int) -> int:
    """The first step (from the span's start) where ``v`` (windows ending at step ``lead``
    on) is true; ``n``, the span's length, where none is."""
    at = np.flatnonzero(v)
    return int(at[0]) + lead if at.size else n


def crossing(ratio: np.ndarray, threshold: float) -> int:
    """Steps after the span's start until the truth ``ratio`` (slowed over healthy, per step
    of the span) holds ``1 + threshold``: the earlier of its 16-step median and its 32-step
    mean reaching it (the span's length where neither does)."""
    n, top = ratio.size, 1.0 + threshold
    med = mean = n
    if n >= MEDIAN_STEPS:
        w = sliding_window_view(ratio, MEDIAN_STEPS)
        med = _first(np.median(w, axis=1) >= top, MEDIAN_STEPS - 1, n)
    if n >= MEAN_STEPS:
        mean = _first(sliding_window_view(ratio, MEAN_STEPS).mean(axis=1) >= top,
                      MEAN_STEPS - 1, n)
    return min(med, mean)


def rows(s: JobSeries, threshold: float) -> list[Row]:
    """One row per labelled (not minor) event of ``s``."""
    alerts = watch_stream(s, "robust").alerts
    tol = tolerance(s.stride)
    ratio_all = s.level / s.healthy
    out = []
    for e in (e for e in s.events if e.kind != "minor"):
        rank = e.ranks[0] if e.ranks else int(s.rank.min())
        m = (s.rank == rank) & (s.iter >= e.start_iter) & (s.iter < e.end_iter)
        hit = [a for a in alerts if _inside(a, e, tol)]
        first = min(hit, key=lambda a: a.declared) if hit else None
        its = s.iter[m]
        k = crossing(ratio_all[m], threshold)  # in records: iterations where sampled
        out.append(Row(family=s.family, kind=e.kind,
                       delay=None if first is None else first.declared - e.start_iter,
                       note=first.note if first is not None else "",
                       cross=int(its[k]) - e.start_iter if k < its.size
                       else e.end_iter - e.start_iter))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, action="append", required=True)
    ap.add_argument("--family", action="append", required=True)
    ap.add_argument("--threshold", type=float, default=0.10)
    a = ap.parse_args()
    by: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for fam in a.family:
        for seed in a.seed:
            for s in generate_job_corpus(seed, families=(fam,)):
                for r in rows(s, a.threshold):
                    by[(r.family, r.kind)].append(r)
    print("| family / kind | events found | delay sum | mean / median | truth crossing mean / "
          "median | delay beyond the crossing (sum) | within 10 of it | declared by |")
    print("|---|---|---|---|---|---|---|---|")
    for (fam, kind), rs in sorted(by.items()):
        found = [r for r in rs if r.delay is not None]
        if not found:
            print(f"| {fam} / {kind} | 0/{len(rs)} | - | - | - | - | - | - |")
            continue
        d = np.array([r.delay for r in found], dtype=float)
        c = np.array([r.cross for r in found], dtype=float)
        notes = Counter(r.note or "main" for r in found)
        print(f"| {fam} / {kind} | {len(found)}/{len(rs)} | {d.sum():.0f} | "
              f"{d.mean():.1f} / {np.median(d):.1f} | {c.mean():.1f} / {np.median(c):.1f} | "
              f"{np.maximum(d - c, 0).sum():.0f} | {np.mean(d <= c + 10):.0%} | "
              f"{', '.join(f'{k} {v}' for k, v in notes.most_common())} |")


if __name__ == "__main__":
    main()
