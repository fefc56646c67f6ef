"""Named what-if scenarios (whatif-model.md §5).

A scenario is a timeline in which some ops keep their *original* value (duration of a local
op, transfer duration of a communication op, as derived from the trace) and every other op
takes its *ideal* value (the mean or median of its op type). Which ops keep their value is
said by masks over op identities, workers and steps; a scenario may also bring values of
its own instead of the trace's (an "equal microbatches" or "no pauses" what-if), and may
say that only one DP rank differs from the ideal, which lets the simulator stand for all
other DP ranks with one ideal *virtual* rank.

:meth:`stragglers.analysis.engine.WhatIfEngine.run` simulates a list of scenarios and returns
their step times by name, batching those that can share one simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Scenario:
    """One timeline to simulate.

    * ``nodes``: (n_nodes,) bool, op identities that keep their original value (None: all);
    * ``workers``: (dp, pp) bool, workers that keep their original value (None: all);
    * ``steps``: (n_steps,) bool, steps whose ops keep their original value (None: all);
    * ``values``: (n_nodes, dp, n_steps) values to use as "original" instead of the trace's;
    * ``only_dp_rank``: only this DP rank keeps original values (the others are ideal), so
      the scenario is simulated with two virtual DP ranks instead of all of them;
      ``workers`` then restricts the stages of that rank (its row ``workers[d]``).

    An op keeps its original value when all masks given say so; ``all_ideal`` keeps none.
    """

    name: str
    nodes: np.ndarray | None = None
    workers: np.ndarray | None = None
    steps: np.ndarray | None = None
    values: np.ndarray | None = None
    only_dp_rank: int | None = None
    all_ideal: bool = False

    @classmethod
    def ideal(cls, name: str = "ideal") -> Scenario:
        """Every op at its ideal value (every DP rank then runs the same timeline)."""
        return cls(name, all_ideal=True)

    @classmethod
    def original(cls, name: str = "no_delay") -> Scenario:
        """Every op at its original value (the no-delay timeline)."""
        return cls(name)

    @classmethod
    def keep_workers(cls, name: str, workers: np.ndarray) -> Scenario:
        """Only these workers (dp, pp) keep their original values."""
        return cls(name, workers=np.asarray(workers, dtype=bool))

    @classmethod
    def keep_nodes(cls, name: str, nodes: np.ndarray) -> Scenario:
        """Only these op identities keep their original values."""
        return cls(name, nodes=np.asarray(nodes, dtype=bool))

    @classmethod
    def keep_dp_rank(cls, name: str, dp_rank: int, stages: np.ndarray | None = None
                     ) -> Scenario:
        """Only DP rank ``dp_rank`` (on ``stages``, a (pp,) mask; all when None) keeps its
        original values."""
        workers = None if stages is None else np.asarray(stages, dtype=bool)[None, :]
        return cls(name, workers=workers, only_dp_rank=int(dp_rank))

    @classmethod
    def with_values(cls, name: str, values: np.ndarray) -> Scenario:
        """Every op takes ``values`` (n_nodes, dp, n_steps) instead of the trace's."""
        return cls(name, values=values)


def removal_and_addition(name: str, *, nodes: np.ndarray | None = None,
                         workers: np.ndarray | None = None) -> tuple[Scenario, Scenario]:
    """The two scenarios of an M metric (Eq. 5) for a set of ops given by ``nodes`` and/or
    ``workers``: ``NAME/rem`` (those ops ideal, everything else original) and ``NAME/add``
    (only those ops original)."""
    if nodes is None and workers is None:
        raise ValueError("removal_and_addition: give nodes, workers or both")
    if nodes is not None and workers is not None:
        # The complement of (nodes AND workers) is not one mask pair; the callers never need
        # it, so it is refused rather than approximated.
        raise ValueError("removal_and_addition: nodes and workers together are not supported")
    if nodes is not None:
        keep = np.asarray(nodes, dtype=bool)
        return Scenario(f"{name}/rem", nodes=~keep), Scenario(f"{name}/add", nodes=keep)
    assert workers is not None
    chosen = np.asarray(workers, dtype=bool)
    return (Scenario(f"{name}/rem", workers=~chosen),
            Scenario(f"{name}/add", workers=chosen))
