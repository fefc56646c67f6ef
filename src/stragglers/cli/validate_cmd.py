"""``stragglers validate ring|tree``: executed validation passes (:mod:`stragglers.validate`)."""

from __future__ import annotations

import argparse
import json

from stragglers import options
from stragglers.errors import InputError
from stragglers.limits import check_limit


def _rank_value(text: str) -> tuple[int, float]:
    """``RANK:VALUE`` with a rank >= 0 and a value > 0."""
    rank, value = options._pair(text, ":", "RANK:VALUE")
    return (int(options._part(options.non_negative_int, rank, "rank", text)),
            float(options._part(options.positive_float, value, "value", text)))


def _gemm_factor(text: str) -> tuple[int, float]:
    rank, fac = options._pair(text, ":", "RANK:FACTOR")
    return (int(options._part(options.non_negative_int, rank, "rank", text)),
            float(options._part(options.slowdown_factor, fac, "factor", text)))


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
    p.add_argument("--inject-slow-link", type=_rank_value, default=None, metavar="RANK:MBPS",
                   help="evaluation: cap RANK's sends at MBPS megabytes per second")
    p.add_argument("--inject-slow-gemm", type=_gemm_factor, default=None, metavar="RANK:FACTOR",
                   help="evaluation: make RANK's GEMMs FACTOR times as long")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_validate)


def parse_ranks(text: str) -> tuple[int, ...]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise InputError("--ranks: expected a number of ranks or a comma-separated order")
    check_limit("validate_ranks", len(items) if len(items) > 1 else 1, "--ranks")
    try:
        values = [int(x) for x in items]
    except ValueError:
        raise InputError(f"--ranks: expected integers, got {text[:60]!r}") from None
    if len(values) == 1:
        n = values[0]
        if n < 2:
            raise InputError(f"--ranks: a communicator needs at least 2 ranks, got {n}")
        check_limit("validate_ranks", n, "--ranks")
        return tuple(range(n))
    if min(values) < 0:
        raise InputError(f"--ranks: ranks must be >= 0, got {min(values)}")
    if len(set(values)) != len(values):
        raise InputError("--ranks: a rank appears twice")
    check_limit("validate_ranks", max(values) + 1, f"--ranks (largest rank {max(values)})")
    return tuple(values)


def _validate(args: argparse.Namespace) -> int:
    from stragglers.cli.detect_cmd import _Output
    from stragglers.validate.compare import evaluate_run, format_report
    from stragglers.validate.executed import ValidationConfig, run_validation

    order = parse_ranks(args.ranks)
    world = max(order) + 1
    for opt, inj in (("--inject-slow-link", args.inject_slow_link),
                     ("--inject-slow-gemm", args.inject_slow_gemm)):
        if inj is not None and inj[0] >= world:
            raise InputError(f"{opt}: rank {inj[0]} is not one of the {world} ranks")
    if args.chunks > args.bytes // 4:
        raise InputError(f"--chunks: {args.chunks} chunks of a {args.bytes}-byte transfer are "
                         "smaller than one float32")
    check_limit("validate_bytes", args.bytes, "--bytes")
    check_limit("validate_bytes", 4 * args.gemm_n ** 2, f"--gemm-n {args.gemm_n}")
    if args.backend == "nccl":
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() < world:
            raise InputError(f"--backend nccl: needs {world} GPUs, "
                             f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} "
                             "available")
    cfg = ValidationConfig(args.topology, order, world, transfer_bytes=args.bytes,
                           chunks=args.chunks, repeats=args.repeats, gemm_n=args.gemm_n,
                           gemm_iters=args.gemm_iters, bidirectional=args.bidirectional,
                           slow_link=args.inject_slow_link, slow_gemm=args.inject_slow_gemm,
                           backend=args.backend)
    report = evaluate_run(run_validation(cfg), factor=args.factor)
    out = _Output()
    if args.json:
        out.write(json.dumps(report.to_dict(), indent=1) + "\n")
    else:
        out.write(format_report(report) + "\n")
    return 0
