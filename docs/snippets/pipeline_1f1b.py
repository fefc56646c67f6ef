"""A torch.distributed.pipelining 1F1B job recorded by the stragglers probe
(docs/integrations.md).

    torchrun --standalone --nproc-per-node 2 docs/snippets/pipeline_1f1b.py runs/pp
    stragglers analyze runs/pp/trace.parquet --meta runs/pp/meta.yaml --out runs/pp/analysis

A 2-stage pipeline, 4 microbatches a step (Schedule1F1B); with 4 processes, 2 data-parallel
replicas of it (DDP on each stage). With SLOW_RANK=0 in the environment rank 0's forward
sleeps in every microbatch: a straggler to find.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

import stragglers.probe

STAGES = 2
dist.init_process_group("gloo")  # "nccl" with one GPU per rank
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size() // STAGES, STAGES),
                        mesh_dim_names=("dp", "pp"))
index = mesh["pp"].get_local_rank()  # this process's stage
torch.manual_seed(rank)
torch.set_num_threads(1)


class Part(nn.Module):  # this process's part of the model
    def __init__(self, last: bool) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(256, 256), nn.ReLU(),
                                    nn.Linear(256, 10 if last else 256))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if os.environ.get("SLOW_RANK") == str(rank):
            time.sleep(0.05)  # the demo's slow GPU
        return self.layers(x)


part = Part(last=index == STAGES - 1)
if mesh["dp"].size() > 1:  # data-parallel replicas of each stage
    part = nn.parallel.DistributedDataParallel(part, process_group=mesh["dp"].get_group())
stage = PipelineStage(part, index, STAGES, torch.device("cpu"), group=mesh["pp"].get_group())
schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=nn.functional.cross_entropy)
optimizer = torch.optim.SGD(part.parameters(), lr=0.01)
probe = stragglers.probe.attach_pipeline(stage, schedule, out_dir=sys.argv[1])  # 1. attach

for _ in range(20):
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    with probe.step():  # 2. around each training step
        if stage.is_first:
            schedule.step(x)
        elif stage.is_last:
            schedule.step(target=y)
        else:
            schedule.step()
        optimizer.step()
        optimizer.zero_grad()

probe.close()  # 3. rank 0 writes runs/pp/trace.parquet and meta.yaml
dist.destroy_process_group()
