"""Hot-path cost of the probe recorder, CPU timer, one process (no torch.distributed).

Cases (each a tight loop of ``--n`` operations; median of ``--reps`` repetitions):

* **recorded span**: ``with probe.span("forward-compute", mb_id=i, mc=0): pass`` in a
  recorded step;
* **recorded span, 2 types**: the same with ``("forward-send", "backward-recv")`` (a combined
  P2P call recorded as two ops);
* **unsampled span**: the same in a step that is not sampled (the shared no-op context);
* **call record**: ``probe.record_call(...)`` with CPU clock readings, what a hooked
  ``torch.distributed`` call queues;
* **flush per record**: the flusher's conversion of queued spans to JSON lines and parquet
  rows (off the hot path; the file is on a temporary directory);
* **queued bytes per span**: memory held by one recorded span until the flusher takes it
  (tracemalloc peak over ``--n`` queued spans, in a separate pass).

Every case runs with Python's cyclic garbage collector on (a job's default: its collections
scan the queued records, so the figure depends on how many are queued) and off (the example
job's ``PlannedGC`` turns it off; the pure cost of the code), alternating per repetition.
The flusher thread is started but set to wake once an hour, so that it does not run during
the timed loops. Times are the timing thread's CPU time (``time.thread_time``): on a shared
machine wall time also counts the time the thread waits for a core. Usage::

    .venv/bin/python bench/bench_probe_span.py [--n 100000] [--reps 7] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from stragglers.probe import Probe, ProbeConfig, WorkerInfo


def new_probe(out: Path, probe_class: type[Probe] = Probe) -> Probe:
    config = ProbeConfig(device="cpu", profile_steps=1, every=2, write_parquet=True,
                         flush_interval_s=3600.0)
    return probe_class(out, WorkerInfo(0, 1, 0, 0), config).start()


def loop_span(probe: Probe, n: int, optype: str | tuple[str, ...]) -> None:
    span = probe.span
    for i in range(n):
        with span(optype, mb_id=i, mc=0):
            pass


def loop_call(probe: Probe, n: int) -> None:
    record, clock = probe.record_call, probe.now
    group = (0, 1)
    for _ in range(n):
        record("all_reduce", 4096, group, clock(), clock(), None)


def timed(fn: Callable[[], None], n: int) -> float:
    """Microseconds of this thread's CPU time per operation."""
    t0 = time.thread_time()
    fn()
    return (time.thread_time() - t0) / n * 1e6


def one_rep(out: Path, n: int, collector: bool,
            probe_class: type[Probe] = Probe) -> dict[str, float]:
    """Microseconds per operation of every case, on a fresh probe of ``probe_class``."""
    gc.collect()
    if not collector:
        gc.disable()
    try:
        return _cases(new_probe(out, probe_class), n)
    finally:
        gc.enable()


def _cases(probe: Probe, n: int) -> dict[str, float]:
    row: dict[str, float] = {}
    probe.begin_step(0)  # recorded
    row["recorded span"] = timed(lambda: loop_span(probe, n, "forward-compute"), n)
    row["recorded span, 2 types"] = timed(
        lambda: loop_span(probe, n, ("forward-send", "backward-recv")), n)
    row["call record"] = timed(lambda: loop_call(probe, n), n)
    # Before end_step: the end of the window wakes the flusher thread, which must not drain
    # at the same time.
    row["flush per record"] = timed(lambda: probe._drain(final=False), 3 * n)
    probe.end_step()
    probe.begin_step(1)  # not sampled
    row["unsampled span"] = timed(lambda: loop_span(probe, n, "forward-compute"), n)
    probe.end_step()
    probe.close()
    return row


def queued_bytes(out: Path, n: int) -> float:
    probe = new_probe(out)
    probe.begin_step(0)
    tracemalloc.start()
    loop_span(probe, n, "forward-compute")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    probe.end_step()
    probe.close()
    return peak / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="operations per loop")
    parser.add_argument("--reps", type=int, default=7, help="repetitions (median reported)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    reps: dict[str, list[dict[str, float]]] = {"gc on": [], "gc off": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.reps):
            for mode in reps:
                out = Path(tmp) / f"{mode.replace(' ', '-')}-{r}"
                reps[mode].append(one_rep(out, args.n, collector=mode == "gc on"))
        memory = queued_bytes(Path(tmp) / "mem", args.n)
    cases = list(reps["gc on"][0])
    median = {m: {c: statistics.median(rep[c] for rep in rs) for c in cases}
              for m, rs in reps.items()}
    spread = {m: {c: (min(rep[c] for rep in rs), max(rep[c] for rep in rs)) for c in cases}
              for m, rs in reps.items()}
    if args.json:
        print(json.dumps({"n": args.n, "reps": args.reps, "median_us": median,
                          "min_max_us": spread, "queued_bytes_per_span": memory}, indent=1))
        return 0
    print(f"{args.n} operations per loop, median (min–max) of {args.reps} repetitions, µs")
    print("| case | gc on | gc off |\n| --- | --- | --- |")
    for c in cases:
        cells = [f"{median[m][c]:.2f} ({spread[m][c][0]:.2f}–{spread[m][c][1]:.2f})"
                 for m in reps]
        print(f"| {c} | {' | '.join(cells)} |")
    print(f"| queued bytes per span | {memory:.0f} B | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
