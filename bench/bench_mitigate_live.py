"""The live S2 loop on the real example job, reported like Falcon's Table 7 (README "Mitigation").

Three runs of the example job (dp 2 x pp 1, gloo, 12 micro-batches per replica), repeated
REPEATS times, interleaved so that they share the machine's load:

* **healthy**: no slow rank;
* **fail-slow**: rank 0 (DP replica 0) slowed xFACTOR (``--slow-mode sleep``: on a 2-core
  machine a spinning rank would also take the CPU of the healthy one) from step WARMUP + K on
  (``--inject-period K``, the steps before it are the healthy phase of the same run);
* **mitigated**: the same, with ``stragglers mitigate run`` beside it (in this process; S2's
  overhead set to 0.5 s of accumulated slowdown, a short job's scale).

Step times are the job's own (rank 0's step starts). The window compared is the same in the
three runs: from the step after the mitigated run applied its first action to the end (the
slow phase after the action). Slowdown removed = (fail-slow - mitigated) / (fail-slow -
healthy), from the medians of the per-run medians.

Predicted vs measured: ``stragglers.mitigate.predict.predict_microbatch`` on the fail-slow
run's own merged trace (its slow steps), i.e. what the what-if simulator says before acting,
against the measured mitigated step time (and its "before" against the measured fail-slow
step time).

    python bench/bench_mitigate_live.py            # about 5 minutes on 2 cores
    python bench/bench_mitigate_live.py --repeats 1 --k 30
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stragglers.mitigate.costs import load_costs
from stragglers.mitigate.live import LiveConfig, run_live

WARMUP = 5
MODEL = ["--dp", "2", "--pp", "1", "--hidden", "64", "--heads", "2", "--seq-len", "64",
         "--vocab-size", "128", "--microbatches", "12", "--micro-batch-size", "4",
         "--gc-interval", "0", "--warmup-steps", str(WARMUP)]


def _job(out: Path, k: int, factor: float, action: Path | None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "stragglers.probe.examples.job", "--out-dir", str(out),
            "--steps", str(WARMUP + 2 * k), "--inject-period", str(k), "--slow-rank", "0",
            "--slow-factor", str(factor), "--slow-mode", "sleep", *MODEL]
    if action is not None:
        argv += ["--action-file", str(action)]
    log = (out.parent / f"{out.name}.log").open("w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def _wait(job: subprocess.Popen[bytes], out: Path) -> dict[str, Any]:
    if job.wait(timeout=900) != 0:
        raise SystemExit((out.parent / f"{out.name}.log").read_text()[-3000:])
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _times(summary: dict[str, Any]) -> dict[int, float]:
    first = summary["first_step"]
    return {first + i: t for i, t in enumerate(summary["step_times"])}


def _median(times: dict[int, float], lo: int, hi: int) -> float:
    return statistics.median(times[s] for s in range(lo, hi))


def one_round(tmp: Path, r: int, k: int, factor: float, costs: Path) -> dict[str, Any]:
    end_step = WARMUP + 2 * k
    healthy = _wait(_job(tmp / f"healthy{r}", k, 1.0, None), tmp / f"healthy{r}")
    slow = _wait(_job(tmp / f"slow{r}", k, factor, None), tmp / f"slow{r}")
    action = tmp / f"action{r}.json"
    out = tmp / f"mitigated{r}"
    job = _job(out, k, factor, action)
    records: list[dict[str, Any]] = []
    try:
        end = run_live(LiveConfig(job_dir=out, action_path=action,
                                  strategies=load_costs(costs), idle_timeout_s=300),
                       records.append)
    finally:
        mitigated = _wait(job, out)
    applied = end["job"]["applied"] if end["job"] else []
    if not applied:
        decisions = [x for x in records if x["record"] != "watch"]
        raise SystemExit(f"round {r}: the controller applied no action: {decisions}")
    at = applied[0]["step"]
    window = (at + 1, end_step)
    onset = WARMUP + k
    pred = _predict(tmp / f"slow{r}", onset, end_step - 1)
    row = {
        "applied_step": at, "onset_step": onset, "assignment": applied[0]["assignment"],
        "actions": len(applied),
        "healthy_s": _median(_times(healthy), *window),
        "slow_s": _median(_times(slow), *window),
        "mitigated_s": _median(_times(mitigated), *window),
        "slow_before_action_s": _median(_times(mitigated), onset, at) if at > onset else None,
        "predicted_before_s": pred["before_s"], "predicted_after_s": pred["after_s"],
        "predicted_assignment": pred["assignment"],
    }
    return row


def _predict(run: Path, lo: int, hi: int) -> dict[str, Any]:
    from stragglers.analysis.engine import prepare
    from stragglers.analysis.runner import load_table
    from stragglers.mitigate.predict import predict_microbatch

    engine = prepare(load_table(run / "trace.parquet", run / "meta.yaml", (lo, hi)))
    return predict_microbatch(engine).to_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=40, help="healthy steps, then slow steps")
    ap.add_argument("--factor", type=float, default=2.0)
    args = ap.parse_args()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-live-") as d:
        tmp = Path(d)
        costs = tmp / "costs.yaml"
        costs.write_text("S2: {overhead_s: 0.5}\n")
        rows = []
        for r in range(args.repeats):
            row = one_round(tmp, r, args.k, args.factor, costs)
            rows.append(row)
            print(f"round {r}: " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                               for k, v in row.items()}), flush=True)
    med = {key: statistics.median(row[key] for row in rows)
           for key in ("healthy_s", "slow_s", "mitigated_s", "predicted_before_s",
                       "predicted_after_s")}
    removed = (med["slow_s"] - med["mitigated_s"]) / (med["slow_s"] - med["healthy_s"])
    per_round = [(x["slow_s"] - x["mitigated_s"]) / (x["slow_s"] - x["healthy_s"])
                 for x in rows]
    print()
    print(f"example job dp 2 x pp 1, 12 micro-batches per replica, rank 0 slowed "
          f"x{args.factor:g} (sleep) from step {WARMUP + args.k}; median of {len(rows)} "
          f"rounds; window: after the first action to step {WARMUP + 2 * args.k - 1}")
    print()
    print("| run | step time | throughput (steps/s) | vs healthy |")
    print("| --- | ---: | ---: | ---: |")
    for name, key in (("healthy", "healthy_s"), ("fail-slow", "slow_s"),
                      ("mitigated (S2, live)", "mitigated_s")):
        print(f"| {name} | {med[key] * 1e3:.1f} ms | {1 / med[key]:.2f} | "
              f"{med[key] / med['healthy_s']:.2f}x |")
    print()
    print(f"slowdown removed by S2: {removed * 100:.1f}% (per round: "
          f"{', '.join(f'{x * 100:.1f}%' for x in per_round)}); target >= 60%")
    print(f"assignments applied: {[x['assignment'] for x in rows]} at steps "
          f"{[x['applied_step'] for x in rows]} (onset {rows[0]['onset_step']})")
    print()
    print("| what-if (fail-slow run's trace) | predicted | measured | error |")
    print("| --- | ---: | ---: | ---: |")
    for name, p, m in (("before (fail-slow)", "predicted_before_s", "slow_s"),
                       ("after S2 (mitigated)", "predicted_after_s", "mitigated_s")):
        print(f"| {name} | {med[p] * 1e3:.1f} ms | {med[m] * 1e3:.1f} ms | "
              f"{(med[p] / med[m] - 1) * 100:+.1f}% |")
    print()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"wall {time.perf_counter() - start:.0f} s; peak RSS of this process (controller, "
          f"what-if) {peak:.0f} MiB")


if __name__ == "__main__":
    main()
