"""The GPU row of host time (issue 28): the documented ``attach()`` recipe on CUDA.

Two DDP ranks share one GPU over gloo (one GPU cannot hold two NCCL ranks); the model, its
gradients and the probe's spans (CUDA events) are on the GPU. Three conditions, each run
and analysed:

* ``healthy``;
* ``slow-loader``: rank 1's data loader sleeps ``--loader-ms`` per batch, outside the step;
* ``slow-forward``: rank 1 runs its forward ``--factor`` times (the extra passes discarded).

Then the slow-loader job again under ``torch.profiler`` (no probe), its rank traces
imported with ``stragglers import kineto`` and analysed; and the probe's cost: the mean step
time of the healthy job with ``attach()`` against without, over the same steps.

    python bench/bench_gpu_host.py --out DIR              # prints a table, writes DIR/rows.json

Runs on CPU too (``--device cpu``), where the spans use the CPU clock.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def worker(rank: int, args: argparse.Namespace, condition: str, mode: str, out: str,
           port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    if args.device == "cpu":
        torch.set_num_threads(1)
    device = torch.device(args.device)
    w = args.width
    net = nn.Sequential(*(m for _ in range(4) for m in (nn.Linear(w, w), nn.ReLU())),
                        nn.Linear(w, 10)).to(device)
    slow_forward = condition == "slow-forward" and rank == 1

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if slow_forward:
                with torch.no_grad():
                    for _ in range(args.factor - 1):
                        self.net(x)
            return self.net(x)

    model = nn.parallel.DistributedDataParallel(
        Net(), device_ids=[0] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, w, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    def load() -> tuple[torch.Tensor, torch.Tensor]:
        if condition == "slow-loader" and rank == 1:
            time.sleep(args.loader_ms / 1e3)
        return x, y

    def train_step(xb: torch.Tensor, yb: torch.Tensor) -> None:
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        opt.zero_grad()

    times: list[float] = []
    if mode == "probe":
        import stragglers.probe

        probe = stragglers.probe.attach(model, out_dir=out, trial_name=condition)
        for _ in range(args.steps):
            xb, yb = load()
            t0 = time.perf_counter()
            with probe.step():
                train_step(xb, yb)
            times.append(time.perf_counter() - t0)
        probe.close()
    elif mode == "none":
        for _ in range(args.steps):
            xb, yb = load()
            t0 = time.perf_counter()
            train_step(xb, yb)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    else:  # profile
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                         else [])
        trace_dir = Path(out)
        trace_dir.mkdir(parents=True, exist_ok=True)

        def ready(p: Any) -> None:
            p.export_chrome_trace(str(trace_dir / f"rank{rank}.json"))

        with profile(activities=acts, schedule=schedule(wait=1, warmup=2, active=args.active),
                     on_trace_ready=ready) as prof:
            rf = torch.profiler.record_function
            for _ in range(1 + 2 + args.active):
                xb, yb = load()
                with rf("## forward ##"):  # the annotations the importer reads
                    loss = nn.functional.cross_entropy(model(xb), yb)
                with rf("## backward ##"):
                    loss.backward()
                opt.step()
                opt.zero_grad()
                prof.step()
    if mode != "profile":
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"times-{rank}.json").write_text(json.dumps(times))
    dist.barrier()
    dist.destroy_process_group()


def _run(args: argparse.Namespace, condition: str, mode: str, out: Path) -> float:
    import torch.multiprocessing as mp

    t0 = time.perf_counter()
    mp.spawn(worker, args=(args, condition, mode, str(out), _free_port()), nprocs=2,
             join=True)
    return time.perf_counter() - t0


def _analyse(trace: Path, meta: Path) -> dict[str, Any]:
    from stragglers.analysis import analyze_files

    r = analyze_files(trace, meta).to_document()
    v = r["verdict"]
    la = r["launch_attribution"]
    return {"S": round(r["slowdown"], 3), "S_h": round(r["slowdown_healthy"], 3),
            "discrepancy": round(r["discrepancy"], 3), "trustworthy": r["trustworthy"],
            "cause": v["cause"], "workers": v["workers"], "confidence": v["confidence"],
            "launch_dp": None if la is None else {k: round(x, 3)
                                                  for k, x in la["dp_rank"].items()},
            "first_op": None if la is None else round(la["optype"].get("first-op", 1.0), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--active", type=int, default=6, help="profiled steps")
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=8192)
    p.add_argument("--factor", type=int, default=3)
    p.add_argument("--loader-ms", type=float, default=40.0)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for condition in ("healthy", "slow-loader", "slow-forward"):
        d = out / condition
        wall = _run(args, condition, "probe", d)
        step = json.loads((d / "times-0.json").read_text())
        row = {"run": f"probe {condition}", "wall_s": round(wall, 1),
               "step_ms": round(1e3 * sum(step[2:]) / len(step[2:]), 2),
               **_analyse(d / "trace.parquet", d / "meta.yaml")}
        rows.append(row)
        print(json.dumps(row), flush=True)
    # The probe's cost: the same healthy job without it.
    d = out / "none"
    _run(args, "healthy", "none", d)
    bare = json.loads((d / "times-0.json").read_text())[2:]
    probed = json.loads((out / "healthy" / "times-0.json").read_text())[2:]
    cost = {"run": "probe cost", "step_ms_without": round(1e3 * sum(bare) / len(bare), 3),
            "step_ms_with": round(1e3 * sum(probed) / len(probed), 3)}
    rows.append(cost)
    print(json.dumps(cost), flush=True)
    # The profiler path.
    d = out / "profile"
    _run(args, "slow-loader", "profile", d / "traces")
    meta = d / "job.yaml"
    meta.write_text("dp_size: 2\npp_size: 1\ntp_size: 1\ndsp_size: 1\nvpp_size: 1\n"
                    "world_size: 2\ntrial_name: profiled\nrun_id: 0\n")
    cli = "import sys; from stragglers.cli import main; sys.exit(main(sys.argv[1:]))"
    imp = subprocess.run([sys.executable, "-c", cli, "import", "kineto",
                          str(d / "traces"), "--meta", str(meta), "--out", str(d / "imported")],
                         capture_output=True, text=True)
    row = {"run": "profiler slow-loader", "import_rc": imp.returncode,
           "import_tail": (imp.stdout + imp.stderr)[-600:]}
    if imp.returncode == 0:
        try:
            row.update(_analyse(d / "imported" / "trace.parquet", d / "imported" / "meta.yaml"))
        except Exception as exc:  # reported in the row: the bench goes on
            row["analyse_error"] = str(exc)[:300]
    rows.append(row)
    print(json.dumps(row), flush=True)
    (out / "rows.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
