"""Overhead of the probes on the example job: step time with probes on vs off.

Two measurements:

* **A/B runs**: the example job (dp 2 x pp 2, gloo on CPU) runs ``--reps`` times with probes
  off and ``--reps`` times with probes on (every step recorded, flusher running, parquet at the
  end), alternating off/on so that slow drifts of the machine's load hit both alike. The
  overhead is the median step time on over off, minus 1, over all post-warm-up steps of all
  runs of a mode (and the same with means).
* **Per-span cost**: a tight loop of ``Probe.span`` enter/exit in one process, the hot-path
  cost of one recorded span, and of one span in a step that is not sampled.

Usage::

    .venv/bin/python bench/probe_overhead.py --steps 60 --reps 3 [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from stragglers.probe import Probe, ProbeConfig, WorkerInfo
from stragglers.testbed.job import JobConfig, run_job


def span_cost(n: int = 200_000) -> dict[str, float]:
    """Microseconds per span: recorded (CPU timer) and in an unsampled step."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Probe(tmp, WorkerInfo(0, 1, 0, 0),
                      ProbeConfig(device="cpu", profile_steps=1, every=2, write_parquet=False))
        probe.start()
        probe.begin_step(0)
        t0 = time.perf_counter()
        for i in range(n):
            with probe.span("forward-compute", mb_id=i, mc=0):
                pass
        recorded = (time.perf_counter() - t0) / n
        probe.end_step()
        probe.begin_step(1)  # not sampled
        t0 = time.perf_counter()
        for i in range(n):
            with probe.span("forward-compute", mb_id=i, mc=0):
                pass
        skipped = (time.perf_counter() - t0) / n
        probe.end_step()
        probe.close()
    return {"recorded_us": recorded * 1e6, "unsampled_us": skipped * 1e6}


def ab_runs(base: JobConfig, reps: int, out: Path) -> dict[str, object]:
    """Alternate probe-off and probe-on runs; pool their post-warm-up step times."""
    times: dict[str, list[float]] = {"off": [], "on": []}
    per_run: list[dict[str, object]] = []
    for rep in range(reps):
        for mode in ("off", "on"):
            cfg = replace(base, probe=(mode == "on"), out_dir=str(out / f"{mode}-{rep}"))
            summary = run_job(cfg)
            steps = summary["step_times"][cfg.warmup_steps:]
            times[mode].extend(steps)
            per_run.append({"mode": mode, "rep": rep, "median_s": statistics.median(steps),
                            "mean_s": statistics.fmean(steps)})
            print(f"  {mode} rep {rep}: median {statistics.median(steps) * 1e3:.1f} ms, "
                  f"mean {statistics.fmean(steps) * 1e3:.1f} ms", file=sys.stderr)
    med = {m: statistics.median(v) for m, v in times.items()}
    mean = {m: statistics.fmean(v) for m, v in times.items()}
    run_medians = {m: statistics.median(r["median_s"] for r in per_run if r["mode"] == m)
                   for m in ("off", "on")}
    return {
        "steps_per_mode": len(times["on"]),
        "median_off_s": med["off"], "median_on_s": med["on"],
        "overhead_median": med["on"] / med["off"] - 1,
        "mean_off_s": mean["off"], "mean_on_s": mean["on"],
        "overhead_mean": mean["on"] / mean["off"] - 1,
        "overhead_median_of_run_medians": run_medians["on"] / run_medians["off"] - 1,
        "runs": per_run,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps per run (default 60)")
    parser.add_argument("--reps", type=int, default=3, help="runs per mode (default 3)")
    parser.add_argument("--out", default=None, help="keep the runs here (default: temp dir)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    cost = span_cost()
    base = JobConfig(steps=args.steps, warmup_steps=5, gc_interval=0)
    with tempfile.TemporaryDirectory() as tmp:
        result = ab_runs(base, args.reps, Path(args.out or tmp))
    report = {"span_cost": cost, "job": {"dp": base.dp, "pp": base.pp,
                                         "microbatches": base.microbatches,
                                         "hidden": base.hidden}, **result}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"per span: {cost['recorded_us']:.2f} us recorded, "
              f"{cost['unsampled_us']:.2f} us in an unsampled step")
        print(f"step time, {report['steps_per_mode']} steps per mode: "
              f"off {report['median_off_s'] * 1e3:.1f} ms, on {report['median_on_s'] * 1e3:.1f} ms "
              f"(median) -> overhead {100 * report['overhead_median']:+.2f}% "
              f"(mean: {100 * report['overhead_mean']:+.2f}%, median of run medians: "
              f"{100 * report['overhead_median_of_run_medians']:+.2f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
