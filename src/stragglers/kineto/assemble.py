"""The job-wide part of the import: worker positions, communication types, complete steps,
clock alignment, seq_id/mb_id, and the trace columns.

* Each rank's position comes from :mod:`stragglers.kineto.layout`; ranks with a TP/CP index
  other than 0 are not used (their worker is represented by TP/CP index 0). The layout is
  first checked against the traces (:mod:`stragglers.kineto.consistency`).
* A communication op's type: ``all_gather`` in the DP group → ``params-all-gather``;
  ``reduce_scatter`` or ``all_reduce`` in the DP group → ``grads-reduce-scatter`` (DDP's
  bucketed gradient all-reduce is the job's DP gradient reduction); ``all_reduce`` over every
  rank (when that is not the DP group) → ``optimizer-clip-main-grad``; ``all_reduce`` in the
  group of the first and last stage of one DP rank → ``embedding-grads-all-reduce``;
  ``send``/``recv`` with a known peer (``Src Rank``/``Dst Rank``, global ranks): to a later stage
  ``forward-send`` / from a later stage ``backward-recv``, to an earlier stage
  ``backward-send`` / from an earlier stage ``forward-recv``; ``all_to_all`` in the DP group
  launched inside a forward/backward annotation → ``all-to-all`` (extension E2; the
  annotation is cut there, :mod:`stragglers.kineto.rankops`). A group is identified by its
  ranks (``Process Group Ranks``), else by its size; without either, it is the DP group only
  when the DP group is the whole job (pp = tp = cp = 1). Anything else (tensor-parallel
  collectives, broadcasts, all-to-all, barriers, P2P without a peer) is counted, by kind and
  group, and not used.
* A step is used when every worker has it complete. A step of a rank without the optimizer op
  that its other steps have (the last ``ProfilerStep``, cut by the end of profiling) is
  dropped and reported; a step complete on some workers and missing on others is an error.
* Clocks: every file's times are put on one clock first: Kineto writes them as microseconds
  after the file's ``baseTimeNanoseconds``, which is the same on every rank unless the job
  started across Kineto's rounding boundary; the ranks with a later base are shifted by the
  difference (reported). Then, when the rank files come from different hosts
  (``host_name``), each host's clock is shifted by the median difference of the ends of the
  DP collectives, clip all-reduces and all-to-alls it shares with the first host (a
  collective ends at the same moment on all its members); a host that shares none is
  reported, not shifted. Nothing re-bases a rank or a step: each op keeps its time on that
  clock, so a rank that starts a step late (data loading, a slow host) starts its first op
  late, which the model reads as that op's launch delay (its start − the step's earliest
  start over all ranks).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from stragglers.errors import InputError
from stragglers.kineto.consistency import check_layout
from stragglers.kineto.layout import CLASSES as _CLASSES
from stragglers.kineto.layout import JobLayout, Position, position
from stragglers.kineto.rankops import UNRESOLVED, RankOps, base_offsets_us
from stragglers.kineto.reader import COMM_CODE, COMM_KINDS
from stragglers.limits import LIMITS, limit
from stragglers.trace import schema
from stragglers.trace.io import JobMeta, TraceColumns

_OC = schema.OPTYPE_CODE


@dataclass
class ImportReport:
    """What the import did: counts of everything not turned into an op, and why."""

    files: int = 0
    ranks_used: list[int] = field(default_factory=list)
    ranks_collapsed: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    dropped_steps: dict[int, list[int]] = field(default_factory=dict)  # step -> ranks
    ops: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    clock_shift_s: dict[str, float] = field(default_factory=dict)
    #: seconds added to the times of ranks whose baseTimeNanoseconds is later than the
    #: smallest (rank -> s; only ranks with a shift)
    base_shift_s: dict[int, float] = field(default_factory=dict)
    #: hosts whose clock could not be aligned (no collective shared with the first host)
    unaligned_hosts: list[str] = field(default_factory=list)
    segmented_ranks: list[int] = field(default_factory=list)
    position_source: str = ""
    #: seconds of CPU-timed compute annotations spent in communication (not compute), per
    #: rank (only ranks with some)
    comm_in_compute_s: dict[int, float] = field(default_factory=dict)
    #: communication calls without NCCL kernels timed on the GPU by their device<->host
    #: copies, per rank (only ranks with some)
    copy_timed: dict[int, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [f"read {self.files} rank file(s); workers from ranks "
               f"{_ranges(self.ranks_used)} ({self.position_source})"]
        if self.ranks_collapsed:
            out.append(f"tensor/context-parallel ranks {_ranges(self.ranks_collapsed)} "
                       "collapsed into their worker (TP/CP index 0 used)")
        out.append(f"steps {_ranges(self.steps)}: {self.ops:,} ops")
        for step, ranks in sorted(self.dropped_steps.items()):
            out.append(f"step {step} dropped: truncated (no optimizer op) on rank(s) "
                       f"{_ranges(ranks)}")
        if self.segmented_ranks:
            out.append(f"no forward/backward annotations on rank(s) "
                       f"{_ranges(self.segmented_ranks)}: compute segmented between P2P "
                       "kernels, backward = autograd thread")
        if self.comm_in_compute_s:
            out.append(f"CPU-timed compute on rank(s) {_ranges(sorted(self.comm_in_compute_s))}"
                       f": {sum(self.comm_in_compute_s.values()) * 1e3:,.3f} ms in "
                       "communication on its thread (collective calls, waits) not counted "
                       "as compute")
        if self.copy_timed:
            out.append(f"communication without NCCL kernels on rank(s) "
                       f"{_ranges(sorted(self.copy_timed))}: {sum(self.copy_timed.values()):,} "
                       "calls timed on the GPU by their device<->host copies (CUDA tensors "
                       "through the host, e.g. gloo): from the end of the copies to the host "
                       "to the end of the copies back")
        by_shift: dict[float, list[int]] = {}
        for rank, shift in sorted(self.base_shift_s.items()):
            by_shift.setdefault(shift, []).append(rank)
        for shift, ranks in sorted(by_shift.items()):
            out.append(f"times of rank(s) {_ranges(ranks)} put on the job's clock: "
                       f"{shift:+.6f} s (baseTimeNanoseconds later than the earliest file's)")
        for host, shift in self.clock_shift_s.items():
            out.append(f"clock of host {host} shifted by {shift * 1e3:+.3f} ms")
        for host in self.unaligned_hosts:
            out.append(f"clock of host {host} not aligned: it shares no DP collective, clip "
                       "all-reduce or all-to-all with the first host (times taken as they are)")
        for what, n in sorted(self.counts.items()):
            out.append(f"not used: {n:,} {what}")
        return out


def _ranges(values: list[int]) -> str:
    v = sorted(set(values))
    if not v:
        return "none"
    parts, a, b = [], v[0], v[0]
    for x in v[1:]:
        if x == b + 1:
            b = x
            continue
        parts.append(f"{a}" if a == b else f"{a}-{b}")
        a = b = x
    parts.append(f"{a}" if a == b else f"{a}-{b}")
    return ",".join(parts)




def _resolve_comm(ops: RankOps, lay: JobLayout, counts: Counter[str]) -> np.ndarray:
    """Schema type codes of the rank's communication ops (-1: not mapped), vectorised."""
    optype = ops.optype.copy()
    todo = np.flatnonzero(optype == UNRESOLVED)
    if not todo.size:
        return optype
    group_cls = np.array([_CLASSES.index(lay.group_class(g)) for g in ops.groups] +
                         [_CLASSES.index(lay.group_class(None))], dtype=np.int64)
    g = ops.group[todo]
    cls = group_cls[np.where(g >= 0, g, len(ops.groups))]
    kind = ops.comm[todo].astype(np.int64)
    peer = ops.peer[todo]
    own_stage = lay.stage[ops.rank]
    has_peer = (peer >= 0) & (peer < lay.stage.size)
    later = np.where(has_peer, lay.stage[np.clip(peer, 0, lay.stage.size - 1)] > own_stage,
                     False)
    send, recv = kind == COMM_CODE["send"], kind == COMM_CODE["recv"]
    p2p = send | recv | (kind == COMM_CODE["sendrecv"])
    dp, world, emb = cls == 1, cls == 2, cls == 3
    allreduce = kind == COMM_CODE["allreduce"]
    in_compute = (ops.a2a_in_compute[todo] if ops.a2a_in_compute.size == optype.size
                  else np.zeros(todo.size, bool))
    conds = [send & has_peer & later, send & has_peer & ~later,
             recv & has_peer & later, recv & has_peer & ~later,
             ~p2p & dp & (kind == COMM_CODE["allgather"]),
             ~p2p & dp & ((kind == COMM_CODE["reducescatter"]) | allreduce),
             ~p2p & world & allreduce, ~p2p & emb & allreduce,
             dp & (kind == COMM_CODE["alltoall"]) & in_compute]
    codes = [_OC[t] for t in (schema.FORWARD_SEND, schema.BACKWARD_SEND, schema.BACKWARD_RECV,
                              schema.FORWARD_RECV, schema.PARAMS_ALL_GATHER,
                              schema.GRADS_REDUCE_SCATTER, schema.CLIP,
                              schema.EMBEDDING_ALL_REDUCE, schema.ALL_TO_ALL)]
    code = np.select(conds, codes, default=-1)
    optype[todo] = code
    miss = code < 0
    no_peer = miss & p2p
    for k in np.unique(kind[no_peer]).tolist():
        what = ("sendrecv calls (batched P2P: direction unknown)" if k == COMM_CODE["sendrecv"]
                else f"{COMM_KINDS[k]} calls without a peer rank")
        counts[what] += int((kind[no_peer] == k).sum())
    other = miss & ~p2p
    pairs, n = np.unique(np.stack([kind[other], cls[other]]), axis=1, return_counts=True)
    for (k, c), count in zip(pairs.T.tolist(), n.tolist(), strict=True):
        counts[f"{COMM_KINDS[k]} calls in group class {_CLASSES[c]!r} (not a schema op)"] \
            += count
    return optype


def assemble(all_ops: list[RankOps], meta: JobMeta, source: str,
             steps: tuple[int, int] | None = None) -> tuple[TraceColumns, ImportReport]:
    """Combine the ranks' ops into one trace (see the module docstring for the rules)."""
    report = ImportReport(files=len(all_ops))
    known: dict[int, Position] = {}
    by_rank: dict[int, RankOps] = {}
    for ops in all_ops:
        if ops.rank in by_rank:
            raise InputError(f"{ops.path}: distributedInfo field 'rank' {ops.rank} is also the "
                             f"rank of {by_rank[ops.rank].path}")
        if ops.world_size is not None and ops.world_size != meta.world_size:
            raise InputError(f"{ops.path}: distributedInfo field 'world_size' "
                             f"{ops.world_size} != the metadata's world_size {meta.world_size}")
        by_rank[ops.rank] = ops
        known[ops.rank] = position(ops.rank, ops.pg_config, meta, ops.path)
    report.position_source = ", ".join(sorted({p.source for p in known.values()}))
    lay = JobLayout(meta, known)
    check_layout(by_rank, known, lay, meta)
    reps: dict[tuple[int, int], RankOps] = {}
    for rank, ops in sorted(by_rank.items()):
        p = known[rank]
        if p.inner != 0 or ops.skipped:
            report.ranks_collapsed.append(rank)
            continue
        reps[(p.dp_rank, p.stage)] = ops
        report.ranks_used.append(rank)
    missing = [(d, s) for s in range(meta.pp_size) for d in range(meta.dp_size)
               if (d, s) not in reps]
    if missing:
        d, s = missing[0]
        example = int(np.flatnonzero((lay.dp == d) & (lay.stage == s) & (lay.inner == 0))[0])
        raise InputError(f"{source}: incomplete job: no trace of {len(missing)} of "
                         f"{meta.n_workers} workers (dp_size {meta.dp_size} x pp_size "
                         f"{meta.pp_size}), e.g. dp rank {d}, stage {s} (rank {example}); "
                         "--partial writes a per-rank report of the traced ranks")
    # types, complete steps
    per: dict[tuple[int, int], tuple[RankOps, np.ndarray]] = {}
    step_sets: dict[tuple[int, int], set[int]] = {}
    opt = _OC[schema.OPTIMIZER]
    for key, ops in reps.items():
        report.counts.update(ops.counts)
        if ops.segmented:
            report.segmented_ranks.append(ops.rank)
        if ops.comm_in_compute_us > 0:
            report.comm_in_compute_s[ops.rank] = ops.comm_in_compute_us / 1e6
        if ops.copy_timed:
            report.copy_timed[ops.rank] = ops.copy_timed
        code = _resolve_comm(ops, lay, report.counts)
        per[key] = (ops, code)
        with_opt = set(np.unique(ops.step[code == opt]).tolist())
        all_steps = set(ops.steps.tolist())
        if not all_steps:
            raise InputError(f"{ops.path}: no ProfilerStep#N range: record the trace with a "
                             "profiler schedule (torch.profiler.schedule) and prof.step()")
        complete = with_opt if with_opt else all_steps
        for st in sorted(all_steps - complete):
            report.dropped_steps.setdefault(st, []).append(ops.rank)
        step_sets[key] = complete
    common = set.intersection(*step_sets.values())
    for key, have in step_sets.items():
        extra = have - common
        if extra:
            st = min(extra)
            lacking = next(k for k, v in step_sets.items() if st not in v)
            raise InputError(f"{source}: incomplete job: step {st} is complete on rank "
                             f"{per[key][0].rank} but missing on rank {per[lacking][0].rank} "
                             f"(dp rank {lacking[0]}, stage {lacking[1]})")
    if steps is not None:
        common = {s for s in common if steps[0] <= s <= steps[1]}
    if not common:
        raise InputError(f"{source}: no step is complete on every worker"
                         + (f" in --steps {steps[0]}-{steps[1]}" if steps else ""))
    report.steps = sorted(common)
    step_list = np.array(sorted(common))
    cols: dict[str, list[np.ndarray]] = {k: [] for k in
                                        ("dp", "stage", "rank", "step", "optype", "start",
                                         "end", "mb", "host")}
    hosts: list[str] = []
    offset = base_offsets_us([ops for ops, _ in per.values()])
    report.base_shift_s = {r: v * 1e-6 for r, v in offset.items() if v}
    for (d, s), (ops, code) in sorted(per.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        use = (code >= 0) & np.isin(ops.step, step_list)
        n_out = int(((code >= 0) & ~use).sum())
        if n_out:
            report.counts["ops of dropped or unselected steps"] += n_out
        n = int(use.sum())
        cols["dp"].append(np.full(n, d))
        cols["stage"].append(np.full(n, s))
        cols["rank"].append(np.full(n, ops.rank))
        cols["step"].append(ops.step[use])
        cols["optype"].append(code[use])
        cols["start"].append(ops.start[use] + offset[ops.rank])
        cols["end"].append(ops.end[use] + offset[ops.rank])
        cols["mb"].append(ops.mb[use])
        host = ops.host or ""
        if host not in hosts:
            hosts.append(host)
        cols["host"].append(np.full(n, hosts.index(host)))
    c = {k: np.concatenate(v) for k, v in cols.items()}
    start_s = c["start"] * 1e-6
    span = c["end"] - c["start"]
    n_neg = int(np.count_nonzero(span < 0))
    if n_neg:  # the input's durations are not negative (reader): a computed op's pieces
        report.counts["ops whose computed end precedes their start (written with duration "
                      "0)"] += n_neg
    dur_s = np.maximum(span, 0.0) * 1e-6
    _align_clocks(c, start_s, dur_s, hosts, report)
    _check_times(c, start_s, dur_s, {ops.rank: ops.path for ops, _ in per.values()})
    optype = c["optype"].astype(np.int8)
    worker = c["dp"] * meta.pp_size + c["stage"]
    order = np.lexsort((start_s, optype, c["step"], worker))
    ident = np.stack([worker[order], c["step"][order], optype[order]])
    new = np.r_[True, (ident[:, 1:] != ident[:, :-1]).any(axis=0)]
    first = np.maximum.accumulate(np.where(new, np.arange(order.size), 0))
    seq = np.empty(order.size, np.int64)
    seq[order] = np.arange(order.size) - first
    compute = np.isin(optype, [_OC[schema.FORWARD_COMPUTE], _OC[schema.BACKWARD_COMPUTE]])
    dp_coll = np.isin(optype, [_OC[t] for t in schema.DP_COLLECTIVES])
    mb = np.where(compute, np.where(c["mb"] >= 0, c["mb"], seq),
                  np.where(optype == _OC[schema.GC], 0, -1))
    mc = np.where(compute | dp_coll, 0, -1)
    gmc = np.where(compute, c["stage"], -1)
    report.ops = int(order.size)
    trace = TraceColumns(
        dp_rank=c["dp"].astype(np.int32), stage=c["stage"].astype(np.int16),
        rank=c["rank"].astype(np.int32), step=c["step"].astype(np.int64), optype=optype,
        start_ts=start_s, duration=dur_s, seq_id=seq.astype(np.int32),
        mc=mc.astype(np.int16), mb_id=mb.astype(np.int32), gmc=gmc.astype(np.int32),
        source=source)
    return trace.take(order), report


def _check_times(c: dict[str, np.ndarray], start_s: np.ndarray, dur_s: np.ndarray,
                 paths: dict[int, str]) -> None:
    """The ops' times on the job's clock within the plausibility bounds of a trace
    (``timestamp_seconds``, ``op_seconds``; the events' own are checked by the reader, but
    a base time or a clock shift can move them beyond), or an error naming the rank file:
    such a trace would be refused by the analysis anyway."""
    for name, bad in (("timestamp_seconds", ~(np.abs(start_s) <= limit("timestamp_seconds"))),
                      ("op_seconds", ~(dur_s <= limit("op_seconds")))):
        if bad.any():
            i = int(np.argmax(bad))
            lim = LIMITS[name]
            what = (f"starts at {start_s[i]:.6g} s" if name == "timestamp_seconds" else
                    f"lasts {dur_s[i]:.6g} s")
            raise InputError(f"{paths[int(c['rank'][i])]}: an op of step {int(c['step'][i])} "
                             f"{what} once the files are on one clock, beyond "
                             f"{limit(name):,} s ({lim.what}; set {lim.env} to raise it)")


def _align_clocks(c: dict[str, np.ndarray], start_s: np.ndarray, dur_s: np.ndarray,
                  hosts: list[str], report: ImportReport) -> None:
    """Shift each host's clock onto the first host's (see the module docstring)."""
    if len(hosts) < 2:
        return
    import pandas as pd  # only for jobs on several hosts (start-up)

    shared = np.isin(c["optype"], [_OC[t] for t in schema.DP_COLLECTIVES]
                     + [_OC[schema.CLIP], _OC[schema.ALL_TO_ALL]])
    end = start_s + dur_s
    # the k-th shared collective of a type in a step, by start time, on each worker; a DP
    # collective (and an all-to-all: synchronised across the DP ranks of a stage) is shared
    # within its stage, the clip all-reduce by every stage
    idx = np.flatnonzero(shared)
    if not idx.size:
        report.unaligned_hosts = [h or f"#{i}" for i, h in enumerate(hosts) if i]
        return
    stage = np.where(c["optype"] == _OC[schema.CLIP], -1, c["stage"])
    order = idx[np.lexsort((start_s[idx], c["optype"][idx], c["step"][idx], c["stage"][idx],
                            c["dp"][idx]))]
    w = c["dp"][order] * 100_000 + c["stage"][order]
    grp = np.stack([w, c["step"][order], c["optype"][order]])
    new = np.r_[True, (grp[:, 1:] != grp[:, :-1]).any(axis=0)]
    first = np.maximum.accumulate(np.where(new, np.arange(order.size), 0))
    k = np.arange(order.size) - first
    df = pd.DataFrame({"step": c["step"][order], "op": c["optype"][order], "k": k,
                       "stage": stage[order], "host": c["host"][order], "end": end[order]})
    keys = ["step", "op", "k", "stage"]
    ref = df[df.host == 0].groupby(keys)["end"].median()
    shifts: dict[int, float] = {}
    for h in range(1, len(hosts)):
        mine = df[df.host == h].groupby(keys)["end"].median()
        both = mine.index.intersection(ref.index)
        if len(both):
            shifts[h] = float(np.median(mine[both].to_numpy() - ref[both].to_numpy()))
    for h, shift in shifts.items():
        sel = c["host"] == h
        start_s[sel] -= shift
        report.clock_shift_s[hosts[h] or f"#{h}"] = shift
    report.unaligned_hosts = [hosts[h] or f"#{h}" for h in range(1, len(hosts))
                              if h not in shifts]
