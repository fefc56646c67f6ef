"""``host``: time on the host that the trace's ops do not show — a slow data loader, a late
step start, Python or CPU stalls on one worker (paper §6; launch attribution, §5).

The other hypotheses explain the *blocking* slowdown S (the no-delay timeline against the
ideal one). Host time is the other part of a job's step time: the simulation discrepancy
(actual / no-delay step time). This hypothesis reads the launch attribution: the worker, DP
rank or stage whose launch delays alone add the most time to the no-delay timeline
(:func:`~stragglers.analysis.launch.host_group`). It applies when that group explains at
least ``explain`` of the discrepancy's excess; its share is that fraction, and the time it
explains (seconds per step) is what the verdict weighs against the blocking causes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglers.analysis.launch import (
    LAUNCH_THRESHOLD,
    HostGroup,
    common_overhead,
    critical_group,
    first_op_group,
    host_group,
)
from stragglers.analysis.metrics import Metrics
from stragglers.analysis.verdict.base import Cause, Finding, not_applicable, portion
from stragglers.analysis.verdict.config import VerdictConfig
from stragglers.analysis.workers import names


@dataclass(frozen=True)
class HostEvidence:
    """The host finding and, when it applies, the group behind it (for the resamples)."""

    finding: Finding
    group: HostGroup | None

    def explained(self, metrics: Metrics, index: np.ndarray | None = None) -> np.ndarray:
        """Seconds per step the group's launch delays add (zeros when it does not apply)."""
        la = metrics.launch
        if self.group is None or la is None or not self.finding.applicable:
            n = 1 if index is None else index.shape[0]
            return np.zeros(n)
        return self.group.explained(la, index)


def _where(group: HostGroup) -> str:
    if group.kind == "worker":
        return f"worker{'s' if len(group.workers) > 1 else ''} {names(group.workers, 4)}"
    if group.kind == "dp_rank":
        return f"DP rank {group.key} (workers {names(group.workers, 4)})"
    return f"stage {group.key} (workers {names(group.workers, 4)})"


def test_host(metrics: Metrics, cfg: VerdictConfig) -> HostEvidence:
    """The host finding of one trace's metrics."""
    cause = Cause.HOST
    disc = metrics.discrepancy
    la = metrics.launch
    gates: dict[str, object] = {"discrepancy": disc}
    if la is None:
        return HostEvidence(not_applicable(
            cause, f"the simulation discrepancy {disc:.3f} is below {LAUNCH_THRESHOLD} (launch "
            "attribution is not computed)", gates), None)
    group = host_group(la, metrics.dp, metrics.pp)
    start = first_op_group(la, metrics.dp, metrics.pp)
    first_share = 0.0 if start is None else start.share(la)
    gates["first_op_share"] = first_share
    if group is None:
        crit = critical_group(la, metrics.dp, metrics.pp)
        common = common_overhead(la, metrics.dp, metrics.pp) is not None
        gates["common_overhead"] = common
        why = "no worker's launch delays slow the job"
        if crit is not None:
            why = ("no worker's host time stands out from its peers' "
                   + ("(launch gaps on every worker alike: common host overhead, which slows "
                      "the job but blames nobody)" if common else
                      "beyond the noise, though it differs between DP ranks")
                   + f"; the part on the critical path, {_where(crit)}'s, explains "
                   f"{portion(crit.share(la))} of the {100 * (disc - 1):.1f}% discrepancy")
        return HostEvidence(not_applicable(cause, why, gates), None)
    share = group.share(la)
    s_launch = float(group.times.mean() / la.nodelay.mean())
    gates.update({"group": group.kind, "key": group.key, "s_launch": s_launch,
                  "share": share, "residual_discrepancy": group.residual(la),
                  "explained_s_per_step": float(group.explained(la)[0])})
    where = _where(group)
    if share < cfg.explain:
        return HostEvidence(not_applicable(
            cause, f"the host time is spread: the largest part, {where}'s launch delays, "
            f"explains {portion(share)} of the {100 * (disc - 1):.1f}% discrepancy", gates),
            group)
    at_start = (f"; {portion(first_share)} of the host time is before each step's first op "
                "(data loading, batch preparation, a late step start)" if first_share >= 0.5
                else f"; the step's first op accounts for {portion(first_share)} of it (the "
                "rest is launch gaps inside the step: CPU or Python stalls)")
    verb = "launch" if len(group.workers) > 1 else "launches"
    evidence = (f"host time: {where} {verb} work late; the launch delays alone make the "
                f"job {s_launch:.3f}x "
                f"slower than its recorded work ({portion(share)} of the "
                f"{100 * (disc - 1):.1f}% simulation discrepancy){at_start}")
    return HostEvidence(Finding(cause=cause, applicable=True, m=None, workers=group.workers,
                                gates=gates, evidence=evidence, fixed_share=share), group)
