"""``stragglers mitigate ...``: what to do about stragglers (:mod:`stragglers.mitigate`)."""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import replace
from typing import TYPE_CHECKING

from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.options import non_negative_int, positive_float, positive_int

if TYPE_CHECKING:  # the libraries are imported by the commands that use them (start-up)
    import numpy as np

    from stragglers.mitigate.planner import Plan
    from stragglers.mitigate.seqlen import CostModel

MICROBATCH_EPILOG = """\
examples:
  stragglers mitigate microbatch --times 1,1,1,2 --microbatches 16
  stragglers mitigate microbatch --times @times.txt --microbatches 4096 --json
@FILE holds the times separated by commas, spaces or newlines. The assignment minimises the
slowest group's time max m_i*t_i (then the spread max - min); it is provably optimal.
"""

_SEP = re.compile(r"[,\s]+")


def parse_times(text: str, what: str = "time", limit_name: str = "mitigate_groups"
                ) -> tuple[np.ndarray, str]:
    """The numbers of ``--times`` (or ``--lengths``): ``x1,x2,...`` or ``@FILE``; and their
    source."""
    import numpy as np

    from stragglers.inputs import read_text

    option = f"--{what}s"
    if text.startswith("@"):
        path = text[1:]
        body = read_text(path, f"{what}s file")
        source = path
    else:
        body, source = text, option
    values: list[float] = []
    for lineno, line in enumerate(body.splitlines() or [""], start=1):
        tokens = [tok for tok in _SEP.split(line.strip()) if tok]
        check_limit(limit_name, len(values) + len(tokens), source)
        for tok in tokens:
            where = f"{source}: line {lineno}" if source != option else source
            try:
                value = float(tok)
            except ValueError:
                raise InputError(f"{where}: {what} {len(values) + 1} {tok[:40]!r} is not a "
                                 "number") from None
            if not math.isfinite(value) or value <= 0:
                raise InputError(f"{where}: {what} {len(values) + 1} {tok[:40]!r} must be a "
                                 "finite number > 0")
            values.append(value)
    return np.asarray(values, dtype=np.float64), source


def _microbatch(args: argparse.Namespace) -> int:
    from stragglers.mitigate.microbatch import solve_microbatches

    times, source = parse_times(args.times)
    res = solve_microbatches(times, args.microbatches, source=source)
    if args.json:
        print(json.dumps(res.to_dict()))
        return 0
    even = args.microbatches / times.size
    print(f"{times.size} DP groups, {args.microbatches} micro-batches: makespan "
          f"{res.makespan:.6g} s (even split: {even * times.max():.6g} s or more), spread "
          f"{res.spread:.6g} s, solved in {res.solve_s * 1e3:.3f} ms")
    print("assignment: " + ",".join(str(int(m)) for m in res.assignment))
    return 0


PLAN_EPILOG = """\
examples:
  stragglers watch iters.jsonl --once > events.jsonl
  stragglers mitigate plan events.jsonl --meta meta.yaml --json
  stragglers mitigate plan events.jsonl --meta meta.yaml --costs costs.yaml
costs.yaml changes the defaults per strategy, e.g.  S2: {overhead_s: 2}  S4: {enabled: false}
(defaults: S1 ignore 0 s, S2 microbatch 5 s, S3 topology 60 s, S4 restart 1800 s).
"""


def _predict_decisions(plan: Plan, trace: str, meta: str) -> None:
    """Add the what-if prediction from the job's trace to each S2 / S3 decision."""
    from stragglers.analysis.engine import prepare
    from stragglers.analysis.runner import load_table
    from stragglers.mitigate.predict import predict_decision

    engine = prepare(load_table(trace, meta))
    for ep in plan.episodes:
        for i, d in enumerate(ep.decisions):
            pred = predict_decision(engine, d)
            if pred is not None:
                ep.decisions[i] = replace(d, details={**d.details, "whatif": pred.to_dict()})


def _plan(args: argparse.Namespace) -> int:
    from stragglers.mitigate.costs import load_costs
    from stragglers.mitigate.events import read_events
    from stragglers.mitigate.planner import plan_mitigation
    from stragglers.trace.io import read_meta

    meta = read_meta(args.meta)
    strategies = load_costs(args.costs)
    stream = read_events(args.events)
    plan = plan_mitigation(stream, meta, strategies, microbatches=args.microbatches,
                           source=args.events)
    if args.trace is not None:
        _predict_decisions(plan, args.trace, args.meta)
    if args.json:
        print(json.dumps(plan.to_dict()))
        return 0
    print(f"{len(plan.episodes)} fail-slow episode(s), {len(plan.decisions)} decision(s), "
          f"events up to iteration {plan.end_iteration}")
    for i, ep in enumerate(plan.episodes):
        end = "end of input" if ep.end is None else ep.end
        print(f"episode {i}: iterations {ep.start}..{end}, {ep.root_cause}, ranks "
              f"{sorted(ep.ranks)}, accumulated slowdown {ep.impact_s:.6g} s")
        for d in ep.decisions:
            print(f"  iteration {d.iteration}: {d.strategy} {d.action}: expected gain "
                  f"{d.expected_gain_s_per_iter:.6g} s/iter (step {d.expected_step_s:.6g} s); "
                  f"{d.why}")
            if "whatif" in d.details:
                w = d.details["whatif"]
                print(f"    what-if from the trace: step {w['before_s']:.6g} s -> "
                      f"{w['after_s']:.6g} s ({w['gain'] * 100:.1f}% saved)")
        for sk in ep.skipped:
            print(f"  {sk['strategy']} skipped: {sk['why']}")
    if plan.ignored_events:
        print("events not used: " + ", ".join(f"{k} {v}" for k, v in
                                               plan.ignored_events.items()))
    return 0


def _rank_list(text: str, option: str) -> list[int]:
    out = []
    for i, tok in enumerate(t for t in text.split(",") if t.strip()):
        try:
            out.append(int(tok))
        except ValueError:
            raise InputError(f"{option}: rank {i + 1} {tok[:40]!r} is not an integer") from None
    return out


def _topology(args: argparse.Namespace) -> int:
    from stragglers.mitigate.topology import consolidate, reassign_link
    from stragglers.trace.io import read_meta

    meta = read_meta(args.meta)
    if args.slow_ranks is not None:
        check_limit("topology_ranks", args.slow_ranks.count(",") + 1, "--slow-ranks")
        plan = consolidate(meta, _rank_list(args.slow_ranks, "--slow-ranks"))
    else:
        pair = _rank_list(args.slow_link, "--slow-link")
        if len(pair) != 2:
            raise InputError(f"--slow-link: expected two ranks A,B, got {len(pair)}")
        plan = reassign_link(meta, pair[0], pair[1])
    if args.json:
        print(json.dumps(plan.to_dict()))
        return 0
    print(plan.note)
    for mv in plan.moves:
        print(f"  worker {mv['worker']}: (dp {mv['from'][0]}, stage {mv['from'][1]}) -> "
              f"(dp {mv['to'][0]}, stage {mv['to'][1]})")
    return 0


def _predict(args: argparse.Namespace) -> int:
    from stragglers.analysis.engine import prepare
    from stragglers.analysis.runner import load_table
    from stragglers.mitigate.predict import predict_microbatch, predict_permutation
    from stragglers.mitigate.topology import consolidate

    table = load_table(args.trace, args.meta, args.steps)
    engine = prepare(table)
    if args.slow_ranks is not None:
        check_limit("topology_ranks", args.slow_ranks.count(",") + 1, "--slow-ranks")
        plan = consolidate(table.meta, _rank_list(args.slow_ranks, "--slow-ranks"))
        pred = predict_permutation(engine, plan)
    else:
        pred = predict_microbatch(engine)
    if args.json:
        print(json.dumps(pred.to_dict()))
        return 0
    print(f"{pred.action}: mean step time {pred.before_s:.6g} s -> {pred.after_s:.6g} s "
          f"predicted ({pred.gain * 100:.1f}% saved; no-delay timeline)")
    if "assignment" in pred.details:
        print("assignment: " + ",".join(str(m) for m in pred.details["assignment"]))
    for mv in pred.details.get("moves", []):
        print(f"  worker {mv['worker']}: (dp {mv['from'][0]}, stage {mv['from'][1]}) -> "
              f"(dp {mv['to'][0]}, stage {mv['to'][1]})")
    return 0


def _fit_cost(args: argparse.Namespace) -> int:
    from stragglers.mitigate.lengths import read_lengths
    from stragglers.mitigate.seqlen import fit_from_trace
    from stragglers.trace.io import read_trace

    lengths = read_lengths(args.lengths)
    fit = fit_from_trace(read_trace(args.trace), lengths, args.stage)
    if args.json:
        print(json.dumps(fit.to_dict()))
        return 0
    m = fit.model
    print(f"micro-batch compute = {m.a:.6g} * sum L^2 + {m.b:.6g} * sum L + {m.c:.6g} s "
          f"(R^2 {m.r2:.4f}, {fit.microbatches} micro-batches of stage {args.stage})")
    if fit.trace_only or fit.lengths_only:
        print(f"not matched: {fit.trace_only} micro-batches of the trace without lengths, "
              f"{fit.lengths_only} lengths without a micro-batch in the trace")
    return 0


def _model(text: str) -> CostModel:
    parts = text.split(",")
    if len(parts) != 3:
        raise InputError(f"--model: expected A,B,C (three numbers), got {text[:60]!r}")
    vals = []
    for name, tok in zip("abc", parts, strict=True):
        try:
            v = float(tok)
        except ValueError:
            raise InputError(f"--model: {name} {tok[:40]!r} is not a number") from None
        if not math.isfinite(v) or v < 0:
            raise InputError(f"--model: {name} must be a finite number >= 0, got {tok[:40]!r}")
        vals.append(v)
    if vals[0] == 0 and vals[1] == 0:
        raise InputError("--model: a and b are both 0: every sequence would cost nothing")
    from stragglers.mitigate.seqlen import CostModel

    return CostModel(vals[0], vals[1], vals[2])


def _rebalance(args: argparse.Namespace) -> int:
    from stragglers.mitigate.seqlen import in_order, rebalance

    lengths, source = parse_times(args.lengths, what="length", limit_name="seqlen_sequences")
    model = _model(args.model)
    part = rebalance(lengths, model, args.dp, args.microbatches, args.max_tokens)
    base = in_order(lengths, model, args.dp, args.microbatches)
    if args.json:
        print(json.dumps({"batches": [[m.tolist() for m in r] for r in part.batches],
                          "rank_cost": part.rank_cost.tolist(), "makespan": part.makespan,
                          "in_order_makespan": base.makespan}))
        return 0
    print(f"{lengths.size} sequences over {args.dp} DP ranks x {args.microbatches} "
          f"micro-batches: slowest rank {part.makespan:.6g} s (in order: "
          f"{base.makespan:.6g} s; mean {part.rank_cost.mean():.6g} s)")
    return 0


RUN_EPILOG = """\
example (the job polls the action file the controller writes):
  stragglers probe example --out-dir runs/ex --steps 400 --action-file runs/ex.action.json &
  stragglers mitigate run runs/ex --action runs/ex.action.json --costs costs.yaml > live.jsonl
Prints one JSON record per line (record: watch | decision | action | recovery | end) and
exits 0 when the job has written its final worker records.
"""


def _run(args: argparse.Namespace) -> int:
    import sys
    from pathlib import Path

    from stragglers.mitigate.costs import load_costs
    from stragglers.mitigate.live import LiveConfig, run_live

    cfg = LiveConfig(job_dir=Path(args.job_dir), action_path=Path(args.action),
                     strategies=load_costs(args.costs), warmup_iters=args.warmup,
                     window=args.window, poll_s=args.poll, idle_timeout_s=args.idle_timeout,
                     force=args.force)

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
    what.add_argument("--slow-ranks", metavar="R1,R2,...", help="ranks of slow workers")
    what.add_argument("--slow-link", metavar="A,B", help="the two ranks of a slow link")
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
    pr.add_argument("--slow-ranks", metavar="R1,R2,...",
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
                    help="last complete steps over which micro-batch times are measured, "
                         "none before the latest change detected (default %(default)s)")
    rn.add_argument("--poll", type=positive_float, default=0.25, metavar="S",
                    help="seconds between polls of the probe files (default %(default)s)")
    rn.add_argument("--idle-timeout", type=positive_float, default=120.0, metavar="S",
                    help="give up (exit 2) after this long without new probe records "
                         "(default %(default)s)")
    rn.add_argument("--force", action="store_true",
                    help="overwrite an existing action file (its seq is continued)")
    rn.set_defaults(func=_run)

    rb = msub.add_parser(
        "rebalance", help="split a global batch's sequences evenly by modelled cost",
        description="Greedy largest-first partitioning of sequences across DP ranks, then "
                    "across each rank's micro-batches, by cost a*L^2 + b*L (+ c per "
                    "micro-batch).")
    rb.add_argument("--lengths", required=True, metavar="L1,L2,...|@FILE",
                    help="sequence lengths of the global batch")
    rb.add_argument("--model", required=True, metavar="A,B,C", help="the cost model")
    rb.add_argument("--dp", required=True, type=positive_int, help="DP ranks")
    rb.add_argument("--microbatches", required=True, type=positive_int,
                    help="micro-batches per DP rank")
    rb.add_argument("--max-tokens", type=positive_float, metavar="N",
                    help="token budget of one micro-batch")
    rb.add_argument("--json", action="store_true",
                    help="print the batches (sequence indices per rank per micro-batch)")
    rb.set_defaults(func=_rebalance)
