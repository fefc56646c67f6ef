"""Vectorised writer of a synthetic job's profiler traces (one Chrome-trace JSON per rank, in
Kineto's indented layout and event mix), fast enough for tens of GB.

The ops come from the synthetic generator (:mod:`stragglers.synth`), steps laid end to end.
Per rank and step: a ``ProfilerStep#N`` range; per op a ``record_function`` annotation
(``forward-compute mb=3``, ``dp-allreduce``, ...) and its kernels (24 per compute op, one per
communication op), each with Kineto's four companions: the ``cpu_op`` that launched it, the
``cudaLaunchKernel`` runtime call, and the two flow events (``ac2g``). The times are written
with three decimals (nanoseconds), as Kineto does, after a base of ``BASE_US``.

No Python loop over events: each kind of event is a template of literal bytes and numeric
fields, rendered for all its rows at once as a byte matrix (digits computed with integer
arithmetic, right-aligned, the unused leading columns masked out) and the rows of all kinds
are interleaved in file order with one gather. A rank is written a few steps at a time
(``PIECE_BYTES``), so memory stays bounded whatever the file size.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

KERNELS_PER_COMPUTE = 24
#: microseconds added to every time (Kineto's are since the epoch or boot: 13 digits)
BASE_US = 1_700_000_000_000
PIECE_BYTES = 16 << 20
_POW10 = 10 ** np.arange(19, dtype=np.int64)


@dataclass
class Col:
    """Rendered cells: a byte matrix (right-aligned) and how many bytes each row uses."""

    mat: np.ndarray  # (n, width) uint8
    used: np.ndarray  # (n,) bytes used (the last ``used`` columns)


def lit(text: str, n: int) -> Col:
    raw = np.frombuffer(text.encode(), np.uint8)
    return Col(np.broadcast_to(raw, (n, raw.size)), np.full(n, raw.size))


def integer(v: np.ndarray) -> Col:
    """Non-negative integers as decimal text."""
    v = np.asarray(v, np.int64)
    width = max(int(np.searchsorted(_POW10, v.max(), "right")), 1) if v.size else 1
    mat = ((v[:, None] // _POW10[width - 1::-1][None, :]) % 10 + 48).astype(np.uint8)
    used = np.searchsorted(_POW10, v, "right")
    return Col(mat, np.maximum(used, 1))


def fixed3(ns: np.ndarray) -> Col:
    """Non-negative nanoseconds as microseconds with three decimals (``1234.567``)."""
    ns = np.asarray(ns, np.int64)
    whole = integer(ns // 1000)
    frac = ((ns[:, None] % 1000 // np.array([100, 10, 1])) % 10 + 48).astype(np.uint8)
    dot = np.full((ns.size, 1), 46, np.uint8)
    return Col(np.hstack([whole.mat, dot, frac]), whole.used + 4)


def choice(names: list[str], code: np.ndarray) -> Col:
    """One of ``names`` (JSON-quoted) per row."""
    enc = [json.dumps(n).encode() for n in names]
    width = max(len(e) for e in enc)
    table = np.zeros((len(enc), width), np.uint8)
    for i, e in enumerate(enc):
        table[i, width - len(e):] = np.frombuffer(e, np.uint8)
    lens = np.array([len(e) for e in enc])
    return Col(table[code], lens[code])


def render(cols: list[Col]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the cells side by side: their bytes (row after row) and each row's length."""
    mat = np.hstack([c.mat for c in cols])
    keep = np.hstack([np.arange(c.mat.shape[1])[None, :] >= (c.mat.shape[1] - c.used)[:, None]
                      for c in cols])
    return mat[keep], keep.sum(axis=1)


def template(text: str, fields: dict[str, Col], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``text`` with ``${name}`` replaced by the cells ``fields[name]``, for ``n`` rows."""
    cols: list[Col] = []
    for i, piece in enumerate(re.split(r"\$\{(\w+)\}", text)):
        if i % 2:
            cols.append(fields[piece])
        elif piece:
            cols.append(lit(piece, n))
    return render(cols)


def ev(body: str) -> str:
    return "  {\n    " + body + "\n  },\n"


T_STEP = ev('"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#${step}", '
                        '"pid": 1, "tid": 1,\n    "ts": ${ts}, "dur": ${dur},\n    "args": {\n'
                        '      "External id": ${step}\n    }')
T_ANN = ev('"ph": "X", "cat": "user_annotation", "name": ${name}, "pid": 1, '
                       '"tid": 1,\n    "ts": ${ts}, "dur": 90.000,\n    "args": {\n'
                       '      "External id": ${corr}, "Ev Idx": ${corr}\n    }')
T_KERNEL = (
    ev('"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1,\n'
                   '    "ts": ${cpu}, "dur": 2.500,\n    "args": {\n      "External id": '
                   '${corr},"Record function id": ${corr}, "Ev Idx": ${corr}, "Input Dims": '
                   '[[8, 512, 1024], [1024, 1024]], "Input type": ["float", "float"]\n    }')
    + ev('"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, '
                     '"tid": 1,\n    "ts": ${launch}, "dur": 1.500,\n    "args": {\n      '
                     '"External id": ${corr}, "cbid": 211, "correlation": ${corr}\n    }')
    + ev('"ph": "X", "cat": "kernel", "name": "void cutlass::Kernel<cutlass_80_'
                     'tensorop_s1688gemm_128x128_32x3_nn>(Params)", "pid": 0, "tid": 7,\n    '
                     '"ts": ${gpu}, "dur": ${gdur},\n    "args": {\n      "External id": ${corr}, '
                     '"queued": 0, "device": 0, "context": 1,\n      "stream": 7, "correlation": '
                     '${corr}, "registers per thread": 128, "shared memory": 49152,\n      '
                     '"blocks per SM": 0.474074, "warps per SM": 3.792593, "grid": [64, 1, 1], '
                     '"block": [256, 1, 1], "est. achieved occupancy %": 6\n    }')
    + ev('"ph": "s", "id": ${corr}, "pid": 1, "tid": 1, "ts": ${launch}, '
                     '"cat": "ac2g", "name": "ac2g"')
    + ev('"ph": "f", "id": ${corr}, "pid": 0, "tid": 7, "ts": ${gpu}, '
                     '"cat": "ac2g", "name": "ac2g", "bp": "e"'))


def header(rank: int, world: int) -> bytes:
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}}
    return json.dumps(head, indent=2)[:-2].encode() + b',\n  "traceEvents": [\n'


TRAILER = b'  {\n    "name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",\n' \
          b'    "ts": 0.000\n  }\n  ],\n  "traceName": "bench"\n}\n'


def _interleave(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
    """The rows of several renders (bytes, row lengths, row order keys) in key order."""
    keys = np.concatenate([k for _, _, k in parts])
    lens = np.concatenate([n for _, n, _ in parts])
    flat = np.concatenate([b for b, _, _ in parts])
    src_start = np.concatenate([[0], np.cumsum(lens)[:-1]])
    order = np.argsort(keys, kind="stable")
    lo, ln = src_start[order], lens[order]
    total = int(ln.sum())
    idx = np.repeat(lo - np.cumsum(ln) + ln, ln) + np.arange(total)
    return flat[idx]


def _names_of(optype: np.ndarray, mb: np.ndarray) -> tuple[list[str], np.ndarray]:
    from stragglers.trace import schema

    compute = np.array([t in schema.COMPUTE_TYPES or t == schema.OPTIMIZER
                        for t in schema.OPTYPES])
    label = np.where(compute[optype], optype * 1000 + mb, 10**6 + optype)
    uniq, inv = np.unique(label, return_inverse=True)
    names = [f"{schema.OPTYPES[u // 1000]} mb={u % 1000}" if u < 10**6
             else schema.OPTYPES[u - 10**6] for u in uniq.tolist()]
    return names, inv


def rank_rows(start_ns: np.ndarray, dur_ns: np.ndarray, optype: np.ndarray, mb: np.ndarray,
              step: np.ndarray, corr0: int) -> tuple[np.ndarray, int]:
    """The JSON bytes of a rank's events for the ops given (sorted by step, then start)."""
    from stragglers.trace import schema

    compute = np.array([t in schema.COMPUTE_TYPES or t == schema.OPTIMIZER
                        for t in schema.OPTYPES])[optype]
    n_k = np.where(compute, KERNELS_PER_COMPUTE, 1)
    ops = start_ns.size
    # ops: the annotation 100 us before the first kernel (the CPU runs ahead)
    cpu0 = start_ns - 100_000
    first_k = np.concatenate([[0], np.cumsum(n_k)[:-1]])
    corr_ann = corr0 + first_k + np.arange(ops)  # one id per annotation and kernel
    names, code = _names_of(optype, mb)
    # kernels
    owner = np.repeat(np.arange(ops), n_k)
    k = np.arange(owner.size) - np.repeat(first_k, n_k)
    corr = corr_ann[owner] + 1 + k
    cpu = cpu0[owner] + 1000 + k * 80_000 // n_k[owner]
    gpu = start_ns[owner] + k * dur_ns[owner] // n_k[owner]
    gdur = dur_ns[owner] // n_k[owner]
    # steps
    steps, first = np.unique(step, return_index=True)
    last_end = np.maximum.reduceat(start_ns + dur_ns, first)
    s0 = np.minimum.reduceat(cpu0, first) - 200_000
    parts = []
    base = BASE_US * 1000
    b, n = template(T_STEP, {"step": integer(steps), "ts": fixed3(base + s0),
                             "dur": fixed3(last_end + 1000 - s0)}, steps.size)
    parts.append((b, n, 3 * first))
    b, n = template(T_ANN, {"name": choice(names, code), "ts": fixed3(base + cpu0),
                            "corr": integer(corr_ann)}, ops)
    parts.append((b, n, 3 * np.arange(ops) + 1))
    b, n = template(T_KERNEL, {"cpu": fixed3(base + cpu), "launch": fixed3(base + cpu + 500),
                               "gpu": fixed3(base + gpu), "gdur": fixed3(gdur),
                               "corr": integer(corr)}, owner.size)
    parts.append((b, n, 3 * owner + 2))
    return _interleave(parts), int(corr[-1]) + 1 if corr.size else corr0


def write_rank(fh: IO[bytes], ops: dict[str, np.ndarray], rank: int, world: int) -> int:
    """Write one rank's trace (``ops``: its columns, sorted); returns the bytes written."""
    fh.write(header(rank, world))
    step = ops["step"]
    steps, first = np.unique(step, return_index=True)
    bounds = np.r_[first, step.size]
    per_op = 24 * 1300  # bytes, about: a compute op's 24 kernels and their companions
    ops_per_piece = max(PIECE_BYTES // per_op, 1)
    corr, size, i = 1, 0, 0
    while i < steps.size:  # a few whole steps at a time
        j = int(np.searchsorted(bounds, bounds[i] + ops_per_piece, "right")) - 1
        j = max(j, i + 1)
        sl = slice(int(bounds[i]), int(bounds[j]))
        data, corr = rank_rows(ops["start_ns"][sl], ops["dur_ns"][sl], ops["optype"][sl],
                               ops["mb"][sl], step[sl], corr)
        fh.write(data.tobytes())
        size += data.size
        i = j
    fh.write(TRAILER)
    return size


def job_ops(trace: Any) -> dict[str, np.ndarray]:
    """The columns the writer needs, times in integer nanoseconds, in file order."""
    order = np.lexsort((trace.optype, trace.start_ts, trace.step, trace.stage, trace.dp_rank))
    return {"dp": trace.dp_rank[order].astype(np.int64),
            "stage": trace.stage[order].astype(np.int64),
            "step": trace.step[order].astype(np.int64),
            "start_ns": np.round(trace.start_ts[order] * 1e9).astype(np.int64),
            "dur_ns": np.round(trace.duration[order] * 1e9).astype(np.int64),
            "optype": trace.optype[order].astype(np.int64),
            "mb": np.maximum(trace.mb_id[order], 0).astype(np.int64)}


def rank_slice(ops: dict[str, np.ndarray], dp: int, stage: int) -> dict[str, np.ndarray]:
    sel = (ops["dp"] == dp) & (ops["stage"] == stage)
    return {k: v[sel] for k, v in ops.items()}


def write_job_rank(folder: Path, ops: dict[str, np.ndarray], dp_size: int, world: int,
                   dp: int, stage: int) -> int:
    rank = dp + dp_size * stage
    with (folder / f"rank-{rank}.json").open("wb") as fh:
        return write_rank(fh, rank_slice(ops, dp, stage), rank, world)
