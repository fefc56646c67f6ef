"""``stragglers analyze``, ``timeline`` and ``heatmap``: the what-if analyzer's commands."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from stragglers.analysis import analyze_table, load_table
from stragglers.analysis.outputs import TIMELINES, write_heatmaps, write_outputs, write_timelines
from stragglers.analysis.result import summary
from stragglers.analysis.verdict import DEFAULT_THRESHOLD
from stragglers.errors import InputError

EPILOG = """\
examples:
  stragglers analyze trace.parquet --meta meta.yaml --out out/
  stragglers analyze trace.parquet --meta meta.yaml --steps 10-20 --no-timelines
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
                    "steps are to blame, and the likely root cause. Writes result.json, "
                    "heatmaps and Perfetto timelines into --out and prints a summary.")
    _add_input(p)
    p.add_argument("--out", default="stragglers-out", help="output folder (default: %(default)s)")
    p.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help="slowdown below which the verdict is 'none' (default: %(default)s)")
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
    p.add_argument("--out", default="stragglers-out", help="output folder (default: %(default)s)")
    p.add_argument("--which", nargs="+", choices=TIMELINES, default=["original", "ideal"],
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
    p.add_argument("--out", default="stragglers-out", help="output folder (default: %(default)s)")
    p.set_defaults(func=run_heatmap)


def run_analyze(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    table = load_table(args.trace, args.meta, args.steps)
    timing = {"load": time.perf_counter() - t0}
    analysis = analyze_table(table, exact_workers=not args.no_exact,
                             threshold=args.threshold, timing=timing)
    files = write_outputs(analysis.model, analysis.result, args.out,
                          timelines=not args.no_timelines)
    if args.json:
        print(json.dumps(analysis.result, indent=1))
        return 0
    print(summary(analysis.result))
    for name, f in files.items():
        if isinstance(f, dict):
            print(f"{name}: skipped: {f['skipped']}")
        else:
            print(f"{name}: {f}")
    return 0


def run_timeline(args: argparse.Namespace) -> int:
    from stragglers.analysis.model import prepare

    model = prepare(load_table(args.trace, args.meta, args.steps))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, f in write_timelines(model, out, tuple(args.which), max_ops=None).items():
        print(f"{name}: {f}")
    return 0


def run_heatmap(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.meta is None:
        path = Path(args.input)
        try:
            result = json.loads(path.read_text())
        except FileNotFoundError:
            raise InputError(f"{path}: file not found") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise InputError(f"{path}: not a result.json (give --meta to analyse a trace)"
                             ) from None
        for key in ("job", "attribution", "attribution_per_step", "verdict", "slowdown"):
            if key not in result:
                raise InputError(f"{path}: not a stragglers result: key '{key}' is missing")
    else:
        result = analyze_table(load_table(args.input, args.meta, args.steps)).result
    for name, f in write_heatmaps(result, out).items():
        print(f"{name}: {f}")
    return 0


