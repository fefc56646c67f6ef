"""Subcommands of :mod:`stragglers.detect`: ``detect-eval``, ``watch`` and ``detect ...``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from stragglers import options
from stragglers.cli.defaults import DETECT_DEFAULT_METHOD as DEFAULT_METHOD
from stragglers.cli.defaults import DETECT_METHODS as METHODS
from stragglers.cli.defaults import ROBUST_DEFAULTS, ROBUST_WARMUP_ITERS
from stragglers.cli.defaults import WARMUP_MIN_ITERS as DEFAULT_MIN_ITERS
from stragglers.errors import InputError
from stragglers.jsonout import Output
from stragglers.limits import LIMITS, check_limit, limit

if TYPE_CHECKING:  # the detectors are imported by the commands that use them (start-up)
    from stragglers.detect.detector import Detector
    from stragglers.detect.robust import RobustSettings

RECORDS_HELP = (
    "JSON-lines records: call {rank, type, size, ts[, group, duration, wait]}, "
    "iteration {rank, iter, ts|duration}, step {rank, step, busy, wait[, ts, v]} (the "
    "probes' live records: detected on busy), message {src, dst, latency[, wait]}; "
    "see the stragglers.logs.records docstring."
)


def robust_options(p: argparse.ArgumentParser,
                   title: str = "detector parameters (--method robust; --threshold: every "
                                "method)") -> None:
    """The robust detector's parameters, each with its unit (docs/detection.md)."""
    d = ROBUST_DEFAULTS
    g = p.add_argument_group(title)
    g.add_argument("--threshold", default=None,
                   type=options.finite_range(0.0, inclusive=False, high=9.0),
                   help="relative slowdown reported: 0.10 = iterations 10%% slower than "
                        f"healthy (default {d['threshold']:g})")
    g.add_argument("--stall-iters", type=options.non_negative_int, default=None,
                   help="a rise lasting at most this many iterations that returns is a spike "
                        f"or stall, never an onset (default {d['stall_iters']:g})")
    g.add_argument("--stall-seconds", type=options.finite_range(0.0), default=None,
                   help="... and it must also last more than this many seconds of wall time "
                        f"(default {d['stall_seconds']:g}: iterations only)")
    g.add_argument("--min-points", type=options.positive_int, default=None,
                   help=f"fewest values behind an onset, change or recovery (default "
                        f"{d['min_points']:g})")
    g.add_argument("--ramp-iters", type=options.positive_int, default=None,
                   help="a candidate rise that has not held a level within this many "
                        f"iterations joins the healthy level (default {d['ramp_iters']:g})")
    g.add_argument("--rise-iters", type=options.non_negative_int, default=None,
                   help="a rise of the healthy level by the threshold within this many "
                        "iterations is an onset, however gradual; slower is a drift, "
                        "and a drift of two thresholds an onset "
                        f"(default {d['rise_iters']:g}; 0: off)")
    g.add_argument("--startup-iters", type=options.non_negative_int, default=None,
                   help="in this many iterations after each warm-up only a step is an "
                        "onset (a gradual rise there is the job's start) "
                        f"(default {d['startup_iters']:g})")
    g.add_argument("--flap-window-iters", type=options.positive_int, default=None,
                   help="3 onsets within this many iterations are one flapping event "
                        f"(default {d['flap_window_iters']:g})")


def robust_settings(args: argparse.Namespace) -> RobustSettings:
    """The robust detector's options given (:func:`robust_options`) and ``--warmup``."""
    from stragglers.detect.robust import RobustSettings

    return RobustSettings(threshold=args.threshold, warmup_iters=args.warmup,
                          **{name: getattr(args, name) for name in _ROBUST_ONLY})


_ROBUST_ONLY = ("stall_iters", "stall_seconds", "min_points", "ramp_iters", "rise_iters",
                "startup_iters", "flap_window_iters")


def _detector_factory(args: argparse.Namespace) -> Callable[[], Detector]:
    """A detector factory for ``--method`` and the parameters given (checked once here)."""
    kwargs: dict[str, Any] = {}
    if args.threshold is not None:
        kwargs["threshold"] = args.threshold
    for name in _ROBUST_ONLY:
        value = getattr(args, name)
        if value is None:
            continue
        opt = "--" + name.replace("_", "-")
        if args.method != "robust":
            raise InputError(f"{opt}: a parameter of --method robust, not of {args.method}")
        kwargs[name] = value
    make: Callable[..., Detector]
    if args.method == DEFAULT_METHOD:  # the library's detector
        from stragglers.detect.robust import RobustLevelDetector as make
    else:  # a baseline of the evaluation (BOCD, sliding window)
        from stragglers.evaluation.bocd import METHODS

        make = METHODS[args.method]
    try:
        make(**kwargs)
    except ValueError as exc:
        raise InputError(f"detector parameters: {exc}") from None
    return lambda: make(**kwargs)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "detect-eval",
        help="benchmark the fail-slow detectors on the labelled synthetic corpus",
        description=(
            "Generate the labelled corpus for --seed, run BOCD+verification and the two "
            "baselines of Falcon (plain BOCD, sliding-window median) and print accuracy, FPR, "
            "FNR and mean detection delay like Falcon's Tables 4 and 5, plus the streaming cost "
            "per point."
        ),
    )
    p.add_argument("--seed", type=options.non_negative_int, action="append", default=None,
                   help="corpus seed (default 0); --corpus jobs takes it several times")
    p.add_argument("--json", action="store_true",
                   help='print {method: {"accuracy", "fpr", "fnr", "mean_delay_iters"}} only')
    p.add_argument("--jobs", type=options.int_range(1, 256), default=None,
                   help="worker processes (default: up to 4)")
    p.add_argument("--scale", type=options.finite_range(0.0, inclusive=False), default=1.0,
                   help="multiply the number of series per scenario (default 1.0)")
    p.add_argument("--family", default=None,
                   choices=("synthetic", "real", "semi-real", "all"),
                   help="series to score: the synthetic corpus (default), the real Megatron "
                        "runs after warm-up (every onset outside their labelled episodes is a "
                        "false alarm), semi-real series (real noise with injected slow "
                        "periods and spikes), or all three; real and semi-real need --real-dir")
    p.add_argument("--real-dir", default=None,
                   help="folder of the Megatron iteration-time runs "
                        "(../shared/real/megatron-iter)")
    p.add_argument("--corpus", default="series", choices=("series", "jobs"),
                   help="series: bare iteration-time series scored on the detectors "
                        "(default); jobs: multi-rank record streams (restarts, stalls, "
                        "flapping, drifts, sampling, ...) scored through the watcher")
    p.add_argument("--lofo", action="store_true",
                   help="--corpus jobs: tune the first --method leave-one-family-out on its "
                        "grid (robust's TUNING_GRID; sliding_window's window/threshold)")
    p.add_argument("--method", action="append", default=None,
                   help="--corpus jobs: methods to run (repeat or comma list; default: the "
                        "tuned method, then bocd_verify, falcon, bocd, sliding_window)")
    p.add_argument("--real-more", default=None, metavar="DIR",
                   help="--corpus jobs: folder of labelled real series "
                        "(../shared/real/iter-more: NAME.jsonl and labels.json)")
    p.add_argument("--warmup", type=options.int_range(0, 10**9), default=None, metavar="ITERS",
                   help="--corpus jobs: the watcher's minimum warm-up in iterations "
                        "(default: each method's own, as watch: "
                        f"{ROBUST_WARMUP_ITERS} for robust, {DEFAULT_MIN_ITERS} for the others)")
    p.set_defaults(func=_eval)

    w = subparsers.add_parser(
        "watch",
        help="follow a JSON-lines stream of call/iteration records and print fail-slow events",
        description=(
            "Follow EVENTS (a file that grows, or - for stdin; several files, a folder or a "
            "glob pattern: one log per rank, followed in turn) and print one JSON event per "
            "line as it happens: onset, change, recovery, speedup, job, spikes, suspects, "
            "segment (restart, "
            "iteration jump, clock step), bad_record, out_of_order, outlier, rank_limit, "
            "rotated, truncated, and a final summary that counts every skipped record by "
            "reason. Bad lines never stop it; the file is followed through truncation and "
            "rotation like tail -F. " + RECORDS_HELP
        ),
    )
    w.add_argument("events", nargs="+", metavar="EVENTS",
                   help="JSON-lines file, Megatron-LM log or iteration-time JSON, or - for "
                        "stdin; several files (or a folder, such as a probe's "
                        "runs/ddp/probe, or a quoted glob pattern) are the logs of several "
                        "ranks: a log line's rank is its torchrun prefix ([rank3]:), else "
                        "the last number in its file's name (rank3.log). Of a folder or "
                        "pattern only the files watch can read are read (the others are "
                        "counted: skipped_files), and files that appear later join")
    w.add_argument("--format", default="auto", dest="input_format",
                   choices=("auto", "jsonl", "megatron-log", "megatron-json"),
                   help="input format (default auto: from the first bytes: a JSON document "
                        "with 'values' or 'iteration-time' is megatron-json, JSON lines are "
                        "jsonl, 'iteration N/ M |' lines are megatron-log); megatron-json is "
                        "read once, as with --once")
    w.add_argument("--warmup", type=options.non_negative_int, default=None,
                   help="minimum warm-up in iterations: the first iterations of each rank "
                        "and of every segment (restart, resume, gap), until the level settles "
                        "and at least this many, do not set the healthy level (default "
                        f"{ROBUST_WARMUP_ITERS} for --method robust: the level decides, "
                        f"{DEFAULT_MIN_ITERS} for the others; at most "
                        f"{LIMITS['warmup_iters'].default:,} or STRAGGLERS_MAX_WARMUP_ITERS)")
    w.add_argument("--once", action="store_true",
                   help="process the file as it is now and exit (default: keep following)")
    w.add_argument("--method", default=DEFAULT_METHOD, choices=tuple(METHODS),
                   help="detector (default robust: docs/detection.md; bocd_verify: BOCD+V "
                        "with the rules for real logs of the previous release; falcon: "
                        "BOCD+V as published; bocd, sliding_window: Falcon's baselines)")
    robust_options(w)
    w.add_argument("--poll", type=options.finite_range(0.0, inclusive=False, high=3600.0),
                   default=0.5, help="seconds between polls (default 0.5)")
    w.add_argument("--idle-timeout", type=options.finite_range(0.0), default=None,
                   help="stop following a file after this many seconds without new data "
                        "(default: follow until interrupted)")
    w.add_argument("--wait-timeout", type=options.finite_range(0.0), default=None,
                   metavar="SECONDS",
                   help="a folder or glob pattern with no file to read yet, or a path that "
                        "does not exist yet, is waited for: at most this many seconds, then "
                        "exit 2 (default: wait until interrupted; with --once: no wait)")
    w.add_argument("--window", type=options.int_range(4), default=1024,
                   help="calls per period-estimation window (default 1024)")
    w.add_argument("--max-ranks", type=options.positive_int, default=None,
                   help="follow at most this many distinct ranks; records of further ranks are "
                        f"counted, not followed (default {LIMITS['watch_ranks'].default:,}, "
                        "or STRAGGLERS_MAX_WATCH_RANKS)")
    w.set_defaults(func=_watch)

    d = subparsers.add_parser(
        "detect", help="offline fail-slow localisation tools (period, matrix, hang, plan)",
        description="Offline tools of stragglers.detect.",
    )
    dsub = d.add_subparsers(dest="detect_command", metavar="TOOL")
    dsub.required = True

    pp = dsub.add_parser(
        "period", help="iteration times of each rank from its communication calls (ACF)",
        description="Find each rank's call period by autocorrelation and derive its iteration "
                    "times. " + RECORDS_HELP,
    )
    pp.add_argument("records", help="JSON-lines file with call records")
    pp.add_argument("--window", type=options.int_range(4), default=1024,
                    help="calls per window (default 1024)")
    pp.add_argument("--threshold", type=options.finite_range(0.0, inclusive=False, high=1.0),
                    default=0.95, help="ACF threshold (default 0.95)")
    pp.add_argument("--all", action="store_true", help="also print every iteration time")
    pp.epilog = ("One JSON line per rank (calls, calls_out_of_order - sorted by ts before the "
                 "analysis -, iterations, periods, median and mean iteration time); then "
                 '{"skipped_records": {kind: count}} when the file also holds other records.')
    pp.set_defaults(func=_period)

    pm = dsub.add_parser(
        "matrix", help="C4D delay matrix: slow connection / source / destination, late senders",
        description="Build the source x destination median-latency matrix from message records "
                    "{src, dst, latency[, wait]} and classify slow cells, rows and columns; "
                    "with receiver waits, name the senders whose data arrives late.",
    )
    pm.add_argument("records", help="JSON-lines file with message records")
    pm.add_argument("--ranks", type=options.positive_int, default=None,
                    help="matrix size (default: max rank+1)")
    pm.add_argument("--factor", type=options.finite_range(1.0), default=1.5,
                    help="a cell/row/column is slow above factor x matrix median (default 1.5)")
    pm.add_argument("--show", action="store_true", help="also print the matrix")
    pm.set_defaults(func=_matrix)

    ph = dsub.add_parser(
        "hang", help="name the ranks that cause a hang from the last op each rank logged",
        description="Each input line is {rank, op, group (tp|dp|pp)[, peer, seq]}: the call a "
                    "rank was in when its collective timed out. Ranks without a line are taken "
                    "as silent (hung). Prints the suspects and why. With --flight-recorder DIR "
                    "instead: the PyTorch NCCL flight-recorder dumps of the job (one per rank, "
                    "pickle or JSON, file names ending in the rank), any process groups.",
    )
    ph.add_argument("records", nargs="?", default=None,
                    help="JSON-lines file of last operations (not with --flight-recorder)")
    ph.add_argument("--flight-recorder", metavar="DIR", default=None,
                    help="folder of flight-recorder dumps (_dump_<rank> or <prefix><rank>)")
    ph.add_argument("--dp", type=options.positive_int, default=None,
                    help="data-parallel size (records)")
    ph.add_argument("--pp", type=options.positive_int, default=None,
                    help="pipeline-parallel size (records)")
    ph.add_argument("--tp", type=options.positive_int, default=1,
                    help="tensor-parallel size (default 1)")
    ph.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    ph.set_defaults(func=_hang)

    pl = dsub.add_parser(
        "plan", help="validation passes of disjoint P2P transfers for a ring or a tree",
        description="Print the passes that cover every link of a ring (2 passes for an even "
                    "size, 3 for odd) or a binary tree (4 passes), no rank in two transfers of "
                    "one pass (Falcon Fig. 9).",
    )
    pl.add_argument("topology", choices=("ring", "tree"))
    pl.add_argument("size", type=options.any_int, nargs="?", default=None, help="number of ranks")
    pl.add_argument("--ranks", default=None,
                    help="comma-separated rank order instead of 0..size-1")
    pl.add_argument("--bidirectional", action="store_true", help="also the reverse directions")
    pl.add_argument("--json", action="store_true", help="print the passes as JSON")
    pl.set_defaults(func=_plan)


# -- detect-eval --------------------------------------------------------------------------------
def _eval(args: argparse.Namespace) -> int:
    seeds = args.seed or [0]
    out = Output()
    if args.corpus == "jobs":
        from stragglers.evaluation.detect_eval_jobs import (
            evaluate_jobs,
            evaluation_json,
            evaluation_text,
        )

        if args.family is not None:
            raise InputError("--family: only with --corpus series (--corpus jobs takes "
                             "--real-dir and --real-more)")
        ev = evaluate_jobs(seeds, scale=args.scale, methods=args.method or (), lofo=args.lofo,
                           real_more=args.real_more, real_dir=args.real_dir, jobs=args.jobs,
                           warmup=args.warmup)
        if args.json:
            out.write(json.dumps(evaluation_json(ev), indent=2, sort_keys=True) + "\n")
        else:
            out.write(evaluation_text(ev))
        return 0
    for opt, given in (("--lofo", args.lofo), ("--method", args.method),
                       ("--real-more", args.real_more), ("--warmup", args.warmup is not None)):
        if given:
            raise InputError(f"{opt}: only with --corpus jobs")
    if len(seeds) > 1:
        raise InputError("--seed: the series corpus takes one seed (several: --corpus jobs)")
    from stragglers.evaluation.detect_eval import evaluate_series

    res = evaluate_series(seeds[0], scale=args.scale, family=args.family or "synthetic",
                          real_dir=args.real_dir, jobs=args.jobs)
    if args.json:
        out.write(json.dumps(res.to_dict(), indent=2, sort_keys=True) + "\n")
        return 0
    if not out.write(res.text()):
        return 0
    for line in res.cost_lines():
        if not out.write(line):
            return 0
    return 0


# -- watch --------------------------------------------------------------------------------------
def _watch(args: argparse.Namespace) -> int:
    from stragglers.detect.watch_files import WatchSettings, watch_files, watch_inputs

    inputs = watch_inputs(args.events, once=args.once)
    check_limit("period_window", args.window, "--window")
    if args.warmup is not None:
        check_limit("warmup_iters", args.warmup, "--warmup")
    max_ranks = limit("watch_ranks") if args.max_ranks is None else args.max_ranks
    settings = WatchSettings(input_format=args.input_format, window=args.window,
                             warmup=args.warmup, max_ranks=max_ranks, once=args.once,
                             poll=args.poll, idle_timeout=args.idle_timeout,
                             wait_timeout=args.wait_timeout)
    return watch_files(inputs, _detector_factory(args), settings)


# -- detect period ------------------------------------------------------------------------------
def _period(args: argparse.Namespace) -> int:
    from stragglers.detect.period import rank_iterations

    ranks, skipped = rank_iterations(args.records, args.window, args.threshold)
    out = Output()
    for rank in ranks:
        if not out.write(json.dumps(rank.to_dict(all_times=args.all)) + "\n"):
            return 0
    if skipped:
        out.write(json.dumps({"skipped_records": skipped}) + "\n")
    return 0


# -- detect matrix ------------------------------------------------------------------------------
def _matrix(args: argparse.Namespace) -> int:
    from stragglers.detect.matrix import matrix_report

    report = matrix_report(args.records, args.ranks, args.factor)
    Output().write(json.dumps(report.to_dict(show=args.show), indent=2) + "\n")
    return 0


# -- detect hang --------------------------------------------------------------------------------
def _hang(args: argparse.Namespace) -> int:
    from stragglers.hang.last_op import Topology, hang_report, localize_hang, read_last_ops

    if args.flight_recorder is not None:
        if args.records is not None or args.dp is not None or args.pp is not None:
            raise InputError("--flight-recorder: give either the dumps or a records file "
                             "with --dp/--pp, not both")
        return _hang_fr(args)
    if args.records is None:
        raise InputError("give a records file (with --dp and --pp) or --flight-recorder DIR")
    for name in ("dp", "pp"):
        if getattr(args, name) is None:
            raise InputError(f"--{name}: required with a records file")
    check_limit("topology_ranks", args.dp * args.pp * args.tp,
                f"--dp {args.dp} x --pp {args.pp} x --tp {args.tp}")
    topo = Topology(dp=args.dp, pp=args.pp, tp=args.tp)
    ops = read_last_ops(args.records, topo)
    diag = localize_hang(topo, ops)
    out = Output()
    if args.json:
        out.write(orjson.dumps(diag.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    out.write(hang_report(topo, len(ops), diag))
    return 0


def _hang_fr(args: argparse.Namespace) -> int:
    from stragglers.hang.flight_recorder import read_flight_recorder
    from stragglers.hang.fr_hang import fr_hang_report, localize_fr_hang

    record = read_flight_recorder(args.flight_recorder)
    diag = localize_fr_hang(record)
    out = Output()
    if args.json:
        out.write(orjson.dumps(diag.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    out.write(fr_hang_report(record, diag))
    return 0


# -- detect plan --------------------------------------------------------------------------------
def _plan(args: argparse.Namespace) -> int:
    from stragglers.validate.plan import plan_passes

    passes = plan_passes(args.topology, args.size, args.ranks, args.bidirectional)
    out = Output()
    if args.json:
        out.write(json.dumps({"topology": args.topology, "passes": passes}) + "\n")
        return 0
    out.write("".join(f"pass {k}: {', '.join(f'{a}->{b}' for a, b in p) or '(none)'}\n"
                      for k, p in enumerate(passes, start=1)))
    return 0
