"""Online fail-slow detection on iteration series: from the records of a live job to "which
rank, since when, how slow".

Reads typed records from :mod:`stragglers.logs` (the readers and followers) and never the
other way round; hang localisation is :mod:`stragglers.hang`; the BOCD baselines it is
compared with are :mod:`stragglers.evaluation.bocd`. One job per module:

* :mod:`~stragglers.detect.detector` - the streaming interface (``Detector``, ``Alarm``);
* :mod:`~stragglers.detect.robust` - the default detector: robust levels on log time;
* :mod:`~stragglers.detect.warmup`, :mod:`~stragglers.detect.spikes` - the warm-up and spikes;
* :mod:`~stragglers.detect.period` - iteration times from a rank's call sequence (ACF period,
  anchor n-gram), streaming and batch;
* :mod:`~stragglers.detect.steps` - the probes' step records joined across ranks;
* :mod:`~stragglers.detect.narrow` - suspicious communication groups (slow transfer vs waiting);
* :mod:`~stragglers.detect.matrix` - C4D delay matrix and late senders from receive waits;
* :mod:`~stragglers.detect.jobs` - job-level events from the ranks' events;
* :mod:`~stragglers.detect.watch` - the streaming watcher (``stragglers watch``);
* :mod:`~stragglers.detect.watch_files` - ``watch`` on files: the followed files into the
  watcher;
* :mod:`~stragglers.detect.events` - its events, one frozen dataclass per kind (JSON only at
  the edges: stdout, the service's store, files).
"""

from stragglers.detect.detector import DEFAULT_METHOD, Alarm, Detector
from stragglers.detect.period import PeriodTracker, find_period, iteration_times
from stragglers.detect.robust import RobustLevelDetector

__all__ = [
    "DEFAULT_METHOD",
    "Alarm",
    "Detector",
    "PeriodTracker",
    "RobustLevelDetector",
    "find_period",
    "iteration_times",
]
