"""``stragglers import kineto`` on the real profiler traces of ``../shared/real``: start-up
time and throughput per file.

Each file is imported by the CLI in a fresh process (``--jobs 1``, its folder's
``meta.yaml`` or a world-size-matching one; files of partial jobs end in the
``incomplete job`` refusal, after the whole file has been parsed). *Start-up* is the same
command on a one-step, four-event trace: interpreter, imports, the process, writing the
output. Reported per file: compressed and JSON (uncompressed) MB, median wall and CPU
seconds of ``--reps`` runs, MB/s of JSON over the wall time, and MB per CPU second beyond
the start-up's CPU time (the parse rate; CPU time is less disturbed by other load than
wall time). The load average at the end is printed: the machine is shared.

    python bench/bench_kineto_real.py --reps 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("STRAGGLERS_SHARED") or ROOT.parent / "shared")
#: the console script a user runs, beside this interpreter
CLI = [str(Path(sys.executable).parent / "stragglers")]


def run(trace: Path, meta: Path, out: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one import in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([*CLI, "import", "kineto", str(trace), "--meta", str(meta),
                           "--out", str(out), "--jobs", "1"], capture_output=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def tiny(folder: Path) -> tuple[Path, Path]:
    doc = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
         "ts": 0, "dur": 100},
        {"ph": "X", "cat": "user_annotation", "name": "## forward ##", "pid": 1, "tid": 1,
         "ts": 1, "dur": 10},
        {"ph": "X", "cat": "user_annotation", "name": "## backward ##", "pid": 1, "tid": 1,
         "ts": 20, "dur": 10},
        {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 1,
         "tid": 1, "ts": 40, "dur": 10}]}
    trace = folder / "tiny.json"
    trace.write_text(json.dumps(doc))
    meta = folder / "tiny.yaml"
    meta.write_text("dp_size: 1\npp_size: 1\nworld_size: 1\n")
    return trace, meta


def files() -> list[tuple[Path, Path | None]]:
    out: list[tuple[Path, Path | None]] = []
    for p in sorted((SHARED / "real" / "kineto").glob("*.json.gz")):
        out.append((p, None))
    for d in sorted((SHARED / "real" / "kineto-more").iterdir()):
        for p in sorted(d.glob("*.json.gz")):
            out.append((p, d / "meta.yaml"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        trace, meta = tiny(t)
        runs = [run(trace, meta, t / f"o{i}") for i in range(args.reps)]
        start = statistics.median(r[0] for r in runs)
        start_cpu = statistics.median(r[1] for r in runs)
        print(f"start-up (one-step, four-event trace): wall {start:.2f} s, CPU "
              f"{start_cpu:.2f} s (median of {args.reps})")
        print("| file | gz MB | JSON MB | exit | wall s | CPU s | MB/s (wall) | "
              "MB per CPU-s beyond start-up |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for k, (path, meta_path) in enumerate(files()):
            raw = gzip.decompress(path.read_bytes())
            if meta_path is None:
                world = json.loads(raw)["distributedInfo"]["world_size"]
                meta_path = t / f"meta{k}.yaml"
                meta_path.write_text(f"dp_size: {world}\npp_size: 1\nworld_size: {world}\n")
            mb = len(raw) / 1e6
            runs = [run(path, meta_path, t / f"out{k}-{i}") for i in range(args.reps)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            parse = cpu - start_cpu
            rate = f"{mb / parse:.0f}" if parse >= 0.05 else "(within start-up)"
            name = f"{path.parent.name}/{path.name}"
            print(f"| {name} | {path.stat().st_size / 1e6:.1f} | {mb:.1f} | {runs[0][2]} | "
                  f"{wall:.2f} | {cpu:.2f} | {mb / wall:.1f} | {rate} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
