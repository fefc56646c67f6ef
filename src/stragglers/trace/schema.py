"""Column names, operation types and their classes (whatif-model.md §1).

Everything else in the toolkit refers to these names instead of spelling them again.
"""

from __future__ import annotations

import numpy as np

#: Columns every trace must have, with the numpy kind they must be convertible to.
REQUIRED_COLUMNS: dict[str, str] = {
    "dp_rank": "int",
    "stage": "int",
    "rank": "int",
    "step": "int",
    "optype": "str",
    "start_ts": "float",
    "duration": "float",
    "seq_id": "int",
    "mc": "int",
    "mb_id": "int",
    "gmc": "int",
}

#: Columns a trace may have, with their kind: ``gc_s`` is the seconds of garbage collection
#: recorded inside the op (0 <= gc_s <= duration; the probes' GC callbacks, or synth);
#: ``host`` the name of the machine the worker ran on (one per worker; the probe merge).
OPTIONAL_COLUMNS: dict[str, str] = {"gc_s": "float", "host": "str"}

#: Metadata keys (job YAML) and whether they are integers.
META_INT_KEYS: tuple[str, ...] = (
    "dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size",
)

FORWARD_COMPUTE = "forward-compute"
BACKWARD_COMPUTE = "backward-compute"
FORWARD_SEND = "forward-send"
FORWARD_RECV = "forward-recv"
BACKWARD_SEND = "backward-send"
BACKWARD_RECV = "backward-recv"
PARAMS_ALL_GATHER = "params-all-gather"
GRADS_REDUCE_SCATTER = "grads-reduce-scatter"
SEPARATE_GRADS_ALL_REDUCE = "separate-grads-all-reduce"
LAYERNORM_ALL_REDUCE = "layernorm-grads-all-reduce"
EMBEDDING_ALL_REDUCE = "embedding-grads-all-reduce"
CLIP = "optimizer-clip-main-grad"
OPTIMIZER = "optimizer"
GC = "gc"
#: Expert-parallel / embedding all-to-all (MoE dispatch and combine, DLRM embeddings): not in
#: the published model; the project's extension E2 (docs/model-extensions.md).
ALL_TO_ALL = "all-to-all"

#: Every operation type, in a fixed order: the index is the type's integer code.
OPTYPES: tuple[str, ...] = (
    FORWARD_COMPUTE, BACKWARD_COMPUTE,
    FORWARD_SEND, FORWARD_RECV, BACKWARD_SEND, BACKWARD_RECV,
    PARAMS_ALL_GATHER, GRADS_REDUCE_SCATTER, SEPARATE_GRADS_ALL_REDUCE,
    LAYERNORM_ALL_REDUCE, EMBEDDING_ALL_REDUCE, CLIP, OPTIMIZER, GC, ALL_TO_ALL,
)
OPTYPE_CODE: dict[str, int] = {name: i for i, name in enumerate(OPTYPES)}

COMPUTE_TYPES = frozenset({FORWARD_COMPUTE, BACKWARD_COMPUTE})
P2P_TYPES = frozenset({FORWARD_SEND, FORWARD_RECV, BACKWARD_SEND, BACKWARD_RECV})
DP_COLLECTIVES = frozenset({PARAMS_ALL_GATHER, GRADS_REDUCE_SCATTER, SEPARATE_GRADS_ALL_REDUCE})
#: Ideal value = mean over the job for these; median for every other type (§5).
MEAN_TYPES = frozenset({FORWARD_COMPUTE, BACKWARD_COMPUTE, OPTIMIZER, GC})

#: Attribution keys by operation type: the P2P types are counted per direction (§5).
ATTRIBUTION_TYPE = {name: name for name in OPTYPES} | {
    FORWARD_SEND: "forward-pp-comm",
    FORWARD_RECV: "forward-pp-comm",
    BACKWARD_SEND: "backward-pp-comm",
    BACKWARD_RECV: "backward-pp-comm",
}

#: Communication classes used by the root-cause verdict.
COMM_ATTRIBUTION_KEYS = frozenset(
    {"forward-pp-comm", "backward-pp-comm", PARAMS_ALL_GATHER, GRADS_REDUCE_SCATTER,
     SEPARATE_GRADS_ALL_REDUCE, LAYERNORM_ALL_REDUCE, EMBEDDING_ALL_REDUCE, CLIP, ALL_TO_ALL}
)


def ideal_is_mean(optype_codes: np.ndarray) -> np.ndarray:
    """Boolean mask: True where the ideal value of the type is its mean (else median)."""
    mean_codes = np.array([OPTYPE_CODE[t] for t in MEAN_TYPES])
    return np.isin(optype_codes, mean_codes)
