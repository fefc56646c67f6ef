"""Following a running example job through the probe files it writes (for ``mitigate run``).

Every rank of :mod:`stragglers.testbed.job` appends to ``OUT/probe/rank-NNNNN.jsonl``
while it trains (:mod:`stragglers.probe.recorder`: a ``header`` line with the rank's
``dp_rank``, ``stage`` and the job's ``meta``, then ``span`` and ``step_end`` lines, flushed
every half second). :class:`JobFollower` reads what was appended since the last
:meth:`~JobFollower.poll`, complete lines only, and keeps per rank and step the forward +
backward compute seconds and the number of forward computes (micro-batches run). A step is
*complete* when every rank has written its ``step_end``.

Ranks are indexed by *position* ``stage * dp + dp_rank`` (the role, as in Megatron's order),
not by process rank, so that a job started with ``--rank-map`` is seen by role.

Lines that cannot be read (not JSON, a header without its fields) are counted by reason
(:attr:`JobFollower.bad_lines`), never fatal: the files belong to a running job.
"""

from __future__ import annotations

import json
import os
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stragglers.errors import InputError
from stragglers.inputs import JSONLineError, parse_json_line
from stragglers.limits import check_limit
from stragglers.probe.ops import BACKWARD_COMPUTE, FORWARD_COMPUTE
from stragglers.trace.io import JobMeta

__all__ = ["JobFollower", "StepTable"]

_READ_BYTES = 1 << 22  # at most this much of one file per poll


@dataclass
class _RankFile:
    """One rank's file: where reading stopped, and arrays indexed by job step."""

    path: Path
    offset: int = 0
    line: int = 0
    tail: bytes = b""
    position: int | None = None
    pid: int | None = None  # the rank's process (its header), on ``host``
    host: str | None = None
    compute: np.ndarray = field(default_factory=lambda: np.zeros(1024))
    forwards: np.ndarray = field(default_factory=lambda: np.zeros(1024, dtype=np.int64))
    ended: np.ndarray = field(default_factory=lambda: np.zeros(1024, dtype=bool))

    def room(self, step: int) -> None:
        """Grow the arrays (doubling) so that ``step`` is a valid index."""
        n = self.compute.size
        if step < n:
            return
        size = max(2 * n, step + 1)
        self.compute = np.concatenate([self.compute, np.zeros(size - n)])
        self.forwards = np.concatenate([self.forwards, np.zeros(size - n, dtype=np.int64)])
        self.ended = np.concatenate([self.ended, np.zeros(size - n, dtype=bool)])


@dataclass(frozen=True)
class StepTable:
    """Complete steps and, per position and step, compute seconds and micro-batches run."""

    steps: np.ndarray  # (n_steps,) job step numbers, ascending
    compute_s: np.ndarray  # (positions, n_steps)
    microbatches: np.ndarray  # (positions, n_steps) forward computes

    def per_microbatch(self) -> np.ndarray:
        """Compute seconds per micro-batch, (positions, n_steps); NaN where none ran."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.microbatches > 0, self.compute_s / self.microbatches, np.nan)


class JobFollower:
    """Incremental reader of a running job's probe folder (see the module docstring)."""

    def __init__(self, job_dir: str | Path) -> None:
        self.job_dir = Path(job_dir)
        self.probe_dir = self.job_dir / "probe"
        self.files: dict[Path, _RankFile] = {}
        self.meta: JobMeta | None = None
        self.bad_lines: Counter[str] = Counter()
        self._listed = False  # every rank's file found: no more listing of the folder

    # -- reading ------------------------------------------------------------------------
    def poll(self) -> int:
        """Read what the ranks appended since the last call; returns the bytes read."""
        if not self._listed:
            if not self.probe_dir.is_dir():
                return 0
            for path in sorted(self.probe_dir.glob("rank-*.jsonl")):
                self.files.setdefault(path, _RankFile(path))
        got = 0
        for path, rf in self.files.items():
            try:
                with path.open("rb") as fh:
                    fh.seek(rf.offset)
                    chunk = fh.read(_READ_BYTES)
            except OSError as exc:
                raise InputError(f"{path}: cannot read the probe file "
                                 f"({exc.strerror or exc})") from None
            if not chunk:
                continue
            rf.offset += len(chunk)
            got += len(chunk)
            data = rf.tail + chunk
            lines = data.split(b"\n")
            rf.tail = lines.pop()  # an incomplete last line waits for the rest
            for raw in lines:
                rf.line += 1
                self._line(rf, raw)
        self._listed = self.ready()  # then the files to read are known
        return got

    def _line(self, rf: _RankFile, raw: bytes) -> None:
        try:
            rec = parse_json_line(raw)
        except JSONLineError:
            self.bad_lines["not_json"] += 1
            return
        if not isinstance(rec, dict):
            self.bad_lines["not_object" if rec is not None else "blank"] += 1
            return
        kind = rec.get("kind")
        if kind == "header":
            self._header(rf, rec)
        elif kind == "span":
            step, optypes = rec.get("step"), rec.get("optypes")
            start, end = rec.get("start"), rec.get("end")
            if not (isinstance(step, int) and step >= 0 and isinstance(optypes, list)
                    and isinstance(start, (int, float)) and isinstance(end, (int, float))):
                self.bad_lines["bad_span"] += 1
                return
            self._room(rf, step)
            if FORWARD_COMPUTE in optypes or BACKWARD_COMPUTE in optypes:
                rf.compute[step] += float(end) - float(start)
            if FORWARD_COMPUTE in optypes:
                rf.forwards[step] += 1
        elif kind == "step_end":
            step = rec.get("step")
            if not isinstance(step, int) or step < 0:
                self.bad_lines["bad_step_end"] += 1
                return
            self._room(rf, step)
            rf.ended[step] = True

    def _room(self, rf: _RankFile, step: int) -> None:
        """Arrays up to ``step``, checked against the ``live_steps`` limit first."""
        if step >= rf.compute.size:
            check_limit("live_steps", step, f"{rf.path}: line {rf.line}: field 'step'")
            rf.room(step)

    def _header(self, rf: _RankFile, rec: dict[str, object]) -> None:
        meta, dp_rank, stage = rec.get("meta"), rec.get("dp_rank"), rec.get("stage")
        if not isinstance(meta, dict) or not isinstance(dp_rank, int) or not isinstance(
                stage, int):
            self.bad_lines["bad_header"] += 1
            return
        job = JobMeta.from_dict(meta, source=f"{rf.path}: line {rf.line}: field 'meta'")
        if self.meta is None:
            self.meta = job
        rf.position = stage * job.dp_size + dp_rank
        pid, host = rec.get("pid"), rec.get("host")
        rf.pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None
        rf.host = host if isinstance(host, str) else None

    # -- state --------------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether every rank's header has been read."""
        if self.meta is None:
            return False
        seen = {rf.position for rf in self.files.values() if rf.position is not None}
        return len(seen) == self.meta.world_size

    def table(self, after: int = -1) -> StepTable:
        """The complete steps after job step ``after``, by position (see :class:`StepTable`)."""
        assert self.meta is not None and self.ready()
        ranks = sorted((rf for rf in self.files.values() if rf.position is not None),
                       key=lambda rf: rf.position if rf.position is not None else -1)
        n = min(rf.ended.size for rf in ranks)
        common = np.logical_and.reduce([rf.ended[:n] for rf in ranks])
        common[:max(after + 1, 0)] = False
        steps = np.flatnonzero(common).astype(np.int64)
        compute = np.stack([rf.compute[steps] for rf in ranks])
        forwards = np.stack([rf.forwards[steps] for rf in ranks])
        return StepTable(steps, compute, forwards)

    def job_cpus(self) -> set[int] | None:
        """The CPUs the job's ranks may run on (the union of their affinities, read from the
        pids in their headers); None when not known (a rank on another host or without a
        pid, a process gone, a platform without ``sched_getaffinity``)."""
        if not hasattr(os, "sched_getaffinity") or not self.ready():
            return None
        here = socket.gethostname()
        cpus: set[int] = set()
        for rf in self.files.values():
            if rf.position is None:
                continue
            if rf.pid is None or rf.host != here:
                return None
            try:
                cpus |= os.sched_getaffinity(rf.pid)
            except OSError:
                return None
        return cpus

    def finished(self) -> bool:
        """Whether the job wrote its final worker records (one per rank)."""
        if self.meta is None:
            return False
        records = list((self.job_dir / "workers").glob("worker-*.json"))
        return len(records) >= self.meta.world_size

    def job_report(self) -> dict[str, object] | None:
        """Rank 0's ``live`` report from its worker record (what the job applied)."""
        path = self.job_dir / "workers" / "worker-00000.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        live = record.get("live") if isinstance(record, dict) else None
        return live if isinstance(live, dict) else None
