"""``stragglers serve`` (the SMon monitoring service) and ``stragglers push`` (its client).

The service's libraries (the ``service`` extra) are imported only when these commands run.
"""

from __future__ import annotations

import argparse
import json
import os

from stragglers import options
from stragglers.cli.defaults import ROBUST_WARMUP_ITERS
from stragglers.cli.detect_cmd import robust_options, robust_settings
from stragglers.limits import LIMITS

SERVE_EPILOG = """\
examples:
  stragglers serve --data smon-data --token-file token.txt
  stragglers serve --data d --token-file t --port 9000 --alerts alerts.yaml --workers 2
  stragglers serve --data d --token-file t --db postgresql://smon@db.example/smon
  stragglers serve --data /shared/smon --token-file t --db postgresql://smon@db/smon \
      --scheduler tcp://dask-scheduler:8786 --workers 8

The token file holds one token (16+ characters); writes need 'Authorization: Bearer TOKEN'.
STRAGGLERS_TOKEN may give the token instead of --token-file.
exit codes: 0 stopped, 2 bad option or file, unreachable --scheduler (one line naming it)
"""

PUSH_EPILOG = """\
examples:
  stragglers push trace.parquet --meta meta.yaml --server http://127.0.0.1:8080 --token-file t
  stragglers push trace.parquet --meta meta.yaml --server URL --token-file t --job train-a \\
      --label cluster=a --wait 120

Prints {"session": ID}; with --wait, the server's document of the session once analysed.
exit codes: 0 ok (with --wait: analysed), 1 the analysis failed or --wait timed out,
2 bad input or refused upload (one line with the server's message)
"""


def register(sub: argparse._SubParsersAction) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "serve", formatter_class=fmt, epilog=SERVE_EPILOG,
        help="run SMon: the monitoring service that analyses every pushed session",
        description="Serve the monitoring service: it takes profiling sessions (traces) "
                    "and record streams over HTTP, analyses each session in worker "
                    "processes, shows jobs, heatmaps and detection events on a dashboard, "
                    "alerts through webhooks and Alertmanager and exports Prometheus metrics.")
    p.add_argument("--data", required=True, metavar="DIR",
                   help="data folder: the SQLite database, uploaded traces, outputs")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on "
                   "(default: %(default)s)")
    p.add_argument("--port", type=options.port, default=8080,
                   help="port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--db", metavar="URL",
                   help="database URL instead of DIR's SQLite: postgresql://USER@HOST/DB")
    p.add_argument("--token-file", metavar="FILE",
                   help="file holding the bearer token (default: $STRAGGLERS_TOKEN)")
    p.add_argument("--alerts", metavar="FILE",
                   help="alert rules (YAML; see docs/guides/service.md)")
    p.add_argument("--workers", type=options.positive_int,
                   default=max(1, (os.cpu_count() or 2) // 2),
                   help="analysis worker processes (default: half the CPUs, %(default)s)")
    p.add_argument("--validators", type=options.positive_int, default=4, metavar="N",
                   help="upload validation processes at most: one starts with the server, "
                        "more when uploads arrive while every one is busy, so a slow "
                        "upload holds up no other (default: %(default)s)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="run validation and analyses on this Dask cluster instead of local "
                        "worker processes (its workers must see --data at the same path; "
                        "--workers is then the analyses in flight)")
    p.add_argument("--private", action="store_true",
                   help="require the token for the dashboard and /metrics too")
    p.add_argument("--public-url", metavar="URL",
                   help="the server's URL as alert receivers should see it")
    p.add_argument("--lease-s", type=options.positive_float, default=30.0, metavar="SECONDS",
                   help="how long a claimed analysis is leased to this server without a "
                        "renewal (renewed every third of it; an expired lease is taken again "
                        "by any server on the database; default: %(default)s)")
    p.add_argument("--metrics-stale-s", type=options.positive_float, default=3600.0,
                   metavar="SECONDS",
                   help="/metrics leaves out jobs that sent no session or records for "
                        "this long (default: %(default)g)")
    p.add_argument("--header-timeout-s", type=options.positive_float, default=10.0,
                   metavar="SECONDS",
                   help="a request's headers must arrive within this long of its first "
                        "byte, else 408 and the connection is closed (default: %(default)g)")
    p.add_argument("--body-timeout-s", type=options.positive_float, default=30.0,
                   metavar="SECONDS",
                   help="a request body that sends nothing for this long gets 408 and its "
                        "connection is closed (default: %(default)g)")
    p.add_argument("--keep-alive-s", type=options.positive_int, default=5, metavar="SECONDS",
                   help="an idle connection between requests is closed after this long "
                        "(default: %(default)s)")
    p.add_argument("--max-connections", type=options.positive_int, default=1000,
                   metavar="N",
                   help="connections open at once; one more is closed when accepted "
                        "(default: %(default)s)")
    p.add_argument("--log-level", default="info",
                   choices=["debug", "info", "warning", "error"])
    robust_options(p, "detector of pushed records (the default detector of watch, "
                      "docs/detection.md)")
    p.add_argument("--warmup", type=options.non_negative_int, default=None, metavar="ITERS",
                   help="minimum warm-up in iterations of each rank and segment of a job's "
                        f"records (default {ROBUST_WARMUP_ITERS}: the level decides; at most "
                        f"{LIMITS['warmup_iters'].default:,} or STRAGGLERS_MAX_WARMUP_ITERS)")
    p.set_defaults(func=run_serve)

    p = sub.add_parser(
        "push", formatter_class=fmt, epilog=PUSH_EPILOG,
        help="upload a profiling session to a `stragglers serve` server",
        description="Upload a trace and its metadata to a monitoring server, which "
                    "queues it for analysis.")
    p.add_argument("trace", help="operation trace: .parquet or .jsonl")
    p.add_argument("--meta", required=True, help="job metadata YAML")
    p.add_argument("--server", required=True, metavar="URL", help="e.g. http://127.0.0.1:8080")
    p.add_argument("--token-file", metavar="FILE",
                   help="file holding the bearer token (default: $STRAGGLERS_TOKEN)")
    p.add_argument("--job", help="job name (default: the metadata's trial_name)")
    p.add_argument("--label", type=options.key_value, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="a label of the session (repeatable)")
    p.add_argument("--wait", type=float, metavar="SECONDS",
                   help="wait up to SECONDS for the analysis and print the session")
    p.add_argument("--retry-s", type=options.non_negative_float, metavar="SECONDS",
                   help="keep trying this long while the server cannot be reached or "
                        "answers 408, 429 or 5xx, e.g. while it restarts (default: "
                        "$STRAGGLERS_PUSH_RETRY_S, else 60); every try and every rerun of "
                        "the same push carry the same idempotency key, so the session is "
                        "stored once")
    p.set_defaults(func=run_push)


def run_serve(args: argparse.Namespace) -> int:
    from stragglers.service.server import serve
    from stragglers.service.state import ConnectionLimits, service_config

    limits = ConnectionLimits(header_timeout_s=args.header_timeout_s,
                              body_timeout_s=args.body_timeout_s,
                              keep_alive_s=args.keep_alive_s,
                              max_connections=args.max_connections)
    config = service_config(args.data, args.token_file, db_url=args.db, alerts=args.alerts,
                            workers=args.workers, private=args.private, lease_s=args.lease_s,
                            metrics_stale_s=args.metrics_stale_s, scheduler=args.scheduler,
                            limits=limits, validators=args.validators,
                            detector=robust_settings(args))
    return serve(config, args.host, args.port, args.public_url, args.log_level)


def run_push(args: argparse.Namespace) -> int:
    from stragglers.service.auth import load_token
    from stragglers.service.client import push_session, wait_session

    token = load_token(args.token_file)
    session = push_session(args.trace, args.meta, args.server, token, job=args.job,
                           labels=dict(args.label), retry_s=args.retry_s)
    if args.wait is None:
        print(json.dumps({"session": session}))
        return 0
    doc = wait_session(args.server, session, args.wait)
    print(json.dumps(doc))
    return 0 if doc["status"] == "done" else 1
