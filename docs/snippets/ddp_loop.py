"""A plain PyTorch DDP training loop recorded by the stragglers probe (docs/integrations.md).

    torchrun --standalone --nproc-per-node 2 docs/snippets/ddp_loop.py runs/ddp
    stragglers analyze runs/ddp/trace.parquet --meta runs/ddp/meta.yaml --out runs/ddp/analysis

With SLOW_RANK=1 in the environment rank 1's forward sleeps 0.3 s: a straggler to find; with
SLOW_FACTOR=3 as well, it takes 3 times its own time instead (it sleeps twice what its compute
took, a GPU 3x slower on any machine). With SLOW_LOADER_RANK=1 rank 1's data loader sleeps
SLOW_LOADER_MS (default 130) ms per batch. STEPS (default 20) sets the steps; SLOW_FROM and
SLOW_TO slow SLOW_RANK only in steps SLOW_FROM to SLOW_TO - 1 (for
`stragglers watch runs/ddp/probe`: an onset and a recovery).
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

import stragglers.probe

dist.init_process_group("gloo")  # "nccl" with one GPU per rank
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
SLOWED = range(int(os.environ.get("SLOW_FROM", 0)), int(os.environ.get("SLOW_TO", 10**9)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        slow = os.environ.get("SLOW_RANK") == str(rank) and step in SLOWED
        if slow and "SLOW_FACTOR" not in os.environ:
            time.sleep(0.3)  # the demo's slow GPU
        started = time.perf_counter()
        out = self.layers(x)
        if slow and "SLOW_FACTOR" in os.environ:  # a GPU SLOW_FACTOR times slower
            time.sleep((float(os.environ["SLOW_FACTOR"]) - 1) * (time.perf_counter() - started))
        return out


def load_batch() -> tuple[torch.Tensor, torch.Tensor]:
    if os.environ.get("SLOW_LOADER_RANK") == str(rank):
        time.sleep(float(os.environ.get("SLOW_LOADER_MS", "130")) / 1e3)  # a slow data loader
    return torch.randn(512, 512), torch.randint(0, 10, (512,))


model = nn.parallel.DistributedDataParallel(Net())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
probe = stragglers.probe.attach(model, out_dir=sys.argv[1])  # 1. attach

for step in range(int(os.environ.get("STEPS", 20))):
    x, y = load_batch()
    with probe.step():  # 2. around each training step
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

probe.close()  # 3. rank 0 writes runs/ddp/trace.parquet and meta.yaml
dist.destroy_process_group()
