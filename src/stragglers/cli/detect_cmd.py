"""Subcommands of :mod:`stragglers.detect`: ``detect-eval``, ``watch`` and ``detect ...``."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.errors import InputError

RECORDS_HELP = (
    "JSON-lines records: call {rank, type, size, ts[, group, duration, wait]}, "
    "iteration {rank, iter, ts|duration}, message {src, dst, latency[, wait]}; "
    "see the stragglers.detect.records docstring."
)


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
    p.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    p.add_argument("--json", action="store_true",
                   help='print {method: {"accuracy", "fpr", "fnr", "mean_delay_iters"}} only')
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: up to 4)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply the number of series per scenario (default 1.0)")
    p.set_defaults(func=_eval)

    w = subparsers.add_parser(
        "watch",
        help="follow a JSON-lines stream of call/iteration records and print fail-slow events",
        description=(
            "Follow EVENTS (a file that grows, or - for stdin) and print one JSON event per "
            "line as it happens: onset, change, recovery, suspects, bad_record, out_of_order, "
            "and a final summary. " + RECORDS_HELP
        ),
    )
    w.add_argument("events", help="JSON-lines file, or - for stdin")
    w.add_argument("--once", action="store_true",
                   help="process the file as it is now and exit (default: keep following)")
    w.add_argument("--method", default="bocd_verify",
                   choices=("bocd_verify", "bocd", "sliding_window"), help="detector")
    w.add_argument("--poll", type=float, default=0.5, help="seconds between polls (default 0.5)")
    w.add_argument("--idle-timeout", type=float, default=None,
                   help="stop following after this many seconds without new data")
    w.add_argument("--window", type=int, default=1024,
                   help="calls per period-estimation window (default 1024)")
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
    pp.add_argument("--window", type=int, default=1024, help="calls per window (default 1024)")
    pp.add_argument("--threshold", type=float, default=0.95, help="ACF threshold (default 0.95)")
    pp.add_argument("--all", action="store_true", help="also print every iteration time")
    pp.set_defaults(func=_period)

    pm = dsub.add_parser(
        "matrix", help="C4D delay matrix: slow connection / source / destination, late senders",
        description="Build the source x destination median-latency matrix from message records "
                    "{src, dst, latency[, wait]} and classify slow cells, rows and columns; "
                    "with receiver waits, name the senders whose data arrives late.",
    )
    pm.add_argument("records", help="JSON-lines file with message records")
    pm.add_argument("--ranks", type=int, default=None, help="matrix size (default: max rank+1)")
    pm.add_argument("--factor", type=float, default=1.5,
                    help="a cell/row/column is slow above factor x matrix median (default 1.5)")
    pm.add_argument("--show", action="store_true", help="also print the matrix")
    pm.set_defaults(func=_matrix)

    ph = dsub.add_parser(
        "hang", help="name the ranks that cause a hang from the last op each rank logged",
        description="Each input line is {rank, op, group (tp|dp|pp)[, peer, seq]}: the call a "
                    "rank was in when its collective timed out. Ranks without a line are taken "
                    "as silent (hung). Prints the suspects and why.",
    )
    ph.add_argument("records", help="JSON-lines file of last operations")
    ph.add_argument("--dp", type=int, required=True, help="data-parallel size")
    ph.add_argument("--pp", type=int, required=True, help="pipeline-parallel size")
    ph.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default 1)")
    ph.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    ph.set_defaults(func=_hang)

    pl = dsub.add_parser(
        "plan", help="validation passes of disjoint P2P transfers for a ring or a tree",
        description="Print the passes that cover every link of a ring (2 passes for an even "
                    "size, 3 for odd) or a binary tree (4 passes), no rank in two transfers of "
                    "one pass (Falcon Fig. 9).",
    )
    pl.add_argument("topology", choices=("ring", "tree"))
    pl.add_argument("size", type=int, nargs="?", default=None, help="number of ranks")
    pl.add_argument("--ranks", default=None,
                    help="comma-separated rank order instead of 0..size-1")
    pl.add_argument("--bidirectional", action="store_true", help="also the reverse directions")
    pl.add_argument("--json", action="store_true", help="print the passes as JSON")
    pl.set_defaults(func=_plan)


# -- detect-eval --------------------------------------------------------------------------------
def _eval(args: argparse.Namespace) -> int:
    from stragglers.detect.corpus import generate_corpus
    from stragglers.detect.evaluate import (
        METHOD_ORDER,
        evaluate,
        format_tables,
        metrics_json,
        streaming_cost,
    )

    if args.scale <= 0:
        raise InputError(f"--scale must be > 0, got {args.scale}")
    if args.jobs is not None and args.jobs < 1:
        raise InputError(f"--jobs must be >= 1, got {args.jobs}")
    corpus = generate_corpus(args.seed, scale=args.scale)
    outcomes = evaluate(args.seed, corpus=corpus, jobs=args.jobs)
    if args.json:
        print(json.dumps(metrics_json(outcomes), indent=2, sort_keys=True))
        return 0
    print(format_tables(outcomes, args.seed))
    print()
    n_series = len(corpus)
    print(f"Corpus: {n_series} series, {sum(s.values.size for s in corpus)} iterations, "
          f"{sum(len(s.events) for s in corpus)} labelled events")
    print("Streaming cost per new point (sequential, every 4th series):")
    for m in METHOD_ORDER:
        c = streaming_cost(corpus[::4], m)
        print(f"  {m:<15} mean {c['mean_us']:6.1f} us   p99 {c['p99_us']:6.1f} us   "
              f"max {c['max_us']:8.1f} us   over {c['points']} points")
    return 0


# -- watch --------------------------------------------------------------------------------------
def _watch(args: argparse.Namespace) -> int:
    from stragglers.detect.watch import Watcher, follow_lines

    if args.events != "-" and not Path(args.events).is_file():
        raise InputError(f"{args.events}: no such file")
    if args.window < 4:
        raise InputError(f"--window must be >= 4, got {args.window}")
    watcher = Watcher(method=args.method, tracker_kwargs={"window": args.window},
                      source=args.events if args.events != "-" else "<stdin>")
    out = sys.stdout
    try:
        for lineno, text in follow_lines(args.events, once=args.once, poll=args.poll,
                                         idle_timeout=args.idle_timeout):
            for ev in watcher.process_line(text, lineno):
                out.write(json.dumps(ev) + "\n")
            out.flush()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass
    for ev in watcher.finish():
        out.write(json.dumps(ev) + "\n")
    out.flush()
    return 0


# -- detect period ------------------------------------------------------------------------------
def _read(path: str) -> list[Any]:
    from stragglers.detect.records import read_records

    return read_records(path)


def _period(args: argparse.Namespace) -> int:
    from stragglers.detect.period import CallEncoder, iteration_times
    from stragglers.detect.records import CallRecord

    if args.window < 4:
        raise InputError(f"--window must be >= 4, got {args.window}")
    if not 0 < args.threshold <= 1:
        raise InputError(f"--threshold must be in (0, 1], got {args.threshold}")
    calls = [r for r in _read(args.records) if isinstance(r, CallRecord)]
    if not calls:
        raise InputError(f"{args.records}: no call records")
    by_rank: dict[int, list[CallRecord]] = {}
    for r in calls:
        by_rank.setdefault(r.rank, []).append(r)
    for rank, recs in sorted(by_rank.items()):
        ts = np.array([r.ts for r in recs])
        order = np.argsort(ts, kind="stable")
        enc = CallEncoder()
        codes = enc.encode([(recs[i].type, recs[i].size) for i in order])
        its = iteration_times(ts[order], codes, window=args.window, threshold=args.threshold)
        per = its.per_iteration()
        row: dict[str, Any] = {
            "rank": rank, "calls": len(recs), "iterations": int(per.size),
            "periods_calls": sorted({int(p) for p in its.period}),
            "median_s": float(np.median(per)) if per.size else None,
            "mean_s": float(per.mean()) if per.size else None,
        }
        if args.all:
            row["iteration_s"] = [round(float(x), 9) for x in per]
        print(json.dumps(row))
    return 0


# -- detect matrix ------------------------------------------------------------------------------
def _matrix(args: argparse.Namespace) -> int:
    from stragglers.detect.matrix import classify_matrix, delay_matrix, late_senders
    from stragglers.detect.records import MessageRecord

    msgs = [r for r in _read(args.records) if isinstance(r, MessageRecord)]
    if not msgs:
        raise InputError(f"{args.records}: no message records (fields src, dst, latency)")
    try:
        m = delay_matrix([r.src for r in msgs], [r.dst for r in msgs],
                         [r.latency for r in msgs], args.ranks)
    except ValueError as exc:
        raise InputError(f"{args.records}: {exc}") from None
    waits = [r for r in msgs if r.wait is not None]
    res: dict[str, Any] = {
        "ranks": int(m.shape[0]),
        "median_latency_s": float(np.nanmedian(m)) if np.isfinite(m).any() else None,
        "findings": [f.to_dict() for f in classify_matrix(m, args.factor)],
        "late_senders": [f.to_dict() for f in late_senders(
            [r.src for r in waits], [r.dst for r in waits], [float(r.wait or 0.0) for r in waits])],
    }
    if args.show:
        res["matrix"] = [[None if math.isnan(v) else v for v in row] for row in m.tolist()]
    print(json.dumps(res, indent=2))
    return 0


# -- detect hang --------------------------------------------------------------------------------
def _hang(args: argparse.Namespace) -> int:
    from stragglers.detect.hang import LastOp, Topology, localize_hang

    try:
        topo = Topology(dp=args.dp, pp=args.pp, tp=args.tp)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    ops: dict[int, LastOp] = {}
    path = Path(args.records)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    for i, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path}:{i}"
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object")
        for key in ("rank", "op", "group"):
            if key not in obj:
                raise InputError(f"{where}: field '{key}': missing")
        rank = obj["rank"]
        if not isinstance(rank, int) or not 0 <= rank < topo.size:
            raise InputError(f"{where}: field 'rank': expected 0..{topo.size - 1}, got {rank!r}")
        if obj["group"] not in ("tp", "dp", "pp"):
            raise InputError(f"{where}: field 'group': expected tp, dp or pp, got "
                             f"{obj['group']!r}")
        peer = obj.get("peer")
        if peer is not None and (not isinstance(peer, int) or not 0 <= peer < topo.size):
            raise InputError(f"{where}: field 'peer': expected 0..{topo.size - 1}, got {peer!r}")
        if rank in ops:
            raise InputError(f"{where}: field 'rank': rank {rank} appears twice")
        ops[rank] = LastOp(op=str(obj["op"]), group=obj["group"], peer=peer, seq=obj.get("seq"))
    diag = localize_hang(topo, ops)
    if args.json:
        print(json.dumps(diag.to_dict(), indent=2))
        return 0
    print(f"topology dp={topo.dp} pp={topo.pp} tp={topo.tp}: {len(ops)} ranks logged, "
          f"{len(diag.silent)} silent {list(diag.silent)}")
    if not diag.suspects:
        print("no suspect: nobody waits for a silent rank or a stuck group")
    for s in diag.suspects:
        print(f"suspect {list(s.ranks)} [{s.kind}], waited on by {s.waited_on_by} ranks: "
              f"{s.reason}")
    return 0


# -- detect plan --------------------------------------------------------------------------------
def _plan(args: argparse.Namespace) -> int:
    from stragglers.detect.validation_plan import (
        check_plan,
        ring_edges,
        ring_passes,
        tree_edges,
        tree_passes,
    )

    if args.ranks is not None:
        try:
            listed = [int(x) for x in args.ranks.split(",") if x.strip()]
        except ValueError:
            raise InputError(
                f"--ranks: expected comma-separated integers, got {args.ranks!r}"
            ) from None
        if args.size is not None and args.size != len(listed):
            raise InputError(f"size {args.size} does not match --ranks ({len(listed)} ranks)")
        order: list[int] | int = listed
    elif args.size is None:
        raise InputError("give the number of ranks or --ranks")
    else:
        order = args.size
    try:
        if args.topology == "ring":
            passes = ring_passes(order, args.bidirectional)
            edges = ring_edges(order)
        else:
            passes = tree_passes(order, args.bidirectional)
            edges = tree_edges(order)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    required = edges + ([(b, a) for a, b in edges] if args.bidirectional else [])
    problems = check_plan(passes, required)
    if problems:  # pragma: no cover - the planner is verified by the tests
        raise InputError("invalid plan: " + "; ".join(problems))
    if args.json:
        print(json.dumps({"topology": args.topology, "passes": passes}))
        return 0
    for k, p in enumerate(passes, start=1):
        body = ", ".join(f"{a}->{b}" for a, b in p) or "(none)"
        print(f"pass {k}: {body}")
    return 0
