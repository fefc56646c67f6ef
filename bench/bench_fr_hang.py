"""Time and peak memory of ``detect hang --flight-recorder`` on large synthetic jobs
(docs/benchmarks/hang.md).

A job of N ranks with tensor groups of 8 and data-parallel groups of N/8 (Megatron order), every
rank with 48 pending calls (tp all-gathers and dp all-reduces interleaved); rank 5 stopped
before dp all-reduce #101 (it has issued only the first tp call). The dumps are written as
pickles to a temporary folder; the time is reading them (restricted unpickler, checks) and
localising, in-process, median of 3; peak memory is the resident-set growth (Linux VmHWM
after resetting it).

    python bench/bench_fr_hang.py [--ranks 1024 4096]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import tempfile
import time
from pathlib import Path

from stragglers.hang.flight_recorder import read_flight_recorder
from stragglers.hang.fr_hang import localize_fr_hang

TP = 8
CULPRIT = 5


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def write_job(folder: Path, n: int) -> None:
    dp = n // TP
    for r in range(n):
        tp_name = f"{1 + r // TP}"
        dp_name = f"{100000 + r % TP}"
        cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(n)))},
               tp_name: {"name": tp_name, "desc": "TENSOR_MODEL_PARALLEL_GROUP",
                         "ranks": str(list(range(r - r % TP, r - r % TP + TP)))},
               dp_name: {"name": dp_name, "desc": "DATA_PARALLEL_GROUP",
                         "ranks": str([r % TP + TP * k for k in range(dp)])}}
        entries = []
        count = 2 if r == CULPRIT else 48
        for k in range(count):
            tp_call = k % 2 == 0
            entries.append({
                "pg_id": 1 if tp_call else 2,
                "process_group": (tp_name if tp_call else dp_name,
                                  "TENSOR_MODEL_PARALLEL_GROUP" if tp_call
                                  else "DATA_PARALLEL_GROUP"),
                "collective_seq_id": 100 + k // 2, "p2p_seq_id": 0, "is_p2p": False,
                "profiling_name": "nccl:_all_gather_base" if tp_call else "nccl:all_reduce",
                "state": "scheduled", "time_created_ns": 10**18 + k * 1000,
                "input_sizes": [[4096, 5120]], "input_dtypes": ["BFloat16"]})
        if r == CULPRIT:
            entries = entries[:1]
        dump = {"version": "2.9", "pg_config": cfg, "pg_status": {}, "entries": entries}
        (folder / f"_dump_{r}").write_bytes(pickle.dumps(dump, protocol=2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[1024, 4096])
    args = ap.parse_args()
    print("| ranks | dumps (MiB) | read + localise (s) | peak memory (MiB) | suspects |")
    print("| ---: | ---: | ---: | ---: | --- |")
    for n in args.ranks:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            write_job(folder, n)
            size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
            times = []
            peak = 0.0
            for _ in range(3):
                with open("/proc/self/clear_refs", "w") as fh:
                    fh.write("5")
                base = _status("VmRSS:")
                t0 = time.perf_counter()
                diag = localize_fr_hang(read_flight_recorder(folder))
                times.append(time.perf_counter() - t0)
                peak = max(peak, (_status("VmHWM:") - base) / 1024)
                assert diag.suspect_ranks == (CULPRIT,), diag.suspect_ranks
            print(f"| {n:,} | {size:.1f} | {statistics.median(times):.2f} | {peak:.0f} | "
                  f"{list(diag.suspect_ranks)} |")


if __name__ == "__main__":
    main()
