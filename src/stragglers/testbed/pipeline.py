"""Pipeline and data parallelism for the example job, instrumented like Megatron-LM.

* :class:`PipeComm`: the P2P calls of Megatron's ``p2p_communication`` (``recv_forward``,
  ``send_forward``, ``send_forward_recv_backward``, ...) over ``torch.distributed`` with
  ``batch_isend_irecv``. Each records its span(s) the way Megatron's timers do: nothing on the
  stage where the call is a no-op (no ``forward-recv`` on the first stage, ...), and a combined
  call as two spans of identical timing (``forward-send`` + ``backward-recv``).
* :func:`one_f_one_b`: Megatron's non-interleaved 1F1B schedule
  (``forward_backward_pipelining_without_interleaving``).
* :class:`ShardedOptimizer`: a distributed optimizer (ZeRO-1 style, like Megatron's): parameters
  and gradients live in flat buffers; gradients are reduce-scattered over the DP group, each DP
  rank clips and updates its shard (AdamW) and the parameters are all-gathered at the start of
  the next step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from stragglers.probe.ops import BACKWARD_RECV, BACKWARD_SEND, FORWARD_RECV, FORWARD_SEND
from stragglers.probe.recorder import Probe


class PipeComm:
    """Point-to-point communication between neighbouring stages of one pipeline."""

    def __init__(self, probe: Probe, stage: int, pp: int, dp_rank: int, dp_size: int,
                 device: torch.device, dtype: torch.dtype = torch.float32) -> None:
        self.probe = probe
        self.stage, self.pp = stage, pp
        self.is_first, self.is_last = stage == 0, stage == pp - 1
        self.prev = (stage - 1) * dp_size + dp_rank
        self.next = (stage + 1) * dp_size + dp_rank
        self.device, self.dtype = device, dtype

    def _communicate(self, send_next: torch.Tensor | None = None,
                     send_prev: torch.Tensor | None = None,
                     recv_prev: tuple[int, ...] | None = None,
                     recv_next: tuple[int, ...] | None = None,
                     ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        ops = []
        from_prev = from_next = None
        if send_prev is not None:
            ops.append(dist.P2POp(dist.isend, send_prev.contiguous(), self.prev))
        if recv_prev is not None:
            from_prev = torch.empty(recv_prev, device=self.device, dtype=self.dtype)
            ops.append(dist.P2POp(dist.irecv, from_prev, self.prev))
        if send_next is not None:
            ops.append(dist.P2POp(dist.isend, send_next.contiguous(), self.next))
        if recv_next is not None:
            from_next = torch.empty(recv_next, device=self.device, dtype=self.dtype)
            ops.append(dist.P2POp(dist.irecv, from_next, self.next))
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return from_prev, from_next

    def recv_forward(self, shape: tuple[int, ...]) -> torch.Tensor | None:
        """Activations from the previous stage (``None`` on the first stage)."""
        if self.is_first:
            return None
        with self.probe.span(FORWARD_RECV):
            return self._communicate(recv_prev=shape)[0]

    def send_forward(self, output: torch.Tensor) -> None:
        """Activations to the next stage (nothing on the last stage)."""
        if self.is_last:
            return
        with self.probe.span(FORWARD_SEND):
            self._communicate(send_next=output.detach())

    def recv_backward(self, shape: tuple[int, ...]) -> torch.Tensor | None:
        """Output gradient from the next stage (``None`` on the last stage)."""
        if self.is_last:
            return None
        with self.probe.span(BACKWARD_RECV):
            return self._communicate(recv_next=shape)[1]

    def send_backward(self, grad: torch.Tensor | None) -> None:
        """Input gradient to the previous stage (nothing on the first stage)."""
        if self.is_first:
            return
        assert grad is not None
        with self.probe.span(BACKWARD_SEND):
            self._communicate(send_prev=grad)

    def send_forward_recv_backward(self, output: torch.Tensor, shape: tuple[int, ...]
                                   ) -> torch.Tensor | None:
        """Combined call: activations out, output gradient in (one batched exchange)."""
        if self.is_last:
            return None
        with self.probe.span((FORWARD_SEND, BACKWARD_RECV)):
            return self._communicate(send_next=output.detach(), recv_next=shape)[1]

    def send_backward_recv_forward(self, grad: torch.Tensor | None, shape: tuple[int, ...]
                                   ) -> torch.Tensor | None:
        """Combined call: input gradient out, next activations in."""
        if self.is_first:
            return None
        assert grad is not None
        with self.probe.span((BACKWARD_SEND, FORWARD_RECV)):
            return self._communicate(send_prev=grad, recv_prev=shape)[0]


ForwardStep = Callable[[int, Any], torch.Tensor]
BackwardStep = Callable[[int, Any, torch.Tensor, Any], Any]


def one_f_one_b(
    comm: PipeComm,
    num_microbatches: int,
    shape_of: Callable[[int], tuple[int, ...]],
    forward_step: ForwardStep,
    backward_step: BackwardStep,
    after_last_backward: Callable[[], None] | None = None,
) -> None:
    """Run one step of Megatron's non-interleaved 1F1B schedule on this stage.

    ``shape_of(mb)`` is the activation shape of microbatch ``mb``; ``forward_step(mb, input)``
    returns the stage output (the loss on the last stage); ``backward_step(mb, input, output,
    output_grad)`` returns the gradient of the input (``None`` on the first stage).
    ``after_last_backward`` runs right after the last backward compute of the step (the planned
    GC point, as in the reference traces).
    """
    pp, stage = comm.pp, comm.stage
    warmup = min(pp - stage - 1, num_microbatches)
    remaining = num_microbatches - warmup
    inputs: list[Any] = []
    outputs: list[torch.Tensor] = []
    fwd_mb = bwd_mb = 0

    def backward(mb: int, inp: Any, out: torch.Tensor, grad: Any) -> Any:
        nonlocal bwd_mb
        result = backward_step(mb, inp, out, grad)
        bwd_mb += 1
        if bwd_mb == num_microbatches and after_last_backward is not None:
            after_last_backward()
        return result

    for _ in range(warmup):
        inp = comm.recv_forward(shape_of(fwd_mb))
        out = forward_step(fwd_mb, inp)
        comm.send_forward(out)
        inputs.append(inp)
        outputs.append(out)
        fwd_mb += 1
    inp = comm.recv_forward(shape_of(fwd_mb)) if remaining > 0 else None
    for i in range(remaining):
        last = i == remaining - 1
        out = forward_step(fwd_mb, inp)
        grad_out = comm.send_forward_recv_backward(out, shape_of(bwd_mb))
        inputs.append(inp)
        outputs.append(out)
        fwd_mb += 1
        inp_b, out_b = inputs.pop(0), outputs.pop(0)
        grad_in = backward(bwd_mb, inp_b, out_b, grad_out)
        if last:
            inp = None
            comm.send_backward(grad_in)
        else:
            inp = comm.send_backward_recv_forward(grad_in, shape_of(fwd_mb))
    for _ in range(warmup):
        inp_b, out_b = inputs.pop(0), outputs.pop(0)
        grad_out = comm.recv_backward(shape_of(bwd_mb))
        grad_in = backward(bwd_mb, inp_b, out_b, grad_out)
        comm.send_backward(grad_in)


class ShardedOptimizer:
    """AdamW over flat parameter/gradient buffers, sharded across the DP group.

    ``norm_exclude`` are parameters left out of the gradient norm (the tied head copy on the
    last stage, whose gradient equals the embedding's after the embedding all-reduce).
    """

    def __init__(self, module: torch.nn.Module, dp_group: Any, dp_size: int, dp_rank: int,
                 lr: float = 3e-3, betas: tuple[float, float] = (0.9, 0.95), eps: float = 1e-8,
                 weight_decay: float = 0.01, norm_exclude: tuple[torch.Tensor, ...] = ()) -> None:
        params = [p for p in module.parameters() if p.requires_grad]
        device = params[0].device
        total = sum(p.numel() for p in params)
        self.shard = math.ceil(total / dp_size)
        padded = self.shard * dp_size
        self.param_buf = torch.zeros(padded, device=device)
        self.grad_buf = torch.zeros(padded, device=device)
        norm_mask = torch.ones(padded, device=device)
        excluded = {id(t) for t in norm_exclude}
        offset = 0
        for p in params:
            n = p.numel()
            self.param_buf[offset:offset + n].copy_(p.detach().reshape(-1))
            p.data = self.param_buf[offset:offset + n].view_as(p)
            p.grad = self.grad_buf[offset:offset + n].view_as(p)
            if id(p) in excluded:
                norm_mask[offset:offset + n] = 0.0
            offset += n
        lo = dp_rank * self.shard
        self.lo, self.hi = lo, lo + self.shard
        self.main = self.param_buf[lo:lo + self.shard].clone()
        self.grad_shard = torch.zeros(self.shard, device=device)
        self.norm_mask = norm_mask[lo:lo + self.shard].clone()
        self.exp_avg = torch.zeros_like(self.main)
        self.exp_avg_sq = torch.zeros_like(self.main)
        self.dp_group, self.dp_size = dp_group, dp_size
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.steps = 0
        self.params = params

    def all_gather_params(self) -> None:
        """``params-all-gather``: every DP rank gets the updated shards of the others."""
        if self.dp_size == 1:
            self.param_buf.copy_(self.main)
            return
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(self.param_buf, self.main, group=self.dp_group)

    def reduce_scatter_grads(self) -> None:
        """``grads-reduce-scatter``: sum gradients over DP, keep this rank's shard (mean)."""
        if self.dp_size == 1:
            self.grad_shard.copy_(self.grad_buf)
            return
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(self.grad_shard, self.grad_buf, group=self.dp_group)
        self.grad_shard.div_(self.dp_size)

    def clip_grad_norm(self, max_norm: float, world_group: Any = None) -> float:
        """``optimizer-clip-main-grad``: global gradient norm over all stages and DP ranks."""
        sq = (self.grad_shard.square() * self.norm_mask).sum().reshape(1)
        if dist.is_initialized() and dist.get_world_size(world_group) > 1:
            dist.all_reduce(sq, group=world_group)
        norm = float(sq.sqrt())
        coef = max_norm / (norm + 1e-6)
        if coef < 1.0:
            self.grad_shard.mul_(coef)
        return norm

    def step(self) -> None:
        """``optimizer``: AdamW on this rank's shard, then zero the gradient buffer."""
        self.steps += 1
        b1, b2 = self.betas
        g = self.grad_shard
        self.exp_avg.mul_(b1).add_(g, alpha=1 - b1)
        self.exp_avg_sq.mul_(b2).addcmul_(g, g, value=1 - b2)
        bias1 = 1 - b1 ** self.steps
        bias2 = 1 - b2 ** self.steps
        denom = (self.exp_avg_sq / bias2).sqrt_().add_(self.eps)
        self.main.mul_(1 - self.lr * self.weight_decay)
        self.main.addcdiv_(self.exp_avg, denom, value=-self.lr / bias1)
        self.grad_buf.zero_()
