"""Sequence-length rebalancing on the real example job (README "Mitigation"; issue 11 pt 6).

The example job (gloo, CPU) with long-tailed sample lengths, packed per micro-batch
(``stragglers.probe.examples.loader``), run alternately with ``--rebalance in-order`` (a
plain loader) and ``--rebalance greedy`` (the greedy partitioner with the cost model fitted
from the job's own trace), REPEATS pairs after one calibration run:

1. calibration: an in-order run; its trace and ``lengths.jsonl`` give the cost model
   (``stragglers.mitigate.seqlen.fit_from_trace`` on the last stage);
2. each pair: in-order, then greedy with that model; the mean step time after warm-up of
   each run (rank 0's step intervals) and the throughput (tokens per second: both runs train
   the same samples);
3. the what-if prediction from each in-order run's own trace and lengths:
   ``stragglers.mitigate.predict.predict_rebalance`` with the modelled micro-batch costs as
   they ran and as greedy splits them (``loader.modelled_costs``); compared with the greedy
   run measured right after it. ``predicted`` is the simulator's step time after
   rebalancing; ``scaled`` is the measured in-order step time times the simulator's ratio
   after / before (the simulator's no-delay timeline leaves out the time between steps).

Medians over the pairs are printed as a table, with peak memory of this process (the
prediction; the job's processes are separate).

    python bench/bench_mitigate_seqlen.py              # about 3 minutes on 2 cores
    python bench/bench_mitigate_seqlen.py --repeats 3  # quicker
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

from stragglers.analysis.engine import prepare
from stragglers.analysis.runner import load_table
from stragglers.mitigate.lengths import read_lengths
from stragglers.mitigate.predict import predict_rebalance
from stragglers.mitigate.seqlen import CostModel, fit_from_trace
from stragglers.probe.examples.job import JobConfig, run_job
from stragglers.probe.examples.loader import modelled_costs
from stragglers.trace.io import read_trace


def _predict(cfg: JobConfig, model: CostModel) -> tuple[float, float]:
    out = Path(cfg.out_dir)
    table = load_table(out / "trace.parquet", out / "meta.yaml")
    before, after = modelled_costs(cfg, model, read_lengths(out / "lengths.jsonl"),
                                   table.steps)
    pred = predict_rebalance(prepare(table), before, after)
    return pred.before_s, pred.after_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--micro-batch-size", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup-steps", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-seqlen-"))
    base = JobConfig(out_dir="", dp=args.dp, pp=args.pp, microbatches=args.microbatches,
                     micro_batch_size=args.micro_batch_size, seq_len=args.seq_len,
                     hidden=args.hidden, steps=args.steps, warmup_steps=args.warmup_steps,
                     seq_len_dist="longtail", rebalance="in-order")
    calib = replace(base, out_dir=str(work / "calib"))
    run_job(calib)
    fit = fit_from_trace(read_trace(work / "calib" / "trace.parquet"),
                         read_lengths(work / "calib" / "lengths.jsonl"), args.pp - 1)
    model = fit.model
    model_file = work / "cost.json"
    model_file.write_text(f'{{"a": {model.a!r}, "b": {model.b!r}, "c": {model.c!r}}}\n')
    rows: dict[str, list[float]] = {k: [] for k in
                                    ("in_order", "greedy", "pred_before", "pred_after",
                                     "scaled", "pred_s")}
    peak = 0
    for r in range(args.repeats):
        plain = replace(base, out_dir=str(work / f"in-order-{r}"))
        greedy = replace(base, out_dir=str(work / f"greedy-{r}"), rebalance="greedy",
                         cost_model=str(model_file))
        t_plain = run_job(plain)["mean_step_s"]
        t_greedy = run_job(greedy)["mean_step_s"]
        tracemalloc.start()
        t0 = time.perf_counter()
        before, after = _predict(plain, model)
        rows["pred_s"].append(time.perf_counter() - t0)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        rows["in_order"].append(t_plain)
        rows["greedy"].append(t_greedy)
        rows["pred_before"].append(before)
        rows["pred_after"].append(after)
        rows["scaled"].append(t_plain * after / before)
        print(f"pair {r}: in-order {t_plain * 1e3:.1f} ms, greedy {t_greedy * 1e3:.1f} ms, "
              f"predicted {before * 1e3:.1f} -> {after * 1e3:.1f} ms", flush=True)
    med = {k: statistics.median(v) for k, v in rows.items()}
    tokens = (args.dp * args.microbatches * args.micro_batch_size)
    gain = med["in_order"] / med["greedy"] - 1.0
    print(f"\ncost model (stage {args.pp - 1}, {fit.microbatches} micro-batches): "
          f"{model.a:.4g} * sum L^2 + {model.b:.4g} * sum L + {model.c:.4g} s, "
          f"R^2 {model.r2:.3f}")
    print(f"job: dp {args.dp} x pp {args.pp}, {args.microbatches} micro-batches x "
          f"{args.micro_batch_size} samples ({tokens} samples per step), seq_len "
          f"{args.seq_len} (long-tailed), hidden {args.hidden}, {args.steps} steps "
          f"({args.warmup_steps} warm-up); {args.repeats} pairs, medians\n")
    print("| loader | step time | throughput vs in-order | predicted step time | "
          "scaled prediction | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(f"| in-order | {med['in_order'] * 1e3:.1f} ms | 1.00x | "
          f"{med['pred_before'] * 1e3:.1f} ms | - | - |")
    err = med["pred_after"] / med["greedy"] - 1.0
    err_scaled = med["scaled"] / med["greedy"] - 1.0
    print(f"| greedy | {med['greedy'] * 1e3:.1f} ms | {1 + gain:.2f}x (+{gain * 100:.1f}%) | "
          f"{med['pred_after'] * 1e3:.1f} ms ({err * 100:+.1f}%) | "
          f"{med['scaled'] * 1e3:.1f} ms | {err_scaled * 100:+.1f}% |")
    print(f"\nprediction: {med['pred_s'] * 1e3:.0f} ms per trace (median), peak memory "
          f"{peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
