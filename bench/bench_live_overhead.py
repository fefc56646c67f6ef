"""What the live step records (issue 29) cost a training step: the loop probe with and
without ``ProbeConfig.live``, one process on CPU.

A small model (``--layers`` Linear layers, 2 parameter tensors each: the loop probe's
gradient hook fires once per tensor and step) is trained for ``--steps`` steps per block in
five set-ups, blocks alternating ``--blocks`` times so that the machine's load drifts hit
all alike:

* ``bare``: no probe;
* ``idle``: ``attach`` with no step recorded in the trace and no live records (the hooks are
  installed and return at once);
* ``live``: the same with live step records (every step: the hooks take their marks, the
  step's record is queued, the flusher writes it);
* ``trace``: ``attach``'s default sampling (every step recorded in the trace), no live
  records;
* ``trace+live``: the default: every step in the trace and its live record.

Per set-up: the process CPU time per step (training thread and the probe's flusher, which
runs beside it) and the wall time per step, medians over the blocks. The cost of the live
records is ``live - idle`` (where nothing else is recorded) and ``trace+live - trace`` (on
top of the default trace), the median and quartiles of the differences within each round
of blocks (a loaded machine's drift cancels), in microseconds per step and as a share of a
50 ms step.

On a loaded machine the training's own CPU time varies by more than the records cost;
``--hooks`` measures the probe's own work per step alone: the calls its hooks make in a
step (forward, backward with one gradient per parameter tensor, optimizer step) made
directly, with no model to compute.

Usage::

    PYTHONPATH=src .venv/bin/python bench/bench_live_overhead.py [--steps 400 --blocks 7]
    PYTHONPATH=src .venv/bin/python bench/bench_live_overhead.py --hooks --steps 5000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from stragglers.probe import ProbeConfig, attach

NEVER = 10**9
SETUPS = {
    "bare": None,
    "idle": ProbeConfig(first_step=NEVER, live=False, write_parquet=False),
    "live": ProbeConfig(first_step=NEVER, live=True, write_parquet=False),
    "trace": ProbeConfig(first_step=0, live=False, write_parquet=False),
    "trace+live": ProbeConfig(first_step=0, live=True, write_parquet=False),
}


def block(setup: str, layers: int, steps: int, tmp: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per step over one block of ``steps`` steps."""
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(32, 32) for _ in range(layers)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32)
    cfg = SETUPS[setup]
    probe = (attach(model, tmp / setup, config=cfg, force=True, merge=False)
             if cfg is not None else None)
    for _ in range(20):  # warm-up
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        if probe is not None:
            probe.begin_step()
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        if probe is not None:
            probe.end_step()
    if probe is not None:
        probe.close()  # the flusher's last writes (a fixed cost per block, in every set-up)
    c1, w1 = time.process_time(), time.perf_counter()
    return (c1 - c0) / steps, (w1 - w0) / steps


def hooks_block(setup: str, tensors: int, steps: int, tmp: Path) -> tuple[float, float]:
    """``--hooks``: (CPU seconds, wall seconds) per step of the probe's own work alone: the
    calls its hooks make in a step (a forward, its backward with ``tensors`` gradients, an
    optimizer step) made directly, without a model to compute, so that the training's
    compute and its noise are not in the figure."""
    cfg = SETUPS[setup]
    probe = (attach(nn.Linear(2, 2), tmp / setup, config=cfg, force=True, merge=False)
             if cfg is not None else None)

    def one() -> None:
        if probe is None:
            return
        probe.begin_step()
        probe.forward_begin()
        probe.forward_end(None)
        probe.backward_begin()
        for _ in range(tensors):
            probe.grad_ready()
        probe.optimizer_begin()
        probe.optimizer_end()
        probe.end_step()

    for _ in range(20):  # warm-up
        one()
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        one()
    if probe is not None:
        probe.close()  # the flusher's last writes (a fixed cost per block, in every set-up)
    c1, w1 = time.process_time(), time.perf_counter()
    return (c1 - c0) / steps, (w1 - w0) / steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument("--layers", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.add_argument("--hooks", action="store_true",
                   help="the probe's own work per step alone, no model (hooks_block)")
    args = p.parse_args()
    torch.set_num_threads(1)
    got: dict[str, list[tuple[float, float]]] = {s: [] for s in SETUPS}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.blocks):
            for s in SETUPS:
                got[s].append(hooks_block(s, 2 * args.layers, args.steps, Path(tmp))
                              if args.hooks else block(s, args.layers, args.steps, Path(tmp)))
    med = {s: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
           for s, v in got.items()}

    def paired(a: str, b: str) -> tuple[float, float, float]:
        """Quartiles of the CPU-time difference ``a - b`` per step within each round (the
        round's load drift cancels)."""
        d = sorted(x[0] - y[0] for x, y in zip(got[a], got[b], strict=True))
        q = statistics.quantiles(d, n=4) if len(d) > 1 else [d[0]] * 3
        return q[0], statistics.median(d), q[2]

    live_q, on_trace_q = paired("live", "idle"), paired("trace+live", "trace")
    live_cpu, on_trace = live_q[1], on_trace_q[1]
    out = {
        "params": 2 * args.layers, "steps": args.steps, "blocks": args.blocks,
        "us_per_step": {s: {"cpu": round(c * 1e6, 1), "wall": round(w * 1e6, 1)}
                        for s, (c, w) in med.items()},
        "live_cost_us": round(live_cpu * 1e6, 1),
        "live_cost_us_quartiles": [round(x * 1e6, 1) for x in live_q],
        "live_cost_on_trace_us": round(on_trace * 1e6, 1),
        "live_cost_on_trace_us_quartiles": [round(x * 1e6, 1) for x in on_trace_q],
        "live_share_of_50ms": round(live_cpu / 0.050, 5),
    }
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{2 * args.layers} parameter tensors, {args.steps} steps x {args.blocks} blocks "
          "(medians over blocks)")
    print(f"{'set-up':12} {'CPU us/step':>12} {'wall us/step':>13}")
    for s, (c, w) in med.items():
        print(f"{s:12} {c * 1e6:12.1f} {w * 1e6:13.1f}")
    lo, mid, hi = (x * 1e6 for x in live_q)
    print(f"live step records: {mid:.1f} us CPU per step where nothing else is recorded "
          f"(quartiles of the rounds' differences {lo:.1f} to {hi:.1f}; "
          f"{100 * live_cpu / 0.050:.3f}% of a 50 ms step)")
    lo, mid, hi = (x * 1e6 for x in on_trace_q)
    print(f"on top of the default trace: {mid:.1f} us ({lo:.1f} to {hi:.1f}; "
          f"{100 * on_trace / 0.050:.3f}% of a 50 ms step)")

if __name__ == "__main__":
    main()
