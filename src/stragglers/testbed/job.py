"""The example training job: a GPT-style model with 1F1B pipeline and data parallelism.

``dp × pp`` processes (4 by default) train :class:`~stragglers.testbed.gpt.GPTStage`
with real ``torch.distributed`` communication: gloo on CPU, NCCL when every process can have its
own GPU. Global rank ``r`` is DP rank ``r % dp`` of stage ``r // dp`` (Megatron's order with
``tp = 1``). Each step: ``params-all-gather`` → 1F1B forward/backward with P2P between stages →
``gc`` (the planned GC point, once the schedule is done) → ``layernorm-grads-all-reduce``
(a no-op without tensor parallelism, timed as Megatron does) → ``embedding-grads-all-reduce``
(first and last stage: the tied embedding) → ``grads-reduce-scatter`` → gradient clipping (an
all-reduce over all ranks) → AdamW on the DP shard. Every op is timed by a
:class:`~stragglers.probe.Probe`; at the end the rank files are merged into
``OUT/trace.parquet`` and ``OUT/meta.yaml``, ready for ``stragglers analyze``.

Straggler injections:

* ``slow_rank``/``slow_factor``/``slow_mode``: one rank's forward and backward computes take
  ``slow_factor`` times as long, by burning CPU (``spin``) or sleeping (``sleep``) for the extra
  time inside the compute;
* ``last_stage_extra_layers``: the last stage gets more transformer blocks (stage imbalance);
* ``seq_len_dist="longtail"``: microbatch sequence lengths drawn from a long-tailed
  distribution (the same on every stage of a pipeline, different across microbatches and DP
  ranks);
* ``gc_pause_prob``: uncoordinated GC pauses: every rank keeps ``gc_heap_objects`` live
  container objects and, with this probability per forward compute, runs a full
  ``gc.collect()`` there, at moments that differ between ranks, as Python's automatic
  collector does.

Run it with ``stragglers probe example --out runs/ex`` or
``python -m stragglers.testbed.job --out runs/ex``; under ``torchrun`` (one process per
rank, ``--nproc-per-node dp*pp``) each process runs its rank and rank 0 merges.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

from stragglers import options
from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.probe.gcplan import PlannedGC
from stragglers.probe.hooks import CommHooks
from stragglers.probe.ops import (
    BACKWARD_COMPUTE,
    CLIP,
    EMBEDDING_ALL_REDUCE,
    FORWARD_COMPUTE,
    GRADS_REDUCE_SCATTER,
    LAYERNORM_ALL_REDUCE,
    OPTIMIZER,
    PARAMS_ALL_GATHER,
)
from stragglers.probe.outdir import claim_out_dir
from stragglers.probe.recorder import Probe
from stragglers.probe.settings import JobLayout, ProbeConfig, WorkerInfo
from stragglers.testbed.assignment import LiveAssignment
from stragglers.testbed.profiler import AnnotatedProbe, RankProfiler


@dataclass(frozen=True)
class JobConfig:
    """Everything that defines a run of the example job."""

    out_dir: str = ""
    force: bool = False
    dp: int = 2
    pp: int = 2
    steps: int = 20
    warmup_steps: int = 3
    microbatches: int = 4
    micro_batch_size: int = 4
    seq_len: int = 128
    vocab_size: int = 512
    hidden: int = 256
    heads: int = 4
    layers_per_stage: int = 2
    lr: float = 3e-3
    clip: float = 1.0
    seed: int = 1234
    device: str = "auto"
    threads: int = 1
    timeout_s: float = 300.0
    trial_name: str = "example"
    # probes
    probe: bool = True
    profile_steps: int = 1
    profile_every: int = 1
    comm_hooks: bool = False
    torch_profiler: bool = False
    gc_interval: int = 10
    push_server: str = ""
    push_token_file: str = ""
    push_job: str = ""
    # straggler injections
    slow_rank: int = -1
    slow_factor: float = 1.0
    slow_mode: str = "spin"
    last_stage_extra_layers: int = 0
    seq_len_dist: str = "fixed"
    gc_pause_prob: float = 0.0
    gc_heap_objects: int = 300_000
    inject_period: int = 0
    # checkpoints (stragglers.testbed.checkpoint)
    ckpt_dir: str = ""
    ckpt_every: int = 0
    resume: bool = False
    rank_map: str = ""
    # hang/crash injection and heartbeats (stragglers.testbed.faults; -1: none)
    hang_rank: int = -1
    hang_step: int = -1
    hang_mode: str = "in-collective"
    crash_rank: int = -1
    crash_step: int = -1
    # live mitigation (S2): the action file polled at each step (assignment.py)
    action_file: str = ""
    # sequence-length rebalancing (stragglers.testbed.loader): samples of their own
    # lengths, packed per micro-batch, split in order or by the greedy partitioner
    rebalance: str = "off"
    cost_model: str = ""
    pin_cpus: bool = False  # rank r runs on CPU r % cpus: a waiting rank lends no core

    @property
    def world_size(self) -> int:
        """Number of processes: ``dp * pp``."""
        return self.dp * self.pp

    def check(self) -> None:
        """Raise ``ValueError`` on an inconsistent configuration."""
        if not self.out_dir:
            raise ValueError("--out-dir is required (the job never writes into the current "
                             "folder unasked)")
        if self.push_server and not self.push_server.startswith(("http://", "https://")):
            raise ValueError(f"--push-server must be an http:// or https:// URL, got "
                             f"{self.push_server!r}")
        if self.dp < 1 or self.pp < 1:
            raise ValueError("dp and pp must be >= 1")
        for name in ("lr", "clip", "timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.steps <= self.warmup_steps:
            raise ValueError(f"steps ({self.steps}) must exceed warmup_steps "
                             f"({self.warmup_steps})")
        if self.microbatches < 1:
            raise ValueError("microbatches must be >= 1")
        if self.slow_rank < -1:
            raise ValueError(f"slow_rank must be a rank or -1 (none), got {self.slow_rank}")
        if self.slow_rank >= self.world_size:
            raise ValueError(f"slow_rank {self.slow_rank} >= world size {self.world_size}")
        if not (math.isfinite(self.slow_factor) and self.slow_factor >= 1.0):
            raise ValueError(f"slow_factor must be a finite number >= 1, got {self.slow_factor!r}")
        if self.slow_mode not in ("spin", "sleep"):
            raise ValueError("slow_mode must be spin or sleep")
        if self.seq_len_dist not in ("fixed", "longtail"):
            raise ValueError("seq_len_dist must be fixed or longtail")
        if not 0.0 <= self.gc_pause_prob <= 1.0:  # also refuses NaN
            raise ValueError("gc_pause_prob must be in [0, 1]")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError("device must be auto, cpu or cuda")
        if self.inject_period < 0:
            raise ValueError("inject_period must be >= 0")
        if self.ckpt_every < 0:
            raise ValueError("ckpt_every must be >= 0")
        if (self.ckpt_every or self.resume) and not self.ckpt_dir:
            raise ValueError("--ckpt-every and --resume need --ckpt-dir")
        if self.rank_map:
            from stragglers.testbed.rankmap import load_rank_map

            try:
                load_rank_map(self.rank_map, self.dp, self.pp)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        if self.resume:
            from stragglers.testbed.checkpoint import check_resume_layout

            try:
                check_resume_layout(Path(self.ckpt_dir), self.dp, self.pp)
            except InputError as exc:
                raise ValueError(str(exc)) from None
        from stragglers.testbed.faults import check_faults

        check_faults(self.hang_rank, self.hang_step, self.hang_mode, self.crash_rank,
                     self.crash_step, self.world_size, self.ckpt_every)
        from stragglers.testbed.loader import check_config

        check_config(self)  # sequence-length rebalancing

    def injected(self, step: int) -> bool:
        """Whether the straggler injections are active in ``step``.

        Never during warm-up. With ``inject_period = k > 0`` they alternate in blocks of ``k``
        steps after warm-up (off, on, off, ...), so that one run yields interleaved steps with
        and without the straggler under the same machine load (a paired measurement);
        ``k = 0`` keeps them on for every step after warm-up. (Extra last-stage layers are part
        of the model and always on.)
        """
        if step < self.warmup_steps:
            return False
        if self.inject_period == 0:
            return True
        return ((step - self.warmup_steps) // self.inject_period) % 2 == 1


class SlowDown:
    """Stretch a compute op to ``factor`` times its duration (spin or sleep for the extra)."""

    def __init__(self, factor: float, mode: str) -> None:
        self.factor, self.mode = factor, mode

    def stretch(self, elapsed: float) -> None:
        """Add ``(factor - 1) * elapsed`` seconds of delay."""
        extra = (self.factor - 1.0) * elapsed
        if extra <= 0:
            return
        if self.mode == "sleep":
            time.sleep(extra)
            return
        deadline = time.perf_counter() + extra
        while time.perf_counter() < deadline:
            pass


class GcPauses:
    """Uncoordinated full collections over a large live heap, at random forward computes."""

    def __init__(self, prob: float, heap_objects: int, seed: int) -> None:
        self.prob = prob
        self.rng = random.Random(seed)
        # Live, GC-tracked containers: a full collection must traverse all of them.
        self.heap = [[i] for i in range(heap_objects)]
        self.pauses = 0

    def maybe_pause(self) -> None:
        """With probability ``prob``: a full ``gc.collect()``."""
        if self.rng.random() < self.prob:
            gc.collect()
            self.pauses += 1


def _pick_device(cfg: JobConfig) -> tuple[Any, bool]:
    import torch

    want_cuda = cfg.device == "cuda" or (
        cfg.device == "auto" and torch.cuda.is_available()
        and torch.cuda.device_count() >= cfg.world_size
    )
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but CUDA is not available")
    if want_cuda:
        local = int(os.environ.get("LOCAL_RANK", "-1"))
        return local, True
    return "cpu", False


class StageWorker:
    """One rank of the job: its model stage, optimizer shard, communication and probes."""

    def __init__(self, rank: int, cfg: JobConfig, init_method: str | None) -> None:
        import torch
        import torch.distributed as dist

        from stragglers.testbed.gpt import GPTConfig, GPTStage
        from stragglers.testbed.pipeline import PipeComm, ShardedOptimizer

        torch.set_num_threads(cfg.threads)
        if cfg.pin_cpus:  # sequence-length rebalancing: one core per rank, as one GPU each
            cpus = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
        self.cfg, self.rank = cfg, rank
        world, dp, pp = cfg.world_size, cfg.dp, cfg.pp
        dev_index, self.cuda = _pick_device(cfg)
        if self.cuda:
            local = dev_index if dev_index >= 0 else rank % torch.cuda.device_count()
            torch.cuda.set_device(local)
            self.device = torch.device("cuda", local)
        else:
            self.device = torch.device("cpu")
        dist.init_process_group("nccl" if self.cuda else "gloo",
                                init_method=init_method or "env://", rank=rank,
                                world_size=world, timeout=timedelta(seconds=cfg.timeout_s))
        if self.cuda:
            # NCCL: let every rank take part in the world communicator's first call, before
            # the pipeline's point-to-point batches (which involve two ranks only).
            dist.barrier(device_ids=[self.device.index])
        from stragglers.testbed.rankmap import identity, load_rank_map

        position = load_rank_map(cfg.rank_map, dp, pp) if cfg.rank_map else identity(dp, pp)
        rank_at = {p: r for r, p in enumerate(position)}  # position -> process rank
        self.dp_rank, self.stage = position[rank] % dp, position[rank] // dp
        self.is_first, self.is_last = self.stage == 0, self.stage == pp - 1
        # optimizer shard = place in the (sorted) DP group: what all-gather orders by
        stage_ranks = sorted(rank_at[self.stage * dp + d] for d in range(dp))
        self.shard = stage_ranks.index(rank)
        self.dp_group = self.emb_group = None
        for s in range(pp):  # every rank creates every group, in the same order
            g = (dist.new_group([rank_at[s * dp + d] for d in range(dp)],
                                group_desc=f"dp_stage{s}") if dp > 1 else None)
            if s == self.stage:
                self.dp_group = g
        if pp > 1:
            for d in range(dp):
                g = dist.new_group([rank_at[d], rank_at[(pp - 1) * dp + d]],
                                   group_desc=f"embedding_dp{d}")
                if d == self.dp_rank:
                    self.emb_group = g
        self.out = Path(cfg.out_dir)
        probe = Probe(
            self.out / "probe",
            WorkerInfo(rank=rank, world_size=world, dp_rank=self.dp_rank, stage=self.stage),
            ProbeConfig(enabled=cfg.probe, profile_steps=cfg.profile_steps,
                        every=cfg.profile_every, first_step=cfg.warmup_steps,
                        device="cuda" if self.cuda else "cpu",
                        push_server=cfg.push_server or None,
                        push_token_file=cfg.push_token_file or None,
                        push_job=cfg.push_job or None),
            layout=JobLayout(dp_size=dp, pp_size=pp, trial_name=cfg.trial_name),
        )
        self.profiler: RankProfiler | None = None
        if cfg.torch_profiler:
            self.profiler = RankProfiler(self.out, rank, cfg.warmup_steps, self.cuda)
            probe = cast(Probe, AnnotatedProbe(probe))
        from stragglers.testbed import faults  # hang/crash injection and heartbeats

        self.probe = probe = faults.watch(probe, rank, world, lambda: (self.comm.prev,
                                                                      self.comm.next),
                                          cfg.hang_rank, cfg.hang_step, cfg.hang_mode,
                                          cfg.crash_rank, cfg.crash_step)
        mcfg = GPTConfig(vocab_size=cfg.vocab_size, hidden=cfg.hidden, heads=cfg.heads,
                         layers_per_stage=cfg.layers_per_stage,
                         extra_last_stage_layers=cfg.last_stage_extra_layers,
                         max_seq_len=max(4 * cfg.seq_len, 64), seed=cfg.seed)
        self.model = GPTStage(mcfg, self.stage, pp).to(self.device)
        exclude = (self.model.head_weight,) if self.is_last and not self.is_first else ()
        self.opt = ShardedOptimizer(self.model, self.dp_group, dp, self.shard, lr=cfg.lr,
                                    norm_exclude=exclude)
        self.comm = PipeComm(self.probe, self.stage, pp, self.dp_rank, dp, self.device)
        self.comm.prev = rank_at.get((self.stage - 1) * dp + self.dp_rank, -1)
        self.comm.next = rank_at.get((self.stage + 1) * dp + self.dp_rank, -1)
        self.slow = SlowDown(cfg.slow_factor, cfg.slow_mode) if rank == cfg.slow_rank else None
        self.pauses = (GcPauses(cfg.gc_pause_prob, cfg.gc_heap_objects, cfg.seed * 7_919 + rank)
                       if cfg.gc_pause_prob > 0 else None)
        self.planned = PlannedGC(self.probe, interval=cfg.gc_interval or None)
        self.hooks = CommHooks(self.probe) if cfg.comm_hooks else None
        self.live = LiveAssignment(cfg.action_file, rank, dp, self.dp_rank, cfg.microbatches,
                                   self.device)
        from stragglers.testbed.loader import SampleLoader

        self.loader = SampleLoader.from_config(cfg)  # sequence-length rebalancing
        self.start_step = self._resume_step()
        self.step = 0
        self.inject = False
        self.step_loss: Any = None
        self.step_starts: list[float] = []
        self.losses: list[float] = []
        self.norms: list[float] = []

    def _resume_step(self) -> int:
        """With ``--resume``: load this role's latest checkpoint; the step to start at."""
        from stragglers.testbed import checkpoint

        if not self.cfg.resume:
            return 0
        ckpt = Path(self.cfg.ckpt_dir)
        marker = checkpoint.read_marker(ckpt)
        if marker is None:
            return 0  # nothing saved yet: start from the beginning
        if (marker.dp, marker.pp) != (self.cfg.dp, self.cfg.pp):
            raise InputError(f"{ckpt / checkpoint.LATEST}: field 'dp'/'pp': written by dp "
                             f"{marker.dp} x pp {marker.pp}, this run is dp {self.cfg.dp} x pp "
                             f"{self.cfg.pp}")
        checkpoint.load_role(ckpt, marker, self.shard, self.stage, self.opt)
        return marker.step

    def _maybe_save(self, step: int) -> None:
        """After step ``step``: every ``--ckpt-every`` steps, save every role, then the marker."""
        import torch.distributed as dist

        from stragglers.recover.marker import Marker, write_marker
        from stragglers.testbed import checkpoint

        every = self.cfg.ckpt_every
        if not every or (step + 1) % every:
            return
        from stragglers.testbed.faults import checkpoint_phase, world_call

        ckpt = Path(self.cfg.ckpt_dir)
        with checkpoint_phase(self.probe, step):  # reported to the heartbeats
            checkpoint.save_role(ckpt, step + 1, self.shard, self.stage, self.opt)
            with world_call(self.probe, "barrier"):
                dist.barrier()  # every role's file is in place before the marker names it
        if self.rank == 0:
            write_marker(ckpt, Marker(step + 1, self.cfg.dp, self.cfg.pp))

    # -- the pieces of one step -------------------------------------------------------
    def seq_len_of(self, mb: int) -> int:
        """Sequence length of microbatch ``mb`` of the current step."""
        from stragglers.testbed.gpt import sequence_length

        cfg = self.cfg
        dist_name = cfg.seq_len_dist if self.inject else "fixed"
        data_dp, data_mb = self.live.source(mb)
        return sequence_length(cfg.seed, self.step, data_dp, data_mb, cfg.seq_len, dist_name)

    def shape_of(self, mb: int) -> tuple[int, ...]:
        """Activation (and activation-gradient) shape of microbatch ``mb``."""
        if self.loader is not None:  # sequence-length rebalancing: samples packed in a row
            return self.loader.shape(self.step, self.inject, *self.live.source(mb),
                                     self.cfg.hidden)
        return (self.cfg.micro_batch_size, self.seq_len_of(mb), self.cfg.hidden)

    def _stretch(self, t0: float) -> None:
        if self.slow is not None and self.inject:
            if self.cuda:
                import torch

                torch.cuda.synchronize()
            self.slow.stretch(time.perf_counter() - t0)

    def forward_step(self, mb: int, inp: Any) -> Any:
        """``forward-compute``: read the batch, run the stage; the loss on the last stage."""
        from stragglers.testbed.gpt import make_batch

        cfg = self.cfg
        with self.probe.span(FORWARD_COMPUTE, mb_id=mb, mc=0):
            t0 = time.perf_counter()
            lengths, weight = None, 1.0 / cfg.microbatches
            if self.loader is not None:  # sequence-length rebalancing
                tokens, labels, lengths, weight = self.loader.batch(
                    self.step, self.inject, *self.live.source(mb), self.device,
                    record=self.is_first and self.probe.profiling)
            else:
                tokens, labels = make_batch(cfg.seed, self.step, *self.live.source(mb),
                                            cfg.micro_batch_size, self.seq_len_of(mb),
                                            cfg.vocab_size, self.device)
            x = tokens if self.is_first else inp.requires_grad_()
            result = self.model(x, labels if self.is_last else None, lengths)
            if self.is_last:
                result = result * weight
                self.step_loss = self.step_loss + result.detach()
            if self.pauses is not None and self.inject:
                self.pauses.maybe_pause()
            self._stretch(t0)
        return result

    def backward_step(self, mb: int, inp: Any, out: Any, grad: Any) -> Any:
        """``backward-compute``: backpropagate; returns the input gradient to send back."""
        import torch

        with self.probe.span(BACKWARD_COMPUTE, mb_id=mb, mc=0):
            t0 = time.perf_counter()
            if grad is None:
                out.backward()
            else:
                torch.autograd.backward(out, grad_tensors=grad)
            self._stretch(t0)
        return None if inp is None else inp.grad

    def run_step(self, step: int) -> None:
        """One training step, every op inside its probe span."""
        import torch
        import torch.distributed as dist

        from stragglers.testbed.pipeline import one_f_one_b

        probe, opt = self.probe, self.opt
        self.step, self.inject = step, self.cfg.injected(step)
        self.live.poll(step)
        probe.begin_step(step)
        self.step_starts.append(time.perf_counter())
        self.step_loss = torch.zeros((), device=self.device)
        with probe.span(PARAMS_ALL_GATHER, mc=0):
            opt.all_gather_params()
        one_f_one_b(self.comm, self.live.count(), self.shape_of, self.forward_step,
                    self.backward_step)
        self.planned.step(step)
        with probe.span(LAYERNORM_ALL_REDUCE):
            pass  # tensor parallelism is 1: Megatron's layernorm all-reduce has nothing to do
        if self.is_first or self.is_last:
            with probe.span(EMBEDDING_ALL_REDUCE):
                tied = self.model.tied_weight()
                if self.emb_group is not None and tied is not None:
                    dist.all_reduce(tied.grad, group=self.emb_group)
        with probe.span(GRADS_REDUCE_SCATTER, mc=0):
            opt.reduce_scatter_grads()
        with probe.span(CLIP):
            self.norms.append(opt.clip_grad_norm(self.cfg.clip))
        with probe.span(OPTIMIZER):
            opt.step()
        if self.is_last:
            self.losses.append(float(self.step_loss))
        probe.end_step()

    def run(self) -> None:
        """All steps, then close the probes and write this rank's record."""
        import torch.distributed as dist

        self.probe.start()
        if self.hooks is not None:
            self.hooks.install()
        self.planned.start()
        for step in range(self.start_step, self.cfg.steps):
            if self.profiler is not None:
                self.profiler.before_step(step)
            self.run_step(step)
            if self.profiler is not None:
                self.profiler.after_step()
            self._maybe_save(step)
        dist.barrier()
        if self.profiler is not None:
            self.profiler.finish()
        end = time.perf_counter()
        self.planned.stop()
        if self.hooks is not None:
            self.hooks.uninstall()
        self.probe.close()
        record = {
            "rank": self.rank, "dp_rank": self.dp_rank, "stage": self.stage,
            "first_step": self.start_step,
            "step_starts": self.step_starts, "end": end, "losses": self.losses,
            "grad_norms": self.norms, "planned_gc_collections": self.planned.collections,
            "gc_pauses": self.pauses.pauses if self.pauses is not None else 0,
            "timer": self.probe.timer_kind if self.cfg.probe else "off",
            "device": str(self.device),
            "live": self.live.report(),
        }
        if self.loader is not None and self.is_first:  # sequence-length rebalancing
            from stragglers.testbed.loader import save_fed

            save_fed(self.loader, self.out, self.dp_rank)
        workers = self.out / "workers"
        workers.mkdir(parents=True, exist_ok=True)
        (workers / f"worker-{self.rank:05d}.json").write_text(json.dumps(record))
        dist.barrier()  # every rank's files are complete before anyone merges
        dist.destroy_process_group()


def rank_main(rank: int, cfg: JobConfig, init_method: str | None) -> None:
    """Run one rank of the job (the entry point of each spawned process)."""
    StageWorker(rank, cfg, init_method).run()


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarise(cfg: JobConfig) -> dict[str, Any]:
    """Step times (rank 0's step-start intervals) and losses of a finished run.

    Step ``s`` lasts from its start to the start of step ``s + 1`` on rank 0 (the last one to
    the final barrier). Means are over the steps after warm-up, and separately over the steps
    with and without the injections (``inject_period``).
    """
    out = Path(cfg.out_dir)
    records = [json.loads(p.read_text()) for p in sorted((out / "workers").glob("worker-*.json"))]
    if len(records) != cfg.world_size:
        raise RuntimeError(f"{out}: {len(records)} worker records for {cfg.world_size} ranks")
    rank0 = next(r for r in records if r["rank"] == 0)
    starts = rank0["step_starts"] + [rank0["end"]]
    first = rank0.get("first_step", 0)  # > 0 after --resume: step_starts begin there
    gaps = [b - a for a, b in zip(starts[:-1], starts[1:], strict=True)]
    periods = dict(zip(range(first, cfg.steps), gaps, strict=True))
    steps = list(range(max(cfg.warmup_steps, first), cfg.steps))
    injected = [s for s in steps if cfg.injected(s)]
    clean = [s for s in steps if not cfg.injected(s)]
    last_stage = [r for r in records if r["stage"] == cfg.pp - 1]
    losses = [sum(v) / len(v) for v in zip(*(r["losses"] for r in last_stage), strict=True)]
    return {
        "config": asdict(cfg),
        "first_step": first,
        "step_times": gaps,
        "measured_steps": len(steps),
        "mean_step_s": _mean([periods[s] for s in steps]),
        "median_step_s": statistics.median(periods[s] for s in steps) if steps else None,
        "injected_steps": injected,
        "clean_steps": clean,
        "mean_injected_step_s": _mean([periods[s] for s in injected]),
        "mean_clean_step_s": _mean([periods[s] for s in clean]),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "losses": losses,
        "gc_pauses": {r["rank"]: r["gc_pauses"] for r in records},
        "timer": rank0["timer"],
        "device": rank0["device"],
    }


def run_job(cfg: JobConfig, merge: bool = True) -> dict[str, Any]:
    """Spawn ``dp * pp`` processes, run the job, merge the probe files; return the summary.

    The summary (also ``OUT/summary.json``) has the per-step times, their mean and median
    over the steps after warm-up, and the loss curve. With probes and ``merge``, the merged
    trace is ``OUT/trace.parquet`` with ``OUT/meta.yaml``.
    """
    import torch.multiprocessing as mp

    cfg.check()
    out = claim_out_dir(cfg.out_dir, cfg.force, "--out-dir", RUN_OUTPUTS)
    init = f"file://{(out / 'rendezvous').resolve()}"
    mp.start_processes(rank_main, args=(cfg, init), nprocs=cfg.world_size, join=True,
                       start_method="spawn")
    (out / "rendezvous").unlink(missing_ok=True)
    summary = summarise(cfg)
    if cfg.probe and merge:
        _merge(cfg, summary)
    _write_lengths(cfg, summary)
    write_text(out / "summary.json", json.dumps(summary, indent=1))
    return summary


#: What a run replaces in its output folder.
RUN_OUTPUTS = ("probe", "profiler", "workers", "trace.parquet", "meta.yaml", "summary.json",
               "rendezvous", "lengths", "lengths.jsonl")


def _merge(cfg: JobConfig, summary: dict[str, Any]) -> None:
    from stragglers.probe.merge import merge_dir

    out = Path(cfg.out_dir)
    # live mitigation (S2): uneven micro-batch counts are not one schedule; merged, reported
    result = merge_dir(out / "probe", None, out, strict=not cfg.action_file)
    summary["trace_problems"] = result.problems
    summary["trace"] = str(out / "trace.parquet")
    summary["meta"] = str(out / "meta.yaml")
    summary["trace_steps"] = result.steps
    summary["dropped_steps"] = result.dropped_steps
    summary["max_clock_rtt_s"] = result.max_clock_rtt
    summary["incomplete_last_lines"] = result.incomplete_lines


def _write_lengths(cfg: JobConfig, summary: dict[str, Any]) -> None:
    """Sequence-length rebalancing: ``OUT/lengths.jsonl`` from the first-stage records."""
    from stragglers.testbed.loader import write_lengths

    target = write_lengths(cfg.out_dir) if cfg.rebalance != "off" else None
    if target is not None:
        summary["lengths"] = str(target)


#: Option types (:mod:`stragglers.options`) of the numeric fields: each refuses NaN,
#: infinity and values outside its meaningful range.
_FIELD_TYPES: dict[str, Any] = {
    "dp": options.positive_int, "pp": options.positive_int, "steps": options.positive_int,
    "warmup_steps": options.non_negative_int, "microbatches": options.positive_int,
    "micro_batch_size": options.positive_int, "seq_len": options.positive_int,
    "vocab_size": options.positive_int, "hidden": options.positive_int,
    "heads": options.positive_int, "layers_per_stage": options.positive_int,
    "lr": options.positive_float, "clip": options.positive_float,
    "seed": options.non_negative_int, "threads": options.positive_int,
    "timeout_s": options.positive_float, "profile_steps": options.positive_int,
    "profile_every": options.positive_int, "gc_interval": options.non_negative_int,
    "slow_rank": options.any_int, "slow_factor": options.slowdown_factor,
    "last_stage_extra_layers": options.non_negative_int,
    "gc_pause_prob": options.probability, "gc_heap_objects": options.non_negative_int,
    "inject_period": options.non_negative_int,
}


def add_job_arguments(parser: argparse.ArgumentParser, out_dir_required: bool = True) -> None:
    """Add one ``--option`` per :class:`JobConfig` field (``--no-probe`` style for booleans).

    ``--out-dir`` is required unless ``out_dir_required`` is False (the caller then supplies
    a folder of its own when it is not given).
    """
    helps = {
        "out_dir": "output folder (probe files, trace.parquet, meta.yaml, summary.json); a "
                   "non-empty folder not created by stragglers is refused without --force",
        "force": "reuse a non-empty --out-dir that stragglers did not create (its probe/, "
                 "workers/, trace.parquet, meta.yaml, summary.json are replaced)",
        "slow_rank": "global rank to slow down (-1: none)",
        "slow_factor": "compute-time factor of the slow rank",
        "slow_mode": "spin (burn CPU) or sleep for the extra time",
        "last_stage_extra_layers": "extra transformer blocks on the last stage",
        "seq_len_dist": "fixed or longtail microbatch sequence lengths",
        "gc_pause_prob": "probability of an uncoordinated full GC per forward compute",
        "gc_interval": "planned GC every N steps on all ranks (0: never collect)",
        "profile_steps": "record N steps out of every --profile-every",
        "comm_hooks": "also record every torch.distributed call (calls-rank-*.jsonl)",
        "torch_profiler": "also record a PyTorch profiler trace per rank of the probed steps "
                          "(OUT/profiler/rank-N.json; import with `stragglers import kineto`)",
        "device": "auto, cpu or cuda (NCCL, one GPU per rank)",
        "push_server": "at the end of the session rank 0 merges the rank files into "
                       "OUT_DIR/probe/session/ and pushes them to this `stragglers serve` URL",
        "push_token_file": "token file for --push-server (default: $STRAGGLERS_TOKEN)",
        "push_job": "job name of the pushed session (default: the server's)",
        "action_file": "live mitigation: the action file polled at the top of every step "
                       "(written by `stragglers mitigate run`; see docs/guides/mitigate.md)",
        "rebalance": "off (micro-batches of one length), or samples of their own lengths "
                     "packed per micro-batch, split in-order or greedy (by --cost-model), or "
                     "paired (steps 2k, 2k+1: the same samples in order, then greedy)",
        "pin_cpus": "pin rank r to the r-th CPU (mod their number): a rank that waits does "
                    "not lend its core to another, as with one device per rank",
        "cost_model": "cost model of greedy and paired: JSON/YAML {a, b, c} (`stragglers "
                      "mitigate fit-cost --json`); default: balance tokens",
    }
    defaults = JobConfig()
    for f in fields(JobConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if f.name == "force":
            parser.add_argument(flag, dest=f.name, action="store_true", help=helps[f.name])
        elif isinstance(default, bool):
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=default, help=helps.get(f.name))
        elif f.name == "out_dir":
            parser.add_argument(flag, dest=f.name, required=out_dir_required, default="",
                                help=helps[f.name])
        else:
            parser.add_argument(flag, dest=f.name, type=_FIELD_TYPES.get(f.name, type(default)),
                                default=default, help=helps.get(f.name, f"default {default}"))


def config_from_args(args: argparse.Namespace) -> JobConfig:
    """Build a :class:`JobConfig` from parsed :func:`add_job_arguments` options; a bad
    combination is an :class:`~stragglers.errors.InputError`."""
    cfg = JobConfig(**{f.name: getattr(args, f.name) for f in fields(JobConfig)})
    try:
        cfg.check()
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    return cfg


def main(argv: list[str] | None = None) -> int:
    """Command line: spawn the job, or run one rank under torchrun."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    try:
        cfg = config_from_args(parser.parse_args(argv))
    except InputError as exc:  # one line, exit 2 (the project's error contract)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ:
        if int(os.environ["WORLD_SIZE"]) != cfg.world_size:  # a user error: one line, exit 2
            print(f"{parser.prog}: error: WORLD_SIZE {os.environ['WORLD_SIZE']} != dp*pp "
                  f"{cfg.world_size}", file=sys.stderr)
            return 2
        rank = int(os.environ["RANK"])
        if rank == 0:
            claim_out_dir(cfg.out_dir, cfg.force, "--out-dir", RUN_OUTPUTS)
        rank_main(rank, cfg, None)
        if rank == 0:
            summary = summarise(cfg)
            if cfg.probe:
                _merge(cfg, summary)
            _write_lengths(cfg, summary)
            write_text(Path(cfg.out_dir) / "summary.json", json.dumps(summary, indent=1))
            print(json.dumps({k: summary[k] for k in ("mean_step_s", "loss_first",
                                                       "loss_last")}))
        return 0
    summary = run_job(cfg)
    print(json.dumps({k: summary.get(k) for k in ("mean_step_s", "median_step_s", "loss_first",
                                                   "loss_last", "trace")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
