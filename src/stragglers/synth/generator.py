"""Synthetic traces with injectable stragglers and a ground-truth file.

The timeline is produced by the same dependency rules the analyzer uses: the schedule
(:mod:`stragglers.synth.schedule`) gives each stage's op order, :func:`build_graph` turns
it into the graph, per-op durations come from a duration model with the injected
stragglers, and the simulator computes every op's start and end. An unperturbed trace
therefore analyses to S = 1 and discrepancy = 1 exactly.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from stragglers.atomic import StagedDir
from stragglers.errors import InputError
from stragglers.limits import LIMITS, check_limit, limit
from stragglers.model import build_graph, evaluation_order
from stragglers.sim import simulate
from stragglers.synth.schedule import stage_ops
from stragglers.trace import schema
from stragglers.trace.io import JobMeta, TraceColumns, write_meta, write_trace
from stragglers.trace.table import OpTable

#: Largest log-normal sigma of --jitter and --seq-len-sigma: beyond it single draws reach
#: factors of e^20 and more, durations no job has.
MAX_SIGMA = 2.0

#: Baseline op durations in seconds (transfer durations for communication ops).
BASE_DURATIONS: dict[str, float] = {
    schema.FORWARD_COMPUTE: 0.060, schema.BACKWARD_COMPUTE: 0.120,
    schema.FORWARD_SEND: 0.0004, schema.FORWARD_RECV: 0.0008,
    schema.BACKWARD_SEND: 0.0004, schema.BACKWARD_RECV: 0.0008,
    schema.PARAMS_ALL_GATHER: 0.025, schema.GRADS_REDUCE_SCATTER: 0.050,
    schema.SEPARATE_GRADS_ALL_REDUCE: 0.030, schema.LAYERNORM_ALL_REDUCE: 0.00005,
    schema.EMBEDDING_ALL_REDUCE: 0.002, schema.CLIP: 0.012, schema.OPTIMIZER: 0.040, schema.GC: 0.0,
}


@dataclass
class SynthSpec:
    """What to generate. Injections are off by default (an unperturbed job).

    * ``slow_workers``: ``[(dp, stage, factor)]`` compute of that worker × factor;
    * ``heavy_last_stage``: compute of the last stage × factor (the loss layer);
    * ``seq_len_sigma``: microbatch sequence lengths log-normal with this sigma
      (long-tailed); compute cost ∝ a·L + b·L² (quadratic attention), mean-normalised;
    * ``gc_prob``/``gc_pause``: each worker-step pauses ``gc_pause`` s in its gc op with
      probability ``gc_prob``, independently (uncoordinated GC); with ``gc_in_compute`` the
      pause lands inside a random forward compute op instead (GC not recorded as an op);
      ``gc_recorded`` writes each pause's seconds into the optional ``gc_s`` column (the
      GC time a probe's GC callbacks record; 0 elsewhere). Off by default: the pauses are
      unrecorded, as in a trace from a profiler without GC callbacks, and pauses inside
      compute read as ``pauses``, not ``gc``; ``gc_ranks``: only these DP ranks pause;
    * ``slow_links``: ``[(dp, stage, factor)]`` P2P transfers between stage and stage+1
      of that DP rank × factor (both directions);
    * ``launch_gap_prob``/``launch_gap``: CPU launch gaps before compute ops (of the DP
      ranks ``launch_gap_ranks`` only, when given);
    * ``slow_loaders``: ``[(dp, seconds, prob)]`` a slow data loader on DP rank ``dp``: in
      each step, with probability ``prob``, stage 0's first forward compute of that rank
      launches ``seconds`` late (host time: the launch delay the published ``loader`` and
      ``loadersome`` reference traces were made with);
    * ``jitter``: multiplicative log-normal noise on every duration.
    """

    dp: int = 2
    pp: int = 4
    vpp: int = 1
    tp: int = 1
    microbatches: int = 8
    steps: int = 10
    overlap: bool = False
    seed: int = 0
    jitter: float = 0.0
    slow_workers: list[tuple[int, int, float]] = field(default_factory=list)
    heavy_last_stage: float = 1.0
    seq_len_sigma: float = 0.0
    seq_len_quadratic: float = 0.5
    gc_prob: float = 0.0
    gc_pause: float = 0.3
    gc_in_compute: bool = False
    gc_recorded: bool = False
    slow_links: list[tuple[int, int, float]] = field(default_factory=list)
    launch_gap_prob: float = 0.0
    launch_gap: float = 0.005
    launch_gap_ranks: list[int] | None = None
    gc_ranks: list[int] | None = None
    slow_loaders: list[tuple[int, float, float]] = field(default_factory=list)
    name: str = "synth"

    def meta(self) -> JobMeta:
        return JobMeta(dp_size=self.dp, pp_size=self.pp, tp_size=self.tp, dsp_size=1,
                       vpp_size=self.vpp, world_size=self.dp * self.pp * self.tp,
                       trial_name=self.name, run_id=self.seed)

    def expected(self) -> dict[str, Any]:
        """Ground truth: the cause(s) injected and the workers to blame."""
        causes = []
        if self.slow_workers:
            causes.append({"cause": "worker",
                           "workers": [f"{d},{s}" for d, s, _ in self.slow_workers]})
        if self.heavy_last_stage != 1.0:
            causes.append({"cause": "last_stage",
                           "workers": [f"{d},{self.pp - 1}" for d in range(self.dp)]})
        if self.seq_len_sigma > 0:
            causes.append({"cause": "sequence_length", "workers": []})
        if self.gc_prob > 0:
            unrecorded = self.gc_in_compute and not self.gc_recorded
            causes.append({"cause": "pauses" if unrecorded else "gc", "workers": []})
        if self.slow_loaders:
            causes.append({"cause": "host",
                           "workers": [f"{d},0" for d, _, _ in self.slow_loaders]})
        if self.slow_links:
            causes.append({"cause": "communication", "workers": sorted(
                {f"{d},{s}" for d, s, _ in self.slow_links}
                | {f"{d},{s + 1}" for d, s, _ in self.slow_links})})
        return {"causes": causes or [{"cause": "none", "workers": []}]}


def ops_per_worker_step(spec: SynthSpec) -> int:
    """Upper bound of the ops one worker records per step (for the size check): a recv, a
    compute and a send per compute op, the chunked collectives, and the end-of-step ops."""
    return 6 * spec.microbatches * spec.vpp + 2 * spec.vpp + 6


def check_spec(spec: SynthSpec) -> None:
    """Refuse a spec that would write NaN, infinite, negative or meaningless values, inject
    nothing where it says it injects, or exceed the size limits (before anything is built).

    Messages name the ``stragglers synth`` option of each field.
    """
    for name in ("dp", "pp", "vpp", "tp", "microbatches", "steps"):
        v = getattr(spec, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"--{name}: must be an integer >= 1, got {v!r}")
    if isinstance(spec.seed, bool) or not isinstance(spec.seed, int) or spec.seed < 0:
        raise InputError(f"--seed: must be an integer >= 0, got {spec.seed!r}")
    if spec.vpp > 1 and spec.microbatches % spec.pp:
        raise InputError(f"--microbatches {spec.microbatches} must be a multiple of --pp "
                         f"{spec.pp} for an interleaved schedule (--vpp {spec.vpp})")
    check_limit("workers", spec.dp * spec.pp, "--dp x --pp")
    if spec.dp * spec.pp * spec.tp > 2**31 - 1:
        raise InputError(f"--tp {spec.tp}: dp*pp*tp exceeds 2**31 - 1 ranks")
    check_limit("synth_ops", spec.dp * spec.pp * spec.steps * ops_per_worker_step(spec),
                f"--dp {spec.dp} x --pp {spec.pp} x --steps {spec.steps} x "
                f"{ops_per_worker_step(spec)} ops per worker-step (--microbatches, --vpp)")

    def number(option: str, value: float, lo: float, hi: float = math.inf,
               lo_open: bool = False) -> None:
        ok = math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi
        if not ok:
            rng = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi < math.inf
                                                         else "")
            raise InputError(f"{option}: must be a finite number {rng}, got {value!r}")

    number("--jitter", spec.jitter, 0.0, MAX_SIGMA)
    number("--seq-len-sigma", spec.seq_len_sigma, 0.0, MAX_SIGMA)
    number("seq_len_quadratic", spec.seq_len_quadratic, 0.0, 1.0)
    number("--heavy-last-stage", spec.heavy_last_stage, 1.0)
    number("--gc probability", spec.gc_prob, 0.0, 1.0)
    number("--gc seconds", spec.gc_pause, 0.0)
    number("--launch-gaps probability", spec.launch_gap_prob, 0.0, 1.0)
    number("--launch-gaps seconds", spec.launch_gap, 0.0)
    if spec.gc_prob > 0 and spec.gc_pause == 0:
        raise InputError("--gc: a pause of 0 seconds injects nothing")
    if spec.launch_gap_prob > 0 and spec.launch_gap == 0:
        raise InputError("--launch-gaps: a gap of 0 seconds injects nothing")
    if spec.gc_in_compute and spec.gc_prob == 0:
        raise InputError("--gc-in-compute: needs --gc PROB:SECONDS")
    if spec.gc_recorded and spec.gc_prob == 0:
        raise InputError("--gc-recorded: needs --gc PROB:SECONDS")
    loaders: set[int] = set()
    for d, sec, prob in spec.slow_loaders:
        where = f"--slow-loader {d}:{sec}:{prob}"
        if not 0 <= d < spec.dp:
            raise InputError(f"{where}: DP rank outside dp {spec.dp}")
        number(where + " seconds", sec, 0.0, lo_open=True)
        number(where + " probability", prob, 0.0, 1.0, lo_open=True)
        if d in loaders:
            raise InputError(f"{where}: DP rank {d} is given twice")
        loaders.add(d)
    for flag, items, last in (("--slow-worker", spec.slow_workers, spec.pp),
                              ("--slow-link", spec.slow_links, spec.pp - 1)):
        seen: set[tuple[int, int]] = set()
        for d, s, f in items:
            where = f"{flag} {d},{s}:{f}"
            if not (0 <= d < spec.dp and 0 <= s < last):
                what = ("worker outside" if flag == "--slow-worker"
                        else f"the link joins stage {s} and {s + 1}: it must lie within")
                raise InputError(f"{where}: {what} dp {spec.dp} x pp {spec.pp}")
            number(where, f, 1.0, lo_open=True)
            if (d, s) in seen:
                raise InputError(f"{where}: {d},{s} is given twice")
            seen.add((d, s))


def _check_output(trace: TraceColumns) -> None:
    """The generated values must be ones ``analyze`` accepts (factors can multiply into
    durations beyond the plausibility bounds)."""
    for name, values, cap in (("duration", trace.duration, limit("op_seconds")),
                              ("start_ts", trace.start_ts, limit("timestamp_seconds"))):
        bad = ~np.isfinite(values) | (np.abs(values) > cap)
        if bad.any():
            i = int(np.argmax(np.where(bad, np.nan_to_num(np.abs(values), nan=np.inf), -1)))
            lim = LIMITS["op_seconds" if name == "duration" else "timestamp_seconds"]
            optype = schema.OPTYPES[trace.optype[i]]
            raise InputError(
                f"the injections give a {name} of {values[i]:.4g} s ({optype} of dp "
                f"{trace.dp_rank[i]}, stage {trace.stage[i]}, step {trace.step[i]}), beyond "
                f"the limit of {cap:,} {lim.what} ({lim.env} raises it): lower the factors "
                "or seconds")


def _schedule_table(spec: SynthSpec) -> tuple[OpTable, list[tuple[str, int, int, int]]]:
    """An op table of one worker-step per stage whose start times are the launch order;
    it carries the op identities from which the graph is built."""
    meta = spec.meta()
    dp_sync = meta.dp_synchronised
    rows: list[tuple[str, int, int, int]] = []  # (optype, stage, mc, mb) in node order
    order: list[float] = []
    seq: list[int] = []
    for s in range(spec.pp):
        counts: dict[str, int] = {}
        for i, (optype, mc, mb) in enumerate(stage_ops(spec.pp, spec.vpp, spec.microbatches,
                                                       s, dp_sync, spec.overlap)):
            rows.append((optype, s, mc, mb))
            seq.append(counts.get(optype, 0))
            counts[optype] = seq[-1] + 1
            order.append(float(i))
    n = len(rows)
    node_stage = np.array([r[1] for r in rows])
    node_mc = np.array([r[2] for r in rows])
    node_optype = np.array([schema.OPTYPE_CODE[r[0]] for r in rows])
    is_compute = np.isin(node_optype, [schema.OPTYPE_CODE[t] for t in schema.COMPUTE_TYPES])
    gmc = np.where(is_compute, node_mc * spec.pp + node_stage, -1)
    start = np.array(order)[:, None, None]
    table = OpTable(
        meta=meta, source=f"<synth {spec.name}>", steps=np.arange(1),
        node_stage=node_stage, node_optype=node_optype, node_seq=np.array(seq), node_mc=node_mc,
        node_gmc=gmc, node_mb=np.array([r[3] for r in rows]),
        start=start, duration=np.full((n, 1, 1), 0.5),
        ranks=np.arange(spec.dp * spec.pp).reshape(spec.pp, spec.dp).T,
    )
    return table, rows


def _values(spec: SynthSpec, table: OpTable, rng: np.random.Generator
            ) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-op own time (duration or transfer duration), shape (n_nodes, dp, steps), and
    with ``gc_recorded`` the GC seconds injected into each op (same shape), else None."""
    n, dp, st = table.n_nodes, spec.dp, spec.steps
    names = [schema.OPTYPES[c] for c in table.node_optype]
    base = np.array([BASE_DURATIONS[t] for t in names])
    val = np.broadcast_to(base[:, None, None], (n, dp, st)).copy()
    if spec.jitter > 0:
        val *= rng.lognormal(0.0, spec.jitter, size=val.shape)
    compute = np.isin(table.node_optype, [schema.OPTYPE_CODE[t] for t in schema.COMPUTE_TYPES])
    if spec.seq_len_sigma > 0:
        mbs = int(table.node_mb[compute].max()) + 1
        length = rng.lognormal(0.0, spec.seq_len_sigma, size=(mbs, dp, st))
        q = spec.seq_len_quadratic
        cost = (1 - q) * length + q * length**2
        cost /= cost.mean()
        val[compute] *= cost[table.node_mb[compute]]
    if spec.heavy_last_stage != 1.0:
        val[compute & (table.node_stage == spec.pp - 1)] *= spec.heavy_last_stage
    for d, s, factor in spec.slow_workers:
        val[compute & (table.node_stage == s), d] *= factor
    gc_time = np.zeros_like(val) if spec.gc_recorded else None
    if spec.gc_prob > 0:
        # Pauses go into gc_time (recorded) and val alike.
        paused = np.zeros_like(val)
        gc = np.flatnonzero(table.node_optype == schema.OPTYPE_CODE[schema.GC])
        hit = rng.random(size=(len(gc), dp, st)) < spec.gc_prob
        if spec.gc_ranks is not None:
            hit[:, ~np.isin(np.arange(dp), spec.gc_ranks)] = False
        if not spec.gc_in_compute:
            paused[gc] += hit * spec.gc_pause
        else:
            fwd = table.node_optype == schema.OPTYPE_CODE[schema.FORWARD_COMPUTE]
            for i, g in enumerate(gc):
                nodes = np.flatnonzero(fwd & (table.node_stage == table.node_stage[g]))
                pick = nodes[rng.integers(len(nodes), size=(dp, st))]
                d_idx, t_idx = np.nonzero(hit[i])
                paused[pick[d_idx, t_idx], d_idx, t_idx] += spec.gc_pause
        val += paused
        if gc_time is not None:
            gc_time += paused
    code = schema.OPTYPE_CODE
    for d, s, factor in spec.slow_links:
        lo, hi = table.node_stage == s, table.node_stage == s + 1
        fwd = lo & (table.node_optype == code[schema.FORWARD_SEND])
        fwd |= hi & (table.node_optype == code[schema.FORWARD_RECV])
        bwd = hi & (table.node_optype == code[schema.BACKWARD_SEND])
        bwd |= lo & (table.node_optype == code[schema.BACKWARD_RECV])
        val[fwd | bwd, d] *= factor
    return val, gc_time


def generate(spec: SynthSpec) -> tuple[TraceColumns, JobMeta, dict[str, Any]]:
    """Generate a trace, its metadata and the ground truth (after :func:`check_spec`)."""
    check_spec(spec)
    rng = np.random.default_rng(spec.seed)
    sched, _ = _schedule_table(spec)
    graph = build_graph(sched)
    order = evaluation_order(graph)
    val, gc_time = _values(spec, sched, rng)
    n, dp, st = sched.n_nodes, spec.dp, spec.steps
    delay = None
    if spec.launch_gap_prob > 0:
        compute = np.isin(sched.node_optype, [schema.OPTYPE_CODE[t] for t in schema.COMPUTE_TYPES])
        gaps = (rng.random(size=(n, dp, st)) < spec.launch_gap_prob) * spec.launch_gap
        gaps[~compute] = 0.0
        if spec.launch_gap_ranks is not None:
            gaps[:, ~np.isin(np.arange(dp), spec.launch_gap_ranks)] = 0.0
        delay = gaps
    if spec.slow_loaders:
        first = np.flatnonzero((sched.node_stage == 0) & (sched.node_seq == 0) & (
            sched.node_optype == schema.OPTYPE_CODE[schema.FORWARD_COMPUTE]))
        delay = np.zeros((n, dp, st)) if delay is None else delay
        for d_rank, sec, prob in spec.slow_loaders:
            late = rng.random(size=st) < prob
            delay[first, d_rank] += np.where(late, sec, 0.0)

    def values(idx: np.ndarray) -> np.ndarray:
        return val[idx][:, None]

    def delays(idx: np.ndarray) -> np.ndarray:
        assert delay is not None
        return delay[idx][:, None]

    res = simulate(order, values, (1, dp, st), delays=None if delay is None else delays,
                   keep=True)
    assert res.start is not None and res.end is not None
    start, end = res.start[:, 0], res.end[:, 0]
    shape = (n, dp, st)
    node = np.broadcast_to(np.arange(n)[:, None, None], shape).ravel()
    d = np.broadcast_to(np.arange(dp)[None, :, None], shape).ravel()
    step = np.broadcast_to(np.arange(st)[None, None, :], shape).ravel()
    stage = sched.node_stage[node]
    duration = (end - start).ravel()
    # An op's GC time is part of it: end - start may round a pure-GC op (a gc op of 0 s base
    # time) an ulp below its pause.
    gc_s = None if gc_time is None else np.minimum(gc_time.ravel(), duration)
    trace = TraceColumns(
        dp_rank=d.astype(np.int32), stage=stage.astype(np.int16),
        rank=((stage * dp + d) * spec.tp).astype(np.int32), step=step.astype(np.int64),
        optype=sched.node_optype[node].astype(np.int8), start_ts=start.ravel(),
        duration=duration, seq_id=sched.node_seq[node].astype(np.int32),
        mc=sched.node_mc[node].astype(np.int16), mb_id=sched.node_mb[node].astype(np.int32),
        gmc=sched.node_gmc[node].astype(np.int32), source=f"<synth {spec.name}>", gc_s=gc_s,
    )
    _check_output(trace)
    truth = {"spec": asdict(spec), "expected": spec.expected(),
             "n_ops": int(len(trace)), "n_workers": dp * spec.pp}
    return trace, spec.meta(), truth


class Injected(NamedTuple):
    """One injected cause of the ground truth and the workers to blame (``"dp,stage"``)."""

    cause: str
    workers: tuple[str, ...]


@dataclass(frozen=True)
class SynthJob:
    """What :func:`synthesize` wrote: the files (``trace``, ``meta``, ``truth``), the size of
    the trace and the injected causes."""

    files: dict[str, Path]
    n_ops: int
    n_workers: int
    injected: tuple[Injected, ...]

    def summary(self) -> str:
        """Two lines: the files written, and the causes injected with their workers."""
        return (f"wrote {self.n_ops:,} ops of {self.n_workers} workers: "
                + ", ".join(f"{k} {v}" for k, v in self.files.items()) + "\n"
                + "injected: " + "; ".join(f"{c.cause} {' '.join(c.workers)}".strip()
                                           for c in self.injected))


def synthesize(spec: SynthSpec, out: str | Path, fmt: str = "parquet",
               extra_truth: dict[str, Any] | None = None) -> SynthJob:
    """Generate and write ``trace.parquet`` (or ``.jsonl``), ``meta.yaml``, ``truth.json``
    (with the keys of ``extra_truth`` added: a fleet job's primary cause and strengths).

    The files appear together or not at all (:class:`~stragglers.atomic.StagedDir`), the
    trace last; files of the same names in ``out`` are replaced, others left alone.
    """
    trace, meta, truth = generate(spec)
    truth.update(extra_truth or {})
    ext = "jsonl" if fmt == "jsonl" else "parquet"
    names = {"trace": f"trace.{ext}", "meta": "meta.yaml", "truth": "truth.json"}
    with StagedDir(out) as stage:
        write_meta(meta, stage.path(names["meta"]))
        (stage.path(names["truth"])).write_text(json.dumps(truth, indent=1))
        write_trace(trace, stage.path(names["trace"]))
        stage.commit_last(names["trace"])
    return SynthJob(files={key: stage.final(name) for key, name in names.items()},
                    n_ops=truth["n_ops"], n_workers=truth["n_workers"],
                    injected=tuple(Injected(c["cause"], tuple(c["workers"]))
                                   for c in truth["expected"]["causes"]))


def write_synth(spec: SynthSpec, out: str | Path, fmt: str = "parquet",
                extra_truth: dict[str, Any] | None = None) -> dict[str, Path]:
    """:func:`synthesize`, returning only the paths of the files written (by key)."""
    return synthesize(spec, out, fmt, extra_truth).files
