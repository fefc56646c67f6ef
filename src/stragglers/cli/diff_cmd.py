"""``stragglers diff A B``: what changed between two analyses of a job."""

from __future__ import annotations

import argparse

from stragglers.atomic import check_out_dir
from stragglers.options import finite_range, positive_int

# The analysis and scipy are imported when the command runs, not when the parser is built.

EPILOG = """\
inputs (A and B, each one of):
  a result folder (result.json inside, written by `stragglers analyze --out DIR`)
  a result.json file
  a folder with trace.parquet (or trace.jsonl) and meta.yaml (e.g. from `stragglers synth`)
  a trace file, with --meta (both) or --meta-a / --meta-b

examples:
  stragglers diff monday/ tuesday/
  stragglers diff monday/result.json tuesday/trace.parquet --meta-b tuesday/meta.yaml
  stragglers diff a.parquet b.parquet --meta meta.yaml --out diff/
  stragglers diff monday/ tuesday/ --json | jq .changes[0].text

exit codes: 0 ok (changed or not), 2 bad input (the message names the file and field)
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "diff", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        help="what changed between two analyses: step time, S, op types, stages, workers",
        description="Compare two analyses (result folders or traces) of a job: the step time "
                    "and S, the op types, stages, DP ranks and workers whose time or blame "
                    "moved most, new, gone and moved stragglers, and host time, each tested "
                    "against the steps' spread and ranked by the step time it explains. "
                    "Layouts that differ (dp, pp, steps) are compared where they can be, and "
                    "what was not compared is said. Prints a table (or diff.json with "
                    "--json); with --out DIR also writes diff.json and diff.html there.")
    p.add_argument("a", metavar="A", help="the earlier run: a result folder, a result.json, "
                                          "a folder with a trace and meta.yaml, or a trace")
    p.add_argument("b", metavar="B", help="the later run (the same kinds as A)")
    p.add_argument("--meta", help="job metadata YAML of A and B where they are trace files")
    p.add_argument("--meta-a", metavar="META", help="job metadata YAML of A (a trace file)")
    p.add_argument("--meta-b", metavar="META", help="job metadata YAML of B (a trace file)")
    p.add_argument("--alpha", type=finite_range(0.0, inclusive=False, high=0.5), default=0.01,
                   help="significance level of the per-step tests (default: 0.01)")
    p.add_argument("--min-change", type=finite_range(0.0, high=1.0), default=0.01,
                   metavar="FRACTION",
                   help="smallest change reported, as a fraction of A's mean step time "
                        "(default: 0.01)")
    p.add_argument("--top", type=positive_int, default=5,
                   help="rows of each group table in the terminal (default: 5)")
    p.add_argument("--out", metavar="DIR", help="write diff.json and diff.html here")
    p.add_argument("--json", action="store_true", help="print diff.json instead of a table")
    p.set_defaults(func=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    from stragglers.diff import DiffSettings, compare, load_side, to_json
    from stragglers.diff.side import takes_meta
    from stragglers.errors import InputError

    if args.out is not None:
        check_out_dir(args.out)
    shared_used = False
    sides = []
    for which in ("a", "b"):
        path = getattr(args, which)
        meta = getattr(args, f"meta_{which}")
        option = f"--meta-{which}" if meta is not None else f"--meta-{which} (or --meta)"
        if meta is None and args.meta is not None and takes_meta(path):
            meta, option, shared_used = args.meta, "--meta", True
        sides.append(load_side(path, meta, option))
    if args.meta is not None and not shared_used:
        raise InputError(f"--meta {args.meta}: neither A nor B is a trace without its "
                         "metadata (result folders and result.json files need none)")
    diff = compare(sides[0], sides[1], DiffSettings(alpha=args.alpha, min_change=args.min_change))
    files = {}
    if args.out is not None:
        from stragglers.diff.outputs import write_diff

        files = write_diff(diff, args.out)
    if args.json:
        print(to_json(diff))
        return 0
    from stragglers.diff.text import render_text

    print(render_text(diff, top=args.top))
    for name, written in files.items():
        print(f"{name}: {written}")
    return 0
