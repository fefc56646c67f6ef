"""Detection benchmark: Falcon Table 4/5 style tables on the labelled corpus, plus a check of the
BOCD pruning against the exact posterior.

    python bench/detect_eval.py [--seed 0] [--pruning]
    python bench/detect_eval.py --cost [--method robust,bocd_verify] [--repeat 5]
                                [--real-dir ../shared/real/megatron-iter]

The tables are the same as ``stragglers detect-eval --seed N``.  ``--pruning`` also runs the
detector with and without run-length pruning on every 10th series (the 12 shortest of them for
the exact run, which is O(t) per point) and reports the dropped posterior mass and whether the
alarms agree.  ``--cost`` only measures the streaming cost of the ``--method`` detectors
(default: ``robust``, the default of ``watch``, and ``bocd_verify``) instead: CPU time of
this process (``time.process_time``, not the wall clock, so waiting for a core on a loaded
machine is not counted) per point, feeding every 4th series of the synthetic corpus and of the
semi-real corpus one point at a time, median and spread of ``--repeat`` runs, with the load
average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from stragglers.cli import main as cli_main
from stragglers.evaluation.bocd import BOCDVerifyDetector, make_detector, run_detector
from stragglers.evaluation.corpus import generate_corpus


def pruning_check(seed: int) -> int:
    sample = generate_corpus(seed)[::10]
    dropped = points = 0.0
    for s in sample:
        det = BOCDVerifyDetector()
        run_detector(det, s.values)
        assert det.bocd is not None
        dropped += det.bocd.dropped_mass
        points += s.values.size
    print(f"pruning: {len(sample)} series, {int(points)} points, dropped posterior mass per "
          f"update {dropped / points:.2e}")
    short = sorted(sample, key=lambda s: s.values.size)[:12]
    same = sum(
        run_detector(BOCDVerifyDetector(), s.values)
        == run_detector(BOCDVerifyDetector(max_runs=None, prune_below=0.0), s.values)
        for s in short
    )
    print(f"pruning: alarms identical to the exact posterior on {same}/{len(short)} series")
    return 0 if same == len(short) else 1


def cpu_cost(seed: int, repeat: int, real_dir: str | None, methods: list[str]) -> int:
    from stragglers.evaluation.realdata import load_runs, semi_real_corpus

    families = {"synthetic": generate_corpus(seed)[::4]}
    if real_dir is not None:
        families["semi-real"] = semi_real_corpus(load_runs(real_dir), seed=seed)[::4]
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print("| method | family | series | points | CPU us/point (median) | min | max | runs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for method in methods:
        for fam, corpus in families.items():
            points = sum(s.values.size for s in corpus)
            runs = []
            for _ in range(repeat):
                t0 = time.process_time()
                for s in corpus:
                    upd = make_detector(method).update
                    for x in s.values.tolist():
                        upd(x)
                runs.append(1e6 * (time.process_time() - t0) / points)
            print(f"| {method} | {fam} | {len(corpus)} | {points:,} | "
                  f"{statistics.median(runs):.1f} | {min(runs):.1f} | {max(runs):.1f} | "
                  f"{repeat} |")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pruning", action="store_true", help="also check the BOCD pruning")
    ap.add_argument("--cost", action="store_true",
                    help="only measure the detectors' CPU time per point (see the docstring)")
    ap.add_argument("--method", default="robust,bocd_verify",
                    help="detectors of --cost, comma-separated (default robust,bocd_verify)")
    ap.add_argument("--repeat", type=int, default=5, help="runs of --cost (default 5)")
    ap.add_argument("--real-dir", default=None,
                    help="Megatron iteration-time runs, for the semi-real family of --cost")
    args = ap.parse_args(argv)
    if args.cost:
        return cpu_cost(args.seed, args.repeat, args.real_dir, args.method.split(","))
    rc = cli_main(["detect-eval", "--seed", str(args.seed)])
    if args.pruning:
        rc = rc or pruning_check(args.seed)
    return rc


if __name__ == "__main__":
    sys.exit(main())
