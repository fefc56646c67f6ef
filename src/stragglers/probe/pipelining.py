"""Probes for a pipeline-parallel job built with ``torch.distributed.pipelining``.

The recipe (every rank runs one stage, after ``init_process_group``)::

    import stragglers.probe

    stage = PipelineStage(submodule, stage_index, num_stages, device)
    schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=loss_fn)
    probe = stragglers.probe.attach_pipeline(stage, schedule, out_dir="runs/pp")
    for x, y in loader:
        with probe.step():
            schedule.step(x) if stage.is_first else schedule.step(target=y) ...
            optimizer.step()
            optimizer.zero_grad()
    probe.close()  # rank 0 merges: runs/pp/trace.parquet + runs/pp/meta.yaml

Every process is one worker ``(dp_rank, stage)``: ``stage`` is the stage's ``stage_index``,
``pp_size`` its ``num_stages``; ``dp_size`` is the number of processes that run stage 0, and a
process's ``dp_rank`` its place among the processes that run the same stage, in global rank
order (or the ``dp_rank`` given). What is recorded, per training step and process, in the
order the schedule runs it (1F1B: the warm-up forwards, the steady one-forward-one-backward
phase, the cool-down backwards; GPipe: all forwards, then all backwards):

* ``forward-compute`` / ``backward-compute`` per microbatch (``mb_id`` = the schedule's
  microbatch index, ``mc = 0``): the stage's ``forward_one_chunk`` and ``backward_one_chunk``
  calls (the stage's own methods the schedules call; the loss of the last stage is computed
  between the two, outside the spans);
* ``forward-send``, ``forward-recv``, ``backward-send``, ``backward-recv``: the stage's
  ``get_fwd_send_ops``, ``get_fwd_recv_ops``, ``get_bwd_send_ops`` and ``get_bwd_recv_ops``
  name the ``P2POp`` objects of each microbatch; a span runs from the moment the schedule
  launches the batch holding them to the moment its wait on that batch returns. A batch
  that holds a send and a receive (1F1B fuses ``forward-send`` with ``backward-recv`` and
  ``backward-send`` with ``forward-recv``) gives both spans the same timing, as Megatron-LM's
  combined calls do; a send the schedule waits for later (1F1B's warm-up and cool-down
  sends) lasts until that wait. The first stage has no ``forward-recv``/``backward-send``,
  the last no ``forward-send``/``backward-recv``;
* ``gc``, ``layernorm-grads-all-reduce`` and (first and last stage) ``embedding-grads-all-
  reduce``: zero-length markers at the end of the last backward, where the analyzer's step
  model expects them (GC time is measured inside every span: ``gc_s``);
* with data parallelism (``dp_size > 1``), ``grads-reduce-scatter``: from the last parameter
  gradient of the step's last backward to the start of the optimizer step (DDP's gradient
  all-reduce at the end of the last backward, FSDP's reduce-scatter in the schedule's
  ``perform_reduce_grad``, or the job's own all-reduce), synchronised across DP ranks by the
  analyzer; the last backward then ends at that gradient;
* ``optimizer``: ``torch.optim`` step pre- and post-hooks.

No ``optimizer-clip-main-grad`` (a collective over all stages in the model, which the stages
of a ``torch.distributed.pipelining`` job do not run unless the job adds one). A step whose
spans are incomplete (a microbatch without its backward or its P2P ops, a batch never waited
on, no optimizer step, a microbatch run twice: ``schedule.step`` called twice in one
``probe.step()``) is left out on that rank, hence out of the merged trace, and counted with
its reason (:attr:`PipelineProbe.discarded`, logged at :meth:`PipelineProbe.close`).

**Private API.** ``torch.distributed.pipelining`` offers no hook on its P2P batches: the
probe wraps ``torch.distributed.pipelining.schedules._batch_p2p`` and ``_wait_batch_p2p``,
the module functions through which ``Schedule1F1B`` and ``ScheduleGPipe`` launch and wait
for every batch (torch 2.13). :func:`attach_pipeline` checks that the schedule's code calls
them and refuses otherwise (other torch versions, other schedules), naming what is missing.
Single-stage schedules only (``Schedule1F1B``, ``ScheduleGPipe``): the interleaved and
zero-bubble schedules run several stages per process (virtual stages) and are refused.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stragglers.probe.ops import (
    BACKWARD_COMPUTE,
    BACKWARD_RECV,
    BACKWARD_SEND,
    EMBEDDING_ALL_REDUCE,
    FORWARD_COMPUTE,
    FORWARD_RECV,
    FORWARD_SEND,
    GC,
    GRADS_REDUCE_SCATTER,
    LAYERNORM_ALL_REDUCE,
    OPTIMIZER,
)
from stragglers.probe.outdir import check_unclaimed, claim_out_dir
from stragglers.probe.recorder import Mark, Probe
from stragglers.probe.settings import JobLayout, ProbeConfig, WorkerInfo

log = logging.getLogger("stragglers.probe")

#: What a run replaces in its output folder (as :func:`stragglers.probe.attach`).
PIPELINE_OUTPUTS = ("probe", "trace.parquet", "meta.yaml")
#: The schedules whose order and P2P calls the probe knows.
SUPPORTED_SCHEDULES = ("Schedule1F1B", "ScheduleGPipe")
#: The private functions of ``torch.distributed.pipelining.schedules`` the probe wraps.
PRIVATE_P2P = ("_batch_p2p", "_wait_batch_p2p")
#: The stage's methods the probe wraps (public methods the schedules call).
STAGE_METHODS = ("forward_one_chunk", "backward_one_chunk", "get_fwd_recv_ops",
                 "get_fwd_send_ops", "get_bwd_recv_ops", "get_bwd_send_ops")
_OPS_GETTERS = {"get_fwd_recv_ops": FORWARD_RECV, "get_fwd_send_ops": FORWARD_SEND,
                "get_bwd_recv_ops": BACKWARD_RECV, "get_bwd_send_ops": BACKWARD_SEND}


def is_pipelining_object(obj: Any) -> bool:
    """Whether ``obj`` is a ``torch.distributed.pipelining`` stage or schedule."""
    return type(obj).__module__.startswith("torch.distributed.pipelining")


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def check_supported(stage: Any, schedule: Any) -> Any:
    """Refuse (``TypeError``/``RuntimeError``, one line) a stage or schedule the probe cannot
    record; return the ``torch.distributed.pipelining.schedules`` module."""
    try:
        from torch.distributed.pipelining import schedules
    except ImportError as exc:
        raise RuntimeError(f"stragglers.probe.attach_pipeline needs "
                           f"torch.distributed.pipelining ({exc})") from exc
    name = type(schedule).__name__
    if not any(cls.__name__ in SUPPORTED_SCHEDULES for cls in type(schedule).__mro__
               if cls.__module__ == schedules.__name__):
        raise TypeError(f"stragglers.probe.attach_pipeline: schedule {name} is not supported "
                        f"(supported: {', '.join(SUPPORTED_SCHEDULES)}, one stage per "
                        "process)")
    missing = [f"schedules.{n}" for n in PRIVATE_P2P
               if not callable(getattr(schedules, n, None))]
    missing += [f"stage.{m}" for m in STAGE_METHODS if not callable(getattr(stage, m, None))]
    code = getattr(type(schedule)._step_microbatches, "__code__", None)
    names = set(code.co_names) if code is not None else set()
    if not missing and ("_wait_batch_p2p" not in names
                        or not names & {"_batch_p2p", "_sorted_batch_p2p"}):
        missing.append(f"{name}._step_microbatches calling _batch_p2p and _wait_batch_p2p")
    if missing:
        raise RuntimeError(
            f"stragglers.probe.attach_pipeline: torch {_torch_version()} lacks "
            f"{', '.join(missing)} (the probe wraps these internals of "
            "torch.distributed.pipelining, as in torch 2.13); use a torch version whose "
            "schedules have them, or Probe spans in your own schedule")
    return schedules


# ---------------------------------------------------------------------------- P2P batches
@dataclass(eq=False)
class _Batch:
    """One P2P batch of a recorded step: what it holds, when it was launched, and which of
    its works have not been waited on yet."""

    kinds: list[tuple[str, int]]
    start: Mark
    works: list[Any]
    waiting: set[int] = field(default_factory=set)
    end: Mark | None = None


class _P2PPatch:
    """The wrappers of ``schedules._batch_p2p`` / ``_wait_batch_p2p``, installed while a
    :class:`PipelineProbe` is attached (one per process)."""

    def __init__(self, schedules: Any, owner: PipelineProbe) -> None:
        self.schedules = schedules
        self.owner = owner
        self.batch_p2p: Callable[..., Any] = schedules._batch_p2p
        self.wait_batch_p2p: Callable[..., Any] = schedules._wait_batch_p2p

        def batch_p2p(p2p_ops: Any, *args: Any, **kwargs: Any) -> Any:
            start = owner.batch_begin(p2p_ops)
            works = self.batch_p2p(p2p_ops, *args, **kwargs)
            if start is not None:
                owner.batch_launched(p2p_ops, start, works)
            return works

        def wait_batch_p2p(work: Any, *args: Any, **kwargs: Any) -> Any:
            result = self.wait_batch_p2p(work, *args, **kwargs)
            owner.batch_waited(work)
            return result

        self.wrappers = (batch_p2p, wait_batch_p2p)

    def install(self) -> None:
        global _ACTIVE
        if _ACTIVE is not None:
            raise RuntimeError("stragglers.probe.attach_pipeline: a pipeline probe is attached "
                               "already in this process (close it first; one stage per "
                               "process)")
        self.schedules._batch_p2p, self.schedules._wait_batch_p2p = self.wrappers
        _ACTIVE = self

    def uninstall(self) -> None:
        global _ACTIVE
        if _ACTIVE is not self:
            return
        self.schedules._batch_p2p = self.batch_p2p
        self.schedules._wait_batch_p2p = self.wait_batch_p2p
        _ACTIVE = None


#: The patch installed in this process (at most one).
_ACTIVE: _P2PPatch | None = None


def _chunk_id_of(method: Callable[..., Any]) -> Callable[[tuple[Any, ...], dict[str, Any]],
                                                         int]:
    """A reader of the microbatch index (the method's first parameter) from a call's
    arguments."""
    import inspect

    name = next(iter(inspect.signature(method).parameters))

    def chunk_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        return int(args[0] if args else kwargs[name])

    return chunk_of


def _as_list(work: Any) -> list[Any]:
    if isinstance(work, list | tuple):
        return list(work)
    return [] if work is None else [work]


# ---------------------------------------------------------------------------- the probe
class PipelineProbe:
    """The trace of one pipeline stage's training loop (module docstring).

    ``probe`` is the process's started :class:`~stragglers.probe.Probe`; ``stage`` the
    ``PipelineStage``; ``dp_sync`` whether the job has data parallelism (then the gradient
    synchronisation is recorded); ``merge_to`` the folder rank 0 merges every rank's files
    into at :meth:`close` (None: no merge). Counters: :attr:`steps_recorded`,
    :attr:`steps_discarded` and :attr:`discarded` (reason -> steps).
    """

    def __init__(self, probe: Probe, stage: Any, schedules: Any, *, dp_sync: bool,
                 merge_to: str | os.PathLike[str] | None = None) -> None:
        self.probe = probe
        self.stage = stage
        self.dp_sync = dp_sync
        self.merge_to = Path(merge_to) if merge_to is not None else None
        self.merge_error: str | None = None
        self.steps_recorded = 0
        self.steps_discarded = 0
        self.discarded: collections.Counter[str] = collections.Counter()
        self._patch = _P2PPatch(schedules, self)
        self._handles: list[Any] = []
        self._wrapped: list[str] = []
        self._step_no = 0
        self._open = False
        self._recording = False
        self._reset()

    # ------------------------------------------------------------------ per-step state
    def _reset(self) -> None:
        # (microbatch, start, end, last parameter gradient seen inside), in execution order
        self._fwd: list[tuple[int, Mark, Mark, Mark | None]] = []
        self._bwd: list[tuple[int, Mark, Mark, Mark | None]] = []
        self._ops: dict[int, tuple[str, int, Any]] = {}  # id(P2POp) -> (optype, mb, op)
        self._batches: list[_Batch] = []
        self._by_work: dict[int, _Batch] = {}
        self._in_backward = False
        self._last_grad: Mark | None = None
        self._opt_start: Mark | None = None
        self._opt_end: Mark | None = None
        self._problem: str | None = None

    def _broken(self, reason: str) -> None:
        if self._problem is None:
            self._problem = reason

    # ------------------------------------------------------------------ hooks
    def install(self) -> PipelineProbe:
        """Wrap the stage's methods (instance attributes), the schedules' P2P functions,
        and register ``torch.optim`` step hooks and (with ``dp_sync``) a post-accumulate-grad
        hook on each parameter of the stage that requires grad."""
        import torch.optim.optimizer as opt

        self._patch.install()
        stage = self.stage
        for name in STAGE_METHODS:
            original = getattr(stage, name)
            if name == "forward_one_chunk":
                wrapper = self._wrap_compute(original, forward=True)
            elif name == "backward_one_chunk":
                wrapper = self._wrap_compute(original, forward=False)
            else:
                wrapper = self._wrap_getter(original, _OPS_GETTERS[name])
            setattr(stage, name, wrapper)
            self._wrapped.append(name)
        if self.dp_sync:
            for param in stage.submod.parameters():
                if param.requires_grad:
                    self._handles.append(param.register_post_accumulate_grad_hook(
                        self._on_grad))
        self._handles.append(opt.register_optimizer_step_pre_hook(self._on_opt_pre))
        self._handles.append(opt.register_optimizer_step_post_hook(self._on_opt_post))
        return self

    def uninstall(self) -> None:
        """Undo :meth:`install`."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for name in self._wrapped:
            with contextlib.suppress(AttributeError):
                delattr(self.stage, name)  # the class's method shows through again
        self._wrapped.clear()
        self._patch.uninstall()

    def _wrap_compute(self, original: Callable[..., Any], forward: bool
                      ) -> Callable[..., Any]:
        chunk_of = _chunk_id_of(original)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self._recording:
                return original(*args, **kwargs)
            mb = chunk_of(args, kwargs)
            start = self.probe.mark()
            if not forward:
                self._in_backward, self._last_grad = True, None
            try:
                result = original(*args, **kwargs)
            finally:
                self._in_backward = False
            spans = self._fwd if forward else self._bwd
            if any(span[0] == mb for span in spans):
                self._broken("a microbatch ran twice in one step (schedule.step called twice "
                             "inside probe.step?)")
            spans.append((mb, start, self.probe.mark(), None if forward else self._last_grad))
            return result

        return wrapper

    def _wrap_getter(self, original: Callable[..., Any], optype: str) -> Callable[..., Any]:
        chunk_of = _chunk_id_of(original)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ops = original(*args, **kwargs)
            if self._recording:
                mb = chunk_of(args, kwargs)
                for op in ops:
                    self._ops[id(op)] = (optype, mb, op)
            return ops

        return wrapper

    def _on_grad(self, param: Any) -> None:
        if self._in_backward:
            self._last_grad = self.probe.mark(self._last_grad)

    def _on_opt_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._recording and self._opt_start is None and self._bwd:
            self._opt_start = self.probe.mark()

    def _on_opt_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._recording and self._opt_start is not None:
            self._opt_end = self.probe.mark()

    # ------------------------------------------------------------------ P2P batches
    def batch_begin(self, p2p_ops: Any) -> Mark | None:
        """A P2P batch is about to be launched: its start, if it holds ops of this step."""
        if not self._recording or not p2p_ops:
            return None
        if not any(id(op) in self._ops for op in p2p_ops):
            return None
        return self.probe.mark()

    def batch_launched(self, p2p_ops: Any, start: Mark, works: Any) -> None:
        """The batch that :meth:`batch_begin` started returned ``works``."""
        found = [self._ops.pop(id(op), None) for op in p2p_ops]  # each op is launched once
        kinds = [(optype, mb) for optype, mb, _ in filter(None, found)]
        batch = _Batch(kinds, start, _as_list(works))
        batch.waiting = {id(w) for w in batch.works}
        for w in batch.works:
            self._by_work[id(w)] = batch
        if not batch.waiting:
            batch.end = self.probe.mark()
        self._batches.append(batch)

    def batch_waited(self, work: Any) -> None:
        """The schedule's wait on ``work`` returned: batches all of whose works are waited
        on end now."""
        if not self._recording:
            return
        now: Mark | None = None
        for w in _as_list(work):
            batch = self._by_work.pop(id(w), None)
            if batch is None:
                continue
            batch.waiting.discard(id(w))
            if not batch.waiting and batch.end is None:
                now = now if now is not None else self.probe.mark()
                batch.end = now
                batch.works = []  # nothing holds the works (and their buffers) any longer

    # ------------------------------------------------------------------ steps
    @property
    def in_step(self) -> bool:
        """Whether a step is open."""
        return self._open

    def begin_step(self, step: int | None = None) -> None:
        """Open training step ``step`` (default: one more than the last)."""
        if self._open:
            return
        if step is not None:
            self._step_no = step
        self._open = True
        self._reset()
        self._recording = self.probe.begin_step(self._step_no)

    def end_step(self) -> None:
        """Close the open step: record its spans if they are complete, else leave it out
        and count the reason."""
        if not self._open:
            return
        self._open = False
        if self._recording:
            problem = self._incomplete()
            if problem is None:
                self._record()
                self.steps_recorded += 1
            else:
                self.probe.discard_step()
                self.steps_discarded += 1
                self.discarded[problem] += 1
        self._recording = False
        self._reset()  # the step's P2P ops and works are released
        self.probe.end_step()
        self._step_no += 1

    def _p2p_mbs(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {t: [] for t in _OPS_GETTERS.values()}
        for batch in self._batches:
            for optype, mb in dict.fromkeys(batch.kinds):
                found[optype].append(mb)
        return found

    def _incomplete(self) -> str | None:
        """Why the step's spans cannot be recorded (None: they can)."""
        if self._problem is not None:
            return self._problem
        fwd = [span[0] for span in self._fwd]
        bwd = [span[0] for span in self._bwd]
        if not fwd:
            return "no forward (schedule.step not called inside probe.step?)"
        if sorted(fwd) != list(range(len(fwd))) or sorted(bwd) != sorted(fwd):
            return "the forwards and backwards do not cover the same microbatches 0..n-1"
        if any(batch.end is None for batch in self._batches):
            return "a P2P batch was never waited on"
        expected: list[tuple[str, list[int]]] = []
        if not self.stage.is_first:
            expected += [(FORWARD_RECV, fwd), (BACKWARD_SEND, bwd)]
        if not self.stage.is_last:
            expected += [(FORWARD_SEND, fwd), (BACKWARD_RECV, bwd)]
        found = self._p2p_mbs()
        for optype, mbs in expected:
            if sorted(found[optype]) != sorted(mbs):
                return f"{optype} ops for microbatches {sorted(found[optype])}, computes for " \
                       f"{sorted(mbs)}"
        for optype in set(found) - {t for t, _ in expected}:
            if found[optype]:
                return f"{optype} ops on a stage that has no such peer"
        if self._opt_start is None or self._opt_end is None:
            return "no optimizer step after the backwards"
        return None

    def _record(self) -> None:
        probe = self.probe
        # the compute that ends last: computes run one at a time, the last is a backward;
        # with DP it ends at its last parameter gradient (the synchronisation follows)
        mb, start, end, last_grad = self._bwd[-1]
        last = last_grad if self.dp_sync and last_grad is not None else end
        self._bwd[-1] = (mb, start, last, last_grad)
        for optype, spans in ((FORWARD_COMPUTE, self._fwd), (BACKWARD_COMPUTE, self._bwd)):
            for mb, a, b, _ in spans:
                probe.add_span(optype, a, b, mb_id=mb, mc=0)
        for batch in self._batches:
            assert batch.end is not None
            for optype, _ in dict.fromkeys(batch.kinds):
                probe.add_span(optype, batch.start, batch.end)
        stage = self.stage
        markers = [GC, LAYERNORM_ALL_REDUCE] + (
            [EMBEDDING_ALL_REDUCE] if stage.is_first or stage.is_last else [])
        for optype in markers:
            probe.add_span(optype, last, last)
        opt_start, opt_end = self._opt_start, self._opt_end
        assert opt_start is not None and opt_end is not None
        if self.dp_sync:
            probe.add_span(GRADS_REDUCE_SCATTER, last, opt_start, mc=0)
        probe.add_span(OPTIMIZER, opt_start, opt_end)

    @contextlib.contextmanager
    def step(self, step: int | None = None) -> Iterator[PipelineProbe]:
        """``with probe.step():`` around one training step (``schedule.step`` and the
        optimizer step). Every rank must run the same steps. A step that raises is left out
        and the exception goes on."""
        self.begin_step(step)
        try:
            yield self
        except BaseException:
            self._recording = False
            self.probe.discard_step()
            self._open = False
            self._reset()
            self._step_no += 1
            raise
        self.end_step()

    # ------------------------------------------------------------------ end
    def close(self) -> None:
        """Remove the hooks and wrappers, close the probe (a collective: every rank calls
        it), log the steps left out, and with ``merge_to`` let rank 0 merge every rank's
        files into ``trace.parquet`` + ``meta.yaml`` there. A failed merge is logged and kept
        in :attr:`merge_error`; it never stops the training job."""
        self.end_step()
        self.uninstall()
        self.probe.close()
        if self.steps_discarded:
            reasons = "; ".join(f"{n} x {why}" for why, n in self.discarded.most_common())
            log.warning("stragglers: rank %d left %d of %d recorded steps out of the trace: %s",
                        self.probe.worker.rank, self.steps_discarded,
                        self.steps_discarded + self.steps_recorded, reasons)
        self.merge_error = self.probe.merge_into(self.merge_to)

    def __enter__(self) -> PipelineProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------- layout
def pipeline_layout(num_stages: int, pp_ranks: tuple[int, ...], rank: int,
                    everyone: list[Any]) -> tuple[int, int]:
    """``(dp_rank, dp_size)`` of this process from what every process reported
    (``everyone[r] = (stage_index, num_stages, pp_ranks, dp_rank or None)``); raises
    ``ValueError`` (one line) on a layout the trace cannot describe."""
    pp = num_stages
    if any(e[1] != pp for e in everyone):
        raise ValueError("stragglers.probe.attach_pipeline: the processes disagree on the "
                         "number of stages")
    counts = collections.Counter(e[0] for e in everyone)
    dp_size = counts.get(0, 0)
    if len(everyone) != dp_size * pp or any(counts.get(s, 0) != dp_size for s in range(pp)):
        raise ValueError(f"stragglers.probe.attach_pipeline: {len(everyone)} processes for "
                         f"{pp} stages: every process must run one stage, each stage on "
                         f"the same number of processes ({dict(sorted(counts.items()))})")
    given = [e[3] for e in everyone]
    if any(g is None for g in given) and any(g is not None for g in given):
        raise ValueError("stragglers.probe.attach_pipeline: pass dp_rank on every process "
                         "or on none")
    if given[0] is None:  # the place among the processes of the same stage
        dp_of = [sum(1 for e in everyone[:r] if e[0] == everyone[r][0])
                 for r in range(len(everyone))]
    else:
        dp_of = [int(g) for g in given]
    workers = {(dp_of[r], everyone[r][0]) for r in range(len(everyone))}
    if len(workers) != len(everyone) or any(not 0 <= d < dp_size for d in dp_of):
        raise ValueError(f"stragglers.probe.attach_pipeline: the dp_rank values {dp_of} do not "
                         f"give each (dp_rank, stage) one process (dp_size {dp_size})")
    peers = [r for r in pp_ranks if 0 <= r < len(everyone)]
    if any(dp_of[r] != dp_of[rank] for r in peers):
        raise ValueError(f"stragglers.probe.attach_pipeline: rank {rank} (dp_rank "
                         f"{dp_of[rank]}) exchanges activations with ranks {list(pp_ranks)} of "
                         f"dp_rank {[dp_of[r] for r in peers]}: pass dp_rank= (the same on "
                         "every stage of one pipeline)")
    return dp_of[rank], dp_size


def attach_pipeline(stage: Any, schedule: Any, out_dir: str | os.PathLike[str], *,
                    dp_rank: int | None = None, config: ProbeConfig | None = None,
                    trial_name: str = "pipeline", merge: bool = True, force: bool = False
                    ) -> PipelineProbe:
    """Record the trace of a ``torch.distributed.pipelining`` training loop: ``stage`` is
    this process's ``PipelineStage``, ``schedule`` its ``Schedule1F1B`` or ``ScheduleGPipe``
    (see the module docstring for what is recorded).

    ``dp_rank`` places the process's pipeline among the data-parallel replicas (default:
    its place among the processes that run the same stage, in global rank order); ``config``
    sets the sampling (default: every step from step 2 on: ``ProbeConfig(first_step=2)``);
    ``trial_name`` names the job in the metadata; ``merge=False`` leaves the merge to
    ``stragglers probe merge OUT_DIR/probe --out OUT_DIR``. ``out_dir`` must be new, empty,
    or written by stragglers before (``force=True`` reuses another folder). A collective:
    call it on every rank after ``init_process_group``, before the first ``schedule.step``.
    """
    import torch.distributed as dist

    schedules = check_supported(stage, schedule)
    if _ACTIVE is not None:
        raise RuntimeError("stragglers.probe.attach_pipeline: a pipeline probe is attached "
                           "already in this process (close it first; one stage per process)")
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    group = stage.group
    pp_ranks = (tuple(dist.get_process_group_ranks(group)) if distributed and group is not None
                else tuple(range(world)))
    mine = (int(stage.stage_index), int(stage.num_stages), pp_ranks, dp_rank)
    everyone: list[Any] = [None] * world
    if distributed:
        dist.all_gather_object(everyone, mine)
    else:
        everyone = [mine]
    dp, dp_size = pipeline_layout(mine[1], pp_ranks, rank, everyone)
    out = Path(out_dir)
    cfg = config if config is not None else ProbeConfig(first_step=2)
    if cfg.enabled:
        check_unclaimed(out, force, "out_dir")
        if distributed:
            dist.barrier()  # every rank has looked before rank 0 changes anything
        if rank == 0:
            claim_out_dir(out, True, "out_dir", PIPELINE_OUTPUTS)
        if distributed:
            dist.barrier()
    probe = Probe(out / "probe",
                  WorkerInfo(rank=rank, world_size=world, dp_rank=dp, stage=mine[0]), cfg,
                  layout=JobLayout(dp_size=dp_size, pp_size=mine[1], trial_name=trial_name))
    probe.start()
    pipe = PipelineProbe(probe, stage, schedules, dp_sync=dp_size > 1,
                         merge_to=out if merge else None)
    return pipe.install()
