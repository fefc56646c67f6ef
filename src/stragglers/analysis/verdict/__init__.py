"""The root-cause verdict (paper §5): hypotheses as objects, one configuration, a calibrated
confidence.

* :mod:`.config`: :class:`VerdictConfig`, every threshold with its default;
* :mod:`.base`: :class:`Cause`, :class:`Finding`, the :class:`Hypothesis` protocol;
* :mod:`.context`: the evidence the hypotheses share (computed once);
* :mod:`.hypotheses`: one module per cause (worker, last_stage, sequence_length, gc, pauses,
  communication);
* :mod:`.decide`: the choice among the findings and the confidence.
"""

from stragglers.analysis.verdict.base import Cause, Finding, Hypothesis
from stragglers.analysis.verdict.config import VerdictConfig
from stragglers.analysis.verdict.context import VerdictContext
from stragglers.analysis.verdict.decide import Verdict, decide

__all__ = ["Cause", "Finding", "Hypothesis", "Verdict", "VerdictConfig", "VerdictContext",
           "decide"]
