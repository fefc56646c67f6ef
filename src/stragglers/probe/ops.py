"""Operation types the probes record, and the id conventions of the trace schema.

The names are the ones of ``whatif-model.md`` §1 (the trace schema the analyzer reads). The
conventions for ``mc``/``gmc``/``mb_id`` follow the reference traces recorded with Megatron-LM:

* compute ops carry the microbatch id and model chunk; ``gmc = mc * pp + stage``;
* ``params-all-gather`` and ``grads-reduce-scatter`` carry the model chunk they move (``mc``)
  but no global chunk (``gmc = -1``);
* ``gc`` carries ``mb_id = 0``; every other op carries ``-1`` in all three columns.
"""

from __future__ import annotations

from stragglers.trace.schema import (  # noqa: F401  (re-exported for the probes)
    BACKWARD_COMPUTE,
    BACKWARD_RECV,
    BACKWARD_SEND,
    CLIP,
    COMPUTE_TYPES,
    EMBEDDING_ALL_REDUCE,
    FORWARD_COMPUTE,
    FORWARD_RECV,
    FORWARD_SEND,
    GC,
    GRADS_REDUCE_SCATTER,
    LAYERNORM_ALL_REDUCE,
    OPTIMIZER,
    OPTYPES,
    P2P_TYPES,
    PARAMS_ALL_GATHER,
    SEPARATE_GRADS_ALL_REDUCE,
)

#: Ops that name the model chunk whose parameters or gradients they move.
CHUNK_COLLECTIVES = frozenset({PARAMS_ALL_GATHER, GRADS_REDUCE_SCATTER})
#: Ops that must appear exactly once per worker and step.
ONCE_PER_STEP = frozenset({GC, LAYERNORM_ALL_REDUCE, CLIP, OPTIMIZER})


def normalise_ids(optype: str, mb_id: int, mc: int, stage: int, pp_size: int
                  ) -> tuple[int, int, int]:
    """Return ``(mc, gmc, mb_id)`` for a recorded op, following the schema's conventions.

    >>> normalise_ids(FORWARD_COMPUTE, 3, 0, 1, 4)
    (0, 1, 3)
    >>> normalise_ids(GRADS_REDUCE_SCATTER, -1, 0, 1, 4)
    (0, -1, -1)
    >>> normalise_ids(GC, -1, -1, 2, 4)
    (-1, -1, 0)
    """
    if optype not in OPTYPES:
        raise ValueError(f"unknown operation type {optype!r}")
    if optype in COMPUTE_TYPES:
        chunk = max(mc, 0)
        return chunk, chunk * pp_size + stage, mb_id
    if optype in CHUNK_COLLECTIVES:
        return max(mc, 0), -1, -1
    if optype == GC:
        return -1, -1, 0
    return -1, -1, -1
