"""The example job's ``--torch-profiler``: a PyTorch profiler trace per rank, beside the probes.

Every probe span is also a ``record_function`` range named by its operation type (compute
spans add ``mb=N``), so that ``stragglers import kineto OUT/profiler`` finds the same ops the
probes time. The profiler records the steps the probes record (from the first step after
warm-up to the end; ``ProfilerStep#N`` is training step N) and writes
``OUT/profiler/rank-NNNNN.json`` (atomically) when the job ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from stragglers.probe.recorder import Probe


class AnnotatedProbe:
    """A :class:`Probe` whose spans are also profiler ``record_function`` ranges."""

    def __init__(self, probe: Probe) -> None:
        self._probe = probe

    def __getattr__(self, name: str) -> Any:
        return getattr(self._probe, name)

    def span(self, optype: str | tuple[str, ...], *, mb_id: int = -1, mc: int = -1,
             step: int | None = None) -> contextlib.AbstractContextManager[Any]:
        from torch.profiler import record_function

        stack = contextlib.ExitStack()
        stack.enter_context(self._probe.span(optype, mb_id=mb_id, mc=mc, step=step))
        for name in (optype,) if isinstance(optype, str) else optype:
            label = f"{name} mb={mb_id}" if mb_id >= 0 else name
            stack.enter_context(record_function(label))
        return stack


class RankProfiler:
    """The torch profiler of one rank, recording steps ``first_step`` .. the end."""

    def __init__(self, out_dir: Path, rank: int, first_step: int, cuda: bool) -> None:
        self.path = out_dir / "profiler" / f"rank-{rank:05d}.json"
        self.first_step, self.cuda = first_step, cuda
        self.prof: Any = None

    def before_step(self, step: int) -> None:
        """Start profiling at the first recorded step (ProfilerStep#N == step N)."""
        if step != self.first_step or self.prof is not None:
            return
        from torch.profiler import ProfilerAction, ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self.prof = profile(activities=activities,
                            schedule=lambda _n: ProfilerAction.RECORD)
        self.prof.step_num = step
        self.prof.start()

    def after_step(self) -> None:
        if self.prof is not None:
            self.prof.step()

    def finish(self) -> None:
        """Stop and write the trace (the last ProfilerStep is the truncated end range)."""
        if self.prof is None:
            return
        self.prof.stop()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp",
                                   dir=self.path.parent)
        os.close(fd)
        try:
            self.prof.export_chrome_trace(tmp)
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
