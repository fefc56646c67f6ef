"""Leave-one-family-out evaluation on the job-record corpus, and the cost per record.

    python bench/bench_detect_jobs.py --seed 0 --jobs 2 [--seed 1] [--scale 1.0]

Prints the LOFO table of :mod:`stragglers.evaluation.detect_eval_jobs` (the tuned method:
``robust`` with its ``ROBUST_GRID``, each family scored under the setting chosen on the other
tuned families, the families of ``jobcorpus.HELD_OUT`` never taking part in a choice;
baselines ``bocd_verify``, ``falcon``, ``bocd``, ``sliding_window`` at their defaults), the
real labelled series (``../shared/real/iter-more`` and
``../shared/real/megatron-iter`` when present, or ``--real-more`` / ``--real-dir``) under the
setting chosen on all synthetic families, then a cost table: per method, fed sequentially in
this process on every ``--every``-th series of the first seed, CPU and wall microseconds per
record (watcher and detector) and the peak Python memory of one series' watcher
(``tracemalloc``, a separate pass).
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from pathlib import Path

from stragglers.detect.watch import Watcher
from stragglers.evaluation.bocd import make_detector
from stragglers.evaluation.detect_eval_jobs import (
    BASELINES,
    default_grid,
    evaluation_text,
    load_real_megatron,
    load_real_more,
    run_evaluation,
)
from stragglers.evaluation.jobcorpus import JobSeries, generate_job_corpus

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("STRAGGLERS_SHARED") or REPO.parent / "shared")


def _feed(series: JobSeries, method: str, params: dict[str, object]) -> tuple[float, float]:
    """CPU and wall seconds of one series fed record by record."""
    w = Watcher(detector_factory=lambda: make_detector(method, **params))
    items = list(series.records())
    c0, t0 = time.process_time(), time.perf_counter()
    for pos, rec in enumerate(items, start=1):
        w.process_items(((pos, rec),))
    w.finish()
    return time.process_time() - c0, time.perf_counter() - t0


def _peak(series: JobSeries, method: str, params: dict[str, object]) -> int:
    """Peak bytes allocated while one series is fed (records built before)."""
    items = list(series.records())
    tracemalloc.start()
    w = Watcher(detector_factory=lambda: make_detector(method, **params))
    for pos, rec in enumerate(items, start=1):
        w.process_items(((pos, rec),))
    w.finish()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, action="append", default=None,
                    help="corpus seed (repeat for several; default 0)")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--real-more", default=None, help="default ../shared/real/iter-more")
    ap.add_argument("--real-dir", default=None, help="default ../shared/real/megatron-iter")
    ap.add_argument("--every", type=int, default=10, help="cost: every n-th series")
    args = ap.parse_args()
    seeds = args.seed or [0]
    method, grid = default_grid()
    real = []
    more = Path(args.real_more) if args.real_more else SHARED / "real" / "iter-more"
    meg = Path(args.real_dir) if args.real_dir else SHARED / "real" / "megatron-iter"
    if more.is_dir():
        real += load_real_more(more)
    if meg.is_dir():
        real += load_real_megatron(meg)
    ev = run_evaluation(seeds, args.scale, [method, *BASELINES], grid=grid, real=real,
                        jobs=args.jobs)
    print(evaluation_text(ev))

    chosen = dict(grid)[ev.plain] if ev.plain is not None else {}
    runs = [(f"{method}[{ev.plain}]", method, chosen)] + [(b, b, {}) for b in BASELINES]
    sample = generate_job_corpus(seeds[0], args.scale)[::max(1, args.every)]
    records = sum(s.iter.size for s in sample)
    print(f"Cost per record, sequential in this process, {len(sample)} series "
          f"({records:,} records; every {args.every}th of seed {seeds[0]})")
    print("| method | CPU us / record | wall us / record | peak memory of one series' "
          "watcher (KiB, max) |")
    print("|---|---|---|---|")
    for label, m, params in runs:
        cpu = wall = 0.0
        for s in sample:
            c, w = _feed(s, m, params)
            cpu += c
            wall += w
        peak = max(_peak(s, m, params) for s in sample[::3])
        print(f"| {label} | {1e6 * cpu / records:.1f} | {1e6 * wall / records:.1f} | "
              f"{peak / 1024:.0f} |")


if __name__ == "__main__":
    main()
