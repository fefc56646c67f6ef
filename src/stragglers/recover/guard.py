"""The node guard behind ``stragglers guard``: hang and crash recovery for a job launched with
``torchrun`` (c10d rendezvous, ``--nnodes MIN:MAX``, ``--max-restarts``), one guard per node.

``torchrun`` restarts the workers when one fails and re-runs the rendezvous, but it sees no
hang, does not say who failed first, and brings every node back, the bad one included. Each
node runs its launcher under a guard instead of directly::

    stragglers guard --run-dir /shared/run --ckpt /shared/ck --node "$(hostname)" -- \\
        torchrun --nnodes 1:2 --nproc-per-node 2 --rdzv-backend c10d \\
            --rdzv-endpoint head:29400 --rdzv-id job1 --max-restarts 3 train.py ...

The run folder (``--run-dir``) is shared by the guards of one job (the same file system as
the checkpoints; a fresh folder per job). The guard:

* starts the launcher in a session of its own with ``STRAGGLERS_HEARTBEAT_DIR``
  (``RUN/heartbeats``), ``STRAGGLERS_NODE``, ``STRAGGLERS_HEARTBEAT_S``,
  ``STRAGGLERS_RUN_DIR``, ``STRAGGLERS_CKPT_DIR``, and, unless set, ``TORCH_FR_BUFFER_SIZE``
  (the flight recorder) and ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (without it a gloo job
  cannot restart: its workers reuse the agent's store, whose keys survive the restart);
  the workers beat through :class:`stragglers.recover.heartbeat.Heartbeat` (``hb-<node>.<local
  rank>.json``, the newest process of a rank being the rank's);
* watches every rank of the job (all nodes' heartbeats), the current rendezvous round being the
  processes started after the last incident;
* **crash**: it watches its own node's workers through a ``pidfd`` each (the moment each ends)
  and reads the exit status of a dead one from ``/proc`` before its agent reaps it. A worker
  that ended with neither ``done`` nor an exit status 0 makes the guard pause its launcher
  (``SIGSTOP``: the agent neither reaps it nor re-joins the rendezvous meanwhile) and publish
  the exit (``RUN/exits/``); after ``--settle-s`` it blames the rank that failed first among
  every node's exits (:func:`stragglers.recover.blame.crash_culprits`). When the culprit is
  its own, the node **leaves**: its workers are killed, its agent ends on ``SIGTERM`` (which
  leaves the rendezvous open), the guard exits with status 3; the other nodes' agents, whose
  workers failed with it, restart and meet in the next rendezvous round without it (or with a
  spare node that waited in the rendezvous). Otherwise the launcher resumes and ``torchrun``
  restarts the workers in place;
* **hang**: no rank of the round advanced its step for ``--timeout-s`` (before every rank
  began its first step: ``--startup-timeout-s``): the guard that sees it first localises it
  like ``stragglers run`` (the heartbeats' calls, phases and stale ranks; the flight-recorder
  dumps every live rank writes on request) and claims the decision (an exclusive file in
  ``RUN/decisions/``); the culprits' nodes leave as above, the other guards then kill their
  own workers of the hung round, and ``torchrun`` restarts them;
* records each incident in ``RUN/incidents/`` (:class:`~stragglers.recover.incidents.NodeIncident`:
  kind, culprits and their nodes, the evidence, what was done, the step the job resumes at
  from the checkpoint and the steps lost); a guard that stays fills in ``resumed_after_s``
  (until the next round completed a step past the restart step) and ``world_after``;
* ends with the launcher (its exit status), printing a summary line with the incidents.

``--exclude-on`` chooses which incidents take a node out (``hang,crash``, the default; with
``hang`` only, crashes are left to ``torchrun``'s restart in place and recorded; ``none``).
The rendezvous store lives in the agent at the ``--rdzv-endpoint`` host: that node cannot leave
without ending the job, unless the store is served apart (``stragglers guard --serve-store``).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from stragglers.recover.blame import Exit, crash_culprits
from stragglers.recover.heartbeat import DUMP_REQUEST, NODE_NAME
from stragglers.recover.incidents import CrashEvidence, ExclusionEvidence, NodeIncident

__all__ = ["EXCLUDE_ON", "EXIT_LEFT", "GuardConfig", "request_exclusion", "run_guard",
           "serve_store"]

EXIT_LEFT = 3  # the guard's exit status when its node left the job
EXCLUDE_ON = ("hang", "crash")
SIGTERM_EXIT = -int(signal.SIGTERM)
#: torch.distributed.elastic's log lines: a worker the agent stops itself (a restart, a
#: membership change), a worker that failed on its own
_CLOSING = re.compile(r"Sending process (\d+) closing signal")
_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)")


class _AgentLog:
    """The launcher's stderr, passed through to the guard's, read for the pids the agent
    stopped itself and the exit statuses it reported (``torch.distributed.elastic``'s log)."""

    def __init__(self, stream: Any) -> None:
        self.closing: set[int] = set()
        self.codes: dict[int, int] = {}
        self._stream = stream
        self._thread = threading.Thread(target=self._read, name="stragglers-agent-log",
                                        daemon=True)
        self._thread.start()

    def _read(self) -> None:
        out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
        for raw in iter(self._stream.readline, b""):
            if out is not None:
                out.write(raw)
                out.flush()
            line = raw.decode("utf-8", "replace")
            m = _CLOSING.search(line)
            if m:
                self.closing.add(int(m.group(1)))
            m = _FAILED.search(line)
            if m:
                self.codes[int(m.group(2))] = int(m.group(1))

    def join(self) -> None:
        self._thread.join(timeout=5)


@dataclass(frozen=True)
class GuardConfig:
    command: tuple[str, ...]
    run_dir: str
    ckpt_dir: str
    node: str = ""  # default: the host name
    heartbeat_s: float = 0.5
    timeout_s: float = 30.0
    startup_timeout_s: float = 300.0
    pp: int = 1
    tp: int = 1
    poll_s: float = 0.1
    settle_s: float = 0.5  # after a death: wait for the other exits before blaming
    fr_wait_s: float = 3.0
    leave_wait_s: float = 10.0  # after a hang decision: wait for the culprits' nodes to leave
    exclude_on: tuple[str, ...] = EXCLUDE_ON

    @property
    def node_name(self) -> str:
        return self.node or socket.gethostname().split(".")[0]

    def check(self) -> None:
        """Refuse (:class:`InputError`, naming the option) what the guard cannot run."""
        from stragglers.atomic import check_out_dir

        if not self.command:
            raise InputError("give the launcher command after --")
        if shutil.which(self.command[0]) is None:
            raise InputError(f"command {self.command[0]!r}: not found or not executable")
        if not NODE_NAME.match(self.node_name):
            raise InputError(f"--node {self.node_name!r}: use 1-128 letters, digits, '_', '.' "
                             "or '-' (it names files)")
        if self.heartbeat_s >= self.timeout_s:
            raise InputError(f"--heartbeat-s {self.heartbeat_s:g} must be below --timeout-s "
                             f"{self.timeout_s:g}")
        bad = sorted(set(self.exclude_on) - set(EXCLUDE_ON))
        if bad:
            raise InputError(f"--exclude-on {','.join(bad)}: use hang, crash, both or none")
        check_out_dir(self.run_dir, "--run-dir")
        check_out_dir(self.ckpt_dir, "--ckpt")

    @property
    def stale_s(self) -> float:
        """A heartbeat this old means a stopped process (as ``stragglers run``)."""
        return min(self.timeout_s / 2, max(5 * self.heartbeat_s, 3.0))


class _Paths:
    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.heartbeats = self.root / "heartbeats"
        self.exits = self.root / "exits"
        self.decisions = self.root / "decisions"
        self.incidents = self.root / "incidents"
        self.nodes = self.root / "nodes"

    def make(self) -> None:
        for p in (self.heartbeats, self.exits, self.decisions, self.incidents, self.nodes):
            p.mkdir(parents=True, exist_ok=True)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _create(path: Path, obj: Mapping[str, Any]) -> bool:
    """Create ``path`` holding ``obj`` unless it exists (exclusive: one writer wins)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(obj))
    return True


def exit_status(pid: int) -> int | None:
    """The exit status of a dead process not yet reaped (``/proc/PID/stat``, field 52: a
    zombie's wait status), as ``subprocess`` gives it (negative: the signal); None when it is
    gone or alive."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    if len(fields) < 50 or fields[0] != "Z":
        return None
    status = int(fields[49])
    return -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF


@dataclass
class _Worker:
    """One of this node's worker processes, as its heartbeat named it."""

    pid: int
    rank: int
    local_rank: int
    started: float
    world: int | None
    path: Path  # its heartbeat file


@dataclass(frozen=True)
class _Ended:
    worker: _Worker
    t: float  # time.time() it ended
    code: int | None  # exit status (None: not read in time)
    beat: Beat | None  # its last heartbeat


class _LocalWorkers:
    """This node's workers, each watched through a ``pidfd`` (the moment it ends)."""

    def __init__(self, node: str, heartbeats: Path) -> None:
        self.node, self.heartbeats = node, heartbeats
        self.live: dict[int, _Worker] = {}  # pid -> worker
        self._seen: set[int] = set()
        self._fd_pid: dict[int, int] = {}
        self._poller = select.poll()

    def track(self, beats: Iterable[Beat], floor: float) -> None:
        for b in beats:
            if b.node != self.node or b.pid is None or b.pid in self._seen or b.started < floor:
                continue
            self._seen.add(b.pid)
            try:
                fd = os.pidfd_open(b.pid)
            except (ProcessLookupError, AttributeError, OSError):
                continue  # already gone (torchrun saw it first)
            self._fd_pid[fd] = b.pid
            self._poller.register(fd, select.POLLIN)
            self.live[b.pid] = _Worker(b.pid, b.rank, b.local_rank or 0, b.started, b.world,
                                       self.heartbeats / f"hb-{self.node}.{b.local_rank or 0}.json")

    def wait(self, seconds: float, before_reap: Callable[[], None]) -> list[_Ended]:
        """Wait up to ``seconds``; the workers that ended meanwhile. ``before_reap`` runs
        first when one did (the guard pauses the agent there, so that the exit status can
        still be read)."""
        if not self._fd_pid:
            time.sleep(seconds)
            return []
        ready = self._poller.poll(max(0.0, seconds) * 1000)
        if not ready:
            return []
        t = time.time()
        before_reap()
        out = []
        for fd, _ in ready:
            pid = self._fd_pid.pop(fd)
            self._poller.unregister(fd)
            os.close(fd)
            w = self.live.pop(pid)
            code = exit_status(pid)
            beat = None
            obj = _read_json(w.path)
            if obj is not None and obj.get("pid") == pid:
                beat = Beat.from_dict(obj)
            out.append(_Ended(w, t, code, beat))
        return out

    def kill(self) -> None:
        """SIGKILL every live worker (each leads its own process group under torchrun)."""
        for pid in list(self.live):
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                    break
                except (ProcessLookupError, PermissionError):
                    continue

    def close(self) -> None:
        for fd in self._fd_pid:
            os.close(fd)
        self._fd_pid.clear()


@dataclass
class _Crash:
    """A death of this node's worker, waiting ``settle_s`` for the other nodes' exits."""

    deadline: float  # time.monotonic()
    first: float  # time.time() of the first death
    ended: list[_Ended] = field(default_factory=list)


class Guard:
    def __init__(self, cfg: GuardConfig, log: Callable[[str], None] | None = None) -> None:
        self.cfg, self.node, self.log = cfg, cfg.node_name, log
        self.paths = _Paths(cfg.run_dir)
        self.workers = _LocalWorkers(self.node, self.paths.heartbeats)
        self.launcher: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.floor = 0.0  # beats and exits of processes started before this are old
        self.signature: tuple[tuple[int, float, int], ...] = ()
        self.last_progress = time.monotonic()
        self.crash: _Crash | None = None
        self.agent_log: _AgentLog | None = None
        self.acted: set[str] = set()  # decisions acted on
        self.left = False

    # -- the launcher ---------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        cfg = self.cfg
        env = dict(os.environ, STRAGGLERS_HEARTBEAT_DIR=str(self.paths.heartbeats.resolve()),
                   STRAGGLERS_NODE=self.node, STRAGGLERS_HEARTBEAT_S=str(cfg.heartbeat_s),
                   STRAGGLERS_RUN_DIR=str(self.paths.root.resolve()),
                   STRAGGLERS_CKPT_DIR=str(Path(cfg.ckpt_dir).resolve()))
        env.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
        return env

    def _signal_launcher(self, sig: int) -> None:
        if self.launcher is None or self.launcher.poll() is not None:
            return
        try:
            os.killpg(self.launcher.pid, sig)
        except ProcessLookupError:
            pass

    def _pause(self) -> None:
        if "crash" in self.cfg.exclude_on and not self.paused:
            self._signal_launcher(signal.SIGSTOP)
            self.paused = True

    def _resume(self) -> None:
        if self.paused:
            self._signal_launcher(signal.SIGCONT)
            self.paused = False

    def _leave(self) -> None:
        """Take this node out: its workers killed, its agent ended by SIGTERM (the rendezvous
        stays open for the others), the node marked ``left``."""
        self._signal_launcher(signal.SIGSTOP)
        self.paused = True
        self.workers.kill()
        self._signal_launcher(signal.SIGTERM)
        self._resume()
        assert self.launcher is not None
        try:
            self.launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._signal_launcher(signal.SIGKILL)
            self.launcher.wait()
        write_text(self.paths.nodes / f"{self.node}.json",
                   json.dumps({"node": self.node, "state": "left", "t": time.time()}))
        self.left = True

    # -- the view of the job --------------------------------------------------------------
    def _current(self) -> tuple[dict[int, Beat], int]:
        """The heartbeats of the current round (processes started after the last incident)
        and its world size."""
        beats = {r: b for r, b in read_beats(self.paths.heartbeats).items()
                 if b.started >= self.floor}
        if not beats:
            return {}, 0
        newest = max(beats.values(), key=lambda b: b.started)
        world = newest.world or len(beats)
        return {r: b for r, b in beats.items() if r < world}, world

    def _incidents(self) -> list[tuple[Path, dict[str, Any]]]:
        out = []
        for p in sorted(self.paths.incidents.glob("*.json")):
            obj = _read_json(p)
            if obj is not None:
                out.append((p, obj))
        return out

    def _update_floor(self) -> None:
        for _, obj in self._incidents():
            t = obj.get("detected_at")
            if isinstance(t, int | float) and t > self.floor:
                self.floor = float(t)
                self.signature = ()
                self.last_progress = time.monotonic()

    def _observe(self, beats: Mapping[int, Beat], now: float) -> None:
        sig = tuple(sorted((r, b.started, b.step) for r, b in beats.items()))
        if sig != self.signature:
            self.signature = sig
            self.last_progress = now

    def _resolve_resumed(self, beats: Mapping[int, Beat], world: int) -> None:
        """Fill in ``resumed_after_s`` of the incidents the current round got past."""
        if not beats or len(beats) < world:
            return
        low = min(b.step for b in beats.values())
        for path, obj in self._incidents():
            if obj.get("resumed_after_s") is not None:
                continue
            t, restart = obj.get("detected_at"), obj.get("restart_step")
            if not isinstance(t, int | float) or not isinstance(restart, int):
                continue
            if all(b.started > t for b in beats.values()) and low > restart:
                obj["resumed_after_s"] = round(time.time() - t, 3)
                obj["world_after"] = world
                write_text(path, json.dumps(obj))

    # -- incidents ------------------------------------------------------------------------
    def _record(self, incident: NodeIncident) -> None:
        name = f"{incident.detected_at:.3f}-{self.node}.json"
        write_text(self.paths.incidents / name, json.dumps(incident.to_dict()))
        if self.log is not None:
            self.log(json.dumps(incident.to_dict()))

    def _cost(self, last_step: int) -> tuple[int, int | None, int]:
        from stragglers.recover.driver import resume_step

        restart = resume_step(Path(self.cfg.ckpt_dir))
        return restart, restart - 1 if restart > 0 else None, max(0, last_step - restart)

    def _classify(self, e: _Ended) -> tuple[int | None, bool, bool]:
        """Its exit status, whether its agent stopped it (a restart, a membership change:
        SIGTERM) and whether it failed on its own."""
        log = self.agent_log
        code = e.code if e.code is not None else (None if log is None
                                                  else log.codes.get(e.worker.pid))
        closed = code == SIGTERM_EXIT or (log is not None and e.worker.pid in log.closing)
        done = code == 0 or (code is None and e.beat is not None and e.beat.status == "done")
        return code, closed, not (closed or done)

    def _publish(self, e: _Ended) -> bool:
        """Write its exit to ``RUN/exits/`` for every guard; whether it failed on its own."""
        code, closed, failed = self._classify(e)
        record = {"rank": e.worker.rank, "node": self.node, "pid": e.worker.pid,
                  "local_rank": e.worker.local_rank, "code": code, "t": e.t,
                  "started": e.worker.started, "world": e.worker.world,
                  "status": None if e.beat is None else e.beat.status,
                  "step": None if e.beat is None else e.beat.step, "failed": failed,
                  "stopped_by_agent": closed}
        write_text(self.paths.exits / f"{self.node}-{e.worker.pid}.json", json.dumps(record))
        return failed

    def _on_exits(self, ended: list[_Ended]) -> None:
        for e in ended:
            if not self._publish(e) or e.worker.started < self.floor:
                continue  # a normal end, stopped by its agent, or of a round dealt with
            if self.crash is None:
                self.crash = _Crash(time.monotonic() + self.cfg.settle_s, e.t)
            self.crash.ended.append(e)
        if self.crash is None:
            self._resume()

    def _round_exits(self, first: float) -> list[dict[str, Any]]:
        """Every node's failed exits of the round (processes started after the last incident,
        ended at most 60 s before this node's first)."""
        out = []
        for p in self.paths.exits.glob("*.json"):
            obj = _read_json(p)
            if (obj is not None and obj.get("failed") and isinstance(obj.get("t"), int | float)
                    and isinstance(obj.get("rank"), int)
                    and float(obj.get("started") or 0) >= self.floor and obj["t"] >= first - 60):
                out.append(obj)
        return out

    def _decide_crash(self, beats: Mapping[int, Beat]) -> None:
        assert self.crash is not None
        crash, self.crash = self.crash, None
        crash.ended = [e for e in crash.ended if self._publish(e)]  # the agent's log caught up
        if not crash.ended:
            self._resume()
            return
        exits = self._round_exits(crash.first)
        self.floor = max(self.floor, crash.first)  # the rest of this round's ends follow
        dead = {o["rank"] for o in exits}
        now = time.time()
        stale = [r for r, b in beats.items() if r not in dead and b.started < self.floor
                 and now - b.ts > self.cfg.stale_s and b.status not in ("done", "exited")]
        blame = crash_culprits([Exit(o["rank"], o["code"] if isinstance(o["code"], int) else -1,
                                     float(o["t"]), o.get("status")) for o in exits], stale)
        nodes = {r: str(b.node) for r, b in beats.items()}
        nodes.update({o["rank"]: str(o["node"]) for o in exits})
        if not any(nodes.get(r) == self.node for r in blame.culprits):
            self._resume()  # a victim here: torchrun restarts the workers in place
            return
        first = min(float(o["t"]) for o in exits)
        culprit_nodes = tuple(sorted({nodes[r] for r in blame.culprits if r in nodes}))
        last_step = max([int(o["step"]) for o in exits if isinstance(o.get("step"), int)]
                        + [b.step for b in beats.values()] + [-1])
        restart, ckpt, lost = self._cost(last_step)
        leave = blame.reason != "victims_only" and "crash" in self.cfg.exclude_on
        if blame.reason == "victims_only":  # nobody failed on their own: no node to blame
            action = ("restart in place by torchrun (every dead rank reported comm_error and "
                      "no live rank's heartbeat went stale)")
        elif leave:
            action = f"node {self.node} left the job (its agent ended; the others restart " \
                     "in the next rendezvous round without it)"
        else:
            action = "restart in place by torchrun (--exclude-on without crash)"
        evidence = CrashEvidence(blame.victims, blame.reason,
                                 {o["rank"]: round(float(o["t"]) - first, 4) for o in exits},
                                 {o["rank"]: o.get("status") for o in exits}, tuple(stale), True)
        self._record(NodeIncident(
            "crash", self.node, evidence, detected_at=first, since_last_progress_s=None,
            localise_s=round(time.time() - first, 3), culprit_ranks=blame.culprits,
            culprit_nodes=culprit_nodes, world=max([int(o["world"] or 0) for o in exits] + [0]),
            restart_step=restart, checkpoint_step=ckpt, last_step_reached=last_step,
            steps_lost=lost, action=action,
            exit_codes={o["rank"]: o["code"] for o in exits if isinstance(o["code"], int)}))
        if leave:  # recorded first: the other guards see the round ended at once
            self._leave()
        else:
            self._resume()

    def _hung(self, beats: Mapping[int, Beat], world: int, now: float) -> str | None:
        if not beats or all(b.status == "done" for b in beats.values()):
            return None
        started = len(beats) == world and all(b.step >= 0 for b in beats.values())
        limit = self.cfg.timeout_s if started else self.cfg.startup_timeout_s
        if now - self.last_progress <= limit:
            return None
        return "hang" if started else "startup_hang"

    def _decide_hang(self, kind: str, beats: Mapping[int, Beat], world: int) -> None:
        cfg = self.cfg
        t_detect = time.time()
        key = f"hang-{max(b.started for b in beats.values()):.3f}"
        if not _create(self.paths.decisions / f"{key}.claim", {"by": self.node, "t": t_detect}):
            return  # another guard localises it: its decision is followed when it comes
        heartbeats = heartbeat_evidence(beats, world, t_detect, cfg.stale_s, cfg.pp, cfg.tp)
        fr = self._flight_recorder(key, beats, world)
        evidence = HangEvidence.decide(heartbeats, fr)
        culprits = evidence.culprit_ranks
        nodes = tuple(sorted({str(beats[r].node) for r in culprits if r in beats}))
        decision = {"key": key, "kind": kind, "culprit_ranks": list(culprits),
                    "culprit_nodes": list(nodes), "by": self.node, "t": t_detect}
        self.acted.add(key)
        write_text(self.paths.decisions / f"{key}.json", json.dumps(decision))
        last = max(b.step for b in beats.values())
        restart, ckpt, lost = self._cost(last)
        leave = "hang" in cfg.exclude_on and bool(nodes)
        action = (f"nodes {list(nodes)} left the job; the others' workers were killed and "
                  "restart in the next rendezvous round" if leave else
                  "every node's workers killed: torchrun restarts them in place")
        self._record(NodeIncident(
            kind, self.node, evidence, detected_at=t_detect,
            since_last_progress_s=round(time.monotonic() - self.last_progress, 3),
            localise_s=round(time.time() - t_detect, 3), culprit_ranks=culprits,
            culprit_nodes=nodes, world=world, restart_step=restart, checkpoint_step=ckpt,
            last_step_reached=last, steps_lost=lost, action=action))
        self.floor = max(self.floor, t_detect)
        self._act(decision)

    def _flight_recorder(self, key: str, beats: Mapping[int, Beat], world: int
                         ) -> FlightRecorderEvidence:
        folder = self.paths.heartbeats / "fr"
        shutil.rmtree(folder, ignore_errors=True)
        write_text(self.paths.heartbeats / DUMP_REQUEST, key)
        now = time.time()
        live = [r for r, b in beats.items() if now - b.ts <= self.cfg.stale_s]
        return await_fr_dumps(folder, live, self.cfg.fr_wait_s)

    def _follow_decisions(self) -> None:
        for p in sorted(self.paths.decisions.glob("*.json")):
            if p.stem in self.acted:
                continue
            obj = _read_json(p)
            if obj is None:
                continue
            t = obj.get("t")
            if isinstance(t, int | float):
                self.floor = max(self.floor, float(t))
            self._act(obj)

    def _act(self, decision: Mapping[str, Any]) -> None:
        """A hang decision (or a request to exclude a rank): leave when this node is a
        culprit's, else kill this node's workers of the round once the culprits' nodes left
        (the agents restart them in the next round)."""
        self.acted.add(str(decision.get("key")))
        nodes = [str(n) for n in decision.get("culprit_nodes") or []]
        exclude = "hang" in self.cfg.exclude_on or decision.get("kind") == "exclude"
        if exclude and self.node in nodes:
            self._leave()
            return
        if exclude:
            deadline = time.monotonic() + self.cfg.leave_wait_s
            while time.monotonic() < deadline and not all(
                    (_read_json(self.paths.nodes / f"{n}.json") or {}).get("state") == "left"
                    for n in nodes):
                time.sleep(self.cfg.poll_s)
        self.workers.kill()

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> int:
        cfg = self.cfg
        self.paths.make()
        Path(cfg.ckpt_dir).mkdir(parents=True, exist_ok=True)
        self.floor = 0.0
        self._update_floor()
        # decisions taken before this guard started (a node that came back) are not its own
        self.acted = {p.stem for p in self.paths.decisions.glob("*.json")}
        write_text(self.paths.nodes / f"{self.node}.json",
                   json.dumps({"node": self.node, "state": "running", "t": time.time()}))
        self.launcher = subprocess.Popen(list(cfg.command), env=self._env(),
                                         stderr=subprocess.PIPE, start_new_session=True)
        self.agent_log = _AgentLog(self.launcher.stderr)
        forward = {s: signal.signal(s, self._forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            while True:
                ended = self.workers.wait(cfg.poll_s, self._pause)
                code = self.launcher.poll()
                if code is not None and not ended:
                    return code
                self._update_floor()
                now = time.monotonic()
                beats, world = self._current()
                self.workers.track(beats.values(), self.floor)
                self._observe(beats, now)
                self._resolve_resumed(beats, world)
                if ended:
                    self._on_exits(ended)
                if self.crash is not None and now >= self.crash.deadline:
                    self._decide_crash(beats)
                    if self.left:
                        return EXIT_LEFT
                self._follow_decisions()
                if self.left:
                    return EXIT_LEFT
                if self.crash is None:
                    kind = self._hung(beats, world, now)
                    if kind is not None:
                        self._decide_hang(kind, beats, world)
                        if self.left:
                            return EXIT_LEFT
        finally:
            for s, handler in forward.items():
                signal.signal(s, handler)
            self._resume()
            self.workers.close()
            if self.launcher.poll() is None:
                self._signal_launcher(signal.SIGTERM)
                try:
                    self.launcher.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._signal_launcher(signal.SIGKILL)
                    self.launcher.wait()
            self.agent_log.join()

    def _forward(self, signum: int, frame: object) -> None:
        self._resume()
        self._signal_launcher(signum)

    def summary(self, code: int) -> dict[str, Any]:
        return {"node": self.node, "ok": code == 0, "left": self.left, "exit_code": code,
                "incidents": [obj for _, obj in self._incidents()]}


def request_exclusion(run_dir: str, ckpt_dir: str, ranks: Iterable[int], reason: str
                      ) -> NodeIncident:
    """Ask the guards of a running job to take the nodes of ``ranks`` out (a slow rank:
    mitigation S4): a decision in ``RUN/decisions/`` they act on at their next look (the
    ranks' nodes leave, the others restart in the next round from the checkpoint), and the
    incident (kind ``exclude``). An :class:`InputError` when a rank has no heartbeat."""
    paths = _Paths(run_dir)
    beats = read_beats(paths.heartbeats) if paths.heartbeats.is_dir() else {}
    wanted = sorted(set(ranks))
    missing = [r for r in wanted if r not in beats or beats[r].node is None]
    if missing:
        raise InputError(f"--exclude-rank {','.join(map(str, missing))}: no heartbeat of a "
                         f"guarded worker with that rank in {paths.heartbeats}")
    nodes = tuple(sorted({str(beats[r].node) for r in wanted}))
    t = time.time()
    key = f"exclude-{t:.3f}"
    paths.make()
    _create(paths.decisions / f"{key}.json",
            {"key": key, "kind": "exclude", "culprit_ranks": wanted,
             "culprit_nodes": list(nodes), "by": "request", "t": t, "reason": reason})
    from stragglers.recover.driver import resume_step

    restart = resume_step(Path(ckpt_dir))
    last = max(b.step for b in beats.values())
    world = max((b.world or 0) for b in beats.values()) or len(beats)
    incident = NodeIncident(
        "exclude", "request", ExclusionEvidence(reason), detected_at=t,
        since_last_progress_s=None, localise_s=0.0, culprit_ranks=tuple(wanted),
        culprit_nodes=nodes, world=world, restart_step=restart,
        checkpoint_step=restart - 1 if restart > 0 else None, last_step_reached=last,
        steps_lost=max(0, last - restart),
        action=f"nodes {list(nodes)} asked to leave the job; the others restart in the next "
               "rendezvous round without them")
    write_text(paths.incidents / f"{t:.3f}-request.json", json.dumps(incident.to_dict()))
    return incident


def run_guard(cfg: GuardConfig, log: Callable[[str], None] | None = None
              ) -> tuple[int, dict[str, Any]]:
    """Run the launcher under the guard until it ends (or this node leaves): its exit status
    (:data:`EXIT_LEFT` when the node left) and the summary."""
    guard = Guard(cfg, log)
    code = guard.run()
    return code, guard.summary(code)


def serve_store(host: str, port: int) -> None:
    """Serve the rendezvous's c10d store apart from the agents (``torchrun --rdzv-conf
    is_host=0`` on every node), so that any node can leave; runs until killed."""
    import torch.distributed as dist

    store = dist.TCPStore(host, port, is_master=True, multi_tenant=True,
                          wait_for_workers=False)
    print(json.dumps({"store": f"{host}:{port}"}), flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        del store

