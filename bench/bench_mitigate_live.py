"""The live S2 loop on the real example job, reported like Falcon's Table 7
(docs/benchmarks/mitigate.md).

Each round runs the example job (dp 2 x pp 1, gloo, 12 micro-batches per replica) twice, with
rank 0 (DP replica 0) slowed xFACTOR (``--slow-mode sleep``: on a 2-core machine a spinning
rank would also take the CPU of the healthy one) from step WARMUP + K on (``--inject-period
K``; the steps before it are the healthy phase of the same run):

* **fail-slow**: without mitigation;
* **mitigated**: with ``stragglers mitigate run`` beside it (in this process; S2's overhead
  set to 0.5 s of accumulated slowdown, a short job's scale).

Rows: *healthy* = the steps before the onset (both runs), *fail-slow* = the fail-slow run's
steps in the mitigated run's window after its first action, *mitigated* = the mitigated
run's steps after its first action. Slowdown removed = (fail-slow - mitigated) / (fail-slow
- healthy), from the medians over rounds of each run's median step time in the window.

The machine is shared (load average 7-14 on 2 cores while this was written): the other
processes stretch every rank's compute by x2 to x4 within a minute, more than the injected
slowdown, and differently in two runs. So the table also gives each step's time in units of
the same step's *reference* (``M`` times the fastest replica's compute per micro-batch,
measured by the probes): the load stretches both alike and cancels, the slowdown and its
removal remain. The slowdown removed is given from both, and within the mitigated run alone
(its slow steps before the action vs after).

Predicted vs measured: ``stragglers.mitigate.predict.predict_microbatch`` on the mitigated
run's own merged trace, its slow steps before the action (what the what-if simulator says
before acting), against the same run's measured step times before and after the action,
and the measured "after" brought to the load of the "before" steps (times the ratio of
their reference-normalised medians).

    python bench/bench_mitigate_live.py            # about 5 minutes on 2 cores (hidden 256)
    python bench/bench_mitigate_live.py --hidden 64 --repeats 5   # the small model, 90 s
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

import numpy as np

from stragglers.mitigate.costs import load_costs
from stragglers.mitigate.follow_job import JobFollower
from stragglers.mitigate.live import LiveConfig, run_live

WARMUP = 5
PIN_CPUS = True  # --pin-cpus: rank r on CPU r, so a sleeping rank lends no core to the other
HIDDEN = 256  # --hidden
MODEL = ["--dp", "2", "--pp", "1", "--heads", "2", "--seq-len", "64",
         "--vocab-size", "128", "--microbatches", "12", "--micro-batch-size", "4",
         "--gc-interval", "0", "--warmup-steps", str(WARMUP)]


def _job(out: Path, k: int, factor: float, action: Path | None, mode: str
         ) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "stragglers.testbed.job", "--out-dir", str(out),
            "--steps", str(WARMUP + 2 * k), "--inject-period", str(k), "--slow-rank", "0",
            "--slow-factor", str(factor), "--slow-mode", mode, *MODEL, "--hidden", str(HIDDEN)]
    if PIN_CPUS:
        argv.append("--pin-cpus")
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


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _phases(run: Path, summary: dict[str, Any]) -> tuple[dict[int, float], dict[int, float]]:
    """Raw step times, and step times in units of the same step's *reference*: M times the
    fastest replica's compute per micro-batch (what the other load of the machine does to
    every rank at once cancels in the ratio)."""
    raw = _times(summary)
    follower = JobFollower(run)
    follower.poll()
    table = follower.table()
    m = int(table.microbatches[:, 0].sum()) // table.microbatches.shape[0]
    ref = m * np.nanmin(table.per_microbatch(), axis=0)
    norm = {int(s): raw[int(s)] / float(r) for s, r in zip(table.steps, ref, strict=True)
            if int(s) in raw}
    return raw, norm


def _window(times: dict[int, float], lo: int, hi: int) -> float:
    return _median([times[s] for s in range(lo, hi) if s in times])


def one_round(tmp: Path, r: int, k: int, factor: float, costs: Path, mode: str
              ) -> dict[str, Any]:
    end_step = WARMUP + 2 * k
    onset = WARMUP + k
    slow_run = tmp / f"slow{r}"
    slow = _wait(_job(slow_run, k, factor, None, mode), slow_run)
    action = tmp / f"action{r}.json"
    out = tmp / f"mitigated{r}"
    job = _job(out, k, factor, action, mode)
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
    s_raw, s_norm = _phases(slow_run, slow)
    m_raw, m_norm = _phases(out, mitigated)
    after = (at + 1, end_step)
    before = (onset + 2, at)  # the slow steps of the mitigated run before its action
    pred = _predict(out, before[0], before[1] - 1)
    return {
        "applied_step": at, "assignment": applied[0]["assignment"], "actions": len(applied),
        # separate fail-slow run: healthy phase, slow phase (the mitigated run's window)
        "healthy_s": _window(s_raw, WARMUP, onset), "slow_s": _window(s_raw, *after),
        # healthy: the steps before the onset of both runs
        "healthy_n": _median([t for run in (s_norm, m_norm) for s, t in run.items()
                              if WARMUP <= s < onset]),
        "slow_n": _window(s_norm, *after),
        # mitigated run: slow before its action, after it
        "before_s": _window(m_raw, *before), "mitigated_s": _window(m_raw, *after),
        "before_n": _window(m_norm, *before), "mitigated_n": _window(m_norm, *after),
        "predicted_before_s": pred["before_s"], "predicted_after_s": pred["after_s"],
        "predicted_assignment": pred["assignment"],
    }


def _predict(run: Path, lo: int, hi: int) -> dict[str, Any]:
    """S2 predicted by the what-if simulator from the run's own trace, steps lo..hi (the
    slow steps before the action: one micro-batch count, a consistent schedule)."""
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
    ap.add_argument("--mode", choices=("spin", "sleep"), default="sleep",
                    help="how the slow rank is slowed (the job's --slow-mode)")
    ap.add_argument("--pin-cpus", action=argparse.BooleanOptionalAction, default=True,
                    help="run the job with --pin-cpus (rank r on CPU r: as with one device "
                         "per rank, a rank that waits or sleeps lends no core to the other)")
    ap.add_argument("--hidden", type=int, default=256, help="the job's --hidden (model width)")
    args = ap.parse_args()
    global PIN_CPUS, HIDDEN
    PIN_CPUS, HIDDEN = args.pin_cpus, args.hidden
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-live-") as d:
        tmp = Path(d)
        costs = tmp / "costs.yaml"
        costs.write_text("S2: {overhead_s: 0.5}\n")
        rows = []
        for r in range(args.repeats):
            row = one_round(tmp, r, args.k, args.factor, costs, args.mode)
            rows.append(row)
            print(f"round {r}: " + json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                               for k, v in row.items()}), flush=True)
    keys = ("healthy_s", "slow_s", "mitigated_s", "before_s", "healthy_n", "slow_n",
            "mitigated_n", "before_n", "predicted_before_s", "predicted_after_s")
    med = {key: statistics.median(row[key] for row in rows) for key in keys}

    def removed(slow: str, mit: str, healthy: str) -> float:
        return (med[slow] - med[mit]) / (med[slow] - med[healthy])

    print()
    print(f"example job dp 2 x pp 1, hidden {HIDDEN}, 12 micro-batches per replica, rank 0 slowed "
          f"x{args.factor:g} ({args.mode}) from step {WARMUP + args.k} to "
          f"{WARMUP + 2 * args.k - 1}, {'pinned' if PIN_CPUS else 'not pinned'}; "
          f"median of {len(rows)} rounds (the median of each "
          "run's steps in each window)")
    print()
    print("| run (window) | step time | throughput | vs healthy | step / reference | "
          "vs healthy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, key in (("healthy (both runs, before the onset)", "healthy"),
                      ("fail-slow (fail-slow run, after the action step)", "slow"),
                      ("mitigated (S2 live, after its action)", "mitigated")):
        raw, norm = med[f"{key}_s"], med[f"{key}_n"]
        print(f"| {name} | {raw * 1e3:.1f} ms | {1 / raw:.2f} steps/s | "
              f"{raw / med['healthy_s']:.2f}x | {norm:.3f} | {norm / med['healthy_n']:.2f}x |")
    print()
    print(f"slowdown removed by S2 (load-normalised step times): "
          f"{removed('slow_n', 'mitigated_n', 'healthy_n') * 100:.1f}%; "
          f"raw step times: {removed('slow_s', 'mitigated_s', 'healthy_s') * 100:.1f}%; "
          f"within the mitigated run (its slow steps before the action vs after, "
          f"normalised): {removed('before_n', 'mitigated_n', 'healthy_n') * 100:.1f}%; "
          "target >= 60%")
    print(f"assignments applied: {[x['assignment'] for x in rows]} at steps "
          f"{[x['applied_step'] for x in rows]} (onset {WARMUP + args.k}); actions per run "
          f"{[x['actions'] for x in rows]}")
    print()
    print("| what-if from the mitigated run's own trace (slow steps before the action) | "
          "predicted | measured (same run) | error |")
    print("| --- | ---: | ---: | ---: |")
    for name, p, m in (("before the action", "predicted_before_s", "before_s"),
                       ("after S2", "predicted_after_s", "mitigated_s")):
        print(f"| {name} | {med[p] * 1e3:.1f} ms | {med[m] * 1e3:.1f} ms | "
              f"{(med[p] / med[m] - 1) * 100:+.1f}% |")
    at_load = med["before_s"] * med["mitigated_n"] / med["before_n"]
    print(f"| after S2, measured at the load of the steps before the action | "
          f"{med['predicted_after_s'] * 1e3:.1f} ms | {at_load * 1e3:.1f} ms | "
          f"{(med['predicted_after_s'] / at_load - 1) * 100:+.1f}% |")
    print()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"wall {time.perf_counter() - start:.0f} s; peak RSS of this process (controller, "
          f"what-if) {peak:.0f} MiB")


if __name__ == "__main__":
    main()
