"""The probe session: timers for named spans, a background flusher, per-rank files.

Typical use in a training loop (every rank)::

    probe = Probe("runs/probe", WorkerInfo(rank, world, dp_rank, stage),
                  ProbeConfig(profile_steps=10, every=100), layout=JobLayout(dp, pp))
    probe.start()                       # collective: aligns clocks
    for step in range(steps):
        probe.begin_step(step)
        with probe.span("forward-compute", mb_id=i, mc=0):
            ...
        probe.end_step()                # collective at some window ends (clock re-alignment)
    probe.close()                       # collective: last alignment, flush, parquet

Timing on CPU uses a monotonic clock. On CUDA each span records two ``torch.cuda.Event``
objects with timing enabled on the current stream; nothing waits for them on the hot path. The
flusher thread converts a span once ``event.query()`` says its end event has completed, using an
anchor event whose CPU time was taken while the GPU was idle (at start and at each clock
alignment, the only points where the probe synchronises the device: once per
``sync_gap_steps`` steps at most, outside recorded steps). Records go to ``rank-NNNNN.jsonl``
in the output directory; at the end of the session the same spans, with timestamps aligned to
rank 0's clock, go to ``rank-NNNNN.parquet``.

Live step records (``ProbeConfig.live``): a caller that knows where each step waits for the
other ranks (the loop probe, :mod:`stragglers.probe.loop`) hands the flusher the marks of
every step, recorded or not (:meth:`Probe.step_record`: the step's start and end and its
synchronisation waits; a few clock readings, or CUDA events, on the training thread). The
flusher turns them into one step record a step in ``steps-rank-NNNNN.jsonl`` (the format of
:class:`stragglers.logs.records.StepRecord`)::

    {"kind": "step", "v": 1, "rank": 1, "step": 17, "ts": 1234.5678, "busy": 0.0412,
     "wait": 0.0031}

``wait`` is the sum of the step's waits plus the time the probe spent aligning clocks since
the previous step (a collective too); ``busy`` the time from the previous step's end (for
the first step, or after a step that raised, the step's start or its first wait) to this
step's end, less ``wait``; ``ts`` the end on rank 0's clock (the latest measured offset).
With ``push_server`` and ``push_live`` the same lines are posted to the server
(:class:`stragglers.probe.push.LivePusher`, its own thread).

Garbage collection (``ProbeConfig.record_gc``, on by default): a ``gc.callbacks`` hook adds
the seconds of every collection run by the thread that started the probe (the training loop)
to a running total; a span reads the total when it opens and when it closes (two attribute
reads, nothing allocated), and its ``gc_s`` is the difference: the GC time inside the span.
Spans are expected on that thread: a span opened on another thread sees the probe thread's
collections. A CUDA span's ``gc_s`` is the CPU-side GC time while it was open, at most its
GPU duration (the GPU may have hidden part of the stall).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from stragglers.probe.calls import EventStamp, PendingCall, Stamp, suppressed
from stragglers.probe.clock import (
    ClockSample,
    OffsetTrack,
    clock_domain,
    gather_domains,
    measure_offset,
)
from stragglers.probe.ops import OPTYPES
from stragglers.probe.settings import JobLayout, ProbeConfig, WorkerInfo, write_job_yaml

log = logging.getLogger("stragglers.probe")

F = TypeVar("F", bound=Callable[..., Any])

#: Version 2 adds ``gc_recorded`` to the header and ``gc_s`` to span records.
FORMAT_VERSION = 2
_NULL = contextlib.nullcontext()
#: The optypes of a one-type span, shared by all its spans (also checks the name).
_ONE_TYPE: dict[str, tuple[str, ...]] = {name: (name,) for name in OPTYPES}


def rank_file(out_dir: str | os.PathLike[str], rank: int, kind: str = "rank") -> Path:
    """Path of a rank's record file: ``rank-00003.jsonl``, ``calls-rank-00003.jsonl`` or
    ``steps-rank-00003.jsonl``."""
    name = f"rank-{rank:05d}.jsonl" if kind == "rank" else f"{kind}-rank-{rank:05d}.jsonl"
    return Path(out_dir) / name


class Span:
    """A timed span of one or several op types (``optypes``) in training step ``step``;
    ``start``/``end`` on the probe's clock (seconds) once known; ``gc_start``/``gc_end`` the
    probe's running total of GC seconds when it opened and closed. The context manager that
    :meth:`Probe.span` returns is also the record it queues on exit for the flusher."""

    __slots__ = ("probe", "step", "optypes", "mb_id", "mc", "start", "end", "gc_start",
                 "gc_end")
    start: float
    end: float
    gc_start: float
    gc_end: float

    def __init__(self, probe: Probe, step: int, optypes: tuple[str, ...], mb_id: int,
                 mc: int) -> None:
        self.probe = probe
        self.step = step
        self.optypes = optypes
        self.mb_id = mb_id
        self.mc = mc


class CpuSpan(Span):
    """A span timed with the CPU clock."""

    __slots__ = ()

    def __enter__(self) -> CpuSpan:
        probe = self.probe
        self.gc_start = probe._gc_seconds
        self.start = probe._clock()
        return self

    def __exit__(self, *exc: object) -> None:
        probe = self.probe
        self.end = probe._clock()
        self.gc_end = probe._gc_seconds
        probe._pending.append(self)


class CudaSpan(Span):
    """A span timed with CUDA events recorded on the current stream. The flusher reads the
    events against the probe's clock anchor ``anchor`` once ``end_event`` has completed, and
    sets ``start``/``end``."""

    __slots__ = ("start_event", "end_event", "anchor")
    start_event: Any
    end_event: Any
    anchor: int

    def __enter__(self) -> CudaSpan:
        probe = self.probe
        self.gc_start = probe._gc_seconds
        ev = probe._event()
        ev.record()
        self.start_event = ev
        self.anchor = len(probe._anchors) - 1
        return self

    def __exit__(self, *exc: object) -> None:
        probe = self.probe
        ev = probe._event()
        ev.record()
        self.end_event = ev
        self.gc_end = probe._gc_seconds
        probe._pending.append(self)


class MarkedCudaSpan(CudaSpan):
    """A CUDA span built from two :class:`Mark` objects (:meth:`Probe.add_span`): its events
    may be shared with other spans, so they never go back to the event pool."""

    __slots__ = ()


class Mark(NamedTuple):
    """A point in time taken by :meth:`Probe.mark`, to be made into a span later
    (:meth:`Probe.add_span`): a CPU clock reading ``time`` (``event`` None), or a CUDA event
    recorded on the current stream and read against clock anchor ``anchor``; ``gc`` is the
    probe's running total of GC seconds then."""

    time: float
    event: Any
    anchor: int
    gc: float


class StepEnd(NamedTuple):
    """The end of a recorded step, on the probe's clock."""

    step: int
    time: float


class StepMarks(NamedTuple):
    """What the flusher makes a live step record of (:meth:`Probe.step_record`): the step,
    its start and end, its synchronisation waits and the seconds of clock alignment since
    the previous step's end (``aligned``)."""

    step: int
    begin: Mark
    end: Mark
    waits: tuple[tuple[Mark, Mark], ...]
    aligned: float


def span_gc_seconds(span: Span) -> float:
    """Seconds of GC inside a finished span: the growth of the probe's GC total while it was
    open, at most its duration (a CUDA span's GPU duration; for a CPU span the bound only
    absorbs the rounding of the running total)."""
    return max(0.0, min(span.gc_end - span.gc_start, span.end - span.start))


#: What the probe queues for its flusher.
Pending = CpuSpan | CudaSpan | PendingCall | StepEnd | ClockSample | StepMarks
#: The live step record format version (``v``; :mod:`stragglers.logs.records`).
STEP_RECORD_VERSION = 1


def _checked_optypes(optype: str | tuple[str, ...]) -> tuple[str, ...]:
    optypes = (optype,) if isinstance(optype, str) else tuple(optype)
    for name in optypes:
        if name not in _ONE_TYPE:
            raise ValueError(f"unknown operation type {name!r}; expected one of {OPTYPES}")
    return optypes


class Probe:
    """A profiling session of one rank (see the module docstring for the life cycle).

    ``clock`` is the CPU clock (seconds, monotonic); ``clock_group`` the gloo process group
    used for clock alignment (by default the default group if it is gloo, else a new gloo group
    over all ranks, created by :meth:`start`).
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        worker: WorkerInfo,
        config: ProbeConfig | None = None,
        layout: JobLayout | None = None,
        clock: Callable[[], float] = time.perf_counter,
        clock_group: Any = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.worker = worker
        self.config = config or ProbeConfig()
        self.layout = layout
        self._clock = clock
        self._clock_group = clock_group
        self._pending: collections.deque[Pending] = collections.deque()
        self._step: int | None = None
        self._active = False
        self._started = False
        self._closed = False
        self._cuda = False
        self._anchors: list[tuple[Any, float]] = []
        self._event_pool: list[Any] = []
        self._samples: list[ClockSample] = []
        self._domains: list[str | None] | None = None
        self._last_sync_step = -1
        self._spans_done: list[Span] = []  # for the parquet file
        self._files: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._write_lock = threading.Lock()
        self._error: BaseException | None = None
        #: Seconds of GC run by ``_gc_thread`` so far (see the module docstring).
        self._gc_seconds = 0.0
        self._gc_began = 0.0
        self._gc_thread: int | None = None
        #: Live step records: seconds of clock alignment since the last step record, the
        #: last record's (step, end) on the flusher, and the pusher of the lines.
        self._aligned = 0.0
        self._live_prev: tuple[int, float] | None = None
        self._pusher: Any = None
        self.steps_written = 0

    # ------------------------------------------------------------------ life cycle
    @property
    def enabled(self) -> bool:
        """Whether this probe records anything at all."""
        return self.config.enabled

    @property
    def profiling(self) -> bool:
        """Whether the current step is being recorded."""
        return self._active

    @property
    def live(self) -> bool:
        """Whether live step records are taken now (:meth:`step_record`): a started, open
        probe with ``ProbeConfig.live``."""
        return self._started and not self._closed and self.config.enabled and self.config.live

    @property
    def timer_kind(self) -> str:
        """``"cuda-event"`` or ``"monotonic"``."""
        return "cuda-event" if self._cuda else "monotonic"

    def start(self) -> Probe:
        """Open the rank file, align clocks with rank 0 (collective) and start the flusher."""
        if self._started or not self.enabled:
            self._started = True
            return self
        self._cuda = self._want_cuda()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._files["rank"] = open(rank_file(self.out_dir, self.worker.rank), "w")  # noqa: SIM115
        header = {
            "kind": "header",
            "version": FORMAT_VERSION,
            **self.worker.to_dict(),
            "timer": self.timer_kind,
            "clock_domain": clock_domain(self._clock),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "config": self.config.to_dict(),
            "gc_recorded": self.config.record_gc,
        }
        if self.layout is not None:
            header["meta"] = self.layout.to_meta()
        self._write("rank", [json.dumps(header)])
        if self.layout is not None and self.worker.rank == 0:
            write_job_yaml(self.layout.to_meta(), self.out_dir / "job.yaml")
        if self.config.record_gc:
            self._gc_thread = threading.get_ident()
            gc.callbacks.append(self._on_gc)
        self._setup_clock_group()
        self.sync_clocks()
        if self.config.live and self.config.push_server is not None and self.config.push_live:
            from stragglers.probe.push import LivePusher

            job = self.config.push_job or (self.layout.trial_name if self.layout is not None
                                           else "probe")
            self._pusher = LivePusher(self.config, job, self.worker.rank).start()
        self._thread = threading.Thread(
            target=self._run_flusher, name=f"stragglers-probe-{self.worker.rank}", daemon=True
        )
        self._thread.start()
        self._started = True
        return self

    def close(self) -> None:
        """Align clocks a last time (collective), write everything out and stop the flusher."""
        if self._closed:
            return
        self._closed = True
        self._active = False
        if not self.enabled or not self._started:
            return
        self.sync_clocks()
        self._stop.set()
        self._wake.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._thread is not None:
            self._thread.join()
        self._drain(final=True)
        if self._pusher is not None:
            self._pusher.close()
        if self.config.write_parquet:
            self._write_parquet()
        for fh in self._files.values():
            fh.close()
        self._files.clear()
        if self._error is not None:
            raise RuntimeError(f"probe flusher failed: {self._error}") from self._error
        if self.config.push_server is not None:
            self._push()

    def barrier(self) -> None:
        """Wait for every rank (on the probe's gloo group), when the job is distributed:
        after :meth:`close` every rank's files are complete once this returns."""
        if self._clock_group is not None or self._distributed():
            import torch.distributed as dist

            dist.barrier(group=self._clock_group)

    def merge_into(self, merge_to: str | os.PathLike[str] | None) -> str | None:
        """After :meth:`close`: wait for every rank, then rank 0 merges the rank files into
        ``merge_to`` (a trace folder). Returns the error text of a failed merge (logged, never
        raised: the training job is not stopped), None otherwise or when there is nothing to
        merge (``merge_to`` None, probe disabled, not rank 0)."""
        if merge_to is None or not self.enabled:
            return None
        self.barrier()  # every rank's file is complete before rank 0 merges
        if self.worker.rank != 0:
            return None
        from stragglers.errors import InputError
        from stragglers.probe.merge import merge_dir

        try:
            merge_dir(self.out_dir, None, merge_to)
        except (InputError, OSError, ValueError) as exc:
            log.warning("stragglers: merging the probe files failed: %s", exc)
            return str(exc)
        return None

    def _push(self) -> None:
        """Every rank's file is complete after the barrier; rank 0 merges and pushes."""
        self.barrier()
        if self.worker.rank == 0:
            from stragglers.probe.push import merge_and_push

            merge_and_push(self.out_dir, self.config)

    @staticmethod
    def _distributed() -> bool:
        try:
            import torch.distributed as dist
        except ImportError:
            return False
        return bool(dist.is_available() and dist.is_initialized())

    def __enter__(self) -> Probe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ steps and spans
    def begin_step(self, step: int) -> bool:
        """Mark the start of training step ``step``; returns whether it is recorded."""
        self._step = step
        self._active = self._started and not self._closed and self.config.profiled(step)
        return self._active

    def end_step(self) -> None:
        """Mark the end of the current step (call it on every rank, every step).

        At the end of a profiling window, if ``sync_gap_steps`` steps have passed since the
        last alignment, this re-aligns the clocks with rank 0: a collective exchange, so every
        rank must call ``end_step`` for the same steps.
        """
        step = self._step
        if step is None:
            return
        if self._active:
            self._pending.append(StepEnd(step, self._clock()))
        self._active = False
        if (
            self._started
            and not self._closed
            and self.config.window_end(step)
            and step - self._last_sync_step >= self.config.sync_gap_steps
        ):
            began = self._clock()
            self.sync_clocks()
            self._aligned += self._clock() - began  # a wait of the next live step record
            self._last_sync_step = step
        if self.config.window_end(step):
            self._wake.set()

    def span(
        self,
        optype: str | tuple[str, ...],
        *,
        mb_id: int = -1,
        mc: int = -1,
        step: int | None = None,
    ) -> contextlib.AbstractContextManager[Any]:
        """Time a block as an op of type ``optype`` in the current (or given) step.

        A tuple of types records one span per type with identical timing: this is how a
        combined call such as Megatron's ``send_forward_recv_backward`` is recorded (as a
        ``forward-send`` and a ``backward-recv``). ``mb_id`` and ``mc`` are the microbatch and
        the model chunk of a compute op (``mc`` also for parameter/gradient collectives).
        Outside a recorded step this returns a shared no-op context manager.
        """
        if not self._active and step is None:
            return _NULL
        if step is not None and not (
            self._started and not self._closed and self.config.profiled(step)
        ):
            return _NULL
        optypes: tuple[str, ...] | None = (_ONE_TYPE.get(optype) if isinstance(optype, str)
                                            else None)
        if optypes is None:
            optypes = _checked_optypes(optype)
        the_step = self._step if step is None else step
        assert the_step is not None
        if self._cuda:
            return CudaSpan(self, the_step, optypes, mb_id, mc)
        return CpuSpan(self, the_step, optypes, mb_id, mc)

    def mark(self, reuse: Mark | None = None) -> Mark:
        """The current time, for a span whose start and end are seen by different hooks
        (:meth:`add_span`). On CUDA an event is recorded on the current stream: ``reuse``
        re-records the event of an earlier mark instead of creating one (a mark that moves
        forward, such as "the last gradient computed so far")."""
        if self._cuda:
            if reuse is not None and reuse.event is not None:
                ev = reuse.event
            else:
                import torch

                ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return Mark(0.0, ev, len(self._anchors) - 1, self._gc_seconds)
        return Mark(self._clock(), None, -1, self._gc_seconds)

    def add_span(self, optype: str | tuple[str, ...], start: Mark, end: Mark, *,
                 mb_id: int = -1, mc: int = -1, step: int | None = None) -> None:
        """Record a span of the current (or given) step from two marks (:meth:`mark`).

        The same mark may start or end several spans (zero-length spans included). Outside
        a recorded step nothing is recorded, as with :meth:`span`."""
        if step is None:
            if not self._active:
                return
            step = self._step
        elif not (self._started and not self._closed and self.config.profiled(step)):
            return
        assert step is not None
        optypes = _checked_optypes(optype)
        span: CpuSpan | CudaSpan
        if start.event is not None and end.event is not None:
            cspan = MarkedCudaSpan(self, step, optypes, mb_id, mc)
            cspan.start_event, cspan.end_event, cspan.anchor = start.event, end.event, start.anchor
            span = cspan
        else:
            span = CpuSpan(self, step, optypes, mb_id, mc)
            span.start, span.end = start.time, end.time
        span.gc_start, span.gc_end = start.gc, end.gc
        self._pending.append(span)

    def step_record(self, step: int, begin: Mark, end: Mark,
                    waits: list[tuple[Mark, Mark]] | tuple[tuple[Mark, Mark], ...] = ()
                    ) -> None:
        """Queue the live step record of ``step`` (module docstring): ``begin`` and ``end``
        its start and end, ``waits`` the (start, end) marks of its synchronisation waits.
        Nothing happens unless :attr:`live`."""
        if not self.live:
            return
        self._pending.append(StepMarks(step, begin, end, tuple(waits), self._aligned))
        self._aligned = 0.0

    def discard_step(self) -> None:
        """Leave the current step out of the trace (no ``step_end`` record for it: the merge
        keeps only steps every worker finished). Call :meth:`end_step` as usual after it."""
        self._active = False

    def timed(self, optype: str | tuple[str, ...], *, mb_id: int = -1, mc: int = -1
              ) -> Callable[[F], F]:
        """Decorator form of :meth:`span` (ids fixed at decoration time)."""

        def decorate(fn: F) -> F:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.span(optype, mb_id=mb_id, mc=mc):
                    return fn(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorate

    # ------------------------------------------------------------------ clocks
    def sync_clocks(self) -> ClockSample:
        """Measure this rank's offset against rank 0 (collective) and record it."""
        with suppressed():
            if self._domains is None:
                self._domains = gather_domains(clock_domain(self._clock), self._clock_group)
            sample = measure_offset(self._clock, self._clock_group, self.config.clock_rounds,
                                    self._domains)
        self._samples.append(sample)
        self._pending.append(sample)
        if self._cuda:
            self._anchor()
        return sample

    @property
    def clock_samples(self) -> tuple[ClockSample, ...]:
        """Offsets measured so far."""
        return tuple(self._samples)

    def now(self) -> float:
        """This rank's clock."""
        return self._clock()

    # ------------------------------------------------------------------ comm call records
    def stamp(self, cuda: bool) -> Stamp:
        """A timer reading for a call record: the CPU clock, or (CUDA tensors on a CUDA probe)
        a CUDA event recorded on the current stream."""
        if cuda and self._cuda:
            ev = self._event()
            ev.record()
            return EventStamp(ev, len(self._anchors) - 1)
        return self._clock()

    def record_call(
        self,
        call_type: str,
        size: int,
        group: tuple[int, ...],
        start: Stamp,
        end: Stamp,
        peer: int | None = None,
    ) -> None:
        """Queue a communication call record (used by :mod:`stragglers.probe.hooks`).

        ``start``/``end`` are what :meth:`stamp` returned: clock readings or CUDA events.
        """
        if not self._started or self._closed or not self.enabled:
            return
        if "calls" not in self._files:
            path = rank_file(self.out_dir, self.worker.rank, "calls")
            with self._write_lock:
                self._files.setdefault("calls", open(path, "w"))  # noqa: SIM115
        step = self._step if self._step is not None else -1
        self._pending.append(PendingCall(call_type, size, group, peer, step, start, end))

    # ------------------------------------------------------------------ internals
    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        """``gc.callbacks`` hook: add the collections of the probe's thread to the total."""
        if threading.get_ident() != self._gc_thread:
            return
        if phase == "start":
            self._gc_began = self._clock()
        else:
            self._gc_seconds += self._clock() - self._gc_began

    def _want_cuda(self) -> bool:
        if self.config.device == "cpu":
            return False
        try:
            import torch
        except ImportError:
            if self.config.device == "cuda":
                raise
            return False
        available = torch.cuda.is_available()
        if self.config.device == "cuda" and not available:
            raise RuntimeError("ProbeConfig(device='cuda') but CUDA is not available")
        return available

    def _setup_clock_group(self) -> None:
        if self._clock_group is not None:
            return
        try:
            import torch.distributed as dist
        except ImportError:
            return
        if not (dist.is_available() and dist.is_initialized()):
            return
        if dist.get_backend() != "gloo":
            self._clock_group = dist.new_group(backend="gloo")

    def _event(self) -> Any:
        pool = self._event_pool
        if pool:
            return pool.pop()
        import torch

        return torch.cuda.Event(enable_timing=True)

    def _anchor(self) -> None:
        import torch

        torch.cuda.synchronize()
        ev = torch.cuda.Event(enable_timing=True)
        before = self._clock()
        ev.record()
        ev.synchronize()
        after = self._clock()
        self._anchors.append((ev, (before + after) / 2))

    def _event_time(self, ev: Any, anchor_idx: int) -> float:
        anchor_ev, anchor_cpu = self._anchors[anchor_idx]
        return anchor_cpu + anchor_ev.elapsed_time(ev) / 1e3

    def _run_flusher(self) -> None:
        interval = self.config.flush_interval_s
        try:
            while not self._stop.is_set():
                self._wake.wait(interval)
                self._wake.clear()
                self._drain(final=False)
        except BaseException as exc:  # surfaced by close()
            self._error = exc

    def _drain(self, final: bool) -> None:
        """Convert completed records and append them to the files (flusher thread or close).

        Records are taken in order; the first whose CUDA end event has not completed yet
        stops the drain (with ``final``, the drain waits for it instead)."""
        rank_lines: list[str] = []
        call_lines: list[str] = []
        step_lines: list[str] = []
        pending = self._pending
        while pending:
            item = pending[0]
            if isinstance(item, (CudaSpan, PendingCall, StepMarks)) and not self._completed(
                    item, final):
                break
            pending.popleft()
            if isinstance(item, StepMarks):
                step_lines.append(self._step_done(item))
            elif isinstance(item, Span):
                rank_lines.append(self._span_done(item))
            elif isinstance(item, PendingCall):
                call_lines.append(self._call_done(item))
            elif isinstance(item, StepEnd):
                rank_lines.append(json.dumps({"kind": "step_end", "step": item.step,
                                              "time": item.time}))
            else:
                rank_lines.append(json.dumps({"kind": "clock", "local": item.local,
                                              "offset": item.offset, "rtt": item.rtt}))
        if rank_lines:
            self._write("rank", rank_lines)
        if call_lines:
            self._write("calls", call_lines)
        if step_lines:
            if "steps" not in self._files:
                path = rank_file(self.out_dir, self.worker.rank, "steps")
                with self._write_lock:
                    self._files.setdefault("steps", open(path, "w"))  # noqa: SIM115
            self._write("steps", step_lines)
            self.steps_written += len(step_lines)
            if self._pusher is not None:
                self._pusher.put(step_lines)

    @staticmethod
    def _completed(item: CudaSpan | PendingCall | StepMarks, final: bool) -> bool:
        """Whether a record can be converted now: a CUDA one once its end event has
        completed (with ``final``, after waiting for it); a CPU one always."""
        if isinstance(item, StepMarks):
            end_event = item.end.event
            if end_event is None:
                return True
        elif isinstance(item, CudaSpan):
            end_event = item.end_event
        elif isinstance(item.end, EventStamp):
            end_event = item.end.event
        else:
            return True
        if final:
            end_event.synchronize()
            return True
        return bool(end_event.query())

    def _span_done(self, span: Span) -> str:
        """The line of a finished span (kept for the parquet file). A CUDA span's events are
        read into ``start``/``end``, then go back to the pool."""
        if isinstance(span, CudaSpan):
            span.start = self._event_time(span.start_event, span.anchor)
            span.end = self._event_time(span.end_event, span.anchor)
            if not isinstance(span, MarkedCudaSpan):
                self._event_pool.extend((span.start_event, span.end_event))
            span.start_event = span.end_event = None
        if self.config.write_parquet:
            self._spans_done.append(span)
        record = {
            "kind": "span", "step": span.step, "optypes": list(span.optypes),
            "start": span.start, "end": span.end, "mb_id": span.mb_id, "mc": span.mc,
        }
        if self.config.record_gc:
            record["gc_s"] = span_gc_seconds(span)
        return json.dumps(record)

    def _call_done(self, call: PendingCall) -> str:
        """The line of a finished call record. CUDA events are read against the anchor of
        the start event, then go back to the pool."""
        anchor = call.start.anchor if isinstance(call.start, EventStamp) else -1
        start, end = self._seconds(call.start, anchor), self._seconds(call.end, anchor)
        self._event_pool.extend(s.event for s in (call.start, call.end)
                                if isinstance(s, EventStamp))
        offset = self._samples[-1].offset if self._samples else 0.0
        return json.dumps(call.record(self.worker.rank, start, end, offset).to_dict())

    def _mark_time(self, mark: Mark) -> float:
        """A mark on the probe's clock (a CUDA event read against its anchor)."""
        return mark.time if mark.event is None else self._event_time(mark.event, mark.anchor)

    def _step_done(self, item: StepMarks) -> str:
        """The line of a live step record (module docstring)."""
        end = self._mark_time(item.end)
        spans = [(self._mark_time(a), self._mark_time(b)) for a, b in item.waits]
        wait = item.aligned + sum(b - a for a, b in spans)
        prev = self._live_prev
        if prev is not None and prev[0] == item.step - 1:
            start = prev[1]
        else:  # the first step, or one after a step that raised: from its start or first wait
            start = min([self._mark_time(item.begin), *(a for a, _ in spans)])
        self._live_prev = (item.step, end)
        offset = self._samples[-1].offset if self._samples else 0.0
        return json.dumps({"kind": "step", "v": STEP_RECORD_VERSION, "rank": self.worker.rank,
                           "step": item.step, "ts": round(end + offset, 6),
                           "busy": round(end - start - wait, 7), "wait": round(wait, 7)})

    def _seconds(self, stamp: Stamp, anchor: int) -> float:
        return self._event_time(stamp.event, anchor) if isinstance(stamp, EventStamp) else stamp

    def _write(self, name: str, lines: list[str]) -> None:
        with self._write_lock:
            fh = self._files.get(name)
            if fh is None:
                return
            fh.write("\n".join(lines) + "\n")
            fh.flush()

    def _write_parquet(self) -> None:
        import pandas as pd

        track = OffsetTrack(self._samples)
        rows = [(span, optype) for span in self._spans_done for optype in span.optypes]
        w = self.worker
        frame = pd.DataFrame(
            {
                "rank": [w.rank] * len(rows),
                "dp_rank": [w.dp_rank] * len(rows),
                "stage": [w.stage] * len(rows),
                "step": [span.step for span, _ in rows],
                "optype": [optype for _, optype in rows],
                "start_local": [span.start for span, _ in rows],
                "start": [track.align(span.start) for span, _ in rows],
                "duration": [span.end - span.start for span, _ in rows],
                "mb_id": [span.mb_id for span, _ in rows],
                "mc": [span.mc for span, _ in rows],
            }
        )
        if self.config.record_gc:
            frame["gc_s"] = [span_gc_seconds(span) for span, _ in rows]
        frame.to_parquet(self.out_dir / f"rank-{w.rank:05d}.parquet", index=False)


@contextlib.contextmanager
def probe_session(probe: Probe) -> Iterator[Probe]:
    """``with probe_session(probe):`` starts and closes ``probe``."""
    probe.start()
    try:
        yield probe
    finally:
        probe.close()
