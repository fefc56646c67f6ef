"""Hand-built traces whose timelines and what-if figures were worked out on paper.

``two_by_two``: dp 2 x pp 2, one microbatch, DP collectives not overlapped. Durations:
params-all-gather 0.1, forward 1 (worker dp 1 / stage 0: 2), backward 2, P2P transfer 0.1,
gc 0, layernorm 0.01, embedding 0.2, reduce-scatter 0.5, clip 0.05, optimizer 0.3.
The critical path of DP rank 1 is 0.1+2+0.1+1+2+0.1+2+0.01+0.2 = 7.51, then the
DP-synchronised reduce-scatter (0.5), clip (0.05) and optimizer (0.3): step 8.36.

``one_by_four``: dp 1 x pp 4, one microbatch, no DP collectives. Forward 1, backward 2,
P2P 0.1, gc 0, layernorm 0.01, embedding 0.2, clip 0.05, optimizer 0.3: the forward
wave ends at 4.3, the backward wave at 12.6, then layernorm, embedding, clip and
optimizer: step 13.16.
"""

from __future__ import annotations

import numpy as np

from stragglers.trace import schema
from stragglers.trace.io import JobMeta, TraceColumns

F, B = schema.FORWARD_COMPUTE, schema.BACKWARD_COMPUTE
FS, FR = schema.FORWARD_SEND, schema.FORWARD_RECV
BS, BR = schema.BACKWARD_SEND, schema.BACKWARD_RECV
PAG, RS = schema.PARAMS_ALL_GATHER, schema.GRADS_REDUCE_SCATTER
LN, EMB, CLIP, OPT, GC = (schema.LAYERNORM_ALL_REDUCE, schema.EMBEDDING_ALL_REDUCE, schema.CLIP,
                          schema.OPTIMIZER, schema.GC)

# (optype, start, end); compute ops get mc 0, mb 0, gmc = stage.
Worker = list[tuple[str, float, float]]


def trace_from_workers(workers: dict[tuple[int, int], Worker], pp: int, steps: int = 1,
                       step_ids: list[int] | None = None) -> TraceColumns:
    """Rows of every worker, replicated over steps, with seq_id by start time."""
    rows = []
    step_ids = step_ids or list(range(steps))
    for (d, s), ops in workers.items():
        counts: dict[str, int] = {}
        for optype, start, end in sorted(ops, key=lambda o: (o[1], o[0])):
            seq = counts.get(optype, 0)
            counts[optype] = seq + 1
            compute = optype in (F, B)
            mc = 0 if compute or optype in (PAG, RS) else -1
            for st in step_ids:
                rows.append((d, s, d * pp + s, st, schema.OPTYPE_CODE[optype], start, end - start,
                             seq, mc, 0 if compute else (0 if optype == GC else -1),
                             s if compute else -1))
    a = np.array(rows, dtype=object)
    return TraceColumns(
        dp_rank=a[:, 0].astype(np.int32), stage=a[:, 1].astype(np.int16),
        rank=a[:, 2].astype(np.int32), step=a[:, 3].astype(np.int64),
        optype=a[:, 4].astype(np.int8), start_ts=a[:, 5].astype(np.float64),
        duration=a[:, 6].astype(np.float64), seq_id=a[:, 7].astype(np.int32),
        mc=a[:, 8].astype(np.int16), mb_id=a[:, 9].astype(np.int32),
        gmc=a[:, 10].astype(np.int32), source="<handmade>",
    )


def two_by_two() -> tuple[TraceColumns, JobMeta]:
    w = {
        (0, 0): [(PAG, 0, .1), (F, .1, 1.1), (FS, 1.1, 1.2), (BR, 0, 4.3), (B, 4.3, 6.3),
                 (GC, 6.3, 6.3), (LN, 6.3, 6.31), (EMB, 6.31, 6.51), (RS, 6.51, 8.01),
                 (CLIP, 8.01, 8.06), (OPT, 8.06, 8.36)],
        (0, 1): [(PAG, 0, .1), (FR, 0, 1.2), (F, 1.2, 2.2), (B, 2.2, 4.2), (BS, 4.2, 4.3),
                 (GC, 4.2, 4.2), (LN, 4.2, 4.21), (EMB, 4.21, 6.51), (RS, 6.51, 8.01),
                 (CLIP, 8.01, 8.06), (OPT, 8.06, 8.36)],
        (1, 0): [(PAG, 0, .1), (F, .1, 2.1), (FS, 2.1, 2.2), (BR, 0, 5.3), (B, 5.3, 7.3),
                 (GC, 7.3, 7.3), (LN, 7.3, 7.31), (EMB, 7.31, 7.51), (RS, 7.51, 8.01),
                 (CLIP, 8.01, 8.06), (OPT, 8.06, 8.36)],
        (1, 1): [(PAG, 0, .1), (FR, 0, 2.2), (F, 2.2, 3.2), (B, 3.2, 5.2), (BS, 5.2, 5.3),
                 (GC, 5.2, 5.2), (LN, 5.2, 5.21), (EMB, 5.21, 7.51), (RS, 7.51, 8.01),
                 (CLIP, 8.01, 8.06), (OPT, 8.06, 8.36)],
    }
    meta = JobMeta(dp_size=2, pp_size=2, world_size=4, trial_name="two_by_two")
    return trace_from_workers(w, pp=2, steps=2), meta


def one_by_four_workers(gap: float = 0.0) -> dict[tuple[int, int], Worker]:
    """The 1x4 timeline; ``gap`` is a CPU launch gap before stage 3's backward compute."""
    g = gap
    return {
        (0, 0): [(F, 0, 1), (FS, 1, 1.1), (BR, 0, 10.6 + g), (B, 10.6 + g, 12.6 + g),
                 (GC, 12.6 + g, 12.6 + g), (LN, 12.6 + g, 12.61 + g),
                 (EMB, 12.61 + g, 12.81 + g), (CLIP, 12.81 + g, 12.86 + g),
                 (OPT, 12.86 + g, 13.16 + g)],
        (0, 1): [(FR, 0, 1.1), (F, 1.1, 2.1), (FS, 2.1, 2.2), (BR, 0, 8.5 + g),
                 (B, 8.5 + g, 10.5 + g), (BS, 10.5 + g, 10.6 + g), (GC, 10.5 + g, 10.5 + g),
                 (LN, 10.5 + g, 10.51 + g), (CLIP, 10.51 + g, 12.86 + g),
                 (OPT, 12.86 + g, 13.16 + g)],
        (0, 2): [(FR, 0, 2.2), (F, 2.2, 3.2), (FS, 3.2, 3.3), (BR, 0, 6.4 + g),
                 (B, 6.4 + g, 8.4 + g), (BS, 8.4 + g, 8.5 + g), (GC, 8.4 + g, 8.4 + g),
                 (LN, 8.4 + g, 8.41 + g), (CLIP, 8.41 + g, 12.86 + g),
                 (OPT, 12.86 + g, 13.16 + g)],
        (0, 3): [(FR, 0, 3.3), (F, 3.3, 4.3), (B, 4.3 + g, 6.3 + g), (BS, 6.3 + g, 6.4 + g),
                 (GC, 6.3 + g, 6.3 + g), (LN, 6.3 + g, 6.31 + g), (EMB, 6.31 + g, 12.81 + g),
                 (CLIP, 12.81 + g, 12.86 + g), (OPT, 12.86 + g, 13.16 + g)],
    }


def one_by_four(workers: dict | None = None) -> tuple[TraceColumns, JobMeta]:
    meta = JobMeta(dp_size=1, pp_size=4, world_size=4, trial_name="one_by_four")
    return trace_from_workers(workers or one_by_four_workers(), pp=4), meta
