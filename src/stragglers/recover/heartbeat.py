"""The heartbeat client a training job calls.

The driver (``stragglers run``) starts each rank with ``STRAGGLERS_HEARTBEAT_DIR``,
``STRAGGLERS_SLOT`` and the usual ``RANK``/``WORLD_SIZE``. The job creates one
:class:`Heartbeat` and tells it where it is::

    hb = Heartbeat.from_env()          # None when not run by the driver
    hb.step(step)                      # a step begins (progress)
    hb.enter("all_reduce", "dp", seq)  # entering a communication call
    hb.leave()                         # back to computing
    hb.close("done")

A background thread writes ``hb-<rank>.json`` (atomically) every ``interval`` seconds and at
every change: ``{rank, slot, pid, step, op, group, seq, peer, status, beat, ts}`` where
``beat`` counts the writes. A rank that is alive but blocked in a call keeps beating with the
call it is in; a rank whose process is stuck stops beating. The driver reads them back with
:func:`read_beats`, as :class:`Beat` records. When the driver drops a
``dump-request`` file into the folder, the thread also writes the rank's PyTorch
flight-recorder dump (gloo or NCCL) to ``fr/_dump_<rank>``. Gloo's recorder leaves its
``pg_config`` empty; the heartbeat fills it from the process's own group registry (name,
description and global ranks of every group), as NCCL's recorder does, so that the dumps say
which ranks each group has and a rank without a dump is seen as silent.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Beat", "Heartbeat", "read_beats"]


class Heartbeat:
    def __init__(self, folder: str | os.PathLike[str], rank: int, slot: int,
                 interval: float = 0.5) -> None:
        self.path = Path(folder) / f"hb-{rank}.json"
        self.rank, self.slot, self.interval = rank, slot, interval
        self._state: dict[str, Any] = {"rank": rank, "slot": slot, "pid": os.getpid(),
                                       "step": -1, "op": None, "group": None, "seq": None,
                                       "peer": None, "status": "starting", "beat": 0}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._dumped = False
        self._write()
        self._thread = threading.Thread(target=self._run, name="stragglers-heartbeat",
                                        daemon=True)
        self._thread.start()

    @classmethod
    def from_env(cls) -> Heartbeat | None:
        folder = os.environ.get("STRAGGLERS_HEARTBEAT_DIR")
        if not folder:
            return None
        return cls(folder, int(os.environ.get("RANK", "0")),
                   int(os.environ.get("STRAGGLERS_SLOT", os.environ.get("RANK", "0"))),
                   float(os.environ.get("STRAGGLERS_HEARTBEAT_S", "0.5")))

    def _write(self) -> None:
        # one writer at a time (the beating thread and the job's thread share the temp file)
        with self._lock:
            self._state["beat"] += 1
            self._state["ts"] = time.time()
            tmp = self.path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self._state))
            os.replace(tmp, self.path)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._write()
            self._maybe_dump()

    def _maybe_dump(self) -> None:
        """When the driver asks (a ``dump-request`` file beside the heartbeats), write this
        rank's flight-recorder dump to ``fr/_dump_<rank>`` once: from this thread, since the
        job's thread may be blocked in a call. Needs ``TORCH_FR_BUFFER_SIZE`` (the driver sets
        it) and a job that already imported torch."""
        if self._dumped or not (self.path.parent / "dump-request").exists():
            return
        self._dumped = True
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
        tmp = folder / f".dump_{self.rank}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, folder / f"_dump_{self.rank}")

    def _update(self, **fields: Any) -> None:
        with self._lock:
            self._state.update(fields)
        self._write()

    def step(self, step: int) -> None:
        self._update(step=step, op=None, group=None, seq=None, peer=None, status="running")

    def enter(self, op: str, group: str, seq: int | None = None,
              peer: int | None = None) -> None:
        self._update(op=op, group=group, seq=seq, peer=peer)

    def leave(self) -> None:
        self._update(op=None, group=None, seq=None, peer=None)

    def status(self, status: str) -> None:
        self._update(status=status)

    def close(self, status: str = "done") -> None:
        self._stop.set()
        self._update(status=status)


def _with_pg_config(data: bytes) -> bytes:
    """The dump with ``pg_config`` listing this process's groups when the recorder left their
    ranks out (gloo). The dump is this process's own (read back with the plain unpickler all
    the same: containers and scalars only)."""
    import io
    import pickle

    import torch.distributed.distributed_c10d as c10d

    from stragglers.detect.flight_recorder import PlainUnpickler

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


@dataclass(frozen=True)
class Beat:
    """A rank's latest heartbeat as the driver reads it (the fields of ``hb-<rank>.json`` it
    uses)."""

    rank: int
    step: int  # -1 before the first step
    status: str | None  # starting | running | done | comm_error | ...
    op: str | None  # the call the rank is in; None: computing
    group: str | None  # the call's group (tp, dp, pp, or another the job names)
    seq: int | None
    peer: int | None
    ts: float  # time.time() of the write (0 when absent)

    @classmethod
    def from_dict(cls, obj: object) -> Beat | None:
        """The beat of a parsed file; None when it is not one (no integer rank, a step or
        time that is not a number)."""
        if not isinstance(obj, dict) or not isinstance(obj.get("rank"), int):
            return None
        try:
            step, ts = int(obj["step"]), float(obj.get("ts", 0.0))
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        status, op, group = obj.get("status"), obj.get("op"), obj.get("group")
        seq, peer = obj.get("seq"), obj.get("peer")
        return cls(obj["rank"], step, status if isinstance(status, str) else None,
                   str(op) if op else None, None if group is None else str(group),
                   seq if isinstance(seq, int) else None,
                   peer if isinstance(peer, int) else None, ts)


def read_beats(folder: str | os.PathLike[str]) -> dict[int, Beat]:
    """The latest heartbeat of every rank in ``folder`` (files that cannot be parsed, being
    replaced at that moment, are skipped until the next read)."""
    out: dict[int, Beat] = {}
    for p in Path(folder).glob("hb-*.json"):
        try:
            obj = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        beat = Beat.from_dict(obj)
        if beat is not None:
            out[beat.rank] = beat
    return out
