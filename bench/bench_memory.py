"""Peak memory per unit of the size limits (docs/reference/errors-and-limits.md).

Each measurement runs in a fresh process and reports its peak resident memory during the
work above its resident memory before it (Linux: the peak is reset after the imports by
writing 5 to /proc/self/clear_refs, then read from VmHWM); the cost per unit is the slope
between two sizes, so fixed costs cancel. Units: an op of ``synth`` output (generated and
written), a trace row read and built into the dense table (``load_table``: read, validate,
build_table), and a trace row through the analysis without exact S_w (``analyze_table``,
the whole pipeline, for orientation).

    python bench/bench_memory.py            # about ten seconds on 2 cores
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SNIPPET = r"""
import json, sys, time
from stragglers.synth import SynthSpec, write_synth, generate
from stragglers.analysis import load_table, analyze_table
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
base = status("VmRSS:")
what, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
spec = SynthSpec(dp=8, pp=4, microbatches=8, steps=steps, jitter=0.01, seed=1)
t0 = time.perf_counter()
if what == "synth":  # generate and write trace.parquet, meta.yaml, truth.json
    n = json.loads(open(write_synth(spec, out + "/w")["truth"]).read())["n_ops"]
elif what == "load_table":
    table = load_table(out + "/trace.parquet", out + "/meta.yaml")
    n = table.duration.size
elif what == "analyze":
    table = load_table(out + "/trace.parquet", out + "/meta.yaml")
    n = table.duration.size
    analyze_table(table, exact_workers=False)
dt = time.perf_counter() - t0
peak = status("VmHWM:")
print(json.dumps({"n": n, "mib": (peak - base) / 1024, "s": dt}))
"""


def measure(what: str, steps: int, folder: Path) -> dict[str, float]:
    res = subprocess.run([sys.executable, "-c", SNIPPET, what, str(steps), str(folder)],
                         check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    from stragglers.synth import SynthSpec, write_synth

    sizes = (500, 2000)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folders = {}
        for steps in sizes:
            folders[steps] = Path(tmp) / f"s{steps}"
            write_synth(SynthSpec(dp=8, pp=4, microbatches=8, steps=steps, jitter=0.01,
                                  seed=1), folders[steps])
        for what in ("synth", "load_table", "analyze"):
            runs = [measure(what, s, folders[s]) for s in sizes]
            small, large = runs
            per = (large["mib"] - small["mib"]) * 2**20 / (large["n"] - small["n"])
            rows.append((what, small, large, per))
    print("| unit | ops (small) | peak MiB | ops (large) | peak MiB | bytes per op | s (large) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for what, small, large, per in rows:
        print(f"| {what} | {small['n']:,} | {small['mib']:.0f} | {large['n']:,} | "
              f"{large['mib']:.0f} | {per:.0f} | {large['s']:.1f} |")


if __name__ == "__main__":
    t = time.perf_counter()
    main()
    print(f"\n(total {time.perf_counter() - t:.0f} s)")
