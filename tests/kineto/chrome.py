"""Hand-built PyTorch profiler (Chrome-trace) files from a schema trace with known ops.

:func:`write_profiler_job` turns a trace (e.g. a synthetic job with a known slow worker) into
one Chrome-trace JSON per rank, as torch.profiler writes it: ``ProfilerStep#N`` ranges,
``record_function`` annotations, CUDA launches (``cudaLaunchKernel``, correlation ids) and
GPU kernels, ``record_param_comms`` with process-group arguments and NCCL kernels named the
old (``ncclKernel_*``) or the new (``ncclDevKernel_*``) way. Importing the files must give back
the trace's ops exactly (times survive as microsecond floats).

Each op's CPU calls sit in their own 1 us window just before the op's GPU start (a few us
apart for ops that start together), so that the CPU ranges tell them apart; a compute op is
two kernels (the importer must take the span of both, not the CPU range).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.trace import schema
from stragglers.trace.io import JobMeta, TraceColumns

MAIN, AUTOGRAD, STREAM, COMM_STREAM = 100, 200, 7, 20

OLD_NAMES = {
    "send": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "recv": "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
    "all_gather": "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, "
                  "ncclWork*)",
    "reduce_scatter": "ncclKernel_ReduceScatter_RING_LL_Sum_float(ncclDevComm*, unsigned long, "
                      "ncclWork*)",
    "allreduce": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, "
                 "ncclWork*)",
}
NEW_NAMES = {
    "send": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
    "recv": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
    "all_gather": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage"
                      "<4096ul>)",
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
}

#: Communication types recorded through record_param_comms + NCCL kernels (collective name).
COMM = {
    schema.FORWARD_SEND: "send", schema.BACKWARD_SEND: "send",
    schema.FORWARD_RECV: "recv", schema.BACKWARD_RECV: "recv",
    schema.PARAMS_ALL_GATHER: "all_gather", schema.GRADS_REDUCE_SCATTER: "reduce_scatter",
    schema.CLIP: "allreduce", schema.EMBEDDING_ALL_REDUCE: "allreduce",
}


def rank_of(dp: int, stage: int, meta: JobMeta, tp: int = 0) -> int:
    """Megatron's order: tensor-parallel index fastest, then DP rank, then stage."""
    return tp + meta.tp_size * (dp + meta.dp_size * stage)


def _group(optype: str, dp: int, stage: int, meta: JobMeta, tp: int) -> list[int]:
    if optype in (schema.PARAMS_ALL_GATHER, schema.GRADS_REDUCE_SCATTER):
        return [rank_of(d, stage, meta, tp) for d in range(meta.dp_size)]
    if optype == schema.CLIP:
        return list(range(meta.world_size))
    if optype == schema.EMBEDDING_ALL_REDUCE:
        return [rank_of(dp, 0, meta, tp), rank_of(dp, meta.pp_size - 1, meta, tp)]
    return []


def _peer(optype: str, dp: int, stage: int, meta: JobMeta, tp: int) -> int:
    later = optype in (schema.FORWARD_SEND, schema.BACKWARD_RECV)
    return rank_of(dp, stage + (1 if later else -1), meta, tp)


def rank_events(trace: TraceColumns, meta: JobMeta, dp: int, stage: int, *, tp: int = 0,
                new_names: bool = False, annotate_compute: bool = True,
                annotate_comm: bool = False, truncated_step: bool = True) -> list[dict[str, Any]]:
    """The trace events of worker (dp, stage)."""
    names = NEW_NAMES if new_names else OLD_NAMES
    sel = np.flatnonzero((trace.dp_rank == dp) & (trace.stage == stage))
    order = sel[np.lexsort((trace.optype[sel], trace.start_ts[sel]))]
    us = 1e6
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN,
         "args": {"name": f"thread {MAIN} (pt_main_thread)"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": AUTOGRAD,
         "args": {"name": f"thread {AUTOGRAD} (pt_autograd_0)"}},
    ]
    corr = 1000
    last_end = 0.0
    for step in np.unique(trace.step[order]):
        ops = order[trace.step[order] == step]
        s0 = trace.start_ts[ops].min() * us - 50.0
        s1 = (trace.start_ts[ops] + trace.duration[ops]).max() * us + 1.0
        last_end = max(last_end, s1)
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": MAIN, "ts": s0, "dur": s1 - s0, "args": {}})
        prev_start, k = None, 0
        for i in ops:
            optype = schema.OPTYPES[trace.optype[i]]
            start, dur = trace.start_ts[i] * us, trace.duration[i] * us
            k = k + 1 if start == prev_start else 0
            prev_start = start
            cpu = start - 2.0 - 3.0 * k  # this op's CPU window [cpu - 1, cpu]
            comm = COMM.get(optype) if not annotate_comm else None
            if comm is None:
                if not annotate_compute and optype in schema.COMPUTE_TYPES:
                    pass
                else:
                    label = (f"{optype} mb={trace.mb_id[i]}" if optype in schema.COMPUTE_TYPES
                             else optype)
                    if dur == 0:
                        events.append({"ph": "X", "cat": "user_annotation", "name": label,
                                       "pid": 1, "tid": MAIN, "ts": start, "dur": 0.0,
                                       "args": {}})
                        continue
                    events.append({"ph": "X", "cat": "user_annotation", "name": label,
                                   "pid": 1, "tid": MAIN, "ts": cpu - 1.0, "dur": 1.0,
                                   "args": {}})
                tid = AUTOGRAD if optype == schema.BACKWARD_COMPUTE else MAIN
                halves = ([(start, dur / 2), (start + dur / 2, dur / 2)]
                          if optype in schema.COMPUTE_TYPES else [(start, dur)])
                for j, (ks, kd) in enumerate(halves):
                    corr += 1
                    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                                   "pid": 1, "tid": tid, "ts": cpu - 0.5 + 0.1 * j, "dur": 0.05,
                                   "args": {"correlation": corr}})
                    kname = (names[COMM[optype]] if optype in COMM else names["allreduce"]
                             if optype == schema.LAYERNORM_ALL_REDUCE else f"gemm_{optype}_{j}")
                    events.append({"ph": "X", "cat": "kernel", "name": kname,
                                   "pid": 0, "tid": STREAM, "ts": ks, "dur": kd,
                                   "args": {"correlation": corr, "stream": STREAM}})
                continue
            args: dict[str, Any] = {"Collective name": comm}
            group = _group(optype, dp, stage, meta, tp)
            if group:
                args |= {"Process Group Ranks": str(group), "Group size": len(group)}
            else:
                peer = _peer(optype, dp, stage, meta, tp)
                args |= {"Dst Rank" if comm == "send" else "Src Rank": peer,
                         "Process Group Ranks": str(sorted([rank_of(dp, stage, meta, tp),
                                                            peer])),
                         "Group size": 2}
            corr += 1
            events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1,
                           "tid": MAIN, "ts": cpu - 1.0, "dur": 1.0, "args": args})
            events.append({"ph": "X", "cat": "user_annotation", "name": f"nccl:{comm}",
                           "pid": 1, "tid": MAIN, "ts": cpu - 0.9, "dur": 0.8, "args": {}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 1, "tid": MAIN, "ts": cpu - 0.5, "dur": 0.05,
                           "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": names[comm], "pid": 0,
                           "tid": COMM_STREAM, "ts": start, "dur": dur,
                           "args": {"correlation": corr, "stream": COMM_STREAM}})
    if truncated_step:  # what the profiler records after the last prof.step(): no optimizer
        events.append({"ph": "X", "cat": "user_annotation",
                       "name": f"ProfilerStep#{int(trace.step.max()) + 1}", "pid": 1,
                       "tid": MAIN, "ts": last_end + 10.0, "dur": 20.0, "args": {}})
    return events


def write_profiler_job(trace: TraceColumns, meta: JobMeta, folder: Path, *,
                       gzip_ranks: tuple[int, ...] = (), pg_config: bool = False,
                       skip_ranks: tuple[int, ...] = (), host_offsets: dict[int, float] | None
                       = None, **kwargs: Any) -> Path:
    """One file per rank (``rank-N.json``, ``.json.gz`` for ``gzip_ranks``); with
    ``meta.tp_size > 1`` every tensor-parallel rank of a worker records the worker's ops."""
    folder.mkdir(parents=True, exist_ok=True)
    for stage, dp, tp in ((s, d, t) for s in range(meta.pp_size) for d in range(meta.dp_size)
                          for t in range(meta.tp_size)):
        rank = rank_of(dp, stage, meta, tp)
        if rank in skip_ranks:
            continue
        events = rank_events(trace, meta, dp, stage, tp=tp, **kwargs)
        shift = (host_offsets or {}).get(rank, 0.0) * 1e6
        if shift:
            for ev in events:
                if "ts" in ev:
                    ev["ts"] += shift
        info: dict[str, Any] = {"backend": "nccl", "rank": rank,
                                "world_size": meta.world_size}
        if pg_config:
            info["pg_config"] = [
                {"pg_name": "1", "pg_desc": "DATA_PARALLEL_GROUP",
                 "ranks": [rank_of(d, stage, meta, tp) for d in range(meta.dp_size)]},
                {"pg_name": "2", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP",
                 "ranks": [rank_of(dp, s, meta, tp) for s in range(meta.pp_size)]},
            ]
        doc: dict[str, Any] = {"schemaVersion": 1, "distributedInfo": info}
        if host_offsets is not None:
            doc["host_name"] = f"host{int(rank in host_offsets)}"
        doc["traceEvents"] = events
        doc["traceName"] = f"rank-{rank}"
        data = json.dumps(doc).encode()
        if rank in gzip_ranks:
            (folder / f"rank-{rank}.json.gz").write_bytes(gzip.compress(data))
        else:
            (folder / f"rank-{rank}.json").write_bytes(data)
    return folder


def spread_steps(trace: TraceColumns, gap_s: float = 0.01) -> TraceColumns:
    """The trace with its steps laid end to end (synthetic steps all start at 0), as a
    profiler sees consecutive steps; step times and every metric stay the same."""
    steps = np.unique(trace.step)
    span = max(float((trace.start_ts + trace.duration).max() - trace.start_ts.min()), 0.0)
    shift = np.searchsorted(steps, trace.step) * (span + gap_s) + 1.0
    out = trace.take(np.arange(len(trace)))
    out.start_ts = trace.start_ts + shift
    return out
