"""Constants the parsers show in ``--help`` and ``choices``, kept here so that building the
parser imports no library of the commands (start-up: ``stragglers --help`` or an import of a
small trace should not load scipy, the simulator or the synthetic generator).

Each value is the library's own; ``tests/cli/test_startup.py`` checks that they agree.
"""

from __future__ import annotations

from collections.abc import Mapping

#: :data:`stragglers.evaluation.bocd.METHODS` (keys, in order) and ``DEFAULT_METHOD``.
DETECT_METHODS: tuple[str, ...] = ("robust", "bocd_verify", "falcon", "bocd", "sliding_window")
DETECT_DEFAULT_METHOD = "robust"
#: :data:`stragglers.detect.warmup.DEFAULT_MIN_ITERS`.
WARMUP_MIN_ITERS = 100
#: :data:`stragglers.detect.warmup.DEFAULT_WARMUP_ITERS` (the default detector's).
ROBUST_WARMUP_ITERS = 0
#: The default detector's defaults (:class:`stragglers.detect.robust.RobustLevelDetector`)
#: that ``watch --help`` shows.
ROBUST_DEFAULTS: Mapping[str, float] = {
    "threshold": 0.10, "stall_iters": 8, "stall_seconds": 0.0, "min_points": 3,
    "ramp_iters": 60, "rise_iters": 100, "startup_iters": 300, "flap_window_iters": 1000}
#: :data:`stragglers.synth.generator.MAX_SIGMA`.
SYNTH_MAX_SIGMA = 2.0
#: :data:`stragglers.synth.fleet.DEFAULT_MIX`.
FLEET_DEFAULT_MIX: Mapping[str, float] = {
    "none": 0.55, "worker": 0.08, "last_stage": 0.10, "sequence_length": 0.07, "gc": 0.07,
    "communication": 0.05, "combination": 0.08}
