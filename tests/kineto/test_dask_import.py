"""`stragglers import kineto --scheduler` against a separately started `dask scheduler` and
`dask worker` on loopback (a real cluster of processes): the rank files are parsed by the
worker, and the output is the local import's, byte for byte; a user error in a worker's
file ends in one line naming the file; a bad scheduler address ends in one line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stragglers.cli import main
from stragglers.trace.io import JobMeta, write_meta
from tests.kineto.chrome import write_profiler_job
from tests.kineto.test_import import job

pytestmark = pytest.mark.slow  # real processes (`pytest -m "not slow"` skips them)

BIN = Path(sys.executable).parent
THREADS = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `dask scheduler` and a `dask worker --nthreads 2` (without a nanny: one process to
    start, not two; the tasks run in the worker's threads, as they would on a cluster)."""
    if not (BIN / "dask").exists():
        pytest.skip("the `dask` command of dask[distributed] is not installed")
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path_factory.mktemp("dask") / "dask.log", "wb")  # noqa: SIM115
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--no-dashboard"], stdout=log, stderr=log)]
    try:
        procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--no-nanny",
                                       "--nthreads", str(THREADS), "--no-dashboard"],
                                      stdout=log, stderr=log))
        with Client(address, timeout="120s") as client:
            client.wait_for_workers(1, timeout=300)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=60)
        log.close()


def _tasks_run(address: str) -> int:
    """The `kineto` tasks the scheduler has seen (finished or forgotten)."""
    from distributed import Client

    def count(dask_scheduler: object) -> int:
        prefix = dask_scheduler.task_prefixes.get("kineto")  # type: ignore[attr-defined]
        return 0 if prefix is None else int(prefix.state_counts["memory"])

    with Client(address, timeout="60s") as client:
        return int(client.run_on_scheduler(count))


def _import(folder: Path, meta: Path, out: Path, capsys: pytest.CaptureFixture[str],
            *extra: str) -> list[str]:
    assert main(["import", "kineto", str(folder), "--meta", str(meta), "--out", str(out),
                 *extra]) == 0
    return capsys.readouterr().out.splitlines()[:-1]  # the report (not the "wrote" line)


def test_dask_import_is_the_local_import(cluster: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Ranks on two hosts (clocks to align), gzipped and plain files, tensor-parallel ranks
    collapsed, a slow worker: the same trace.parquet and meta.yaml, byte for byte, and the
    same report."""
    trace, _ = job(slow=(1, 1, 1.5))
    meta = JobMeta(dp_size=2, pp_size=2, tp_size=2, world_size=8)
    folder = write_profiler_job(trace, meta, tmp_path / "prof", pg_config=True,
                                gzip_ranks=(2, 5), host_offsets={4: 0.25, 5: 0.25, 6: 0.25,
                                                                 7: 0.25})
    write_meta(meta, tmp_path / "job.yaml")
    before = _tasks_run(cluster)
    local = _import(folder, tmp_path / "job.yaml", tmp_path / "local", capsys, "--jobs", "1")
    dask = _import(folder, tmp_path / "job.yaml", tmp_path / "dask", capsys,
                   "--scheduler", cluster)
    assert _tasks_run(cluster) - before == 8  # every rank file was parsed on the cluster
    assert dask == local
    assert any("clock of host" in line for line in local)  # the alignment was exercised
    for name in ("trace.parquet", "meta.yaml"):
        assert (tmp_path / "dask" / name).read_bytes() == \
            (tmp_path / "local" / name).read_bytes(), name
    assert pq.read_table(tmp_path / "dask" / "trace.parquet").num_rows == len(trace)


def test_dask_partial_import_is_the_local_one(cluster: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof", skip_ranks=(1, 2))
    write_meta(meta, tmp_path / "job.yaml")
    local = _import(folder, tmp_path / "job.yaml", tmp_path / "local", capsys, "--partial")
    dask = _import(folder, tmp_path / "job.yaml", tmp_path / "dask", capsys, "--partial",
                   "--scheduler", cluster)
    assert dask == local
    a = json.loads((tmp_path / "local" / "partial-report.json").read_text())
    b = json.loads((tmp_path / "dask" / "partial-report.json").read_text())
    assert a == b and a["ranks"]


def test_bad_file_on_a_worker_ends_in_one_line(cluster: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    bad = folder / "rank-3.json"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # truncated
    write_meta(meta, tmp_path / "job.yaml")
    out = tmp_path / "out"
    code = main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                 "--out", str(out), "--scheduler", cluster])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{bad.resolve()}: traceEvents[" in err and "truncated" in err
    assert not out.exists()


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:99999", "not-an-address:x"])
def test_bad_scheduler_address_exits_2_with_one_line(address: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    """(An unreachable scheduler is refused by the same ``open_client`` as for ``fleet`` and
    ``serve --scheduler``, tested there: it waits for the connection timeout.)"""
    trace, meta = job()
    folder = write_profiler_job(trace, meta, tmp_path / "prof")
    write_meta(meta, tmp_path / "job.yaml")
    code = main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                 "--out", str(tmp_path / "out"), "--scheduler", address])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("stragglers import kineto: error: --scheduler ") and address in err
    assert not (tmp_path / "out").exists()
