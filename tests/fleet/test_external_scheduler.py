"""`stragglers fleet --scheduler` against a separately started `dask scheduler` and
`dask worker` processes on loopback (a real multi-process cluster): the same rows as the
sequential path."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stragglers.cli import main

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_external_cluster_gives_the_sequential_rows(small_fleet: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "dask.log", "wb")  # noqa: SIM115
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--no-dashboard"], stdout=log, stderr=log)]
    try:
        procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--nworkers",
                                       "2", "--nthreads", "1", "--no-dashboard"],
                                      stdout=log, stderr=log))
        assert main(["fleet", str(small_fleet), "--out", str(tmp_path / "ext"),
                     "--scheduler", address, "--json", "--no-progress"]) == 0
        ext = json.loads(capsys.readouterr().out)
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=60)
        log.close()
    assert main(["fleet", str(small_fleet), "--out", str(tmp_path / "seq"), "--sequential",
                 "--json", "--no-progress"]) == 0
    seq = json.loads(capsys.readouterr().out)
    assert ext == seq and ext["analysed"] == 12
    a = pq.read_table(tmp_path / "ext" / "fleet.parquet").drop(["job"]).to_pylist()
    b = pq.read_table(tmp_path / "seq" / "fleet.parquet").drop(["job"]).to_pylist()
    assert json.dumps(a, default=str) == json.dumps(b, default=str)
