"""The result of one analysis, as a typed object, and its document (``result.json``).

:class:`AnalysisResult` is what the analysis produces and what the outputs, the summary and
the heatmaps take; :meth:`AnalysisResult.to_document` is the one place where it becomes the
versioned JSON document.

Schema ``1.4`` (keys marked * are fixed for other tools to rely on; 1.1 adds to 1.0 the
cause values ``pauses`` and ``unexplained``, ``verdict_config``, ``caveats``,
``untrustworthy_reasons``, ``verdict.hypotheses``, ``verdict.weak`` and
``verdict.confidence_parts``; 1.2 adds ``verdict.leading`` and fills ``verdict.hypotheses``
and ``verdict.signals`` for a ``none`` verdict too; 1.3 changes the meaning of ``share``
in ``verdict.hypotheses``, ``verdict.contributing`` and ``verdict.leading``: it was the
larger of ``rem`` and ``add`` (unbounded), it is now the removal share ``rem`` bounded to
[0, 1], by which the verdict ranks causes; it adds ``rem`` and ``add`` to
``contributing`` and ``leading`` and ``tie_margin`` to ``verdict_config``; 1.4 adds
``launch_attribution`` and ``launch_attribution_per_step`` (the published launch
attribution), ``slowdown_healthy`` and ``healthy_reference`` (S against healthy peers), the
cause ``host`` (with its entry in ``verdict.hypotheses``) and the worker gate
``within_noise``, and narrows ``trustworthy``: a discrepancy above 5% that the launch
attribution locates is host time, reported by the ``host`` hypothesis, not a reason; no
fixed key changed its type and nothing was removed):

* ``schema_version``\\*: ``"1.4"``.
* ``job``\\*: the job metadata (dp_size, pp_size, tp_size, dsp_size, vpp_size,
  world_size, trial_name, run_id).
* ``source``: the trace file; ``steps``: the step ids analysed, in order.
* ``slowdown``\\* (S, Eq. 1), ``discrepancy``\\* (mean actual / mean no-delay step time),
  ``waste``\\* (1 − 1/S), ``trustworthy``\\* (no caveat, and |discrepancy − 1| ≤ 5% or
  the launch attribution locates the excess: one worker, DP rank or stage whose host time
  stands out from its peers', or the step's first op on every worker, whose launch delays
  alone leave at most 5% of it);
  ``slowdown_healthy``: S_h, the no-delay timeline against the ideal one taken over
  healthy peers (compute-like op types without the workers that are slower than their DP
  peers beyond the noise); ``healthy_reference``: ``ideal_step_time``, ``step_time``
  (``{step: seconds}``) and ``excluded`` (``{optype: ["d,s", ...]}``);
  ``untrustworthy_reasons``: why not, one sentence each; ``caveats``: problems of the trace
  found while reading it (e.g. coarse timestamps), each of which makes it untrustworthy.
* ``step_time``\\*: ``actual``, ``no_delay``, ``ideal``: each ``{step: seconds}``.
* ``step_slowdown``\\*: ``{step: S}``.
* ``attribution``\\*: ``dp_rank``, ``stage``, ``optype`` (``{key: S}``), ``worker``
  (``{"dp,stage": S_w}``, exact unless ``worker_method`` says ``min-approximation``);
  ``meaningful`` is false when S < 1.03 (the paper does not attribute then).
* ``attribution_per_step``\\*: ``{step: {"dp_rank"|"stage"|"optype": {key: S}}}``.
* ``launch_attribution``: null below a discrepancy of 1.03 (as published), else
  ``dp_rank``, ``stage``, ``optype`` (``first-op`` included: each stage's first op of the
  step) as ``{key: S^launch}`` — the mean step time with only that group's launch delays
  put back into the no-delay timeline over the mean no-delay step time — and ``worker``
  for the candidate workers (the DP ranks × stages that stand out); above 64 DP ranks only
  the 64 with the most host time per step are simulated (``dp_ranks_simulated``);
  ``launch_attribution_per_step``: ``{step: {"dp_rank"|"stage"|"optype": {key: S}}}``.
* ``worker_score``: the published min(S_dp, S_stage) approximation, ``{"dp,stage": S}``.
* ``worker_names``: ``{"dp,stage": "rank R (host)"}``, each worker's global rank and, where
  the trace has the ``host`` column, its host.
* ``m_w``\\*, ``m_s``\\*: ``rem``, ``add``, ``t_ori``, ``t_ideal``, ``t_rem``, ``t_add``,
  ``workers``. ``m_comm``, ``m_gc``, ``m_suspects``, ``m_seq`` (equal microbatches),
  ``m_pause`` (pauses cut back / alone): the same for the verdict's what-ifs, null when the
  hypothesis was not tested; ``add``/``t_add`` are null where a what-if has no add variant.
  ``pauses``: the compute ops counted as pauses and where they are.
* ``fb_signal``: forward/backward correlation of the same microbatch and forward spread.
* ``verdict``\\*: ``cause`` (worker, last_stage, sequence_length, gc, pauses,
  communication, host, unexplained, none), ``workers`` (``"dp,stage"``), ``confidence`` (0-1),
  ``evidence`` (sentences), ``contributing`` (``{cause, share, rem, add, workers}``),
  ``weak``,
  ``confidence_parts`` (``agreement``, ``strength``, ``trust``: confidence is their
  product), ``hypotheses`` (every hypothesis tested: ``cause``, ``applicable``, ``share``,
  ``rem``, ``add``, ``workers``, ``gates``, ``evidence``, ``why_not``), ``signals``,
  ``leading`` (for ``none``: ``{cause, share, rem, add, workers}`` of the hypothesis the
  rule would pick below the threshold, the cause it would be if it grew; else null).
  ``share`` is ``rem`` bounded to [0, 1] (``add`` where a what-if has no removal variant):
  a raw ``rem`` above 1 means fixing those ops alone leaves the job faster than the ideal
  timeline (they explain all of the slowdown); ``rem`` and ``add`` are raw. The
  ``last_stage`` hypothesis's ``rem`` is M_last (the stage's compute rebalanced, each op's
  own variation kept), its ``add`` M_S's; ``m_s`` stays the paper's M_S.
* ``verdict_config``: every threshold the verdict used (:class:`VerdictConfig`).
* ``counts``: ops, workers, steps, P2P no-ops, clipped and kept-negative transfer
  durations and launch delays: everything the model had to clip is counted here.
* ``thresholds``, ``timing_s`` (seconds per phase), ``outputs`` (files written, and any
  output skipped with the reason: ``{"skipped": reason}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stragglers.analysis.engine import WhatIfEngine
from stragglers.analysis.launch import HostGroup, critical_group, first_op_group, located
from stragglers.analysis.metrics import ATTRIBUTION_THRESHOLD, Characterisation, Metrics
from stragglers.analysis.verdict import Cause, Finding, Verdict
from stragglers.analysis.workers import Worker
from stragglers.trace.io import JobMeta

SCHEMA_VERSION = "1.4"
#: Above this relative simulation discrepancy a result is not trustworthy (paper §6).
DISCREPANCY_LIMIT = 0.05


def discrepancy_located(metrics: Metrics) -> HostGroup | None:
    """The group whose launch delays account for a discrepancy above the limit (leaving at
    most :data:`DISCREPANCY_LIMIT` of it), or None (also when the discrepancy is within)."""
    return located(metrics.launch, metrics.dp, metrics.pp, DISCREPANCY_LIMIT)


def untrustworthy_reasons(metrics: Metrics, caveats: tuple[str, ...]) -> tuple[str, ...]:
    """Why a result is not trustworthy (empty when it is). A discrepancy above the limit
    that the launch attribution locates (one worker, DP rank or stage, or every worker's
    step start, leaves at most the limit) is host time, reported as such, not a reason."""
    reasons = list(caveats)
    disc = metrics.discrepancy
    if disc > 1.0 + DISCREPANCY_LIMIT and discrepancy_located(metrics) is not None:
        return tuple(reasons)
    if not abs(disc - 1.0) <= DISCREPANCY_LIMIT:
        where = _spread(metrics)
        reasons.append(f"the simulation discrepancy is {100 * (disc - 1):+.1f}% (limit "
                       f"±{100 * DISCREPANCY_LIMIT:.0f}%): the trace has launch gaps or "
                       f"dependencies the model does not explain{where}")
    return tuple(reasons)


def _spread(metrics: Metrics) -> str:
    """Where the launch gaps of an unexplained discrepancy are (the critical path's group
    and the step's first op), or nothing without a launch attribution."""
    la = metrics.launch
    if la is None:
        return ""
    crit = critical_group(la, metrics.dp, metrics.pp)
    first = first_op_group(la, metrics.dp, metrics.pp)
    parts = []
    if crit is not None:
        parts.append(f"the most on {crit.kind.replace('_', ' ')} {crit.key}, "
                     f"{crit.share(la):.0%} of it"
                     + ("" if la.stands_out(crit.kind, crit.key)
                        else ", though its host time per step is not above its peers'"))
    if first is not None:
        parts.append(f"before the step's first op {first.share(la):.0%}")
    return f" (launch attribution: {'; '.join(parts)})" if parts else ""


@dataclass(frozen=True)
class Counts:
    """Sizes of the analysis and everything the model had to clip."""

    ops: int
    op_identities: int
    workers: int
    steps: int
    dependencies: int
    communication_groups: int
    p2p_noop_by_timing: int
    p2p_noop_by_chunk: int
    transfer_clipped_to_zero: int
    transfer_negative_kept: int
    launch_delay_clipped_to_zero: int
    launch_delay_negative_kept: int

    @classmethod
    def of(cls, engine: WhatIfEngine) -> Counts:
        g, d = engine.graph, engine.derived
        return cls(
            ops=int(engine.n_nodes * engine.dp * engine.n_steps),
            op_identities=int(engine.n_nodes), workers=int(engine.dp * engine.pp),
            steps=int(engine.n_steps), dependencies=int(g.n_edges()),
            communication_groups=int(len(g.groups)),
            p2p_noop_by_timing=int(g.noop_timing.sum()),
            p2p_noop_by_chunk=int(g.noop_chunk.sum()),
            transfer_clipped_to_zero=d.n_transfer_clipped,
            transfer_negative_kept=d.n_transfer_negative,
            launch_delay_clipped_to_zero=d.n_delay_clipped,
            launch_delay_negative_kept=d.n_delay_negative)


@dataclass(frozen=True)
class Skipped:
    """An output that was not written, and why."""

    reason: str


@dataclass(frozen=True)
class AnalysisResult:
    """Everything one analysis found (see the module docstring for its document)."""

    job: JobMeta
    source: str
    metrics: Metrics
    verdict: Verdict
    counts: Counts
    caveats: tuple[str, ...] = ()
    timing: Mapping[str, float] = field(default_factory=dict)
    outputs: Mapping[str, str | Skipped] = field(default_factory=dict)
    #: How a person finds each worker, by ``"dp,stage"``: its global rank and, where the
    #: trace records it, its host (:meth:`~stragglers.trace.table.OpTable.worker_names`).
    worker_names: Mapping[str, str] = field(default_factory=dict)

    @property
    def slowdown(self) -> float:
        return self.metrics.slowdown

    @property
    def discrepancy(self) -> float:
        return self.metrics.discrepancy

    @property
    def untrustworthy_reasons(self) -> tuple[str, ...]:
        return untrustworthy_reasons(self.metrics, self.caveats)

    @property
    def trustworthy(self) -> bool:
        return not self.untrustworthy_reasons

    def worker_label(self, dp_rank: int, stage: int) -> str:
        """A worker as the on-call knows it: "d,s (rank R)", with its host where the trace
        names one ("d,s (rank R (host))")."""
        name = self.worker_names.get(f"{dp_rank},{stage}")
        if name is None:
            name = f"rank {int(self.metrics.ranks[dp_rank, stage])}"
        return f"{dp_rank},{stage} ({name})"

    # -- the document ---------------------------------------------------------------------
    def to_document(self) -> dict[str, Any]:
        """The result.json document (schema :data:`SCHEMA_VERSION`)."""
        m, v = self.metrics, self.verdict
        dp, pp = m.dp, m.pp
        steps = [str(int(s)) for s in m.steps]
        ideal = m.ideal
        dp_ps, st_ps = m.attr_dp / ideal, m.attr_stage / ideal
        opt_ps = {k: t / ideal for k, t in m.attr_optype.items()}
        sw, score = m.worker_slowdown, m.worker_score

        def by_step(values: np.ndarray) -> dict[str, float]:
            return {st: float(x) for st, x in zip(steps, values, strict=True)}

        def grid(values: np.ndarray) -> dict[str, float]:
            return {f"{d},{s}": float(values[d, s]) for d in range(dp) for s in range(pp)}

        def legacy(cause: Cause) -> dict[str, Any] | None:
            f = v.finding_of(cause)
            return None if f is None or f.m is None else _characterisation(f.m)

        signals = dict(v.signals)
        reasons = self.untrustworthy_reasons
        return {
            "schema_version": SCHEMA_VERSION,
            "job": self.job.to_dict(),
            "source": self.source,
            "steps": [int(s) for s in m.steps],
            "slowdown": m.slowdown,
            "discrepancy": m.discrepancy,
            "waste": m.waste,
            "slowdown_healthy": m.slowdown_healthy,
            "healthy_reference": _healthy(m),
            "trustworthy": not reasons,
            "untrustworthy_reasons": list(reasons),
            "caveats": list(self.caveats),
            "step_time": {"actual": by_step(m.actual), "no_delay": by_step(m.nodelay),
                          "ideal": by_step(m.ideal)},
            "step_slowdown": by_step(m.step_slowdown),
            "attribution": {
                "meaningful": m.attribution_meaningful,
                "dp_rank": {str(d): float(x) for d, x in enumerate(m.s_dp)},
                "stage": {str(s): float(x) for s, x in enumerate(m.s_stage)},
                "optype": m.s_optype,
                "worker": grid(sw),
                "worker_method": m.worker_method,
            },
            "attribution_per_step": {
                st: {"dp_rank": {str(d): float(dp_ps[d, i]) for d in range(dp)},
                     "stage": {str(s): float(st_ps[s, i]) for s in range(pp)},
                     "optype": {k: float(x[i]) for k, x in opt_ps.items()}}
                for i, st in enumerate(steps)},
            "launch_attribution": _launch(m),
            "launch_attribution_per_step": _launch_per_step(m, steps),
            "worker_score": grid(score),
            "worker_names": dict(self.worker_names),
            "m_w": _characterisation(m.m_w),
            "m_s": _characterisation(m.m_s),
            "m_comm": legacy(Cause.COMMUNICATION),
            "m_gc": legacy(Cause.GC),
            "m_seq": legacy(Cause.SEQUENCE_LENGTH),
            "m_pause": legacy(Cause.PAUSES),
            "m_suspects": legacy(Cause.WORKER),
            "pauses": signals.get("pauses"),
            "fb_signal": signals.get("fb_signal"),
            "verdict": _verdict(v),
            "verdict_config": v.config.to_dict(),
            "counts": dict(vars(self.counts)),
            "thresholds": {"verdict_slowdown": v.config.threshold,
                           "attribution": ATTRIBUTION_THRESHOLD,
                           "discrepancy": DISCREPANCY_LIMIT,
                           "ideal_step_time": float(ideal.mean())},
            "timing_s": {k: round(float(x), 4) for k, x in self.timing.items()},
            "outputs": {k: ({"skipped": o.reason} if isinstance(o, Skipped) else o)
                        for k, o in self.outputs.items()},
        }

    def to_json(self) -> str:
        """The document as JSON text (strict: no NaN or infinity)."""
        return json.dumps(self.to_document(), indent=1, allow_nan=False)


def _healthy(m: Metrics) -> dict[str, Any] | None:
    """``healthy_reference``: the ideal step time over healthy peers and the workers left
    out of each op type's ideal value."""
    h = m.healthy
    if h is None:
        return None
    return {"ideal_step_time": float(h.ideal.mean()),
            "step_time": {str(int(s)): float(x) for s, x in zip(m.steps, h.ideal, strict=True)},
            "excluded": {k: _keys(ws) for k, ws in h.excluded.items()}}


def _launch(m: Metrics) -> dict[str, Any] | None:
    """``launch_attribution``: S^launch by DP rank, stage, op type (``first-op`` included)
    and candidate worker; None below the discrepancy at which it is computed."""
    la = m.launch
    if la is None:
        return None
    return {"dp_rank": {str(d): x for d, x in la.s_dp_by_rank.items()},
            "dp_ranks_simulated": len(la.dp_ranks),
            "stage": {str(s): float(x) for s, x in enumerate(la.s_stage)},
            "optype": la.s_optype,
            "worker": {w.key: x for w, x in la.s_worker.items()}}


def _launch_per_step(m: Metrics, steps: list[str]) -> dict[str, Any] | None:
    la = m.launch
    if la is None:
        return None
    base = la.nodelay
    dp_ps, st_ps = la.dp / base, la.stage / base
    opt_ps = {k: t / base for k, t in la.optype.items()}
    return {st: {"dp_rank": {str(int(d)): float(dp_ps[j, i]) for j, d in enumerate(la.dp_ranks)},
                 "stage": {str(s): float(st_ps[s, i]) for s in range(st_ps.shape[0])},
                 "optype": {k: float(x[i]) for k, x in opt_ps.items()}}
            for i, st in enumerate(steps)}


def _keys(workers: tuple[Worker, ...]) -> list[str]:
    return [w.key for w in workers]


def _characterisation(m: Characterisation) -> dict[str, Any]:
    return {"rem": m.rem, "add": m.add, "t_ori": m.t_ori, "t_ideal": m.t_ideal,
            "t_rem": m.t_rem, "t_add": m.t_add, "workers": _keys(m.workers)}


def _finding(f: Finding) -> dict[str, Any]:
    return {"cause": f.cause.value, "applicable": f.applicable,
            "share": None if f.m is None else round(f.share, 6),
            "rem": None if f.m is None else f.m.rem, "add": None if f.m is None else f.m.add,
            "workers": _keys(f.workers), "gates": dict(f.gates), "evidence": f.evidence or None,
            "why_not": f.why_not}


def _verdict(v: Verdict) -> dict[str, Any]:
    return {
        "cause": v.cause.value,
        "workers": _keys(v.workers),
        "confidence": round(float(v.confidence), 4),
        "evidence": list(v.evidence),
        "contributing": [_brief(f) for f in v.contributing],
        "weak": v.weak,
        "confidence_parts": {"agreement": round(v.agreement, 4),
                             "strength": round(v.strength, 4),
                             "trust": 1.0 if v.trusted else v.config.untrustworthy_factor},
        "hypotheses": [_finding(f) for f in v.findings],
        "signals": dict(v.signals),
        "leading": None if v.leading is None else _brief(v.leading),
    }


def _brief(f: Finding) -> dict[str, Any]:
    return {"cause": f.cause.value, "share": round(f.share, 4),
            "rem": None if f.m is None or f.m.rem is None else round(f.m.rem, 4),
            "add": None if f.m is None or f.m.add is None else round(f.m.add, 4),
            "workers": _keys(f.workers)}


#: S_h is printed beside S where the two differ by more than this (relative).
HEALTHY_PRINT = 0.01


def summary(result: AnalysisResult) -> str:
    """A short human summary for stdout."""
    job, m, v = result.job, result.metrics, result.verdict
    sw = m.worker_slowdown
    pp = m.pp
    flat = np.argsort(-sw.ravel(), kind="stable")[:3]
    worst_w = [(result.worker_label(int(i) // pp, int(i) % pp), float(sw.ravel()[i]))
               for i in flat]
    worst_t = sorted(m.s_optype.items(), key=lambda kv: -kv[1])[:3]
    lines = [
        f"job {job.trial_name} (dp {job.dp_size} x pp {job.pp_size} x tp {job.tp_size}, vpp "
        f"{job.vpp_size}): {result.counts.steps} steps, {result.counts.ops:,} ops",
        f"slowdown S = {m.slowdown:.4f}  waste = {100 * m.waste:.1f}% of GPU time  "
        f"discrepancy = {m.discrepancy:.4f}"
        + ("" if result.trustworthy else "  [UNTRUSTWORTHY]"),
    ]
    s_h = m.slowdown_healthy
    if abs(s_h / m.slowdown - 1.0) > HEALTHY_PRINT:
        out = sorted({w for ws in (m.healthy.excluded.values() if m.healthy else ())
                      for w in ws})
        lines.append(f"slowdown vs healthy peers S_h = {s_h:.4f}  (the ideal taken without "
                     f"{'workers ' + ', '.join(w.key for w in out[:6]) if out else 'outliers'}"
                     "; S counts them in the ideal)")
    lines += [f"  untrustworthy: {r}" for r in result.untrustworthy_reasons]
    la = m.launch
    if la is not None:
        parts = [(f"DP rank {d}", x) for d, x in la.s_dp_by_rank.items()]
        parts += [(f"stage {s}", float(x)) for s, x in enumerate(la.s_stage)] if pp > 1 else []
        parts += [(k, x) for k, x in la.s_optype.items()]
        parts.sort(key=lambda kv: -kv[1])
        lines.append("host time (launch attribution, S^launch): "
                     + ", ".join(f"{k}: {x:.3f}" for k, x in parts[:4]))
    lines.append(f"verdict: {v.cause.value}"
                 + (f" ({', '.join(w.key for w in v.workers[:8])})" if v.workers else "")
                 + f"  confidence {v.confidence:.2f}")
    lines += [f"  - {e}" for e in v.evidence]
    if v.workers:
        lines.append("  workers: " + "; ".join(
            f"{w.key} = {result.worker_names.get(w.key) or 'rank ' + str(int(m.ranks[w]))}"
            for w in v.workers[:8]))
    if v.contributing:
        lines.append("contributing: " + ", ".join(
            f"{f.cause.value} ({f.share:.0%}"
            + (" of the discrepancy)" if f.cause == Cause.HOST else ")")
            for f in v.contributing))
    tested = [f for f in v.findings if f.applicable and f.m is not None]
    if tested:
        lines.append("causes that apply (removed when fixed alone / caused alone): " + ", ".join(
            f"{f.cause.value} {_pct(f.m.rem)} / {_pct(f.m.add)}" for f in tested if f.m))
    lines.append("worst workers (dp,stage: S_w): "
                 + ", ".join(f"{k}: {s:.3f}" for k, s in worst_w))
    lines.append("worst op types (S_t): " + ", ".join(f"{k}: {s:.3f}" for k, s in worst_t))
    lines.append(f"M_W = {m.m_w.rem:.3f}" + (f"  M_S = {m.m_s.rem:.3f}" if pp > 1 else ""))
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"
