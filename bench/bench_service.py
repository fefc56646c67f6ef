"""SMon service benchmark: a real `stragglers serve` process on loopback, measured from a
client. Parts (``--parts``, default all):

* ``arx64``: AR×64 (7.5 M ops, 1,024 workers; built by bench/make_arx.py into bench/out)
  pushed, analysed and on the dashboard: time from the start of the upload to the job page
  showing the session's S (upload, validation, queue, analysis with outputs, page);
* ``pages``: a store with 1,000 analysed sessions (100 jobs; one of them with 505 sessions
  and 500 detection events), filled through the store API with copies of a real analysis
  (the AR reference's outputs): the wall time of each dashboard page as a client sees it;
* ``load``: 20 concurrent clients × 10 sessions each (a small synthetic job, dp 2 × pp 2,
  4 steps) plus 4 record streams (iteration records, 100 per batch) at the same time;
  checks that every acknowledged session is stored exactly once and analysed, and reports
  throughput and p50/p99 latencies;
  ``--deploy one|two-pg|dask`` (repeatable; default ``one``) picks the deployment: one
  server on SQLite (``--workers 2``); two servers on one PostgreSQL sharing one data folder
  (``--workers 1`` each, clients and record streams spread over both); one server on SQLite
  whose analyses run on a local Dask cluster (a ``dask scheduler`` and a ``dask worker
  --nworkers 2 --nthreads 1``, separate processes). A reader polls the jobs page, a job page
  and ``/metrics`` during the load (their p50/p99), and the resident memory of every server
  process and its children (Dask's too) is sampled every 0.5 s (start, peak, end);
* ``screenshot``: a job with a worker slowing down over 6 sessions and a detection onset;
  saves the job page as docs/dashboard.png (headless Chromium, palette PNG).

Usage: ``python bench/bench_service.py [--parts arx64 pages load screenshot] [--repeat 3]``.
Medians of the repeats are printed as Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
REF = REPO.parent / "shared" / "reference" / "traces"
TOKEN = "bench-token-0123456789abcdef"
CLI = "import sys; from stragglers.cli import main; sys.exit(main())"


class Server:
    def __init__(self, data: Path, *args: str, env: dict[str, str] | None = None) -> None:
        token = data.parent / "token"
        token.write_text(TOKEN)
        self.log = open(data.parent / f"serve-{uuid.uuid4().hex[:6]}.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLI, "serve", "--data", str(data), "--token-file",
             str(token), "--port", "0", "--log-level", "warning", *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env={**os.environ, **(env or {})})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.url = line.split("listening on ")[1].split()[0]
        for _ in range(600):
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        self.headers = {"Authorization": f"Bearer {TOKEN}"}

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self.log.close()

    def upload(self, client: httpx.Client, trace: Path, meta: Path, job: str) -> str:
        with trace.open("rb") as fh:
            r = client.post(f"{self.url}/api/v1/sessions", headers=self.headers,
                            data={"job": job, "key": uuid.uuid4().hex}, timeout=600,
                            files={"trace": (trace.name, fh), "meta": (meta.name,
                                                                        meta.read_bytes())})
        assert r.status_code == 202, r.text
        return str(r.json()["session"])

    def status(self, client: httpx.Client, session: str) -> str:
        r = client.get(f"{self.url}/api/v1/sessions/{session}?result=0", timeout=60)
        return str(r.json()["status"])


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


# -- AR×64 ----------------------------------------------------------------------------------
def bench_arx64(repeat: int) -> None:
    trace, meta = OUT / "trace-ARx64.parquet", OUT / "meta-ARx64.yaml"
    if not trace.exists():
        sys.path.insert(0, str(HERE))
        from make_arx import make_arx

        make_arx(64, OUT, REF)
    rows = []
    for _ in range(repeat):
        tmp = Path(tempfile.mkdtemp(prefix="smon-arx64-"))
        server = Server(tmp / "data", "--workers", "1")
        try:
            with httpx.Client() as client:
                t0 = time.perf_counter()
                session = server.upload(client, trace, meta, "ARx64")
                t_ack = time.perf_counter()
                while server.status(client, session) not in ("done", "failed"):
                    time.sleep(0.1)
                t_done = time.perf_counter()
                page = client.get(f"{server.url}/jobs/ARx64", timeout=60)
                t_page = time.perf_counter()
                assert "1.97305" in page.text and page.status_code == 200
                doc = client.get(f"{server.url}/api/v1/sessions/{session}").json()
        finally:
            server.stop()
            shutil.rmtree(tmp, ignore_errors=True)
        rows.append({"upload": t_ack - t0, "analysis": t_done - t_ack,
                     "page": t_page - t_done, "total": t_page - t0,
                     "worker": doc["summary"]["analysis_s"], "S": doc["result"]["slowdown"]})
        print(f"  run: {rows[-1]}", file=sys.stderr)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"\nAR×64 ({trace.stat().st_size / 2**20:.0f} MiB parquet, 7,501,824 ops, 1,024 "
          f"workers), median of {repeat}:\n")
    print("| upload + validation → 202 s | queue + analysis → done s | (analysis in the worker s)"
          " | job page s | push → on the dashboard s | S |")
    print("|---|---|---|---|---|---|")
    print(f"| {med['upload']:.2f} | {med['analysis']:.2f} | {med['worker']:.2f} | "
          f"{med['page']:.3f} | **{med['total']:.2f}** | {med['S']:.5f} |")


# -- pages with 1,000 sessions ----------------------------------------------------------------
def fill_store(data: Path) -> tuple[str, str]:
    """1,000 done sessions (copies of the AR reference analysis) in 100 jobs."""
    from stragglers.analysis import analyze_table, load_table
    from stragglers.analysis.outputs import write_outputs
    from stragglers.service.datadir import DataDir
    from stragglers.service.rows import AnalysisSummary, DetectionEvent, NewSession
    from stragglers.service.store import Store, sqlite_url

    d = DataDir(data).create()
    template = data.parent / "template"
    a = analyze_table(load_table(REF / "trace-AR.parquet", REF / "meta-AR.yaml"))
    r = write_outputs(a.engine, a.result, template / "out-1", timelines=())
    store = Store.open(sqlite_url(d.root))
    rng = np.random.default_rng(0)
    jobs = [("big", 505)] + [(f"job-{i:03d}", 5) for i in range(99)]
    last = ""
    for name, n in jobs:
        for _ in range(n):
            sid = uuid.uuid4().hex
            shutil.copytree(template, d.session(sid))
            store.add_session(NewSession(id=sid, job=name, trace_file="trace.parquet",
                                         upload_name="trace-AR.parquet", upload_bytes=1))
            store.claim(1, 3)
            s = float(r.slowdown * (1 + 0.05 * rng.standard_normal()))
            store.finish_done(sid, AnalysisSummary(
                result_dir="out-1", n_workers=16, n_steps=44, n_ops=117216, slowdown=s,
                waste=1 - 1 / s, discrepancy=1.0, trustworthy=True, cause="worker",
                confidence=1.0, workers=("0,0",), step_time=46.6, analysis_s=1.0))
            last = sid
    job_id = store.ensure_job("big")
    events = [DetectionEvent(kind="onset" if i % 2 == 0 else "recovery", rank=i % 64,
                             iteration=i * 10, ts=float(i), severity=0.2, level_s=1.2,
                             previous_s=1.0, detail={}) for i in range(500)]
    store.add_events(job_id, 50_000, events)
    assert len(store.session_ids()) == 1000
    store.close()
    return "big", last


def bench_pages(repeat: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="smon-pages-"))
    try:
        job, session = fill_store(tmp / "data")
        server = Server(tmp / "data", "--workers", "1")
        try:
            pages = {"jobs page `/` (100 jobs, 50 shown)": "/",
                     "jobs page sorted by S": "/?sort=slowdown&order=desc",
                     "job page, 505 sessions, 500 events": f"/jobs/{job}",
                     "job page, 5 sessions": "/jobs/job-000",
                     "session page": f"/sessions/{session}", "alerts page": "/alerts",
                     "`/metrics`": "/metrics", "`GET /api/v1/sessions/ID`":
                     f"/api/v1/sessions/{session}"}
            rows = []
            with httpx.Client() as client:
                for label, path in pages.items():
                    times = []
                    for _ in range(5):  # warm-up
                        client.get(f"{server.url}{path}")
                    for _ in range(20 * repeat):
                        t0 = time.perf_counter()
                        r = client.get(f"{server.url}{path}", timeout=60)
                        times.append(time.perf_counter() - t0)
                        assert r.status_code == 200
                    rows.append((label, len(r.content), statistics.median(times) * 1e3,
                                 pct(times, 95) * 1e3, max(times) * 1e3))
        finally:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nDashboard pages with 1,000 analysed sessions stored (SQLite), "
          f"{20 * repeat} requests each:\n")
    print("| page | bytes | median ms | p95 ms | max ms |")
    print("|---|---|---|---|---|")
    for label, size, med, p95, mx in rows:
        print(f"| {label} | {size:,} | {med:.1f} | {p95:.1f} | {mx:.1f} |")


# -- load test ------------------------------------------------------------------------------
def _rss_tree(pids: list[int]) -> int:
    """Resident bytes of these processes and all their descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(ln.split(":\t", 1) for ln in status.read_text().splitlines()
                          if ":\t" in ln)
        except OSError:
            continue
        pid = int(status.parent.name)
        children.setdefault(int(fields.get("PPid", "0").strip() or 0), []).append(pid)
        if "VmRSS" in fields:
            rss[pid] = int(fields["VmRSS"].split()[0]) * 1024
    total, todo, seen = 0, list(pids), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


class _Deployment:
    """The servers of one deployment (and what they need: PostgreSQL, a Dask cluster)."""

    def __init__(self, kind: str, tmp: Path) -> None:
        self.kind, self.tmp = kind, tmp
        self.servers: list[Server] = []
        self.extra: list[subprocess.Popen[bytes]] = []
        self.pg = None
        data = tmp / "data"
        if kind == "one":
            self.servers.append(Server(data, "--workers", "2"))
        elif kind == "two-pg":
            sys.path.insert(0, str(REPO))
            from tests.service.postgres import PostgresServer

            self.pg = PostgresServer()
            url = self.pg.start()
            for _ in range(2):
                self.servers.append(Server(data, "--db", url, "--workers", "1"))
        elif kind == "dask":
            sched = tmp / "scheduler.json"
            dask = str(Path(sys.executable).parent / "dask")
            self.extra.append(subprocess.Popen(
                [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                 "--scheduler-file", str(sched)], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
            self.extra.append(subprocess.Popen(
                [dask, "worker", "--scheduler-file", str(sched), "--nworkers", "2",
                 "--nthreads", "1", "--no-dashboard"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
            for _ in range(600):
                if sched.exists() and sched.stat().st_size:
                    break
                time.sleep(0.1)
            address = json.loads(sched.read_text())["address"]
            self.servers.append(Server(data, "--scheduler", address, "--workers", "2"))
        else:
            raise SystemExit(f"--deploy {kind}: expected one, two-pg or dask")

    @property
    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.servers] + [p.pid for p in self.extra]

    def stop(self) -> None:
        for srv in self.servers:
            srv.stop()
        for proc in self.extra:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        if self.pg is not None:
            self.pg.stop()


def bench_load(clients: int, per_client: int, streams: int, batches: int,
               deploy: str = "one") -> None:
    from stragglers.synth.generator import SynthSpec, write_synth

    tmp = Path(tempfile.mkdtemp(prefix="smon-load-"))
    try:
        job = write_synth(SynthSpec(dp=2, pp=2, microbatches=4, steps=4,
                                    slow_workers=[(1, 1, 1.5)], name="load"), tmp / "job")
        dep = _Deployment(deploy, tmp)
        servers = dep.servers
        server = servers[0]
        try:
            acked: dict[str, str] = {}
            lock = threading.Lock()
            upload_lat: list[float] = []
            e2e: list[float] = []
            record_lat: list[float] = []
            page_lat: list[float] = []
            stream_wall: list[float] = []
            memory: list[int] = []
            n_records = 0
            done = threading.Event()

            def client_run(c: int) -> None:
                srv = servers[c % len(servers)]
                with httpx.Client() as client:
                    for _i in range(per_client):
                        t0 = time.perf_counter()
                        sid = srv.upload(client, job["trace"], job["meta"], f"load-{c:02d}")
                        t1 = time.perf_counter()
                        with lock:
                            assert sid not in acked
                            acked[sid] = f"load-{c:02d}"
                            upload_lat.append(t1 - t0)
                        while srv.status(client, sid) not in ("done", "failed"):
                            time.sleep(0.05)
                        with lock:
                            e2e.append(time.perf_counter() - t0)

            def stream_run(s: int) -> None:
                nonlocal n_records
                srv = servers[s % len(servers)]  # a job's records go to one server
                rng = np.random.default_rng(s)
                t_start = time.perf_counter()
                with httpx.Client() as client:
                    for b in range(batches):
                        lines = "".join(
                            f'{{"rank": {r}, "iter": {b * 25 + i}, "duration": '
                            f'{1 + 0.01 * rng.standard_normal():.5f}}}\n'
                            for i in range(25) for r in range(4))
                        t0 = time.perf_counter()
                        r = client.post(f"{srv.url}/api/v1/jobs/stream-{s}/records",
                                        headers={**srv.headers,
                                                 "Idempotency-Key": f"s{s}-b{b}"},
                                        content=lines.encode(), timeout=60)
                        assert r.status_code == 200, r.text
                        with lock:
                            record_lat.append(time.perf_counter() - t0)
                            n_records += r.json()["records"]
                with lock:
                    stream_wall.append(time.perf_counter() - t_start)

            def reader() -> None:
                paths = ("/", "/jobs/load-00", "/metrics")
                k = 0
                with httpx.Client() as client:
                    while not done.is_set():
                        srv = servers[k % len(servers)]
                        t0 = time.perf_counter()
                        r = client.get(srv.url + paths[k % len(paths)], timeout=60)
                        if r.status_code == 200:
                            with lock:
                                page_lat.append(time.perf_counter() - t0)
                        k += 1
                        done.wait(0.2)

            def sampler() -> None:
                while not done.is_set():
                    memory.append(_rss_tree(dep.pids))
                    done.wait(0.5)

            memory.append(_rss_tree(dep.pids))
            background = [threading.Thread(target=reader), threading.Thread(target=sampler)]
            for th in background:
                th.start()
            t0 = time.perf_counter()
            with ThreadPoolExecutor(clients + streams) as pool:
                futures = [pool.submit(client_run, c) for c in range(clients)]
                futures += [pool.submit(stream_run, s) for s in range(streams)]
                for f in futures:
                    f.result()
            wall = time.perf_counter() - t0
            done.set()
            for th in background:
                th.join()
            memory.append(_rss_tree(dep.pids))
            with httpx.Client() as client:
                listed: list[str] = []
                statuses: dict[str, int] = {}
                worker_s: list[float] = []
                records_stored = 0
                for j in client.get(f"{server.url}/api/v1/jobs?per=100000").json()["jobs"]:
                    if j["name"].startswith("stream-"):
                        records_stored += int(j["records"])
                    if not j["name"].startswith("load-"):
                        continue
                    for s in client.get(f"{server.url}/api/v1/jobs/{j['name']}",
                                        timeout=60).json()["session_list"]:
                        listed.append(s["session"])
                        worker_s.append(s["summary"]["analysis_s"])
                        statuses[s["status"]] = statuses.get(s["status"], 0) + 1
                        assert acked[s["session"]] == j["name"]
        finally:
            dep.stop()
        total = clients * per_client
        lost = len(set(acked) - set(listed))
        dup = len(listed) - len(set(listed))
        where = {"one": "one server (SQLite, --workers 2)",
                 "two-pg": "two servers on one PostgreSQL (--workers 1 each, one data folder)",
                 "dask": "one server (SQLite) with a 2-worker Dask cluster (--scheduler)"}
        mib = [m / 2**20 for m in memory]
        print(f"\nLoad test, {where[deploy]}: {clients} clients × {per_client} sessions (dp 2 × "
              f"pp 2, 4 steps, {job['trace'].stat().st_size:,} B parquet each) + {streams} "
              f"record streams × {batches} batches of 100 records, a reader polling pages:\n")
        print("| deployment | sessions acked | done | lost | duplicated | records sent / stored "
              "| wall s | sessions/min | upload p50 / p99 ms | push → analysed p50 / p99 s | "
              "analysis p50 s | records batch p50 / p99 ms | page reads p50 / p99 ms | "
              "memory start / peak / end MiB |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        print(f"| {deploy} | {len(acked)} of {total} | {statuses.get('done', 0)} | {lost} | "
              f"{dup} | {streams * batches * 100:,} / {records_stored:,} | {wall:.1f} | "
              f"{60 * total / wall:.1f} | {pct(upload_lat, 50) * 1e3:.0f} / "
              f"{pct(upload_lat, 99) * 1e3:.0f} | {pct(e2e, 50):.2f} / {pct(e2e, 99):.2f} | "
              f"{pct(worker_s, 50):.2f} | {pct(record_lat, 50) * 1e3:.0f} / "
              f"{pct(record_lat, 99) * 1e3:.0f} | {pct(page_lat, 50) * 1e3:.0f} / "
              f"{pct(page_lat, 99) * 1e3:.0f} | {mib[0]:.0f} / {max(mib):.0f} / {mib[-1]:.0f} |")
        assert lost == 0 and dup == 0 and statuses.get("done", 0) == total
        assert records_stored == streams * batches * 100
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- screenshot -----------------------------------------------------------------------------
def take_screenshot(path: Path) -> None:
    from PIL import Image

    from stragglers.synth.generator import SynthSpec, write_synth

    sys.path.insert(0, str(REPO))
    from tests.service.browser import browser_page

    tmp = Path(tempfile.mkdtemp(prefix="smon-shot-"))
    try:
        rules = tmp / "alerts.yaml"
        rules.write_text("rules:\n  - name: slow-training\n    slowdown: 1.2\n"
                         "  - name: fail-slow\n    onset: 0.15\n")
        server = Server(tmp / "data", "--workers", "1", "--alerts", str(rules))
        try:
            with httpx.Client() as client:
                for i, factor in enumerate((1.0, 1.05, 1.1, 1.3, 1.6, 1.8)):
                    spec = SynthSpec(dp=8, pp=4, microbatches=8, steps=12, seed=i, jitter=0.02,
                                     slow_workers=[(5, 2, factor)] if factor > 1 else [],
                                     name="gpt-13b")
                    job = write_synth(spec, tmp / f"s{i}")
                    sid = server.upload(client, job["trace"], job["meta"], "gpt-13b")
                    while server.status(client, sid) not in ("done", "failed"):
                        time.sleep(0.1)
                rng = np.random.default_rng(0)
                lines = []
                for it in range(300):
                    for r in range(0, 32, 4):
                        slow = 1.35 if (r == 20 and it >= 200) else 1.0
                        lines.append(json.dumps({"rank": r, "iter": it, "ts": 1000.0 + it,
                                                 "duration": slow * (1 + 0.01 *
                                                                     rng.standard_normal())}))
                client.post(f"{server.url}/api/v1/jobs/gpt-13b/records", headers=server.headers,
                            content="\n".join(lines).encode(), timeout=60)
            with browser_page(1000, 2000) as page:  # the heatmap in view: no scrolling
                page.goto(f"{server.url}/jobs/gpt-13b")
                box = page.locator('#worker-heatmap rect[data-dp="5"][data-stage="2"]'
                                   ).bounding_box()
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                page.wait_for_selector("#tooltip:not([hidden])")
                raw = tmp / "raw.png"
                page.screenshot(path=str(raw), full_page=True)
        finally:
            server.stop()
        img = Image.open(raw).convert("RGB")
        img = img.quantize(colors=64, method=Image.Quantize.MEDIANCUT)
        path.parent.mkdir(parents=True, exist_ok=True)
        img.save(path, optimize=True)
        print(f"\nscreenshot: {path} ({path.stat().st_size:,} bytes)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    global REF
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", nargs="+", default=["arx64", "pages", "load", "screenshot"],
                    choices=["arx64", "pages", "load", "screenshot"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--deploy", action="append", choices=["one", "two-pg", "dask"],
                    help="load: the deployment (repeat for several; default one)")
    ap.add_argument("--screenshot", type=Path, default=REPO / "docs" / "dashboard.png")
    ap.add_argument("--ref", type=Path, default=REF,
                    help="the reference traces folder (default: ../shared/reference/traces)")
    a = ap.parse_args()
    REF = a.ref
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    if "arx64" in a.parts:
        bench_arx64(a.repeat)
    if "pages" in a.parts:
        bench_pages(a.repeat)
    if "load" in a.parts:
        for deploy in a.deploy or ["one"]:
            bench_load(a.clients, a.sessions, a.streams, a.batches, deploy)
    if "screenshot" in a.parts:
        take_screenshot(a.screenshot)


if __name__ == "__main__":
    main()
