"""The fleet's figures as numbers: counts, the headline sentences' numbers (§4.1, §5), the
root-cause mix and, where truth is known, the confusion matrix of verdict vs truth.

* analysed jobs with |discrepancy - 1| > 5% (§6) are **excluded** from every figure and
  counted; failed jobs (their one-line reasons kept) likewise;
* a job **straggles** when S >= 1.1 (:data:`STRAGGLING`, §4.2);
* GPU-hours wasted: sum over jobs of gpu_hours x waste, over the sum of gpu_hours;
* ``cause_accuracy``: among analysed jobs with a truth file (excluded ones included: the
  verdict is judged on every job it ran on), the share whose verdict is the truth's primary
  cause.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stragglers.analysis.result import DISCREPANCY_LIMIT
from stragglers.analysis.verdict import Cause
from stragglers.fleet.parquet import NamedRow
from stragglers.fleet.task import STATUS_ANALYSED, STATUS_FAILED

#: S at or above which a job straggles (the paper's "significant slowdown").
STRAGGLING = 1.1
CAUSES: tuple[str, ...] = tuple(c.value for c in Cause)


@dataclass(frozen=True)
class FleetStats:
    jobs: int
    analysed: int
    failed: int
    excluded: int
    included: tuple[NamedRow, ...]
    failures: tuple[tuple[str, str], ...]
    straggling_share: float
    gpu_hours: float
    wasted_gpu_hours: float
    cause_mix: tuple[tuple[str, int], ...]
    mw_majority_share: float
    ms_majority_share: float
    with_truth: int
    cause_accuracy: float | None
    confusion_labels: tuple[str, ...]
    confusion: np.ndarray  # (truth, verdict) counts, labels confusion_labels

    @property
    def wasted_share(self) -> float:
        return self.wasted_gpu_hours / self.gpu_hours if self.gpu_hours > 0 else 0.0

    @property
    def straggling(self) -> tuple[NamedRow, ...]:
        return tuple(r for r in self.included if r.row.slowdown >= STRAGGLING)

    def summary(self) -> dict[str, object]:
        """The ``--json`` summary."""
        return {"jobs": self.jobs, "analysed": self.analysed, "failed": self.failed,
                "excluded": self.excluded, "cause_accuracy": self.cause_accuracy}

    def headlines(self) -> list[str]:
        """The headline sentences, with numbers."""
        n = len(self.included)
        out = [f"{self.jobs:,} jobs: {self.analysed:,} analysed, {self.failed:,} failed "
               f"(unreadable or invalid traces), {self.excluded:,} excluded for a simulation "
               f"discrepancy above {100 * DISCREPANCY_LIMIT:.0f}%; the figures cover the "
               f"other {n:,}."]
        if n == 0:
            return out
        out.append(f"{100 * self.straggling_share:.1f}% of jobs straggle (S >= "
                   f"{STRAGGLING:g}); {100 * self.wasted_share:.1f}% of the GPU-hours "
                   f"({self.wasted_gpu_hours:,.2f} of {self.gpu_hours:,.2f} traced) are "
                   "wasted by stragglers.")
        mix = ", ".join(f"{c} {100 * k / n:.1f}%" for c, k in self.cause_mix if k)
        out.append(f"Root-cause mix (verdict, all {n:,} jobs): {mix}.")
        if self.straggling:
            out.append(f"Workers (M_W > 0.5) explain most of the slowdown of "
                       f"{100 * self.mw_majority_share:.1f}% of straggling jobs; the last "
                       f"stage (M_S > 0.5) of {100 * self.ms_majority_share:.1f}%.")
        if self.cause_accuracy is not None:
            out.append(f"The verdict names the injected cause for "
                       f"{100 * self.cause_accuracy:.1f}% of the {self.with_truth:,} jobs with "
                       "ground truth.")
        return out


def fleet_stats(rows: Sequence[NamedRow]) -> FleetStats:
    analysed = [r for r in rows if r.row.status == STATUS_ANALYSED]
    failed = [r for r in rows if r.row.status == STATUS_FAILED]
    included = tuple(r for r in analysed
                     if abs(r.row.discrepancy - 1.0) <= DISCREPANCY_LIMIT)
    n = len(included)
    s = np.array([r.row.slowdown for r in included])
    gh = np.array([r.row.gpu_hours for r in included])
    waste = np.array([r.row.waste for r in included])
    mix = Counter(r.row.verdict for r in included)
    strag = [r for r in included if r.row.slowdown >= STRAGGLING]
    truth = [r for r in analysed if r.row.truth_primary]
    seen = {r.row.truth_primary for r in truth} | {r.row.verdict for r in truth}
    labels = tuple(c for c in CAUSES if c in seen) + tuple(sorted(seen - set(CAUSES)))
    index = {c: i for i, c in enumerate(labels)}
    conf = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for r in truth:
        conf[index[r.row.truth_primary], index[r.row.verdict]] += 1
    right = int(np.trace(conf))
    return FleetStats(
        jobs=len(rows), analysed=len(analysed), failed=len(failed),
        excluded=len(analysed) - n, included=included,
        failures=tuple((r.job, r.row.reason) for r in failed),
        straggling_share=float((s >= STRAGGLING).mean()) if n else 0.0,
        gpu_hours=float(gh.sum()), wasted_gpu_hours=float((gh * waste).sum()),
        cause_mix=tuple((c, mix.get(c, 0)) for c in CAUSES),
        mw_majority_share=(float(np.mean([r.row.m_w > 0.5 for r in strag])) if strag
                           else 0.0),
        ms_majority_share=(float(np.mean([r.row.m_s > 0.5 for r in strag])) if strag
                           else 0.0),
        with_truth=len(truth),
        cause_accuracy=right / len(truth) if truth else None,
        confusion_labels=labels, confusion=conf)
