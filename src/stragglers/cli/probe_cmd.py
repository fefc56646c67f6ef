"""``stragglers probe``: merge probe files, run the example job, check the analyzer's fidelity."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from stragglers.atomic import check_out_dir
from stragglers.cli.options import slowdown_factor
from stragglers.errors import InputError

if TYPE_CHECKING:
    from stragglers.probe.examples.job import JobConfig

EPILOG = """\
examples:
  stragglers probe example --out-dir runs/ex                 # dp 2 x pp 2 on CPU (gloo)
  stragglers probe example --out-dir runs/slow --slow-rank 1 --slow-factor 1.5
  stragglers probe merge runs/ex/probe --meta runs/ex/probe/job.yaml --out runs/ex
  stragglers analyze runs/ex/trace.parquet --meta runs/ex/meta.yaml --out runs/ex/analysis
  stragglers probe validate --out-dir runs/fidelity --json   # default: a new temp folder

exit codes: 0 ok, 2 bad input (the message names the file and the problem)
"""


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``probe merge``, ``probe example`` and ``probe validate``."""
    fmt = argparse.RawDescriptionHelpFormatter
    probe = sub.add_parser(
        "probe", formatter_class=fmt, epilog=EPILOG,
        help="probes for PyTorch jobs: merge rank files, example job, fidelity check",
        description="Tools around stragglers.probe, the instrumentation that records the "
                    "operation trace of a PyTorch training job.")
    psub = probe.add_subparsers(dest="probe_command", metavar="PROBE_COMMAND")
    psub.required = True

    p = psub.add_parser(
        "merge", formatter_class=fmt, epilog=EPILOG,
        help="merge per-rank probe files into trace.parquet + meta.yaml",
        description="Align the ranks' clocks, keep the steps every worker finished, number "
                    "seq_ids, check the structure the what-if model needs, and write "
                    "OUT/trace.parquet and OUT/meta.yaml for `stragglers analyze`.")
    p.add_argument("dir", help="directory with rank-NNNNN.jsonl files")
    p.add_argument("--meta", help="job metadata YAML (default: DIR/job.yaml written by rank 0)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--lenient", action="store_true",
                   help="write the trace even if the structure checks find problems")
    p.add_argument("--no-check", action="store_true",
                   help="skip the structure checks (faster on very large jobs)")
    p.set_defaults(func=run_merge)

    from stragglers.probe.examples.job import add_job_arguments

    p = psub.add_parser(
        "example", formatter_class=fmt, epilog=EPILOG,
        help="run the example GPT job (1F1B pipeline + DP) with probes, merge its trace",
        description="Spawn dp*pp processes training a small GPT-style model with 1F1B "
                    "pipeline parallelism and a sharded optimizer over torch.distributed "
                    "(gloo on CPU, NCCL with one GPU per rank), with optional straggler "
                    "injections; writes OUT/trace.parquet, OUT/meta.yaml, OUT/summary.json.")
    add_job_arguments(p)
    p.set_defaults(func=run_example)

    p = psub.add_parser(
        "validate", formatter_class=fmt, epilog=EPILOG,
        help="fidelity check: measured vs estimated slowdown of injected stragglers",
        description="Run the example job with and without injected stragglers (a slow "
                    "worker at several severities, a heavy last stage, long-tailed sequence "
                    "lengths, uncoordinated GC) and compare the measured slowdown with the "
                    "analyzer's estimate S (paper §6). The job options set the base run.")
    p.add_argument("--cases", nargs="+", default=None,
                   help="cases to run (default: baseline slow last-stage seqlen gc)")
    p.add_argument("--severities", default="1.2,1.5,2.0",
                   help="slow-worker factors, comma-separated (default: %(default)s)")
    p.add_argument("--json", action="store_true",
                   help="print the rows as JSON: case, measured, estimated, discrepancy, blamed")
    add_job_arguments(p, out_dir_required=False)
    p.set_defaults(func=run_validate)


def run_merge(args: argparse.Namespace) -> int:
    """``stragglers probe merge``."""
    from stragglers.probe.merge import merge_dir

    check_out_dir(args.out)
    result = merge_dir(args.dir, args.meta, args.out, strict=not args.lenient,
                       check=not args.no_check)
    out = Path(args.out)
    print(f"wrote {out / 'trace.parquet'} ({len(result.trace)} ops, {len(result.steps)} steps, "
          f"{result.meta['dp_size']} x {result.meta['pp_size']} workers) and {out / 'meta.yaml'}")
    if result.dropped_steps:
        print(f"dropped {len(result.dropped_steps)} step(s) not finished by every worker: "
              f"{result.dropped_steps[:10]}", file=sys.stderr)
    if result.incomplete_lines:
        print(f"left out the unreadable last line of {len(result.incomplete_lines)} rank "
              f"file(s): {'; '.join(result.incomplete_lines[:5])}", file=sys.stderr)
    for problem in result.problems:
        print(f"warning: {problem}", file=sys.stderr)
    return 0


def _config(args: argparse.Namespace) -> JobConfig:
    from stragglers.probe.examples.job import config_from_args

    try:
        return config_from_args(args)
    except ValueError as exc:
        raise InputError(str(exc)) from exc


def run_example(args: argparse.Namespace) -> int:
    """``stragglers probe example``."""
    from stragglers.probe.examples.job import run_job

    summary = run_job(_config(args))
    keys = ("mean_step_s", "median_step_s", "loss_first", "loss_last", "timer", "device",
            "trace", "meta")
    print(json.dumps({k: summary.get(k) for k in keys}, indent=1))
    return 0


def run_validate(args: argparse.Namespace) -> int:
    """``stragglers probe validate``."""
    from stragglers.probe.fidelity import CASES, format_table, run_fidelity

    try:
        severities = [slowdown_factor(s) for s in args.severities.split(",") if s.strip()]
    except argparse.ArgumentTypeError as exc:
        raise InputError(f"--severities: expected factors >= 1 like 1.2,1.5,2.0: {exc}"
                         ) from None
    if not severities:
        raise InputError("--severities: no factor given")
    unknown = [c for c in args.cases or () if c not in CASES]
    if unknown:
        raise InputError(f"--cases: unknown case {unknown[0]!r}; expected some of "
                         f"{', '.join(CASES)}")
    if not args.out_dir:  # never the current folder: a fresh temporary one, reported
        args.out_dir = tempfile.mkdtemp(prefix="stragglers-validate-")
        print(f"probe validate: writing the runs under {args.out_dir} (set --out-dir to "
              "choose)", file=sys.stderr)
    cfg = _config(args)
    rows = run_fidelity(cfg, cfg.out_dir, args.cases or CASES, severities)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=1))
    else:
        print(format_table(rows))
    return 0
