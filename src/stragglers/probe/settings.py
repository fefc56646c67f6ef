"""Configuration of a probe session: sampling, flushing, clocks, and the job layout."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stragglers.atomic import write_text


@dataclass(frozen=True)
class ProbeConfig:
    """How a :class:`~stragglers.probe.Probe` samples and writes.

    Sampling follows the paper's profiling tool: ``profile_steps`` consecutive steps are
    recorded out of every ``every`` steps, starting at ``first_step`` (steps before it, e.g. the
    warm-up, are never recorded). ``profile_steps == every`` records every step.

    Clocks are re-aligned (a short collective exchange with rank 0) at the end of a profiling
    window when at least ``sync_gap_steps`` steps have passed since the last alignment, and
    always at the start and the end of the session. ``flush_interval_s`` is how often the
    background thread writes buffered records. ``device`` picks the timer: ``"cuda"`` (CUDA
    events, read back asynchronously), ``"cpu"`` (monotonic clock) or ``"auto"`` (CUDA when
    available). ``record_gc`` records the time Python's garbage collector runs inside each
    span (``gc.callbacks``; written as ``gc_s``). ``enabled=False`` turns every probe call
    into a no-op.

    ``live`` (on by default): the loop probe (:func:`~stragglers.probe.attach` and the
    framework callbacks) writes one step record per rank and step, every step whether
    recorded or not: the rank's busy time and its synchronisation wait
    (``steps-rank-NNNNN.jsonl``, :mod:`stragglers.logs.records`), which ``stragglers watch``
    follows.

    ``push_server`` (a ``stragglers serve`` URL) makes the session push itself when it ends:
    every rank writes its file, rank 0 merges them into ``OUT_DIR/session/`` and uploads the
    trace (:mod:`stragglers.probe.push`) with the token from ``push_token_file`` (else
    ``$STRAGGLERS_TOKEN``) under the job name ``push_job`` (default: the job's trial name);
    with ``live`` every rank also posts its step records to the server as they are written
    (``push_live``). A failed push never stops the training job: it is logged and the files
    stay on disk.
    """

    enabled: bool = True
    profile_steps: int = 1
    every: int = 1
    first_step: int = 0
    sync_gap_steps: int = 50
    flush_interval_s: float = 0.5
    clock_rounds: int = 8
    write_parquet: bool = True
    device: str = "auto"
    record_gc: bool = True
    push_server: str | None = None
    push_token_file: str | None = None
    push_job: str | None = None
    live: bool = True
    push_live: bool = True

    def __post_init__(self) -> None:
        if self.profile_steps < 1 or self.every < 1 or self.profile_steps > self.every:
            raise ValueError(
                f"need 1 <= profile_steps <= every, got profile_steps={self.profile_steps}, "
                f"every={self.every}"
            )
        if self.first_step < 0 or self.sync_gap_steps < 1 or self.clock_rounds < 1:
            raise ValueError("first_step must be >= 0, sync_gap_steps and clock_rounds >= 1")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {self.device!r}")
        if self.push_server is not None and not self.push_server.startswith(
                ("http://", "https://")):
            raise ValueError(f"push_server must be an http:// or https:// URL, got "
                             f"{self.push_server!r}")

    def profiled(self, step: int) -> bool:
        """Whether step ``step`` is recorded."""
        return (
            self.enabled
            and step >= self.first_step
            and (step - self.first_step) % self.every < self.profile_steps
        )

    def window_end(self, step: int) -> bool:
        """Whether ``step`` is the last recorded step of a profiling window."""
        return (
            self.profiled(step)
            and (step - self.first_step) % self.every == self.profile_steps - 1
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (written into each rank file's header)."""
        return asdict(self)


@dataclass(frozen=True)
class WorkerInfo:
    """Where a process sits in the job: its global rank and its parallel coordinates."""

    rank: int
    world_size: int
    dp_rank: int
    stage: int
    tp_rank: int = 0
    cp_rank: int = 0

    def to_dict(self) -> dict[str, int]:
        """Plain-dict form."""
        return asdict(self)


@dataclass(frozen=True)
class JobLayout:
    """Parallel degrees and names of a job: the metadata the analyzer needs (§1)."""

    dp_size: int
    pp_size: int
    tp_size: int = 1
    dsp_size: int = 1
    vpp_size: int = 1
    trial_name: str = "probe"
    run_id: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        """Number of processes: the product of the four parallel degrees."""
        return self.dp_size * self.pp_size * self.tp_size * self.dsp_size

    def to_meta(self) -> dict[str, Any]:
        """The metadata mapping in the order and with the keys of the reference files."""
        return {
            "trial_name": self.trial_name,
            "run_id": self.run_id,
            "dp_size": self.dp_size,
            "dsp_size": self.dsp_size,
            "pp_size": self.pp_size,
            "tp_size": self.tp_size,
            "vpp_size": self.vpp_size,
            "world_size": self.world_size,
        }


def write_job_yaml(meta: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a job metadata mapping (:meth:`JobLayout.to_meta`) as YAML, keys in the given
    order, atomically: ``job.yaml`` of a probe directory, ``meta.yaml`` of a merged trace."""
    return write_text(path, yaml.safe_dump(dict(meta), sort_keys=False))
