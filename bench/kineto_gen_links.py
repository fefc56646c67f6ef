"""A kernel-dense rank file with the two rules that look across steps (issue 32 item 2):
per step, an all-to-all (``record_param_comms`` ``all_to_all`` and a SendRecv kernel)
inside the forward, and a copy to the host (``loss.item()``) outside every call; the GPU
activities after the CPU ops, as Kineto writes them (kept as tuples until then: about
140 MB of memory for 6,000 steps).

    python bench/kineto_gen_links.py OUT.json STEPS

6,000 steps: 0.16 GB of JSON (``docs/benchmarks/kineto.md``, bounded memory: measured
with ``STRAGGLERS_KINETO_MEMORY`` or ``read_rank_ops(..., budget=B)``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

K = 40  # compute kernels per forward and per backward
A2A = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)"


def generate(path: str, steps: int) -> None:
    corr = 0
    gpu: list[tuple[str, str, int, float, float, int]] = []
    with open(path, "w") as out:
        out.write('{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 0, '
                  '"world_size": 2}, "traceEvents": [\n')
        out.write('{"ph": "M", "name": "thread_name", "pid": 1, "tid": 100, '
                  '"args": {"name": "main"}},\n{"ph": "M", "name": "thread_name", "pid": 1, '
                  '"tid": 200, "args": {"name": "pt_autograd_0"}}')

        def ev(d: dict[str, Any]) -> None:
            out.write(",\n" + json.dumps(d))

        def cpu(name: str, ts: float, dur: float, tid: int = 100,
                cat: str = "user_annotation", args: dict[str, Any] | None = None) -> None:
            ev({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid,
                "ts": round(ts, 3), "dur": round(dur, 3), "args": args or {}})

        def launch(ts: float, tid: int, name: str = "cudaLaunchKernel") -> int:
            nonlocal corr
            corr += 1
            cpu(name, ts, 0.5, tid, "cuda_runtime", {"correlation": corr})
            return corr

        for s in range(steps):
            o = 1e6 + 20000.0 * s + 0.137 * s
            cpu(f"ProfilerStep#{s}", o, 19000)
            cpu("## forward ##", o + 1, 600)
            g = o + 1000
            for k in range(K):
                c = launch(o + 2 + k, 100)
                gpu.append(("kernel", f"gemm_{k}", c, g, 10.3 + k % 7, 7))
                g += 11.1 + k % 7
                if k == K // 2:
                    cpu("record_param_comms", o + 2.5 + k, 1, cat="cpu_op",
                        args={"Collective name": "all_to_all"})
                    c = launch(o + 2.7 + k, 100)
                    gpu.append(("kernel", A2A, c, g - 3.3, 333.7, 21))
                    g += 330
            c = launch(o + 700, 100, "cudaMemcpyAsync")
            gpu.append(("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", c, g, 5.5, 7))
            g += 6
            cpu("## backward ##", o + 800, 900, 200)
            for k in range(K):
                c = launch(o + 801 + k, 200)
                gpu.append(("kernel", f"bwd_{k}", c, g, 20.9 + k % 5, 7))
                g += 21.3 + k % 5
        for cat, name, c, ts, dur, stream in gpu:
            ev({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream,
                "ts": round(ts, 3), "dur": round(dur, 3),
                "args": {"correlation": c, "stream": stream, "device": 0}})
        out.write("\n]}\n")


if __name__ == "__main__":
    generate(sys.argv[1], int(sys.argv[2]))
