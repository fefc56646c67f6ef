"""``stragglers import kineto``: PyTorch profiler traces → ``trace.parquet`` + ``meta.yaml``."""

from __future__ import annotations

import argparse

from stragglers.options import positive_int

KINETO_EPILOG = """\
examples:
  stragglers import kineto runs/ex/profiler --meta job.yaml --out imported/
  stragglers import kineto traces/ --meta job.yaml --out imported/ --steps 10-19
  stragglers analyze imported/trace.parquet --meta imported/meta.yaml
  stragglers import kineto rank0.json.gz --meta job.yaml --out report/ --partial
  stragglers import kineto /shared/traces --meta job.yaml --out imported/ \
      --scheduler tcp://sched:8786
DIR holds one trace per rank (*.json or *.json.gz, as torch.profiler writes them); the rank
comes from each file's distributedInfo. META.yaml gives the job's layout (dp_size, pp_size,
tp_size, ...). Everything not turned into an op is counted and reported. With only some
ranks traced, --partial writes OUT/partial-report.json: per rank and step compute,
communication and idle time, each collective's waits among the traced ranks and who arrived
last (no slowdown S, nothing about ranks not traced). With --scheduler, each rank file is
parsed by a worker of that Dask cluster (the workers read the files at the same absolute
path: a shared file system) and only its ops come back; the result is the same.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="import traces of other tools (PyTorch profiler)",
                       description="Import traces recorded by other tools into the trace "
                                   "schema, for `stragglers analyze`.")
    inner = p.add_subparsers(dest="import_command", metavar="FORMAT")
    inner.required = True
    k = inner.add_parser("kineto", help="PyTorch profiler (Kineto) Chrome traces, one per rank",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog=KINETO_EPILOG,
                         description="Turn a job's per-rank torch.profiler traces into "
                                     "OUT/trace.parquet and OUT/meta.yaml.")
    k.add_argument("dir", metavar="DIR", help="folder of rank traces (or one trace file)")
    k.add_argument("--meta", required=True, metavar="META.yaml",
                   help="job metadata (dp_size, pp_size, tp_size, ...)")
    k.add_argument("--out", required=True, help="output folder")
    k.add_argument("--steps", metavar="A-B", help="keep only steps A..B (inclusive)")
    k.add_argument("--annotations", metavar="FILE",
                   help="YAML {optype: [regex, ...]} replacing the default annotation "
                        "patterns of the types it names")
    where = k.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=positive_int, default=None,
                       help="rank files parsed in parallel (default: one per CPU core)")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="parse the rank files on this Dask cluster (tcp://host:port; "
                            "the workers must see DIR at the same absolute path)")
    k.add_argument("--partial", action="store_true",
                   help="only some ranks traced: write a per-rank report "
                        "(OUT/partial-report.json) instead of the trace")
    k.set_defaults(func=run_kineto)


def run_kineto(args: argparse.Namespace) -> int:
    from stragglers.kineto import import_to_folder

    lines, files = import_to_folder(args.dir, args.meta, args.out,
                                    annotations=args.annotations, steps=args.steps,
                                    jobs=args.jobs, partial=args.partial,
                                    scheduler=args.scheduler)
    for line in lines:
        print(line)
    print(f"wrote {' and '.join(str(f) for f in files)}")
    return 0
