"""An on-call run of SMon (issue 31): a record stream with a slowdown on one rank and a later
one on another, the server restarted during it (SIGTERM and kill -9, the latter while a
batch is being handled), then stalled connections beside ``/healthz``.

The stream: ``--ranks`` ranks sending call records (``--calls`` calls per iteration, no
iteration number: the detector finds the iterations from the calls' period) or iteration
records (``--records iters``), ``--iters`` iterations of 1 s (1% noise) in batches of
``--batch`` iterations, posted with :func:`stragglers.service.client.push_records` (its
derived idempotency key and its retry budget carry the batches over the restarts). Rank 1
is 1.4x slower in iterations [7000, 10000), rank 3 in [9000, 14000) (scaled with
``--iters``); with 4 ranks × 4 calls × 16,000 iterations the stream is 256,000 records, past
the 200,000 the server keeps for rebuilding its detector, so the restarts late in the stream
rebuild it from a trimmed log. Restarts at 30%, 50% (kill -9), 75% and 85% (kill -9) of the
stream. A webhook receiver on loopback collects the alerts (rule ``onset: 0.15``).

Checks and figures: the onset and recovery events (rank, iteration) against the truth and
against the same stream without restarts (``--no-clean`` skips that run); the alerts (one
per rank, each resolved after its own rank's recovery and only then); after each restart,
the job not quiet (``last_seen`` recent) with its open alerts and present in the first
``/metrics`` scrape; each restart's time from the signal to ``/healthz`` answering; the
``/healthz`` latency beside 300 stalled connections and beside 3,000 (past the default
limit of 1,000 open connections).

Usage: ``python bench/bench_oncall.py [--iters 16000] [--ranks 4] [--records calls|iters]
[--server-src OLD/src]``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "src"))

from stragglers.service.client import push_records  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
CLI = "import sys; from stragglers.cli import main; sys.exit(main())"
#: (type, size, share of the iteration after it) of the calls of one iteration
CALLS = (("allgather", 1024, 0.3), ("reducescatter", 1024, 0.3), ("allreduce", 8, 0.2),
         ("broadcast", 4, 0.2))
JOB = "oncall"


class Receiver:
    """A webhook receiver on loopback: the alert bodies, with their arrival time."""

    def __init__(self) -> None:
        self.bodies: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        got = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                n = int(self.headers.get("Content-Length", "0"))
                got.put((time.time(), json.loads(self.rfile.read(n))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def all(self) -> list[tuple[float, dict[str, Any]]]:
        out = []
        while not self.bodies.empty():
            out.append(self.bodies.get())
        return out


class Server:
    """``stragglers serve`` on a fixed port, restartable on the same data folder."""

    def __init__(self, root: Path, rules: Path, src: Path) -> None:
        self.root = root
        self.src = src
        self.data = root / "data"
        self.token = root / "token"
        self.token.write_text(TOKEN)
        self.rules = rules
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> float:
        """Start; returns seconds until ``/healthz`` answers."""
        t0 = time.monotonic()
        self.starts += 1
        log = open(self.root / f"serve-{self.starts}.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLI, "serve", "--data", str(self.data), "--token-file",
             str(self.token), "--port", str(self.port), "--workers", "1", "--alerts",
             str(self.rules)], stdout=subprocess.DEVNULL, stderr=log,
            env={**os.environ, "PYTHONPATH": str(self.src)})
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=5).status_code == 200:
                    return time.monotonic() - t0
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                text = (self.root / f"serve-{self.starts}.log").read_text()
                raise RuntimeError(f"server exited: {text[-2000:]}")
            time.sleep(0.1)

    def restart(self, how: str) -> dict[str, float]:
        """SIGTERM or SIGKILL, then start again; seconds from the signal to the exit and to
        ``/healthz`` answering."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
        self.proc.wait(120)
        down = time.monotonic() - t0
        up = self.start()
        return {"exit_s": down, "back_s": down + up}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(120)

    def get(self, path: str) -> Any:
        return httpx.get(f"{self.url}{path}", timeout=60)


def batches(args: argparse.Namespace) -> tuple[list[str], dict[int, tuple[int, int]]]:
    n = args.iters
    slow = {1: (int(0.4375 * n), int(0.625 * n)), 3: (int(0.5625 * n), int(0.875 * n))}
    rng = np.random.default_rng(args.seed)
    t = dict.fromkeys(range(args.ranks), 1000.0)
    calls = CALLS[:args.calls]
    total = sum(c[2] for c in calls)
    out = []
    for b0 in range(0, n, args.batch):
        lines = []
        for it in range(b0, min(n, b0 + args.batch)):
            for r in range(args.ranks):
                lo, hi = slow.get(r, (n, n))
                d = (1.4 if lo <= it < hi else 1.0) * (1 + 0.01 * rng.standard_normal())
                if args.records == "iters":
                    lines.append(f'{{"rank": {r}, "iter": {it}, "duration": {d:.6f}}}')
                    continue
                for typ, size, share in calls:
                    lines.append(f'{{"rank": {r}, "type": "{typ}", "size": {size}, '
                                 f'"ts": {t[r]:.6f}}}')
                    t[r] += share / total * d
        out.append("\n".join(lines) + "\n")
    return out, slow


def run(args: argparse.Namespace, bodies: list[str], restarts: dict[int, str],
        root: Path) -> dict[str, Any]:
    receiver = Receiver()
    rules = root / "alerts.yaml"
    rules.write_text(f"webhook: {receiver.url}\nrules:\n  - {{name: fail-slow, onset: 0.15}}\n")
    server = Server(root, rules, args.server_src)
    first_up = server.start()
    restart_figures: list[dict[str, Any]] = []
    answers = 0
    t0 = time.monotonic()
    for i, body in enumerate(bodies):
        how = restarts.get(i)
        if how is not None:
            figures: dict[str, Any] = {"batch": i, "how": how}
            if how == "kill":  # while the batch is being handled
                killer = threading.Timer(0.05, lambda: server.proc and server.proc.kill())
                killer.start()
                answer = None
                try:
                    answer = push_records(body, JOB, server.url, TOKEN, retry_s=0.2)
                except Exception as exc:  # noqa: BLE001 - cut by the kill
                    figures["cut"] = type(exc).__name__
                killer.join()
                server.proc.wait(60)  # type: ignore[union-attr]
                t1 = time.monotonic()
                up = server.start()
                figures.update(exit_s=0.0, back_s=time.monotonic() - t1, up_s=up)
                if answer is not None:
                    figures["cut"] = "answered before the kill"
            else:
                figures.update(server.restart(how))
            # right after the restart: the job is not quiet, its alerts still open, and in
            # the first /metrics scrape
            job = server.get(f"/api/v1/jobs/{JOB}").json()
            figures["quiet_s"] = round(time.time() - job["last_seen"], 1)
            figures["open_alerts"] = job["open_alerts"]
            metrics = server.get("/metrics").text
            figures["in_metrics"] = f'training_job="{JOB}"' in metrics
            restart_figures.append(figures)
        doc = push_records(body, JOB, server.url, TOKEN, retry_s=120)
        answers += 1 if "records" in doc else 0
    stream_s = time.monotonic() - t0
    time.sleep(3)  # the last notifications
    events = server.get(f"/api/v1/jobs/{JOB}/events").json()["events"]
    job = server.get(f"/api/v1/jobs/{JOB}").json()
    alerts = receiver.all()
    stalled = stalled_connections(server) if args.stalled else {}
    server.stop()
    receiver.httpd.shutdown()
    return {"first_up_s": first_up, "restarts": restart_figures, "stream_s": stream_s,
            "records": job["records"], "events": [
                (e["event"], e.get("rank"), e.get("iteration")) for e in events
                if e["event"] in ("onset", "recovery", "flapping")],
            "alerts": [(round(t, 3), b["status"], b.get("rank"), b["event"]["iteration"])
                       for t, b in alerts], "stalled": stalled}


def _healthz_latency(server: Server, n: int = 5) -> list[float]:
    out = []
    for _ in range(n):
        t = time.monotonic()
        r = httpx.get(f"{server.url}/healthz", timeout=60)
        out.append(time.monotonic() - t if r.status_code == 200 else float("inf"))
    return out


def stalled_connections(server: Server) -> dict[str, Any]:
    addr = ("127.0.0.1", server.port)
    figures: dict[str, Any] = {}
    for n in (300, 3000):
        socks = []
        for i in range(n):
            s = socket.create_connection(addr, timeout=60)
            if i % 2:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            socks.append(s)
        time.sleep(1.5)
        lat = _healthz_latency(server)
        figures[n] = {"healthz_median_s": statistics.median(lat), "healthz_max_s": max(lat)}
        for s in socks:
            s.close()
        time.sleep(1.0)
    return figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=16_000)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--records", choices=["calls", "iters"], default="calls")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--server-src", type=Path, default=REPO / "src",
                    help="the server's sources (e.g. a checkout of the code before, to "
                         "compare; the client is this checkout's)")
    ap.add_argument("--no-clean", dest="clean", action="store_false")
    ap.add_argument("--no-stalled", dest="stalled", action="store_false")
    args = ap.parse_args()
    bodies, slow = batches(args)
    nb = len(bodies)
    restarts = {int(0.30 * nb): "term", int(0.50 * nb): "kill", int(0.75 * nb): "term",
                int(0.85 * nb): "kill"}
    truth = sorted([("onset", r, lo) for r, (lo, _) in slow.items()]
                   + [("recovery", r, hi) for r, (_, hi) in slow.items()], key=lambda e: e[2])
    n_records = sum(b.count("\n") for b in bodies)
    print(f"stream: {args.ranks} ranks, {args.iters:,} iterations, {n_records:,} "
          f"{args.records} records in {nb} batches; restarts {restarts}")
    print(f"truth: {truth}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="oncall-") as tmp:
        if args.clean:
            clean_args = argparse.Namespace(**{**vars(args), "stalled": False})
            (Path(tmp) / "clean").mkdir()
            results["clean"] = run(clean_args, bodies, {}, Path(tmp) / "clean")
        (Path(tmp) / "restarted").mkdir()
        results["restarted"] = run(args, bodies, restarts, Path(tmp) / "restarted")
    for name, res in results.items():
        print(f"\n## {name}: stream {res['stream_s']:.1f} s, {res['records']:,} records stored")
        print("events:", res["events"])
        print("alerts:", [a[1:] for a in res["alerts"]])
        for r in res["restarts"]:
            print("restart:", r)
        if res["stalled"]:
            print("stalled:", res["stalled"])
    got = results["restarted"]["events"]
    ok_events = [(k, r) for k, r, _ in got] == [(k, r) for k, r, _ in truth]
    deltas = [it - t for (_, _, it), (_, _, t) in zip(got, truth, strict=False)]
    print(f"\nevents as the truth (kind, rank, in order): {ok_events}; iteration - truth: "
          f"{deltas}")
    if args.clean:
        print(f"events equal the clean run's: {got == results['clean']['events']}")
    fired = [(s, r) for _, s, r, _ in results["restarted"]["alerts"]]
    print(f"alerts (status, rank) in order: {fired}")
    return 0 if ok_events else 1


if __name__ == "__main__":
    sys.exit(main())
