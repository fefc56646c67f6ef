"""Megatron-style pipeline schedules as ordered op lists, one per stage.

Each op is ``(optype, mc, mb_id)``; seq_ids are assigned by order within a type. The
order is the one a worker launches its ops in, which is all the dependency model needs
(:mod:`stragglers.model.graph` rebuilds the graph from it):

* 1F1B (vpp = 1): warm-up forwards, steady one-forward-one-backward, cool-down backwards;
  the first stage records no forward-recv / backward-send and the last stage no
  forward-send / backward-recv.
* interleaved (vpp > 1, microbatches a multiple of pp): Megatron's virtual-microbatch
  order; every stage records a recv before and a send after each compute, and those whose
  peer model chunk falls outside the model are no-ops by model chunk.
"""

from __future__ import annotations

from stragglers.trace import schema

Op = tuple[str, int, int]  # (optype, mc, mb_id)


def compute_order(pp: int, vpp: int, microbatches: int, stage: int) -> list[Op]:
    """Forward/backward compute ops of one stage in launch order."""
    if vpp == 1:
        warm = min(pp - stage - 1, microbatches)
        fwd = [(schema.FORWARD_COMPUTE, 0, m) for m in range(microbatches)]
        bwd = [(schema.BACKWARD_COMPUTE, 0, m) for m in range(microbatches)]
        order = fwd[:warm]
        for i in range(microbatches - warm):
            order += [fwd[warm + i], bwd[i]]
        return order + bwd[microbatches - warm:]
    if microbatches % pp:
        raise ValueError(f"interleaved schedules need microbatches ({microbatches}) to be a "
                         f"multiple of pp ({pp})")
    total = microbatches * vpp

    def virtual(k: int, forward: bool) -> Op:
        group, pos = divmod(k, pp * vpp)
        chunk = pos // pp
        if not forward:
            chunk = vpp - 1 - chunk
        mb = group * pp + pos % pp
        return (schema.FORWARD_COMPUTE if forward else schema.BACKWARD_COMPUTE, chunk, mb)

    warm = min((pp - stage - 1) * 2 + (vpp - 1) * pp, total)
    order = [virtual(k, True) for k in range(warm)]
    for i in range(total - warm):
        order += [virtual(warm + i, True), virtual(i, False)]
    return order + [virtual(k, False) for k in range(total - warm, total)]


def stage_ops(pp: int, vpp: int, microbatches: int, stage: int, dp_sync: bool,
              overlap: bool) -> list[Op]:
    """All ops of one stage and step, in launch order."""
    first, last = stage == 0, stage == pp - 1
    ops: list[Op] = []
    if dp_sync:
        ops += [(schema.PARAMS_ALL_GATHER, c, -1) for c in range(vpp)]
    computes = compute_order(pp, vpp, microbatches, stage)
    last_bwd = {c: max(i for i, op in enumerate(computes)
                       if op[0] == schema.BACKWARD_COMPUTE and op[1] == c) for c in range(vpp)}
    for i, (optype, mc, mb) in enumerate(computes):
        fwd = optype == schema.FORWARD_COMPUTE
        recv = schema.FORWARD_RECV if fwd else schema.BACKWARD_RECV
        send = schema.FORWARD_SEND if fwd else schema.BACKWARD_SEND
        has_recv = vpp > 1 or not (first if fwd else last)
        has_send = vpp > 1 or not (last if fwd else first)
        if has_recv:
            ops.append((recv, -1, -1))
        ops.append((optype, mc, mb))
        if has_send:
            ops.append((send, -1, -1))
        if dp_sync and overlap and not fwd and last_bwd[mc] == i:
            ops.append((schema.GRADS_REDUCE_SCATTER, mc, -1))
    ops += [(schema.GC, -1, 0), (schema.LAYERNORM_ALL_REDUCE, -1, -1)]
    if (first or last) and pp > 1 or pp == 1:
        ops.append((schema.EMBEDDING_ALL_REDUCE, -1, -1))
    if dp_sync and overlap:
        ops.append((schema.SEPARATE_GRADS_ALL_REDUCE, -1, -1))
    elif dp_sync:
        ops += [(schema.GRADS_REDUCE_SCATTER, c, -1) for c in range(vpp)]
    ops += [(schema.CLIP, -1, -1), (schema.OPTIMIZER, -1, -1)]
    return ops
