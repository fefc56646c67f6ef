"""Fleet study benchmark: a synthetic fleet (default 1,000 jobs of 16 to 1,024 workers)
analysed three ways, each into a fresh row store, as a table:

* ``sequential``: a plain loop in one process (:func:`stragglers.fleet.execute.run_sequential`);
* ``local-2``: the embedded Dask ``LocalCluster``, 2 single-threaded worker processes;
* ``external-2``: a separately started ``dask scheduler`` and ``dask worker --nworkers 2
  --nthreads 1`` on loopback (a real multi-process cluster, as on several machines),
  reached with ``--scheduler``.

Per mode: wall time of the run (the cluster's start-up is reported apart), CPU seconds
spent in the processes that ran the tasks, jobs/minute,
speed-up over ``sequential``, peak RSS per worker (the largest ``ru_maxrss`` of the
processes that ran tasks: the loop's own process for ``sequential``), and the machine's
1-minute load average before and after. Each mode runs in a fresh process (``--mode``)
so that peaks are its own; repeats give medians.

Usage: ``python bench/bench_fleet.py [--jobs 1000] [--fleet DIR] [--repeat 1]
[--modes sequential local-2 external-2]``. ``--fleet`` reuses a fleet written by
``stragglers synth --fleet N --seed 3 --out DIR`` (else one is written to a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("sequential", "local-2", "external-2")
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The external workers' Dask configuration: no MALLOC_TRIM_THRESHOLD_ (see
#: stragglers.fleet.execute.TRIM_KEY), as the embedded cluster does.
WORKER_CONFIG = """\
distributed:
  nanny:
    pre-spawn-environ:
      MALLOC_TRIM_THRESHOLD_: null
"""


def _usage() -> tuple[float, float, str | None]:
    """This process's peak RSS (MiB), CPU seconds (user + system) and trim setting."""
    import os
    import resource as r

    u = r.getrusage(r.RUSAGE_SELF)
    return (u.ru_maxrss / 1024, u.ru_utime + u.ru_stime,
            os.environ.get("MALLOC_TRIM_THRESHOLD_"))


def child(mode: str, fleet: str, store_dir: str) -> dict[str, object]:
    """One measurement (run in its own process)."""
    from stragglers.fleet.discover import discover
    from stragglers.fleet.execute import open_client, run_dask, run_sequential
    from stragglers.fleet.rowstore import RowStore

    jobs = discover([fleet])
    store = RowStore(store_dir)
    load0 = os.getloadavg()[0]
    procs: list[subprocess.Popen[bytes]] = []
    start_s = 0.0
    trim = ["None"]
    try:
        if mode == "sequential":
            cpu0 = _usage()[1]
            _, stats = run_sequential(jobs, store)
            peak, cpu1, _ = _usage()
            peaks, cpu = [peak], cpu1 - cpu0
        else:
            address = None
            if mode == "external-2":
                port = _free_port()
                address = f"tcp://127.0.0.1:{port}"
                logs = open(Path(store_dir).parent / f"dask-{port}.log", "wb")  # noqa: SIM115
                conf = Path(store_dir).parent / "dask-config"
                conf.mkdir(exist_ok=True)
                (conf / "fleet.yaml").write_text(WORKER_CONFIG)
                env = dict(os.environ, DASK_CONFIG=str(conf))
                procs.append(subprocess.Popen(
                    [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                     str(port), "--no-dashboard"], stdout=logs, stderr=logs))
                procs.append(subprocess.Popen(
                    [str(BIN / "dask"), "worker", address, "--nworkers", "2", "--nthreads",
                     "1", "--no-dashboard"], stdout=logs, stderr=logs, env=env))
            t0 = time.perf_counter()
            with open_client(address, workers=2) as client:
                if address is not None:
                    client.wait_for_workers(2, timeout=120)  # type: ignore[attr-defined]
                start_s = time.perf_counter() - t0
                before = client.run(_usage)  # type: ignore[attr-defined]
                _, stats = run_dask(jobs, store, client)
                after = client.run(_usage)  # type: ignore[attr-defined]
                peaks = sorted(v[0] for v in after.values())
                trim = sorted({str(v[2]) for v in after.values()})
                cpu = sum(after[w][1] - before[w][1] for w in after)
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
    return {"mode": mode, "jobs": stats.jobs, "computed": stats.computed,
            "failed": stats.failed_now, "wall_s": stats.wall_s, "start_s": start_s, "cpu_s": cpu,
            "peak_mib": max(peaks), "peaks_mib": peaks, "malloc_trim": trim,
            "load_before": load0, "load_after": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--fleet", help="an existing fleet folder (else one is generated)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(child(args.mode, args.fleet, args.store)))
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    try:
        fleet = args.fleet
        if fleet is None:
            fleet = str(tmp / "fleet")
            t0 = time.perf_counter()
            subprocess.run([str(BIN / "stragglers"), "synth", "--fleet", str(args.jobs),
                            "--seed", str(args.seed), "--out", fleet], check=True)
            print(f"generated {args.jobs} jobs in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr)
        results: dict[str, list[dict[str, object]]] = {m: [] for m in args.modes}
        for r in range(args.repeat):
            for mode in args.modes:
                store = tmp / f"store-{mode}-{r}"
                out = subprocess.run([sys.executable, __file__, "--mode", mode, "--fleet",
                                      fleet, "--store", str(store)], check=True,
                                     capture_output=True, text=True).stdout
                res = json.loads(out.strip().splitlines()[-1])
                print(json.dumps(res), file=sys.stderr)
                results[mode].append(res)
                shutil.rmtree(store, ignore_errors=True)
        med = {m: {k: statistics.median(float(x[k]) for x in rs)  # type: ignore[arg-type]
                   for k in ("wall_s", "start_s", "cpu_s", "peak_mib", "load_before",
                             "load_after")}
               for m, rs in results.items()}
        base = med.get("sequential", {}).get("wall_s")
        n = results[args.modes[0]][0]["jobs"]
        print(f"\n{n} jobs, median of {args.repeat} run(s); {os.cpu_count()} CPUs\n")
        print("| mode | wall s | cluster start s | jobs/min | speed-up | CPU s in tasks | peak "
              "RSS per worker MiB | load 1-min before / after |")
        print("|---|---|---|---|---|---|---|---|")
        for m in args.modes:
            w = med[m]["wall_s"]
            up = f"{base / w:.2f}x" if base else "-"
            print(f"| {m} | {w:.1f} | {med[m]['start_s']:.1f} | {60 * float(n) / w:.0f} | {up} | "  # type: ignore[arg-type]
                  f"{med[m]['cpu_s']:.1f} | "
                  f"{med[m]['peak_mib']:.0f} | {med[m]['load_before']:.2f} / "
                  f"{med[m]['load_after']:.2f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
