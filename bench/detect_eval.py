"""Detection benchmark: Falcon Table 4/5 style tables on the labelled corpus, plus a check of the
BOCD pruning against the exact posterior.

    python bench/detect_eval.py [--seed 0] [--pruning]

The tables are the same as ``stragglers detect-eval --seed N``.  ``--pruning`` also runs the
detector with and without run-length pruning on every 10th series (the 12 shortest of them for
the exact run, which is O(t) per point) and reports the dropped posterior mass and whether the
alarms agree.
"""

from __future__ import annotations

import argparse
import sys

from stragglers.cli import main as cli_main
from stragglers.detect.bocd import BOCDVerifyDetector, run_detector
from stragglers.detect.corpus import generate_corpus


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pruning", action="store_true", help="also check the BOCD pruning")
    args = ap.parse_args(argv)
    rc = cli_main(["detect-eval", "--seed", str(args.seed)])
    if args.pruning:
        rc = rc or pruning_check(args.seed)
    return rc


if __name__ == "__main__":
    sys.exit(main())
