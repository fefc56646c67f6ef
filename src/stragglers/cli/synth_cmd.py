"""``stragglers synth`` (synthetic traces with injected stragglers) and ``stragglers demo``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from stragglers.atomic import check_out_dir
from stragglers.cli.defaults import FLEET_DEFAULT_MIX as DEFAULT_MIX
from stragglers.cli.defaults import SYNTH_MAX_SIGMA as MAX_SIGMA
from stragglers.errors import InputError
from stragglers.options import (
    loader_delay,
    non_negative_float,
    non_negative_int,
    positive_int,
    prob_seconds,
    slowdown_factor,
    span,
    worker_factor,
)

if TYPE_CHECKING:  # the generator is imported by the commands (start-up)
    from stragglers.synth import SynthSpec

SYNTH_EPILOG = """\
examples:
  stragglers synth --dp 4 --pp 4 --microbatches 8 --steps 10 --out job/
  stragglers synth --dp 8 --pp 4 --slow-worker 3,1:1.5 --out slow/
  stragglers synth --pp 4 --heavy-last-stage 1.3 --jitter 0.01 --out st/
  stragglers synth --seq-len-sigma 0.6 --out seqlen/
  stragglers synth --gc 0.2:1.0 --out gc/          # 20% of worker-steps pause 1 s
  stragglers synth --gc 0.15:0.5 --gc-in-compute --gc-recorded --out gc-rec/
  stragglers synth --slow-link 0,1:50 --out link/  # dp 0, stage 1 <-> 2 transfers x50
  stragglers synth --launch-gaps 0.3:0.005 --out gaps/
  stragglers synth --slow-loader 1:0.1:0.3 --out loader/  # dp 1 starts 0.1 s late in 30% of steps
  stragglers synth --fleet 1000 --seed 1 --out fleet/   # 1,000 jobs, see stragglers.synth.fleet
  stragglers synth --fleet 100 --mix none=1,worker=1,gc=1 --fleet-workers 8-32 --out f/
Writes trace.parquet (or .jsonl), meta.yaml and truth.json (the injected causes and the
workers to blame); analyse with `stragglers analyze OUT/trace.parquet --meta OUT/meta.yaml`.
"""


def spec_from_args(args: argparse.Namespace) -> SynthSpec:
    from stragglers.synth import SynthSpec
    from stragglers.synth.generator import check_spec

    spec = SynthSpec(dp=args.dp, pp=args.pp, vpp=args.vpp, tp=args.tp,
                     microbatches=args.microbatches, steps=args.steps, overlap=args.overlap,
                     seed=args.seed, jitter=args.jitter, name=args.name,
                     heavy_last_stage=args.heavy_last_stage, seq_len_sigma=args.seq_len_sigma)
    spec.slow_workers = list(args.slow_worker)
    spec.slow_links = list(args.slow_link)
    if args.gc:
        spec.gc_prob, spec.gc_pause = args.gc
    spec.gc_in_compute = args.gc_in_compute
    spec.gc_recorded = args.gc_recorded
    if args.launch_gaps:
        spec.launch_gap_prob, spec.launch_gap = args.launch_gaps
    spec.slow_loaders = list(args.slow_loader)
    check_spec(spec)
    return spec


def _add_shape(p: argparse.ArgumentParser, dp: int, pp: int, mb: int, steps: int) -> None:
    p.add_argument("--dp", type=positive_int, default=dp,
                   help="data-parallel degree (default %(default)s)")
    p.add_argument("--pp", type=positive_int, default=pp,
                   help="pipeline stages (default %(default)s)")
    p.add_argument("--vpp", type=positive_int, default=1,
                   help="model chunks per stage (interleaved)")
    p.add_argument("--tp", type=positive_int, default=1,
                   help="tensor-parallel degree (metadata only)")
    p.add_argument("--microbatches", type=positive_int, default=mb,
                   help="per step (default %(default)s)")
    p.add_argument("--steps", type=positive_int, default=steps,
                   help="steps (default %(default)s)")
    p.add_argument("--overlap", action="store_true",
                   help="overlap gradient reduce-scatter with backward compute")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--jitter", type=non_negative_float, default=0.0,
                   help=f"log-normal sigma of per-op noise, 0..{MAX_SIGMA:g} (default "
                        "%(default)s: none)")
    p.add_argument("--name", default="synth", help="job name in the metadata")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synth", help="write a synthetic trace with injected stragglers",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=SYNTH_EPILOG,
                       description="Generate a Megatron-style 1F1B / interleaved trace whose "
                                   "timeline follows the analyzer's dependency rules.")
    _add_shape(p, 2, 4, 8, 10)
    p.add_argument("--slow-worker", action="append", default=[], metavar="D,S:FACTOR",
                   type=worker_factor,
                   help="compute of worker (dp D, stage S) takes FACTOR (> 1) times longer")
    p.add_argument("--heavy-last-stage", type=slowdown_factor, default=1.0, metavar="FACTOR",
                   help="compute of the last stage takes FACTOR (>= 1) times longer")
    p.add_argument("--seq-len-sigma", type=non_negative_float, default=0.0, metavar="SIGMA",
                   help="long-tailed (log-normal) sequence lengths, quadratic attention cost "
                        f"(0..{MAX_SIGMA:g})")
    p.add_argument("--gc", metavar="PROB:SECONDS", type=prob_seconds,
                   help="uncoordinated GC: each worker-step pauses SECONDS with PROB")
    p.add_argument("--gc-in-compute", action="store_true",
                   help="with --gc: the pause lands inside a forward compute op (GC not "
                        "recorded as its own op)")
    p.add_argument("--gc-recorded", action="store_true",
                   help="with --gc: write each pause's seconds into the gc_s column, as a "
                        "probe's GC callbacks would (default: GC time unrecorded, so pauses "
                        "inside compute read as 'pauses', not 'gc')")
    p.add_argument("--slow-link", action="append", default=[], metavar="D,S:FACTOR",
                   type=worker_factor,
                   help="P2P transfers between stage S and S+1 of DP rank D x FACTOR (> 1)")
    p.add_argument("--launch-gaps", metavar="PROB:SECONDS", type=prob_seconds,
                   help="CPU launch gaps of SECONDS before compute ops with PROB")
    p.add_argument("--slow-loader", action="append", default=[], metavar="D:SECONDS[:PROB]",
                   type=loader_delay,
                   help="a slow data loader on DP rank D: its step starts SECONDS late (host "
                        "time before stage 0's first forward), in every step or with PROB "
                        "(repeatable)")
    p.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--fleet", type=positive_int, metavar="N",
                   help="write a fleet of N jobs (OUT/job-NNNNN/) with sizes, shapes, steps and "
                        "root causes drawn from the distributions of stragglers.synth.fleet "
                        "(the shape and injection options above do not apply)")
    p.add_argument("--mix", metavar="CAUSE=W,...",
                   help="with --fleet: proportions of worker, last_stage, sequence_length, "
                        "gc, communication, none, combination (normalised; default "
                        + ",".join(f"{k}={v:g}" for k, v in DEFAULT_MIX.items()) + ")")
    p.add_argument("--fleet-workers", metavar="MIN-MAX", type=span, default="16-1024",
                   help="with --fleet: range of workers (powers of two, default %(default)s)")
    p.add_argument("--fleet-steps", metavar="MIN-MAX", type=span, default="6-10",
                   help="with --fleet: range of steps (default %(default)s)")
    p.set_defaults(func=run_synth)

    p = sub.add_parser("demo", help="generate a job with stragglers, analyse it, write results",
                       description="Generate a dp 4 x pp 4 job with one slow worker (dp 1, "
                                   "stage 1, x1.8) and a heavy last stage (x1.25), analyse "
                                   "it and write result.json, heatmaps and timelines.")
    p.add_argument("--out", default="demo-out", help="output folder (default %(default)s)")
    p.set_defaults(func=run_demo)


def run_fleet_synth(args: argparse.Namespace) -> int:
    from stragglers.synth.fleet import FleetShape, parse_mix, write_fleet

    given = [flag for flag, on in (("--slow-worker", args.slow_worker),
                                   ("--slow-link", args.slow_link), ("--gc", args.gc),
                                   ("--launch-gaps", args.launch_gaps),
                                   ("--slow-loader", args.slow_loader),
                                   ("--seq-len-sigma", args.seq_len_sigma),
                                   ("--heavy-last-stage", args.heavy_last_stage != 1.0),
                                   ("--format jsonl", args.format != "parquet")) if on]
    if given:
        raise InputError(f"--fleet draws each job's shape and causes: {given[0]} does not "
                         "apply (use --mix)")
    shape = FleetShape(*args.fleet_workers, *args.fleet_steps)
    mix = parse_mix(args.mix) if args.mix else dict(DEFAULT_MIX)
    folders = write_fleet(args.fleet, args.out, args.seed, shape, mix)
    print(f"wrote {len(folders):,} jobs (seed {args.seed}) into {args.out}: "
          + ", ".join(f"{k} {v:.0%}" for k, v in mix.items() if v))
    return 0


def run_synth(args: argparse.Namespace) -> int:
    from stragglers.synth import synthesize

    check_out_dir(args.out)
    if args.fleet is not None:
        return run_fleet_synth(args)
    print(synthesize(spec_from_args(args), args.out, args.format).summary())
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from stragglers.analysis.result import Skipped, summary
    from stragglers.synth.demo import write_demo

    done = write_demo(args.out)
    print(done.generated() + "\n")
    print(summary(done.result))
    print()
    for name, f in done.result.outputs.items():
        print(f"{name}: skipped: {f.reason}" if isinstance(f, Skipped) else f"{name}: {f}")
    return 0
