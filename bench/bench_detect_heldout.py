"""The default detector, per family of the job-record corpus: the tables of the issue-29 rounds.

    python bench/bench_detect_heldout.py --seed 82 --seed 83                  # every family
    python bench/bench_detect_heldout.py --seed 84 --seed 85 --family steal --wrong
    python bench/bench_detect_heldout.py --seed 0 --family pcie --dump out.json

Runs ``robust`` at its defaults (no tuning) through the watcher on every series of the
``--family`` families (default: every family of ``jobcorpus.FAMILIES``) for each ``--seed``,
and prints one row per family — its role (*held out*: in ``jobcorpus.HELD_OUT``, never looked
at while the detector was changed; *built on*: the others), series, accuracy, FPR, events
found and the declared delay (mean / median, iterations) — then the totals, the wall time and
the load average before and after.  ``--wrong`` lists every wrong series (its missed events,
its spurious alerts' iterations, the delays of the events found); ``--dump FILE`` writes the
per-series outcomes as JSON (written atomically) for series-by-series comparisons of two
versions.  The scoring is :mod:`stragglers.evaluation.detect_eval_jobs`'s, as
``stragglers detect-eval --corpus jobs --method robust`` (which prints the same totals, per
family and seed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stragglers.atomic import write_text
from stragglers.evaluation.detect_eval_jobs import (
    JobOutcome,
    Run,
    evaluate_streams,
    summarize_jobs,
)
from stragglers.evaluation.jobcorpus import FAMILIES, HELD_OUT, generate_job_corpus


@dataclass(frozen=True)
class FamilyRow:
    """One family's figures."""

    family: str
    role: str
    series: int
    accuracy: float
    fpr: float
    detected: int
    events: int
    delay_mean: float
    delay_median: float


def family_rows(outcomes: Sequence[JobOutcome], families: Sequence[str]) -> list[FamilyRow]:
    """One row per family of ``families`` that has outcomes, in that order."""
    rows = []
    for f in families:
        out = [o for o in outcomes if o.family == f]
        if not out:
            continue
        sc = summarize_jobs(out)
        delays = [d for o in out for d in o.delays]
        rows.append(FamilyRow(
            family=f, role="held out" if f in HELD_OUT else "built on", series=sc.total,
            accuracy=sc.accuracy, fpr=sc.fpr, detected=sc.detected, events=sc.events,
            delay_mean=sc.mean_delay_iters,
            delay_median=statistics.median(delays) if delays else float("nan")))
    return rows


def table(rows: Sequence[FamilyRow], outcomes: Sequence[JobOutcome]) -> str:
    """The Markdown table and the totals line."""
    out = ["| family | role | series | acc % | FPR % | events found | delay mean / median (it) |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append(f"| {r.family} | {r.role} | {r.series} | {100 * r.accuracy:.1f} | "
                   f"{100 * r.fpr:.1f} | {r.detected}/{r.events} | "
                   f"{r.delay_mean:.1f} / {r.delay_median:g} |")
    sc = summarize_jobs(outcomes)
    delays = [d for o in outcomes for d in o.delays]
    med = statistics.median(delays) if delays else float("nan")
    out.append(f"all: {sc.total} series, {sc.total - sc.correct} wrong "
               f"(accuracy {100 * sc.accuracy:.1f} %), FPR {100 * sc.fpr:.2f} % "
               f"({sc.false_positives}/{sc.negatives}), events {sc.detected}/{sc.events}, "
               f"delay mean {sc.mean_delay_iters:.2f} / median {med:g} (sum {sum(delays)})")
    return "\n".join(out)


def wrong_lines(outcomes: Sequence[JobOutcome]) -> list[str]:
    """One line per wrong series."""
    return [f"wrong: {o.family} seed {o.seed} {o.name}: events {o.detected}/{o.events}, "
            f"{o.spurious} spurious at {list(o.spurious_iters)}, delays {list(o.delays)}"
            for o in outcomes if not o.correct]


def dump(outcomes: Sequence[JobOutcome]) -> str:
    """Per-series outcomes as JSON."""
    return json.dumps([{
        "family": o.family, "seed": o.seed, "name": o.name, "correct": o.correct,
        "detected": o.detected, "events": o.events, "spurious": o.spurious,
        "spurious_iters": list(o.spurious_iters), "delays": list(o.delays)}
        for o in outcomes], indent=0)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, action="append", required=True,
                    help="corpus seed (repeat for several)")
    ap.add_argument("--family", action="append", default=None,
                    help="a family of the corpus (repeat; default: every family)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply the series per scenario (default 1.0)")
    ap.add_argument("--wrong", action="store_true", help="list every wrong series")
    ap.add_argument("--dump", type=Path, default=None, metavar="FILE",
                    help="write the per-series outcomes as JSON")
    a = ap.parse_args(argv)
    known = tuple(FAMILIES) + tuple(f for f in HELD_OUT if f not in FAMILIES)
    families = tuple(a.family) if a.family else known
    unknown = [f for f in families if f not in known]
    if unknown:
        print(f"bench_detect_heldout: --family {unknown[0]!r} is not a family of the corpus "
              f"({', '.join(known)})", file=sys.stderr)
        return 2
    if a.jobs < 1 or not a.scale > 0:
        print("bench_detect_heldout: --jobs must be >= 1 and --scale > 0", file=sys.stderr)
        return 2
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    streams = [s for seed in a.seed
               for s in generate_job_corpus(seed, scale=a.scale, families=families)]
    outcomes = evaluate_streams(streams, [Run("default", "robust")], jobs=a.jobs)["default"]
    print(table(family_rows(outcomes, families), outcomes))
    if a.wrong:
        print("\n".join(wrong_lines(outcomes)))
    if a.dump is not None:
        write_text(a.dump, dump(outcomes))
    print(f"{time.perf_counter() - t0:.0f} s, load average {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
