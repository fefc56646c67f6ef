"""The dependency model: graph, evaluation order, derived durations."""

from stragglers.model.durations import DerivedDurations, derive_durations
from stragglers.model.graph import DependencyGraph, build_graph
from stragglers.model.order import EvaluationOrder, evaluation_order

__all__ = ["DependencyGraph", "DerivedDurations", "EvaluationOrder", "build_graph",
           "derive_durations", "evaluation_order"]
