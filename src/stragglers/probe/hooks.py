"""Hooks that record the ``torch.distributed`` calls a job makes.

A job that cannot annotate its code with spans still yields communication call records for
the online detector: :class:`CommHooks` replaces the point-to-point and collective functions
of ``torch.distributed`` (and of ``torch.distributed.distributed_c10d``, so that internal
calls and ``P2POp`` checks see the same functions) by wrappers that time each call and queue a
record in the probe. Records are written by the probe's flusher to ``calls-rank-NNNNN.jsonl``,
one JSON object a line::

    {"rank": 3, "type": "all_reduce", "size": 4096, "ts": 1234.5678, "duration": 0.0012,
     "group": [1, 3], "step": 17}

``size`` is the message size in bytes as nccl-tests counts it (the whole gathered output for
all-gathers, the whole input for reduce-scatters, the tensor otherwise); ``ts`` is the start
time on rank 0's clock (the rank's clock plus its latest measured offset), seconds;
``duration`` is seconds; ``group`` the global ranks of the process group; ``peer`` (P2P only)
the global rank of the other side. For an asynchronous call (``async_op=True``, ``isend``,
``irecv``, ``batch_isend_irecv``) the duration runs until ``wait()`` (or a true
``is_completed()``) on the returned work; works never waited on are not recorded. On CUDA
tensors the timing uses CUDA events (the end event is recorded after the call, or after
``wait()``, on the current stream, so it marks the completion of the communication).

The returned proxy (:class:`TimedWork`) forwards every attribute to the real work but is not
an instance of ``torch.distributed.Work``. Only calls made through the module attributes are
seen: code that bound a function with
``from torch.distributed import all_reduce`` before :meth:`CommHooks.install` keeps the
original, and methods of ``ProcessGroup`` objects are not wrapped. Calls nested inside a
recorded call, and the probe's own clock alignment, are not recorded
(:func:`stragglers.probe.calls.suppressed`). The record and its line format live in
:mod:`stragglers.callrecord`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from stragglers.probe.calls import recording_suppressed, suppressed
from stragglers.probe.recorder import Probe

#: Wrapped functions, and the argument that carries the payload for ``size``.
PAYLOAD_ARG: dict[str, str | None] = {
    "send": "tensor",
    "recv": "tensor",
    "isend": "tensor",
    "irecv": "tensor",
    "broadcast": "tensor",
    "all_reduce": "tensor",
    "reduce": "tensor",
    "all_gather": "tensor_list",
    "all_gather_into_tensor": "output_tensor",
    "all_gather_single": "output_tensor",
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "reduce_scatter_single": "input",
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "gather": "tensor",
    "scatter": "tensor",
    "all_reduce_coalesced": "tensors",
    "barrier": None,
}
P2P_CALLS = frozenset({"send", "recv", "isend", "irecv"})
ASYNC_CALLS = frozenset({"isend", "irecv"})

def payload_bytes(value: Any) -> int:
    """Bytes of a tensor or of a (nested) list of tensors; 0 for anything else."""
    if isinstance(value, list | tuple):
        return sum(payload_bytes(v) for v in value)
    numel = getattr(value, "numel", None)
    size = getattr(value, "element_size", None)
    if callable(numel) and callable(size):
        return int(numel()) * int(size())
    return 0


def _first_tensor(value: Any) -> Any:
    if isinstance(value, list | tuple):
        for v in value:
            t = _first_tensor(v)
            if t is not None:
                return t
        return None
    return value if hasattr(value, "is_cuda") else None


class _Tracker:
    """Completion of the works of one asynchronous call (one or several P2P ops)."""

    def __init__(self, remaining: int, finish: Callable[[], None]) -> None:
        self.remaining = remaining
        self.finish = finish

    def done_one(self) -> None:
        self.remaining -= 1
        if self.remaining == 0:
            self.finish()


class TimedWork:
    """A ``Work`` proxy that records the call's end when it is waited on (or seen done)."""

    def __init__(self, work: Any, tracker: _Tracker) -> None:
        self._work = work
        self._tracker = tracker
        self._done = False

    def _mark(self) -> None:
        if not self._done:
            self._done = True
            self._tracker.done_one()

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        """Wait for the underlying work, then record the end of the call."""
        result = self._work.wait(*args, **kwargs)
        self._mark()
        return result

    def is_completed(self) -> bool:
        """Poll the underlying work; a true answer records the end of the call."""
        done = bool(self._work.is_completed())
        if done:
            self._mark()
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class CommHooks:
    """Install/uninstall the ``torch.distributed`` wrappers that feed ``probe``.

    ``profiled_only=True`` records only calls made during recorded steps; by default every call
    is recorded (the online detector wants a continuous log).
    """

    def __init__(self, probe: Probe, profiled_only: bool = False) -> None:
        self.probe = probe
        self.profiled_only = profiled_only
        self._saved: dict[tuple[Any, str], Any] = {}
        self._group_cache: dict[int, tuple[int, ...]] = {}
        self.installed = False

    def __enter__(self) -> CommHooks:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def install(self) -> None:
        """Replace the functions in ``torch.distributed`` and its ``distributed_c10d``."""
        if self.installed:
            return
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        wrapped: dict[str, Any] = {}
        for name in PAYLOAD_ARG:
            orig = getattr(c10d, name, None)
            if orig is None:
                continue
            wrapped[name] = self._wrap(name, orig)
        orig_batch = getattr(c10d, "batch_isend_irecv", None)
        if orig_batch is not None:
            wrapped["batch_isend_irecv"] = self._wrap_batch(orig_batch)
        for module in (dist, c10d):
            for name, fn in wrapped.items():
                if hasattr(module, name):
                    self._saved[(module, name)] = getattr(module, name)
                    setattr(module, name, fn)
        self.installed = True

    def uninstall(self) -> None:
        """Put the original functions back."""
        for (module, name), fn in self._saved.items():
            setattr(module, name, fn)
        self._saved.clear()
        self.installed = False

    # ------------------------------------------------------------------ helpers
    def _recording(self) -> bool:
        probe = self.probe
        if recording_suppressed() or not probe.enabled:
            return False
        return probe.profiling or not self.profiled_only

    def _group_ranks(self, group: Any) -> tuple[int, ...]:
        import torch.distributed as dist

        key = id(group)
        ranks = self._group_cache.get(key)
        if ranks is None:
            pg = group if group is not None else dist.group.WORLD
            ranks = tuple(dist.get_process_group_ranks(pg))
            self._group_cache[key] = ranks
        return ranks

    def _wrap(self, name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(orig)
        payload_arg = PAYLOAD_ARG[name]
        hooks = self

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not hooks._recording():
                return orig(*args, **kwargs)
            try:
                arguments = sig.bind_partial(*args, **kwargs).arguments
            except TypeError:  # let torch report the bad call
                return orig(*args, **kwargs)
            payload = arguments.get(payload_arg) if payload_arg else None
            tensor = _first_tensor(payload)
            cuda = bool(tensor is not None and tensor.is_cuda)
            group = arguments.get("group")
            peer = None
            if name in P2P_CALLS:
                peer = arguments.get("dst", arguments.get("src"))
                if peer is None:
                    gpeer = arguments.get("group_dst", arguments.get("group_src"))
                    if gpeer is not None:
                        peer = hooks._group_ranks(group)[gpeer]
            size = payload_bytes(payload)
            is_async = name in ASYNC_CALLS or bool(arguments.get("async_op", False))
            probe = hooks.probe
            start = probe.stamp(cuda)
            with suppressed():
                work = orig(*args, **kwargs)
            ranks = hooks._group_ranks(group)
            if is_async and work is not None:
                def finish() -> None:
                    probe.record_call(name, size, ranks, start, probe.stamp(cuda), peer)

                return TimedWork(work, _Tracker(1, finish))
            probe.record_call(name, size, ranks, start, probe.stamp(cuda), peer)
            return work

        wrapper.__wrapped__ = orig
        return wrapper

    def _wrap_batch(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        @functools.wraps(orig)
        def wrapper(p2p_op_list: list[Any]) -> Any:
            import torch.distributed.distributed_c10d as c10d

            # P2POps built before install hold the original isend/irecv; batch_isend_irecv
            # compares them with the module's (now wrapped) functions, so swap them in.
            for op in p2p_op_list:
                base = getattr(op.op, "__wrapped__", op.op)
                if base.__name__ in ASYNC_CALLS:
                    op.op = getattr(c10d, base.__name__)
            if not hooks._recording():
                return orig(p2p_op_list)
            probe = hooks.probe
            cuda = bool(p2p_op_list and p2p_op_list[0].tensor.is_cuda)
            start = probe.stamp(cuda)
            with suppressed():
                works = orig(p2p_op_list)
            records = []
            for op in p2p_op_list:
                base = getattr(op.op, "__wrapped__", op.op)
                records.append((base.__name__, payload_bytes(op.tensor),
                                hooks._group_ranks(op.group), op.peer))
            if not works:
                end = probe.stamp(cuda)
                for call_type, size, ranks, peer in records:
                    probe.record_call(call_type, size, ranks, start, end, peer)
                return works

            def finish() -> None:
                end = probe.stamp(cuda)
                for call_type, size, ranks, peer in records:
                    probe.record_call(call_type, size, ranks, start, end, peer)

            tracker = _Tracker(len(works), finish)
            return [TimedWork(w, tracker) for w in works]

        wrapper.__wrapped__ = orig
        return wrapper
