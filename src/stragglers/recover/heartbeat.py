"""The heartbeat client a training job calls.

The driver (``stragglers run``) and the node guard (``stragglers guard``, beside ``torchrun``)
start each rank with ``STRAGGLERS_HEARTBEAT_DIR`` and the usual ``RANK``/``WORLD_SIZE``. The
job creates one :class:`Heartbeat` and tells it where it is::

    hb = Heartbeat.from_env()          # None when not run by the driver or a guard
    hb.step(step)                      # a step begins (progress)
    hb.enter("all_reduce", "dp", seq)  # entering a communication call
    hb.leave()                         # back to computing
    with hb.phase("checkpoint"):       # a phase outside the step's calls (a checkpoint write)
        ...
    hb.close("done")

**Cost.** ``enter``, ``leave`` and ``phase`` only store the new state in memory (a few
attribute assignments, no system call); ``step`` also wakes the background thread, which writes
the file (``hb-<rank>.json``, or ``hb-<node>.<local rank>.json`` under a guard, whose ranks
change at every rendezvous; atomically: a temporary file renamed) at each new step (at most
every ``MIN_GAP_S``) and every ``interval`` seconds in any case. A status
(``comm_error``, ``done``, ...) is written at once, since it usually comes right before the
process ends. The file holds ``{rank, slot, node, local_rank, world, pid, started, step, op,
group, seq, peer, since, phase, status, error, beat, ts}``: ``since`` is when the rank entered
its call (or its phase), ``beat`` counts the writes, ``ts`` is the time of the write. A rank
that is alive but blocked in a call keeps beating with the call it is in (the thread runs while
the job's thread waits); a frozen process stops beating.

**Exit.** When the process ends on an uncaught exception, the hook this module installs
writes the status first: ``comm_error`` when the exception left a communication call (the rank
was in one) or came out of ``torch.distributed`` (a peer went away), else ``error``, with the
exception's first line in ``error``; a normal exit without :meth:`Heartbeat.close` writes
``exited``. A process killed by a signal or ``os._exit`` writes nothing more: its heartbeat
stops.

The driver reads the files back with :func:`stragglers.hang.heartbeats.read_beats`, as
:class:`~stragglers.hang.heartbeats.Beat` records. When a
``dump-request`` file appears in the folder (its content an id), the thread also writes the
rank's PyTorch flight-recorder dump (gloo or NCCL) to ``fr/_dump_<rank>``, once per id. Gloo's
recorder leaves its ``pg_config`` empty; the heartbeat fills it from the process's own group
registry (name, description and global ranks of every group), as NCCL's recorder does, so that
the dumps say which ranks each group has and a rank without a dump is seen as silent.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["DUMP_REQUEST", "NODE_NAME", "Heartbeat"]

DUMP_REQUEST = "dump-request"
#: the least time between two writes of the background thread (fast steps)
MIN_GAP_S = 0.01
#: a node name usable in a file name (``stragglers guard --node``)
NODE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

_Call = tuple[str, str, int | None, int | None, float]  # op, group, seq, peer, since


class Heartbeat:
    def __init__(self, folder: str | os.PathLike[str], rank: int, slot: int,
                 interval: float = 0.5, *, node: str | None = None,
                 local_rank: int | None = None, world: int | None = None) -> None:
        name = f"hb-{rank}.json" if node is None else f"hb-{node}.{local_rank or 0}.json"
        self.path = Path(folder) / name
        self.rank, self.slot, self.interval = rank, slot, interval
        self.node, self.local_rank, self.world = node, local_rank, world
        self.pid, self.started = os.getpid(), time.time()
        # the state, each part one attribute: the job's thread rebinds, the writer reads
        self._step = -1
        self._call: _Call | None = None
        self._phase: tuple[str, float] | None = None
        self._status = "starting"
        self._error: str | None = None
        self._beat = 0
        self._lock = threading.Lock()  # one file writer at a time (thread, flush)
        self._stop = threading.Event()
        self._wake = threading.Event()  # a new step: write soon
        self._dumped: str | None = None
        self._write()
        self._thread = threading.Thread(target=self._run, name="stragglers-heartbeat",
                                        daemon=True)
        self._thread.start()
        self._hook_exit()

    @classmethod
    def from_env(cls) -> Heartbeat | None:
        folder = os.environ.get("STRAGGLERS_HEARTBEAT_DIR")
        if not folder:
            return None
        node = os.environ.get("STRAGGLERS_NODE") or None
        return cls(folder, int(os.environ.get("RANK", "0")),
                   int(os.environ.get("STRAGGLERS_SLOT", os.environ.get("RANK", "0"))),
                   float(os.environ.get("STRAGGLERS_HEARTBEAT_S", "0.5")), node=node,
                   local_rank=int(os.environ.get("LOCAL_RANK", "0")),
                   world=int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else None)

    # -- the job's calls: memory only -------------------------------------------------
    def step(self, step: int) -> None:
        self._call = None
        self._step = step
        if self._status == "starting":
            self._status = "running"
        self._wake.set()

    def enter(self, op: str, group: str, seq: int | None = None,
              peer: int | None = None) -> None:
        self._call = (op, group, seq, peer, time.time())

    def leave(self) -> None:
        self._call = None

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """The rank is in ``name`` (e.g. ``checkpoint``) until the block ends."""
        self._phase = (name, time.time())
        try:
            yield
        finally:
            self._phase = None

    # -- statuses: written at once -------------------------------------------------------
    def status(self, status: str, error: str | None = None) -> None:
        self._status = status
        if error is not None:
            self._error = error
        self.flush()

    def close(self, status: str = "done") -> None:
        self._stop.set()
        self._wake.set()
        self.status(status)

    def flush(self) -> None:
        """Write the state now (the thread writes it every ``interval`` anyway)."""
        self._write()

    # -- the writer ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The state as the file holds it (without ``beat`` and ``ts``)."""
        call, phase = self._call, self._phase
        op, group, seq, peer, since = call if call is not None else (None, None, None, None,
                                                                     None)
        if call is None and phase is not None:
            since = phase[1]
        return {"rank": self.rank, "slot": self.slot, "node": self.node,
                "local_rank": self.local_rank, "world": self.world, "pid": self.pid,
                "started": self.started, "step": self._step, "op": op, "group": group,
                "seq": seq, "peer": peer, "since": since,
                "phase": None if phase is None else phase[0], "status": self._status,
                "error": self._error}

    def _write(self) -> None:
        with self._lock:
            self._beat += 1
            state = self.snapshot()
            state["beat"], state["ts"] = self._beat, time.time()
            tmp = self.path.with_name(f".{self.path.name}.tmp{self.pid}")
            try:
                tmp.write_text(json.dumps(state))
                os.replace(tmp, self.path)
            except OSError:  # the folder went away (the run is being torn down): skip
                pass

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval)
            if self._stop.is_set():
                return
            self._wake.clear()
            self._write()
            self._maybe_dump()
            time.sleep(MIN_GAP_S)

    def _hook_exit(self) -> None:
        previous = sys.excepthook

        def hook(kind: type[BaseException], exc: BaseException,
                 tb: TracebackType | None) -> None:
            if not self._stop.is_set():
                status = "comm_error" if (self._call is not None
                                          or _from_torch_distributed(tb)) else "error"
                first = (str(exc).strip().splitlines() or [""])[0]
                self.status(status, f"{kind.__name__}: {first}"[:300])
            previous(kind, exc, tb)

        sys.excepthook = hook
        atexit.register(self._at_exit)

    def _at_exit(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._wake.set()
            if self._status in ("starting", "running"):
                self.status("exited")

    def _maybe_dump(self) -> None:
        """When the driver asks (a ``dump-request`` file beside the heartbeats, its content
        an id), write this rank's flight-recorder dump to ``fr/_dump_<rank>`` once per id:
        from this thread, since the job's thread may be blocked in a call. Needs
        ``TORCH_FR_BUFFER_SIZE`` (the driver sets it) and a job that already imported
        torch."""
        try:
            request = (self.path.parent / DUMP_REQUEST).read_text()
        except OSError:
            return
        if self._dumped == request:
            return
        self._dumped = request
        torch = sys.modules.get("torch")
        if torch is None:
            return
        c10d = getattr(torch._C, "_distributed_c10d", None)
        dump = getattr(c10d, "_dump_fr_trace", None) or getattr(c10d, "_dump_nccl_trace", None)
        if dump is None:
            return
        data = _with_pg_config(dump(includeCollectives=True, includeStackTraces=False,
                                    onlyActive=False))
        folder = self.path.parent / "fr"
        folder.mkdir(exist_ok=True)
        tmp = folder / f".dump_{self.rank}.tmp{self.pid}"
        tmp.write_bytes(data)
        os.replace(tmp, folder / f"_dump_{self.rank}")


def _from_torch_distributed(tb: TracebackType | None) -> bool:
    """Whether a traceback passes through ``torch.distributed`` (a collective or P2P call
    that failed: a peer went away)."""
    marker = f"{os.sep}torch{os.sep}distributed{os.sep}"
    return any(marker in frame.filename for frame in traceback.extract_tb(tb))


def _with_pg_config(data: bytes) -> bytes:
    """The dump with ``pg_config`` listing this process's groups when the recorder left their
    ranks out (gloo). The dump is this process's own (read back with the plain unpickler all
    the same: containers and scalars only)."""
    import io
    import pickle

    import torch.distributed.distributed_c10d as c10d

    from stragglers.hang.flight_recorder import PlainUnpickler

    registry = getattr(c10d, "_world", None)  # private: absent in another torch, leave as is
    if registry is None or data[:1] != b"\x80":  # not a pickle (JSON): leave as is
        return data
    try:
        obj = PlainUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError:  # anything beyond plain containers: leave as is
        return data
    config = obj.get("pg_config") if isinstance(obj, dict) else None
    if not isinstance(config, dict) or any(
            isinstance(g, dict) and g.get("ranks") not in (None, "[]", [])
            for g in config.values()):
        return data
    filled = {}
    for pg, name in registry.pg_names.items():
        to_group = registry.pg_group_ranks.get(pg, {})  # global rank -> group rank
        ranks = sorted(to_group, key=to_group.__getitem__)
        filled[name] = {"name": name, "desc": getattr(pg, "group_desc", "") or "",
                        "ranks": str(ranks)}
    if not filled:
        return data
    obj["pg_config"] = filled
    return pickle.dumps(obj)
