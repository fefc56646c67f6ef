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

* crash: the ranks that exited first and not because a peer went away (their last status is
  not ``comm_error``);
* hang: the driver asks the live ranks for their PyTorch flight-recorder dumps (the
  heartbeat thread writes them; ``TORCH_FR_BUFFER_SIZE`` is set for the ranks) and localises
  with :mod:`stragglers.detect.fr_hang` (ranks without a dump are silent); when that names
  nobody (no dumps), from the heartbeats: ranks whose heartbeat stopped (older than
  ``min(timeout_s / 2, max(5 x heartbeat_s, 3 s))``) or that are alive but not in a
  communication call are *silent*, the others' calls (op, group, seq) are the last-op records of
  :func:`stragglers.detect.hang.localize_hang` on the ``dp x pp x tp`` topology of the
  attempt. Both diagnoses go into the evidence.

With ``validate``, the validation passes of a ring over the attempt's slots and the GEMM test
(:mod:`stragglers.validate`) run next and their flags go into the incident. Then it kills every
process of the attempt, takes the culprits' slots out of service and
restarts the command (on the remaining slots, or with spares in their place); the job
resumes from its latest checkpoint in ``ckpt_dir``: the example job's ``latest`` marker
(:mod:`stragglers.testbed.checkpoint`; the command must carry ``--ckpt-dir`` with the
same folder and ``--resume``), or else the toy job's files ``ckpt-<step>.pt``. If every rank
of an attempt exits with status 2 before its first step, the job refused its input:
the driver stops and says so instead of excluding slots. Each incident is a JSON object:
kind, detection time (since the start and since the last progress), localisation time,
culprit slots and ranks with the evidence, the step resumed at, the steps lost, and the time
until the restarted job made progress again.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stragglers.atomic import write_text
from stragglers.detect.hang import LastOp, Topology, localize_hang
from stragglers.recover.heartbeat import read_beats

__all__ = ["DriverConfig", "DriverResult", "run_driver"]

GROUP_KINDS = ("tp", "dp", "pp")


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


@dataclass
class DriverResult:
    ok: bool
    attempts: int
    incidents: list[dict[str, Any]] = field(default_factory=list)
    slots_in_service: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    message: str = ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resume_step(folder: Path) -> int:
    """The step a restarted job begins at: the example job's ``latest`` marker (the number of
    steps the checkpoint holds), else the toy job's newest ``ckpt-<step>.pt`` plus one, else 0.
    """
    from stragglers.recover.marker import read_marker

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


def _localise_hang(beats: dict[int, dict[str, Any]], world: int, now: float, stale_s: float,
                   pp: int, tp: int) -> tuple[list[int], dict[str, Any]]:
    dp = world // (pp * tp)
    topo = Topology(dp=dp, pp=pp, tp=tp)
    last_ops: dict[int, LastOp] = {}
    stale, computing, untracked = [], [], []
    for r in range(world):
        b = beats.get(r)
        if b is None or now - float(b.get("ts", 0.0)) > stale_s:
            stale.append(r)
            continue
        group = b.get("group")
        if b.get("op") and group in GROUP_KINDS:
            seq = b.get("seq")
            peer = b.get("peer")
            last_ops[r] = LastOp(str(b["op"]), str(group),
                                 peer=peer if isinstance(peer, int) else None,
                                 seq=seq if isinstance(seq, int) else None)
        elif b.get("op"):  # a call in a group the dp x pp x tp topology does not describe
            untracked.append(r)
        else:
            computing.append(r)
    diag = localize_hang(topo, last_ops)
    evidence = {
        "stale_heartbeat": stale,
        "alive_not_in_a_call": computing,
        # e.g. the example job's "world" (gradient norm) and "emb" all-reduces: left out of the
        # waits-for graph (like silent ranks, they are suspects only if others wait for them)
        "in_other_group_call": {str(r): f"{beats[r].get('op')} in {beats[r].get('group')}"
                                for r in untracked},
        "last_ops": {str(r): {"op": o.op, "group": o.group, "seq": o.seq, "peer": o.peer}
                     for r, o in sorted(last_ops.items())},
        "steps": {str(r): beats[r].get("step") for r in sorted(beats)},
        "diagnosis": diag.to_dict()["suspects"],
    }
    return list(diag.suspect_ranks), evidence


def _localise_fr(hb_dir: Path, beats: dict[int, dict[str, Any]], world: int, stale_s: float,
                 wait_s: float) -> tuple[list[int], dict[str, Any]]:
    """Ask the live ranks for their flight-recorder dumps, wait for them (at most ``wait_s``)
    and localise the hang from them (:mod:`stragglers.detect.fr_hang`); ranks without a dump
    are silent."""
    from stragglers.detect.flight_recorder import read_flight_recorder
    from stragglers.detect.fr_hang import localize_fr_hang
    from stragglers.errors import InputError

    (hb_dir / "dump-request").write_text("")
    now = time.time()
    live = [r for r in range(world)
            if r in beats and now - float(beats[r].get("ts", 0.0)) <= stale_s]
    folder = hb_dir / "fr"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if all((folder / f"_dump_{r}").exists() for r in live):
            break
        time.sleep(0.05)
    if not folder.is_dir():
        return [], {"dumps": 0, "note": "no flight-recorder dump came (TORCH_FR_BUFFER_SIZE "
                                        "unset, or the job does not use torch.distributed)"}
    try:
        diag = localize_fr_hang(read_flight_recorder(folder))
    except InputError as exc:
        return [], {"error": str(exc)}
    out = diag.to_dict()
    return list(diag.suspect_ranks), {
        "dumps": diag.dumps, "suspects": out["suspects"], "silent": out["silent"],
        "groups": out["groups"], "details": out["details"],
        "waited_for": any(s.kind != "stuck_collective" for s in diag.suspects)}


def _validate_slots(slots: list[int]) -> dict[str, Any]:
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
    return {"slow_links": [[slots[a], slots[b]] for a, b in rep.slow_links],
            "slow_gemm_slots": [slots[r] for r in rep.slow_gemm_ranks],
            "gemm_ratio": {str(slots[g.rank]): round(g.ratio, 3) for g in rep.gemm},
            "link_ratio": {f"{slots[x.src]}->{slots[x.dst]}": round(x.ratio, 3)
                           for x in rep.links},
            "seconds": round(time.monotonic() - t0, 3)}


def run_driver(cfg: DriverConfig, log: Callable[[dict[str, Any]], None] | None = None
               ) -> DriverResult:
    """Run the command under watch until it finishes, restarting it after incidents."""
    t_start = time.monotonic()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ckpt = Path(cfg.ckpt_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    slots = list(range(cfg.slots))  # in service: the attempt's ranks first, then spares
    result = DriverResult(ok=False, attempts=0)
    # a heartbeat this old means a stopped process: well above the interval (a loaded machine
    # delays threads by seconds), well below the hang timeout (a frozen rank stopped at least
    # that long before the hang is declared)
    stale_s = min(cfg.timeout_s / 2, max(5 * cfg.heartbeat_s, 3.0))
    pending: dict[str, Any] | None = None  # incident waiting for the resumed progress

    def emit(incident: dict[str, Any]) -> None:
        write_text(out / "incidents.jsonl",
                   "".join(json.dumps(i) + "\n" for i in result.incidents))
        if log is not None:
            log(incident)

    for attempt in range(cfg.max_restarts + 1):
        world = len(slots) if cfg.world is None else cfg.world
        if world > len(slots):
            result.message = NO_SPARE.format(world=world, have=len(slots))
            break
        if world % (cfg.pp * cfg.tp):
            result.message = (f"{world} slots left cannot hold pp {cfg.pp} x tp {cfg.tp}")
            break
        result.attempts = attempt + 1
        hb_dir = out / f"heartbeats-{attempt}"
        shutil.rmtree(hb_dir, ignore_errors=True)
        hb_dir.mkdir(parents=True)
        port = _free_port()
        procs: list[subprocess.Popen[bytes]] = []
        logs = []
        for rank, slot in enumerate(slots[:world]):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank),
                       WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       STRAGGLERS_SLOT=str(slot), STRAGGLERS_ATTEMPT=str(attempt),
                       STRAGGLERS_HEARTBEAT_DIR=str(hb_dir),
                       STRAGGLERS_HEARTBEAT_S=str(cfg.heartbeat_s),
                       STRAGGLERS_CKPT_DIR=str(ckpt), STRAGGLERS_RUN_DIR=str(out))
            env.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # the flight recorder, for hangs
            f = open(out / f"attempt-{attempt}-rank-{rank}.log", "wb")  # noqa: SIM115
            logs.append(f)
            procs.append(subprocess.Popen(list(cfg.command), env=env, stdout=f,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        t_launch = time.monotonic()
        last_progress = t_launch
        progress_key: tuple[int, ...] = ()
        started = False
        incident: dict[str, Any] | None = None
        max_step = -1
        try:
            while True:
                time.sleep(cfg.poll_s)
                now_mono = time.monotonic()
                beats = read_beats(hb_dir)
                steps = tuple(int(beats[r]["step"]) if r in beats else -1 for r in range(world))
                max_step = max(max_step, *steps)
                if steps != progress_key:
                    progress_key = steps
                    last_progress = now_mono
                if not started and all(s >= 0 for s in steps):
                    started = True
                    last_progress = now_mono
                if pending is not None and started and min(steps) > pending["restart_step"]:
                    pending["resumed_after_s"] = round(now_mono - pending["_t_detect"], 3)
                    pending.pop("_t_detect")
                    emit(pending)
                    pending = None
                codes = [p.poll() for p in procs]
                if all(c == 0 for c in codes):
                    result.ok = True
                    break
                failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
                limit_s = cfg.timeout_s if started else cfg.startup_timeout_s
                finished = all(beats.get(r, {}).get("status") == "done" for r in range(world))
                if finished and not failed:
                    # training is over: the processes are tearing down (which can take a while
                    # on a loaded machine), not hung; give them the start-up allowance to exit
                    if now_mono - last_progress > cfg.startup_timeout_s:
                        result.ok = True
                        result.message = "the job finished but its processes did not exit"
                        break
                    continue
                if failed and not started and all(codes[r] == 2 for r in failed):
                    # a rank refused its input before its first step: the others run the same
                    # command and will too (or wait in the rendezvous): give them time to
                    exit_by = now_mono + min(cfg.startup_timeout_s, 60.0)
                    while (any(p.poll() is None for p in procs)
                           and time.monotonic() < exit_by):
                        time.sleep(cfg.poll_s)
                    codes = [p.poll() for p in procs]
                    if all(c == 2 for c in codes):
                        result.message = ("every rank exited with status 2 (the job refused "
                                          "its input) before its first step: see "
                                          f"{out / f'attempt-{attempt}-rank-0.log'}")
                        break
                    failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    t_detect = now_mono
                    time.sleep(min(0.5, 2 * cfg.poll_s))  # let the peers' errors land
                    beats = read_beats(hb_dir)
                    codes = [p.poll() for p in procs]
                    dead = [r for r, c in enumerate(codes) if c not in (None, 0)]
                    culprits = [r for r in dead
                                if beats.get(r, {}).get("status") != "comm_error"] or failed
                    incident = {"kind": "crash", "exit_codes": {str(r): codes[r] for r in dead},
                                "evidence": {"comm_error": [r for r in dead if r not in
                                                            culprits]}}
                elif now_mono - last_progress > limit_s:
                    t_detect = now_mono
                    culprits, evidence = _localise_hang(beats, world, time.time(), stale_s,
                                                        cfg.pp, cfg.tp)
                    fr_culprits, fr_evidence = _localise_fr(hb_dir, beats, world, stale_s,
                                                            cfg.fr_wait_s)
                    evidence["flight_recorder"] = fr_evidence
                    evidence["localised_by"] = "heartbeats"
                    # the dumps decide when they name ranks that others wait for; a group
                    # stuck as a whole only when the heartbeats name nobody
                    waited = fr_evidence.get("waited_for", False)
                    if fr_culprits and (waited or not culprits):
                        evidence["heartbeat_suspects"] = culprits
                        culprits = fr_culprits
                        evidence["localised_by"] = "flight_recorder"
                    incident = {"kind": "hang" if started else "startup_hang",
                                "evidence": evidence}
                else:
                    continue
                t_local = time.monotonic()
                incident.update({
                    "attempt": attempt,
                    "detected_at_s": round(t_detect - t_start, 3),
                    "since_last_progress_s": round(t_detect - last_progress, 3),
                    "localise_s": round(t_local - t_detect, 4),
                    "culprit_ranks": culprits,
                    "culprit_slots": [slots[r] for r in culprits],
                    "world": world,
                })
                break
        finally:
            _kill_all(procs)
            for f in logs:
                f.close()
        if result.ok or incident is None:
            break
        if pending is not None:  # progress never came back before this incident
            pending.pop("_t_detect", None)
            pending["resumed_after_s"] = None
            emit(pending)
            pending = None
        if cfg.validate and len(slots) >= 2:
            incident["validation"] = _validate_slots(slots[:world])
        restart = resume_step(ckpt)
        incident["restart_step"] = restart
        incident["checkpoint_step"] = restart - 1 if restart > 0 else None  # last step held
        incident["last_step_reached"] = max_step
        incident["steps_lost"] = max(0, max_step - restart)
        bad = set(incident["culprit_slots"])
        slots_before = list(slots)
        if not bad:
            incident["action"] = "stop: no culprit localised"
            result.incidents.append(incident)
            emit(incident)
            result.message = "hang without a localised culprit"
            break
        if cfg.world is None:
            slots = [s for s in slots if s not in bad]
            incident["action"] = f"excluded slots {sorted(bad)}, restarting on {len(slots)}"
        else:  # the first spares take over the excluded slots' ranks
            active, spares = slots[:world], [s for s in slots[world:] if s not in bad]
            bad_ranks = [i for i, s in enumerate(active) if s in bad]
            if len(spares) >= len(bad_ranks):
                for i in bad_ranks:
                    active[i] = spares.pop(0)
                slots = active + spares
                incident["action"] = ("excluded slots " + ", ".join(
                    f"{slots_before[i]} (rank {i} -> spare slot {active[i]})" for i in bad_ranks))
            else:
                slots = [s for s in slots if s not in bad]  # the next attempt stops: no spare
                incident["action"] = f"excluded slots {sorted(bad)}: no spare left"
        incident["_t_detect"] = t_detect
        result.incidents.append(incident)
        pending = incident
        if not slots:
            result.message = "no slot left"
            break
    else:
        result.message = f"gave up after {cfg.max_restarts} restarts"
    if pending is not None:
        pending.pop("_t_detect", None)
        pending.setdefault("resumed_after_s", None)
        emit(pending)
    result.slots_in_service = slots
    result.wall_s = time.monotonic() - t_start
    write_text(out / "incidents.jsonl", "".join(json.dumps(i) + "\n" for i in result.incidents))
    return result
