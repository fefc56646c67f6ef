"""The collectives a training loop runs before a step's first forward, timed for the loop
probe (:class:`~stragglers.probe.loop.LoopProbe`).

Some training loops make every rank meet in a collective between loading a batch and the
forward: the Hugging Face ``Trainer`` all-gathers the number of tokens of the batches of each
step (``average_tokens_across_devices``, on by default) before ``on_step_begin``. A rank that
loads its batch slowly then keeps the others waiting inside that collective, and every rank
leaves it, and starts its forward, at the same time: without the collective in the trace
the slow rank's lateness is lost (every rank's first op starts late alike). Timed on each
rank, the collective starts when that rank arrived: the analyzer reads the late arrival as the
slow rank's launch delay, and the others' wait as synchronisation.

:class:`CollectiveWatch` replaces the collective functions of ``torch.distributed`` (and of
``torch.distributed.distributed_c10d``, whose internal calls look them up there) by wrappers
that, for a synchronous call over the whole job made by the training thread while ``wanted()``
says so, take a :meth:`~stragglers.probe.recorder.Probe.mark` before and after the call and
hand both to ``on_call``. Not seen: asynchronous calls (``async_op=True``: their wait comes
later), calls over a subgroup, calls nested in a seen one, the probe's own clock alignment
(:func:`stragglers.probe.calls.suppressed`), and C++ collectives that do not go through these
functions (DDP's gradient buckets, its buffer broadcast). Code that bound a function before
:meth:`CollectiveWatch.install` (``from torch.distributed import all_gather``) keeps the
original. Other wrappers of the same functions
(:class:`~stragglers.probe.hooks.CommHooks`) must be installed and uninstalled in nested
order: :meth:`CollectiveWatch.uninstall` puts back what it found.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from stragglers.probe.calls import recording_suppressed
from stragglers.probe.recorder import Mark, Probe

#: The collective functions watched (point-to-point calls are not DP collectives).
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_reduce_coalesced", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "gather", "gather_object",
    "scatter", "scatter_object_list", "barrier", "monitored_barrier",
)


class CollectiveWatch:
    """Install/uninstall the wrappers (module docstring): ``on_call(start, end)`` receives the
    two marks of each watched call for which ``wanted()`` is true."""

    def __init__(self, probe: Probe, on_call: Callable[[Mark, Mark], None],
                 wanted: Callable[[], bool]) -> None:
        self.probe = probe
        self.on_call = on_call
        self.wanted = wanted
        self._saved: dict[tuple[Any, str], Any] = {}
        self._thread = threading.get_ident()
        self._depth = 0

    @property
    def installed(self) -> bool:
        return bool(self._saved)

    def install(self) -> CollectiveWatch:
        """Wrap the functions (on the calling thread: the training thread)."""
        if self._saved:
            return self
        import torch.distributed as dist

        if not dist.is_available():
            return self
        import torch.distributed.distributed_c10d as c10d

        self._thread = threading.get_ident()
        for name in COLLECTIVES:
            orig = getattr(c10d, name, None)
            if orig is None:
                continue
            fn = self._wrap(orig)
            for module in (dist, c10d):
                if getattr(module, name, None) is orig:
                    self._saved[(module, name)] = orig
                    setattr(module, name, fn)
        return self

    def uninstall(self) -> None:
        """Put the original functions back."""
        for (module, name), fn in self._saved.items():
            setattr(module, name, fn)
        self._saved.clear()

    def _watched(self, sig: inspect.Signature, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> bool:
        if (self._depth or recording_suppressed() or threading.get_ident() != self._thread
                or not self.wanted()):
            return False
        try:
            arguments = sig.bind_partial(*args, **kwargs).arguments
        except TypeError:  # let torch report the bad call
            return False
        if arguments.get("async_op"):
            return False
        group = arguments.get("group")
        if group is None:
            return True
        import torch.distributed as dist

        return bool(dist.get_world_size(group) == dist.get_world_size())

    def _wrap(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        watch = self
        sig = inspect.signature(orig)

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not watch._watched(sig, args, kwargs):
                return orig(*args, **kwargs)
            probe = watch.probe
            start = probe.mark()
            watch._depth += 1
            try:
                result = orig(*args, **kwargs)
            finally:
                watch._depth -= 1
            watch.on_call(start, probe.mark())
            return result

        wrapper.__wrapped__ = orig
        return wrapper
