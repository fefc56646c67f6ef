"""Probes for PyTorch training jobs: record the operation trace ``stragglers analyze`` reads.

* :class:`Probe` times named spans (the schema's op types) with step, microbatch and model-chunk
  ids, buffers them and writes per-rank JSON-lines files from a background thread (parquet at
  the end of the session); it samples steps (``profile_steps`` out of every ``every``) and
  aligns its clock with rank 0 at start, at flush points and at the end.
* :class:`CommHooks` records every ``torch.distributed`` P2P/collective call (group, size,
  timing) for the online detector.
* :class:`PlannedGC` disables automatic GC and collects at the same step on every rank.
* :func:`attach` records a user's own data-parallel training loop from hooks (a
  :class:`LoopProbe`: ``with probe.step():`` around each step; :mod:`stragglers.probe.loop`);
  :mod:`stragglers.probe.lightning` and :mod:`stragglers.probe.hf` do it for Lightning and
  the Hugging Face ``Trainer``.
* :func:`attach_pipeline` records a ``torch.distributed.pipelining`` job (a
  ``PipelineStage`` with ``Schedule1F1B`` or ``ScheduleGPipe``) per stage and microbatch
  (:mod:`stragglers.probe.pipelining`).
* :func:`merge_dir` turns a directory of rank files into ``trace.parquet`` + ``meta.yaml``.
* :mod:`stragglers.testbed.job` is a real GPT-style 1F1B pipeline + DP training job.

Only :mod:`~stragglers.probe.merge` and :mod:`~stragglers.probe.check` work without torch.
"""

from stragglers.probe.clock import ClockSample, OffsetTrack, measure_offset
from stragglers.probe.gcplan import PlannedGC
from stragglers.probe.hooks import CommHooks
from stragglers.probe.loop import LoopProbe, attach
from stragglers.probe.merge import MergeResult, merge_dir
from stragglers.probe.pipelining import PipelineProbe, attach_pipeline
from stragglers.probe.recorder import Probe, probe_session
from stragglers.probe.settings import JobLayout, ProbeConfig, WorkerInfo

__all__ = [
    "ClockSample",
    "CommHooks",
    "JobLayout",
    "LoopProbe",
    "MergeResult",
    "PipelineProbe",
    "OffsetTrack",
    "PlannedGC",
    "Probe",
    "ProbeConfig",
    "WorkerInfo",
    "attach",
    "attach_pipeline",
    "measure_offset",
    "merge_dir",
    "probe_session",
]
