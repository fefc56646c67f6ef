"""The live mitigation loop beside a running example job (``stragglers mitigate run``).

Each poll:

1. :class:`~.follow_job.JobFollower` reads what the job's ranks appended to their probe files;
2. every newly *complete* step (all ranks wrote its ``step_end``) becomes one iteration record
   per rank for the :class:`~stragglers.detect.watch.Watcher`: the rank's forward + backward
   compute *per micro-batch*, *relative to the step's expected time*: divided by its stage's
   baseline (each stage's time relative to stage 0's, median of the first ``warmup`` steps),
   then by the step's lower median of these over all ranks (1 = as expected). Compute, not
   the step time, because in synchronous training every rank's step is as slow as the
   slowest: only the slow rank's compute shows who it is; per micro-batch, so that the
   controller's own actions do not look like slowdowns or recoveries; relative, because on a
   shared machine the load of other processes stretches every rank's compute at once (x2 to
   x4 within a minute on the 2-core test machine) while the ratio stays put; not relative to
   the fastest rank of the stage, because in a pipeline a slow stage-1 rank lets its stage-0
   peer idle and lend its core, which made the *other* stage-0 rank look slow. Records carry
   the rank's *position* ``stage * dp + dp_rank`` (Megatron's order, which the planner
   assumes); the detector is the default one without its start-up rule
   (:func:`_relative_detector`);
3. each step's *measured slowdown* (seconds of compute on the critical path above a healthy
   step: ``max_i (m_i + pp - 1) t_i - (M + pp - 1) t_h``, ``t_i`` replica i's seconds per
   micro-batch at its slowest stage, ``m_i`` what it ran, ``t_h`` the replicas' lower
   median; 0 when not above) goes with the ``onset`` / ``change`` / ``recovery`` events to
   the ski-rental planner (:func:`~.planner.plan_mitigation` with ``measured``): the
   accumulated slowdown is what was measured, with the actions taken in effect (after S2,
   what S2 left), and no strategy is taken whose predicted step is not faster than the
   present measured one. Relative levels become seconds through the *reference*, ``M + pp -
   1`` times ``t_h`` (median of the last ``window`` steps); each new decision is one record;
4. an S2 decision *engages* the :class:`~.rebalance.Rebalancer`, fed every step with each
   replica's seconds per micro-batch: robust over the last ``window`` steps (outliers from
   other load on a core rejected, a level shift restarting the window, at least 4 steps
   before a plan and between changes), its split (Falcon's Eq. 1 solved exactly, pipeline
   fill and drain included) is written to the action file
   (:mod:`stragglers.testbed.assignment`, atomically, ``step`` = the step after the last
   complete one) whenever it changes, including back to even when the measured times even
   out; when the episode ends (the detector saw the slow ranks recover) the micro-batches
   are given back (the even split) and the rebalancer disengages. S1 needs nothing; S3
   and S4 need a restart and are recorded, not applied.

Records (one JSON object per line, key ``record``): ``watch`` (a detection event, as
``stragglers watch`` prints it), ``decision`` (a planner decision and what the loop did),
``action`` (an action file written, with the rebalancer's estimate), ``recovery`` (an
episode ended), ``controller`` (where the loop runs: :meth:`LiveController.place`), ``end``
(when the job finished: steps followed, actions, what the job reports it applied, lines of
the probe files that could not be read, the loop's own CPU time by phase).

The loop stays out of the job's way (a monitor that takes its job's CPU makes a rank look
slow and follows its own shadow): it reads and computes only when the probe files grew, and
its thread runs ``nice`` lower and, where the ranks are pinned to some of this host's CPUs,
on the others.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from stragglers.atomic import write_text
from stragglers.detect.events import LevelEvent
from stragglers.detect.robust import RobustLevelDetector
from stragglers.detect.watch import Watcher
from stragglers.errors import InputError
from stragglers.logs.megatron import Gap
from stragglers.logs.records import IterationRecord, RecordError
from stragglers.mitigate.action import MicrobatchAction, parse_action
from stragglers.mitigate.costs import Strategy
from stragglers.mitigate.events import LEVEL_KINDS, EventStream, add_event
from stragglers.mitigate.follow_job import JobFollower
from stragglers.mitigate.planner import Decision, plan_mitigation
from stragglers.mitigate.rebalance import Rebalancer, lower_median

__all__ = ["CpuMeter", "LiveConfig", "LiveController", "run_live"]


def _relative_detector() -> RobustLevelDetector:
    """The detector of the loop's records: the default one without its start-up rule (in the
    first ``startup_iters`` iterations only a sharp step is an onset, a gradual rise being
    the job's own start-up). The records are each rank's compute relative to the others' in
    the same step: the job's start-up stretches every rank at once and is not in them, so a
    slowdown that comes over a few steps early in a job is one (docs/benchmarks/mitigate.md:
    the replayed rounds)."""
    return RobustLevelDetector(startup_iters=0)


def _stage_ratio(u: np.ndarray) -> np.ndarray:
    """Per step (columns), each stage's lower median over its DP ranks relative to stage
    0's ((pp, steps)): how much slower a stage's micro-batch is by construction."""
    low = lower_median(u, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(low / low[:1], dtype=np.float64)


def _relative(per_mb: np.ndarray, pp: int, dp: int, stage_base: np.ndarray) -> np.ndarray:
    """Each position's compute per micro-batch relative to the step's *expected* time
    ((positions, steps); 1 = as expected): divided by its stage's baseline ``stage_base``
    (stage 0 = 1), then by the step's lower median over all positions of these (the load
    that stretches every rank at once cancels). Not relative to the fastest rank of its
    stage: with a slow rank in stage 1 of a pipeline, its stage-0 peer of the same replica
    idles and lends its core, so the *other* stage-0 rank looked slow beside it."""
    u = per_mb.reshape(pp, dp, -1) / stage_base.reshape(pp, 1, 1)
    flat = u.reshape(pp * dp, -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = flat / lower_median(flat, axis=0)
    return np.asarray(rel, dtype=np.float64)


def _step_slowdown(per_mb: np.ndarray, counts: np.ndarray, pp: int, dp: int, m: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per step: the measured slowdown (seconds of compute on the critical path above a
    healthy step: ``max_i (m_i + pp - 1) t_i - (M + pp - 1) t_h``, 0 when not above) and
    the healthy step ``(M + pp - 1) t_h``; ``t_i`` is replica i's seconds per micro-batch
    (its slowest stage), ``t_h`` their lower median, ``m_i`` the micro-batches replica i
    ran (``counts``, (dp, steps))."""
    t = np.nanmax(per_mb.reshape(pp, dp, -1), axis=0)  # (dp, steps)
    healthy = (m + pp - 1) * lower_median(t, axis=0)
    crit = np.nanmax((counts + (pp - 1)) * t, axis=0)
    with np.errstate(invalid="ignore"):
        slow = np.where(np.isfinite(crit - healthy), np.maximum(crit - healthy, 0.0), 0.0)
    return np.asarray(slow, dtype=np.float64), np.asarray(healthy, dtype=np.float64)


@dataclass(frozen=True)
class LiveConfig:
    """Settings of the loop (``mitigate run`` options)."""

    job_dir: Path
    action_path: Path
    strategies: tuple[Strategy, ...]
    warmup_iters: int = 10
    window: int = 10
    poll_s: float = 0.25
    idle_timeout_s: float = 120.0
    force: bool = False
    nice: int = 10  # the loop's thread this much lower in priority while it runs (0: as is)
    keep_off_job_cpus: bool = True  # move the loop's thread off CPUs the ranks are pinned to


PHASES = ("read", "prepare", "detect", "plan", "rebalance")

# the action record's ``why`` for the rebalancer's reasons that need their own words
_WHY = {
    "alike": "the replicas measure alike within noise on the split's last steps: "
             "micro-batches given back (the even split)",
    "recovered": "the slow replica got faster, nearer the others' level than its own before: "
                 "micro-batches given back (the even split)",
    "partly recovered": "the slow replica got faster but is still slow: the split for its "
                        "new level, toward even",
    "even first": "the best split lies past even: the even split first (a move past it "
                  "needs a new onset's evidence)",
    "new onset": "S2: a new onset measured at the even split (a first action's evidence on "
                 "the steps at even): this split",
    "trial taken back": "S2: the split tried measured slower: the one before it is back",
    "level shift": "S2: the split restored after a trial measures the straggler as slow as "
                   "the trial did (it worsened, the split was not the cause): the split for "
                   "its new level",
}


@dataclass
class CpuMeter:
    """The loop thread's own CPU seconds (``time.thread_time``), by phase: ``read`` (the
    probe files: poll, complete steps), ``prepare`` (the steps' relative times and measured
    slowdown, given to the rebalancer), ``detect`` (the watcher), ``plan`` (the ski-rental
    planner), ``rebalance`` (the rebalancer's estimate, the split, the action file); and
    the calls of :meth:`LiveController.advance` that fed new steps."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    advances: int = 0

    def add(self, phase: str, since: float) -> float:
        """Add the CPU time since ``since`` to ``phase``; returns the present CPU time."""
        now = time.thread_time()
        self.seconds[phase] += now - since
        return now

    def to_dict(self, steps: int) -> dict[str, object]:
        total = sum(self.seconds.values())
        per = 1e3 / max(steps, 1)
        return {"total_s": round(total, 4), "per_step_ms": round(total * per, 3),
                "per_step_ms_by_phase": {k: round(v * per, 3) for k, v in self.seconds.items()},
                "advances": self.advances, "steps": steps}


@dataclass
class _State:
    fed_until: int = -1  # last job step given to the watcher
    first_fed: int = -1  # first job step given to the watcher (its position 0)
    regime_from: int = -1  # job step where the latest level event's regime began
    points: int = 0  # iteration records given per rank
    lines: int = 0
    microbatches: int = 0  # M, from the first complete step
    counts: tuple[int, ...] = ()  # the assignment in effect (as written by us)
    seq: int = 0
    handled: set[tuple[int, str]] = field(default_factory=set)
    actions: list[dict[str, object]] = field(default_factory=list)
    measured: list[np.ndarray] = field(default_factory=list)  # slowdown per fed step (s)
    stage_base: np.ndarray | None = None  # each stage's expected time / stage 0's
    base_rows: list[np.ndarray] = field(default_factory=list)  # until the baseline is set
    engaged: bool = False  # S2 decided: the rebalancer follows the replicas' speeds
    episode_open: bool = False


class LiveController:
    """One live loop (see the module docstring); ``emit`` receives every record."""

    def __init__(self, cfg: LiveConfig, emit: Callable[[dict[str, object]], None]) -> None:
        self.cfg, self.emit = cfg, emit
        if cfg.action_path.exists() and not cfg.force:
            raise InputError(f"{cfg.action_path}: the action file exists already (a previous "
                             "run's? the job would take it); remove it or pass --force")
        self.follower = JobFollower(cfg.job_dir)
        if any((cfg.job_dir / "workers").glob("worker-*.json")):
            raise InputError(f"{cfg.job_dir / 'workers'}: the job in this folder has finished "
                             "already (its final worker records are there): start the "
                             "controller beside a running job")
        self.watcher = Watcher(source="live", warmup_iters=cfg.warmup_iters,
                               detector_factory=_relative_detector)
        self.stream = EventStream()
        self.state = _State()
        self.rebalancer = Rebalancer(1, 1)  # set from the job's first complete step
        self.cpu = CpuMeter()
        self._placed: tuple[int | None, set[int] | None] | None = None  # what place() changed
        if cfg.action_path.exists():  # --force: continue the numbering of the file there
            self.state.seq = self._existing_seq()

    def _existing_seq(self) -> int:
        try:
            raw = json.loads(self.cfg.action_path.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return 0
        seq = raw.get("seq") if isinstance(raw, dict) else None
        return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0 else 0

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> dict[str, object]:
        """Poll until the job finishes; returns the ``end`` record. The loop's thread runs
        at a lower priority and off the job's CPUs while it runs (:meth:`place`)."""
        try:
            return self._loop()
        finally:
            self.unplace()

    def _loop(self) -> dict[str, object]:
        last_progress = time.monotonic()
        finished = False
        while True:
            t0 = time.thread_time()
            got = self.follower.poll()
            if not got:  # (a job that still writes has not finished: no listing then)
                finished = self.follower.finished()
                if finished:
                    self.follower.poll()  # what it wrote before its final records
            self.cpu.add("read", t0)
            if got or finished:
                last_progress = time.monotonic()
                if self._placed is None and self.follower.ready():
                    self.place()
                self.advance()  # (no new bytes: no new complete step)
            if finished:
                return self.finish()
            if time.monotonic() - last_progress > self.cfg.idle_timeout_s:
                raise InputError(
                    f"{self.follower.probe_dir}: no new probe records for "
                    f"{self.cfg.idle_timeout_s:g} s and no final worker records: the job "
                    "stopped or never started (is it running with probes and --out-dir "
                    f"{self.cfg.job_dir}?)")
            time.sleep(self.cfg.poll_s)

    def place(self) -> dict[str, object]:
        """Keep the loop out of the job's way: lower its thread's scheduling priority by
        ``nice``, and, where the job's ranks run on this host pinned to some of the CPUs
        this thread may use, move the thread to the others (none left: it stays where it
        is, at the lower priority). Emits and returns a ``controller`` record."""
        tid = threading.get_native_id()
        old_nice: int | None = None
        nice = None
        if self.cfg.nice > 0 and hasattr(os, "getpriority"):
            try:
                old_nice = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, min(old_nice + self.cfg.nice, 19))
                nice = os.getpriority(os.PRIO_PROCESS, tid)
            except OSError:
                old_nice = None
        old_cpus: set[int] | None = None
        job = self.follower.job_cpus() if hasattr(os, "sched_getaffinity") else None
        mine = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        if not self.cfg.keep_off_job_cpus:
            note = "the job's CPUs not looked at (--share-job-cpus)"
        elif job is None or mine is None:
            note = "the job's CPUs are not known here (another host, or no affinity)"
        elif not (mine & job):
            note = "already off the job's CPUs"
        elif not mine - job:
            note = "no CPU free of the job's ranks: sharing theirs, at the lower priority"
        else:
            try:
                os.sched_setaffinity(0, mine - job)
                old_cpus = mine
                note = "moved off the job's CPUs"
            except OSError as exc:
                note = f"could not move off the job's CPUs ({exc.strerror or exc})"
        self._placed = (old_nice, old_cpus)
        now = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        rec: dict[str, object] = {
            "record": "controller", "nice": nice,
            "job_cpus": sorted(job) if job is not None else None,
            "cpus": sorted(now) if now is not None else None, "note": note}
        self.emit(rec)
        return rec

    def unplace(self) -> None:
        """Undo :meth:`place` where allowed (raising the priority back may need privileges:
        then the thread stays at the lower one)."""
        if self._placed is None:
            return
        old_nice, old_cpus = self._placed
        self._placed = None
        if old_cpus is not None:
            try:
                os.sched_setaffinity(0, old_cpus)
            except OSError:
                pass
        if old_nice is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), old_nice)
            except OSError:
                pass

    def advance(self) -> None:
        """Feed the newly complete steps, plan, act."""
        t0 = time.thread_time()
        if not self.follower.ready():
            return
        table = self.follower.table(after=self.state.fed_until)
        if table.steps.size == 0:
            self.cpu.add("read", t0)
            return
        self.cpu.advances += 1
        t0 = self.cpu.add("read", t0)
        meta = self.follower.meta
        assert meta is not None
        pp, dp = meta.pp_size, meta.dp_size
        if self.state.microbatches == 0:
            first = table.microbatches[:dp, 0]  # stage 0: the whole global batch
            self.state.microbatches = max(int(first.sum()) // dp, 1)
            self.state.counts = (self.state.microbatches,) * dp
            self.rebalancer = Rebalancer(dp, self.state.microbatches, stages=pp,
                                         window=self.cfg.window,
                                         min_steps=min(4, self.cfg.window))
        per_mb = table.per_microbatch()
        ratio = _relative(per_mb, pp, dp, self.stage_base(per_mb))
        slow, _ = _step_slowdown(per_mb, table.microbatches[:dp].astype(np.float64), pp, dp,
                                 self.state.microbatches)
        self.state.measured.append(slow)
        self.rebalancer.observe_steps(
            table.steps, np.nanmax(per_mb.reshape(pp, dp, -1), axis=0).T,
            ran=table.microbatches[:dp].T)
        # one record per (step, position) with a measured ratio, step-major as the job ran
        step_idx, pos_idx = np.nonzero(np.isfinite(ratio.T))
        first_line = self.state.lines + 1
        self.state.lines += step_idx.size
        items: list[tuple[int, IterationRecord | RecordError | Gap]] = [
            (first_line + i, IterationRecord(rank=pos, iter=step, duration=value))
            for i, (pos, step, value) in enumerate(zip(
                pos_idx.tolist(), table.steps[step_idx].tolist(),
                ratio.T[step_idx, pos_idx].tolist(), strict=True))]
        self.state.points += table.steps.size
        if self.state.first_fed < 0:
            self.state.first_fed = int(table.steps[0])
        self.state.fed_until = int(table.steps[-1])
        t0 = self.cpu.add("prepare", t0)
        events = self.watcher.process_items(items)
        ref = self.reference_s() if events else 0.0
        if not (math.isfinite(ref) and ref > 0):  # no compute measured in the window
            ref = float("nan")
        for ev in events:
            self.emit({"record": "watch", **ev.to_dict(),
                       "reference_s": round(ref, 6) if math.isfinite(ref) else None})
            if not (isinstance(ev, LevelEvent) and ev.kind in LEVEL_KINDS):
                add_event(self.stream, ev, "watch event", self.state.lines)
                continue
            self.state.regime_from = self.state.first_fed + ev.iteration
            if math.isfinite(ref) and ev.level_s is not None and ev.healthy_s is not None:
                ev = replace(ev, level_s=ev.level_s * ref, healthy_s=ev.healthy_s * ref)
            add_event(self.stream, ev, f"watch event {ev.line}", self.state.lines)
        t0 = self.cpu.add("detect", t0)
        self.plan()
        t0 = self.cpu.add("plan", t0)
        self.rebalance()
        self.cpu.add("rebalance", t0)

    def stage_base(self, per_mb: np.ndarray) -> np.ndarray:
        """Each stage's expected time per micro-batch relative to stage 0's: the median over
        the first ``warmup`` steps (at least 3) of the stages' lower medians; until then,
        the steps' own."""
        meta = self.follower.meta
        assert meta is not None
        pp, dp = meta.pp_size, meta.dp_size
        if pp == 1:
            return np.ones(1)
        if self.state.stage_base is not None:
            return self.state.stage_base
        ratios = _stage_ratio(per_mb.reshape(pp, dp, -1))
        self.state.base_rows.append(ratios)
        seen = np.concatenate(self.state.base_rows, axis=1)
        need = max(self.cfg.warmup_iters, 3)
        base = np.nanmedian(seen[:, :need], axis=1)
        if seen.shape[1] >= need and np.all(np.isfinite(base) & (base > 0)):
            self.state.stage_base = base
            return base
        return np.asarray(np.where(np.isfinite(base) & (base > 0), base, 1.0))

    def recent(self) -> tuple[np.ndarray, int]:
        """Compute per micro-batch (positions, steps) over the last ``window`` complete
        steps, from the start of the latest regime the detector found (not mixing the times
        before a change with those after it), and M."""
        first = max(self.state.fed_until - self.cfg.window, self.state.regime_from - 1, -1)
        return self.follower.table(after=first).per_microbatch(), self.state.microbatches

    def reference_s(self) -> float:
        """Seconds of a healthy step's compute on the critical path: ``M + pp - 1``
        micro-batch slots (the pipeline's fill and drain) of the replicas' lower median
        seconds per micro-batch (each replica at its slowest stage), median of the recent
        steps (the unit that turns the watcher's relative levels into seconds)."""
        meta = self.follower.meta
        assert meta is not None
        per_mb, m = self.recent()
        counts = np.full((meta.dp_size, per_mb.shape[1]), float(m))
        _, healthy = _step_slowdown(per_mb, counts, meta.pp_size, meta.dp_size, m)
        return float(np.nanmedian(healthy)) if healthy.size else float("nan")

    def plan(self) -> None:
        """Re-plan over the events so far, with the slowdown measured in every step fed
        (the accumulated slowdown and the present step include what the actions did); act
        on new decisions."""
        meta = self.follower.meta
        assert meta is not None
        if not self.stream.events:
            return
        stream = replace(self.stream, end_iteration=self.state.points - 1)
        measured = np.concatenate(self.state.measured)
        plan = plan_mitigation(stream, meta, self.cfg.strategies,
                               microbatches=self.state.microbatches, source="live events",
                               measured=measured)
        last = plan.episodes[-1] if plan.episodes else None
        was_open = self.state.episode_open
        # before the decisions: an S2 decided in a new episode must find it open (else the
        # rebalancer, restarted by the give-back and not planning yet, disengaged at once)
        self.state.episode_open = last is not None and (
            last.end is None or last.end >= plan.end_iteration)
        for e, ep in enumerate(plan.episodes):
            for d in ep.decisions:
                if (e, d.strategy) not in self.state.handled:
                    self.state.handled.add((e, d.strategy))
                    self.decide(e, d)
        if was_open and not self.state.episode_open:
            action = None
            if self.state.engaged:  # give back: the straggler the split was for is gone
                self.state.engaged = False
                self.rebalancer.reset(since=self.state.fed_until + 1)
                if self.state.counts != self.rebalancer.even:
                    action = self.write(self.rebalancer.even, "the slow ranks recovered: "
                                        "micro-batches given back (the even split)")
            self.emit({"record": "recovery", "episode": len(plan.episodes) - 1,
                       "job_step": self.state.fed_until, "action": action})

    def rebalance(self) -> dict[str, object] | None:
        """While S2 is engaged: the rebalancer's split from the measured times, written when
        it changes; disengaged once back to even with no episode open."""
        if not self.state.engaged:
            return None
        counts = self.rebalancer.plan()
        action = None
        if counts != self.state.counts:
            note = self.rebalancer.last_plan
            action = self.write(counts, _WHY.get(
                note.reason if note is not None else "",
                "the replicas' measured times are even again: micro-batches given back"
                if counts == self.rebalancer.even else
                "S2: the replicas' measured times call for this split"))
        if counts == self.rebalancer.even and not self.state.episode_open:
            self.state.engaged = False
        return action

    def decide(self, episode: int, d: Decision) -> None:
        rec: dict[str, object] = {"record": "decision", "episode": episode,
                               "job_step": self.state.fed_until, **d.to_dict()}
        if d.action == "microbatch":
            if not self.state.engaged and self.state.counts == self.rebalancer.even:
                # a first action: its estimate, and its trial's baseline, from the steps
                # since the detector's onset only (the healthy steps before it, in the
                # window under load, pulled the estimate low and the baseline down)
                self.rebalancer.reset(since=max(self.state.regime_from, 0))
            self.state.engaged = True
            action = self.rebalance()
            rec["applied"] = action is not None
            rec["action_file"] = action
            if action is None:
                est = self.rebalancer.plan_estimate()
                rec["note"] = ("the measured times give the assignment already in effect; "
                               "the rebalancer follows them from now on" if est is not None
                               else f"fewer than {self.rebalancer.min_steps} steps measured: "
                               "the rebalancer acts once they are")
        elif d.action == "ignore":
            rec["applied"] = True
            rec["note"] = "nothing to do: keep training"
        else:
            rec["applied"] = False
            rec["note"] = (f"{d.action} needs a restart of the job (checkpoint + --rank-map / "
                           "new nodes); the live loop does not restart jobs")
        self.emit(rec)

    def write(self, counts: tuple[int, ...], why: str) -> dict[str, object]:
        """Write the action file for ``counts`` (from the step after the last complete one)."""
        meta = self.follower.meta
        assert meta is not None
        m = self.state.microbatches
        est = self.rebalancer.plan_estimate()
        self.state.seq += 1
        action = MicrobatchAction(seq=self.state.seq, step=self.state.fed_until + 1,
                                  assignment=counts)
        text = json.dumps(action.to_dict()) + "\n"
        # what we write, the job must accept: same parser, same checks
        parse_action(text, str(self.cfg.action_path), meta.dp_size, m)
        write_text(self.cfg.action_path, text)
        before = self.state.counts
        self.state.counts = counts
        record: dict[str, object] = {**action.to_dict(), "why": why}
        if est is not None:
            record.update({
                "group_times_s": [round(float(x), 6) for x in est.times_s],
                "estimate": est.to_dict(),
                "compute_step_before_s": round(self.rebalancer.predicted_step_s(before, est), 6),
                "compute_step_even_s": round(
                    self.rebalancer.predicted_step_s(self.rebalancer.even, est), 6),
                "compute_step_after_s": round(self.rebalancer.predicted_step_s(counts, est), 6)})
            # the same from the steps that ran this split before (null: it has not run):
            # where a replica's speed depends on the split, what it did
            ran = self.rebalancer.predicted_from_runs_s(counts)
            record["compute_step_after_from_runs_s"] = (round(ran, 6) if math.isfinite(ran)
                                                        else None)
        self.state.actions.append(record)
        self.emit({"record": "action", **record})
        return record

    def finish(self) -> dict[str, object]:
        """The job has finished: last steps, the watcher's end, the ``end`` record."""
        self.follower.poll()
        self.advance()
        for ev in self.watcher.finish():
            self.emit({"record": "watch", **ev.to_dict()})
        end = {"record": "end", "steps_followed": self.state.points,
               "last_step": self.state.fed_until, "microbatches": self.state.microbatches,
               "actions": len(self.state.actions), "assignment": list(self.state.counts),
               "decisions": len(self.state.handled),
               "unreadable_probe_lines": dict(sorted(self.follower.bad_lines.items())),
               "controller_cpu": self.cpu.to_dict(self.state.points),
               "job": self.follower.job_report()}
        self.emit(end)
        return end


def run_live(cfg: LiveConfig, emit: Callable[[dict[str, object]], None]) -> dict[str, object]:
    """Wait for the job's probe files, then run the loop until the job ends."""
    ctl = LiveController(cfg, emit)
    return ctl.run()
