"""The action file: how ``stragglers mitigate run`` tells a running job to change its
micro-batch assignment (live S2). The controller writes it atomically; the job polls it at the
top of every step. The file is one JSON object::

    {"schema": "stragglers.action/1", "seq": 3, "step": 120, "kind": "microbatch",
     "assignment": [3, 5]}

``seq`` (integer >= 1) numbers the actions: an action with a ``seq`` not above the last one
taken is stale and ignored. ``step`` (integer >= 0) is the first step it applies to.
``assignment`` gives each DP replica's micro-batch count ``m_i >= 1`` with
``sum m_i = dp * M`` (``M`` micro-batches per replica). How the example job applies it is in
:mod:`stragglers.testbed.assignment`.
"""

from __future__ import annotations

from dataclasses import dataclass

from stragglers.errors import InputError
from stragglers.inputs import int_field, json_object

__all__ = ["ACTION_SCHEMA", "MicrobatchAction", "parse_action"]

ACTION_SCHEMA = "stragglers.action/1"


@dataclass(frozen=True)
class MicrobatchAction:
    """One micro-batch assignment action."""

    seq: int
    step: int
    assignment: tuple[int, ...]

    def to_dict(self) -> dict[str, object]:
        return {"schema": ACTION_SCHEMA, "seq": self.seq, "step": self.step,
                "kind": "microbatch", "assignment": list(self.assignment)}


def parse_action(text: str, where: str, dp: int, microbatches: int) -> MicrobatchAction:
    """The action in ``text`` (the content of the file ``where``), checked against the job's
    ``dp`` replicas and ``microbatches`` per replica; an :class:`InputError` names the field."""
    raw = json_object(text, where)
    if raw.get("schema") != ACTION_SCHEMA:
        raise InputError(f"{where}: field 'schema': expected {ACTION_SCHEMA!r}, got "
                         f"{raw.get('schema')!r}"[:300])
    if raw.get("kind") != "microbatch":
        raise InputError(f"{where}: field 'kind': expected 'microbatch', got "
                         f"{raw.get('kind')!r}"[:300])
    seq = int_field(raw, "seq", where, 1)
    step = int_field(raw, "step", where, 0)
    counts = raw.get("assignment")
    if not isinstance(counts, list) or len(counts) != dp:
        raise InputError(f"{where}: field 'assignment': expected a list of {dp} micro-batch "
                         f"counts (one per DP replica)")
    for row, m in enumerate(counts):
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise InputError(f"{where}: field 'assignment' row {row}: expected an integer "
                             f">= 1, got {m!r}"[:300])
    if sum(counts) != dp * microbatches:
        raise InputError(f"{where}: field 'assignment': the counts sum to {sum(counts)}, the "
                         f"job runs {dp} x {microbatches} = {dp * microbatches} micro-batches "
                         "per step")
    return MicrobatchAction(seq=seq, step=step, assignment=tuple(counts))
