"""Probes for a user's own data-parallel training loop: hooks record the trace, no spans to
write.

The recipe (every rank, after ``init_process_group`` and the DDP wrapping)::

    import stragglers.probe

    probe = stragglers.probe.attach(model, out_dir="runs/ddp")  # model: the DDP module
    for x, y in loader:
        with probe.step():
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    probe.close()  # rank 0 merges: runs/ddp/trace.parquet + runs/ddp/meta.yaml

then ``stragglers analyze runs/ddp/trace.parquet --meta runs/ddp/meta.yaml --out runs/an``.

Every rank is one worker of a pure data-parallel job: ``(dp_rank, stage) = (rank, 0)``,
``dp_size = world size``, ``pp_size = 1``. What the hooks see, per training step and rank:

* ``forward-compute`` (one per forward of the model in the step, ``mb_id`` 0, 1, ...: gradient
  accumulation gives several): a forward pre-hook and a forward hook on ``model``;
* ``backward-compute``: from the moment the gradient of the forward's output is computed (a
  tensor hook on the output: the model's backward starts) to the moment the last parameter
  gradient is accumulated (``register_post_accumulate_grad_hook`` on every parameter);
* ``grads-reduce-scatter`` (the DP gradient synchronisation): from that last gradient to the
  start of the optimizer step. Under DDP ``backward()`` returns only when the gradient
  all-reduce is complete, so this span is the wait for the other ranks plus the transfer that
  was not hidden behind the backward; the analyzer synchronises it across DP ranks, so a
  rank that waits here is not blamed for it;
* ``optimizer``: ``torch.optim`` step pre- and post-hooks (global: every optimizer, also
  inside ``GradScaler.step`` or a framework's wrapper; several optimizers in one step give one
  span from the first start to the last end);
* ``params-all-gather`` (only where the loop runs one): the last collective over all ranks
  that the rank ran after the previous step and before this step's first forward (the
  ``Trainer``'s all-gather of the token count, a ``dist.all_reduce`` of the user's), timed by
  wrappers of the ``torch.distributed`` functions (:mod:`stragglers.probe.prestep`): every
  rank waits there for the last one to arrive, so its start on each rank is that rank's
  arrival, and the analyzer synchronises it across DP ranks (it is the model's DP collective
  before the forward). A step whose count of such collectives (0 or 1) differs from the first
  recorded step's is left out, with a warning. A ``DistributedDataParallel`` module that
  broadcasts its buffers (BatchNorm statistics) before each forward makes every rank wait
  there too: then the forward hooks go on its inner module, and the time from the DDP
  module's forward call to the inner forward (the broadcast) is that collective;
* ``gc``, ``layernorm-grads-all-reduce`` and ``embedding-grads-all-reduce``: zero-length
  local markers at the end of the last backward, where the analyzer's step model expects
  them (GC time is measured inside every span: ``gc_s``). No ``optimizer-clip-main-grad``:
  it is a collective in the model, which a zero-length marker cannot honestly represent
  (its end must not precede the latest start over the DP ranks); gradient clipping between
  ``backward()`` and the optimizer step is counted in the gradient synchronisation span.

Time outside these spans (data loading, the loss, logging) is launch delay: the time a rank
spends before its first op of a step (loading its batch, say) is the launch delay of that op,
on the job's common clock (every rank's clock is aligned with rank 0's), and the analyzer's
launch attribution names the rank it slows. A step whose hooks did not all fire (no forward,
a backward without forward, no optimizer step) is left out of the trace on that rank, and so
out of the merged trace. The framework callbacks (:mod:`stragglers.probe.lightning`,
:mod:`stragglers.probe.hf`) drive the same :class:`LoopProbe`.

Live step records (``ProbeConfig.live``, on by default): for every step, recorded in the
trace or not, the hooks take their marks and the step's end queues a step record
(:meth:`~stragglers.probe.recorder.Probe.step_record`, written by the probe's flusher to
``OUT_DIR/probe/steps-rank-NNNNN.jsonl``): ``wait`` = the step's
``grads-reduce-scatter`` (under DDP the wait for the other ranks in the gradient all-reduce,
plus the transfer not hidden behind the backward) + the collectives over all ranks since
the previous step and before its forward (its ``params-all-gather``, and any other the
wrappers see: Lightning's broadcast before it fetches a batch, which the trace leaves out)
+ the probe's own clock alignment;
``busy`` = the time from the previous step's end to this step's end less ``wait`` (compute,
the loss, the data loading before the step). Under DDP every rank's step takes as long as
the slowest one's; only the slow rank's ``busy`` rises, the others' ``wait`` does:
``stragglers watch`` detects on ``busy``. The timing is read from the hooks, nothing is added
to the model's computation or its communication.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from stragglers.probe.ops import (
    BACKWARD_COMPUTE,
    EMBEDDING_ALL_REDUCE,
    FORWARD_COMPUTE,
    GC,
    GRADS_REDUCE_SCATTER,
    LAYERNORM_ALL_REDUCE,
    OPTIMIZER,
    PARAMS_ALL_GATHER,
)
from stragglers.probe.outdir import check_unclaimed, claim_out_dir
from stragglers.probe.prestep import CollectiveWatch
from stragglers.probe.recorder import Mark, Probe
from stragglers.probe.settings import JobLayout, ProbeConfig, WorkerInfo

log = logging.getLogger("stragglers.probe")

#: What a run replaces in its output folder.
LOOP_OUTPUTS = ("probe", "trace.parquet", "meta.yaml")
#: Zero-length markers at the end of the last backward, in the analyzer's step order.
_END_MARKERS = (GC, LAYERNORM_ALL_REDUCE, EMBEDDING_ALL_REDUCE)


def _tensors(value: Any, found: list[Any], depth: int = 0) -> list[Any]:
    """The tensors that require grad in a forward's output: a tensor, or mappings (such as
    ``transformers``' ``ModelOutput``) and sequences of them, a few levels deep."""
    if depth > 4:
        return found
    if getattr(value, "requires_grad", False) and hasattr(value, "register_hook"):
        found.append(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _tensors(v, found, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _tensors(v, found, depth + 1)
    return found


class LoopProbe:
    """The trace of a data-parallel training loop, recorded from hooks (module docstring).

    ``probe`` is the rank's :class:`~stragglers.probe.Probe` (started by the caller);
    ``merge_to`` the folder rank 0 merges every rank's files into at :meth:`close` (None:
    no merge). Framework callbacks call the event methods (:meth:`begin_step`,
    :meth:`forward_begin`, ..., :meth:`end_step`) themselves where hooks cannot see the
    event.
    """

    def __init__(self, probe: Probe, merge_to: str | os.PathLike[str] | None = None) -> None:
        self.probe = probe
        self.merge_to = Path(merge_to) if merge_to is not None else None
        self.merge_error: str | None = None
        self.steps_recorded = 0
        self.steps_discarded = 0
        self._handles: list[Any] = []
        self._watch: CollectiveWatch | None = None
        #: A DDP module that broadcasts its buffers before each forward, the mark of its
        #: forward call in the open step, and whether the forward is to begin at the inner
        #: module's next forward call (:meth:`forward_begin_at_model`).
        self._ddp: Any = None
        self._ddp_entry: Mark | None = None
        self._forward_pending = False
        self._step_no = 0
        self._open = False
        self._recording = False
        #: Whether the open step's hooks take marks (a recorded step, or a live step record
        #: to write: ``ProbeConfig.live``), and the live step's start.
        self._timing = False
        self._begin: Mark | None = None
        #: The last collective before the open (or next) step's first forward, and whether
        #: the first recorded step had one (the count every recorded step must have); every
        #: such collective (the waits of the step's live record).
        self._pre: tuple[Mark, Mark] | None = None
        self._waits: list[tuple[Mark, Mark]] = []
        self._pre_expected: bool | None = None
        self._reset()

    # ------------------------------------------------------------------ per-step state
    def _reset(self) -> None:
        self._fwd: list[tuple[Mark, Mark]] = []
        self._bwd: list[tuple[Mark, Mark]] = []
        self._fwd_start: Mark | None = None
        self._bwd_start: Mark | None = None
        self._last_grad: Mark | None = None
        self._opt_start: Mark | None = None
        self._opt_end: Mark | None = None
        self._opt_ran = False
        self._broken = False

    @property
    def in_step(self) -> bool:
        """Whether a step is open (between :meth:`begin_step` and :meth:`end_step`)."""
        return self._open

    @property
    def optimizer_done(self) -> bool:
        """Whether the open step has run an optimizer step (recorded or not)."""
        return self._opt_ran

    # ------------------------------------------------------------------ hooks
    def install(self, model: Any, *, forward_hooks: bool = True,
                optimizer_hooks: bool = True, collectives: bool | str = True) -> LoopProbe:
        """Register the hooks: forward (pre-)hooks on ``model``, a post-accumulate-grad hook
        on each of its parameters that requires grad, (``optimizer_hooks``) global
        ``torch.optim`` step pre/post hooks and (``collectives``) the wrappers of the
        ``torch.distributed`` collectives that time a collective before a step's first
        forward (``collectives="live"``: timed as a wait of the live step record only, not
        as the trace's ``params-all-gather``). Call it on the training thread, before the
        first forward."""
        if collectives and self._watch is None and self.probe.enabled:
            on_call = self.collective_done if collectives is True else self._live_wait
            self._watch = CollectiveWatch(self.probe, on_call, self._before_forward).install()
        target = model
        self._ddp = buffer_syncing_ddp(model) if self.probe.enabled else None
        if self._ddp is not None:  # its buffer broadcast is timed (module docstring)
            target = self._ddp.module
            self._handles.append(self._ddp.register_forward_pre_hook(self._on_ddp_pre))
            if not forward_hooks:
                self._handles.append(target.register_forward_pre_hook(self._on_inner_pre))
        if forward_hooks:
            self._handles.append(target.register_forward_pre_hook(self._on_forward_pre))
            self._handles.append(target.register_forward_hook(self._on_forward))
        for param in model.parameters():
            if param.requires_grad:
                self._handles.append(param.register_post_accumulate_grad_hook(self._on_grad))
        if optimizer_hooks:
            import torch.optim.optimizer as opt

            self._handles.append(opt.register_optimizer_step_pre_hook(self._on_opt_pre))
            self._handles.append(opt.register_optimizer_step_post_hook(self._on_opt_post))
        return self

    def uninstall(self) -> None:
        """Remove every hook :meth:`install` registered."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._watch is not None:
            self._watch.uninstall()
            self._watch = None

    def _on_forward_pre(self, module: Any, args: Any) -> None:
        self._buffer_sync_done()
        self.forward_begin(module.training)

    def _on_ddp_pre(self, module: Any, args: Any) -> None:
        self._ddp_entry = (self.probe.mark() if self._timing and self._before_forward()
                           else None)

    def _on_inner_pre(self, module: Any, args: Any) -> None:
        self._buffer_sync_done()
        if self._forward_pending:
            self._forward_pending = False
            self.forward_begin(module.training)

    def _buffer_sync_done(self) -> None:
        """The DDP module's inner forward starts: from the DDP module's forward call to
        here, it broadcast its buffers (when it does), a collective before the forward."""
        entry, self._ddp_entry = self._ddp_entry, None
        if entry is not None and self._ddp.will_sync_module_buffers():
            self.collective_done(entry, self.probe.mark())

    @property
    def times_buffer_sync(self) -> bool:
        """Whether :meth:`install` found a DDP module that broadcasts its buffers before each
        forward (a framework that calls :meth:`forward_begin` itself then calls
        :meth:`forward_begin_at_model` instead, so that the broadcast is not in the span)."""
        return self._ddp is not None

    def forward_begin_at_model(self) -> None:
        """Begin the forward at the DDP module's next inner forward call (after its buffer
        broadcast) rather than now; without such a module (:attr:`times_buffer_sync`), now."""
        if self._ddp is None:
            self.forward_begin()
        else:
            self._forward_pending = True

    def _on_forward(self, module: Any, args: Any, output: Any) -> None:
        self.forward_end(output)

    def _on_grad(self, param: Any) -> None:
        self.grad_ready()

    def _on_opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer_begin()

    def _on_opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer_end()

    # ------------------------------------------------------------------ events
    def _before_forward(self) -> bool:
        """Whether the loop is between steps, or in a step before its first forward."""
        return not self._open or (not self._fwd and self._fwd_start is None)

    def collective_done(self, start: Mark, end: Mark) -> None:
        """A collective over all ranks ran from ``start`` to ``end`` (two
        :meth:`~stragglers.probe.recorder.Probe.mark`) before the step's first forward: the
        last one before the forward is recorded as the step's ``params-all-gather``. Called
        by the wrappers :meth:`install` puts on ``torch.distributed``; a framework whose
        collective they cannot see calls it itself."""
        if self._before_forward():
            self._pre = (start, end)
            self._waits.append((start, end))

    def _live_wait(self, start: Mark, end: Mark) -> None:
        """A collective before the step's first forward that only the live step record
        counts (as a wait), not the trace."""
        if self._before_forward():
            self._waits.append((start, end))

    def _close_backward(self, at: Mark) -> None:
        """End the open backward at the last gradient seen (else at ``at``)."""
        if self._bwd_start is not None:
            end = self._last_grad if self._last_grad is not None else at
            self._bwd.append((self._bwd_start, end))
            self._bwd_start = None

    def forward_begin(self, training: bool = True) -> None:
        """A forward of the model starts (ignored outside a recorded step, in eval mode, or
        under ``torch.no_grad``)."""
        if not self._timing or not training:
            return
        import torch

        if not torch.is_grad_enabled():
            return
        now = self.probe.mark()
        self._close_backward(now)
        if self._fwd_start is not None or len(self._fwd) != len(self._bwd):
            self._broken = True  # a forward whose backward never came: not a training step
        self._fwd_start = now

    def forward_end(self, output: Any = None) -> None:
        """The forward that :meth:`forward_begin` opened ends; tensor hooks on ``output``
        mark the start of its backward (pass None and call :meth:`backward_begin` instead)."""
        start = self._fwd_start
        if not self._timing or start is None:
            return
        self._fwd_start = None
        self._fwd.append((start, self.probe.mark()))
        tensors = _tensors(output, []) if output is not None else []
        if tensors:
            fired = [False]

            def on_output_grad(grad: Any) -> None:
                if not fired[0]:
                    fired[0] = True
                    self.backward_begin()

            for t in tensors:
                t.register_hook(on_output_grad)

    def backward_begin(self) -> None:
        """The backward of the last forward starts."""
        if not self._timing or self._bwd_start is not None:
            return
        if len(self._bwd) >= len(self._fwd):
            self._broken = True  # a second backward through one forward
            return
        self._last_grad = None
        self._bwd_start = self.probe.mark()

    def grad_ready(self) -> None:
        """A parameter gradient was accumulated: the backward's compute reached it."""
        if self._bwd_start is not None:
            self._last_grad = self.probe.mark(self._last_grad)

    def optimizer_begin(self) -> None:
        """The optimizer step starts: the end of the gradient synchronisation. Ignored
        before the step's first backward (a framework that calls the optimizer with a
        closure runs the pre-hooks before the forward) and after the first call."""
        if not self._timing or self._opt_start is not None:
            return
        if self._bwd_start is None and not self._bwd:
            return
        now = self.probe.mark()
        self._close_backward(now)
        self._opt_start = now

    def optimizer_end(self) -> None:
        """An optimizer step ended (the last one of the step ends the ``optimizer`` span)."""
        self._opt_ran = self._open
        if self._timing and self._opt_start is not None:
            self._opt_end = self.probe.mark()

    # ------------------------------------------------------------------ steps
    def begin_step(self, step: int | None = None) -> None:
        """Open training step ``step`` (default: one more than the last). Nothing happens if
        a step is open already."""
        if self._open:
            return
        if step is not None:
            self._step_no = step
        self._open = True
        self._reset()
        self._recording = self.probe.begin_step(self._step_no)
        live = self.probe.live
        self._timing = self._recording or live
        self._begin = self.probe.mark() if live else None

    def end_step(self) -> None:
        """Close the open step: record its spans if every hook fired, else leave it out."""
        if not self._open:
            return
        self._open = False
        if self._begin is not None:
            self._live_record()
        if self._recording:
            if self._complete() and self._pre_consistent():
                self._record()
                self.steps_recorded += 1
            else:
                self.probe.discard_step()
                self.steps_discarded += 1
        self._recording = self._timing = False
        self._begin = None
        self._pre = None
        self._waits = []
        self._ddp_entry = None
        self._forward_pending = False
        self.probe.end_step()
        self._step_no += 1

    def _live_record(self) -> None:
        """Queue the step's live record: its start and end, and its waits for the other
        ranks: the collectives since the previous step before its forward (the one the trace
        records, and any other: Lightning's broadcast before it fetches a batch) and the
        gradient synchronisation (from the last gradient to the optimizer step)."""
        assert self._begin is not None
        waits = list(self._waits)
        if self._bwd and self._opt_start is not None:
            waits.append((self._bwd[-1][1], self._opt_start))
        self.probe.step_record(self._step_no, self._begin, self.probe.mark(), waits)

    def _pre_consistent(self) -> bool:
        """Whether the step has a collective before its forward if and only if the first
        recorded step had one (every step must have the same ops); warns when not."""
        has = self._pre is not None
        if self._pre_expected is None:
            self._pre_expected = has
        if has == self._pre_expected:
            return True
        log.warning("stragglers: step %d %s a collective before its first forward, unlike the "
                    "first recorded step: the step is left out of the trace", self._step_no,
                    "ran" if has else "did not run")
        return False

    def _complete(self) -> bool:
        return (not self._broken and self._fwd_start is None and self._bwd_start is None
                and bool(self._fwd) and len(self._fwd) == len(self._bwd)
                and self._opt_start is not None and self._opt_end is not None)

    def _record(self) -> None:
        probe = self.probe
        if self._pre is not None:
            probe.add_span(PARAMS_ALL_GATHER, *self._pre, mc=0)
        for mb, (a, b) in enumerate(self._fwd):
            probe.add_span(FORWARD_COMPUTE, a, b, mb_id=mb, mc=0)
        for mb, (a, b) in enumerate(self._bwd):
            probe.add_span(BACKWARD_COMPUTE, a, b, mb_id=mb, mc=0)
        t1 = self._bwd[-1][1]
        t2, t3 = self._opt_start, self._opt_end
        assert t2 is not None and t3 is not None
        for optype in _END_MARKERS:
            probe.add_span(optype, t1, t1)
        probe.add_span(GRADS_REDUCE_SCATTER, t1, t2, mc=0)
        probe.add_span(OPTIMIZER, t2, t3)

    @contextlib.contextmanager
    def step(self, step: int | None = None) -> Iterator[LoopProbe]:
        """``with probe.step():`` around one training step (forward, backward, optimizer).

        Every rank must run the same steps (at some step ends the probe re-aligns clocks
        with a collective). A step that raises is left out and the exception goes on."""
        self.begin_step(step)
        try:
            yield self
        except BaseException:
            self._recording = self._timing = False
            self._begin = None
            self._pre = None
            self._waits = []
            self.probe.discard_step()
            self._open = False
            self._step_no += 1
            raise
        self.end_step()

    # ------------------------------------------------------------------ end
    def close(self) -> None:
        """Remove the hooks, close the probe (a collective: every rank calls it) and, with
        ``merge_to``, let rank 0 merge every rank's files into ``trace.parquet`` +
        ``meta.yaml`` there. A failed merge is logged and kept in :attr:`merge_error`
        (the rank files stay; ``stragglers probe merge`` can be run by hand): it never
        stops the training job."""
        self.end_step()
        self.uninstall()
        self.probe.close()
        self.merge_error = self.probe.merge_into(self.merge_to)

    def __enter__(self) -> LoopProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def buffer_syncing_ddp(model: Any) -> Any:
    """``model`` when it is a ``DistributedDataParallel`` module that broadcasts its buffers
    before each forward (``will_sync_module_buffers()``: buffers, and ``forward_sync_buffers``
    or, before torch 2.13, ``broadcast_buffers``), else None."""
    sync = getattr(model, "will_sync_module_buffers", None)
    if not callable(sync) or getattr(model, "module", None) is None:
        return None
    from torch.nn.parallel import DistributedDataParallel

    return model if isinstance(model, DistributedDataParallel) and sync() else None


def _rank_and_world() -> tuple[int, int]:
    try:
        import torch.distributed as dist
    except ImportError:
        return 0, 1
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def make_loop_probe(out_dir: str | os.PathLike[str], *, config: ProbeConfig | None = None,
                    trial_name: str = "loop", merge: bool = True, force: bool = False
                    ) -> LoopProbe:
    """A started :class:`LoopProbe` for this rank (no hooks yet): rank files in
    ``OUT_DIR/probe/``, merged into ``OUT_DIR`` at :meth:`LoopProbe.close` (``merge``).
    A collective when ``torch.distributed`` is initialised: call it on every rank."""
    rank, world = _rank_and_world()
    out = Path(out_dir)
    cfg = config if config is not None else ProbeConfig(first_step=2)
    if cfg.enabled:
        check_unclaimed(out, force, "out_dir")
        if world > 1:
            import torch.distributed as dist

            dist.barrier()  # every rank has looked before rank 0 changes anything
        if rank == 0:
            claim_out_dir(out, True, "out_dir", LOOP_OUTPUTS)  # the previous run's files go
        if world > 1:
            dist.barrier()
    probe = Probe(out / "probe", WorkerInfo(rank=rank, world_size=world, dp_rank=rank, stage=0),
                  cfg, layout=JobLayout(dp_size=world, pp_size=1, trial_name=trial_name))
    probe.start()
    return LoopProbe(probe, out if merge else None)


def attach(model: Any, out_dir: str | os.PathLike[str], *, config: ProbeConfig | None = None,
           trial_name: str = "loop", merge: bool = True, force: bool = False) -> LoopProbe:
    """Record the trace of a data-parallel training loop of ``model`` (a
    ``DistributedDataParallel`` module or a plain ``nn.Module``): see the module docstring.

    ``config`` sets the sampling (default: every step from step 2 on, the first two being
    warm-up: ``ProbeConfig(first_step=2)``); ``trial_name`` names the job in the metadata;
    ``merge=False`` leaves the merge to ``stragglers probe merge OUT_DIR/probe --out
    OUT_DIR`` (needed when the ranks do not share a file system). ``out_dir`` must be new,
    empty, or written by stragglers before (``force=True`` reuses another folder). Call on
    every rank after ``init_process_group``, before the first forward. A
    ``torch.distributed.pipelining`` stage or schedule is refused (``TypeError``): record it
    with :func:`stragglers.probe.attach_pipeline`."""
    from stragglers.probe.pipelining import is_pipelining_object

    if is_pipelining_object(model):
        raise TypeError(f"stragglers.probe.attach: {type(model).__name__} is a "
                        "torch.distributed.pipelining object; record a pipeline with "
                        "stragglers.probe.attach_pipeline(stage, schedule, out_dir)")
    return make_loop_probe(out_dir, config=config, trial_name=trial_name, merge=merge,
                           force=force).install(model)


class CallbackProbe:
    """What the framework callbacks (:mod:`stragglers.probe.lightning`,
    :mod:`stragglers.probe.hf`) share: where and how to record (``config``, ``trial_name``
    — default the framework's name —, ``merge`` and ``force`` as in :func:`attach`) and the
    running probe."""

    default_trial = "loop"

    def __init__(self, out_dir: str | os.PathLike[str], *, config: ProbeConfig | None = None,
                 trial_name: str | None = None, merge: bool = True,
                 force: bool = False) -> None:
        self.out_dir = out_dir
        self.config = config
        self.trial_name = trial_name if trial_name is not None else self.default_trial
        self.merge = merge
        self.force = force
        self.loop: LoopProbe | None = None

    def start_probe(self) -> LoopProbe:
        """Start this rank's probe (a collective: every rank calls it)."""
        self.loop = make_loop_probe(self.out_dir, config=self.config,
                                    trial_name=self.trial_name, merge=self.merge,
                                    force=self.force)
        return self.loop

    def close_probe(self) -> None:
        """Close the probe (a collective) and merge on rank 0."""
        if self.loop is not None:
            self.loop.close()
            self.loop = None
