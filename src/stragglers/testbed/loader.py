"""The example job's sample loader, with sequence-length rebalancing (issue 11 pt 6; the
what-if study §5.3).

With ``--rebalance in-order`` or ``--rebalance greedy`` the job reads samples instead of
whole micro-batches of one length. The **global batch** of step ``s`` holds
``n = dp * microbatches * micro_batch_size`` samples; sample ``i`` has a length ``L_i`` and
tokens drawn from ``(seed, s)`` only, so the set of samples of a step does not depend on how
they are split. While the injections are on (``JobConfig.injected``) and
``--seq-len-dist longtail``, the lengths are long-tailed: log-normal with median
``seq_len / 2`` and shape 1, clipped to ``[32, 4 * seq_len]`` and rounded to a multiple of 16
(the distribution of :func:`~stragglers.testbed.gpt.sequence_length`, now per
sample); otherwise every sample has ``seq_len`` tokens.

**Partition.** ``in-order`` deals the samples in their order, ``micro_batch_size`` to each
micro-batch, DP rank by DP rank (:func:`stragglers.mitigate.seqlen.in_order`: what a plain
loader does). ``greedy`` gives them to :func:`stragglers.mitigate.seqlen.rebalance`: largest
modelled cost first onto the least-loaded DP rank, then within each rank onto its
least-loaded micro-batch. A micro-batch may then hold any number of samples; a partition that
would leave one empty is refused before the run starts (:func:`check_config`).
``paired`` is for measuring on a shared machine: steps ``2k`` and ``2k + 1`` train the same
samples (those of data step ``k``), split in order in the even step and greedily in the odd
one, so each pair compares the two splits under the same machine load (as
``--inject-period`` pairs steps with and without a straggler).

**Packing, not padding.** The samples of a micro-batch are packed into one row (batch 1,
``sum L`` tokens): positions restart at 0 for each sample and attention stays within each
sample (one causal attention per sample, as a variable-length attention kernel does;
:class:`~stragglers.testbed.gpt.Block`). So a micro-batch really computes
``a * sum L**2`` (attention) ``+ b * sum L`` (embeddings, projections, MLP, loss) ``+ c``
(per micro-batch: launch, pipeline transfers): the cost model of
:mod:`stragglers.mitigate.seqlen`, with nothing spent on padding. (Padding to the micro-batch's
longest sample would cost ``k * (a Lmax**2 + b Lmax)`` for ``k`` samples, a different model.)

**Loss.** Micro-batches hold different numbers of tokens, so each micro-batch's mean token
loss is weighted by ``tokens_mb * dp / tokens_of_the_step``: after the DP average of the
gradients, the step's loss and gradients are the mean over all the tokens of the global batch,
whatever the partition (in-order and greedy train identically up to float rounding).

**Cost model.** ``--cost-model FILE``: a JSON or YAML object with ``a``, ``b`` and ``c`` (the
output of ``stragglers mitigate fit-cost TRACE --lengths OUT/lengths.jsonl --json`` on a
previous run's trace; other keys are ignored). Without it, ``greedy`` balances tokens
(``a = 0, b = 1``). Only the ratio ``a : b`` changes the partition (``c`` is paid once per
micro-batch whatever it holds). The model is not fitted online: every rank must compute the
same partition, and a file read by all of them gives that without another collective.

**Lengths record.** The first-stage ranks record the lengths they fed in every probed step;
at the end of the run they become ``OUT/lengths.jsonl`` (one line ``{"step", "dp_rank",
"mb", "lengths"}`` per micro-batch, the format :func:`stragglers.mitigate.lengths.read_lengths`
reads), so the cost model can be fitted from the job's own trace.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.inputs import load_yaml
from stragglers.mitigate.lengths import MicrobatchLengths
from stragglers.mitigate.seqlen import CostModel, Partition, in_order, rebalance

if TYPE_CHECKING:
    from stragglers.testbed.job import JobConfig

__all__ = ["MODES", "SampleLoader", "StepPlan", "check_config", "lengths_file", "modelled_costs",
           "read_cost_model", "sample_lengths", "write_lengths"]

#: ``--rebalance`` values: ``off`` keeps the job's micro-batches of one length each.
MODES = ("off", "in-order", "greedy", "paired")
#: Shortest long-tailed sample (tokens); lengths are multiples of 16.
MIN_LEN = 32
#: The default cost model of ``greedy`` without ``--cost-model``: balance tokens.
TOKENS = CostModel(0.0, 1.0, 0.0)


def max_len(seq_len: int) -> int:
    """The longest sample: ``4 * seq_len`` rounded down to a multiple of 16 (at least 16)."""
    return max(16, (4 * seq_len) // 16 * 16)


def sample_lengths(seed: int, step: int, n: int, seq_len: int, longtail: bool) -> np.ndarray:
    """Lengths of the ``n`` samples of step ``step`` (int64); see the module docstring."""
    if not longtail:
        return np.full(n, seq_len, dtype=np.int64)
    z = np.random.default_rng([seed, step, 17]).standard_normal(n)
    raw = np.clip((seq_len / 2) * np.exp(z), MIN_LEN, 4 * seq_len)
    return np.clip(np.round(raw / 16).astype(np.int64) * 16, 16, max_len(seq_len))


def read_cost_model(path: str, seq_len: int) -> CostModel:
    """The ``a, b, c`` of a cost-model file, checked: every possible sample must cost > 0."""
    obj = load_yaml(path, "cost model file")
    if not isinstance(obj, dict):
        raise InputError(f"{path}: expected an object with a, b and c (the output of "
                         "`stragglers mitigate fit-cost --json`)")
    vals: list[float] = []
    for name in ("a", "b", "c"):
        v = obj.get(name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise InputError(f"{path}: field {name!r}: expected a finite number, got "
                             f"{v!r}"[:300])
        vals.append(float(v))
    model = CostModel(vals[0], vals[1], vals[2])
    possible = np.arange(16, max_len(seq_len) + 1, 16)
    cost = model.sequence_cost(possible)
    if np.any(cost <= 0):
        bad = int(possible[np.argmax(cost <= 0)])
        raise InputError(f"{path}: field 'a'/'b': a sample of {bad} tokens would cost "
                         f"{model.a:g} * L**2 + {model.b:g} * L <= 0")
    return model


@dataclass(frozen=True)
class StepPlan:
    """One step's global batch and its split: ``batches[d][m]`` are sample indices."""

    step: int
    lengths: np.ndarray  # per sample of the global batch
    partition: Partition

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())

    def empty(self) -> list[tuple[int, int]]:
        """(DP rank, micro-batch) pairs that hold no sample."""
        return [(d, m) for d, rank in enumerate(self.partition.batches)
                for m, idx in enumerate(rank) if idx.size == 0]


class SampleLoader:
    """Plans each step's global batch (the same plan on every rank) and builds micro-batches."""

    def __init__(self, mode: str, seed: int, dp: int, microbatches: int,
                 micro_batch_size: int, seq_len: int, vocab: int, longtail: bool,
                 model: CostModel = TOKENS) -> None:
        if mode not in MODES[1:]:
            raise ValueError(f"loader mode must be one of {', '.join(MODES[1:])}, got "
                             f"{mode!r}")
        self.mode, self.seed, self.dp, self.microbatches = mode, seed, dp, microbatches
        self.samples = dp * microbatches * micro_batch_size
        self.seq_len, self.vocab, self.longtail, self.model = seq_len, vocab, longtail, model
        self._plan: StepPlan | None = None
        self._tokens: Any = None  # the step's samples, (n, max_len + 1) int64 tensor
        self.fed: list[dict[str, Any]] = []  # recorded micro-batch lengths

    @classmethod
    def from_config(cls, cfg: JobConfig) -> SampleLoader | None:
        """The job's loader (None with ``--rebalance off``)."""
        if cfg.rebalance == "off":
            return None
        model = read_cost_model(cfg.cost_model, cfg.seq_len) if cfg.cost_model else TOKENS
        return cls(cfg.rebalance, cfg.seed, cfg.dp, cfg.microbatches, cfg.micro_batch_size,
                   cfg.seq_len, cfg.vocab_size, cfg.seq_len_dist == "longtail", model)

    def data_step(self, step: int) -> int:
        """Whose samples step ``step`` trains: its own; in ``paired`` mode those of
        ``step // 2``."""
        return step // 2 if self.mode == "paired" else step

    def split(self, step: int) -> str:
        """``in-order`` or ``greedy``: how step ``step`` splits its samples."""
        if self.mode == "paired":
            return "greedy" if step % 2 else "in-order"
        return self.mode

    def plan(self, step: int, injected: bool = True) -> StepPlan:
        """The split of step ``step`` (long-tailed lengths only while ``injected``)."""
        if self._plan is not None and self._plan.step == step:
            return self._plan
        lengths = sample_lengths(self.seed, self.data_step(step), self.samples, self.seq_len,
                                 self.longtail and injected)
        if self.split(step) == "greedy":
            part = rebalance(lengths, self.model, self.dp, self.microbatches)
        else:
            part = in_order(lengths, self.model, self.dp, self.microbatches)
        self._plan = StepPlan(step, lengths, part)
        self._tokens = None
        return self._plan

    def microbatch_lengths(self, step: int, injected: bool, dp_rank: int, mb: int
                           ) -> list[int]:
        plan = self.plan(step, injected)
        return plan.lengths[plan.partition.batches[dp_rank][mb]].tolist()

    def shape(self, step: int, injected: bool, dp_rank: int, mb: int, hidden: int
              ) -> tuple[int, int, int]:
        """Activation shape of a micro-batch: its samples packed into one row."""
        return (1, sum(self.microbatch_lengths(step, injected, dp_rank, mb)), hidden)

    def batch(self, step: int, injected: bool, dp_rank: int, mb: int, device: Any,
              record: bool = False) -> tuple[Any, Any, list[int], float]:
        """Packed tokens and labels ``(1, sum L)``, the samples' lengths, and the weight of
        the micro-batch's mean loss (see the module docstring). ``record``: keep the lengths
        for ``OUT/lengths.jsonl``."""
        import torch

        plan = self.plan(step, injected)
        if self._tokens is None:
            gen = torch.Generator().manual_seed(int(np.random.default_rng(
                [self.seed, self.data_step(step), 23]).integers(2**62)))
            width = max_len(self.seq_len)
            start = torch.randint(0, self.vocab, (self.samples, 1), generator=gen)
            moves = torch.randint(1, 4, (self.samples, width), generator=gen)
            self._tokens = torch.cat([start, start + moves.cumsum(1)], dim=1) % self.vocab
        idx = plan.partition.batches[dp_rank][mb]
        lengths = plan.lengths[idx]
        rows = self._tokens[torch.from_numpy(idx)]
        keep = torch.arange(rows.shape[1] - 1)[None, :] < torch.from_numpy(lengths)[:, None]
        tokens = rows[:, :-1][keep].unsqueeze(0).to(device)
        labels = rows[:, 1:][keep].unsqueeze(0).to(device)
        if record:
            self.fed.append({"step": step, "dp_rank": dp_rank, "mb": mb,
                             "lengths": lengths.tolist()})
        weight = float(lengths.sum()) * self.dp / plan.tokens
        return tokens, labels, lengths.tolist(), weight


def check_config(cfg: JobConfig) -> None:
    """Refuse (ValueError, one line) a cost model file that does not hold, or a greedy
    split that would leave a micro-batch without samples in some step."""
    if cfg.rebalance not in MODES:
        raise ValueError(f"rebalance must be one of {', '.join(MODES)}, got {cfg.rebalance!r}")
    if cfg.pin_cpus and not hasattr(os, "sched_setaffinity"):
        raise ValueError("--pin-cpus needs os.sched_setaffinity (Linux)")
    if cfg.cost_model and cfg.rebalance not in ("greedy", "paired"):
        raise ValueError("--cost-model is used by --rebalance greedy and paired only")
    try:
        loader = SampleLoader.from_config(cfg)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    if loader is None or loader.mode == "in-order":
        return  # in order: every micro-batch holds micro_batch_size samples
    for step in range(cfg.steps):
        empty = loader.plan(step, cfg.injected(step)).empty()
        if empty:
            d, m = empty[0]
            raise ValueError(
                f"--rebalance {cfg.rebalance}: in step {step} the split leaves micro-batch "
                f"{m} of DP rank {d} without samples ({len(empty)} empty); raise "
                "--micro-batch-size or lower --microbatches")


def lengths_file(out_dir: str | Path, dp_rank: int) -> Path:
    return Path(out_dir) / "lengths" / f"dp-{dp_rank:05d}.jsonl"


def write_lengths(out_dir: str | Path) -> Path | None:
    """Join the first-stage ranks' records into ``OUT/lengths.jsonl`` (sorted by step, DP
    rank, micro-batch); None when the run recorded none."""
    files = sorted((Path(out_dir) / "lengths").glob("dp-*.jsonl"))
    if not files:
        return None
    recs = [json.loads(line) for f in files for line in f.read_text().splitlines() if line]
    recs.sort(key=lambda r: (r["step"], r["dp_rank"], r["mb"]))
    target = Path(out_dir) / "lengths.jsonl"
    write_text(target, "".join(json.dumps(r) + "\n" for r in recs))
    return target


def save_fed(loader: SampleLoader, out_dir: str | Path, dp_rank: int) -> None:
    """Write this rank's recorded micro-batch lengths (first-stage ranks call it)."""
    target = lengths_file(out_dir, dp_rank)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text(target, "".join(json.dumps(r) + "\n" for r in loader.fed))


def modelled_costs(cfg: JobConfig, model: CostModel, lengths: MicrobatchLengths,
                   steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Modelled micro-batch costs ``(len(steps), dp, microbatches)`` of a run: as it ran
    (its recorded ``lengths``) and as ``--rebalance greedy`` with ``model`` would split the
    same samples (the inputs of :func:`stragglers.mitigate.predict.predict_rebalance`).

    The greedy split is recomputed per step from its samples (``(seed, step)``, or
    ``(seed, step // 2)`` for a ``paired`` run), as the job does; a step
    whose recorded token count differs from it (a run of another seed or size) is refused."""
    dp, mbs = cfg.dp, cfg.microbatches
    steps = np.asarray(steps, dtype=np.int64)
    grid = np.stack(np.meshgrid(steps, np.arange(dp), np.arange(mbs), indexing="ij"),
                    axis=-1).reshape(-1, 3)
    both = np.concatenate([grid, lengths.keys])
    _, inverse = np.unique(both, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    pos = np.full(int(inverse.max()) + 1, -1, dtype=np.int64)
    pos[inverse[grid.shape[0]:]] = np.arange(lengths.keys.shape[0])
    at = pos[inverse[:grid.shape[0]]]
    if np.any(at < 0):
        s, d, m = grid[int(np.argmax(at < 0))]
        raise InputError(f"lengths: no record of step {s}, dp_rank {d}, mb {m} of the trace")
    before = model.microbatch_cost(lengths.sum_sq[at], lengths.sum_len[at]).reshape(
        steps.size, dp, mbs)
    tokens = lengths.sum_len[at].reshape(steps.size, dp * mbs).sum(axis=1)
    loader = SampleLoader("greedy", cfg.seed, dp, mbs, cfg.micro_batch_size, cfg.seq_len,
                          cfg.vocab_size, cfg.seq_len_dist == "longtail", model)
    data = steps // 2 if cfg.rebalance == "paired" else steps
    plans = [loader.plan(int(d), cfg.injected(int(s)))  # one split per step
             for s, d in zip(steps, data, strict=True)]
    wrong = np.flatnonzero(tokens != np.array([p.tokens for p in plans]))
    if wrong.size:
        raise InputError(f"lengths: step {int(steps[wrong[0]])} holds {int(tokens[wrong[0]])} "
                         f"tokens, the job's configuration gives {plans[wrong[0]].tokens}")
    after = np.stack([p.partition.microbatch_cost for p in plans])
    return before, after
