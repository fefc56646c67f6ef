"""The result document (``result.json``): a versioned, documented schema.

Schema ``1.0`` (keys marked * are fixed for other tools to rely on):

* ``schema_version``\\*: ``"1.0"``.
* ``job``\\*: the job metadata (dp_size, pp_size, tp_size, dsp_size, vpp_size,
  world_size, trial_name, run_id).
* ``source``: the trace file; ``steps``: the step ids analysed, in order.
* ``slowdown``\\* (S, Eq. 1), ``discrepancy``\\* (mean actual / mean no-delay step time),
  ``waste``\\* (1 − 1/S), ``trustworthy``\\* (|discrepancy − 1| ≤ 5%).
* ``step_time``\\*: ``actual``, ``no_delay``, ``ideal``: each ``{step: seconds}``.
* ``step_slowdown``\\*: ``{step: S}``.
* ``attribution``\\*: ``dp_rank``, ``stage``, ``optype`` (``{key: S}``), ``worker``
  (``{"dp,stage": S_w}``, exact unless ``worker_method`` says ``min-approximation``);
  ``meaningful`` is false when S < 1.03 (the paper does not attribute then).
* ``attribution_per_step``\\*: ``{step: {"dp_rank"|"stage"|"optype": {key: S}}}``.
* ``worker_score``: the published min(S_dp, S_stage) approximation, ``{"dp,stage": S}``.
* ``m_w``\\*, ``m_s``\\*: ``rem``, ``add``, ``t_ori``, ``t_ideal``, ``t_rem``, ``t_add``,
  ``workers``; ``m_comm``, ``m_gc``, ``m_suspects``, ``m_seq`` (equal microbatches),
  ``m_pause`` (long compute ops cut back; only ``rem`` is meaningful for these two)
  likewise for the verdict's tests; ``pauses``: where the long compute ops are.
* ``fb_signal``: forward/backward correlation of the same microbatch and forward spread.
* ``verdict``\\*: ``cause`` (worker, last_stage, sequence_length, gc, communication,
  none), ``workers`` (``"dp,stage"``), ``confidence`` (0-1), ``evidence`` (sentences),
  ``signals`` (the figures used).
* ``counts``: ops, workers, steps, P2P no-ops, clipped and kept-negative transfer
  durations and launch delays: everything the model had to clip is counted here.
* ``thresholds``, ``timing_s`` (seconds per phase), ``outputs`` (files written, and any
  output skipped with the reason).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.analysis.metrics import ATTRIBUTION_THRESHOLD, Characterisation, Metrics
from stragglers.analysis.model import WhatIfModel
from stragglers.analysis.verdict import Verdict

SCHEMA_VERSION = "1.0"
DISCREPANCY_LIMIT = 0.05


def _by_step(steps: np.ndarray, values: np.ndarray) -> dict[str, float]:
    return {str(int(s)): float(v) for s, v in zip(steps, values, strict=True)}


def build_result(model: WhatIfModel, metrics: Metrics, verdict: Verdict,
                 m_suspects: Characterisation | None, threshold: float,
                 timing: dict[str, float]) -> dict[str, Any]:
    t = model.table
    steps = metrics.steps
    ideal_mean = metrics.ideal.mean()
    dp, pp = model.dp, model.pp
    s_dp = metrics.s_of(metrics.attr_dp)
    s_stage = metrics.s_of(metrics.attr_stage)
    s_opt = {k: float(metrics.s_of(v)) for k, v in metrics.attr_optype.items()}
    sw = metrics.worker_slowdown
    score = metrics.worker_score
    per_step: dict[str, Any] = {}
    ideal = metrics.ideal
    dp_ps = metrics.attr_dp / ideal
    st_ps = metrics.attr_stage / ideal
    opt_ps = {k: v / ideal for k, v in metrics.attr_optype.items()}
    for i, step in enumerate(steps):
        per_step[str(int(step))] = {
            "dp_rank": {str(d): float(dp_ps[d, i]) for d in range(dp)},
            "stage": {str(s): float(st_ps[s, i]) for s in range(pp)},
            "optype": {k: float(v[i]) for k, v in opt_ps.items()},
        }
    g = model.graph
    dd = model.derived
    disc = metrics.discrepancy
    return {
        "schema_version": SCHEMA_VERSION,
        "job": t.meta.to_dict(),
        "source": t.source,
        "steps": [int(s) for s in steps],
        "slowdown": metrics.slowdown,
        "discrepancy": disc,
        "waste": metrics.waste,
        "trustworthy": bool(abs(disc - 1.0) <= DISCREPANCY_LIMIT),
        "step_time": {
            "actual": _by_step(steps, metrics.actual),
            "no_delay": _by_step(steps, metrics.nodelay),
            "ideal": _by_step(steps, metrics.ideal),
        },
        "step_slowdown": _by_step(steps, metrics.nodelay / metrics.ideal),
        "attribution": {
            "meaningful": bool(metrics.slowdown >= ATTRIBUTION_THRESHOLD),
            "dp_rank": {str(d): float(s_dp[d]) for d in range(dp)},
            "stage": {str(s): float(s_stage[s]) for s in range(pp)},
            "optype": s_opt,
            "worker": {f"{d},{s}": float(sw[d, s]) for d in range(dp) for s in range(pp)},
            "worker_method": "exact" if metrics.worker_exact is not None
            else "min-approximation",
        },
        "attribution_per_step": per_step,
        "worker_score": {f"{d},{s}": float(score[d, s]) for d in range(dp) for s in range(pp)},
        "m_w": metrics.m_w.to_dict(),
        "m_s": metrics.m_s.to_dict(),
        "m_comm": metrics.m_comm.to_dict(),
        "m_gc": metrics.m_gc.to_dict(),
        "m_seq": metrics.m_seq.to_dict(),
        "m_pause": metrics.m_pause.to_dict(),
        "pauses": metrics.pauses,
        "m_suspects": None if m_suspects is None else m_suspects.to_dict(),
        "fb_signal": metrics.fb,
        "verdict": verdict.to_dict(),
        "counts": {
            "ops": int(t.n_nodes * dp * len(steps)),
            "op_identities": int(t.n_nodes),
            "workers": int(dp * pp),
            "steps": int(len(steps)),
            "dependencies": int(g.n_edges()),
            "communication_groups": int(len(g.groups)),
            "p2p_noop_by_timing": int(g.noop_timing.sum()),
            "p2p_noop_by_chunk": int(g.noop_chunk.sum()),
            "transfer_clipped_to_zero": dd.n_transfer_clipped,
            "transfer_negative_kept": dd.n_transfer_negative,
            "launch_delay_clipped_to_zero": dd.n_delay_clipped,
            "launch_delay_negative_kept": dd.n_delay_negative,
        },
        "thresholds": {"verdict_slowdown": threshold, "attribution": ATTRIBUTION_THRESHOLD,
                       "discrepancy": DISCREPANCY_LIMIT, "ideal_step_time": float(ideal_mean)},
        "timing_s": {k: round(v, 4) for k, v in timing.items()},
        "outputs": {},
    }


def write_result(result: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    p.write_text(json.dumps(result, indent=1, allow_nan=False))
    return p


def summary(result: dict[str, Any]) -> str:
    """A short human summary for stdout."""
    job = result["job"]
    v = result["verdict"]
    att = result["attribution"]
    worst_w = sorted(att["worker"].items(), key=lambda kv: -kv[1])[:3]
    worst_t = sorted(att["optype"].items(), key=lambda kv: -kv[1])[:3]
    lines = [
        f"job {job['trial_name']} (dp {job['dp_size']} x pp {job['pp_size']} x tp "
        f"{job['tp_size']}, vpp {job['vpp_size']}): {result['counts']['steps']} steps, "
        f"{result['counts']['ops']:,} ops",
        f"slowdown S = {result['slowdown']:.4f}  waste = {100 * result['waste']:.1f}% of "
        f"GPU time  discrepancy = {result['discrepancy']:.4f}"
        + ("" if result["trustworthy"] else "  [UNTRUSTWORTHY: discrepancy above 5%]"),
        f"verdict: {v['cause']}"
        + (f" ({', '.join(v['workers'][:8])})" if v["workers"] else "")
        + f"  confidence {v['confidence']:.2f}",
    ]
    lines += [f"  - {e}" for e in v["evidence"]]
    if v["contributing"]:
        lines.append("contributing: " + ", ".join(
            c["cause"] + ("" if c["share"] is None else f" ({c['share']:.0%})")
            for c in v["contributing"]))
    lines.append("worst workers (dp,stage: S_w): "
                 + ", ".join(f"{k}: {s:.3f}" for k, s in worst_w))
    lines.append("worst op types (S_t): " + ", ".join(f"{k}: {s:.3f}" for k, s in worst_t))
    lines.append(f"M_W = {result['m_w']['rem']:.3f}  M_S = {result['m_s']['rem']:.3f}")
    return "\n".join(lines)
