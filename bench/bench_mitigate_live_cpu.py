"""The live loop's own CPU per step (``mitigate run``, issue 30): the controller follows a
job whose probe files are written at a fixed pace, and its thread's CPU time is measured.

A writer thread appends, per step, what the example job's probes append for dp 2, 12
micro-batches per replica (a header per rank, then per micro-batch a forward and a backward
compute span, and a ``step_end``), replica 0 x``--factor`` in the middle third of the steps,
one step every ``--step-s`` seconds; the job's final worker records after the last. The
controller (``LiveController.run``, in this process's main thread, ``--poll`` 0.25 s, S2's
overhead 0.5 s as in ``bench_mitigate_live.py``) follows it to the end. Printed: the
controller thread's CPU seconds per job step (``time.thread_time``: the writer's work is
not in it), by phase where the code has the meter (``controller_cpu`` in the ``end``
record), and the actions it wrote. The figure depends on the CPU's speed, not on the other
load of the machine (CPU time, not wall time), so code versions can be compared on a shared
machine.

    python bench/bench_mitigate_live_cpu.py                 # 95 steps, 0.3 s each
    python bench/bench_mitigate_live_cpu.py --steps 60 --step-s 0.5
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from stragglers.mitigate.costs import load_costs
from stragglers.mitigate.live import LiveConfig, LiveController

META = {"trial_name": "t", "run_id": 0, "dp_size": 2, "dsp_size": 1, "pp_size": 1,
        "tp_size": 1, "vpp_size": 1, "world_size": 2}


def writer(root: Path, action: Path, steps: int, step_s: float, factor: float,
           base: float = 0.04, m: int = 12) -> None:
    """Append the probe lines of ``steps`` steps, one every ``step_s`` seconds, taking the
    action file's split as the job does; then the final worker records."""
    files = [root / "probe" / f"rank-{r:05d}.jsonl" for r in range(2)]
    counts, seq = [m, m], 0
    for r, f in enumerate(files):
        f.write_text(json.dumps({"kind": "header", "rank": r, "dp_rank": r, "stage": 0,
                                 "meta": META, "pid": os.getpid()}) + "\n")
    t_next = time.monotonic()
    for step in range(steps):
        if action.exists():
            raw = json.loads(action.read_text())
            if raw["seq"] > seq and raw["step"] <= step:
                seq, counts = raw["seq"], list(raw["assignment"])
        slow = steps // 3 <= step < 2 * steps // 3
        for r, f in enumerate(files):
            t = base * (factor if r == 0 and slow else 1.0) * (1 + 0.01 * ((step * 7 + r) % 5))
            lines, clock = [], 0.0
            for mb in range(counts[r]):
                for optype, share in (("forward-compute", 1 / 3), ("backward-compute", 2 / 3)):
                    lines.append(json.dumps({"kind": "span", "step": step, "optypes": [optype],
                                             "start": clock, "end": clock + share * t,
                                             "mb_id": mb, "mc": 0}))
                    clock += share * t
            lines.append(json.dumps({"kind": "step_end", "step": step, "time": clock}))
            with f.open("a") as fh:
                fh.write("\n".join(lines) + "\n")
        t_next += step_s
        time.sleep(max(t_next - time.monotonic(), 0.0))
    (root / "workers").mkdir()
    for r in range(2):
        (root / "workers" / f"worker-{r:05d}.json").write_text("{}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=95)
    ap.add_argument("--step-s", type=float, default=0.3)
    ap.add_argument("--factor", type=float, default=1.5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-live-cpu-") as d:
        root, action = Path(d) / "job", Path(d) / "action.json"
        (root / "probe").mkdir(parents=True)
        costs = Path(d) / "costs.yaml"
        costs.write_text("S2: {overhead_s: 0.5}\n")
        records: list[dict[str, object]] = []
        ctl = LiveController(LiveConfig(job_dir=root, action_path=action,
                                        strategies=load_costs(costs)), records.append)
        w = threading.Thread(target=writer, args=(root, action, args.steps, args.step_s,
                                                  args.factor))
        t0, w0 = time.thread_time(), time.perf_counter()
        w.start()
        end = ctl.run()
        cpu, wall = time.thread_time() - t0, time.perf_counter() - w0
        w.join()
    steps = int(end["steps_followed"])  # type: ignore[call-overload]
    out = {"steps": steps, "wall_s": round(wall, 1),
           "controller_thread_cpu_ms_per_step": round(cpu * 1e3 / max(steps, 1), 3),
           "meter": end.get("controller_cpu"),
           "placement": next((r for r in records if r["record"] == "controller"), None),
           "actions": [r["assignment"] for r in records if r["record"] == "action"],
           "load": round(os.getloadavg()[0], 2)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
