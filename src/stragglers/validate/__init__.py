"""Executed validation passes (Falcon §4.3): the planned disjoint P2P passes of a ring or a
tree run as real timed transfers over ``torch.distributed`` (gloo on CPU, NCCL on GPU), plus a
per-rank GEMM test; links and ranks far below the group median are flagged.

* :mod:`~stragglers.validate.executed` - the worker that runs the passes and the GEMM test in
  each process, and the launcher;
* :mod:`~stragglers.validate.compare` - per-link bandwidth and per-rank GEMM throughput against
  the group median, outliers flagged.
"""
