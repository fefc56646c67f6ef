"""What every root-cause hypothesis is: a :class:`Cause`, and a ``test`` that turns the
evidence of one trace into a :class:`Finding`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from stragglers.analysis.metrics import Characterisation
from stragglers.analysis.workers import Worker

if TYPE_CHECKING:
    from stragglers.analysis.verdict.context import VerdictContext


class Cause(StrEnum):
    """Root causes a verdict can name (the values are result.json's ``verdict.cause``)."""

    WORKER = "worker"
    LAST_STAGE = "last_stage"
    SEQUENCE_LENGTH = "sequence_length"
    GC = "gc"
    PAUSES = "pauses"
    COMMUNICATION = "communication"
    HOST = "host"
    UNEXPLAINED = "unexplained"
    NONE = "none"


#: A gating signal's value: a figure, a yes/no, a list of worker keys, a small mapping of
#: figures, or None (not available). They end up in result.json as they are.
Signal = Any


@dataclass(frozen=True)
class Finding:
    """The outcome of testing one hypothesis on one trace.

    ``applicable``: its gates hold (``why_not`` says which failed when not); ``m``: its
    what-if (Eq. 5) over the ops it blames, from which ``share`` — the share of the slowdown
    that disappears when only those ops are fixed (``rem`` bounded to [0, 1]) — comes;
    ``workers``: whom it blames; ``gates``: the figures its gates were decided on;
    ``evidence``: one sentence for the on-call engineer.
    """

    cause: Cause
    applicable: bool
    m: Characterisation | None
    workers: tuple[Worker, ...] = ()
    gates: Mapping[str, Signal] = field(default_factory=dict)
    evidence: str = ""
    why_not: str | None = None
    #: The share of a finding without an Eq. 5 what-if (``host``: the share of the
    #: discrepancy its launch delays explain); None: from ``m``.
    fixed_share: float | None = None

    @property
    def share(self) -> float:
        if self.fixed_share is not None:
            return self.fixed_share
        return 0.0 if self.m is None else self.m.share


class Hypothesis(Protocol):
    """One root cause: selects its ops, computes its what-if shares and gates, explains."""

    cause: Cause

    def test(self, ctx: VerdictContext) -> Finding:
        """Test the hypothesis on one trace's evidence."""
        ...


#: A share of the slowdown at or below this is "none" (what :func:`portion` prints): a
#: hypothesis whose ops explain no more than this does not apply (the verdict's rule).
NONE_SHARE = 0.005


def portion(share: float | None) -> str:
    """A share of the slowdown in words: "none", "40%" or "all" (shares are bounded to [0, 1];
    a raw ``rem`` above 1 means fixing the ops alone leaves the job faster than the ideal
    timeline, an ``add`` above 1 that the ops alone would cause more than the whole slowdown,
    other effects masking them); "undefined" when the what-if does not apply to the ops."""
    if share is None:
        return "undefined"
    if share >= 0.995:
        return "all"
    if share <= NONE_SHARE:
        return "none"
    return f"{share:.0%}"


def not_applicable(cause: Cause, why: str, gates: Mapping[str, Signal] | None = None,
                   m: Characterisation | None = None) -> Finding:
    """A finding whose gates do not hold."""
    return Finding(cause=cause, applicable=False, m=m, gates=dict(gates or {}), why_not=why)
