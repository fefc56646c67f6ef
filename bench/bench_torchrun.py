"""Recovery under ``torchrun`` with several agents on this machine, each under a node guard
(``stragglers guard``), and what a restart costs (docs/guides/recover.md).

Each run starts a c10d rendezvous store apart (``stragglers guard --serve-store``) and the
agents (``torchrun --rdzv-backend c10d --rdzv-conf is_host=0,...``), one guard each, all
sharing a run folder; when the job has reached ``--fault-step`` the benchmark hurts one worker
of node ``b`` from outside: ``kill`` (SIGKILL, as the OOM killer does) or ``stop`` (SIGSTOP: a
frozen rank, a hang). Scenarios:

* ``toy-kill``, ``toy-stop``: the toy job (elastic: its loss curve does not depend on the
  world size), 2 agents x 1 worker, ``--nnodes 1:2``: node b must leave and node a resume
  alone from the checkpoint;
* ``example-spare``: the example job (dp 2 x pp 2 GPT, fixed size), 2 agents x 2 workers and
  a spare agent waiting in the rendezvous (``--nnodes 2:2``): node b must leave and the spare
  take its place, the job resuming from the checkpoint with the same layout;
* ``example-in-place``: the example job on 2 agents with ``--exclude-on hang``: the killed
  rank's node stays, ``torchrun`` restarts both in place from the checkpoint.

Per scenario (``--repeats`` fresh runs) it prints: the incidents recorded, whether the right
node was blamed, whether it left, whether the job resumed from the checkpoint (the first step
of the next round is the incident's restart step) and finished, the steps lost, the time from
the fault to the detection, the time from the detection until the next round completed a step
past the restart step (``resumed_after_s``: the restart), the whole run, and the largest
relative gap between the resumed losses and an uninterrupted run's.

    python bench/bench_torchrun.py [--repeats 3] [--scenarios toy-kill toy-stop ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stragglers.hang.heartbeats import read_beats
from stragglers.testbed.job import JobConfig, run_job

BIN = Path(sys.executable).parent
CONF = "is_host=0,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=2"
SMALL: dict[str, Any] = dict(dp=2, pp=2, warmup_steps=1, hidden=32, heads=2, seq_len=16,
                             vocab_size=64, microbatches=2, micro_batch_size=2, gc_interval=0)
TOY_STEPS, EX_STEPS, CKPT_EVERY = 24, 12, 3


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the rendezvous store did not start") from None
            time.sleep(0.1)


def _job(name: str, tmp: Path) -> list[str]:
    if name.startswith("toy"):
        return ["-m", "stragglers.testbed.toyjob", "--steps", str(TOY_STEPS), "--ckpt-every",
                str(CKPT_EVERY), "--step-s", "0.05"]
    args = ["-m", "stragglers.testbed.job", "--out-dir", str(tmp / "job"), "--steps",
            str(EX_STEPS), "--ckpt-dir", str(tmp / "ck"), "--ckpt-every", str(CKPT_EVERY),
            "--resume", "--no-probe"]
    for key, value in SMALL.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    return args


def _wait_steps(run: Path, nodes: set[str], guards: dict[str, subprocess.Popen[bytes]]
                ) -> None:
    """Until a worker of each of ``nodes`` began a step (a spare started earlier would join
    the first round and make the agents restart over and over for the node left waiting)."""
    while all(g.poll() is None for g in guards.values()):
        beats = read_beats(run / "heartbeats") if (run / "heartbeats").is_dir() else {}
        if nodes <= {b.node for b in beats.values() if b.step >= 0}:
            return
        time.sleep(0.1)


def run_once(name: str, tmp: Path, fault_step: int, timeout_s: float) -> dict[str, Any]:
    nodes = ["a", "b", "c"] if name == "example-spare" else ["a", "b"]
    nproc = 1 if name.startswith("toy") else 2
    nnodes = "1:2" if name.startswith("toy") else "2:2"
    exclude = "hang" if name == "example-in-place" else "hang,crash"
    port = _port()
    store = subprocess.Popen([str(BIN / "stragglers"), "guard", "--serve-store",
                              f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    t0 = time.time()
    _wait_port(port, store)
    run, ck = tmp / "run", tmp / "ck"
    guards: dict[str, subprocess.Popen[bytes]] = {}
    for node in nodes:
        if node == "c":  # the spare joins once the round runs: it waits in the rendezvous
            _wait_steps(run, {"a", "b"}, guards)
        cmd = [str(BIN / "stragglers"), "guard", "--run-dir", str(run), "--ckpt", str(ck),
               "--node", node, "--heartbeat-s", "0.5", "--timeout-s", str(timeout_s),
               "--startup-timeout-s", "120", "--exclude-on", exclude, "--",
               str(BIN / "torchrun"), "--nnodes", nnodes, "--nproc-per-node", str(nproc),
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
               "--rdzv-id", "bench", "--max-restarts", "3", "--rdzv-conf", CONF,
               *_job(name, tmp)]
        with open(tmp / f"guard-{node}.out", "wb") as out, \
                open(tmp / f"guard-{node}.err", "wb") as err:
            guards[node] = subprocess.Popen(cmd, stdout=out, stderr=err)
    fault = signal.SIGSTOP if name == "toy-stop" else signal.SIGKILL
    t_fault = victim = None
    while t_fault is None and all(g.poll() is None for g in guards.values()):
        beats = read_beats(run / "heartbeats") if (run / "heartbeats").is_dir() else {}
        for b in beats.values():
            if b.node == "b" and b.local_rank == 0 and b.step >= fault_step and b.pid:
                os.kill(b.pid, fault)
                t_fault, victim = time.time(), b.rank
                break
        time.sleep(0.01)
    codes = {n: g.wait(timeout=900) for n, g in guards.items()}
    wall = time.time() - t0
    store.kill()
    store.wait()
    incidents = [json.loads(p.read_text()) for p in sorted((run / "incidents").glob("*.json"))]
    return {"codes": codes, "incidents": incidents, "t_fault": t_fault, "victim": victim,
            "wall": wall, "run": run, "tmp": tmp}


def _losses(name: str, res: dict[str, Any]) -> tuple[int | None, dict[int, list[float]]]:
    """The first step of the round after the incident and every loss computed for each step
    (a step redone after the restart has two)."""
    by_step: dict[int, list[float]] = {}
    if name.startswith("toy"):
        path = res["run"] / "losses.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        for r in rows:
            by_step.setdefault(r["step"], []).append(r["loss"])
        after = [r["step"] for r in rows if r["world"] == 1]
        return (after[0] if after else None), by_step
    path = res["tmp"] / "job" / "summary.json"
    if not path.exists():
        return None, {}
    summary = json.loads(path.read_text())
    first = summary["first_step"]
    return first, {first + i: [x] for i, x in enumerate(summary["losses"])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scenarios", nargs="+",
                    default=["toy-kill", "toy-stop", "example-spare", "example-in-place"])
    ap.add_argument("--timeout-s", type=float, default=6.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        reference = run_job(JobConfig(out_dir=f"{tmp}/whole", steps=EX_STEPS, **SMALL))["losses"]
    rows = []
    for name in args.scenarios:
        runs = []
        fault_step = 10 if name.startswith("toy") else 7
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                res = run_once(name, Path(tmp), fault_step, args.timeout_s)
                resumed_at, losses = _losses(name, res)
            incs = res["incidents"]
            inc = incs[0] if incs else {}
            expect_left = name != "example-in-place"
            if name.startswith("toy"):  # a step redone on fewer ranks: the same loss
                gap = max((abs(max(xs) - min(xs)) / abs(min(xs)) for xs in losses.values()),
                          default=float("nan"))
                steps_ok = sorted(losses) == list(range(TOY_STEPS))
            else:  # the resumed steps against an uninterrupted run
                gap = max((abs(xs[0] - reference[s]) / abs(reference[s])
                           for s, xs in losses.items()), default=float("nan"))
                steps_ok = bool(losses) and max(losses) == EX_STEPS - 1
            runs.append({
                "incidents": len(incs),
                "right": inc.get("culprit_nodes") == ["b"],
                "left": (res["codes"].get("b") == 3) == expect_left,
                "from_ckpt": resumed_at is not None and resumed_at == inc.get("restart_step"),
                "finished": res["codes"].get("a") == 0 and steps_ok,
                "lost": inc.get("steps_lost", float("nan")),
                "detect": (inc["detected_at"] - res["t_fault"]) if inc and res["t_fault"]
                else float("nan"),
                "resume": inc.get("resumed_after_s") or float("nan"),
                "world_after": inc.get("world_after"),
                "wall": res["wall"], "gap": gap})
        rows.append((name, runs))
        print(name, json.dumps(runs), flush=True)
    print(f"torchrun c10d rendezvous, store apart, guards with --heartbeat-s 0.5 --timeout-s "
          f"{args.timeout_s:g}; fault on node b's first worker at step 10 (toy: {TOY_STEPS} "
          f"steps) or 7 (example job dp 2 x pp 2: {EX_STEPS} steps), checkpoint every "
          f"{CKPT_EVERY}; median of {args.repeats} runs")
    print("| scenario | incidents | node b blamed | left as expected | resumed from the "
          "checkpoint | finished | steps lost | fault to detection (s) | restart: detection to "
          "a step past the checkpoint (s) | world after | run wall (s) | loss gap |")
    print("| --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
    for name, runs in rows:
        n = len(runs)

        def med(key: str, rs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(r[key] for r in rs)

        worlds = sorted({str(r["world_after"]) for r in runs})
        print(f"| {name} | {med('incidents'):g} | {sum(r['right'] for r in runs)}/{n} | "
              f"{sum(r['left'] for r in runs)}/{n} | {sum(r['from_ckpt'] for r in runs)}/{n} | "
              f"{sum(r['finished'] for r in runs)}/{n} | {med('lost'):g} | "
              f"{med('detect'):.2f} | {med('resume'):.2f} | {','.join(worlds)} | "
              f"{med('wall'):.1f} | {max(r['gap'] for r in runs):.1e} |")


if __name__ == "__main__":
    main()
