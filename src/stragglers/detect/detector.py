"""The streaming detector interface of ``stragglers watch`` and the service: one rank's
iteration times in, :class:`Alarm` s out.

The default detector is :class:`~stragglers.detect.robust.RobustLevelDetector`
(``DEFAULT_METHOD``); the BOCD family and the sliding-window baseline that the evaluation
compares it with implement the same :class:`Detector` protocol
(:mod:`stragglers.evaluation.bocd`; the command line offers them with ``--method``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["DEFAULT_METHOD", "Alarm", "Detector", "median_sorted"]

#: The detector of ``stragglers watch`` and the service unless ``--method`` says otherwise.
DEFAULT_METHOD = "robust"


@dataclass(frozen=True)
class Alarm:
    """A detector verdict.

    ``index`` is the estimated first iteration of the new regime (0-based position in the series);
    ``declared_at`` the position of the iteration whose arrival produced the alarm, so the
    detection delay is ``declared_at - true_onset``.  Detectors that are given iteration
    numbers (:class:`~stragglers.detect.robust.RobustLevelDetector`) also set ``iteration``
    (the job iteration of ``index``); ``slow_fraction`` is the share of iterations that were
    slow (``flapping``); ``note`` says why an alarm came (``segment``: a restart ended the
    episode; ``flapping``: flapping ended; ``steady``: flapping became a steady slow level;
    ``periods``: said by the view on whole periods of a periodic series; ``mean``: said by
    the view on the mean, a rise of the mean made of sparse long iterations).
    """

    kind: str  # "onset" | "change" | "recovery" | "speedup" | "flapping" | "drift"
    index: int
    declared_at: int
    level_before: float
    level_after: float
    healthy_level: float
    severity: float
    iteration: int | None = None
    slow_fraction: float | None = None
    note: str = ""
    since: int | None = None  # flapping: the iteration of its first slow episode

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "kind": self.kind,
            "index": self.index,
            "declared_at": self.declared_at,
            "level_before": self.level_before,
            "level_after": self.level_after,
            "healthy_level": self.healthy_level,
            "severity": self.severity,
        }
        if self.iteration is not None:
            out["iteration"] = self.iteration
        return {**out, **self.extras()}

    def extras(self) -> dict[str, object]:
        """The optional fields that are set: ``slow_fraction``, ``note``, ``since``."""
        return {k: v for k, v in (("slow_fraction", self.slow_fraction), ("note", self.note),
                                  ("since", self.since)) if v is not None and v != ""}


class Detector(Protocol):
    """Streaming slow-iteration detector of one rank: one ``update`` (or ``observe``) per new
    iteration time.

    A *segmented* detector takes job iteration numbers (:meth:`observe`) and restarts
    (:meth:`new_segment` forgets its levels; the watcher warms up again, for
    ``default_warmup_iters``); the others take positions only (``observe`` is ``update``)
    and keep their state across a restart.  ``candidate_open``: the detector is weighing a
    candidate stretch whose elevated points may yet become a level (not spikes yet)."""

    name: str
    segmented: bool
    default_warmup_iters: int

    @property
    def candidate_open(self) -> bool: ...

    def update(self, x: float) -> list[Alarm]:
        """Absorb one iteration time (seconds, > 0) and return the alarms it triggers."""
        ...

    def observe(self, x: float, iteration: int, span: int = 1) -> list[Alarm]:
        """``x`` seconds per iteration at job iteration ``iteration``, ``span`` iterations
        after the previous point."""
        ...

    def new_segment(self) -> list[Alarm]:
        """A restart or resume: the alarms that end an open episode."""
        ...


def median_sorted(s: list[float]) -> float:
    m = len(s) // 2
    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2
