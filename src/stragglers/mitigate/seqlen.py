"""Sequence-length rebalancing (the what-if study §5.3): a micro-batch cost model fitted from
a trace, and the greedy multiway partitioning of a global batch, as a data-loader helper.

Cost model. The compute time of a micro-batch holding sequences of lengths ``L_j`` is
``a * sum L_j**2 + b * sum L_j + c`` (attention is quadratic in a sequence's length, the rest
linear; the study's Fig. 9). :func:`microbatch_compute` takes, from a trace, the compute
time of every (step, DP rank, micro-batch) on one stage (forward + backward; the study used
the second stage, away from the embedding and the loss); :func:`fit_cost_model` fits
``a, b, c`` to those times and the micro-batches' lengths by least squares (numpy; the
non-negative least squares of scipy when a coefficient would come out negative).

Partitioning. Each sequence costs ``a L**2 + b L`` (``c`` is paid once per micro-batch,
whatever it holds). :func:`rebalance` sorts a global batch's sequences by cost, largest
first, and gives each to the least-loaded DP rank (the greedy "LPT" rule for multiway number
partitioning, within 4/3 of the optimal makespan; the study: "we sort sequences in
descending order since it gives a much better result"); then, within each DP rank, the same
rule spreads the rank's sequences over its micro-batches. An optional token budget per
micro-batch (memory) is respected: a sequence goes to the least-loaded micro-batch that
still has room. The greedy step is a heap loop over sequences (inherently sequential;
O(n log bins)); a global batch holds thousands of sequences, not millions.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from stragglers.errors import InputError
from stragglers.mitigate.lengths import MicrobatchLengths, read_lengths
from stragglers.mitigate.microbatch import parse_numbers
from stragglers.trace import schema
from stragglers.trace.io import TraceColumns, read_trace

__all__ = ["CostModel", "Fit", "Partition", "Rebalancing", "fit_cost_model", "fit_files",
           "fit_from_trace", "in_order", "microbatch_compute", "rebalance", "rebalance_lengths"]


@dataclass(frozen=True)
class CostModel:
    """Micro-batch compute time ``a * sum L**2 + b * sum L + c`` (seconds)."""

    a: float
    b: float
    c: float
    r2: float = 1.0  # coefficient of determination of the fit

    def sequence_cost(self, lengths: np.ndarray) -> np.ndarray:
        lengths = np.asarray(lengths, dtype=np.float64)
        return self.a * lengths**2 + self.b * lengths

    def microbatch_cost(self, sum_sq: np.ndarray, sum_len: np.ndarray) -> np.ndarray:
        return self.a * np.asarray(sum_sq) + self.b * np.asarray(sum_len) + self.c


def microbatch_compute(trace: TraceColumns, stage: int) -> tuple[np.ndarray, np.ndarray]:
    """Per (step, dp_rank, mb_id) on ``stage``: the keys (n x 3 int64) and the summed
    forward + backward compute time (n float64)."""
    codes = [schema.OPTYPE_CODE[t] for t in schema.COMPUTE_TYPES]
    sel = (trace.stage == stage) & np.isin(trace.optype, codes)
    if not sel.any():
        raise InputError(f"{trace.source}: no compute ops on stage {stage}")
    keys = np.stack([trace.step[sel].astype(np.int64), trace.dp_rank[sel].astype(np.int64),
                     trace.mb_id[sel].astype(np.int64)], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    total = np.bincount(inverse.reshape(-1), weights=trace.duration[sel].astype(np.float64),
                        minlength=uniq.shape[0])
    return uniq, total


def fit_cost_model(sum_sq: np.ndarray, sum_len: np.ndarray, durations: np.ndarray
                   ) -> CostModel:
    """Least-squares ``a, b, c`` of ``durations ~ a sum_sq + b sum_len + c``, all >= 0.

    Noisy timings (a loaded machine, a small quadratic term) can pull the unconstrained fit
    to a negative coefficient, which would price short micro-batches below zero; then the
    non-negative least-squares fit (``scipy.optimize.nnls``) is used instead."""
    x = np.column_stack([np.asarray(sum_sq, np.float64), np.asarray(sum_len, np.float64),
                         np.ones(len(durations))])
    y = np.asarray(durations, dtype=np.float64)
    if y.size < 3:
        raise InputError(f"cost model: {y.size} micro-batches; at least 3 are needed to fit "
                         "a, b and c")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise InputError("cost model: lengths and durations must be finite numbers")
    if np.linalg.matrix_rank(x) < 3:
        raise InputError("cost model: the micro-batches' lengths do not vary enough to tell "
                         "a, b and c apart (sum L**2, sum L and 1 are collinear)")
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    if np.any(coef < 0):  # a time cannot grow negative: the best fit with a, b, c >= 0
        coef = nnls(x, y)[0]
    resid = y - x @ coef
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(resid @ resid) / ss_tot if ss_tot > 0 else 1.0
    return CostModel(float(coef[0]), float(coef[1]), float(coef[2]), r2)


@dataclass(frozen=True)
class Fit:
    """A cost model fitted from a trace, and what could not be matched (counted, not used)."""

    model: CostModel
    microbatches: int  # fitted: in the trace and in the lengths
    trace_only: int  # micro-batches of the trace without lengths
    lengths_only: int  # lengths of micro-batches the trace (on that stage) does not have
    stage: int  # the pipeline stage fitted

    def summary(self) -> str:
        """The model, its R^2 and what it was fitted on; what could not be matched."""
        m = self.model
        text = (f"micro-batch compute = {m.a:.6g} * sum L^2 + {m.b:.6g} * sum L + {m.c:.6g} s "
                f"(R^2 {m.r2:.4f}, {self.microbatches} micro-batches of stage {self.stage})")
        if self.trace_only or self.lengths_only:
            text += (f"\nnot matched: {self.trace_only} micro-batches of the trace without "
                     f"lengths, {self.lengths_only} lengths without a micro-batch in the trace")
        return text

    def to_dict(self) -> dict[str, float | int]:
        return {"a": self.model.a, "b": self.model.b, "c": self.model.c, "r2": self.model.r2,
                "microbatches": self.microbatches, "trace_only": self.trace_only,
                "lengths_only": self.lengths_only}


def fit_from_trace(trace: TraceColumns, lengths: MicrobatchLengths, stage: int) -> Fit:
    """Join the trace's micro-batch computes on ``stage`` with their lengths and fit."""
    keys, durations = microbatch_compute(trace, stage)
    both = np.concatenate([keys, lengths.keys])
    _, inverse = np.unique(both, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    in_trace, in_lengths = inverse[:keys.shape[0]], inverse[keys.shape[0]:]
    t_sel = np.flatnonzero(np.isin(in_trace, in_lengths))
    l_sel = np.flatnonzero(np.isin(in_lengths, in_trace))
    t_sel = t_sel[np.argsort(in_trace[t_sel])]  # both sides unique: align by key id
    l_sel = l_sel[np.argsort(in_lengths[l_sel])]
    if t_sel.size == 0:
        raise InputError(f"{trace.source}: no micro-batch of stage {stage} has lengths (keys "
                         "are step, dp_rank and mb_id)")
    model = fit_cost_model(lengths.sum_sq[l_sel], lengths.sum_len[l_sel], durations[t_sel])
    return Fit(model, int(t_sel.size), int(keys.shape[0] - t_sel.size),
               int(lengths.keys.shape[0] - l_sel.size), stage)


def fit_files(trace: str | Path, lengths: str | Path, stage: int) -> Fit:
    """``mitigate fit-cost``: the cost model of ``stage`` fitted from the trace file and the
    lengths file (:func:`~.lengths.read_lengths`)."""
    per_microbatch = read_lengths(lengths)
    return fit_from_trace(read_trace(trace), per_microbatch, stage)


@dataclass(frozen=True)
class Partition:
    """Sequence indices per DP rank per micro-batch, and the loads they give."""

    batches: list[list[np.ndarray]]  # [dp rank][micro-batch] -> indices into the batch
    rank_cost: np.ndarray  # per DP rank: sum of its micro-batch costs (c included)
    microbatch_cost: np.ndarray  # dp x microbatches

    @property
    def makespan(self) -> float:
        return float(self.rank_cost.max())


def _lpt(cost: np.ndarray, bins: int, group: np.ndarray | None = None, groups: int = 1,
         tokens: np.ndarray | None = None, budget: float | None = None) -> np.ndarray:
    """Bin of each item: largest cost first onto the least-loaded of the ``bins`` bins of
    its group (``group[i]``, all in group 0 when None) that has room under ``budget``.

    One pass over the items in descending cost for every group at once (each group's items
    come in descending order, so this is the greedy rule run separately per group)."""
    order = np.argsort(-cost, kind="stable")
    grp = np.zeros(cost.size, dtype=np.int64) if group is None else group
    out = np.empty(cost.size, dtype=np.int64)
    if budget is None or tokens is None:
        heaps = [[(0.0, b) for b in range(bins)] for _ in range(groups)]
        for i in order:
            heap = heaps[grp[i]]
            load, b = heapq.heappop(heap)
            out[i] = b
            heapq.heappush(heap, (load + float(cost[i]), b))
        return out
    loads = np.zeros((groups, bins))
    used = np.zeros((groups, bins))
    for i in order:
        g = grp[i]
        room = np.flatnonzero(used[g] + tokens[i] <= budget)
        if room.size == 0:
            raise InputError(f"sequence {int(i)} ({int(tokens[i])} tokens) fits in no "
                             f"micro-batch under the budget of {budget:g} tokens")
        b = int(room[np.argmin(loads[g, room])])
        out[i] = b
        loads[g, b] += cost[i]
        used[g, b] += tokens[i]
    return out


def _assemble(lengths: np.ndarray, model: CostModel, rank_of: np.ndarray,
              mb_of: np.ndarray, dp: int, microbatches: int) -> Partition:
    cost = model.sequence_cost(lengths)
    flat = rank_of * microbatches + mb_of
    summed = np.bincount(flat, weights=cost, minlength=dp * microbatches)
    mb_cost = (summed + model.c).reshape(dp, microbatches)
    order = np.lexsort((np.arange(lengths.size), flat))
    bounds = np.searchsorted(flat[order], np.arange(dp * microbatches + 1))
    batches = [[order[bounds[r * microbatches + m]:bounds[r * microbatches + m + 1]]
                for m in range(microbatches)] for r in range(dp)]
    return Partition(batches, mb_cost.sum(axis=1), mb_cost)


def _check(lengths: np.ndarray, dp: int, microbatches: int) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.ndim != 1 or arr.size == 0:
        raise InputError("sequence lengths: expected a non-empty list")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise InputError("sequence lengths: every length must be a finite number > 0")
    if dp < 1 or microbatches < 1:
        raise InputError("dp and microbatches must be >= 1")
    return arr.astype(np.float64)


def rebalance(lengths: np.ndarray | list[int], model: CostModel, dp: int, microbatches: int,
              max_tokens: float | None = None) -> Partition:
    """Greedy largest-first partitioning of a global batch across ``dp`` DP ranks, then
    across each rank's ``microbatches`` micro-batches (see the module docstring)."""
    arr = _check(np.asarray(lengths), dp, microbatches)
    cost = model.sequence_cost(arr)
    rank_of = _lpt(cost, dp)
    mb_of = _lpt(cost, microbatches, rank_of, dp, arr, max_tokens)
    return _assemble(arr, model, rank_of, mb_of, dp, microbatches)


def in_order(lengths: np.ndarray | list[int], model: CostModel, dp: int,
             microbatches: int) -> Partition:
    """The baseline a plain loader gives: sequences dealt in their order, the same count to
    every DP rank and micro-batch (the last ones one fewer when it does not divide)."""
    arr = _check(np.asarray(lengths), dp, microbatches)
    slot = np.arange(arr.size) * (dp * microbatches) // arr.size
    return _assemble(arr, model, slot // microbatches, slot % microbatches, dp, microbatches)


@dataclass(frozen=True)
class Rebalancing:
    """``mitigate rebalance``: the greedy partition of a global batch and, for comparison,
    the in-order one a plain loader gives."""

    sequences: int
    partition: Partition
    in_order: Partition

    def summary(self) -> str:
        dp, microbatches = self.partition.microbatch_cost.shape
        return (f"{self.sequences} sequences over {dp} DP ranks x {microbatches} "
                f"micro-batches: slowest rank {self.partition.makespan:.6g} s (in order: "
                f"{self.in_order.makespan:.6g} s; mean {self.partition.rank_cost.mean():.6g} s)")

    def to_dict(self) -> dict[str, object]:
        part = self.partition
        return {"batches": [[m.tolist() for m in r] for r in part.batches],
                "rank_cost": part.rank_cost.tolist(), "makespan": part.makespan,
                "in_order_makespan": self.in_order.makespan}


def rebalance_lengths(text: str, model: CostModel, dp: int, microbatches: int,
                      max_tokens: float | None = None) -> Rebalancing:
    """``mitigate rebalance``: :func:`rebalance` and :func:`in_order` of the sequence lengths
    of ``text`` (``L1,L2,...`` or ``@FILE``, as :func:`~.microbatch.parse_numbers`)."""
    lengths, _ = parse_numbers(text, what="length", limit_name="seqlen_sequences")
    return Rebalancing(lengths.size, rebalance(lengths, model, dp, microbatches, max_tokens),
                       in_order(lengths, model, dp, microbatches))
