"""What-if analyzer benchmark: wall time and peak RSS, per phase and end to end, as a table.

Cases (each run in a fresh process so that its peak RSS is its own):
* ``AR``: the AR reference trace (16 workers, 117 k ops);
* ``ARx64``: AR replicated 64 times along DP (1,024 workers, 7.5 M ops; bench/make_arx.py);
* ``synth-16k``: ``stragglers synth`` with dp 1024 x pp 16 = 16,384 workers.

Two measurements per case:
* *phases* (one process, the library): ``load`` (read + validate + dense table), ``engine``
  (dependency graph, evaluation order, derived and ideal values), ``metrics`` (every figure
  of whatif-model.md §5 including exact S_w of every worker), ``verdict`` (the hypotheses'
  what-ifs and the bootstrap confidence);
* *CLI* (one process): ``stragglers analyze TRACE --meta META --out DIR`` end to end —
  interpreter start, imports, analysis with exact S_w, heatmaps, result.json (timelines are
  skipped above 2 M ops, as analyze does) — wall time, CPU time and peak RSS from ``wait4``.

Usage: ``python bench/bench_whatif.py [--cases AR ARx64 synth-16k] [--repeat 3]``; the
median of the repeats is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from stragglers.analysis.engine import prepare
from stragglers.analysis.metrics import compute_metrics
from stragglers.analysis.runner import load_table
from stragglers.analysis.verdict import decide
t_imp = time.perf_counter()
table = load_table(sys.argv[1], sys.argv[2])
t1 = time.perf_counter()
engine = prepare(table)
t2 = time.perf_counter()
metrics = compute_metrics(engine, exact_workers=True)
t3 = time.perf_counter()
v = decide(engine, metrics)
t4 = time.perf_counter()
print(json.dumps({"ops": int(table.n_nodes * engine.dp * engine.n_steps),
                  "workers": engine.dp * engine.pp, "imports": t_imp - t0, "load": t1 - t_imp,
                  "engine": t2 - t1, "metrics": t3 - t2, "verdict": t4 - t3,
                  "S": metrics.slowdown, "cause": v.cause.value,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
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


def _run(cmd: list[str]) -> tuple[str, float, float, float]:
    """stdout, wall seconds, CPU seconds (user + system) and peak RSS (MiB) of a child
    process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"{' '.join(cmd[:3])}...: failed with status {status}")
    return out, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def run_case(case: str, repeat: int) -> dict:
    trace, meta = ensure_inputs(case)
    phases, clis = [], []
    for _ in range(repeat):
        out, _, _, peak = _run([sys.executable, "-c", CHILD, str(trace), str(meta)])
        row = json.loads(out)
        row["peak_mib"] = peak
        phases.append(row)
        folder = Path(tempfile.mkdtemp(prefix="bench-whatif-"))
        try:
            cli = str(Path(sys.executable).with_name("stragglers"))
            if not Path(cli).exists():
                cli = shutil.which("stragglers") or "stragglers"
            _, wall, cpu, peak = _run([cli, "analyze", str(trace), "--meta", str(meta),
                                       "--out", str(folder / "out")])
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        clis.append((wall, cpu, peak))
    med = {k: statistics.median(r[k] for r in phases)
           for k in ("imports", "load", "engine", "metrics", "verdict", "peak_mib")}
    return {**phases[0], **med, "case": case, "repeat": repeat,
            "cli_wall": statistics.median(w for w, _, _ in clis),
            "cli_cpu": statistics.median(c for _, c, _ in clis),
            "cli_peak_mib": statistics.median(p for _, _, p in clis)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["AR", "ARx64", "synth-16k"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [run_case(c, args.repeat) for c in args.cases]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    head = ("case", "workers", "ops", "load s", "engine s", "metrics s (incl. exact S_w)",
            "verdict s", "peak RSS MiB", "`analyze` CLI wall s", "`analyze` CLI CPU s",
            "`analyze` CLI peak MiB", "S", "verdict")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['case']} | {r['workers']:,} | {r['ops']:,} | {r['load']:.2f} | "
              f"{r['engine']:.2f} | {r['metrics']:.2f} | {r['verdict']:.2f} | "
              f"{r['peak_mib']:.0f} | {r['cli_wall']:.2f} | {r['cli_cpu']:.2f} | "
              f"{r['cli_peak_mib']:.0f} | "
              f"{r['S']:.4f} | {r['cause']} |")
    load = os.getloadavg()[0]
    print(f"\n(median of {args.repeat} runs each; {os.cpu_count()} CPUs, load average "
          f"{load:.1f} at the end; the CLI row includes interpreter start, imports, heatmaps "
          "and result.json; CPU s is user + system time, less sensitive to other work on "
          "the machine than wall time)")


if __name__ == "__main__":
    main()
