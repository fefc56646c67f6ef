"""A PyTorch Lightning DDP run recorded by the stragglers callback (docs/integrations.md).

    python docs/snippets/lightning_ddp.py runs/pl      # Lightning starts the 2 processes
    stragglers analyze runs/pl/trace.parquet --meta runs/pl/meta.yaml --out runs/pl/analysis

With SLOW_RANK=1 in the environment rank 1's training step sleeps 0.3 s: a straggler to find;
with SLOW_FACTOR=3 as well, it takes 3 times its own time instead (it sleeps twice what its
compute took, a GPU 3x slower on any machine). With SLOW_LOADER_RANK=1 rank 1's data loader
sleeps SLOW_LOADER_MS (default 130) ms per batch. STEPS (default 20) sets the steps; SLOW_FROM
and SLOW_TO slow SLOW_RANK only in steps SLOW_FROM to SLOW_TO - 1 (for
`stragglers watch runs/pl/probe`: an onset and a recovery).
"""

import os
import sys
import time

import lightning.pytorch as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, default_collate

from stragglers.probe.lightning import StragglersCallback

SLOWED = range(int(os.environ.get("SLOW_FROM", 0)), int(os.environ.get("SLOW_TO", 10**9)))


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 10))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        slow = (os.environ.get("SLOW_RANK") == str(self.global_rank)
                and self.global_step in SLOWED)
        if slow and "SLOW_FACTOR" not in os.environ:
            time.sleep(0.3)  # the demo's slow GPU
        started = time.perf_counter()
        x, y = batch
        loss = nn.functional.cross_entropy(self.layers(x), y)
        if slow and "SLOW_FACTOR" in os.environ:  # a GPU SLOW_FACTOR times slower
            time.sleep((float(os.environ["SLOW_FACTOR"]) - 1) * (time.perf_counter() - started))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def collate(samples: list[tuple[torch.Tensor, ...]]) -> list[torch.Tensor]:
    if os.environ.get("SLOW_LOADER_RANK") == str(torch.distributed.get_rank()):
        time.sleep(float(os.environ.get("SLOW_LOADER_MS", "130")) / 1e3)  # a slow data loader
    return default_collate(samples)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(512 * 40, 512), torch.randint(0, 10, (512 * 40,)))
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp", max_steps=int(os.environ.get("STEPS", 20)),
        callbacks=[StragglersCallback(sys.argv[1])],  # the one line to add
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model(), DataLoader(data, batch_size=512, collate_fn=collate))
