"""``stragglers watch`` on a live job's probe folder (issue 29): is the slowed rank named, how
soon, and do healthy runs stay quiet?

For each framework snippet of ``docs/snippets`` (``ddp``: the plain DDP loop under
``torchrun``, ``pl``: Lightning, ``hf``: the Hugging Face ``Trainer`` under ``torchrun``; 2
ranks on CPU over gloo) and each condition (``slow``: ``SLOW_RANK=1 SLOW_FROM=F SLOW_TO=T``,
rank 1's forward sleeps 0.3 s in steps F..T-1; ``healthy``: no knob), every run starts
``stragglers watch PROBE_FOLDER --idle-timeout S`` *before* the job (the folder does not exist
yet), runs the job, and reads the events ``watch`` printed. A run is right when

* slow: the first onset names rank 1 at ``job_iteration`` F +- 2, declared within 20 steps of
  F (``declared_job_iteration - F <= 20``), a recovery of rank 1 follows (at T +- 2, declared
  within 20 steps of T), and rank 0 has no onset;
* healthy: no onset at all.

A third condition, ``factor`` (``--condition slow,healthy,factor``), slows rank 1 in the same
steps by ``SLOW_FACTOR=--slow-factor`` instead (its forward or training step takes that many
times its own time: a GPU 3x slower), scored as ``slow``.

Usage::

    PYTHONPATH=src .venv/bin/python bench/bench_live_watch.py --runs 5 [--framework ddp,pl,hf]
        [--steps 120 --slow-from 40 --slow-to 80] [--json OUT.json] [-- WATCH OPTIONS]

Prints one line per run (onsets, recoveries, delays, wall time, the machine's load average)
and a table per framework and condition. With ``--thresholds 0.1,1.0`` each run's step files
are also read again afterwards (``watch --once --threshold X``, the same records) and scored
for each threshold; ``--keep DIR`` keeps every run's step files there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FRAMEWORKS = {
    "ddp": (["torchrun", "--standalone", "--nproc-per-node", "2", "docs/snippets/ddp_loop.py"],
            "ddp", "ddp/probe"),
    "pl": ([sys.executable, "docs/snippets/lightning_ddp.py"], "pl", "pl/probe"),
    "hf": (["torchrun", "--standalone", "--nproc-per-node", "2", "docs/snippets/hf_trainer.py"],
           "hf", "hf/stragglers/probe"),
}


def _tool(name: str) -> list[str]:
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return [str(beside)]
    found = shutil.which(name)
    if found is not None:
        return [found]
    if name == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run"]
    raise SystemExit(f"{name} not found")


def score(events: list[dict], slow: bool, args: argparse.Namespace) -> dict[str, object]:
    """Right or wrong, and the delays (module docstring)."""
    level = [e for e in events if e["event"] in ("onset", "recovery", "change", "flapping")]
    onsets = [e for e in level if e["event"] in ("onset", "flapping")]
    row: dict[str, object] = {"events": [(e["event"], e["rank"], e.get("job_iteration"),
                                          e.get("declared_job_iteration")) for e in level]}
    if slow:
        f, t = args.slow_from, args.slow_to
        first = onsets[0] if onsets else None
        rec = next((e for e in level if e["event"] == "recovery" and e["rank"] == 1
                    and first is not None and e["job_iteration"] > first["job_iteration"]),
                   None)
        ok_onset = (first is not None and first["rank"] == 1
                    and abs(first["job_iteration"] - f) <= 2
                    and first["declared_job_iteration"] - f <= 20)
        ok_rec = (rec is not None and abs(rec["job_iteration"] - t) <= 2
                  and rec["declared_job_iteration"] - t <= 20)
        others = [e for e in onsets if e["rank"] != 1]
        row.update(right=bool(ok_onset and ok_rec and not others),
                   named=bool(ok_onset and not others),
                   onset_delay=None if first is None or first["rank"] != 1
                   else first["declared_job_iteration"] - f,
                   recovery_delay=None if rec is None else rec["declared_job_iteration"] - t,
                   other_onsets=len(others))
    else:
        row.update(right=not onsets, other_onsets=len(onsets))
    return row


def one_run(framework: str, condition: str, args: argparse.Namespace,
            watch_opts: list[str], tmp: Path) -> dict[str, object]:
    slow = condition != "healthy"
    cmd, out_name, probe_rel = FRAMEWORKS[framework]
    cmd = (_tool("torchrun") + cmd[1:]) if cmd[0] == "torchrun" else cmd
    out = tmp / out_name
    probe = tmp / probe_rel
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "STEPS": str(args.steps)}
    if slow:
        env.update(SLOW_RANK="1", SLOW_FROM=str(args.slow_from), SLOW_TO=str(args.slow_to))
    if condition == "factor":
        env["SLOW_FACTOR"] = str(args.slow_factor)
    events_file = tmp / f"events-{framework}-{condition}.jsonl"
    with events_file.open("w") as fh:
        watch = subprocess.Popen(
            [*_tool("stragglers"), "watch", str(probe), "--idle-timeout",
             str(args.idle_timeout), "--poll", "0.2", *watch_opts],
            stdout=fh, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        time.sleep(0.5)
        t0 = time.monotonic()
        job = subprocess.run([*cmd, str(out)], env=env, cwd=REPO, capture_output=True,
                             text=True, timeout=1200)
        wall = time.monotonic() - t0
        if job.returncode != 0:
            watch.kill()
            raise SystemExit(f"{framework} job failed:\n{job.stderr[-3000:]}")
        _, err = watch.communicate(timeout=args.idle_timeout + 120)
    if watch.returncode != 0:
        raise SystemExit(f"watch failed: {err}")
    events = [json.loads(x) for x in events_file.read_text().splitlines()]
    summary = events[-1]
    row: dict[str, object] = {
        "framework": framework, "condition": condition,
        "wall_s": round(wall, 1), "load": round(os.getloadavg()[0], 1),
        "records": summary["records"], "iterations": summary["iterations"],
        "skipped_files": summary.get("skipped_files"), **score(events, slow, args)}
    for x in args.thresholds.split(",") if args.thresholds else ():
        again = subprocess.run([*_tool("stragglers"), "watch", str(probe), "--once",
                                "--threshold", x], capture_output=True, text=True, env=env,
                               cwd=REPO, check=True)
        row[f"threshold {x}"] = score([json.loads(line) for line in again.stdout.splitlines()],
                                      slow, args)
    if args.keep:
        dest = Path(args.keep) / f"{framework}-{row['condition']}-{args.run_no}"
        dest.mkdir(parents=True, exist_ok=True)
        for f in probe.glob("steps-rank-*.jsonl"):
            shutil.copy(f, dest / f.name)
    return row


def main() -> None:
    argv = sys.argv[1:]
    watch_opts: list[str] = []
    if "--" in argv:
        k = argv.index("--")
        argv, watch_opts = argv[:k], argv[k + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--framework", default="ddp,pl,hf")
    p.add_argument("--condition", default="slow,healthy")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--slow-from", type=int, default=40)
    p.add_argument("--slow-to", type=int, default=80)
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--idle-timeout", type=float, default=10.0)
    p.add_argument("--json", default=None)
    p.add_argument("--thresholds", default="")
    p.add_argument("--keep", default=None)
    args = p.parse_args(argv)
    rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO,
                         capture_output=True, text=True).stdout.strip()
    print(f"# {' '.join(sys.argv)} (checkout {rev}, {os.cpu_count()} CPUs)", flush=True)
    rows = []
    for k in range(args.runs):
        for fw in args.framework.split(","):
            for cond in args.condition.split(","):
                args.run_no = k
                with tempfile.TemporaryDirectory() as tmp:
                    row = one_run(fw, cond, args, watch_opts, Path(tmp))
                row["run"] = k
                rows.append(row)
                print(json.dumps(row), flush=True)
    table(rows, args, "live watch" + (f" {' '.join(watch_opts)}" if watch_opts else ""))
    for x in args.thresholds.split(",") if args.thresholds else ():
        table([{**r, **r[f"threshold {x}"]} for r in rows],  # type: ignore[dict-item]
              args, f"watch --once --threshold {x} on the same step files")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


def _delays(rs: list[dict[str, object]], key: str) -> str:
    d = sorted(int(r[key]) for r in rs if r.get(key) is not None)  # type: ignore[call-overload]
    return ", ".join(map(str, d)) or "-"


def table(rows: list[dict[str, object]], args: argparse.Namespace, title: str) -> None:
    """Per framework and condition: runs; slowed runs named right (the first onset is rank 1,
    at F +- 2, declared within 20 steps, and no other rank has one), the onset delays
    (declared - F, steps), the recoveries of rank 1 reported (and their delays, declared -
    T), the onsets of other ranks; healthy runs: the runs with an onset (false onsets) and
    how many; the load average and the job's wall time."""
    print(f"\n{title}")
    print(f"{'framework':9} {'condition':9} {'runs':>4} {'named right':>11} "
          f"{'onset delay (steps)':>20} {'recovery reported':>17} {'recovery delay':>16} "
          f"{'false / other onsets':>20} {'load':>9} {'wall s':>9}")
    for fw in args.framework.split(","):
        for cond in args.condition.split(","):
            rs = [r for r in rows if r["framework"] == fw and r["condition"] == cond]
            if not rs:
                continue
            loads = [float(r["load"]) for r in rs]  # type: ignore[arg-type]
            walls = [float(r["wall_s"]) for r in rs]  # type: ignore[arg-type]
            other = sum(int(r["other_onsets"]) for r in rs)  # type: ignore[call-overload]
            if cond != "healthy":
                right = f"{sum(bool(r['named']) for r in rs)}/{len(rs)}"
                rec = f"{sum(r.get('recovery_delay') is not None for r in rs)}/{len(rs)}"
                false = f"{other} other"
            else:
                right = rec = "-"
                false = f"{sum(int(r['other_onsets']) > 0 for r in rs)}/{len(rs)} ({other})"  # type: ignore[call-overload]
            print(f"{fw:9} {cond:9} {len(rs):>4} {right:>11} "
                  f"{_delays(rs, 'onset_delay'):>20} {rec:>17} "
                  f"{_delays(rs, 'recovery_delay'):>16} {false:>20} "
                  f"{min(loads):>4.1f}-{max(loads):<4.1f} {min(walls):>4.0f}-{max(walls):<4.0f}")


if __name__ == "__main__":
    main()
