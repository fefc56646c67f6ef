"""The live mitigation loop beside a running example job (``stragglers mitigate run``).

Each poll:

1. :class:`~.follow_job.JobFollower` reads what the job's ranks appended to their probe files;
2. every newly *complete* step (all ranks wrote its ``step_end``) becomes one iteration record
   per rank for the :class:`~stragglers.detect.watch.Watcher`: the rank's forward + backward
   compute *per micro-batch*, *relative to the fastest DP rank of its stage in the same
   step* (1 = the fastest). Compute, not the step time, because in synchronous training
   every rank's step is as slow as the slowest: only the slow rank's compute shows who it
   is; per micro-batch, so that the controller's own actions (fewer micro-batches on a slow
   replica, more on the others) do not look like slowdowns or recoveries; relative, because
   on a shared machine the load of other processes stretches every rank's compute at once
   (x2 to x4 within a minute on the 2-core test machine) while the ratio stays put. Records
   carry the rank's *position* ``stage * dp + dp_rank`` (Megatron's order, which the planner
   assumes);
3. the ``onset`` / ``change`` / ``recovery`` events so far go to the ski-rental planner
   (:func:`~.planner.plan_mitigation`, with the events' end at the last step fed, so that the
   accumulated slowdown grows between events), their relative levels turned into seconds by
   the *reference*: ``M`` times the fastest rank's compute per micro-batch (of the slowest
   stage; median of the last ``window`` steps), a healthy step's compute on the critical
   path; each new decision is one record;
4. an S2 decision is acted on: each DP replica's time per micro-batch ``t_i`` is measured
   over the last ``window`` complete steps (the slowest stage of the replica: a pipeline runs
   at the pace of its slowest stage), :func:`~.microbatch.solve_microbatches` splits the
   ``dp * M`` micro-batches, and the action file (:mod:`stragglers.testbed.assignment`)
   is written atomically with ``step`` = the step after the last complete one. When an
   episode in which S2 acted ends (the planner saw the slow ranks recover), the assignment is
   solved again from the times measured then (back to the even split when they are equal).
   S1 needs nothing; S3 and S4 need a restart and are recorded, not applied.

Records (one JSON object per line, key ``record``): ``watch`` (a detection event, as
``stragglers watch`` prints it), ``decision`` (a planner decision and what the loop did),
``action`` (an action file written), ``end`` (when the job finished: steps followed, actions,
what the job reports it applied, lines of the probe files that could not be read).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from stragglers.atomic import write_text
from stragglers.detect.events import LevelEvent
from stragglers.detect.watch import Watcher
from stragglers.errors import InputError
from stragglers.logs.megatron import Gap
from stragglers.logs.records import IterationRecord, RecordError
from stragglers.mitigate.action import MicrobatchAction, parse_action
from stragglers.mitigate.costs import Strategy
from stragglers.mitigate.events import LEVEL_KINDS, EventStream, add_event
from stragglers.mitigate.follow_job import JobFollower
from stragglers.mitigate.microbatch import solve_microbatches
from stragglers.mitigate.planner import Decision, plan_mitigation

__all__ = ["LiveConfig", "LiveController", "run_live"]


def _relative(per_mb: np.ndarray, pp: int, dp: int) -> np.ndarray:
    """Each position's compute per micro-batch relative to the fastest DP rank of its stage
    in the same step ((positions, steps); 1 = the fastest)."""
    by_stage = per_mb.reshape(pp, dp, -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = by_stage / np.nanmin(by_stage, axis=1, keepdims=True)
    return np.asarray(rel.reshape(pp * dp, -1), dtype=np.float64)


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
    acted: set[int] = field(default_factory=set)  # episodes in which S2 wrote an action
    reverted: set[int] = field(default_factory=set)
    actions: list[dict[str, object]] = field(default_factory=list)


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
        self.watcher = Watcher(source="live", warmup_iters=cfg.warmup_iters)
        self.stream = EventStream()
        self.state = _State()
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
        """Poll until the job finishes; returns the ``end`` record."""
        last_progress = time.monotonic()
        while True:
            finished = self.follower.finished()
            got = self.follower.poll()
            if got:
                last_progress = time.monotonic()
            self.advance()
            if finished:
                return self.finish()
            if time.monotonic() - last_progress > self.cfg.idle_timeout_s:
                raise InputError(
                    f"{self.follower.probe_dir}: no new probe records for "
                    f"{self.cfg.idle_timeout_s:g} s and no final worker records: the job "
                    "stopped or never started (is it running with probes and --out-dir "
                    f"{self.cfg.job_dir}?)")
            time.sleep(self.cfg.poll_s)

    def advance(self) -> None:
        """Feed the newly complete steps, plan, act."""
        if not self.follower.ready():
            return
        table = self.follower.table(after=self.state.fed_until)
        if table.steps.size == 0:
            return
        meta = self.follower.meta
        assert meta is not None
        if self.state.microbatches == 0:
            first = table.microbatches[:meta.dp_size, 0]  # stage 0: the whole global batch
            self.state.microbatches = max(int(first.sum()) // meta.dp_size, 1)
            self.state.counts = (self.state.microbatches,) * meta.dp_size
        ratio = _relative(table.per_microbatch(), meta.pp_size, meta.dp_size)
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
        before = len(self.stream.events)
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
        self.plan(changed=len(self.stream.events) > before)

    def recent(self) -> tuple[np.ndarray, int]:
        """Compute per micro-batch (positions, steps) over the last ``window`` complete
        steps, from the start of the latest regime the detector found (not mixing the times
        before a change with those after it), and M."""
        first = max(self.state.fed_until - self.cfg.window, self.state.regime_from - 1, -1)
        return self.follower.table(after=first).per_microbatch(), self.state.microbatches

    def reference_s(self) -> float:
        """Seconds of a healthy step's compute on the critical path: M times the fastest
        rank's compute per micro-batch of the slowest stage, median of the recent steps (the
        unit that turns the watcher's relative levels into seconds for the planner)."""
        meta = self.follower.meta
        assert meta is not None
        per_mb, m = self.recent()
        fastest = np.nanmin(per_mb.reshape(meta.pp_size, meta.dp_size, -1), axis=1)
        return float(m * np.nanmax(np.nanmedian(fastest, axis=1)))

    def plan(self, changed: bool = False) -> None:
        """Re-plan over the events so far; act on new decisions. ``changed``: new events
        arrived (an episode in which S2 was decided then solves its assignment again)."""
        meta = self.follower.meta
        assert meta is not None
        if not self.stream.events:
            return
        stream = replace(self.stream, end_iteration=self.state.points - 1)
        plan = plan_mitigation(stream, meta, self.cfg.strategies,
                               microbatches=self.state.microbatches, source="live events")
        for e, ep in enumerate(plan.episodes):
            new = False
            for d in ep.decisions:
                if (e, d.strategy) not in self.state.handled:
                    self.state.handled.add((e, d.strategy))
                    self.decide(e, d)
                    new = True
            closed = ep.end is not None and ep.end < plan.end_iteration
            s2 = any(d.action == "microbatch" for d in ep.decisions)
            if s2 and changed and not new and not closed:
                action = self.solve_and_write(f"episode {e}: the slowdown changed while S2 is "
                                              "in effect: the assignment solved again")
                if action is not None:
                    self.state.acted.add(e)
            if closed and e in self.state.acted and e not in self.state.reverted:
                self.state.reverted.add(e)
                action = self.solve_and_write(f"episode {e} ended (the slow ranks recovered): "
                                              "the assignment solved again")
                self.emit({"record": "recovery", "episode": e, "job_step": self.state.fed_until,
                           "action": action})

    def decide(self, episode: int, d: Decision) -> None:
        rec: dict[str, object] = {"record": "decision", "episode": episode,
                               "job_step": self.state.fed_until, **d.to_dict()}
        if d.action == "microbatch":
            action = self.solve_and_write(f"{d.strategy} at iteration {d.iteration}")
            rec["applied"] = action is not None
            rec["action_file"] = action
            if action is not None:
                self.state.acted.add(episode)
            else:
                rec["note"] = "the measured times give the assignment already in effect"
        elif d.action == "ignore":
            rec["applied"] = True
            rec["note"] = "nothing to do: keep training"
        else:
            rec["applied"] = False
            rec["note"] = (f"{d.action} needs a restart of the job (checkpoint + --rank-map / "
                           "new nodes); the live loop does not restart jobs")
        self.emit(rec)

    def group_times(self) -> np.ndarray:
        """Seconds per micro-batch of each DP replica over the last ``window`` complete
        steps: per step, the slowest stage's compute per micro-batch; the median over the
        steps (robust to the odd step stretched by the machine's other load)."""
        meta = self.follower.meta
        assert meta is not None
        per_mb, _ = self.recent()
        per_group = np.nanmax(per_mb.reshape(meta.pp_size, meta.dp_size, -1), axis=0)
        return np.asarray(np.nanmedian(per_group, axis=1), dtype=np.float64)

    def solve_and_write(self, why: str) -> dict[str, object] | None:
        """Solve S2 from the measured times; write the action file unless nothing changes."""
        meta = self.follower.meta
        assert meta is not None
        t = self.group_times()
        m = self.state.microbatches
        res = solve_microbatches(t, m * meta.dp_size, source="measured micro-batch times")
        counts = tuple(int(c) for c in res.assignment)
        if counts == self.state.counts:
            return None
        self.state.seq += 1
        action = MicrobatchAction(seq=self.state.seq, step=self.state.fed_until + 1,
                                  assignment=counts)
        text = json.dumps(action.to_dict()) + "\n"
        # what we write, the job must accept: same parser, same checks
        parse_action(text, str(self.cfg.action_path), meta.dp_size, m)
        write_text(self.cfg.action_path, text)
        self.state.counts = counts
        current = np.asarray(self.state.counts, dtype=np.float64)
        record = {**action.to_dict(), "why": why,
                  "group_times_s": [round(float(x), 6) for x in t],
                  "compute_makespan_even_s": round(float(m * t.max()), 6),
                  "compute_makespan_after_s": round(float((current * t).max()), 6),
                  "solve_s": res.solve_s}
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
               "job": self.follower.job_report()}
        self.emit(end)
        return end


def run_live(cfg: LiveConfig, emit: Callable[[dict[str, object]], None]) -> dict[str, object]:
    """Wait for the job's probe files, then run the loop until the job ends."""
    ctl = LiveController(cfg, emit)
    return ctl.run()
