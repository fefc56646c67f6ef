"""Online fail-slow detection: from live call logs to "which GPU or link, since when".

One job per module:

* :mod:`~stragglers.detect.records` - JSON-lines record schema (call, iteration, message) and
  parsing with file/line/field errors;
* :mod:`~stragglers.detect.period` - iteration times from a rank's call sequence (ACF period,
  anchor n-gram), streaming and batch;
* :mod:`~stragglers.detect.bocd` - BOCD (Normal-Gamma, constant hazard) with verification, and the
  plain-BOCD and sliding-window baselines behind one streaming interface (``Detector``);
* :mod:`~stragglers.detect.narrow` - suspicious communication groups (slow transfer vs waiting);
* :mod:`~stragglers.detect.matrix` - C4D delay matrix and late senders from receive waits;
* :mod:`~stragglers.detect.hang` - hang localisation on a dp x pp x tp topology;
* :mod:`~stragglers.detect.flight_recorder` - reading PyTorch NCCL flight-recorder dumps (a
  restricted unpickler: plain containers and scalars only);
* :mod:`~stragglers.detect.fr_hang` - hang localisation from those dumps, any process groups;
* :mod:`~stragglers.detect.follow` - following a growing file through truncation and rotation;
* :mod:`~stragglers.detect.watch` - the streaming watcher (``stragglers watch``);
* :mod:`~stragglers.detect.events` - its events, one frozen dataclass per kind (JSON only at
  the edges: stdout, the service's store, files).
"""

from stragglers.detect.bocd import (
    BOCD,
    Alarm,
    BOCDDetector,
    BOCDVerifyDetector,
    NormalGammaPrior,
    SlidingWindowDetector,
    make_detector,
    run_detector,
)
from stragglers.detect.period import PeriodTracker, find_period, iteration_times

__all__ = [
    "Alarm",
    "BOCD",
    "BOCDDetector",
    "BOCDVerifyDetector",
    "NormalGammaPrior",
    "PeriodTracker",
    "SlidingWindowDetector",
    "find_period",
    "iteration_times",
    "make_detector",
    "run_detector",
]
