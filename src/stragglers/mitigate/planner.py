"""The multi-level ski-rental planner of Falcon-Mitigate (Falcon §5.2, Algorithm 1).

Rule. A fail-slow *episode* starts when a rank's ``onset`` arrives while no rank is slow and
ends when the last slow rank recovers. Within it, the candidate strategies that can act on
the episode's root cause are taken in the order of their overhead (S1 ignore, S2 micro-batch
redistribution, S3 topology adjustment, S4 checkpoint-and-restart; :mod:`.costs`), and the
next candidate is applied as soon as the *accumulated slowdown*

    impact(n) = sum over iterations i = start..n of (t_slow(i) - t_healthy)

reaches its overhead — the ski-rental break-even: rent (suffer the slowdown) until what was
paid in rent equals the price of buying (the action's overhead). ``t_slow - t_healthy`` is
the slowdown per iteration of the job: synchronous training runs at the pace of its slowest
rank, so it is the largest ``level_s - healthy_s`` among the slow ranks. As in Algorithm 1
the impact is counted from the episode's start and compared with each overhead in turn
(S2 at 5 s, S3 at 60 s, S4 at 1,800 s of accumulated slowdown with the defaults). From the
events alone (a recording made without mitigation) the slowdown is the events' levels, as if
no action had an effect. A live loop passes ``measured``, the slowdown measured in every
iteration with the actions taken in effect: the accumulated slowdown is then the sum of
these (after S2, what S2 left, not the per-micro-batch levels S2 does not change), and the
present step the median of the last 5 measured.

Never slower. A strategy whose predicted step is not faster than the present step is
skipped and said so: S3 / S4 predict ``healthy + (1 - effectiveness) x`` the events'
slowdown (a restart starts from the even split), S2 the exact split's step for the slow DP
groups' factors with the pipeline's fill and drain (``M + pp - 1`` micro-batch slots in a
healthy step, ``m_i + pp - 1`` in replica i's).

Timing. Events carry the first iteration of the new regime (``iteration``) and the iteration
at which the detector declared it (``declared_iteration``); the planner only knows an event
from its declaration on. The break-even iteration ``n*`` (the first ``n`` with impact >=
overhead, computed exactly per constant-slowdown segment) is where the strategy switches;
when the detector declared the slowdown later than ``n*`` (the impact was already above the
overhead when it became known), the switch happens at the declaration. Until a recovery is
declared, the planner goes on as if the slowdown persisted.

Root cause (``FindStrategies``): a ``suspects`` event that flags a group ``slow_transfer``
makes the episode a communication fail-slow (S2 does not apply); otherwise computation. S2
also needs a DP group with no slow rank (with every group slow there is nothing to move).

A strategy whose expected gain is zero at its break-even (S2 when whole micro-batches
cannot absorb a slight slowdown; a strategy configured with effectiveness 0; S3 after S2
brought the step below what S3 predicts) is skipped and said so: it would cost its overhead
for nothing.

Each switch is a :class:`Decision`: when, what, why now, and the expected gain per iteration
(S2: from the exact micro-batch assignment for the slow ranks' factors, given in the
details; S3, S4: the strategy's effectiveness times the current slowdown; S3 on a
computation fail-slow carries the consolidation plan of :mod:`.topology` in its details).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stragglers.detect.events import LevelEvent, SuspectsEvent
from stragglers.errors import InputError
from stragglers.mitigate.costs import COMMUNICATION, COMPUTE, Strategy, load_costs
from stragglers.mitigate.events import EventStream, read_events
from stragglers.mitigate.rebalance import best_split, step_of
from stragglers.mitigate.topology import Move, consolidate
from stragglers.trace.io import JobMeta, read_meta

if TYPE_CHECKING:  # the what-if simulator is imported only when predictions are asked for
    from stragglers.mitigate.predict import Prediction

__all__ = ["Decision", "DecisionDetails", "Episode", "Plan", "PlannedConsolidation",
           "PlannedSplit", "Skip", "plan_files", "plan_mitigation"]

_EPS = 1e-9  # relative tolerance of the break-even test (sums of float slowdowns)


@dataclass(frozen=True)
class PlannedSplit:
    """S2's expected micro-batch assignment for the slow ranks' slowdown factors."""

    assignment: list[int]
    microbatches: int  # of the whole global batch
    group_factors: list[float]  # per DP group: its slowest rank's level_s / healthy_s
    predicted_slowdown_s_per_iter: float  # left after the assignment

    def to_dict(self) -> dict[str, object]:
        return {"assignment": list(self.assignment), "microbatches": self.microbatches,
                "group_factors": list(self.group_factors),
                "predicted_slowdown_s_per_iter": self.predicted_slowdown_s_per_iter}


@dataclass(frozen=True)
class PlannedConsolidation:
    """S3's consolidation plan (:func:`~.topology.consolidate`) of the slow ranks."""

    note: str
    moves: list[Move]
    rank_permutation: list[int]

    def to_dict(self) -> dict[str, object]:
        return {"note": self.note, "moves": [mv.to_dict() for mv in self.moves],
                "rank_permutation": list(self.rank_permutation)}


@dataclass(frozen=True)
class DecisionDetails:
    """What backs a decision: S2's assignment, S3's consolidation (computation fail-slow),
    and the what-if prediction from the job's trace when asked for."""

    split: PlannedSplit | None = None
    consolidation: PlannedConsolidation | None = None
    whatif: Prediction | None = None

    def to_dict(self) -> dict[str, object]:
        out = {} if self.split is None else self.split.to_dict()
        if self.consolidation is not None:
            out["consolidation"] = self.consolidation.to_dict()
        if self.whatif is not None:
            out["whatif"] = self.whatif.to_dict()
        return out


@dataclass(frozen=True)
class Skip:
    """A candidate strategy passed over in an episode, and why."""

    strategy: str
    why: str

    def to_dict(self) -> dict[str, str]:
        return {"strategy": self.strategy, "why": self.why}


@dataclass(frozen=True)
class Decision:
    """One step of the plan."""

    iteration: int
    strategy: str
    action: str
    why: str
    root_cause: str
    slow_ranks: tuple[int, ...]
    slow_iterations: int
    accumulated_slowdown_s: float
    overhead_s: float
    slowdown_s_per_iter: float
    expected_gain_s_per_iter: float
    expected_step_s: float
    details: DecisionDetails = field(default_factory=DecisionDetails)

    def to_dict(self) -> dict[str, object]:
        return {"iteration": self.iteration, "strategy": self.strategy, "action": self.action,
                "why": self.why, "root_cause": self.root_cause,
                "slow_ranks": list(self.slow_ranks), "slow_iterations": self.slow_iterations,
                "accumulated_slowdown_s": round(self.accumulated_slowdown_s, 6),
                "overhead_s": self.overhead_s,
                "slowdown_s_per_iter": round(self.slowdown_s_per_iter, 6),
                "expected_gain_s_per_iter": round(self.expected_gain_s_per_iter, 6),
                "expected_step_s": round(self.expected_step_s, 6),
                "details": self.details.to_dict()}


@dataclass
class Episode:
    """One fail-slow episode: from the first onset to the last recovery (or the end)."""

    start: int
    end: int | None = None
    root_cause: str = COMPUTE
    ranks: set[int] = field(default_factory=set)
    decisions: list[Decision] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    impact_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {"start": self.start, "end": self.end, "root_cause": self.root_cause,
                "ranks": sorted(self.ranks), "accumulated_slowdown_s": round(self.impact_s, 6),
                "decisions": [d.to_dict() for d in self.decisions],
                "skipped": [sk.to_dict() for sk in self.skipped]}


@dataclass
class Plan:
    """The plan for a stream of events."""

    episodes: list[Episode]
    end_iteration: int
    strategies: tuple[Strategy, ...]
    ignored_events: dict[str, int]

    @property
    def decisions(self) -> list[Decision]:
        return [d for ep in self.episodes for d in ep.decisions]

    def summary(self) -> str:
        """The plan in lines: episodes, their decisions (with the what-if prediction when
        there is one) and skipped strategies, and the events not used."""
        lines = [f"{len(self.episodes)} fail-slow episode(s), {len(self.decisions)} "
                 f"decision(s), events up to iteration {self.end_iteration}"]
        for i, ep in enumerate(self.episodes):
            end = "end of input" if ep.end is None else ep.end
            lines.append(f"episode {i}: iterations {ep.start}..{end}, {ep.root_cause}, ranks "
                         f"{sorted(ep.ranks)}, accumulated slowdown {ep.impact_s:.6g} s")
            for d in ep.decisions:
                lines.append(f"  iteration {d.iteration}: {d.strategy} {d.action}: expected "
                             f"gain {d.expected_gain_s_per_iter:.6g} s/iter (step "
                             f"{d.expected_step_s:.6g} s); {d.why}")
                w = d.details.whatif
                if w is not None:
                    lines.append(f"    what-if from the trace: step {w.before_s:.6g} s -> "
                                 f"{w.after_s:.6g} s ({w.gain * 100:.1f}% saved)")
            lines.extend(f"  {sk.strategy} skipped: {sk.why}" for sk in ep.skipped)
        if self.ignored_events:
            lines.append("events not used: " + ", ".join(
                f"{k} {v}" for k, v in self.ignored_events.items()))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return {"decisions": [d.to_dict() for d in self.decisions],
                "episodes": [ep.to_dict() for ep in self.episodes],
                "end_iteration": self.end_iteration,
                "strategies": [s.to_dict() for s in self.strategies],
                "ignored_events": self.ignored_events}


class _Planner:
    def __init__(self, meta: JobMeta, strategies: tuple[Strategy, ...],
                 microbatches: int, source: str, measured: np.ndarray | None = None) -> None:
        self.meta = meta
        # measured slowdown per iteration (live loop): cum[i] = sum of measured[:i]
        self.cum = (None if measured is None else
                    np.concatenate([[0.0], np.cumsum(np.asarray(measured, dtype=np.float64))]))
        self.candidates = sorted((s for s in strategies if s.enabled),
                                 key=lambda s: s.overhead_s)
        self.microbatches = microbatches
        self.source = source
        self.inner = meta.tp_size * meta.dsp_size  # ranks of one (dp, stage) worker
        self.slow: dict[int, tuple[float, float]] = {}  # rank -> (level_s, healthy_s)
        self.episodes: list[Episode] = []
        self.ep: Episode | None = None
        self.next_id = 0
        # constant-slowdown segments of the episode: first iteration, slowdown per
        # iteration, impact accumulated before the segment
        self.seg_from: list[int] = []
        self.seg_d: list[float] = []
        self.seg_cum: list[float] = []
        self.known = 0  # the planner knows the events declared up to here

    # -- accounting ------------------------------------------------------------------------
    def slowdown(self) -> float:
        return max((lv - h for lv, h in self.slow.values()), default=0.0)

    def impact(self, n: int) -> float:
        """Accumulated slowdown over iterations start..n of the current episode."""
        if self.cum is not None:
            assert self.ep is not None
            last = self.cum.size - 1
            return float(self.cum[min(n + 1, last)] - self.cum[min(self.ep.start, last)])
        k = bisect.bisect_right(self.seg_from, n) - 1
        if k < 0:
            return 0.0
        return self.seg_cum[k] + self.seg_d[k] * (n - self.seg_from[k] + 1)

    def break_even(self, overhead: float) -> int | None:
        """First iteration n >= start with impact(n) >= overhead (None: never, at this rate).

        ``seg_cum[k]`` (the impact before segment k) never decreases, so the segment where
        the impact crosses ``overhead`` is found by bisection, then the iteration in it by
        one division: O(log segments) per call."""
        assert self.ep is not None
        if not self.seg_from:
            return None
        tol = _EPS * max(overhead, 1.0)
        if self.cum is not None:  # measured: the first n with cum[n + 1] - cum[start] >= ...
            base = float(self.cum[min(self.ep.start, self.cum.size - 1)])
            i = int(np.searchsorted(self.cum, base + overhead - tol, side="left"))
            return max(i - 1, self.ep.start) if i < self.cum.size else None
        if overhead <= tol:
            return max(self.seg_from[0], self.ep.start)
        # last segment whose start has impact-before < overhead - tol
        k = bisect.bisect_left(self.seg_cum, overhead - tol) - 1
        while k < len(self.seg_from):
            d = self.seg_d[k]
            nxt = self.seg_from[k + 1] if k + 1 < len(self.seg_from) else None
            if d > 0:
                count = max(1, math.ceil((overhead - self.seg_cum[k]) / d - _EPS))
                if nxt is None or self.seg_from[k] + count - 1 < nxt:
                    return self.seg_from[k] + count - 1
            if nxt is None:
                return None
            k += 1  # only when the crossing lands exactly on the next segment's start
        return None

    def set_slowdown(self, at: int) -> None:
        d = self.slowdown()
        if not self.seg_from:
            self.seg_from, self.seg_d, self.seg_cum = [at], [d], [0.0]
            return
        at = max(at, self.seg_from[-1])
        if self.seg_from[-1] == at:
            self.seg_d[-1] = d
            return
        self.seg_cum.append(self.seg_cum[-1] + self.seg_d[-1] * (at - self.seg_from[-1]))
        self.seg_from.append(at)
        self.seg_d.append(d)

    # -- strategies ------------------------------------------------------------------------
    def dp_of(self, rank: int) -> int:
        return (rank // self.inner) % self.meta.dp_size

    def applicable(self, s: Strategy) -> str | None:
        """None when ``s`` applies now, else why not."""
        assert self.ep is not None
        if self.ep.root_cause not in s.causes:
            return f"does not act on a {self.ep.root_cause} fail-slow"
        if s.action == "microbatch":
            slow_groups = {self.dp_of(r) for r in self.slow}
            if self.meta.dp_size < 2:
                return "one DP group: no micro-batches to move"
            if len(slow_groups) >= self.meta.dp_size:
                return "every DP group has a slow rank: no room to move micro-batches"
        return None

    def present(self, at: int) -> float:
        """The slowdown per iteration now: the median of the last 5 measured iterations up
        to ``at`` (live), else the events' levels (a recording made without mitigation)."""
        if self.cum is None or self.ep is None:
            return self.slowdown()
        hi = min(at + 1, self.cum.size - 1)
        lo = max(min(self.ep.start, hi - 1), hi - 5, 0)
        if hi <= lo:
            return self.slowdown()
        return float(np.median(np.diff(self.cum[lo:hi + 1])))

    def expected(self, s: Strategy) -> tuple[float, DecisionDetails]:
        """Expected slowdown per iteration left after ``s`` (seconds above the healthy
        step), and its details. S3, S4: ``1 - effectiveness`` of the events' slowdown (a
        restart starts from the even split); S2: the step of the exact split for the slow
        DP groups' factors, pipeline fill and drain included (``M + pp - 1`` micro-batch
        slots in a healthy step, ``m_i + pp - 1`` in replica i's)."""
        d = self.slowdown()
        if s.action == "topology" and self.ep is not None and self.ep.root_cause == COMPUTE:
            plan = consolidate(self.meta, sorted(self.slow), source=self.source)
            return (1 - s.effectiveness) * d, DecisionDetails(
                consolidation=PlannedConsolidation(plan.note, plan.moves,
                                                   plan.rank_permutation().tolist()))
        if s.action != "microbatch":
            return (1 - s.effectiveness) * d, DecisionDetails()
        worst = max(self.slow.items(), key=lambda kv: kv[1][0] - kv[1][1])
        healthy = worst[1][1]
        factor = np.ones(self.meta.dp_size)
        for r, (lv, h) in self.slow.items():
            g = self.dp_of(r)
            factor[g] = max(factor[g], lv / h)
        total = self.microbatches * self.meta.dp_size
        pp = self.meta.pp_size
        counts = best_split(factor, total, pp, source=f"{self.source}: slowdown factors "
                            "of the DP groups (level_s / healthy_s)")
        slots = self.microbatches + pp - 1
        after = healthy * (step_of(counts, factor, pp) / slots - 1.0)
        split = PlannedSplit(counts.tolist(), total,
                             [round(float(f), 6) for f in factor], round(max(after, 0.0), 6))
        return max(after, 0.0), DecisionDetails(split=split)

    def advance(self, upto: int) -> None:
        """Apply every candidate whose break-even falls at or before iteration ``upto``."""
        while self.ep is not None and self.next_id < len(self.candidates):
            s = self.candidates[self.next_id]
            why_not = self.applicable(s)
            if why_not is not None:
                self.ep.skipped.append(Skip(s.name, why_not))
                self.next_id += 1
                continue
            n = self.break_even(s.overhead_s)
            if n is None or max(n, self.known) > upto:
                return
            at = max(n, self.known)
            acc = self.impact(at)
            if at == n:
                why = (f"accumulated slowdown {acc:.6g} s over {at - self.ep.start + 1} slow "
                       f"iterations reached the overhead {s.overhead_s:g} s at iteration {n}")
            else:
                why = (f"the slowdown became known at iteration {at} (declared late); the "
                       f"accumulated {acc:.6g} s had reached the overhead {s.overhead_s:g} s "
                       f"at iteration {n}")
            left, details = self.expected(s)
            d = self.present(at)
            gain = d - left
            healthy = max(self.slow.values(), key=lambda v: v[0] - v[1])[1]
            if gain <= _EPS * max(healthy, 1.0) and s.overhead_s > 0:
                self.ep.skipped.append(Skip(s.name, (
                    f"no expected gain at iteration {at}: its predicted step "
                    f"{healthy + left:.6g} s is not faster than the present "
                    f"{'measured ' if self.cum is not None else ''}step {healthy + d:.6g} s "
                    f"(it would cost {s.overhead_s:g} s for nothing; S2: whole micro-batches "
                    "cannot absorb this slowdown)")))
                self.next_id += 1
                continue
            self.ep.decisions.append(Decision(
                iteration=at, strategy=s.name, action=s.action, why=why,
                root_cause=self.ep.root_cause, slow_ranks=tuple(sorted(self.slow)),
                slow_iterations=at - self.ep.start + 1, accumulated_slowdown_s=acc,
                overhead_s=s.overhead_s, slowdown_s_per_iter=d,
                expected_gain_s_per_iter=gain, expected_step_s=healthy + left,
                details=details))
            self.next_id += 1

    # -- events ----------------------------------------------------------------------------
    def level(self, ev: LevelEvent, line: int) -> None:
        if ev.rank >= self.meta.world_size:
            raise InputError(f"{self.source}:{line}: field 'rank': rank {ev.rank} is outside "
                             f"the job's world_size {self.meta.world_size}")
        level, healthy = ev.level_s, ev.healthy_s
        assert level is not None and healthy is not None  # checked by add_event
        self.advance(ev.declared_iteration - 1)
        self.known = max(self.known, ev.declared_iteration)
        slow_now = ev.kind in ("onset", "change", "flapping") and level > healthy
        if slow_now:
            if self.ep is None:
                self.ep = Episode(start=ev.iteration)
                self.episodes.append(self.ep)
                self.next_id = 0
                self.seg_from, self.seg_d, self.seg_cum = [], [], []
            self.slow[ev.rank] = (level, healthy)
            self.ep.ranks.add(ev.rank)
            self.set_slowdown(ev.iteration)
        elif ev.rank in self.slow:
            del self.slow[ev.rank]
            assert self.ep is not None
            self.set_slowdown(ev.iteration)
            if not self.slow:
                self.close(ev.iteration - 1)
                return
        self.advance(self.known)

    def close(self, end: int) -> None:
        assert self.ep is not None
        self.ep.end = max(end, self.ep.start)
        self.ep.impact_s = self.impact(self.ep.end)
        self.ep = None

    def suspects(self, ev: SuspectsEvent) -> None:
        if self.ep is not None and "slow_transfer" in ev.verdicts:
            self.ep.root_cause = COMMUNICATION


def plan_mitigation(stream: EventStream, meta: JobMeta, strategies: tuple[Strategy, ...],
                    microbatches: int = 8, source: str = "<events>",
                    measured: np.ndarray | None = None) -> Plan:
    """The plan for ``stream`` (see the module docstring). ``microbatches`` is the number of
    micro-batches per DP group per step of the healthy job (for S2). ``measured`` (the live
    loop): the slowdown measured in each iteration (seconds above a healthy step, >= 0,
    index = iteration): the accumulated slowdown and the present step are then these, with
    every action taken so far in effect, not the events' levels."""
    if microbatches < 1:
        raise InputError(f"--microbatches: expected an integer >= 1, got {microbatches}")
    if measured is not None and not np.all(np.asarray(measured) >= 0):
        raise ValueError("plan_mitigation: measured slowdowns must be finite and >= 0")
    planner = _Planner(meta, strategies, microbatches, source, measured)
    last = 0
    for line, ev in stream.events:
        if isinstance(ev, LevelEvent):
            planner.level(ev, line)
            last = max(last, ev.declared_iteration)
        else:
            planner.suspects(ev)
    end = stream.end_iteration if stream.end_iteration is not None else last
    end = max(end, last)
    planner.advance(end)
    if planner.ep is not None:
        planner.close(end)
    return Plan(episodes=planner.episodes, end_iteration=end, strategies=strategies,
                ignored_events=dict(sorted(stream.ignored.items())))


def plan_files(events: str | Path, meta: str | Path, costs: str | Path | None = None,
               microbatches: int = 8, trace: str | Path | None = None) -> Plan:
    """``mitigate plan``: the plan for the watch events of the file ``events``, for the job of
    the metadata file ``meta``, with the strategies' overheads of ``costs`` (the defaults when
    None); with ``trace``, each S2 / S3 decision carries its what-if prediction from it."""
    job = read_meta(meta)
    strategies = load_costs(costs)
    plan = plan_mitigation(read_events(events), job, strategies, microbatches=microbatches,
                           source=str(events))
    if trace is not None:
        from stragglers.mitigate.predict import predict_plan  # the simulator, when asked for

        predict_plan(plan, trace, meta)
    return plan
