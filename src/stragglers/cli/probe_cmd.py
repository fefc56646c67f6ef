"""``stragglers probe``: merge probe files, run the example job, check the analyzer's fidelity."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from stragglers.options import add_later, non_negative_int, positive_int, slowdown_factors

if TYPE_CHECKING:
    from stragglers.evaluation.recipe_eval import RecipeRow, RunFailure
    from stragglers.evaluation.verdict_eval import EvalRow

EPILOG = """\
examples:
  stragglers probe example --out-dir runs/ex                 # dp 2 x pp 2 on CPU (gloo)
  stragglers probe example --out-dir runs/slow --slow-rank 1 --slow-factor 1.5
  stragglers probe merge runs/ex/probe --meta runs/ex/probe/job.yaml --out runs/ex
  stragglers analyze runs/ex/trace.parquet --meta runs/ex/meta.yaml --out runs/ex/analysis
  stragglers probe fidelity --out-dir runs/fidelity --json   # default: a new temp folder
  stragglers probe verdict-eval --keep runs/veval            # the verdict on 31 real runs
  stragglers probe verdict-eval --reanalyse runs/veval --split tune --verdict pause_factor=2
  stragglers probe recipe-eval --repeat 4 --keep runs/receval  # the documented recipes
  stragglers probe recipe-eval --reanalyse runs/receval      # re-score them, no runs

exit codes: 0 ok, 2 bad input (the message names the file and the problem)
"""


def _job_arguments(parser: argparse.ArgumentParser, out_dir_required: bool = True) -> None:
    """The example job's options (from its config; imported when the command is used)."""
    from stragglers.testbed.job import add_job_arguments

    add_job_arguments(parser, out_dir_required)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``probe merge``, ``probe example``, ``probe fidelity`` (``probe validate``, its
    deprecated name, still works for one release), ``probe verdict-eval`` and ``probe
    recipe-eval``."""
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

    p = psub.add_parser(
        "example", formatter_class=fmt, epilog=EPILOG,
        help="run the example GPT job (1F1B pipeline + DP) with probes, merge its trace",
        description="Spawn dp*pp processes training a small GPT-style model with 1F1B "
                    "pipeline parallelism and a sharded optimizer over torch.distributed "
                    "(gloo on CPU, NCCL with one GPU per rank), with optional straggler "
                    "injections; writes OUT/trace.parquet, OUT/meta.yaml, OUT/summary.json.")
    add_later(p, _job_arguments)
    p.set_defaults(func=run_example)

    p = psub.add_parser(
        "fidelity", aliases=["validate"], formatter_class=fmt, epilog=EPILOG,
        help="fidelity check: measured vs estimated slowdown of injected stragglers "
             "(`probe validate` is its deprecated name)",
        description="Run the example job with and without injected stragglers (a slow "
                    "worker at several severities, a heavy last stage, long-tailed sequence "
                    "lengths, uncoordinated GC) and compare the measured slowdown with the "
                    "analyzer's estimate S (paper §6). The job options set the base run.")
    p.add_argument("--cases", nargs="+", default=None,
                   help="cases to run (default: baseline slow last-stage seqlen gc)")
    p.add_argument("--severities", type=slowdown_factors, default="1.2,1.5,2.0",
                   help="slow-worker factors, comma-separated (default: %(default)s)")
    p.add_argument("--json", action="store_true",
                   help="print the rows as JSON: case, measured, estimated, discrepancy, blamed")
    add_later(p, partial(_job_arguments, out_dir_required=False))
    p.set_defaults(func=run_fidelity_cmd)

    p = psub.add_parser(
        "verdict-eval", formatter_class=fmt, epilog=EPILOG,
        help="score the root-cause verdict on a matrix of real example-job runs",
        description="Run the example job over a fixed matrix of configurations (dp 1-4, pp "
                    "1-4; a slow rank on the first, a middle or the last stage by spin or "
                    "sleep, x1.3-x3; a heavier last stage; long-tailed sequence lengths; GC "
                    "pauses; healthy runs), analyse each run and print a confusion matrix "
                    "(expected cause x verdict), per-worker accuracy and a calibration table "
                    "(confidence bin -> share right). Each case is 'tune' (thresholds may be "
                    "chosen on it) or 'eval' (only scored). A benchmark: tens of minutes.")
    p.add_argument("--split", choices=("tune", "eval", "all"), default="all",
                   help="which cases to run or re-score (default: %(default)s)")
    p.add_argument("--only", metavar="NAMES", default=None,
                   help="comma-separated case names (see --list)")
    p.add_argument("--list", action="store_true", help="print the matrix and exit")
    p.add_argument("--hog", metavar="N", type=non_negative_int, default=0,
                   help="run N CPU-hog processes (busy loops) beside each job")
    p.add_argument("--keep", metavar="DIR",
                   help="keep the runs in DIR/<case>/ and the rows in DIR/verdict-eval.json "
                        "(default: a temporary folder, deleted)")
    p.add_argument("--force", action="store_true",
                   help="reuse a non-empty --keep folder that stragglers did not create")
    p.add_argument("--reanalyse", metavar="DIR",
                   help="re-score the runs kept in DIR (by --keep) without running them")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="steps per run, warm-up included (default: 14)")
    p.add_argument("--warmup-steps", type=non_negative_int, default=None,
                   help="warm-up steps per run, not recorded (default: 2)")
    p.add_argument("--verdict-config", metavar="FILE",
                   help="YAML mapping of verdict settings (see docs/concepts/verdict.md)")
    p.add_argument("--verdict", metavar="KEY=VALUE", action="append", default=[],
                   help="one verdict setting (repeatable; applied after --verdict-config)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run_verdict_eval)

    p = psub.add_parser(
        "recipe-eval", formatter_class=fmt, epilog=EPILOG,
        help="score the verdict on runs of the documented DDP loop, Lightning and HF recipes",
        description="Run the documented recipes of docs/integrations.md (the DDP loop and "
                    "the Hugging Face Trainer under torchrun, Lightning under python; 2 ranks, "
                    "gloo, CPU) healthy, with rank 1's forward 3x slower (SLOW_RANK=1 "
                    "SLOW_FACTOR=3) and with rank 1's data loader 130 ms slow "
                    "(SLOW_LOADER_RANK=1 SLOW_LOADER_MS=130), analyse each run and print a "
                    "table per recipe x condition: whether the late rank's worker 1,0 is "
                    "named first and at what confidence, whether the rank that only waits "
                    "(0,0) is blamed, whether a healthy run names a worker. Run it from the "
                    "repository root: the snippets are read from docs/snippets/. A "
                    "benchmark: 10-60 s per run on a loaded 2-core machine. Exit 1 when "
                    "a run failed (its output is in its run.log; the others are scored).")
    p.add_argument("--recipes", metavar="NAMES", default=None,
                   help="comma-separated recipes: loop, lightning, hf (default: all)")
    p.add_argument("--conditions", metavar="NAMES", default=None,
                   help="comma-separated conditions: healthy, slow-forward, slow-loader "
                        "(default: all)")
    p.add_argument("--repeat", metavar="N", type=positive_int, default=None,
                   help="runs of each recipe x condition (default: 1)")
    p.add_argument("--hog", metavar="N", type=non_negative_int, default=0,
                   help="run N CPU-hog processes (busy loops) beside each run")
    p.add_argument("--keep", metavar="DIR",
                   help="keep the runs in DIR/<recipe>-<condition>-<i>/ and the rows in "
                        "DIR/recipe-eval.json (default: a temporary folder, deleted)")
    p.add_argument("--force", action="store_true",
                   help="reuse a non-empty --keep folder that stragglers did not create")
    p.add_argument("--reanalyse", metavar="DIR",
                   help="re-score the runs kept in DIR (by --keep) without running them")
    p.add_argument("--verdict-config", metavar="FILE",
                   help="YAML mapping of verdict settings (see docs/concepts/verdict.md)")
    p.add_argument("--verdict", metavar="KEY=VALUE", action="append", default=[],
                   help="one verdict setting (repeatable; applied after --verdict-config)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run_recipe_eval)


def run_merge(args: argparse.Namespace) -> int:
    """``stragglers probe merge``."""
    from stragglers.probe.merge import merge_dir

    result = merge_dir(args.dir, args.meta, args.out, strict=not args.lenient,
                       check=not args.no_check)
    out = Path(args.out)
    print(f"wrote {out / 'trace.parquet'} ({len(result.trace)} ops, {len(result.steps)} steps, "
          f"{result.meta.dp_size} x {result.meta.pp_size} workers) and {out / 'meta.yaml'}")
    if result.dropped_steps:
        print(f"dropped {len(result.dropped_steps)} step(s) not finished by every worker: "
              f"{result.dropped_steps[:10]}", file=sys.stderr)
    if result.incomplete_lines:
        print(f"left out the unreadable last line of {len(result.incomplete_lines)} rank "
              f"file(s): {'; '.join(result.incomplete_lines[:5])}", file=sys.stderr)
    for problem in result.problems:
        print(f"warning: {problem}", file=sys.stderr)
    return 0


def run_example(args: argparse.Namespace) -> int:
    """``stragglers probe example``."""
    from stragglers.testbed.job import config_from_args, run_job

    summary = run_job(config_from_args(args))
    keys = ("mean_step_s", "median_step_s", "loss_first", "loss_last", "timer", "device",
            "trace", "meta")
    print(json.dumps({k: summary.get(k) for k in keys}, indent=1))
    return 0


#: The deprecated name of ``probe fidelity`` (until the next release).
DEPRECATED_FIDELITY = "validate"


def run_fidelity_cmd(args: argparse.Namespace) -> int:
    """``stragglers probe fidelity`` (and its deprecated name ``probe validate``)."""
    from stragglers.evaluation.fidelity import check_cases, format_table, run_fidelity
    from stragglers.testbed.job import config_from_args

    if getattr(args, "probe_command", None) == DEPRECATED_FIDELITY:
        print("warning: `stragglers probe validate` is deprecated and will be removed in the "
              "next release; use `stragglers probe fidelity`", file=sys.stderr)
    cases = check_cases(args.cases)  # before a temporary folder is made
    if not args.out_dir:  # never the current folder: a fresh temporary one, reported
        args.out_dir = tempfile.mkdtemp(prefix="stragglers-fidelity-")
        print(f"probe fidelity: writing the runs under {args.out_dir} (set --out-dir to "
              "choose)", file=sys.stderr)
    cfg = config_from_args(args)
    rows = run_fidelity(cfg, cfg.out_dir, cases, args.severities)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=1))
    else:
        print(format_table(rows))
    return 0


def _progress(row: EvalRow) -> None:
    print(f"{row.name}: {row.cause} {' '.join(row.workers[:3])} conf {row.confidence:.2f} "
          f"({'right' if row.right else 'WRONG'}; {row.wall_s or 0:.0f} s)", file=sys.stderr,
          flush=True)


def run_verdict_eval(args: argparse.Namespace) -> int:
    """``stragglers probe verdict-eval``."""
    from stragglers.evaluation import verdict_eval

    if args.list:
        for case in verdict_eval.list_cases(args.split, args.only):
            print(f"{case.name:28s} {case.split:5s} dp {case.dp} x pp {case.pp}  "
                  f"{case.injected()}")
        return 0
    outcome = verdict_eval.evaluate(
        args.split, args.only, hog=args.hog, keep=args.keep, force=args.force,
        reanalyse_dir=args.reanalyse, steps=args.steps, warmup_steps=args.warmup_steps,
        verdict_config=args.verdict_config, verdict=args.verdict, progress=_progress)
    if outcome.unfinished:
        print(f"probe verdict-eval: {len(outcome.unfinished)} folder(s) in {args.reanalyse} "
              f"hold no finished run, not scored: {', '.join(outcome.unfinished[:10])}",
              file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_dict() for r in outcome.rows], indent=1))
    else:
        print(verdict_eval.format_report(outcome.rows))
    return 0


def _recipe_progress(item: RecipeRow | RunFailure) -> None:
    from stragglers.evaluation.recipe_eval import RunFailure

    if isinstance(item, RunFailure):
        print(f"{item.name}: FAILED (exit {item.returncode}; see {item.run_dir}/run.log)",
              file=sys.stderr, flush=True)
        return
    print(f"{item.name}: {item.cause} {' '.join(item.workers[:3])} conf "
          f"{item.confidence:.2f} S {item.slowdown:.3f} ({'MISS' if item.misses else 'ok'}; "
          f"{item.wall_s or 0:.0f} s, load {item.load_1m or 0:.1f})", file=sys.stderr,
          flush=True)


def run_recipe_eval(args: argparse.Namespace) -> int:
    """``stragglers probe recipe-eval``: exit 1 when a run failed (the others are scored)."""
    from stragglers.evaluation import recipe_eval

    outcome = recipe_eval.evaluate(
        args.recipes, args.conditions, repeat=args.repeat, hog=args.hog, keep=args.keep,
        force=args.force, reanalyse_dir=args.reanalyse, verdict_config=args.verdict_config,
        verdict=args.verdict, progress=_recipe_progress)
    if outcome.unfinished:
        print(f"probe recipe-eval: {len(outcome.unfinished)} folder(s) in {args.reanalyse} "
              f"hold no finished run, not scored: {', '.join(outcome.unfinished[:10])}",
              file=sys.stderr)
    for fail in outcome.failures:
        print(f"probe recipe-eval: run {fail.name} failed (exit {fail.returncode}), not "
              f"scored; its output is in {fail.run_dir}/run.log; last lines:\n{fail.tail}",
              file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_dict() for r in outcome.rows], indent=1))
    elif outcome.rows:
        print(recipe_eval.format_report(outcome.rows))
    return 1 if outcome.failures else 0
