"""``stragglers validate ring|tree``: executed validation passes (:mod:`stragglers.validate`)."""

from __future__ import annotations

import argparse
import json

from stragglers import options


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "validate", help="run ring/tree validation passes and a GEMM test on local ranks",
        description=(
            "Spawn one process per rank, run the planned disjoint P2P passes of a ring or a "
            "binary tree (stragglers detect plan) as real timed transfers over "
            "torch.distributed (gloo on CPU, NCCL when every rank has its own GPU) and a GEMM "
            "test on every rank, and report each link's bandwidth and each rank's GEMM "
            "throughput against the group median; links and ranks below median / --factor "
            "are flagged. Each is measured --repeats times and the best repeat counts (noise "
            "only adds time)."),
    )
    p.add_argument("topology", choices=("ring", "tree"))
    p.add_argument("--ranks", required=True,
                   help="number of ranks, or their comma-separated ring / heap order "
                        "(processes 0..max are started)")
    p.add_argument("--bytes", type=options.positive_int, default=4 << 20,
                   help="bytes per transfer (default 4 MiB)")
    p.add_argument("--chunks", type=options.positive_int, default=8,
                   help="sends per transfer (default 8)")
    p.add_argument("--repeats", type=options.positive_int, default=5,
                   help="measurements per link and rank (default 5)")
    p.add_argument("--gemm-n", type=options.positive_int, default=256,
                   help="GEMM matrix size (default 256)")
    p.add_argument("--gemm-iters", type=options.positive_int, default=8,
                   help="GEMMs per measurement (default 8)")
    p.add_argument("--factor", type=options.slowdown_factor, default=3.0,
                   help="flag below median / factor (default 3)")
    p.add_argument("--bidirectional", action="store_true", help="also the reverse directions")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    p.add_argument("--inject-slow-link", type=options.rank_value, default=None,
                   metavar="RANK:MBPS",
                   help="evaluation: cap RANK's sends at MBPS megabytes per second")
    p.add_argument("--inject-slow-gemm", type=options.rank_factor, default=None,
                   metavar="RANK:FACTOR",
                   help="evaluation: make RANK's GEMMs FACTOR times as long")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_validate)


def _validate(args: argparse.Namespace) -> int:
    from stragglers.jsonout import Output
    from stragglers.validate.compare import evaluate_run, format_report
    from stragglers.validate.executed import checked_config, run_validation

    cfg = checked_config(args.topology, args.ranks, transfer_bytes=args.bytes,
                         chunks=args.chunks, repeats=args.repeats, gemm_n=args.gemm_n,
                         gemm_iters=args.gemm_iters, bidirectional=args.bidirectional,
                         slow_link=args.inject_slow_link, slow_gemm=args.inject_slow_gemm,
                         backend=args.backend)
    report = evaluate_run(run_validation(cfg), factor=args.factor)
    out = Output()
    if args.json:
        out.write(json.dumps(report.to_dict(), indent=1) + "\n")
    else:
        out.write(format_report(report) + "\n")
    return 0
