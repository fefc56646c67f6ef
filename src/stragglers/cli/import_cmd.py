"""``stragglers import kineto``: PyTorch profiler traces → ``trace.parquet`` + ``meta.yaml``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from stragglers.atomic import StagedDir, check_out_dir
from stragglers.options import positive_int

if TYPE_CHECKING:
    from stragglers.trace.io import JobMeta

KINETO_EPILOG = """\
examples:
  stragglers import kineto runs/ex/profiler --meta job.yaml --out imported/
  stragglers import kineto traces/ --meta job.yaml --out imported/ --steps 10-19
  stragglers analyze imported/trace.parquet --meta imported/meta.yaml
  stragglers import kineto rank0.json.gz --meta job.yaml --out report/ --partial
DIR holds one trace per rank (*.json or *.json.gz, as torch.profiler writes them); the rank
comes from each file's distributedInfo. META.yaml gives the job's layout (dp_size, pp_size,
tp_size, ...). Everything not turned into an op is counted and reported. With only some
ranks traced, --partial writes OUT/partial-report.json: per rank and step compute,
communication and idle time, each collective's waits among the traced ranks and who arrived
last (no slowdown S, nothing about ranks not traced).
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
    k.add_argument("--jobs", type=positive_int, default=None,
                   help="rank files parsed in parallel (default: one per CPU core)")
    k.add_argument("--partial", action="store_true",
                   help="only some ranks traced: write a per-rank report "
                        "(OUT/partial-report.json) instead of the trace")
    k.set_defaults(func=run_kineto)


def run_kineto(args: argparse.Namespace) -> int:
    from stragglers.kineto import import_kineto
    from stragglers.trace.io import parse_steps, read_meta, write_meta, write_trace

    check_out_dir(args.out)
    steps = parse_steps(args.steps)
    meta = read_meta(args.meta)
    if args.partial:
        return _run_partial(args, meta, steps)
    trace, report = import_kineto(args.dir, meta, annotations=args.annotations, steps=steps,
                                  jobs=args.jobs)
    with StagedDir(args.out) as stage:
        write_meta(meta, stage.path("meta.yaml"))
        write_trace(trace, stage.path("trace.parquet"))
        stage.commit_last("trace.parquet")
    for line in report.lines():
        print(line)
    print(f"wrote {stage.final('trace.parquet')} and {stage.final('meta.yaml')}")
    return 0


def _run_partial(args: argparse.Namespace, meta: JobMeta, steps: tuple[int, int] | None) -> int:
    import json

    from stragglers.atomic import write_text
    from stragglers.kineto import import_partial
    from stragglers.kineto.partial import REPORT_NAME, report_lines

    doc = import_partial(args.dir, meta, annotations=args.annotations, steps=steps,
                         jobs=args.jobs)
    with StagedDir(args.out) as stage:
        write_text(stage.path(REPORT_NAME), json.dumps(doc, indent=1) + "\n")
    for line in report_lines(doc):
        print(line)
    print(f"wrote {stage.final(REPORT_NAME)}")
    return 0
