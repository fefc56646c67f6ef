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
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from stragglers.probe.clock import (
    ClockSample,
    OffsetTrack,
    clock_domain,
    gather_domains,
    measure_offset,
)
from stragglers.probe.config import JobLayout, ProbeConfig, WorkerInfo
from stragglers.probe.ops import OPTYPES

F = TypeVar("F", bound=Callable[..., Any])

FORMAT_VERSION = 1
_NULL = contextlib.nullcontext()
_VALID = frozenset(OPTYPES)


def rank_file(out_dir: str | os.PathLike[str], rank: int, kind: str = "rank") -> Path:
    """Path of a rank's record file: ``rank-00003.jsonl`` or ``calls-rank-00003.jsonl``."""
    name = f"rank-{rank:05d}.jsonl" if kind == "rank" else f"{kind}-rank-{rank:05d}.jsonl"
    return Path(out_dir) / name


class _CpuSpan:
    __slots__ = ("_probe", "_item")

    def __init__(self, probe: Probe, step: int, optypes: tuple[str, ...], mb: int, mc: int):
        self._probe = probe
        self._item: list[Any] = ["s", step, optypes, mb, mc, 0.0, 0.0]

    def __enter__(self) -> _CpuSpan:
        self._item[5] = self._probe._clock()
        return self

    def __exit__(self, *exc: object) -> None:
        probe = self._probe
        self._item[6] = probe._clock()
        probe._pending.append(self._item)


class _CudaSpan:
    __slots__ = ("_probe", "_item")

    def __init__(self, probe: Probe, step: int, optypes: tuple[str, ...], mb: int, mc: int):
        self._probe = probe
        self._item: list[Any] = ["e", step, optypes, mb, mc, None, None, 0]

    def __enter__(self) -> _CudaSpan:
        probe = self._probe
        ev = probe._event()
        ev.record()
        self._item[5] = ev
        self._item[7] = len(probe._anchors) - 1
        return self

    def __exit__(self, *exc: object) -> None:
        probe = self._probe
        ev = probe._event()
        ev.record()
        self._item[6] = ev
        probe._pending.append(self._item)


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
        self._pending: collections.deque[list[Any]] = collections.deque()
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
        self._spans_done: list[tuple[int, str, float, float, int, int]] = []
        self._files: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._write_lock = threading.Lock()
        self._error: BaseException | None = None

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
        }
        if self.layout is not None:
            header["meta"] = self.layout.to_meta()
        self._write("rank", [json.dumps(header)])
        if self.layout is not None and self.worker.rank == 0:
            write_meta(self.out_dir / "job.yaml", self.layout.to_meta())
        self._setup_clock_group()
        self.sync_clocks()
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
        if self._thread is not None:
            self._thread.join()
        self._drain(final=True)
        if self.config.write_parquet:
            self._write_parquet()
        for fh in self._files.values():
            fh.close()
        self._files.clear()
        if self._error is not None:
            raise RuntimeError(f"probe flusher failed: {self._error}") from self._error
        if self.config.push_server is not None:
            self._push()

    def _push(self) -> None:
        """Every rank's file is complete after the barrier; rank 0 merges and pushes."""
        if self._clock_group is not None or self._distributed():
            import torch.distributed as dist

            dist.barrier(group=self._clock_group)
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
            self._pending.append(["x", step, self._clock()])
        self._active = False
        if (
            self._started
            and not self._closed
            and self.config.window_end(step)
            and step - self._last_sync_step >= self.config.sync_gap_steps
        ):
            self.sync_clocks()
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
        optypes = (optype,) if isinstance(optype, str) else tuple(optype)
        for name in optypes:
            if name not in _VALID:
                raise ValueError(f"unknown operation type {name!r}; expected one of {OPTYPES}")
        the_step = self._step if step is None else step
        assert the_step is not None
        if self._cuda:
            return _CudaSpan(self, the_step, optypes, mb_id, mc)
        return _CpuSpan(self, the_step, optypes, mb_id, mc)

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
        from stragglers.probe import hooks

        with hooks.suppressed():
            if self._domains is None:
                self._domains = gather_domains(clock_domain(self._clock), self._clock_group)
            sample = measure_offset(self._clock, self._clock_group, self.config.clock_rounds,
                                    self._domains)
        self._samples.append(sample)
        self._pending.append(["c", sample])
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
    def _timer_start(self, cuda: bool) -> Any:
        """A CPU clock reading, or (CUDA tensors on a CUDA probe) an ``(event, anchor)`` pair
        with the event recorded on the current stream."""
        if cuda and self._cuda:
            ev = self._event()
            ev.record()
            return (ev, len(self._anchors) - 1)
        return self._clock()

    def _timer_end(self, cuda: bool) -> Any:
        return self._timer_start(cuda)

    def record_call(
        self,
        call_type: str,
        size: int,
        group: tuple[int, ...],
        start: Any,
        end: Any,
        peer: int | None = None,
    ) -> None:
        """Queue a communication call record (used by :mod:`stragglers.probe.hooks`).

        ``start``/``end`` are what ``_timer_start``/``_timer_end`` returned: clock readings
        or CUDA events.
        """
        if not self._started or self._closed or not self.enabled:
            return
        if "calls" not in self._files:
            path = rank_file(self.out_dir, self.worker.rank, "calls")
            with self._write_lock:
                self._files.setdefault("calls", open(path, "w"))  # noqa: SIM115
        step = self._step if self._step is not None else -1
        self._pending.append(["k", call_type, size, group, peer, step, start, end])

    # ------------------------------------------------------------------ internals
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
        """Convert completed records and append them to the files (flusher thread or close)."""
        out: dict[str, list[str]] = {"rank": [], "calls": []}
        pending = self._pending
        keep_parquet = self.config.write_parquet
        worker = self.worker
        while pending:
            item = pending[0]
            kind = item[0]
            if kind == "e":
                end_ev = item[6]
                if not final and not end_ev.query():
                    break
                if final:
                    end_ev.synchronize()
                start = self._event_time(item[5], item[7])
                end = self._event_time(end_ev, item[7])
                self._event_pool.extend((item[5], end_ev))
                kind = "s"
                item = ["s", item[1], item[2], item[3], item[4], start, end]
            elif kind == "k" and isinstance(item[6], tuple):
                (start_ev, anchor), (end_ev, _) = item[6], item[7]
                if not final and not end_ev.query():
                    break
                if final:
                    end_ev.synchronize()
                start = self._event_time(start_ev, anchor)
                end = self._event_time(end_ev, anchor)
                self._event_pool.extend((start_ev, end_ev))
                item = [*item[:6], start, end]
            pending.popleft()
            if kind == "s":
                _, step, optypes, mb, mc, start, end = item
                out["rank"].append(json.dumps({
                    "kind": "span", "step": step, "optypes": list(optypes),
                    "start": start, "end": end, "mb_id": mb, "mc": mc,
                }))
                if keep_parquet:
                    for name in optypes:
                        self._spans_done.append((step, name, start, end, mb, mc))
            elif kind == "x":
                out["rank"].append(json.dumps({"kind": "step_end", "step": item[1],
                                               "time": item[2]}))
            elif kind == "c":
                sample: ClockSample = item[1]
                out["rank"].append(json.dumps({
                    "kind": "clock", "local": sample.local, "offset": sample.offset,
                    "rtt": sample.rtt,
                }))
            elif kind == "k":
                _, call_type, size, group, peer, step, start, end = item
                offset = self._samples[-1].offset if self._samples else 0.0
                rec = {
                    "rank": worker.rank, "type": call_type, "size": size,
                    "ts": start + offset, "duration": end - start, "group": list(group),
                    "step": step,
                }
                if peer is not None:
                    rec["peer"] = peer
                out["calls"].append(json.dumps(rec))
        for name, lines in out.items():
            if lines:
                self._write(name, lines)

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
        rows = self._spans_done
        w = self.worker
        frame = pd.DataFrame(
            {
                "rank": [w.rank] * len(rows),
                "dp_rank": [w.dp_rank] * len(rows),
                "stage": [w.stage] * len(rows),
                "step": [r[0] for r in rows],
                "optype": [r[1] for r in rows],
                "start_local": [r[2] for r in rows],
                "start": [track.align(r[2]) for r in rows],
                "duration": [r[3] - r[2] for r in rows],
                "mb_id": [r[4] for r in rows],
                "mc": [r[5] for r in rows],
            }
        )
        frame.to_parquet(self.out_dir / f"rank-{w.rank:05d}.parquet", index=False)


def write_meta(path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Write job metadata as YAML with the reference files' key order."""
    import yaml

    Path(path).write_text(yaml.safe_dump(meta, sort_keys=False))


@contextlib.contextmanager
def probe_session(probe: Probe) -> Iterator[Probe]:
    """``with probe_session(probe):`` starts and closes ``probe``."""
    probe.start()
    try:
        yield probe
    finally:
        probe.close()
