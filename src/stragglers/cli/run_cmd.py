"""``stragglers run``: the robust-training driver (:mod:`stragglers.recover.driver`)."""

from __future__ import annotations

import argparse
import json
import sys

from stragglers import options


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run", help="launch a training command on N slots, recover from hangs and crashes",
        description=(
            "Launch COMMAND once per rank, each on a slot (RANK, LOCAL_RANK, WORLD_SIZE, "
            "MASTER_ADDR/PORT, STRAGGLERS_* set; --world: ranks per attempt, the other slots "
            "are spares), watch the heartbeats the ranks send through "
            "stragglers.recover.heartbeat, "
            "detect a hang (no step progress for --timeout-s) or a crashed rank, localise the "
            "culprit, exclude its slot (a spare takes over its rank with --world, else one rank "
            "fewer) and restart from the latest checkpoint in --ckpt (the example job's "
            "'latest' marker, or ckpt-<step>.pt). "
            "Prints each incident as a JSON line; writes OUT/incidents.jsonl and the ranks' "
            "logs. Exit 0 when the job finished, 1 when it could not be recovered."),
    )
    p.add_argument("--slots", type=options.positive_int, required=True,
                   help="processes (machines/GPUs) to start with")
    p.add_argument("--world", type=options.positive_int, default=None,
                   help="ranks per attempt, for a job of fixed size such as the example "
                        "job's dp x pp (default: every slot in service, one rank fewer after "
                        "each exclusion); the other slots are spares")
    p.add_argument("--heartbeat-s", type=options.positive_float, default=0.5,
                   help="heartbeat interval of the ranks (default 0.5)")
    p.add_argument("--timeout-s", type=options.positive_float, default=30.0,
                   help="a hang: no rank advanced its step for this long (default 30)")
    p.add_argument("--startup-timeout-s", type=options.positive_float, default=300.0,
                   help="time for every rank to begin its first step (default 300)")
    p.add_argument("--ckpt", required=True,
                   help="checkpoint folder (the example job's --ckpt-dir, or ckpt-<step>.pt)")
    p.add_argument("--out", required=True, help="folder for incidents.jsonl and rank logs")
    p.add_argument("--max-restarts", type=options.non_negative_int, default=3)
    p.add_argument("--pp", type=options.positive_int, default=1,
                   help="pipeline-parallel size of the job (default 1)")
    p.add_argument("--tp", type=options.positive_int, default=1,
                   help="tensor-parallel size of the job (default 1)")
    p.add_argument("--validate", action="store_true",
                   help="after an incident, run ring validation passes and the GEMM test over "
                        "the slots (stragglers validate) and add the flags to the incident")
    p.add_argument("train_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="-- then the training command")
    p.set_defaults(func=_run)
    _register_guard(subparsers)


def _register_guard(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "guard", help="beside torchrun, one per node: hangs, crash blame, leave the job",
        description=(
            "Run COMMAND (a node's launcher: torchrun with a c10d rendezvous, --nnodes MIN:MAX, "
            "--max-restarts) under a guard, one per node, all sharing --run-dir. The workers "
            "beat through stragglers.recover.heartbeat; the guards detect a hang (no step "
            "progress for --timeout-s) and localise it, blame the rank that failed first in a "
            "crash, and take the culprit's node out of the job (its agent leaves, the others "
            "restart in the next rendezvous round without it and resume from the checkpoint). "
            "Incidents go to RUN/incidents/; the last stdout line is a summary. Exit: the "
            "launcher's status, or 3 when this node left the job. With --serve-store and no "
            "COMMAND: serve the rendezvous's c10d store apart from the agents."),
    )
    p.add_argument("--run-dir", help="folder shared by the job's guards (heartbeats, exits, "
                                     "decisions, incidents); a fresh one per job")
    p.add_argument("--ckpt", help="the job's checkpoint folder (where it resumes from)")
    p.add_argument("--node", default="",
                   help="this node's name (default: the host name; letters, digits, _ . -)")
    p.add_argument("--heartbeat-s", type=options.positive_float, default=0.5,
                   help="heartbeat interval of the workers (default 0.5)")
    p.add_argument("--timeout-s", type=options.positive_float, default=30.0,
                   help="a hang: no rank advanced its step for this long (default 30)")
    p.add_argument("--startup-timeout-s", type=options.positive_float, default=300.0,
                   help="time for every rank of a round to begin its first step (default 300)")
    p.add_argument("--settle-s", type=options.positive_float, default=0.5,
                   help="after a worker died: wait this long for the other exits before "
                        "blaming the first (default 0.5; the agent is paused meanwhile)")
    p.add_argument("--exclude-on", default="hang,crash",
                   help="incidents that take the culprit's node out: hang, crash (default "
                        "both), or none (restart in place)")
    p.add_argument("--pp", type=options.positive_int, default=1,
                   help="pipeline-parallel size of the job (default 1)")
    p.add_argument("--tp", type=options.positive_int, default=1,
                   help="tensor-parallel size of the job (default 1)")
    p.add_argument("--serve-store", metavar="HOST:PORT", default=None,
                   help="serve the c10d rendezvous store (give every agent --rdzv-conf "
                        "is_host=0), so that any node can leave; runs until killed")
    p.add_argument("--exclude-rank", metavar="R[,R...]", default=None,
                   help="no COMMAND: ask the guards of the running job in --run-dir to take "
                        "these ranks' nodes out (a slow rank: mitigation S4); prints the "
                        "incident")
    p.add_argument("--reason", default="slow rank (mitigation S4)",
                   help="with --exclude-rank: the reason recorded in the incident")
    p.add_argument("launcher_command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="-- then the node's launcher command (torchrun ...)")
    p.set_defaults(func=_guard)


def _guard(args: argparse.Namespace) -> int:
    from stragglers.errors import InputError
    from stragglers.recover.guard import GuardConfig, request_exclusion, run_guard, serve_store

    command = list(args.launcher_command)
    if command and command[0] == "--":
        command = command[1:]
    if args.serve_store is not None:
        host, _, port = args.serve_store.rpartition(":")
        if command or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError(f"--serve-store {args.serve_store!r}: give HOST:PORT and no "
                             "command")
        serve_store(host, int(port))
        return 0
    for option in ("run_dir", "ckpt"):
        if not getattr(args, option):
            raise InputError(f"--{option.replace('_', '-')} is required")
    if args.exclude_rank is not None:
        if command:
            raise InputError("--exclude-rank: give no command (it asks the running guards)")
        try:
            ranks = [int(x) for x in args.exclude_rank.split(",") if x.strip()]
        except ValueError:
            raise InputError(f"--exclude-rank {args.exclude_rank!r}: expected ranks R[,R...]"
                             ) from None
        if not ranks or min(ranks) < 0:
            raise InputError(f"--exclude-rank {args.exclude_rank!r}: expected ranks >= 0")
        incident = request_exclusion(args.run_dir, args.ckpt, ranks, args.reason)
        sys.stdout.write(json.dumps(incident.to_dict()) + "\n")
        return 0
    exclude = tuple(x.strip() for x in args.exclude_on.split(",") if x.strip())
    cfg = GuardConfig(tuple(command), args.run_dir, args.ckpt, node=args.node,
                      heartbeat_s=args.heartbeat_s, timeout_s=args.timeout_s,
                      startup_timeout_s=args.startup_timeout_s, pp=args.pp, tp=args.tp,
                      settle_s=args.settle_s,
                      exclude_on=() if exclude == ("none",) else exclude)
    cfg.check()

    def log(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    code, summary = run_guard(cfg, log=log)
    sys.stdout.write(json.dumps(summary) + "\n")
    return code


def _run(args: argparse.Namespace) -> int:
    from stragglers.recover.driver import DriverConfig, run_driver
    from stragglers.recover.incidents import Incident

    command = list(args.train_command)
    if command and command[0] == "--":
        command = command[1:]
    cfg = DriverConfig(tuple(command), args.slots, args.ckpt, args.out,
                       heartbeat_s=args.heartbeat_s, timeout_s=args.timeout_s,
                       startup_timeout_s=args.startup_timeout_s,
                       max_restarts=args.max_restarts, pp=args.pp, tp=args.tp, world=args.world,
                       validate=args.validate)
    cfg.check()

    def log(incident: Incident) -> None:
        sys.stdout.write(json.dumps(incident.to_dict()) + "\n")
        sys.stdout.flush()

    result = run_driver(cfg, log=log)
    sys.stdout.write(json.dumps(result.to_dict()) + "\n")
    if not result.ok:
        print(f"stragglers run: {result.message or 'the job did not finish'}", file=sys.stderr)
        return 1
    return 0
