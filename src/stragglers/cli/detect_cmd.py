"""Subcommands of :mod:`stragglers.detect`: ``detect-eval``, ``watch`` and ``detect ...``."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from stragglers import options
from stragglers.cli.defaults import DETECT_DEFAULT_METHOD as DEFAULT_METHOD
from stragglers.cli.defaults import DETECT_METHODS as METHODS
from stragglers.cli.defaults import WARMUP_MIN_ITERS as DEFAULT_MIN_ITERS
from stragglers.errors import InputError
from stragglers.jsonout import Output
from stragglers.limits import LIMITS, check_limit, limit

if TYPE_CHECKING:  # the detectors are imported by the commands that use them (start-up)
    from stragglers.detect.bocd import Detector
    from stragglers.detect.events import WatchEvent
    from stragglers.detect.follow import Batch
    from stragglers.detect.watch import Watcher

RECORDS_HELP = (
    "JSON-lines records: call {rank, type, size, ts[, group, duration, wait]}, "
    "iteration {rank, iter, ts|duration}, message {src, dst, latency[, wait]}; "
    "see the stragglers.detect.records docstring."
)


def _robust_options(p: argparse.ArgumentParser) -> None:
    """The robust detector's parameters, each with its unit (docs/detection.md)."""
    g = p.add_argument_group("detector parameters (--method robust; --threshold: every method)")
    g.add_argument("--threshold", default=None,
                   type=options.finite_range(0.0, inclusive=False, high=9.0),
                   help="relative slowdown reported: 0.10 = iterations 10%% slower than "
                        "healthy (default 0.10)")
    g.add_argument("--stall-iters", type=options.non_negative_int, default=None,
                   help="a rise lasting at most this many iterations that returns is a spike "
                        "or stall, never an onset (default 12)")
    g.add_argument("--stall-seconds", type=options.finite_range(0.0), default=None,
                   help="... and it must also last more than this many seconds of wall time "
                        "(default 0: iterations only)")
    g.add_argument("--min-points", type=options.positive_int, default=None,
                   help="fewest values behind an onset, change or recovery (default 3)")
    g.add_argument("--ramp-iters", type=options.positive_int, default=None,
                   help="a rise that takes longer than this many iterations to reach the "
                        "threshold is a drift, not an onset (default 60)")
    g.add_argument("--flap-window-iters", type=options.positive_int, default=None,
                   help="3 onsets within this many iterations are one flapping event "
                        "(default 1000)")


_ROBUST_ONLY = ("stall_iters", "stall_seconds", "min_points", "ramp_iters",
                "flap_window_iters")


def _detector_factory(args: argparse.Namespace) -> Callable[[], Detector]:
    """A detector factory for ``--method`` and the parameters given (checked once here)."""
    from stragglers.detect.bocd import make_detector

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
    try:
        make_detector(args.method, **kwargs)
    except ValueError as exc:
        raise InputError(f"detector parameters: {exc}") from None
    return lambda: make_detector(args.method, **kwargs)


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
                        "(default: each method's own, as watch: 20 for robust, "
                        f"{DEFAULT_MIN_ITERS} for the others)")
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
                        "stdin; several files (or a folder, or a quoted glob pattern) are the "
                        "logs of several ranks: a log line's rank is its torchrun prefix "
                        "([rank3]:), else the last number in its file's name (rank3.log)")
    w.add_argument("--format", default="auto", dest="input_format",
                   choices=("auto", "jsonl", "megatron-log", "megatron-json"),
                   help="input format (default auto: from the first bytes: a JSON document "
                        "with 'values' or 'iteration-time' is megatron-json, JSON lines are "
                        "jsonl, 'iteration N/ M |' lines are megatron-log); megatron-json is "
                        "read once, as with --once")
    w.add_argument("--warmup", type=options.non_negative_int, default=None,
                   help="minimum warm-up in iterations: the first iterations of each rank "
                        "and of every segment (restart, resume, gap), until the level settles "
                        "and at least this many, do not set the healthy level (default 20 "
                        f"for --method robust, {DEFAULT_MIN_ITERS} for the others; at most "
                        f"{LIMITS['warmup_iters'].default:,} or STRAGGLERS_MAX_WARMUP_ITERS)")
    w.add_argument("--once", action="store_true",
                   help="process the file as it is now and exit (default: keep following)")
    w.add_argument("--method", default=DEFAULT_METHOD, choices=tuple(METHODS),
                   help="detector (default robust: docs/detection.md; bocd_verify: BOCD+V "
                        "with the rules for real logs of the previous release; falcon: "
                        "BOCD+V as published; bocd, sliding_window: Falcon's baselines)")
    _robust_options(w)
    w.add_argument("--poll", type=options.finite_range(0.0, inclusive=False, high=3600.0),
                   default=0.5, help="seconds between polls (default 0.5)")
    w.add_argument("--idle-timeout", type=options.finite_range(0.0), default=None,
                   help="stop following after this many seconds without new data")
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
    from stragglers.detect.follow import Follower
    from stragglers.detect.watch import Watcher

    paths = _watch_inputs(args.events)
    check_limit("period_window", args.window, "--window")
    poll = args.poll
    idle = args.idle_timeout
    max_ranks = limit("watch_ranks") if args.max_ranks is None else args.max_ranks
    if args.warmup is not None:
        check_limit("warmup_iters", args.warmup, "--warmup")
    factory = _detector_factory(args)
    fmt = args.input_format
    stdin = None
    if paths == ["-"]:
        from stragglers.detect.follow import peek_stdin
        from stragglers.detect.megatron import guess_format

        stdin = peek_stdin()
        if fmt == "auto":
            fmt = guess_format(stdin.head)
    elif fmt == "auto":
        fmts = {p: _guess_format(p) for p in paths}
        fmt = fmts[paths[0]]
        for p, f in fmts.items():
            if f != fmt:
                raise InputError(f"{p}: its format is {f} but {paths[0]}'s is {fmt}; watch "
                                 "reads several files of one format (give --format)")
    if len(paths) > 1:
        return _watch_many(args, factory, paths, fmt, poll, idle, max_ranks)
    path = paths[0]
    source = "<stdin>" if path == "-" else path
    watcher = Watcher(detector_factory=factory, tracker_kwargs={"window": args.window},
                      source=source, max_ranks=max_ranks,
                      input_format="jsonl" if fmt == "megatron-json" else fmt,
                      warmup_iters=args.warmup)
    out = Output()
    if fmt == "megatron-json":
        return _watch_iteration_json([(0, (path, 0))], watcher, out)
    follower = Follower(path, once=args.once, poll=poll, idle_timeout=idle,
                        max_line_bytes=watcher.max_line_bytes, stdin=stdin)
    return _pump(((0, batch) for batch in follower), watcher, out,
                 lambda _i, lines: watcher.process_lines(lines), [source])


def _pump(batches: Iterable[tuple[int, Batch]], watcher: Watcher, out: Output,
          process: Callable[[int, list[tuple[int, bytes | None]]], list[WatchEvent]],
          names: list[str]) -> int:
    """Feed followed batches ``(file index, batch)`` to the watcher until the input ends or
    stdout closes; ``process(i, lines)`` handles the lines of file ``i`` (``names[i]``).
    The events are printed as JSON lines."""
    i = 0
    try:
        for i, batch in batches:
            if batch.notice is not None:
                events = watcher.notice(batch.notice)
            else:
                events = process(i, batch.lines)
            if events and not out.events(e.to_dict() for e in events):
                return 0
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass
    except OSError as exc:
        raise InputError(f"{names[i]}: cannot read ({exc.strerror or exc})") from None
    out.events(e.to_dict() for e in watcher.finish())
    return 0


_GLOB = frozenset("*?[")


def _watch_inputs(args: list[str]) -> list[str]:
    """The files to watch: the arguments, a folder's files (sorted; hidden files skipped) or a
    glob pattern's matches (when the pattern is not itself a file); each checked readable."""
    import glob

    paths: list[str] = []
    for a in args:
        if a == "-":
            if len(args) > 1:
                raise InputError("-: standard input cannot be watched with other files")
            return ["-"]
        p = Path(a)
        if p.is_dir():
            found = sorted(str(q) for q in p.iterdir()
                           if not q.name.startswith(".") and q.is_file())
            if not found:
                raise InputError(f"{p}: is a folder without files to watch")
            paths += found
        elif not p.exists() and _GLOB & set(a):
            found = sorted(q for q in glob.glob(a) if Path(q).is_file())
            if not found:
                raise InputError(f"{a}: no file matches the pattern")
            paths += found
        else:
            paths.append(a)
    check_limit("watch_ranks", len(paths), "watch: input files")
    seen: set[str] = set()
    for a in paths:
        p = Path(a)
        if not p.exists():
            raise InputError(f"{p}: no such file")
        if p.is_dir():
            raise InputError(f"{p}: is a folder, expected a JSON-lines file")
        if not os.access(p, os.R_OK):
            raise InputError(f"{p}: cannot read the file (permission denied)")
        key = os.path.realpath(p)
        if key in seen:
            raise InputError(f"{p}: given twice")
        seen.add(key)
    return paths


def _file_ranks(paths: list[str]) -> list[int]:
    """The rank of each file: the last number of its name
    (:func:`~stragglers.detect.megatron.rank_from_name`), else the first ``torchrun`` prefix
    in its first 64 KiB (:func:`~stragglers.detect.megatron.rank_from_content`); one line
    naming the file when neither tells, or when two files name the same rank."""
    from stragglers.detect.megatron import rank_from_content, rank_from_name

    ranks: list[int] = []
    owner: dict[int, str] = {}
    for p in paths:
        r = rank_from_name(p)
        if r is None:
            try:
                with open(p, "rb") as fh:
                    r = rank_from_content(fh.read(1 << 16))
            except OSError as exc:
                raise InputError(f"{p}: cannot read the file ({exc.strerror or exc})") from None
        if r is None:
            raise InputError(f"{p}: cannot tell the rank of this log (no number in its name "
                             "and no [rankN]: prefix in its first 64 KiB); name the files of "
                             "several ranks with the rank as their last number, e.g. "
                             "train_rank3.log")
        if r in owner:
            raise InputError(f"{p}: names rank {r}, as {owner[r]} does (one file per rank)")
        owner[r] = p
        ranks.append(r)
    return ranks


def _watch_many(args: argparse.Namespace, factory: Callable[[], Detector], paths: list[str],
                fmt: str,
                poll: float, idle: float | None, max_ranks: int) -> int:
    """``watch`` on several files, one per rank (logs, JSON lines or iteration-time JSON)."""
    from stragglers.detect.follow import Follower, follow_files
    from stragglers.detect.watch import Watcher

    ranks = _file_ranks(paths) if fmt != "jsonl" else [0] * len(paths)
    watcher = Watcher(detector_factory=factory,
                      tracker_kwargs={"window": args.window}, source=paths[0], max_ranks=max_ranks,
                      input_format="jsonl" if fmt == "megatron-json" else fmt,
                      warmup_iters=args.warmup, sources=len(paths))
    out = Output()
    if fmt == "megatron-json":
        return _watch_iteration_json(list(enumerate(zip(paths, ranks, strict=True))),
                                     watcher, out)
    followers = [Follower(p, once=args.once, poll=poll, idle_timeout=idle,
                          max_line_bytes=watcher.max_line_bytes, yield_when_idle=True)
                 for p in paths]
    return _pump(follow_files(followers, poll), watcher, out,
                 lambda i, lines: watcher.process_lines(lines, file_index=i, source=paths[i],
                                                        rank=ranks[i]), paths)


def _guess_format(path: str) -> str:
    """``--format auto``: the format from the first 64 KiB of a file (standard input: from
    its first block, read by :func:`~stragglers.detect.follow.peek_stdin`)."""
    from stragglers.detect.megatron import guess_format

    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return guess_format(head)


def _watch_iteration_json(files: list[tuple[int, tuple[str, int]]], watcher: Watcher,
                          out: Output) -> int:
    """``watch --format megatron-json``: each file's whole series at once (it is not
    appended to); ``files``: ``(file index, (path, rank))``. A file that is not an
    iteration-time document is one bad record, not fatal."""
    from stragglers.detect.megatron import read_iteration_json, series_items
    from stragglers.detect.records import RecordError

    several = len(files) > 1
    for i, (path, rank) in files:
        if path == "-":
            raise InputError("--format megatron-json: give a file, not standard input")
        source = path if several else None
        try:
            series = read_iteration_json(path)
        except RecordError as exc:
            events = watcher.unreadable(exc, file_index=i, source=source)
        else:
            events = watcher.process_items(series_items(series, rank=rank), file_index=i,
                                           source=source)
        if events and not out.events(e.to_dict() for e in events):
            return 0
    out.events(e.to_dict() for e in watcher.finish())
    return 0


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
    from stragglers.detect.hang import LastOp, Topology, localize_hang
    from stragglers.detect.records import decode_json, iter_file_lines, rank_field, shown_value

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
    ops: dict[int, LastOp] = {}
    path = args.records
    cap = limit("record_bytes")
    for i, raw in iter_file_lines(path):
        if not raw.strip():
            continue
        where = f"{path}:{i}"
        if len(raw) > cap:
            raise InputError(f"{where}: record of {len(raw):,} bytes exceeds the limit of "
                             f"{cap:,} (set STRAGGLERS_MAX_RECORD_BYTES to raise it)")
        obj = decode_json(raw, where)
        if type(obj) is not dict:
            raise InputError(f"{where}: expected a JSON object")
        for key in ("rank", "op", "group"):
            if key not in obj:
                raise InputError(f"{where}: field '{key}': missing")
        ops_rank = rank_field(obj, "rank", topo.size, where)
        op = obj["op"]
        if type(op) is not str or not op:
            raise InputError(f"{where}: field 'op': expected a non-empty string, got "
                             f"{shown_value(op)}")
        if obj["group"] not in ("tp", "dp", "pp"):
            raise InputError(f"{where}: field 'group': expected tp, dp or pp, got "
                             f"{shown_value(obj['group'])}")
        peer = None if obj.get("peer") is None else rank_field(obj, "peer", topo.size, where)
        seq = obj.get("seq")
        if seq is not None and (type(seq) is not int or not 0 <= seq < 2**63):
            raise InputError(f"{where}: field 'seq': expected an integer >= 0, got "
                             f"{shown_value(seq)}")
        if ops_rank in ops:
            raise InputError(f"{where}: field 'rank': rank {ops_rank} appears twice")
        ops[ops_rank] = LastOp(op=op, group=obj["group"], peer=peer, seq=seq)
    diag = localize_hang(topo, ops)
    out = Output()
    if args.json:
        out.write(orjson.dumps(diag.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    lines = [f"topology dp={topo.dp} pp={topo.pp} tp={topo.tp}: {len(ops)} ranks logged, "
             f"{len(diag.silent)} silent {list(diag.silent)}"]
    if not diag.suspects:
        lines.append("no suspect: nobody waits for a silent rank or a stuck group")
    for sus in diag.suspects:
        lines.append(f"suspect {list(sus.ranks)} [{sus.kind}], waited on by {sus.waited_on_by} "
                     f"ranks: {sus.reason}")
    out.write("\n".join(lines) + "\n")
    return 0


def _hang_fr(args: argparse.Namespace) -> int:
    from stragglers.detect.flight_recorder import read_flight_recorder
    from stragglers.detect.fr_hang import localize_fr_hang

    record = read_flight_recorder(args.flight_recorder)
    diag = localize_fr_hang(record)
    out = Output()
    if args.json:
        out.write(orjson.dumps(diag.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    other = diag.ignored_files
    shown = ", ".join(other[:4]) + (", ..." if len(other) > 4 else "")
    lines = [f"{record.source}: {diag.dumps} dumps of {diag.ranks} ranks, "
             f"{len(diag.silent)} silent {list(diag.silent)}"
             + (f"; {len(other)} other files not read ({shown})" if other else "")]
    if not diag.suspects:
        lines.append("no suspect: nobody waits for a silent or lagging rank")
    lines.append(f"suspects: {list(diag.suspect_ranks)}")
    if diag.groups:
        lines.append(f"{'PG':<6} | {'description':<40} | {'op':<28} | {'seq':>8} | "
                     f"{'size':<16} | {'dtype':<9} | waiting for")
        for g in diag.groups:
            lines.append(f"{g.pg:<6} | {g.desc:<40} | {g.op:<28} | {g.seq:>8} | "
                         f"{g.size:<16} | {g.dtype:<9} | {list(g.waiting_for)}")
    for sus in diag.suspects:
        lines.append(f"suspect {list(sus.ranks)} [{sus.kind}], waited on by {sus.waited_on_by} "
                     f"ranks: {sus.reason}")
    lines.extend(f"note: {n}" for n in diag.notes)
    out.write("\n".join(lines) + "\n")
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
