"""The robust-training driver behind ``stragglers run`` (MegaScale §4.1, C4D).

It launches one process of the training command per rank, each on a *slot* (a machine or
GPU), and watches them. Two ways to fill the slots:

* **elastic** (``world`` not given): every slot in service runs a rank (rank ``i`` on the
  ``i``-th slot); excluding a slot restarts the job with one rank fewer (a job whose
  trajectory does not depend on its size, such as :mod:`stragglers.testbed.toyjob`);
* **fixed size with spares** (``world = W``, e.g. ``dp x pp`` of the example job): the first
  ``W`` slots run ranks ``0..W-1``, the others are spares; an excluded slot is replaced by
  the first spare, which takes over its rank (the other ranks keep their slots). When no
  spare is left the driver stops: running on fewer slots would need a smaller DP, i.e. the
  optimizer shards of the checkpoint re-split, which the example job does not support.

Each rank's process gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT`` (the per-rank launch of ``torchrun``: the example job then runs that one
rank), ``STRAGGLERS_SLOT``, ``STRAGGLERS_ATTEMPT`` (0 for the first attempt: jobs fire their
fault injections only then), ``STRAGGLERS_HEARTBEAT_DIR``, ``STRAGGLERS_HEARTBEAT_S``,
``STRAGGLERS_CKPT_DIR`` and ``STRAGGLERS_RUN_DIR``. The driver watches:

* every rank's heartbeat (:mod:`stragglers.recover.heartbeat`): its step, the call it is in,
  its status and when it last beat;
* **hang**: no rank has advanced its step for ``timeout_s`` (before every rank has begun its
  first step: ``startup_timeout_s``); once every rank has reported ``done``, the processes get
  ``startup_timeout_s`` to exit instead;
* **crash**: a process exited with a non-zero status.

On an incident it localises the culprit:

* crash: the rank that failed first (:func:`stragglers.recover.blame.crash_culprits`): the
  dead ranks whose last status is ``comm_error`` (a peer went away) are victims; of the
  others, the first to exit (exit times taken when each process ended, through a ``pidfd``
  per process, not when the driver noticed), a distinct exit status breaking a tie; when
  every dead rank is a victim, the live ranks whose heartbeats went stale;
* hang: the driver asks the live ranks for their PyTorch flight-recorder dumps (the
  heartbeat thread writes them; ``TORCH_FR_BUFFER_SIZE`` is set for the ranks) and localises
  with :mod:`stragglers.hang.fr_hang` (ranks without a dump are silent); when that names
  nobody (no dumps), from the heartbeats: ranks whose heartbeat stopped (older than
  ``min(timeout_s / 2, max(5 x heartbeat_s, 3 s))``) or that are alive but not in a
  communication call are *silent*, the others' calls (op, group, seq) are the last-op records of
  :func:`stragglers.hang.last_op.localize_hang` on the ``dp x pp x tp`` topology of the
  attempt, with the ``world`` group (every rank: a barrier, the gradient-norm all-reduce)
  waiting for every rank not in the same call; a rank's phase (``checkpoint``: writing its
  part of a checkpoint) is in the evidence. When neither names anybody, the ranks whose
  heartbeats went stale are the culprits (a stale heartbeat alone names its rank). Both
  diagnoses go into the evidence.

Then it kills every process of the attempt (with ``validate``, the validation passes of a ring
over the attempt's slots and the GEMM test, :mod:`stragglers.validate`, run next and their
flags go into the incident), takes the culprits' slots out of service and restarts the command
(on the remaining slots, or with spares in their place); the job resumes from its latest
checkpoint in ``ckpt_dir``: the example job's ``latest`` marker
(:mod:`stragglers.testbed.checkpoint`; the command must carry ``--ckpt-dir`` with the
same folder and ``--resume``), or else the toy job's files ``ckpt-<step>.pt``. If every rank
of an attempt exits with status 2 before its first step, the job refused its input:
the driver stops and says so instead of excluding slots. Each incident is a JSON object:
kind, detection time (since the start and since the last progress), localisation time,
culprit slots and ranks with the evidence, the step resumed at, the steps lost, and the time
until the restarted job made progress again (:mod:`stragglers.recover.incidents`).

Each attempt walks the state machine of :mod:`stragglers.recover.attempt` (LAUNCHING, RUNNING,
HUNG or CRASHED, EXCLUDING, RESTARTING; DONE or GAVE_UP); :data:`STEPS` maps every state to the
function that does its work and returns the next state (:func:`launch`, :func:`poll`,
:func:`diagnose_hang`, :func:`diagnose_crash`, :func:`exclude`, :func:`restart`), over a
:class:`Recovery` they share; :func:`run_driver` loops until a final state.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.hang.heartbeats import (
    Beat,
    FlightRecorderEvidence,
    HangEvidence,
    await_fr_dumps,
    heartbeat_evidence,
    read_beats,
)
from stragglers.recover.attempt import AttemptMachine, AttemptState
from stragglers.recover.blame import Exit, crash_culprits
from stragglers.recover.incidents import (
    CrashEvidence,
    DriverResult,
    Exclusion,
    Incident,
    ValidationFlags,
)
from stragglers.recover.marker import read_marker

__all__ = ["STEPS", "Attempt", "Detection", "DriverConfig", "Localisation", "Recovery",
           "diagnose_crash", "diagnose_hang", "exclude", "exclude_slots", "launch", "poll",
           "restart", "resume_step", "run_driver"]


@dataclass(frozen=True)
class DriverConfig:
    command: tuple[str, ...]
    slots: int
    ckpt_dir: str
    out_dir: str
    heartbeat_s: float = 0.5
    timeout_s: float = 30.0
    startup_timeout_s: float = 300.0
    max_restarts: int = 3
    pp: int = 1
    tp: int = 1
    poll_s: float = 0.1
    world: int | None = None  # ranks per attempt; None: every slot in service (elastic)
    validate: bool = False  # run ring validation passes + GEMM test over the slots after a hang
    fr_wait_s: float = 3.0  # how long to wait for the flight-recorder dumps of a hang
    settle_s: float = 0.5  # after a crash, how long to wait for the peers' failures to land

    def check(self) -> None:
        """Refuse (:class:`InputError`, naming the ``stragglers run`` option) a configuration
        the driver cannot run: no command, a command not found, a world that is not a
        multiple of pp x tp or larger than the slots, heartbeats not faster than the hang
        timeout, unusable output or checkpoint folders."""
        from stragglers.atomic import check_out_dir
        from stragglers.limits import check_limit

        if not self.command:
            raise InputError("give the training command after --")
        if shutil.which(self.command[0]) is None:
            raise InputError(f"command {self.command[0]!r}: not found or not executable")
        check_limit("validate_ranks", self.slots, "--slots")
        world = self.slots if self.world is None else self.world
        option = "--slots" if self.world is None else "--world"
        if world % (self.pp * self.tp):
            raise InputError(f"{option} {world} is not a multiple of --pp {self.pp} x --tp "
                             f"{self.tp}")
        if world > self.slots:
            raise InputError(f"--world {world} is more than --slots {self.slots}")
        if self.heartbeat_s >= self.timeout_s:
            raise InputError(f"--heartbeat-s {self.heartbeat_s:g} must be below --timeout-s "
                             f"{self.timeout_s:g}")
        check_out_dir(self.out_dir, "--out")
        check_out_dir(self.ckpt_dir, "--ckpt")


@dataclass(frozen=True)
class Detection:
    """What ended an attempt's RUNNING state: a crash or a hang, and when."""

    kind: str  # "crash" | "hang" | "startup_hang"
    t_detect: float  # time.monotonic()
    last_progress: float  # time.monotonic() of the last step any rank advanced
    failed: tuple[int, ...]  # the ranks that had exited non-zero
    beats: Mapping[int, Beat]  # the heartbeats read then


@dataclass(frozen=True)
class Localisation:
    """The culprits of an incident and the evidence that names them."""

    culprit_ranks: tuple[int, ...]
    evidence: HangEvidence | CrashEvidence
    t_local: float  # time.monotonic() when localised
    exit_codes: Mapping[int, int] | None = None  # crash: rank -> exit status of the dead


@dataclass
class Attempt:
    """One attempt's processes and what the driver saw of them (RUNNING updates it)."""

    index: int  # 0 for the first
    world: int
    hb_dir: Path
    last_progress: float = 0.0  # time.monotonic() of the last change of the ranks' steps
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    exits: _ExitClock | None = None  # when each process ended
    steps: tuple[int, ...] = ()  # every rank's step (-1: none yet)
    started: bool = False  # every rank has begun its first step
    max_step: int = -1
    detection: Detection | None = None
    localisation: Localisation | None = None

    def observe(self, beats: Mapping[int, Beat], now: float) -> None:
        """Take the ranks' steps from their heartbeats; a change of any is progress."""
        steps = tuple(beats[r].step if r in beats else -1 for r in range(self.world))
        self.max_step = max(self.max_step, *steps)
        if steps != self.steps:
            self.steps = steps
            self.last_progress = now
        if not self.started and all(s >= 0 for s in steps):
            self.started = True
            self.last_progress = now


class _ExitClock:
    """When each process of an attempt ended, measured as it ended: one ``pidfd`` per process
    (Linux >= 5.3), polled while the driver waits; elsewhere the time the driver noticed
    (``resolution_s`` says which)."""

    def __init__(self, procs: Sequence[subprocess.Popen[bytes]], poll_s: float) -> None:
        self.t: dict[int, float] = {}  # rank -> time.monotonic() of its end
        self._fds: dict[int, int] = {}  # pidfd -> rank
        self._poller = select.poll()
        for rank, p in enumerate(procs):
            try:
                fd = os.pidfd_open(p.pid)
            except (AttributeError, OSError):
                continue
            self._fds[fd] = rank
            self._poller.register(fd, select.POLLIN)
        self.exact = len(self._fds) == len(procs)
        self.resolution_s = 0.001 if self.exact else poll_s

    def wait(self, seconds: float) -> None:
        """Wait ``seconds`` (less when a process ends: the caller looks again at once) and
        record the end of every process that ended."""
        if not self._fds:
            time.sleep(seconds)
            return
        ready = self._poller.poll(max(0.0, seconds) * 1000)
        now = time.monotonic()
        for fd, _ in ready:
            rank = self._fds.pop(fd)
            self._poller.unregister(fd)
            os.close(fd)
            self.t.setdefault(rank, now)

    def noticed(self, rank: int, now: float) -> float:
        """The end of ``rank`` (the time it was noticed when not measured)."""
        return self.t.setdefault(rank, now)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


@dataclass(frozen=True)
class _Pending:
    """An incident waiting for the restarted job's progress (its ``resumed_after_s``)."""

    index: int  # in Recovery.incidents
    t_detect: float
    restart_step: int


@dataclass
class Recovery:
    """The driver's state across attempts, which the functions of the states share."""

    cfg: DriverConfig
    log: Callable[[Incident], None] | None
    t_start: float
    slots: list[int]  # in service: the attempt's ranks first, then spares
    index: int = 0  # the attempt to launch
    attempts: int = 0  # attempts launched
    attempt: Attempt | None = None  # the latest
    incidents: list[Incident] = field(default_factory=list)
    pending: _Pending | None = None
    ok: bool = False
    message: str = ""

    @property
    def out(self) -> Path:
        return Path(self.cfg.out_dir)

    @property
    def ckpt(self) -> Path:
        return Path(self.cfg.ckpt_dir)

    @property
    def stale_s(self) -> float:
        """A heartbeat this old means a stopped process: well above the interval (a loaded
        machine delays threads by seconds), well below the hang timeout (a frozen rank stopped
        at least that long before the hang is declared)."""
        return min(self.cfg.timeout_s / 2, max(5 * self.cfg.heartbeat_s, 3.0))

    @property
    def current(self) -> Attempt:
        assert self.attempt is not None, "no attempt launched"
        return self.attempt

    def emit(self, incident: Incident) -> None:
        self._write()
        if self.log is not None:
            self.log(incident)

    def resolve_pending(self, resumed_after_s: float | None) -> None:
        """Give the pending incident its ``resumed_after_s`` and emit it."""
        assert self.pending is not None
        i = self.pending.index
        self.incidents[i] = replace(self.incidents[i], resumed_after_s=resumed_after_s)
        self.pending = None
        self.emit(self.incidents[i])

    def end_attempt(self) -> None:
        """Kill every process of the latest attempt and close its logs."""
        if self.attempt is not None:
            _kill_all(self.attempt.procs)
            for f in self.attempt.logs:
                f.close()
            if self.attempt.exits is not None:
                self.attempt.exits.close()
            self.attempt.procs.clear()
            self.attempt.logs.clear()

    def finish(self) -> DriverResult:
        if self.pending is not None:  # progress never came back
            self.resolve_pending(None)
        self._write()
        return DriverResult(self.ok, self.attempts, list(self.incidents), list(self.slots),
                            time.monotonic() - self.t_start, self.message)

    def _write(self) -> None:
        write_text(self.out / "incidents.jsonl",
                   "".join(json.dumps(i.to_dict()) + "\n" for i in self.incidents))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resume_step(folder: Path) -> int:
    """The step a restarted job begins at: the example job's ``latest`` marker (the number of
    steps the checkpoint holds), else the toy job's newest ``ckpt-<step>.pt`` plus one, else 0.
    """
    marker = read_marker(folder)
    if marker is not None:
        return marker.step
    steps = []
    for p in folder.glob("ckpt-*.pt"):
        try:
            steps.append(int(p.stem.split("-", 1)[1]))
        except ValueError:
            continue
    return max(steps) + 1 if steps else 0


NO_SPARE = ("no spare slot left: the job needs {world} ranks and {have} healthy slots remain; "
            "running on fewer slots needs a smaller DP (the checkpoint's optimizer shards "
            "re-split), which is not supported")


def _kill_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def _flight_recorder_evidence(hb_dir: Path, beats: Mapping[int, Beat], world: int,
                              stale_s: float, wait_s: float) -> FlightRecorderEvidence:
    """Ask the live ranks for their flight-recorder dumps, wait for them (at most ``wait_s``)
    and localise the hang from them (:mod:`stragglers.hang.fr_hang`); ranks without a dump
    are silent."""
    (hb_dir / "dump-request").write_text("")
    now = time.time()
    live = [r for r in range(world)
            if r in beats and now - beats[r].ts <= stale_s]
    return await_fr_dumps(hb_dir / "fr", live, wait_s)


def _validate_slots(slots: list[int]) -> ValidationFlags:
    """Validation passes (a ring over the slots of the attempt, suspects included) and the GEMM
    test, as ``stragglers validate`` runs them; results mapped back to slots. Here the slots
    are local processes, so this measures this machine, not the slots' own hardware."""
    from stragglers.validate.compare import evaluate_run
    from stragglers.validate.executed import ValidationConfig, run_validation

    t0 = time.monotonic()
    n = len(slots)
    rep = evaluate_run(run_validation(ValidationConfig(
        "ring", tuple(range(n)), n, transfer_bytes=1 << 20, repeats=3, gemm_n=128)),
        factor=3.0)
    return ValidationFlags(
        slow_links=tuple((slots[a], slots[b]) for a, b in rep.slow_links),
        slow_gemm_slots=tuple(slots[r] for r in rep.slow_gemm_ranks),
        gemm_ratio={slots[g.rank]: round(g.ratio, 3) for g in rep.gemm},
        link_ratio={(slots[x.src], slots[x.dst]): round(x.ratio, 3) for x in rep.links},
        seconds=round(time.monotonic() - t0, 3))


def exclude_slots(slots: Sequence[int], bad: set[int], world: int, elastic: bool
                  ) -> Exclusion:
    """Take the ``bad`` slots out of service: elastic, the others run the next attempt; else
    the first spares (the slots after the first ``world``) take over the excluded slots'
    ranks, and when too few are left the next attempt stops for want of a spare."""
    if elastic:
        kept = tuple(s for s in slots if s not in bad)
        return Exclusion(kept, f"excluded slots {sorted(bad)}, restarting on {len(kept)}")
    active, spares = list(slots[:world]), [s for s in slots[world:] if s not in bad]
    bad_ranks = [i for i, s in enumerate(active) if s in bad]
    if len(spares) < len(bad_ranks):
        return Exclusion(tuple(s for s in slots if s not in bad),
                         f"excluded slots {sorted(bad)}: no spare left")
    taken = dict(zip(bad_ranks, spares, strict=False))
    return Exclusion(
        tuple(taken.get(i, s) for i, s in enumerate(active)) + tuple(spares[len(taken):]),
        "excluded slots " + ", ".join(f"{active[i]} (rank {i} -> spare slot {taken[i]})"
                                      for i in bad_ranks))


def _rank_env(rec: Recovery, a: Attempt, rank: int, slot: int, port: int) -> dict[str, str]:
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(a.world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), STRAGGLERS_SLOT=str(slot),
               STRAGGLERS_ATTEMPT=str(a.index), STRAGGLERS_HEARTBEAT_DIR=str(a.hb_dir),
               STRAGGLERS_HEARTBEAT_S=str(rec.cfg.heartbeat_s),
               STRAGGLERS_CKPT_DIR=str(rec.ckpt), STRAGGLERS_RUN_DIR=str(rec.out))
    env.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # the flight recorder, for hangs
    return env


def launch(rec: Recovery) -> AttemptState:
    """LAUNCHING: one process per rank on the first ``world`` slots in service, unless the
    slots cannot hold the job (no spare left, or not a multiple of pp x tp)."""
    cfg = rec.cfg
    world = len(rec.slots) if cfg.world is None else cfg.world
    if world > len(rec.slots):
        rec.message = NO_SPARE.format(world=world, have=len(rec.slots))
        return AttemptState.GAVE_UP
    if world % (cfg.pp * cfg.tp):
        rec.message = f"{world} slots left cannot hold pp {cfg.pp} x tp {cfg.tp}"
        return AttemptState.GAVE_UP
    rec.attempts = rec.index + 1
    a = rec.attempt = Attempt(rec.index, world, rec.out / f"heartbeats-{rec.index}")
    shutil.rmtree(a.hb_dir, ignore_errors=True)
    a.hb_dir.mkdir(parents=True)
    port = _free_port()
    for rank, slot in enumerate(rec.slots[:world]):
        f = open(rec.out / f"attempt-{a.index}-rank-{rank}.log", "wb")  # noqa: SIM115
        a.logs.append(f)
        a.procs.append(subprocess.Popen(list(cfg.command), env=_rank_env(rec, a, rank, slot, port),
                                        stdout=f, stderr=subprocess.STDOUT,
                                        start_new_session=True))
    a.exits = _ExitClock(a.procs, cfg.poll_s)
    a.last_progress = time.monotonic()
    return AttemptState.RUNNING


def poll(rec: Recovery) -> AttemptState:
    """RUNNING: one look at the heartbeats and exit codes; the attempt goes on, finished, or
    hung or crashed (the detection recorded), or every rank refused its input."""
    cfg, a = rec.cfg, rec.current
    assert a.exits is not None
    a.exits.wait(cfg.poll_s)
    now = time.monotonic()
    beats = read_beats(a.hb_dir)
    a.observe(beats, now)
    if rec.pending is not None and a.started and min(a.steps) > rec.pending.restart_step:
        rec.resolve_pending(round(now - rec.pending.t_detect, 3))
    codes = [p.poll() for p in a.procs]
    if all(c == 0 for c in codes):
        rec.ok = True
        return AttemptState.DONE
    failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
    if not failed and all(r in beats and beats[r].status == "done" for r in range(a.world)):
        # training is over: the processes are tearing down (which can take a while on a
        # loaded machine), not hung; give them the start-up allowance to exit
        if now - a.last_progress > cfg.startup_timeout_s:
            rec.ok = True
            rec.message = "the job finished but its processes did not exit"
            return AttemptState.DONE
        return AttemptState.RUNNING
    if failed and not a.started and all(codes[r] == 2 for r in failed):
        failed = _refused(rec)
        if not failed:
            return AttemptState.GAVE_UP
    if failed:
        a.detection = Detection("crash", now, a.last_progress, tuple(failed), beats)
        return AttemptState.CRASHED
    if now - a.last_progress > (cfg.timeout_s if a.started else cfg.startup_timeout_s):
        a.detection = Detection("hang" if a.started else "startup_hang", now, a.last_progress,
                                (), beats)
        return AttemptState.HUNG
    return AttemptState.RUNNING


def _refused(rec: Recovery) -> list[int]:
    """A rank refused its input before its first step: the others run the same command and
    will too (or wait in the rendezvous): give them time to. The ranks that failed, or none
    when every rank exited with status 2 (``rec.message`` says so)."""
    cfg, a = rec.cfg, rec.current
    exit_by = time.monotonic() + min(cfg.startup_timeout_s, 60.0)
    while any(p.poll() is None for p in a.procs) and time.monotonic() < exit_by:
        time.sleep(cfg.poll_s)
    codes = [p.poll() for p in a.procs]
    if all(c == 2 for c in codes):
        rec.message = ("every rank exited with status 2 (the job refused its input) before its "
                       f"first step: see {rec.out / f'attempt-{a.index}-rank-0.log'}")
        return []
    return [r for r, c in enumerate(codes) if c not in (None, 0)]


def diagnose_hang(rec: Recovery) -> AttemptState:
    """HUNG: localise from the flight-recorder dumps of the live ranks and, independently,
    from the heartbeats; the dumps decide when they name ranks that others wait for, or when
    the heartbeats name nobody."""
    cfg, a = rec.cfg, rec.current
    assert a.detection is not None
    beats = a.detection.beats
    heartbeats = heartbeat_evidence(beats, a.world, time.time(), rec.stale_s, cfg.pp, cfg.tp)
    fr = _flight_recorder_evidence(a.hb_dir, beats, a.world, rec.stale_s, cfg.fr_wait_s)
    evidence = HangEvidence.decide(heartbeats, fr)
    a.localisation = Localisation(evidence.culprit_ranks, evidence, time.monotonic())
    return AttemptState.EXCLUDING


def diagnose_crash(rec: Recovery) -> AttemptState:
    """CRASHED: let the peers' failures land (``settle_s``, exit times recorded meanwhile),
    then blame the rank that failed first (:func:`stragglers.recover.blame.crash_culprits`:
    victims that report ``comm_error`` aside, the first exit, a distinct exit status among
    tied ones; a stale heartbeat when every dead rank is a victim)."""
    cfg, a = rec.cfg, rec.current
    assert a.detection is not None and a.exits is not None
    settle = time.monotonic() + cfg.settle_s
    while time.monotonic() < settle and any(p.poll() is None for p in a.procs):
        a.exits.wait(min(cfg.poll_s, settle - time.monotonic()))
    now = time.monotonic()
    beats = read_beats(a.hb_dir)
    dead = {r: c for r, c in enumerate(p.poll() for p in a.procs) if c not in (None, 0)}
    exits = [Exit(r, c, a.exits.noticed(r, now), beats[r].status if r in beats else None)
             for r, c in dead.items()]
    wall = time.time()
    live = [r for r, p in enumerate(a.procs) if p.poll() is None]
    stale = [r for r in live if r not in beats or wall - beats[r].ts > rec.stale_s]
    blame = crash_culprits(exits, stale, tie_s=a.exits.resolution_s)
    first = min((e.t for e in exits), default=now)
    evidence = CrashEvidence(blame.victims, blame.reason,
                             {e.rank: round(e.t - first, 4) for e in exits},
                             {r: beats[r].status for r in dead if r in beats},
                             tuple(stale), a.exits.exact)
    a.localisation = Localisation(blame.culprits, evidence, time.monotonic(), exit_codes=dead)
    return AttemptState.EXCLUDING


def exclude(rec: Recovery) -> AttemptState:
    """EXCLUDING: kill the attempt, run the validation passes over its slots (``validate``),
    record the incident and take the culprits' slots out of service; give up when nobody was
    localised or no slot is left."""
    cfg, a = rec.cfg, rec.current
    det, loc = a.detection, a.localisation
    assert det is not None and loc is not None
    rec.end_attempt()
    if rec.pending is not None:  # progress never came back before this incident
        rec.resolve_pending(None)
    validation = (_validate_slots(rec.slots[:a.world]) if cfg.validate and len(rec.slots) >= 2
                  else None)
    restart = resume_step(rec.ckpt)
    culprit_slots = tuple(rec.slots[r] for r in loc.culprit_ranks)
    exclusion = (exclude_slots(rec.slots, set(culprit_slots), a.world, cfg.world is None)
                 if culprit_slots else None)
    incident = Incident(
        kind=det.kind, evidence=loc.evidence, attempt=a.index,
        detected_at_s=round(det.t_detect - rec.t_start, 3),
        since_last_progress_s=round(det.t_detect - det.last_progress, 3),
        localise_s=round(loc.t_local - det.t_detect, 4), culprit_ranks=loc.culprit_ranks,
        culprit_slots=culprit_slots, world=a.world, restart_step=restart,
        checkpoint_step=restart - 1 if restart > 0 else None, last_step_reached=a.max_step,
        steps_lost=max(0, a.max_step - restart),
        action=exclusion.action if exclusion else "stop: no culprit localised",
        exit_codes=loc.exit_codes, validation=validation)
    rec.incidents.append(incident)
    if exclusion is None:
        rec.emit(incident)
        rec.message = "hang without a localised culprit"
        return AttemptState.GAVE_UP
    rec.slots = list(exclusion.slots)
    rec.pending = _Pending(len(rec.incidents) - 1, det.t_detect, restart)
    if not rec.slots:
        rec.message = "no slot left"
        return AttemptState.GAVE_UP
    return AttemptState.RESTARTING


def restart(rec: Recovery) -> AttemptState:
    """RESTARTING: on to the next attempt, unless the restarts are used up."""
    if rec.index >= rec.cfg.max_restarts:
        rec.message = f"gave up after {rec.cfg.max_restarts} restarts"
        return AttemptState.GAVE_UP
    rec.index += 1
    return AttemptState.LAUNCHING


STEPS: dict[AttemptState, Callable[[Recovery], AttemptState]] = {
    AttemptState.LAUNCHING: launch,
    AttemptState.RUNNING: poll,
    AttemptState.HUNG: diagnose_hang,
    AttemptState.CRASHED: diagnose_crash,
    AttemptState.EXCLUDING: exclude,
    AttemptState.RESTARTING: restart,
}


def run_driver(cfg: DriverConfig, log: Callable[[Incident], None] | None = None
               ) -> DriverResult:
    """Run the command under watch until it finishes, restarting it after incidents; ``log``
    gets every incident once it is complete."""
    rec = Recovery(cfg, log, time.monotonic(), list(range(cfg.slots)))
    rec.out.mkdir(parents=True, exist_ok=True)
    rec.ckpt.mkdir(parents=True, exist_ok=True)
    machine = AttemptMachine()
    try:
        while not machine.final:
            machine.transition(STEPS[machine.state](rec))
    finally:
        rec.end_attempt()
    return rec.finish()
