"""Planned garbage collection (paper §5.4).

Python's automatic collector stops a process at moments that differ between ranks, and one
rank's pause blocks the whole job. :class:`PlannedGC` turns the automatic collector off and
collects every ``interval`` steps, at the same step on every rank, inside a ``gc`` span. The
what-if model expects one ``gc`` op per worker and step (it may last 0 s), so the span is
recorded every step, also when nothing is collected.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from stragglers.probe.ops import GC
from stragglers.probe.recorder import Probe


class PlannedGC:
    """Disable automatic GC and collect at fixed steps, recording ``gc`` spans.

    ``interval=None`` (or 0) leaves the automatic collector as it is and never collects: only
    the (empty) ``gc`` span is recorded, as a job without planned GC would show it.
    ``generation`` is the generation passed to :func:`gc.collect` (2: full collection).
    """

    def __init__(self, probe: Probe | None = None, interval: int | None = 100,
                 generation: int = 2) -> None:
        if interval is not None and interval < 0:
            raise ValueError("interval must be >= 0 or None")
        self.probe = probe
        self.interval = interval or 0
        self.generation = generation
        self.collections = 0
        self.collected_objects = 0
        self.pause_s = 0.0
        self._was_enabled: bool | None = None

    def start(self) -> PlannedGC:
        """Turn automatic collection off (when an interval is set)."""
        if self.interval and self._was_enabled is None:
            self._was_enabled = gc.isenabled()
            gc.disable()
        return self

    def stop(self) -> None:
        """Restore automatic collection as it was before :meth:`start`."""
        if self._was_enabled:
            gc.enable()
        self._was_enabled = None

    def __enter__(self) -> PlannedGC:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def due(self, step: int) -> bool:
        """Whether a collection runs at the end of ``step``."""
        return bool(self.interval) and (step + 1) % self.interval == 0

    def step(self, step: int) -> int:
        """The end-of-step GC point: collect if due, inside a ``gc`` span; returns objects freed.

        Call it on every rank at the same place of every step.
        """
        span = self.probe.span(GC) if self.probe is not None else None
        if span is not None:
            span.__enter__()
        try:
            if not self.due(step):
                return 0
            t0 = time.perf_counter()
            freed = gc.collect(self.generation)
            self.pause_s += time.perf_counter() - t0
            self.collections += 1
            self.collected_objects += freed
            return freed
        finally:
            if span is not None:
                span.__exit__(None, None, None)
