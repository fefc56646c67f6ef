"""``stragglers fleet``: the fleet study (:mod:`stragglers.fleet`) on Dask."""

from __future__ import annotations

import argparse
import json
import sys

from stragglers import options
from stragglers.atomic import check_out_dir

EPILOG = """\
examples:
  stragglers synth --fleet 200 --out fleet/ --seed 1
  stragglers fleet fleet/ --out study/ --workers 2
  stragglers fleet 'runs/*/' --out study/ --scheduler tcp://10.0.0.1:8786 --json
Re-running with the same --out skips the jobs already analysed (rows/ keyed by content
hash). Writes fleet.parquet, report.html, the figures (PNG) and summary.json.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fleet", help="analyse every job of a fleet on Dask: fleet table, figures, report",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Analyse every job folder (meta.yaml + trace.parquet/.jsonl, truth.json "
                    "when synthetic) under INPUTS as one Dask task each, as `stragglers "
                    "analyze --no-exact` would (exact S_w with --exact-sw), and write the "
                    "fleet table and the paper's fleet figures (Figs. 3-7, 11).")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="job folder, folder of job folders, or a glob pattern")
    p.add_argument("--out", required=True, help="output folder (and its rows/ store)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDR",
                       help="Dask scheduler address (tcp://host:port) of a running cluster")
    where.add_argument("--workers", type=options.positive_int, default=2,
                       help="workers of the embedded local cluster (default %(default)s)")
    where.add_argument("--sequential", action="store_true",
                       help="no Dask: analyse the jobs one after the other in this process")
    p.add_argument("--exact-sw", action="store_true",
                   help="exact per-worker S_w (one simulation per worker; slower)")
    p.add_argument("--json", action="store_true",
                   help='print {"jobs", "analysed", "failed", "excluded", "cause_accuracy"}')
    p.add_argument("--no-progress", action="store_true", help="no progress counter on stderr")
    p.set_defaults(func=run_fleet_cmd)


def _progress(done: int, total: int, failed: int) -> None:
    """A counter: rewritten in place on a terminal, a line per tenth of the jobs else."""
    text = f"stragglers fleet: {done}/{total} jobs analysed ({failed} failed)"
    if sys.stderr.isatty():
        sys.stderr.write("\r" + text + ("\n" if done == total else ""))
    elif done == total or done % max(1, total // 10) == 0:
        sys.stderr.write(text + "\n")
    sys.stderr.flush()


def run_fleet_cmd(args: argparse.Namespace) -> int:
    from stragglers.fleet.study import run_study

    check_out_dir(args.out)
    study = run_study(args.inputs, args.out, args.scheduler, args.workers, args.sequential,
                      args.exact_sw, None if args.no_progress else _progress)
    stats, files, run = study.outputs.stats, study.outputs.files, study.run
    if args.json:
        print(json.dumps(stats.summary()))
    else:
        for line in stats.headlines():
            print(line)
        print(f"computed {run.computed} jobs, reused {run.reused} from {study.store} "
              f"({run.wall_s:.1f} s); wrote {', '.join(str(f) for f in files[:1])}, "
              f"report.html and {len(files) - 3} figures in {args.out}")
    return 0
