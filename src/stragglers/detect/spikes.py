"""Spikes of one rank: single slow iterations that are not a slow period, counted apart.

A point is a *spike* when its iteration time exceeds ``SPIKE_FACTOR`` (1.2) times the rank's
typical iteration time (the median of its last 16 iteration times: a handful of spikes does
not move it).  Spikes less than ``CLUSTER_GAP`` (3) points apart form one *cluster*; a cluster of
``MAX_CLUSTER`` (8) or more is a new level, not spikes (the detector reports it).  They cost
time: ``seconds_lost`` sums ``(time - typical) x step`` (``step``: the iteration numbers the
point stands for; an estimate when the input samples one iteration out of ``step``), and
``iterations_lost`` is that divided by the typical time.  The detector never opens a slow
period on spikes (:mod:`stragglers.evaluation.bocd`, persistence rule); ``watch`` reports them in
periodic ``spikes`` events (:meth:`SpikeCounter.report`) and in its summary.
"""

from __future__ import annotations

from stragglers.detect.events import SpikesEvent

__all__ = ["CLUSTER_GAP", "MAX_CLUSTER", "SPIKE_FACTOR", "SpikeCounter"]

SPIKE_FACTOR = 1.2
CLUSTER_GAP = 3
MAX_CLUSTER = 8  # this many elevated points in one cluster are a level (min_segment)


class SpikeCounter:
    """Spike counts of one rank since its last report, and in total."""

    __slots__ = ("points", "spikes_since", "clusters_since", "seconds_since", "iters_since",
                 "largest", "first_iter", "last_iter", "total_spikes", "total_clusters",
                 "total_seconds", "total_iterations", "_n", "_last_spike", "_pending")

    def __init__(self) -> None:
        self.total_spikes = 0
        self.total_clusters = 0
        self.total_seconds = 0.0
        self.total_iterations = 0.0
        self._n = 0
        self._last_spike = -CLUSTER_GAP - 1
        self._pending: list[tuple[float, float, float]] = []
        self._window()

    def _window(self) -> None:
        self.points = 0
        self.spikes_since = 0
        self.clusters_since = 0
        self.seconds_since = 0.0
        self.iters_since = 0.0
        self.largest = 0.0
        self.first_iter: int | None = None
        self.last_iter: int | None = None

    def add(self, x: float, typical: float, step: int, iteration: int,
            report_points: int = 1000, hold: bool = False) -> bool:
        """Count one iteration time; True when the window since the last report holds
        spikes.  A window of ``report_points`` points without a spike is started afresh.

        Spikes are held as a pending cluster until ``CLUSTER_GAP`` ordinary points follow
        it; a cluster of ``MAX_CLUSTER`` spikes or more is a new level (the detector reports
        it), not spikes, and is discarded, as is a pending cluster when the detector raises
        an alarm (:meth:`discard_pending`).  ``hold``: the detector is still deciding
        whether the elevated points are a level (its candidate stretch is open), so the
        pending cluster waits for its decision."""
        self._n += 1
        if self.points >= report_points and not self.spikes_since and not self._pending:
            self._window()
        if self.first_iter is None:
            self.first_iter = iteration
        self.last_iter = iteration
        self.points += 1
        if typical == typical and x > SPIKE_FACTOR * typical:
            self._pending.append(((x - typical) * step, typical, x / typical))
            self._last_spike = self._n
        elif self._pending and self._n - self._last_spike >= CLUSTER_GAP and not hold:
            self._flush()
        return self.spikes_since > 0

    def _flush(self) -> None:
        pending = self._pending
        self._pending = []
        if len(pending) >= MAX_CLUSTER:
            return
        self.clusters_since += 1
        self.total_clusters += 1
        for lost, typical, ratio in pending:
            self.spikes_since += 1
            self.total_spikes += 1
            self.seconds_since += lost
            self.total_seconds += lost
            self.iters_since += lost / typical
            self.total_iterations += lost / typical
            self.largest = max(self.largest, ratio)

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def discard_pending(self) -> None:
        """The pending elevated points were the start of a new level."""
        self._pending = []

    def report(self, rank: int, line: int, final: bool = False) -> SpikesEvent:
        """The ``spikes`` event of the window, which then starts afresh (``final``: the
        input ended, a pending cluster counts)."""
        if final and self._pending:
            self._flush()
        ev = SpikesEvent(
            rank=rank, line=line, job_iteration=self.first_iter,
            last_job_iteration=self.last_iter, points=self.points, spikes=self.spikes_since,
            clusters=self.clusters_since,
            rate_per_100=round(100.0 * self.spikes_since / max(self.points, 1), 3),
            seconds_lost=round(self.seconds_since, 3), iterations_lost=round(self.iters_since, 3),
            largest_ratio=round(self.largest, 3))
        self._window()
        return ev
