"""Mitigation: from "who is slow" to "what to do" (issue 11).

* :mod:`~stragglers.mitigate.microbatch` — S2, the exact micro-batch assignment across DP groups;
* :mod:`~stragglers.mitigate.rebalance` — S2 for a user's own loop (:class:`Rebalancer`: robust
  per-replica speed, the split, give-back);
* :mod:`~stragglers.mitigate.planner` — the multi-level ski-rental planner over ``watch`` events;
* :mod:`~stragglers.mitigate.topology` — S3 plans: straggler consolidation, link reassignment;
* :mod:`~stragglers.mitigate.seqlen` — sequence-length rebalancing (cost model, partitioning);
* :mod:`~stragglers.mitigate.predict` — the step time after a plan, predicted by the what-if
  simulator from the job's own trace.
"""

from stragglers.mitigate.microbatch import Assignment, solve_microbatches
from stragglers.mitigate.rebalance import Estimate, Rebalancer

__all__ = ["Assignment", "Estimate", "Rebalancer", "solve_microbatches"]
