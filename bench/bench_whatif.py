"""What-if analyzer benchmark: wall time, CPU time and peak RSS of `stragglers analyze`, per
phase and end to end, at 1k, 4k and 16k workers.

Cases (generated once into ``--data``, outside the repository; each run in a fresh process
so that its peak RSS is its own):

* ``AR``: the AR reference trace (16 workers, 117 k ops);
* ``ARx64`` / ``ARx256`` / ``ARx1024``: AR replicated 64 / 256 / 1,024 times along DP
  (1,024 / 4,096 / 16,384 workers; 7.5 M / 30 M / 120 M ops; bench/make_arx.py);
* ``synth-16k``: ``stragglers synth`` with dp 1024 x pp 16 = 16,384 workers (6.4 M ops).

Two measurements per case and repeat:

* *phases*: one process runs ``stragglers analyze TRACE --meta META --out DIR`` (the CLI's
  own entry point) while :mod:`stragglers.phases` records every phase the library marks:
  ``load`` (``read`` the parquet, ``validate`` the rows, build the ``dense`` table),
  ``model`` (dependency ``graph`` and order, ``derive`` transfer durations and launch
  delays, ``ideal`` values), ``metrics`` (``simulate``: the scenarios of §5; ``S_w``: exact
  S_w of every worker; ``launch``, ``healthy``, ``M_W``), ``verdict`` (one phase per
  hypothesis, ``host``, ``signals``, ``bootstrap``: the resamples of the steps) and
  ``outputs`` (``heatmaps``, ``document``, ``report.html``, ``result.json``). Each phase:
  wall time, CPU time (user + system) and the peak RSS reached during it (the kernel's
  high-water mark, reset as the phase starts);
* *CLI*: the same command alone, without the recorder: wall time, CPU time and peak RSS
  from ``wait4``.

Usage: ``python bench/bench_whatif.py [--cases ARx64 ARx256 ARx1024] [--repeat 1]
[--data /tmp/stragglers-bench]``; with several repeats the median of each figure is shown.
The machine's load average is printed with every case: on a shared machine wall time
depends on it, CPU time much less.
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
REF = HERE.parent.parent / "shared" / "reference" / "traces"
DATA = Path(os.environ.get("STRAGGLERS_BENCH_DATA", "/tmp/stragglers-bench"))

#: Cases built by tiling AR along DP: name -> copies.
ARX = {"ARx64": 64, "ARx256": 256, "ARx1024": 1024}

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from stragglers import phases
from stragglers.phases import phase
with phases.recording() as log:
    with phase("imports"):
        from stragglers.cli import main
        import stragglers.analysis.outputs  # what `analyze --out` imports before it starts
    with phase("analyze"):
        code = main(["analyze", sys.argv[1], "--meta", sys.argv[2], "--out", sys.argv[3]])
rows = [r.__dict__ for r in log.rows()]
print(json.dumps({"code": code, "peak_exact": log.peak_exact, "phases": rows,
                  "wall": time.perf_counter() - t0}))
"""


def ensure_inputs(case: str, data: Path) -> tuple[Path, Path]:
    data.mkdir(parents=True, exist_ok=True)
    if case == "AR":
        return REF / "trace-AR.parquet", REF / "meta-AR.yaml"
    if case in ARX:
        trace, meta = data / f"trace-{case}.parquet", data / f"meta-{case}.yaml"
        if not trace.exists():
            sys.path.insert(0, str(HERE))
            from make_arx import make_arx

            t = time.perf_counter()
            make_arx(ARX[case], data)
            print(f"(generated {case} in {time.perf_counter() - t:.1f} s)", file=sys.stderr)
        return trace, meta
    if case == "synth-16k":
        folder = data / "synth-16k"
        if not (folder / "trace.parquet").exists():
            from stragglers.synth import SynthSpec, write_synth

            t = time.perf_counter()
            write_synth(SynthSpec(dp=1024, pp=16, microbatches=16, steps=4, jitter=0.01,
                                  slow_workers=[(517, 9, 1.5)], name="synth-16k"), folder)
            print(f"(generated synth-16k in {time.perf_counter() - t:.1f} s)", file=sys.stderr)
        return folder / "trace.parquet", folder / "meta.yaml"
    raise SystemExit(f"unknown case {case}")


def _run(cmd: list[str], env: dict[str, str]) -> tuple[str, float, float, float]:
    """stdout, wall seconds, CPU seconds (user + system) and peak RSS (MiB) of a child."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}...: failed with status {status}")
    return out, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _env() -> dict[str, str]:
    src = str(HERE.parent / "src")
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}


def run_case(case: str, repeat: int, data: Path) -> dict:
    trace, meta = ensure_inputs(case, data)
    env = _env()
    runs: list[dict] = []
    clis: list[tuple[float, float, float]] = []
    loads: list[float] = []
    for _ in range(repeat):
        for measure in ("phases", "cli"):
            folder = Path(tempfile.mkdtemp(prefix="bench-whatif-"))
            loads.append(os.getloadavg()[0])
            try:
                out = str(folder / "out")
                if measure == "phases":
                    text, _, _, _ = _run([sys.executable, "-c", CHILD, str(trace), str(meta),
                                          out], env)
                    runs.append(json.loads(text.strip().splitlines()[-1]))
                else:
                    cli = [sys.executable, "-c", "import sys; from stragglers.cli import main;"
                           " sys.exit(main())", "analyze", str(trace), "--meta", str(meta),
                           "--out", out]
                    _, wall, cpu, peak = _run(cli, env)
                    clis.append((wall, cpu, peak))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            loads.append(os.getloadavg()[0])
    names = [r["name"] for r in runs[0]["phases"]]
    phases = []
    for name in names:
        recs = [next(p for p in r["phases"] if p["name"] == name) for r in runs]
        phases.append({"name": name,
                       **{k: statistics.median(p[k] for p in recs)
                          for k in ("wall_s", "cpu_s", "peak_mib")}})
    return {"case": case, "repeat": repeat, "phases": phases,
            "peak_exact": all(r["peak_exact"] for r in runs),
            "cli_wall": statistics.median(c[0] for c in clis),
            "cli_cpu": statistics.median(c[1] for c in clis),
            "cli_peak_mib": statistics.median(c[2] for c in clis),
            "load": (min(loads), max(loads)), "cpus": os.cpu_count()}


#: Phases shown in the summary table (the others are in --json and the per-case tables).
SUMMARY = ("imports", "analyze/load", "analyze/load/read", "analyze/load/validate",
           "analyze/load/dense", "analyze/model", "analyze/metrics",
           "analyze/metrics/simulate", "analyze/metrics/S_w", "analyze/metrics/launch",
           "analyze/metrics/healthy", "analyze/metrics/M_W", "analyze/verdict",
           "analyze/verdict/bootstrap", "analyze/outputs", "analyze/outputs/heatmaps",
           "analyze/outputs/timelines", "analyze/outputs/document",
           "analyze/outputs/report.html", "analyze/outputs/result.json")


def _label(name: str) -> str:
    depth = name.count("/") - (1 if name.startswith("analyze/") else 0)
    short = name.rsplit("/", 1)[-1]
    return ("&nbsp;&nbsp;" * max(depth, 0)) + short


def print_case(r: dict) -> None:
    lo, hi = r["load"]
    print(f"\n### {r['case']}\n\n(median of {r['repeat']}; load average {lo:.1f}-{hi:.1f} on "
          f"{r['cpus']} CPUs)\n")
    print("| phase | wall s | CPU s | peak RSS MiB |\n|---|---|---|---|")
    for p in r["phases"]:
        print(f"| {_label(p['name'])} | {p['wall_s']:.2f} | {p['cpu_s']:.2f} | "
              f"{p['peak_mib']:.0f} |")
    print(f"| **`stragglers analyze` alone** | **{r['cli_wall']:.2f}** | "
          f"**{r['cli_cpu']:.2f}** | **{r['cli_peak_mib']:.0f}** |")


def print_summary(rows: list[dict]) -> None:
    head = ["phase"] + [f"{r['case']} {x}" for r in rows for x in ("CPU s", "wall s", "MiB")]
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for name in SUMMARY:
        cells = []
        for r in rows:
            p = next((p for p in r["phases"] if p["name"] == name), None)
            cells += (["-"] * 3 if p is None else
                      [f"{p['cpu_s']:.2f}", f"{p['wall_s']:.2f}", f"{p['peak_mib']:.0f}"])
        print(f"| {_label(name)} | " + " | ".join(cells) + " |")
    cells = []
    for r in rows:
        cells += [f"**{r['cli_cpu']:.1f}**", f"**{r['cli_wall']:.1f}**",
                  f"**{r['cli_peak_mib']:.0f}**"]
    print("| **`stragglers analyze`, whole process** | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["ARx64", "ARx256", "ARx1024"])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--data", type=Path, default=DATA,
                    help="folder for the generated traces (default: $STRAGGLERS_BENCH_DATA "
                         "or /tmp/stragglers-bench)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead")
    ap.add_argument("--save", type=Path, help="also write the figures as JSON into this file")
    args = ap.parse_args()
    rows = []
    for c in args.cases:
        rows.append(run_case(c, args.repeat, args.data))
        if not args.json:
            print_case(rows[-1])
            sys.stdout.flush()
    if args.save is not None:
        args.save.write_text(json.dumps(rows, indent=1))
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print_summary(rows)
    if not all(r["peak_exact"] for r in rows):
        print("\n(the peak RSS of a phase is the process's peak so far: "
              "/proc/self/clear_refs cannot be written here)")


if __name__ == "__main__":
    main()
