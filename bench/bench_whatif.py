"""What-if analyzer benchmark: wall time and peak RSS per phase, printed as a table.

Cases (each analysed in a fresh subprocess so that its peak RSS is its own):
* ``AR``: the AR reference trace (16 workers, 117 k ops);
* ``ARx64``: AR replicated 64 times along DP (1,024 workers, 7.5 M ops; bench/make_arx.py);
* ``synth-16k``: ``stragglers synth`` with dp 1024 x pp 16 = 16,384 workers.

Phases: ``load`` (read + validate + dense table), ``analysis`` (everything of
whatif-model.md §5 but exact S_w: model, no-delay and ideal timelines, attribution by DP
rank / stage / optype overall and per step, M_W, M_S, the verdict's what-ifs), ``exact``
(exact S_w of every worker). Usage: ``python bench/bench_whatif.py [--cases AR ARx64 ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

CHILD = r"""
import json, resource, sys, time
from stragglers.analysis.metrics import exact_worker_times, compute_metrics, characterise_workers
from stragglers.analysis.model import prepare
from stragglers.analysis.runner import load_table
from stragglers.analysis.verdict import decide, suspect_workers
t0 = time.perf_counter()
table = load_table(sys.argv[1], sys.argv[2])
t1 = time.perf_counter()
model = prepare(table)
metrics = compute_metrics(model, exact_workers=False)
rss_analysis = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t2 = time.perf_counter()
metrics.worker_exact = exact_worker_times(model)
t3 = time.perf_counter()
sus = suspect_workers(metrics)
m = characterise_workers(model, metrics, sus) if sus else None
v = decide(metrics, m, sus)
t4 = time.perf_counter()
print(json.dumps({"ops": int(table.n_nodes * model.dp * model.n_steps),
                  "workers": model.dp * model.pp, "load": t1 - t0,
                  "analysis": (t2 - t1) + (t4 - t3), "exact": t3 - t2,
                  "rss_analysis_mib": rss_analysis / 1024, "S": metrics.slowdown,
                  "cause": v.cause}))
"""


def ensure_inputs(case: str) -> tuple[Path, Path]:
    OUT.mkdir(parents=True, exist_ok=True)
    if case == "AR":
        ref = HERE.parent.parent / "shared" / "reference" / "traces"
        return ref / "trace-AR.parquet", ref / "meta-AR.yaml"
    if case == "ARx64":
        trace, meta = OUT / "trace-ARx64.parquet", OUT / "meta-ARx64.yaml"
        if not trace.exists():
            sys.path.insert(0, str(HERE))
            from make_arx import make_arx

            make_arx(64, OUT)
        return trace, meta
    if case == "synth-16k":
        folder = OUT / "synth-16k"
        if not (folder / "trace.parquet").exists():
            from stragglers.synth import SynthSpec, write_synth

            t = time.perf_counter()
            write_synth(SynthSpec(dp=1024, pp=16, microbatches=16, steps=4, jitter=0.01,
                                  slow_workers=[(517, 9, 1.5)], name="synth-16k"), folder)
            print(f"(generated synth-16k in {time.perf_counter() - t:.1f} s)")
        return folder / "trace.parquet", folder / "meta.yaml"
    raise SystemExit(f"unknown case {case}")


def run_case(case: str) -> dict:
    trace, meta = ensure_inputs(case)
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(trace), str(meta)],
                            stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"{case}: child failed with status {status}")
    res = json.loads(out)
    res.update(case=case, wall=time.perf_counter() - t, peak_mib=usage.ru_maxrss / 1024)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["AR", "ARx64", "synth-16k"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run_case(c) for c in args.cases]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    head = ("case", "workers", "ops", "load s", "analysis s", "load+analysis s",
            "peak RSS (no exact) MiB", "exact S_w s", "peak RSS MiB", "S", "verdict")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['case']} | {r['workers']:,} | {r['ops']:,} | {r['load']:.2f} | "
              f"{r['analysis']:.2f} | {r['load'] + r['analysis']:.2f} | "
              f"{r['rss_analysis_mib']:.0f} | {r['exact']:.2f} | {r['peak_mib']:.0f} | "
              f"{r['S']:.4f} | {r['cause']} |")
    print("\n(process wall incl. interpreter start: "
          + ", ".join(f"{r['case']} {r['wall']:.1f} s" for r in rows) + f"; {os.cpu_count()} "
          "CPUs)")


if __name__ == "__main__":
    main()
