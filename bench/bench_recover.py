"""Incident table of the robust-training driver on the example job (docs/guides/recover.md),
like C4D's.

Runs the example job (``stragglers.testbed.job``: a GPT, dp 2 x pp 2, gloo on CPU, one
process per rank, checkpoints every ``--ckpt-every`` steps) under ``stragglers.recover.driver``
on 5 slots (4 ranks and a spare) and injects, each in a fresh run: a rank frozen as it enters
a collective (``in-collective``), a rank that never reaches it (``before-collective``), a
crash, and a rank that hangs as it writes its part of a checkpoint (frozen, or alive but
stuck), with the flight recorder on and off (``TORCH_FR_BUFFER_SIZE=0``). Per incident kind it
reports the medians over the repeats of: detection after the last progress (target: timeout +
1 s), time to localise (flight-recorder dumps requested, collected and read), time from
detection until the restarted job completed a step again, steps lost, whether the right rank
was named, whether the ranks' flight-recorder dumps named it or the heartbeats did, and the
loss continuity: the largest relative difference between the resumed run's losses and those
of an uninterrupted run of the same job at the same steps. Peak memory: the driver process's
maximum resident set and the largest of its children's.

    python bench/bench_recover.py [--repeats 3] [--timeout-s 5] [--heartbeat-s 0.5]
        [--only checkpoint crash ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from stragglers.recover.driver import DriverConfig, run_driver
from stragglers.testbed.job import JobConfig, run_job

STEPS, CKPT_EVERY, FAULT_STEP = 12, 3, 7
SMALL: dict[str, Any] = dict(dp=2, pp=2, warmup_steps=1, hidden=32, heads=2, seq_len=16,
                             vocab_size=64, microbatches=2, micro_batch_size=2, gc_interval=0,
                             probe=False)
CKPT_STEP = 5  # a checkpoint is taken after it ((5 + 1) % CKPT_EVERY == 0)
SCENARIOS = {  # name -> (injection, culprit ranks, flight recorder on)
    "hang (frozen in the collective)": (["--hang-rank", "1", "--hang-step", str(FAULT_STEP),
                                         "--hang-mode", "in-collective"], [1], True),
    "hang (never reaches it)": (["--hang-rank", "2", "--hang-step", str(FAULT_STEP),
                                 "--hang-mode", "before-collective"], [2], True),
    "crash": (["--crash-rank", "3", "--crash-step", str(FAULT_STEP)], [3], True),
}
for _fr in (True, False):
    for _mode, _what in (("in-checkpoint", "frozen"), ("stuck-in-checkpoint", "alive, stuck")):
        SCENARIOS[f"hang in a checkpoint write ({_what}), flight recorder "
                  f"{'on' if _fr else 'off'}"] = (
            ["--hang-rank", "2", "--hang-step", str(CKPT_STEP), "--hang-mode", _mode], [2], _fr)


def _command(tmp: Path, inject: list[str]) -> tuple[str, ...]:
    args = [sys.executable, "-m", "stragglers.testbed.job", "--out-dir", str(tmp / "job"),
            "--steps", str(STEPS), "--ckpt-dir", str(tmp / "ck"), "--ckpt-every",
            str(CKPT_EVERY), "--resume", "--no-probe"]
    for key, value in SMALL.items():
        if key != "probe":
            args += ["--" + key.replace("_", "-"), str(value)]
    return (*args, *inject)


def _loss_gap(tmp: Path, reference: list[float]) -> float:
    summary = json.loads((tmp / "job" / "summary.json").read_text())
    first, losses = summary["first_step"], summary["losses"]
    return max(abs(a - b) / abs(b) for a, b in zip(losses, reference[first:], strict=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout-s", type=float, default=5.0)
    ap.add_argument("--heartbeat-s", type=float, default=0.5)
    ap.add_argument("--only", nargs="*", help="run the scenarios whose name has one of these")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reference = run_job(JobConfig(out_dir=f"{tmp}/whole", steps=STEPS, **SMALL))["losses"]
    rows = []
    for name, (inject, culprit, fr) in SCENARIOS.items():
        if args.only and not any(word in name for word in args.only):
            continue
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                cfg = DriverConfig(_command(Path(tmp), inject), slots=5, world=4, pp=2,
                                   ckpt_dir=f"{tmp}/ck", out_dir=f"{tmp}/run",
                                   heartbeat_s=args.heartbeat_s, timeout_s=args.timeout_s,
                                   fr_wait_s=3.0 if fr else 0.5)
                if fr:
                    os.environ.pop("TORCH_FR_BUFFER_SIZE", None)
                else:  # the ranks record nothing: their dumps (if any) are empty
                    os.environ["TORCH_FR_BUFFER_SIZE"] = "0"
                res = run_driver(cfg)
                (inc,) = [i.to_dict() for i in res.incidents]
                runs.append({"ok": res.ok, "detect": inc["since_last_progress_s"],
                             "localise": inc["localise_s"], "resume": inc["resumed_after_s"],
                             "lost": inc["steps_lost"],
                             "right": inc["culprit_ranks"] == culprit,
                             "by_fr": inc["evidence"].get("localised_by") == "flight_recorder",
                             "by_hb": inc["evidence"].get("localised_by") in (
                                 "heartbeats", "stale_heartbeat"),
                             "gap": _loss_gap(Path(tmp), reference), "wall": res.wall_s})
        rows.append((name, runs))
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"example job dp 2 x pp 2 on 4 of 5 slots (1 spare), {STEPS} steps, checkpoint every "
          f"{CKPT_EVERY}, fault at step {FAULT_STEP} (in the checkpoint after step "
          f"{CKPT_STEP}); timeout {args.timeout_s:g} s, heartbeat "
          f"{args.heartbeat_s:g} s, median of {args.repeats} runs each")
    print("| incident | detected after last progress (s) | within T+1 | localise (s) | "
          "resumed after (s) | steps lost | right rank | named by the dumps | "
          "named by the heartbeats | loss gap vs uninterrupted | recovered | run wall (s) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | --- | --- | ---: | --- | ---: |")
    for name, runs in rows:
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("detect", "localise", "resume", "lost", "wall")}
        within = sum(r["detect"] <= args.timeout_s + 1 for r in runs)
        n = len(runs)
        print(f"| {name} | {med['detect']:.2f} | {within}/{n} | {med['localise']:.2f} | "
              f"{med['resume']:.2f} | {med['lost']:g} | {sum(r['right'] for r in runs)}/{n} | "
              f"{sum(r['by_fr'] for r in runs)}/{n} | {sum(r['by_hb'] for r in runs)}/{n} | "
              f"{max(r['gap'] for r in runs):.1e} | "
              f"{sum(r['ok'] for r in runs)}/{n} | {med['wall']:.1f} |")
    print(f"peak RSS: driver {peak_self:.0f} MiB, largest rank process {peak_child:.0f} MiB")


if __name__ == "__main__":
    main()
