"""Heartbeats and hang/crash injection for the example job (``stragglers run``, issue 12).

:func:`watch` wraps the rank's :class:`~stragglers.probe.recorder.Probe`. Every operation of
the example job already runs inside a probe span, so the wrapper sees each step begin
(``begin_step``) and each communication call (the spans of the collectives and the P2P
exchanges) without further edits to the job:

* **heartbeats** (:class:`stragglers.recover.heartbeat.Heartbeat`, only when the job runs
  under ``stragglers run`` or ``stragglers guard``, which set ``STRAGGLERS_HEARTBEAT_DIR``;
  otherwise nothing is added): ``step`` at every step, ``enter``/``leave`` around every
  communication call with its op, group (``dp``: the stage's DP group; ``pp`` with the peer
  rank: a P2P exchange with the previous or next stage; ``emb``: the first and last stage's
  embedding group; ``world``: the gradient-norm all-reduce and the checkpoint barrier) and a
  per-group sequence number, the ``checkpoint`` phase while the rank writes its part of a
  checkpoint and waits in the barrier after it (:func:`checkpoint_phase`,
  :func:`world_call`), ``comm_error`` when a call raises (a peer went away), ``done`` when
  the job closes its probes;
* **hang injection** (``--hang-rank R --hang-step K``) at rank ``R``'s first communication
  call of step ``K``: ``--hang-mode in-collective`` reports the call and freezes the process
  (``SIGSTOP``) as it enters: its peers are in the call and wait forever, its heartbeats and
  flight recorder stop, as with a hung GPU or host; ``before-collective`` keeps the process
  alive and beating but never lets it reach the call (a rank stuck in its own code);
  ``in-checkpoint`` freezes rank ``R`` as it begins writing its part of the checkpoint
  taken after step ``K`` (its peers wait in the barrier after the write), ``stuck-in-checkpoint``
  keeps it alive and beating but never lets the write end;
* **crash injection** (``--crash-rank R --crash-step K``): rank ``R`` exits with status 3 as
  step ``K`` begins.

Injections fire once per job: only in the first attempt (``STRAGGLERS_ATTEMPT``, set by the
driver for every attempt, unset or 0; ``TORCHELASTIC_RESTART_COUNT``, set by ``torchrun`` for
every restart of a node's workers, unset or 0) and, when the job runs under the driver or a
guard (``STRAGGLERS_RUN_DIR`` set), only if no process of the job fired it before
(:func:`claim`: a marker file ``RUN/injections/<name>``). ``torchrun`` restarts the workers of
a node whose peers changed without counting a restart, and a rank number moves between nodes
across rendezvous rounds: the marker keeps the restarted job clean.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
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

__all__ = ["CHECKPOINT_HANG_MODES", "HANG_MODES", "WatchedProbe", "check_faults",
           "checkpoint_phase", "claim", "injections_armed", "watch", "world_call"]

CHECKPOINT_HANG_MODES = ("in-checkpoint", "stuck-in-checkpoint")
HANG_MODES = ("in-collective", "before-collective", *CHECKPOINT_HANG_MODES)
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
    """Whether injections may fire in this process: the first attempt (``STRAGGLERS_ATTEMPT``
    and ``TORCHELASTIC_RESTART_COUNT`` unset or 0)."""
    return all(os.environ.get(name, "0").strip() in ("", "0")
               for name in ("STRAGGLERS_ATTEMPT", "TORCHELASTIC_RESTART_COUNT"))


def claim(name: str) -> bool:
    """Whether the injection ``name`` may fire now: True without a run folder
    (``STRAGGLERS_RUN_DIR``), else only for the first process of the job that claims it
    (an exclusive marker file ``RUN/injections/<name>``)."""
    run_dir = os.environ.get("STRAGGLERS_RUN_DIR")
    if not run_dir:
        return True
    folder = Path(run_dir) / "injections"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{os.getpid()} {time.time():.3f}\n")
    return True


def check_faults(hang_rank: int, hang_step: int, hang_mode: str, crash_rank: int,
                 crash_step: int, world_size: int, ckpt_every: int = 0) -> None:
    """Raise ``ValueError`` on inconsistent injection options (-1: none); a checkpoint hang
    needs a checkpoint after its step."""
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
    if hang_rank >= 0 and hang_mode in CHECKPOINT_HANG_MODES and (
            not ckpt_every or (hang_step + 1) % ckpt_every):
        raise ValueError(f"--hang-mode {hang_mode} at step {hang_step} needs a checkpoint after "
                         f"that step (--ckpt-every {ckpt_every}: after steps k * N - 1)")


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
        if self._crash_step == step and claim("crash"):
            if self._hb is not None:
                self._hb.flush()  # the step it died in, as a beat just before would say
            os._exit(CRASH_EXIT_CODE)
        return self._probe.begin_step(step)

    @contextlib.contextmanager
    def checkpoint(self, step: int) -> Iterator[None]:
        """The checkpoint taken after ``step``: the heartbeat's ``checkpoint`` phase, and the
        checkpoint hang injections."""
        phase = (self._hb.phase("checkpoint") if self._hb is not None
                 else contextlib.nullcontext())
        with phase:
            if (self._hang is not None and self._hang[0] == step
                    and self._hang[1] in CHECKPOINT_HANG_MODES and claim("hang")):
                if self._hang[1] == "in-checkpoint":
                    os.kill(os.getpid(), signal.SIGSTOP)  # frozen as it begins writing
                while True:  # stuck-in-checkpoint: alive (the heartbeat beats), never done
                    time.sleep(1.0)
            yield

    @contextlib.contextmanager
    def world_call(self, op: str) -> Iterator[None]:
        """A collective over every rank outside the probe's spans (the checkpoint barrier),
        reported like the spans' calls."""
        if self._world == 1:
            yield
            return
        with self._call(contextlib.nullcontext(), (op, "world", None)):
            yield

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
        if (self._hang is not None and self._hang[0] == self._step
                and self._hang[1] not in CHECKPOINT_HANG_MODES and claim("hang")):
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


def checkpoint_phase(probe: Probe, step: int) -> contextlib.AbstractContextManager[None]:
    """The ``checkpoint`` phase of the checkpoint after ``step`` (heartbeats, injections), or
    nothing for a probe without them."""
    if isinstance(probe, WatchedProbe):
        return probe.checkpoint(step)
    return contextlib.nullcontext()


def world_call(probe: Probe, op: str) -> contextlib.AbstractContextManager[None]:
    """A collective over every rank, reported to the heartbeats (or nothing)."""
    if isinstance(probe, WatchedProbe):
        return probe.world_call(op)
    return contextlib.nullcontext()


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
