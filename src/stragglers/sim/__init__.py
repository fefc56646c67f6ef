"""The vectorised what-if simulator."""

from stragglers.sim.simulator import MixedValues, SimResult, simulate, simulate_mixed

__all__ = ["MixedValues", "SimResult", "simulate", "simulate_mixed"]
