"""A small data-parallel training job for the driver: linear regression trained by SGD over
gloo, with heartbeats, checkpoints and fault injections.

Run one process per rank (``stragglers run`` sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``, ``STRAGGLERS_SLOT``, ``STRAGGLERS_CKPT_DIR``, ``STRAGGLERS_RUN_DIR``)::

    stragglers run --slots 4 --heartbeat-s 0.2 --timeout-s 5 --ckpt ck/ --out run/ -- \\
        python -m stragglers.testbed.toyjob --steps 40 --hang-slot 2 --hang-at-step 12

Every step uses the same global batch (``--batch`` samples drawn from a seed and the step),
split evenly over the ranks; the gradient is the all-reduced sum over the batch divided by its
size, so the trajectory does not depend on how many ranks there are: after a restart with a
rank fewer the loss curve continues where the checkpoint left it. Rank 0 saves
``ckpt-<step>.pt`` every ``--ckpt-every`` steps (atomically) and appends ``{step, loss, world,
attempt}`` to ``losses.jsonl``; a restarted job resumes after the latest checkpoint.

Injections, tied to the *slot* (the machine; the rank when ``STRAGGLERS_SLOT`` is unset, as
under ``torchrun``), not to the rank number, so that excluding the slot removes the fault:
``--hang-mode stop`` (the process freezes inside the all-reduce of ``--hang-at-step``: its
heartbeats stop, as with a hung GPU), ``--hang-mode never`` (it stays alive but never reaches
that all-reduce, as a rank stuck in compute), and ``--crash-slot`` (the process exits with
status 3 before the all-reduce). Each fires once per job (:func:`stragglers.testbed.faults.claim`:
a marker in ``STRAGGLERS_RUN_DIR``), so that a job restarted by ``torchrun`` runs clean.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

DIM = 32


def _latest_checkpoint(folder: Path) -> tuple[int, Path] | None:
    best: tuple[int, Path] | None = None
    for p in folder.glob("ckpt-*.pt"):
        try:
            step = int(p.stem.split("-", 1)[1])
        except ValueError:
            continue
        if best is None or step > best[0]:
            best = (step, p)
    return best


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    from stragglers.recover.heartbeat import Heartbeat
    from stragglers.testbed.faults import claim

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=240)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ckpt-every", type=int, default=4)
    ap.add_argument("--step-s", type=float, default=0.05, help="extra seconds per step")
    ap.add_argument("--hang-slot", type=int, default=None)
    ap.add_argument("--hang-at-step", type=int, default=None)
    ap.add_argument("--hang-mode", choices=("stop", "never"), default="stop")
    ap.add_argument("--crash-slot", type=int, default=None)
    ap.add_argument("--crash-at-step", type=int, default=None)
    args = ap.parse_args(argv)

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    slot = int(os.environ.get("STRAGGLERS_SLOT", str(rank)))
    attempt = int(os.environ.get("STRAGGLERS_ATTEMPT", "0"))
    ckpt = Path(os.environ.get("STRAGGLERS_CKPT_DIR", "."))
    run_dir = Path(os.environ.get("STRAGGLERS_RUN_DIR", "."))
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} is not divisible by {world} ranks")
    torch.set_num_threads(1)
    hb = Heartbeat.from_env()
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=3600))
    w_true = torch.randn(DIM, generator=torch.Generator().manual_seed(12345))
    w = torch.zeros(DIM)
    start = 0
    found = _latest_checkpoint(ckpt)
    if found is not None:
        state = torch.load(found[1])
        w = state["w"]
        start = int(state["step"]) + 1
    share = args.batch // world
    for step in range(start, args.steps):
        if hb:
            hb.step(step)
        gen = torch.Generator().manual_seed(1000 + step)
        x = torch.randn(args.batch, DIM, generator=gen)
        y = x @ w_true + 0.1 * torch.randn(args.batch, generator=gen)
        xs, ys = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        err = xs @ w - ys
        packed = torch.cat([xs.T @ err * 2.0, (err ** 2).sum().reshape(1)])
        time.sleep(args.step_s)
        if slot == args.crash_slot and step == args.crash_at_step and claim("crash"):
            if hb:
                hb.flush()  # the step it dies in, as a beat just before would say
            os._exit(3)
        if slot == args.hang_slot and step == args.hang_at_step and claim("hang"):
            if args.hang_mode == "never":
                while True:  # alive (heartbeats go on), never reaches the all-reduce
                    time.sleep(1.0)
            if hb:
                hb.enter("all_reduce", "dp", seq=step)
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen inside the call
        if hb:
            hb.enter("all_reduce", "dp", seq=step)
        try:
            dist.all_reduce(packed)
        except RuntimeError:
            if hb:
                hb.status("comm_error")
            raise
        if hb:
            hb.leave()
        grad, loss = packed[:DIM] / args.batch, float(packed[DIM]) / args.batch
        w = w - args.lr * grad
        if rank == 0:
            with open(run_dir / "losses.jsonl", "a") as f:
                f.write(json.dumps({"step": step, "loss": loss, "world": world,
                                    "attempt": attempt}) + "\n")
            if (step + 1) % args.ckpt_every == 0:
                tmp = ckpt / f".ckpt-{step}.tmp"
                torch.save({"w": w, "step": step}, tmp)
                os.replace(tmp, ckpt / f"ckpt-{step}.pt")
    if hb:
        hb.step(args.steps)
        hb.close("done")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
