"""Incident table of the robust-training driver (README "Robust training"), like C4D's.

Injects, into the toy data-parallel job (``stragglers.recover.toyjob``, gloo on CPU, 4 slots),
a rank frozen inside the all-reduce (``stop``), a rank that never reaches it (``never``) and a
crash, each in a fresh run of ``stragglers.recover.driver``, and reports per incident kind the
medians over the repeats of: detection after the last progress (target: timeout + 1 s), time to
localise, time until the restarted job completed a step again, steps lost, whether the right
slot was named, whether the ranks' flight-recorder dumps named it (hangs), and whether the
loss curve is the same across the restart (largest relative
difference of a recomputed step's loss). Peak memory: the driver process's maximum resident
set and the largest of its children's.

    python bench/bench_recover.py [--repeats 3] [--timeout-s 5] [--heartbeat-s 0.5]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
from pathlib import Path

from stragglers.recover.driver import DriverConfig, run_driver

SCENARIOS = {
    "hang (frozen in all-reduce)": ["--hang-slot", "1", "--hang-at-step", "14",
                                    "--hang-mode", "stop"],
    "hang (never reaches it)": ["--hang-slot", "2", "--hang-at-step", "14",
                                "--hang-mode", "never"],
    "crash": ["--crash-slot", "3", "--crash-at-step", "14"],
}
CULPRIT = {"hang (frozen in all-reduce)": [1], "hang (never reaches it)": [2], "crash": [3]}


def _loss_gap(out: Path) -> float:
    by: dict[int, list[float]] = {}
    for line in (out / "losses.jsonl").read_text().splitlines():
        row = json.loads(line)
        by.setdefault(row["step"], []).append(row["loss"])
    return max((max(v) - min(v)) / abs(min(v)) for v in by.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout-s", type=float, default=5.0)
    ap.add_argument("--heartbeat-s", type=float, default=0.5)
    args = ap.parse_args()
    rows = []
    for name, inject in SCENARIOS.items():
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                cfg = DriverConfig((sys.executable, "-m", "stragglers.recover.toyjob",
                                    "--steps", "24", "--ckpt-every", "5", *inject),
                                   slots=4, ckpt_dir=f"{tmp}/ck", out_dir=f"{tmp}/out",
                                   heartbeat_s=args.heartbeat_s, timeout_s=args.timeout_s)
                res = run_driver(cfg)
                (inc,) = res.incidents
                runs.append({"ok": res.ok, "detect": inc["since_last_progress_s"],
                             "localise": inc["localise_s"], "resume": inc["resumed_after_s"],
                             "lost": inc["steps_lost"],
                             "right": inc["culprit_slots"] == CULPRIT[name],
                             "by_fr": inc["evidence"].get("localised_by") == "flight_recorder",
                             "gap": _loss_gap(Path(tmp, "out")), "wall": res.wall_s})
        rows.append((name, runs))
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"4 slots, timeout {args.timeout_s:g} s, heartbeat {args.heartbeat_s:g} s, "
          f"median of {args.repeats} runs each")
    print("| incident | detected after last progress (s) | target T+1 | localise (ms) | "
          "resumed after (s) | steps lost | right slot | named by the dumps | "
          "loss gap across restart | run wall (s) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | --- | ---: | ---: |")
    for name, runs in rows:
        med = {k: statistics.median(r[k] for r in runs)
               for k in ("detect", "localise", "resume", "lost", "wall")}
        within = sum(r["detect"] <= args.timeout_s + 1 for r in runs)
        right = sum(r["right"] for r in runs)
        print(f"| {name} | {med['detect']:.2f} | {within}/{len(runs)} | "
              f"{med['localise'] * 1e3:.1f} | {med['resume']:.2f} | {med['lost']:g} | "
              f"{right}/{len(runs)} | {sum(r['by_fr'] for r in runs)}/{len(runs)} | "
              f"{max(r['gap'] for r in runs):.1e} | {med['wall']:.1f} |")
    print(f"peak RSS: driver {peak_self:.0f} MiB, largest rank process {peak_child:.0f} MiB")


if __name__ == "__main__":
    main()
