"""A small GPT-style decoder split into pipeline stages, and its synthetic training data.

Stage 0 holds the token and position embeddings, the last stage the final layer norm and the
language-model head, whose weight is tied to the token embedding (as in Megatron-LM: the last
stage keeps a copy, kept equal by the ``embedding-grads-all-reduce`` between the first and the
last stage). Every stage holds ``layers_per_stage`` transformer blocks, the last one
``extra_last_stage_layers`` more (the stage-imbalance injection).

The data is a synthetic language that the model can learn: each sequence starts at a random
token and moves up by 1, 2 or 3 (mod vocabulary) at each position, so the loss falls from
``log(vocab)`` towards ``log(3)``. Every stage derives the same batch from
``(seed, step, dp_rank, microbatch)``, as stages of a real job read the same data loader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    """Model size; ``layers_per_stage`` blocks on every stage (+extra on the last)."""

    vocab_size: int = 512
    hidden: int = 128
    heads: int = 4
    layers_per_stage: int = 2
    extra_last_stage_layers: int = 0
    max_seq_len: int = 1024
    mlp_ratio: int = 4
    seed: int = 1234


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, mlp_ratio * hidden)
        self.fc2 = nn.Linear(mlp_ratio * hidden, hidden)

    def forward(self, x: torch.Tensor, lengths: list[int] | None = None) -> torch.Tensor:
        """``x``: ``(batch, n, hidden)``. With ``lengths`` (packed sequences, batch 1, their
        sum ``n``) each sequence attends to itself only: one causal attention per sequence, so
        attention costs ``sum L**2``, not ``n**2`` (what a variable-length kernel does)."""
        b, n, h = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, h // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        if lengths is None:
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = torch.cat([F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
                             for qs, ks, vs in zip(q.split(lengths, dim=2),
                                                   k.split(lengths, dim=2),
                                                   v.split(lengths, dim=2), strict=True)],
                            dim=2)
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPTStage(nn.Module):
    """The part of the model that pipeline stage ``stage`` of ``pp`` runs.

    Parameters are initialised from ``cfg.seed`` and the global layer index only, so that every
    DP replica of a stage starts identical and the tied head copy equals the embedding.
    """

    def __init__(self, cfg: GPTConfig, stage: int, pp: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.stage, self.pp = stage, pp
        self.is_first, self.is_last = stage == 0, stage == pp - 1
        first_layer = stage * cfg.layers_per_stage
        n_layers = cfg.layers_per_stage + (cfg.extra_last_stage_layers if self.is_last else 0)
        self.blocks = nn.ModuleList()
        for i in range(n_layers):
            torch.manual_seed(cfg.seed + 7919 * (first_layer + i + 1))
            self.blocks.append(Block(cfg.hidden, cfg.heads, cfg.mlp_ratio))
        emb = self._embedding_init()
        if self.is_first:
            self.wte = nn.Embedding(cfg.vocab_size, cfg.hidden)
            self.wpe = nn.Embedding(cfg.max_seq_len, cfg.hidden)
            with torch.no_grad():
                self.wte.weight.copy_(emb)
                gen = torch.Generator().manual_seed(cfg.seed + 1)
                self.wpe.weight.copy_(torch.randn(cfg.max_seq_len, cfg.hidden,
                                                  generator=gen) * 0.01)
        if self.is_last:
            self.ln_f = nn.LayerNorm(cfg.hidden)
            if not self.is_first:
                # Megatron's tied output layer on the last stage: a copy of the embedding.
                self.head_weight = nn.Parameter(emb.clone())

    def _embedding_init(self) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.cfg.seed)
        return torch.randn(self.cfg.vocab_size, self.cfg.hidden, generator=gen) * 0.02

    def tied_weight(self) -> torch.Tensor | None:
        """The embedding (first stage) or its head copy (last stage); ``None`` elsewhere."""
        if self.is_first:
            return self.wte.weight
        if self.is_last:
            return self.head_weight
        return None

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor | None = None,
                lengths: list[int] | None = None) -> torch.Tensor:
        """Tokens (first stage) or hidden states in; hidden states or, on the last stage, loss.

        ``lengths``: the inputs are sequences packed into one row (batch 1) of these lengths;
        positions restart at 0 for each and attention stays within each (see :class:`Block`).
        """
        if self.is_first:
            n = inputs.shape[1]
            positions = torch.arange(n, device=inputs.device)
            if lengths is not None:
                sizes = torch.tensor(lengths, device=inputs.device)
                starts = torch.cumsum(sizes, 0) - sizes
                positions = positions - torch.repeat_interleave(starts, sizes, output_size=n)
            x = self.wte(inputs) + self.wpe(positions)
        else:
            x = inputs
        for block in self.blocks:
            x = block(x, lengths)
        if not self.is_last:
            return x
        weight = self.wte.weight if self.is_first else self.head_weight
        logits = F.linear(self.ln_f(x), weight)
        assert labels is not None
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def _mix(*values: int) -> int:
    h = 1469598103934665603
    for v in values:
        h = ((h ^ (v & 0xFFFFFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def sequence_length(seed: int, step: int, dp_rank: int, mb: int, base_len: int,
                    dist: str = "fixed", min_len: int = 32, sigma: float = 1.0) -> int:
    """The sequence length of a microbatch (the same on every stage).

    ``"fixed"``: ``base_len``. ``"longtail"``: a log-normal draw with median ``base_len / 2``
    and shape ``sigma``, clipped to ``[min_len, 4 * base_len]`` and rounded to 16: most
    microbatches are short, a few are several times longer (long-tailed, like the sequence
    length distributions of long-context training data).
    """
    if dist == "fixed":
        return base_len
    if dist != "longtail":
        raise ValueError(f"unknown sequence length distribution {dist!r}")
    gen = torch.Generator().manual_seed(_mix(seed, 17, step, dp_rank, mb))
    z = float(torch.randn(1, generator=gen))
    length = (base_len / 2) * math.exp(sigma * z)
    length = min(max(length, min_len), 4 * base_len)
    return max(16, int(round(length / 16)) * 16)


def make_batch(seed: int, step: int, dp_rank: int, mb: int, batch: int, seq_len: int,
               vocab: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens and next-token labels of one microbatch: ``(batch, seq_len)`` int64 each."""
    gen = torch.Generator().manual_seed(_mix(seed, step, dp_rank, mb))
    start = torch.randint(0, vocab, (batch, 1), generator=gen)
    moves = torch.randint(1, 4, (batch, seq_len), generator=gen)
    seq = torch.cat([start, start + moves.cumsum(1)], dim=1) % vocab
    return seq[:, :-1].to(device), seq[:, 1:].to(device)
