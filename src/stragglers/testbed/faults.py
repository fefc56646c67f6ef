"""Heartbeats and hang/crash injection for the example job (``stragglers run``, issue 12).

:func:`watch` wraps the rank's :class:`~stragglers.probe.recorder.Probe`. Every operation of
the example job already runs inside a probe span, so the wrapper sees each step begin
(``begin_step``) and each communication call (the spans of the collectives and the P2P
exchanges) without further edits to the job:

* **heartbeats** (:class:`stragglers.recover.heartbeat.Heartbeat`, only when the job runs
  under ``stragglers run``, which sets ``STRAGGLERS_HEARTBEAT_DIR``; otherwise nothing is
  added): ``step`` at every step, ``enter``/``leave`` around every communication call with
  its op, group (``dp``: the stage's DP group; ``pp`` with the peer rank: a P2P exchange with
  the previous or next stage; ``emb``: the first and last stage's embedding group; ``world``:
  the gradient-norm all-reduce) and a per-group sequence number, ``comm_error`` when a call
  raises (a peer went away), ``done`` when the job closes its probes;
* **hang injection** (``--hang-rank R --hang-step K``) at rank ``R``'s first communication
  call of step ``K``: ``--hang-mode in-collective`` reports the call and freezes the process
  (``SIGSTOP``) as it enters: its peers are in the call and wait forever, its heartbeats and
  flight recorder stop, as with a hung GPU or host; ``before-collective`` keeps the process
  alive and beating but never lets it reach the call (a rank stuck in its own code);
* **crash injection** (``--crash-rank R --crash-step K``): rank ``R`` exits with status 3 as
  step ``K`` begins.

Injections fire only in the first attempt: when ``STRAGGLERS_ATTEMPT`` (set by the driver for
every attempt, 0 for the first) is unset or 0, so the job restarted by the driver runs clean.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from stragglers.probe.ops import (
    BACKWARD_RECV,
    BACKWARD_SEND,
    CLIP,
    EMBEDDING_ALL_REDUCE,
    FORWARD_RECV,
    FORWARD_SEND,
    GRADS_REDUCE_SCATTER,
    PARAMS_ALL_GATHER,
)
from stragglers.probe.recorder import Probe

__all__ = ["HANG_MODES", "WatchedProbe", "check_faults", "injections_armed", "watch"]

HANG_MODES = ("in-collective", "before-collective")
CRASH_EXIT_CODE = 3

#: span name -> (op, group, peer side) of the communication call inside it; the peer side is
#: "prev"/"next" for P2P. A combined P2P call is named by its receive (what the rank waits for).
_CALLS: dict[str, tuple[str, str, str | None]] = {
    PARAMS_ALL_GATHER: ("all_gather", "dp", None),
    GRADS_REDUCE_SCATTER: ("reduce_scatter", "dp", None),
    EMBEDDING_ALL_REDUCE: ("all_reduce", "emb", None),
    CLIP: ("all_reduce", "world", None),
    FORWARD_RECV: ("recv", "pp", "prev"),
    BACKWARD_RECV: ("recv", "pp", "next"),
    FORWARD_SEND: ("send", "pp", "next"),
    BACKWARD_SEND: ("send", "pp", "prev"),
}


def injections_armed() -> bool:
    """Whether injections fire in this process: the first attempt (``STRAGGLERS_ATTEMPT``
    unset or 0)."""
    return os.environ.get("STRAGGLERS_ATTEMPT", "0").strip() in ("", "0")


def check_faults(hang_rank: int, hang_step: int, hang_mode: str, crash_rank: int,
                 crash_step: int, world_size: int) -> None:
    """Raise ``ValueError`` on inconsistent injection options (-1: none)."""
    if hang_mode not in HANG_MODES:
        raise ValueError(f"hang_mode must be one of {', '.join(HANG_MODES)}, got {hang_mode!r}")
    for what, rank, step in (("hang", hang_rank, hang_step), ("crash", crash_rank, crash_step)):
        if not -1 <= rank < world_size:
            raise ValueError(f"{what}_rank must be a rank below the world size {world_size} "
                             f"or -1 (none), got {rank}")
        if step < -1:
            raise ValueError(f"{what}_step must be a step or -1 (none), got {step}")
        if (rank >= 0) != (step >= 0):
            raise ValueError(f"--{what}-rank and --{what}-step go together")


class WatchedProbe:
    """A probe whose step and communication spans also beat and inject faults."""

    def __init__(self, probe: Probe, rank: int, world_size: int,
                 peers: Callable[[], tuple[int, int]], hang: tuple[int, str] | None,
                 crash_step: int | None) -> None:
        from stragglers.recover.heartbeat import Heartbeat

        self._probe = probe
        self._peers = peers
        self._hb = Heartbeat.from_env()
        self._hang, self._crash_step = hang, crash_step
        self._world = world_size
        self._step = -1
        self._seq: dict[str, int] = {}
        self._hung_step: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._probe, name)

    def begin_step(self, step: int) -> bool:
        self._step = step
        if self._hb is not None:
            self._hb.step(step)
        if self._crash_step == step:
            os._exit(CRASH_EXIT_CODE)
        return self._probe.begin_step(step)

    def span(self, optype: str | tuple[str, ...], *, mb_id: int = -1, mc: int = -1,
             step: int | None = None) -> contextlib.AbstractContextManager[Any]:
        first = optype if isinstance(optype, str) else optype[-1]  # combined: its receive
        call = _CALLS.get(first)
        inner = self._probe.span(optype, mb_id=mb_id, mc=mc, step=step)
        if call is None or (call[1] == "world" and self._world == 1):
            return inner
        return self._call(inner, call)

    @contextlib.contextmanager
    def _call(self, inner: contextlib.AbstractContextManager[Any],
              call: tuple[str, str, str | None]) -> Iterator[Any]:
        op, group, side = call
        peer = None
        if side is not None:
            prev, nxt = self._peers()
            peer = prev if side == "prev" else nxt
        seq = self._seq.get(group, 0) + 1
        self._seq[group] = seq
        if self._hang is not None and self._hang[0] == self._step:
            self._hang_here(op, group, seq, peer)
        if self._hb is not None:
            self._hb.enter(op, group, seq=None if peer is not None else seq, peer=peer)
        try:
            with inner as value:
                yield value
        except RuntimeError:  # torch.distributed errors: a peer went away
            if self._hb is not None:
                self._hb.status("comm_error")
            raise
        if self._hb is not None:
            self._hb.leave()

    def _hang_here(self, op: str, group: str, seq: int, peer: int | None) -> None:
        assert self._hang is not None
        if self._hang[1] == "in-collective":
            if self._hb is not None:
                self._hb.enter(op, group, seq=None if peer is not None else seq, peer=peer)
            os.kill(os.getpid(), signal.SIGSTOP)  # frozen as it enters the call
        while True:  # before-collective: alive (the heartbeat thread beats), never gets there
            time.sleep(1.0)

    def close(self) -> None:
        self._probe.close()
        if self._hb is not None:
            self._hb.close("done")


def watch(probe: Probe, rank: int, world_size: int, peers: Callable[[], tuple[int, int]],
          hang_rank: int, hang_step: int, hang_mode: str, crash_rank: int,
          crash_step: int) -> Probe:
    """``probe`` with heartbeats and this rank's injections (see the module docstring);
    ``peers()`` gives the previous and next stage's ranks (-1 where there is none). Without the
    driver and without an injection for this rank, ``probe`` itself."""
    armed = injections_armed()
    hang = (hang_step, hang_mode) if armed and hang_rank == rank else None
    crash = crash_step if armed and crash_rank == rank else None
    if hang is None and crash is None and not os.environ.get("STRAGGLERS_HEARTBEAT_DIR"):
        return probe
    from typing import cast

    return cast(Probe, WatchedProbe(probe, rank, world_size, peers, hang, crash))
