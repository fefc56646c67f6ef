"""What the heartbeats cost the example job's step (docs/guides/recover.md).

Three measurements:

* **calls per step**: the example job (dp 2 x pp 2 GPT over gloo, its default size) runs once
  with probes; every communication span of its trace is one ``enter`` + ``leave`` of the
  heartbeat (what :mod:`stragglers.testbed.faults` reports), plus one ``step``: counted per
  rank and step (the largest count over the ranks is used);
* **cost per call**: a tight loop in one process with the heartbeat's thread running (interval
  0.5 s, as ``stragglers run`` and ``stragglers guard`` set it): ``enter`` + ``leave``, and
  ``step``, median of ``--repeats`` loops; beside it the same pair with a synchronous file
  write per call (``flush()`` after each, what the heartbeat did before: the baseline);
* **the step**: the example job's mean step after warm-up, probes off (``--steps``).

The share is ``(calls x cost + step cost) / step``, for the heartbeat and for the baseline;
the thread's own writes (one per new step, at most every 10 ms, and one every interval) run
beside the job's thread and are listed apart (writes per step, cost per write).

    python bench/bench_heartbeat.py [--steps 10] [--repeats 5] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from stragglers.recover.heartbeat import Heartbeat
from stragglers.testbed.faults import _CALLS
from stragglers.testbed.job import JobConfig, run_job


def per_call(n: int, repeats: int, sync: bool) -> tuple[float, float, float]:
    """Seconds per enter+leave, per step, and per file write (median of ``repeats``)."""
    pairs, steps, writes = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        hb = Heartbeat(tmp, rank=0, slot=0, interval=0.5)
        for _ in range(repeats):
            t0 = time.perf_counter()
            for i in range(n):
                hb.enter("all_reduce", "dp", seq=i)
                if sync:
                    hb.flush()
                hb.leave()
                if sync:
                    hb.flush()
            pairs.append((time.perf_counter() - t0) / n)
            t0 = time.perf_counter()
            for i in range(n):
                hb.step(i)
            steps.append((time.perf_counter() - t0) / n)
            t0 = time.perf_counter()
            for _ in range(n // 20):
                hb.flush()
            writes.append((time.perf_counter() - t0) / (n // 20))
        hb.close()
    return statistics.median(pairs), statistics.median(steps), statistics.median(writes)


def calls_per_step(steps: int) -> tuple[int, float]:
    """Communication spans per rank and step of the example job's trace: max, mean."""
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        summary = run_job(JobConfig(out_dir=tmp, steps=steps, warmup_steps=3))
        table = pq.read_table(summary["trace"], columns=["rank", "step", "optype"])
    counts = Counter((r, s) for r, s, op in zip(table["rank"].to_pylist(),
                                                table["step"].to_pylist(),
                                                table["optype"].to_pylist(), strict=True)
                     if op in _CALLS)
    return max(counts.values()), statistics.mean(counts.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    most, mean = calls_per_step(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        step_s = run_job(JobConfig(out_dir=str(Path(tmp) / "job"), steps=args.steps,
                                   warmup_steps=3, probe=False))["mean_step_s"]
    pair, step, write = per_call(args.calls, args.repeats, sync=False)
    pair_sync, _, _ = per_call(args.calls // 10, args.repeats, sync=True)
    ours = most * pair + step
    base = most * pair_sync + step
    print(f"example job dp 2 x pp 2 (default size), {args.steps} steps, mean step "
          f"{step_s:.3f} s (probes off); communication calls per rank and step: max {most}, "
          f"mean {mean:.1f}")
    print("| heartbeat | enter+leave (us) | step (us) | per rank and step (us) | "
          "share of the step |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| in memory, written by the thread | {pair * 1e6:.2f} | {step * 1e6:.2f} | "
          f"{ours * 1e6:.1f} | {ours / step_s:.4%} |")
    print(f"| a file write per call (before) | {pair_sync * 1e6:.1f} | - | "
          f"{base * 1e6:.1f} | {base / step_s:.3%} |")
    print(f"the thread's writes beside the job: {write * 1e6:.0f} us each, one per new step "
          f"(at most every 10 ms) and one every 0.5 s: {write * (1 / step_s + 2):.3%} "
          "of one core")


if __name__ == "__main__":
    main()
