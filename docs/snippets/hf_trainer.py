"""A Hugging Face Trainer DDP run recorded by the stragglers callback (docs/integrations.md).

    torchrun --standalone --nproc-per-node 2 docs/snippets/hf_trainer.py runs/hf
    stragglers analyze runs/hf/stragglers/trace.parquet --meta runs/hf/stragglers/meta.yaml \
        --out runs/hf/analysis

A tiny GPT-2 built from a config (nothing is downloaded) on random tokens. With SLOW_RANK=1
in the environment rank 1's first transformer block sleeps 0.3 s: a straggler to find; with
SLOW_FACTOR=3 as well, rank 1's forward takes 3 times its own time instead (it sleeps twice
what its compute took, a GPU 3x slower on any machine). With SLOW_LOADER_RANK=1 rank 1's
data loader sleeps SLOW_LOADER_MS (default 130) ms per batch. STEPS (default 20) sets the
steps; SLOW_FROM and SLOW_TO slow SLOW_RANK only in steps SLOW_FROM to SLOW_TO - 1 (for
`stragglers watch runs/hf/stragglers/probe`: an onset and a recovery).
"""

import os
import sys
import time

import torch
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments,
                          default_data_collator)

from stragglers.probe.hf import StragglersCallback

SLOWED = range(int(os.environ.get("SLOW_FROM", 0)), int(os.environ.get("SLOW_TO", 10**9)))


class RandomTokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (64,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    if os.environ.get("SLOW_LOADER_RANK") == os.environ.get("RANK"):
        time.sleep(float(os.environ.get("SLOW_LOADER_MS", "130")) / 1e3)  # a slow data loader
    return default_data_collator(samples)


if __name__ == "__main__":
    torch.set_num_threads(1)
    args = TrainingArguments(
        output_dir=sys.argv[1], max_steps=int(os.environ.get("STEPS", 20)),
        per_device_train_batch_size=16, use_cpu=True, ddp_backend="gloo",
        report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
    )
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=64, n_embd=128,
                                       n_layer=2, n_head=4))
    if os.environ.get("SLOW_RANK") == os.environ.get("RANK"):
        if "SLOW_FACTOR" in os.environ:  # a GPU SLOW_FACTOR times slower
            factor, started = float(os.environ["SLOW_FACTOR"]), []
            model.register_forward_pre_hook(lambda *_: started.append(time.perf_counter()))
            model.register_forward_hook(lambda *_: time.sleep(
                (factor - 1) * (time.perf_counter() - started.pop())
                * (trainer.state.global_step in SLOWED)))
        else:
            model.transformer.h[0].register_forward_pre_hook(
                lambda *_: time.sleep(0.3 * (trainer.state.global_step in SLOWED)))  # slow GPU
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(),
                      data_collator=collate,
                      callbacks=[StragglersCallback(f"{sys.argv[1]}/stragglers")])  # added
    trainer.train()
