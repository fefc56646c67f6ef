"""The root-cause hypotheses, one module each, in the order they are listed in result.json."""

from stragglers.analysis.verdict.hypotheses.communication import CommunicationHypothesis
from stragglers.analysis.verdict.hypotheses.last_stage import LastStageHypothesis
from stragglers.analysis.verdict.hypotheses.pauses import GcHypothesis, PausesHypothesis
from stragglers.analysis.verdict.hypotheses.sequence import SequenceLengthHypothesis
from stragglers.analysis.verdict.hypotheses.slow_worker import WorkerHypothesis

#: Every hypothesis the verdict tests.
ALL = (WorkerHypothesis(), LastStageHypothesis(), SequenceLengthHypothesis(), GcHypothesis(),
       PausesHypothesis(), CommunicationHypothesis())

__all__ = ["ALL", "CommunicationHypothesis", "GcHypothesis", "LastStageHypothesis",
           "PausesHypothesis", "SequenceLengthHypothesis", "WorkerHypothesis"]
