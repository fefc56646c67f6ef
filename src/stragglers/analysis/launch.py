"""Launch attribution (whatif-model.md §5, the published analyzer's ``launch_decompose``):
whose launch delays — time on the host that the trace's ops do not show (a slow data loader,
a late step start, Python stalls) — make the job slower than its recorded work explains.

For each group G of ops (a DP rank, a stage, an op type with each step's first op relabelled
``first-op``, and a few candidate workers) the no-delay timeline is simulated again with G's
launch delays put back: ``S^launch_G`` = that mean step time / the mean no-delay step time
(also per step). Computed when the simulation discrepancy is at least 1.03, as published.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from stragglers.analysis.engine import WhatIfEngine
from stragglers.analysis.grouped import sum_by
from stragglers.analysis.healthy import blame_beyond_noise
from stragglers.analysis.workers import Worker
from stragglers.sim import simulate
from stragglers.sim.simulator import BATCH_BYTES
from stragglers.trace import schema

#: Launch attribution is computed from this simulation discrepancy on (§5, as published).
LAUNCH_THRESHOLD = 1.03
#: DP ranks simulated one by one (each is a simulation of every DP rank: the cost grows with
#: the square of dp). Beyond this many, the ranks with the most host time per step are
#: simulated and the others are left out of ``launch_attribution.dp_rank`` (and said).
MAX_DP_RANKS = 64
#: The step's first op (data loading, batch preparation) as an attribution key.
FIRST_OP = "first-op"
#: Candidate workers for the per-worker launch attribution: DP ranks and stages whose own
#: launch excess is at least this share of the largest one, at most ``MAX_CANDIDATES`` each.
CANDIDATE_SHARE = 0.25
MAX_CANDIDATES = 4


def _frozen(a: np.ndarray) -> np.ndarray:
    v = np.asarray(a).view()
    v.setflags(write=False)
    return v


@dataclass(frozen=True)
class LaunchGroup:
    """Ops whose launch delays are put back: op identities ``nodes`` (None: all) on DP
    ranks ``dp_ranks`` (None: all)."""

    name: str
    nodes: np.ndarray | None = None
    dp_ranks: np.ndarray | None = None


@dataclass(frozen=True)
class LaunchAttribution:
    """Step times (n_steps,) with one group's launch delays put back into the no-delay
    timeline: ``dp`` (dp, n_steps), ``stage`` (pp, n_steps), ``optype`` by attribution key
    (``first-op`` included), ``worker`` for the candidate workers only."""

    nodelay: np.ndarray
    actual: np.ndarray
    dp: np.ndarray
    stage: np.ndarray
    optype: Mapping[str, np.ndarray]
    worker: Mapping[Worker, np.ndarray]
    #: (dp, pp, n_steps): each worker's launch delays summed per step (its host time).
    host_seconds: np.ndarray
    #: The DP ranks of the rows of ``dp`` (all of them, in order, up to
    #: :data:`MAX_DP_RANKS`; else the ones with the most host time).
    dp_ranks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Step times with only the launch delays of the ops that wait for nothing in the step
    #: (each worker's step start: its first op, where ``first-op`` is a later one, e.g. a
    #: collective before the forward) put back; an addition of ours, not published.
    step_start: np.ndarray | None = None

    def stands_out(self, kind: str, key: str) -> bool:
        """Whether a group's own host time per step exceeds its peers' beyond the noise, as a
        blamed worker's work must (:func:`~stragglers.analysis.healthy.blame_beyond_noise`:
        a paired one-sided t-test over the steps and at least the peers' step-to-step
        spread): a worker against its stage's other
        DP ranks, a DP rank against the others, a stage against the others; DP ranks or
        stages named together (``key`` "0,2": late together, :func:`critical_group`) as one,
        their mean against the others. True where there are no peers (one worker, one step,
        or every DP rank or stage in the group)."""
        h = self.host_seconds
        dp, pp, ns = h.shape
        if kind == "worker":
            d, s = (int(x) for x in key.split(","))
            if dp < 2:
                return self.stands_out("stage", str(s))
            return bool(blame_beyond_noise(h[:, s][None])[0, d]) if ns > 1 else True
        if kind in ("dp_rank", "stage"):
            return _members_stand_out(h.sum(axis=1 if kind == "dp_rank" else 0),
                                      [int(x) for x in key.split(",")])
        return True

    def s_of(self, times: np.ndarray) -> np.ndarray:
        """S^launch of step times: mean over the last axis / mean no-delay step time."""
        return np.asarray(times.mean(axis=-1) / self.nodelay.mean())

    @property
    def s_dp(self) -> np.ndarray:
        """S^launch of the rows of ``dp`` (DP ranks ``dp_ranks``)."""
        return self.s_of(self.dp)

    @property
    def s_dp_by_rank(self) -> dict[int, float]:
        """S^launch by DP rank, for the DP ranks simulated."""
        return {int(d): float(x) for d, x in zip(self.dp_ranks, self.s_dp, strict=True)}

    @property
    def s_stage(self) -> np.ndarray:
        return self.s_of(self.stage)

    @property
    def s_optype(self) -> dict[str, float]:
        return {k: float(self.s_of(v)) for k, v in self.optype.items()}

    @property
    def s_worker(self) -> dict[Worker, float]:
        return {w: float(self.s_of(v)) for w, v in self.worker.items()}


def first_op_nodes(engine: WhatIfEngine) -> np.ndarray:
    """(n_nodes,) bool: each stage's first op of the step, as the published analyzer
    relabels it: ``forward-compute`` seq 0 on stage 0, ``forward-recv`` seq 0 on the later
    stages."""
    t = engine.table
    fc, fr = schema.OPTYPE_CODE[schema.FORWARD_COMPUTE], schema.OPTYPE_CODE[schema.FORWARD_RECV]
    first_stage = (t.node_stage == 0) & (t.node_optype == fc)
    later = (t.node_stage > 0) & (t.node_optype == fr)
    return np.asarray((first_stage | later) & (t.node_seq == 0))


def launch_keys(engine: WhatIfEngine) -> np.ndarray:
    """Launch attribution key of every op identity: its attribution key (P2P types merged per
    direction), or ``first-op``."""
    keys = np.array([schema.ATTRIBUTION_TYPE[t] for t in schema.OPTYPES], dtype=object)
    out = keys[engine.table.node_optype]
    out[first_op_nodes(engine)] = FIRST_OP
    return np.asarray(out)


def simulate_launch(engine: WhatIfEngine, groups: Sequence[LaunchGroup]) -> dict[str, np.ndarray]:
    """Step times (n_steps,) of each group's scenario: original values, only the group's
    launch delays, every DP rank; in memory-bounded batches."""
    n, dp, ns = engine.n_nodes, engine.dp, engine.n_steps
    value, delay = engine.derived.value, engine.derived.delay
    per_scenario = (n + 2) * dp * ns * 8 * 3  # end times, starts of a level, delays of a level
    chunk = max(1, int(BATCH_BYTES // max(per_scenario, 1)))
    out: dict[str, np.ndarray] = {}
    for lo in range(0, len(groups), chunk):
        part = groups[lo:lo + chunk]
        b = len(part)
        node_mask = np.ones((n, b), dtype=bool)
        dp_mask = np.ones((b, dp), dtype=bool)
        for i, g in enumerate(part):
            if g.nodes is not None:
                node_mask[:, i] = g.nodes
            if g.dp_ranks is not None:
                dp_mask[i] = g.dp_ranks

        def values(idx: np.ndarray) -> np.ndarray:
            return np.asarray(value[idx][:, None])

        def delays(idx: np.ndarray, node_mask: np.ndarray = node_mask,
                   dp_mask: np.ndarray = dp_mask) -> np.ndarray:
            mask = node_mask[idx][:, :, None, None] & dp_mask[None, :, :, None]
            return np.where(mask, delay[idx][:, None], 0.0)

        times = simulate(engine.order, values, (b, dp, ns), delays=delays).step_time
        for g, t in zip(part, times, strict=True):
            out[g.name] = t
    return out


def simulated_dp_ranks(host_per_rank: np.ndarray) -> np.ndarray:
    """The DP ranks whose launch delays are simulated one by one: all of them up to
    :data:`MAX_DP_RANKS`, else that many with the most host seconds per step (in rank
    order)."""
    dp = len(host_per_rank)
    if dp <= MAX_DP_RANKS:
        return np.arange(dp)
    top = np.argsort(-host_per_rank, kind="stable")[:MAX_DP_RANKS]
    return np.sort(top)


def _candidates(excess: np.ndarray) -> list[int]:
    """Indices whose launch excess is at least :data:`CANDIDATE_SHARE` of the largest
    positive one, largest first, at most :data:`MAX_CANDIDATES`."""
    top = float(excess.max(initial=0.0))
    if top <= 0:
        return []
    order = np.argsort(-excess, kind="stable")
    return [int(i) for i in order[:MAX_CANDIDATES] if excess[i] >= CANDIDATE_SHARE * top]


def compute_launch(engine: WhatIfEngine, nodelay: np.ndarray, actual: np.ndarray
                   ) -> LaunchAttribution:
    """Launch attribution by DP rank, stage, op type (``first-op`` included) and candidate
    worker (the DP ranks × stages that stand out, :func:`_candidates`)."""
    dp, pp = engine.dp, engine.pp
    stage = engine.table.node_stage
    keys = launch_keys(engine)
    present = [k for k in (FIRST_OP, *dict.fromkeys(schema.ATTRIBUTION_TYPE.values()))
               if bool(np.any(keys == k))]
    host = sum_by(engine.derived.delay, stage, pp)
    ranks = simulated_dp_ranks(host.sum(axis=0).mean(axis=1))
    groups = [LaunchGroup(f"dp_rank {d}", dp_ranks=np.arange(dp) == d) for d in ranks]
    groups += [LaunchGroup(f"stage {s}", nodes=stage == s) for s in range(pp)]
    groups += [LaunchGroup(f"optype {k}", nodes=keys == k) for k in present]
    roots = np.array([not d for d in engine.graph.deps], dtype=bool)
    groups.append(LaunchGroup("step start", nodes=roots))
    times = simulate_launch(engine, groups)
    by_dp = np.stack([times[f"dp_rank {d}"] for d in ranks])
    by_stage = np.stack([times[f"stage {s}"] for s in range(pp)])
    base = nodelay.mean()
    row = {int(d): i for i, d in enumerate(ranks)}
    workers = [Worker(int(ranks[i]), s) for i in _candidates(by_dp.mean(axis=1) / base - 1.0)
               for s in _candidates(by_stage.mean(axis=1) / base - 1.0)]
    worker_times: dict[Worker, np.ndarray] = {}
    if pp == 1 or dp == 1:  # a worker is a whole DP rank or a whole stage: no new scenario
        for w in workers:
            worker_times[w] = by_dp[row[w.dp_rank]] if pp == 1 else by_stage[w.stage]
    elif workers:
        wtimes = simulate_launch(engine, [
            LaunchGroup(f"worker {w.key}", nodes=stage == w.stage,
                        dp_ranks=np.arange(dp) == w.dp_rank) for w in workers])
        worker_times = {w: _frozen(wtimes[f"worker {w.key}"]) for w in workers}
    return LaunchAttribution(
        host_seconds=_frozen(host.transpose(1, 0, 2)), step_start=_frozen(times["step start"]),
        nodelay=nodelay, actual=actual, dp=_frozen(by_dp), dp_ranks=_frozen(ranks),
        stage=_frozen(by_stage),
        optype=MappingProxyType({k: _frozen(times[f"optype {k}"]) for k in present}),
        worker=MappingProxyType(worker_times))


#: A group more specific than the best one (a worker rather than its DP rank or stage) is
#: named when it explains at least this share of what the best one explains.
SPECIFIC_SHARE = 0.9


@dataclass(frozen=True)
class HostGroup:
    """The ops whose launch delays explain the most of the discrepancy: ``kind`` is
    ``worker``, ``dp_rank``, ``stage`` or ``first-op`` (the step's first op on every worker);
    ``times`` (n_steps,) the step times with only its launch delays put back."""

    kind: str
    key: str
    workers: tuple[Worker, ...]
    times: np.ndarray

    def explained(self, la: LaunchAttribution, index: np.ndarray | None = None) -> np.ndarray:
        """Seconds per step its launch delays add to the no-delay timeline (over the steps of
        each row of ``index``, or all steps)."""
        if index is None:
            index = np.arange(len(self.times))[None, :]
        return np.asarray(self.times[index].mean(axis=1) - la.nodelay[index].mean(axis=1))

    def share(self, la: LaunchAttribution) -> float:
        """Share of the discrepancy's excess it explains (bounded to [0, 1])."""
        gap = float(la.actual.mean() - la.nodelay.mean())
        if gap <= 0:
            return 0.0
        return min(1.0, max(0.0, float(self.explained(la)[0]) / gap))

    def residual(self, la: LaunchAttribution) -> float:
        """The discrepancy left when only its launch delays are put back: mean actual step
        time / mean step time with them."""
        return float(la.actual.mean() / self.times.mean())


def _members_stand_out(x: np.ndarray, members: list[int]) -> bool:
    """Whether ``members`` (rows of ``x``, (n, n_steps) per-step host seconds), as one,
    stand out from the other rows (:func:`~stragglers.analysis.healthy.blame_beyond_noise`
    on their mean per step and each other row); True with no other row or one step."""
    n, ns = x.shape
    others = np.setdiff1d(np.arange(n), members)
    if others.size == 0 or ns < 2:
        return True
    rows = np.vstack([x[members].mean(axis=0)[None], x[others]])
    return bool(blame_beyond_noise(rows[None])[0, 0])


def _groups(la: LaunchAttribution, dp: int, pp: int) -> list[HostGroup]:
    """The candidate workers, and with dp > 1 and pp > 1 every DP rank and every stage, as
    groups; never a group of every worker (with one worker, none): a host straggler is
    a part of the job whose host time its peers do not have."""
    if dp * pp < 2:
        return []
    groups = [HostGroup("worker", w.key, (w,), t) for w, t in la.worker.items()]
    if pp > 1 and dp > 1:
        groups += [HostGroup("dp_rank", str(int(d)), tuple(Worker(int(d), s) for s in range(pp)),
                             la.dp[i]) for i, d in enumerate(la.dp_ranks)]
        groups += [HostGroup("stage", str(s), tuple(Worker(d, s) for d in range(dp)),
                             la.stage[s]) for s in range(pp)]
    return groups


def _pick(groups: list[HostGroup], la: LaunchAttribution) -> HostGroup | None:
    """The group whose launch delays add the most time (the most specific of those within
    :data:`SPECIFIC_SHARE` of it); None when none adds any."""
    if not groups:
        return None
    gain = np.array([float(g.times.mean()) for g in groups]) - float(la.nodelay.mean())
    best = float(gain.max())
    if best <= 0:
        return None
    rank = {"worker": 0, "dp_rank": 1, "stage": 1}
    near = [i for i in range(len(groups)) if gain[i] >= SPECIFIC_SHARE * best]
    top = groups[min(near, key=lambda i: (rank[groups[i].kind], -gain[i]))]
    # Others of its kind whose delays alone do about as much (two slow loaders that are
    # late together: either one alone slows the job as much as both) are named with it.
    alike = [groups[i] for i in sorted(near, key=lambda i: -gain[i])
             if groups[i].kind == top.kind and groups[i] is not top]
    if not alike:
        return top
    workers = tuple(dict.fromkeys(w for g in (top, *alike) for w in g.workers))
    return HostGroup(top.kind, ",".join(g.key for g in (top, *alike)) if top.kind != "worker"
                     else top.key, workers, top.times)


def host_group(la: LaunchAttribution, dp: int, pp: int) -> HostGroup | None:
    """Of the workers, DP ranks and stages whose own host time per step stands out from
    their peers' (:meth:`LaunchAttribution.stands_out`), the one whose launch delays alone
    explain the most of the discrepancy (the most specific of those within
    :data:`SPECIFIC_SHARE` of the best); None when none stands out or slows the job. Host
    time that every worker has alike is common overhead, not a straggler, even where only
    the critical path's share of it counts."""
    return _pick([g for g in _groups(la, dp, pp) if la.stands_out(g.kind, g.key)], la)


def critical_group(la: LaunchAttribution, dp: int, pp: int) -> HostGroup | None:
    """The group whose launch delays add the most time, whether or not its host time stands
    out (where common overhead counts: on the critical path)."""
    return _pick(_groups(la, dp, pp), la)


def first_op_group(la: LaunchAttribution, dp: int, pp: int) -> HostGroup | None:
    """The step's start on every worker as a group: the published ``first-op`` or the ops
    that wait for nothing in the step (:attr:`LaunchAttribution.step_start`), whichever
    explains more (None when the trace has neither)."""
    everyone = tuple(Worker(d, s) for d in range(dp) for s in range(pp))
    options = [t for t in (la.optype.get(FIRST_OP), la.step_start) if t is not None]
    if not options:
        return None
    return HostGroup(FIRST_OP, FIRST_OP, everyone, max(options, key=lambda t: float(t.mean())))


#: Host time is common to every DP rank when no group stands out and the largest DP rank's
#: host seconds per step are at most this times the smallest's.
COMMON_RATIO = 2.0


def common_overhead(la: LaunchAttribution, dp: int, pp: int) -> HostGroup | None:
    """Every worker as one group when the host time is common overhead: no worker, DP rank
    or stage stands out from its peers (:func:`host_group` finds none) and the DP ranks'
    host seconds per step are within :data:`COMMON_RATIO` of each other. Such gaps slow the
    job (those on the critical path) but blame nobody. None otherwise."""
    if host_group(la, dp, pp) is not None:
        return None
    per_rank = la.host_seconds.sum(axis=1).mean(axis=1)  # (dp,)
    low, high = float(per_rank.min()), float(per_rank.max())
    if dp > 1 and (low <= 0 or high > COMMON_RATIO * low):
        return None
    everyone = tuple(Worker(d, s) for d in range(dp) for s in range(pp))
    return HostGroup("common", "every worker", everyone, la.actual)


def located(la: LaunchAttribution | None, dp: int, pp: int, limit: float) -> HostGroup | None:
    """What accounts for the discrepancy, or None: a group whose launch delays alone leave
    at most ``limit`` of it (relative) — one worker / DP rank / stage whose host time stands
    out (a host straggler), or the step's first op on every worker (slow data loading
    everywhere) — or host time common to every worker (:func:`common_overhead`)."""
    if la is None:
        return None
    for g in (host_group(la, dp, pp), first_op_group(la, dp, pp)):
        if g is not None and g.residual(la) <= 1.0 + limit:
            return g
    return common_overhead(la, dp, pp)
