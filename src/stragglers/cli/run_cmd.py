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
