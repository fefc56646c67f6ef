"""``stragglers mitigate ...``: what to do about stragglers (:mod:`stragglers.mitigate`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from stragglers.options import (
    cost_coefficients,
    nice_increment,
    non_negative_int,
    positive_float,
    positive_int,
    rank_list,
    rank_pair,
)

# the libraries (numpy, scipy, the simulator) are imported by the commands that use them
# (start-up of every other command)

MICROBATCH_EPILOG = """\
examples:
  stragglers mitigate microbatch --times 1,1,1,2 --microbatches 16
  stragglers mitigate microbatch --times @times.txt --microbatches 4096 --json
@FILE holds the times separated by commas, spaces or newlines. The assignment minimises the
slowest group's time max m_i*t_i (then the spread max - min); it is provably optimal.
"""

PLAN_EPILOG = """\
examples:
  stragglers watch iters.jsonl --once > events.jsonl
  stragglers mitigate plan events.jsonl --meta meta.yaml --json
  stragglers mitigate plan events.jsonl --meta meta.yaml --costs costs.yaml
costs.yaml changes the defaults per strategy, e.g.  S2: {overhead_s: 2}  S4: {enabled: false}
(defaults: S1 ignore 0 s, S2 microbatch 5 s, S3 topology 60 s, S4 restart 1800 s).
"""

RUN_EPILOG = """\
example (the job polls the action file the controller writes):
  stragglers probe example --out-dir runs/ex --steps 400 --action-file runs/ex.action.json &
  stragglers mitigate run runs/ex --action runs/ex.action.json --costs costs.yaml > live.jsonl
Prints one JSON record per line (record: watch | decision | action | recovery | end) and
exits 0 when the job has written its final worker records.
"""


class _Result(Protocol):
    def to_dict(self) -> Mapping[str, object]: ...

    def summary(self) -> str: ...


def _print(result: _Result, as_json: bool) -> int:
    """Print ``result`` as one JSON object or as its summary."""
    print(json.dumps(result.to_dict()) if as_json else result.summary())
    return 0


def _microbatch(args: argparse.Namespace) -> int:
    from stragglers.mitigate.microbatch import assign_times

    return _print(assign_times(args.times, args.microbatches), args.json)


def _plan(args: argparse.Namespace) -> int:
    from stragglers.mitigate.planner import plan_files

    return _print(plan_files(args.events, args.meta, args.costs, args.microbatches,
                             args.trace), args.json)


def _topology(args: argparse.Namespace) -> int:
    from stragglers.mitigate.topology import plan_topology

    return _print(plan_topology(args.meta, args.slow_ranks, args.slow_link), args.json)


def _predict(args: argparse.Namespace) -> int:
    from stragglers.mitigate.predict import predict_trace

    return _print(predict_trace(args.trace, args.meta, args.steps, args.slow_ranks), args.json)


def _fit_cost(args: argparse.Namespace) -> int:
    from stragglers.mitigate.seqlen import fit_files

    return _print(fit_files(args.trace, args.lengths, args.stage), args.json)


def _rebalance(args: argparse.Namespace) -> int:
    from stragglers.mitigate.seqlen import CostModel, rebalance_lengths

    return _print(rebalance_lengths(args.lengths, CostModel(*args.model), args.dp,
                                    args.microbatches, args.max_tokens), args.json)


def _run(args: argparse.Namespace) -> int:
    from stragglers.mitigate.costs import load_costs
    from stragglers.mitigate.live import LiveConfig, run_live

    cfg = LiveConfig(job_dir=Path(args.job_dir), action_path=Path(args.action),
                     strategies=load_costs(args.costs), warmup_iters=args.warmup,
                     window=args.window, poll_s=args.poll, idle_timeout_s=args.idle_timeout,
                     force=args.force, nice=args.nice,
                     keep_off_job_cpus=not args.share_job_cpus)

    def emit(record: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()

    run_live(cfg, emit)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    m = subparsers.add_parser(
        "mitigate", help="what to do about stragglers: S2 assignment, plans",
        description="Mitigation (Falcon-Mitigate, issue 11).")
    msub = m.add_subparsers(dest="mitigate_command", metavar="TOOL")
    msub.required = True

    mb = msub.add_parser(
        "microbatch", help="S2: the optimal micro-batch count per DP group",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=MICROBATCH_EPILOG,
        description="Given each DP group's time per micro-batch, split M micro-batches "
                    "(each group >= 1) to minimise the step time of the slowest group.")
    mb.add_argument("--times", required=True, metavar="T1,T2,...|@FILE",
                    help="seconds per micro-batch of each DP group")
    mb.add_argument("--microbatches", required=True, type=positive_int, metavar="M",
                    help="micro-batches of one global batch (>= number of groups)")
    mb.add_argument("--json", action="store_true",
                    help='print {"assignment", "makespan", "spread", "solve_s"}')
    mb.set_defaults(func=_microbatch)

    pl = msub.add_parser(
        "plan", help="the ski-rental mitigation plan for watch events",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=PLAN_EPILOG,
        description="Falcon's Algorithm 1 over `stragglers watch` events: escalate S1 -> S2 "
                    "-> S3 -> S4 when the accumulated slowdown reaches each overhead.")
    pl.add_argument("events", metavar="EVENTS.jsonl", help="the output of `stragglers watch`")
    pl.add_argument("--meta", required=True, help="job metadata (dp_size, pp_size, ...)")
    pl.add_argument("--costs", help="YAML file changing the strategies' overheads")
    pl.add_argument("--microbatches", type=positive_int, default=8, metavar="N",
                    help="micro-batches per DP group per step (for S2; default %(default)s)")
    pl.add_argument("--trace", help="the job's trace (with --meta): add the what-if "
                                    "prediction of each S2 / S3 decision")
    pl.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    pl.set_defaults(func=_plan)

    tp = msub.add_parser(
        "topology", help="S3: consolidate slow workers, or move a slow link onto a PP edge",
        description="A worker permutation to apply at restart: slow workers packed into the "
                    "fewest stages (interior first), or a slow DP link made a PP link.")
    tp.add_argument("--meta", required=True, help="job metadata (dp_size, pp_size, tp_size)")
    what = tp.add_mutually_exclusive_group(required=True)
    what.add_argument("--slow-ranks", type=rank_list, metavar="R1,R2,...",
                      help="ranks of slow workers")
    what.add_argument("--slow-link", type=rank_pair, metavar="A,B",
                      help="the two ranks of a slow link")
    tp.add_argument("--json", action="store_true",
                    help="print moves, worker_position and rank_permutation as JSON")
    tp.set_defaults(func=_topology)

    pr = msub.add_parser(
        "predict", help="the step time after S2 or S3, predicted from the job's own trace",
        description="Simulate the job's trace with the S2 assignment (default) or the S3 "
                    "consolidation of --slow-ranks applied, with the what-if simulator.")
    pr.add_argument("trace", help="trace (parquet or JSON lines)")
    pr.add_argument("--meta", required=True, help="job metadata")
    pr.add_argument("--steps", help="step range A:B of the trace to use")
    pr.add_argument("--slow-ranks", type=rank_list, metavar="R1,R2,...",
                    help="predict the consolidation of these ranks instead of S2")
    pr.add_argument("--json", action="store_true", help="print the prediction as JSON")
    pr.set_defaults(func=_predict)

    fc = msub.add_parser(
        "fit-cost", help="fit micro-batch compute = a*sum L^2 + b*sum L + c from a trace",
        description="Least-squares fit of each micro-batch's forward + backward compute on "
                    "one stage to the lengths of its sequences.")
    fc.add_argument("trace", help="trace (parquet or JSON lines)")
    fc.add_argument("--lengths", required=True, metavar="LENGTHS.jsonl",
                    help='lines {"step", "dp_rank", "mb", "lengths": [L1, ...]}')
    fc.add_argument("--stage", type=non_negative_int, default=0,
                    help="pipeline stage whose computes are fitted (default %(default)s; the "
                         "study used the second, away from the embedding and the loss)")
    fc.add_argument("--json", action="store_true", help="print {a, b, c, r2, ...}")
    fc.set_defaults(func=_fit_cost)

    rn = msub.add_parser(
        "run", help="the live loop beside a running example job: detect, plan, act (S2)",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=RUN_EPILOG,
        description="Follow the example job's probe files, detect fail-slow ranks (watch), "
                    "plan (Falcon's ski-rental rule) and apply S2 micro-batch assignments "
                    "through the action file the job polls (--action-file).")
    rn.add_argument("job_dir", metavar="JOB_DIR", help="the job's --out-dir")
    rn.add_argument("--action", required=True, metavar="FILE",
                    help="the action file (the job's --action-file); written atomically")
    rn.add_argument("--costs", help="YAML file changing the strategies' overheads")
    rn.add_argument("--warmup", type=non_negative_int, default=10, metavar="N",
                    help="steps of warm-up before detection (default %(default)s)")
    rn.add_argument("--window", type=positive_int, default=10, metavar="N",
                    help="last complete steps over which the rebalancer measures each "
                         "replica's micro-batch time (outliers rejected; after a level shift "
                         "only the steps since) (default %(default)s)")
    rn.add_argument("--poll", type=positive_float, default=0.25, metavar="S",
                    help="seconds between polls of the probe files (default %(default)s)")
    rn.add_argument("--idle-timeout", type=positive_float, default=120.0, metavar="S",
                    help="give up (exit 2) after this long without new probe records "
                         "(default %(default)s)")
    rn.add_argument("--force", action="store_true",
                    help="overwrite an existing action file (its seq is continued)")
    rn.add_argument("--nice", type=nice_increment, default=10, metavar="N",
                    help="run the loop N steps lower in scheduling priority (nice, up to 19) "
                         "so that it yields to the job's ranks; 0 leaves it (default "
                         "%(default)s)")
    rn.add_argument("--share-job-cpus", action="store_true",
                    help="stay on the CPUs the job's ranks are pinned to (by default the "
                         "loop moves to this host's other CPUs when there are any)")
    rn.set_defaults(func=_run)

    rb = msub.add_parser(
        "rebalance", help="split a global batch's sequences evenly by modelled cost",
        description="Greedy largest-first partitioning of sequences across DP ranks, then "
                    "across each rank's micro-batches, by cost a*L^2 + b*L (+ c per "
                    "micro-batch).")
    rb.add_argument("--lengths", required=True, metavar="L1,L2,...|@FILE",
                    help="sequence lengths of the global batch")
    rb.add_argument("--model", required=True, type=cost_coefficients, metavar="A,B,C",
                    help="the cost model")
    rb.add_argument("--dp", required=True, type=positive_int, help="DP ranks")
    rb.add_argument("--microbatches", required=True, type=positive_int,
                    help="micro-batches per DP rank")
    rb.add_argument("--max-tokens", type=positive_float, metavar="N",
                    help="token budget of one micro-batch")
    rb.add_argument("--json", action="store_true",
                    help="print the batches (sequence indices per rank per micro-batch)")
    rb.set_defaults(func=_rebalance)
