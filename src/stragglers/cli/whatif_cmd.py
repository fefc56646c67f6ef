"""``stragglers analyze``, ``timeline`` and ``heatmap``: the what-if analyzer's commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from stragglers.atomic import check_out_dir
from stragglers.errors import InputError
from stragglers.options import slowdown_factor

# The analysis (pyarrow, pandas, matplotlib: about a second) is imported by the commands
# that run it, not when the parser is built: `stragglers watch` and the other commands do not
# pay for it at start-up.

#: The timelines ``stragglers timeline --which`` can write (the same as
#: :data:`stragglers.analysis.timelines.TIMELINES`, which a test checks).
TIMELINE_CHOICES = ("original", "no-delay", "ideal")

EPILOG = """\
examples:
  stragglers analyze trace.parquet --meta meta.yaml --out out/
  stragglers analyze trace.parquet --meta meta.yaml --steps 10-20 --no-timelines
  stragglers analyze trace.parquet --meta meta.yaml --verdict pause_factor=2 --verdict-config v.yaml
  stragglers timeline trace.parquet --meta meta.yaml --steps 12-13 --which original ideal
  stragglers heatmap out/result.json --out out/

exit codes: 0 ok, 2 bad input (the message names the file, field and an example row)
"""


def _add_input(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="operation trace: .parquet, or .jsonl (one op per line)")
    p.add_argument("--meta", required=True, help="job metadata YAML (dp_size, pp_size, ...)")
    p.add_argument("--steps", metavar="A-B", help="analyse only steps A..B (inclusive)")


def register(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "analyze", formatter_class=fmt, epilog=EPILOG,
        help="what-if analysis: slowdown, waste, blame and root cause of a trace",
        description="Simulate the job without stragglers and report how much slower it "
                    "was (slowdown S, waste), which DP ranks, stages, workers, op types and "
                    "steps are to blame, and the likely root cause. Prints a summary (or "
                    "result.json with --json); with --out DIR also writes result.json, "
                    "heatmaps and Perfetto timelines there.")
    _add_input(p)
    p.add_argument("--out", metavar="DIR",
                   help="output folder for result.json, heatmaps and timelines (default: "
                        "write no files)")
    p.add_argument("--threshold", type=slowdown_factor, default=None,
                   help="slowdown below which the verdict is 'none' (default: 1.1; the same "
                        "as --verdict threshold=X)")
    p.add_argument("--verdict-config", metavar="FILE",
                   help="YAML mapping of verdict settings (see docs/concepts/verdict.md)")
    p.add_argument("--verdict", metavar="KEY=VALUE", action="append", default=[],
                   help="one verdict setting, e.g. pause_factor=2 (repeatable; applied after "
                        "--verdict-config)")
    p.add_argument("--no-exact", action="store_true",
                   help="skip exact per-worker S_w (use the min(S_dp, S_stage) approximation)")
    p.add_argument("--no-timelines", action="store_true", help="do not write timelines")
    p.add_argument("--json", action="store_true", help="print result.json instead of a summary")
    p.set_defaults(func=run_analyze)

    p = sub.add_parser(
        "timeline", formatter_class=fmt, epilog=EPILOG,
        help="write original / no-delay / ideal timelines as Perfetto trace JSON",
        description="Write Chrome/Perfetto trace-event JSON timelines (one track per worker, "
                    "DP ranks as processes) of the trace as recorded and as simulated.")
    _add_input(p)
    p.add_argument("--out", metavar="DIR", required=True, help="output folder")
    p.add_argument("--which", nargs="+", choices=TIMELINE_CHOICES,
                   default=["original", "ideal"],
                   help="timelines to write (default: original ideal)")
    p.set_defaults(func=run_timeline)

    p = sub.add_parser(
        "heatmap", formatter_class=fmt, epilog=EPILOG,
        help="draw the DP x PP worker heatmap and per-step heatmaps",
        description="Draw heatmaps from a result.json written by `analyze`, or analyse a "
                    "trace first when given a trace and --meta.")
    p.add_argument("input", help="result.json, or a trace (then --meta is required)")
    p.add_argument("--meta", help="job metadata YAML, when INPUT is a trace")
    p.add_argument("--steps", metavar="A-B", help="steps to analyse, when INPUT is a trace")
    p.add_argument("--out", metavar="DIR",
                   help="output folder (default: the folder of INPUT when it is a result.json; "
                        "required with --meta)")
    p.set_defaults(func=run_heatmap)


def run_analyze(args: argparse.Namespace) -> int:
    from stragglers.analysis import analyze_files
    from stragglers.analysis.result import Skipped, summary
    from stragglers.analysis.verdict import VerdictConfig

    if args.out is not None:  # never into the current folder unasked
        check_out_dir(args.out)
    config = VerdictConfig.from_options(args.verdict_config, args.verdict, args.threshold)
    result = analyze_files(args.trace, args.meta, args.steps, exact_workers=not args.no_exact,
                           config=config, out=args.out,
                           timelines=() if args.no_timelines else ("original", "ideal"))
    if args.json:
        print(result.to_json())
        return 0
    print(summary(result))
    for name, f in result.outputs.items():
        print(f"{name}: skipped: {f.reason}" if isinstance(f, Skipped) else f"{name}: {f}")
    return 0


def run_timeline(args: argparse.Namespace) -> int:
    from stragglers.analysis.outputs import write_timeline_files

    check_out_dir(args.out)
    for name, path in write_timeline_files(args.trace, args.meta, args.out, args.which,
                                           args.steps):
        print(f"{name}: {path}")
    return 0


def run_heatmap(args: argparse.Namespace) -> int:
    from stragglers.analysis.outputs import write_heatmap_files

    if args.out is None:
        if args.meta is not None:
            raise InputError("--out is required when INPUT is a trace (heatmaps are written "
                             "beside a result.json only)")
        args.out = str(Path(args.input).parent)
    check_out_dir(args.out)
    for name, path in write_heatmap_files(args.input, args.out, args.meta, args.steps).items():
        print(f"{name}: {path}")
    return 0
