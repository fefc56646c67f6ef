"""Sequence-length rebalancing on the real example job (docs/benchmarks/mitigate.md; issue 11 pt 6).

The example job (gloo, CPU) with long-tailed sample lengths packed per micro-batch
(``stragglers.testbed.loader``), the plain split (``in-order``) against the greedy
partitioner (``greedy``) with the cost model fitted from the job's own trace. The machine
is shared, so by default the two are **paired inside one run** (``--rebalance paired``):
steps 2k and 2k + 1 train the same samples, in order then greedy, under the same load.
dp 2 x pp 1 by default (each DP rank alone on its core); ``--pp 2`` adds the pipeline.

1. calibration: a paired run balancing tokens; its trace and ``lengths.jsonl`` give the
   cost model (``stragglers.mitigate.seqlen.fit_from_trace``, last stage);
2. RUNS paired runs with that model; per run, over the pairs after warm-up: the mean step
   time (rank 0's step intervals) of the in-order and of the greedy steps, and the
   throughput gain (tokens per second; both train the same tokens);
3. the what-if prediction from the run's own in-order steps: their trace and recorded
   lengths, ``stragglers.mitigate.predict.predict_rebalance`` with the modelled micro-batch
   costs as they ran and as greedy splits the same samples (``loader.modelled_costs``),
   against the greedy steps measured right after each. ``predicted`` is the simulator's step
   time after rebalancing; ``scaled`` is the measured in-order step time times the
   simulator's ratio after / before (its no-delay timeline leaves out the time between ops
   that the trace does not hold).

Each rank is pinned to one CPU (``--pin-cpus``; rank r on CPU r mod 2, so each DP replica
has a core of its own, as each rank of a cluster has its own device): unpinned, a rank that
waits for the other at the gradient reduce-scatter lends it its core, and imbalance between
DP ranks then costs little on a 2-core machine (``--no-pin`` measures that). Planned GC is
off (``gc_interval 0``) so that no collection lands on one kind of step only.

``--separate`` runs in-order and greedy as separate runs instead (alternating), exposed to
the load changing between runs. Medians over the runs are printed as a table.

    python bench/bench_mitigate_seqlen.py               # 1.5 min on 2 idle cores, more loaded
    python bench/bench_mitigate_seqlen.py --runs 3      # quicker
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np

from stragglers.analysis.engine import prepare
from stragglers.mitigate.lengths import read_lengths
from stragglers.mitigate.predict import predict_rebalance
from stragglers.mitigate.seqlen import fit_from_trace, microbatch_compute
from stragglers.testbed.job import JobConfig, run_job
from stragglers.testbed.loader import modelled_costs
from stragglers.trace import schema
from stragglers.trace.io import read_meta, read_trace
from stragglers.trace.table import build_table


def _predict(cfg: JobConfig, model_file: Path, steps: np.ndarray | None
             ) -> tuple[float, float, float]:
    """Predicted step time before and after rebalancing the run's ``steps`` (all when None),
    and the seconds the prediction took."""
    from stragglers.mitigate.seqlen import CostModel

    m = json.loads(model_file.read_text())
    model = CostModel(m["a"], m["b"], m["c"])
    out = Path(cfg.out_dir)
    t0 = time.perf_counter()
    trace = read_trace(out / "trace.parquet")
    if steps is not None:
        trace = trace.take(np.isin(trace.step, steps))
    table = build_table(trace, read_meta(out / "meta.yaml"))
    before, after = modelled_costs(cfg, model, read_lengths(out / "lengths.jsonl"),
                                   table.steps)
    pred = predict_rebalance(prepare(table), before, after)
    return pred.before_s, pred.after_s, time.perf_counter() - t0


def _diagnose(cfg: JobConfig) -> dict[str, tuple[float, float]]:
    """Per kind of step of a paired run (in-order, greedy): the slowest DP rank's tokens over
    the mean, the compute seconds per token (stage 0, forward + backward), and the mean
    grads-reduce-scatter (where the faster DP rank waits for the slower)."""
    out = Path(cfg.out_dir)
    trace = read_trace(out / "trace.parquet")
    lengths = read_lengths(out / "lengths.jsonl")
    keys, compute = microbatch_compute(trace, 0)
    rank_key = keys[:, 0] * cfg.dp + keys[:, 1]  # (step, dp rank) of each micro-batch
    _, at = np.unique(rank_key, return_inverse=True)
    at = at.reshape(-1)
    lkey = lengths.keys[:, 0] * cfg.dp + lengths.keys[:, 1]
    steps = np.unique(keys[:, 0])
    tokens = np.zeros((steps.size, cfg.dp))
    np.add.at(tokens, (np.searchsorted(steps, lengths.keys[:, 0]), lengths.keys[:, 1]),
              lengths.sum_len)
    work = np.bincount(at, weights=compute).reshape(steps.size, cfg.dp)
    assert np.array_equal(np.unique(lkey), np.unique(rank_key))
    code = schema.OPTYPE_CODE[schema.GRADS_REDUCE_SCATTER]
    rs = trace.optype == code
    odd_rows = trace.step[rs] % 2 == 1
    result = {}
    for name, parity in (("in-order", 0), ("greedy", 1)):
        sel = steps % 2 == parity
        result[name] = (
            float((tokens[sel].max(axis=1) / tokens[sel].mean(axis=1)).mean()),
            float(work[sel].sum() / tokens[sel].sum()),
            float(trace.duration[rs][odd_rows == bool(parity)].mean()))
    return result


def _paired(cfg: JobConfig) -> tuple[float, float, np.ndarray]:
    """Mean step time of the in-order and the greedy steps of a paired run, and the
    in-order steps."""
    summary = run_job(cfg)
    times = np.asarray(summary["step_times"])  # from step 0
    first = cfg.warmup_steps + cfg.warmup_steps % 2  # an even step starts each pair
    even = np.arange(first, cfg.steps - 1, 2)
    return float(times[even].mean()), float(times[even + 1].mean()), even


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--separate", action="store_true",
                    help="in-order and greedy as separate runs (default: paired steps)")
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup-steps", type=int, default=4)
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin each rank to its own CPU (--pin-cpus)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-seqlen-"))
    base = JobConfig(out_dir="", dp=args.dp, pp=args.pp, microbatches=args.microbatches,
                     micro_batch_size=args.micro_batch_size, seq_len=args.seq_len,
                     hidden=args.hidden, steps=args.steps, warmup_steps=args.warmup_steps,
                     seq_len_dist="longtail", rebalance="paired", pin_cpus=args.pin,
                     gc_interval=0)
    calib = replace(base, out_dir=str(work / "calib"))
    run_job(calib)
    fit = fit_from_trace(read_trace(work / "calib" / "trace.parquet"),
                         read_lengths(work / "calib" / "lengths.jsonl"), args.pp - 1)
    model = fit.model
    model_file = work / "cost.json"
    model_file.write_text(json.dumps({"a": model.a, "b": model.b, "c": model.c}) + "\n")
    rows: dict[str, list[float]] = {k: [] for k in ("in_order", "greedy", "gain",
                                                    "pred_before", "pred_after", "scaled",
                                                    "err", "err_scaled", "pred_s")}
    peak = 0
    diag: dict[str, list[tuple[float, float, float]]] = {"in-order": [], "greedy": []}
    for r in range(args.runs):
        if args.separate:
            plain = replace(base, out_dir=str(work / f"in-order-{r}"), rebalance="in-order")
            t_plain = run_job(plain)["mean_step_s"]
            t_greedy = run_job(replace(base, out_dir=str(work / f"greedy-{r}"),
                                       rebalance="greedy",
                                       cost_model=str(model_file)))["mean_step_s"]
            source, steps = plain, None
        else:
            source = replace(base, out_dir=str(work / f"paired-{r}"),
                             cost_model=str(model_file))
            t_plain, t_greedy, steps = _paired(source)
        tracemalloc.start()
        before, after, took = _predict(source, model_file, steps)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        for key, value in (("in_order", t_plain), ("greedy", t_greedy),
                           ("gain", t_plain / t_greedy - 1.0), ("pred_before", before),
                           ("pred_after", after), ("scaled", t_plain * after / before),
                           ("err", after / t_greedy - 1.0),
                           ("err_scaled", t_plain * after / before / t_greedy - 1.0),
                           ("pred_s", took)):
            rows[key].append(value)
        if not args.separate:
            for name, (skew, per_token, wait) in _diagnose(source).items():
                diag[name].append((skew, per_token, wait))
        print(f"run {r}: in-order {t_plain * 1e3:.1f} ms, greedy {t_greedy * 1e3:.1f} ms "
              f"({(t_plain / t_greedy - 1) * 100:+.1f}%); predicted {before * 1e3:.1f} -> "
              f"{after * 1e3:.1f} ms", flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    design = "separate runs" if args.separate else "paired steps in each run"
    print(f"\ncost model (stage {args.pp - 1}, {fit.microbatches} micro-batches): "
          f"{model.a:.4g} * sum L^2 + {model.b:.4g} * sum L + {model.c:.4g} s, "
          f"R^2 {model.r2:.3f}")
    print(f"job: dp {args.dp} x pp {args.pp}, {args.microbatches} micro-batches x "
          f"{args.micro_batch_size} samples per DP rank, seq_len {args.seq_len} "
          f"(long-tailed), hidden {args.hidden}, {args.steps} steps ({args.warmup_steps} "
          f"warm-up); {args.runs} runs ({design}), medians\n")
    err, err_scaled = med["err"], med["err_scaled"]  # medians of the runs' errors
    print("| split | step time | throughput | predicted step time (error) | scaled (error) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| in-order | {med['in_order'] * 1e3:.1f} ms | 1.00x | "
          f"{med['pred_before'] * 1e3:.1f} ms (from its trace) | - |")
    print(f"| greedy | {med['greedy'] * 1e3:.1f} ms | {med['gain'] * 100:+.1f}% "
          f"(median of runs) | {med['pred_after'] * 1e3:.1f} ms ({err * 100:+.1f}%) | "
          f"{med['scaled'] * 1e3:.1f} ms ({err_scaled * 100:+.1f}%) |")
    if not args.separate:
        print("\n| split | slowest DP rank's tokens / mean | compute per token (stage 0) | "
              "grads-reduce-scatter |")
        print("| --- | ---: | ---: | ---: |")
        for name, vals in diag.items():
            skew, per_token, wait = (statistics.median(v[i] for v in vals) for i in range(3))
            print(f"| {name} | {skew:.3f} | {per_token * 1e6:.0f} us | {wait * 1e3:.1f} ms |")
    print(f"\nper run: gains {', '.join(f'{g * 100:+.1f}%' for g in rows['gain'])}; "
          f"errors of the prediction {', '.join(f'{e * 100:+.1f}%' for e in rows['err'])}, "
          f"scaled {', '.join(f'{e * 100:+.1f}%' for e in rows['err_scaled'])}; "
          f"prediction: {med['pred_s'] * 1e3:.0f} ms per trace (median), peak memory "
          f"{peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
