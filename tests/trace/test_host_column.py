"""The optional ``host`` column (issue 28): one host name per worker, read into the op table
as a per-worker label (``OpTable.hosts``, ``worker_name``); traces without it name workers by
their global rank alone; a host that differs within a worker, an empty or non-string host
is one line naming the file, the field and the row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.synth import SynthSpec, write_synth
from stragglers.trace import build_table, read_meta, read_trace, write_trace


@pytest.fixture()
def job(tmp_path: Path) -> dict[str, Path]:
    return write_synth(SynthSpec(dp=2, pp=2, microbatches=2, steps=2), tmp_path / "job")


def _host_of_rank(rank: np.ndarray) -> list[str]:
    """Two workers per machine: ranks 0-1 on node-0, 2-3 on node-1."""
    return [f"node-{r // 2}" for r in rank.tolist()]


def _with_hosts(job: dict[str, Path], out: Path, hosts: pa.Array | None = None) -> Path:
    table = pq.read_table(job["trace"])
    if hosts is None:
        hosts = pa.array(_host_of_rank(table.column("rank").to_numpy()))
    pq.write_table(table.append_column("host", hosts), out)
    return out


def test_without_host_workers_are_named_by_global_rank(job: dict[str, Path]) -> None:
    table = build_table(read_trace(job["trace"]), read_meta(job["meta"]))
    assert table.hosts is None
    for d in range(2):
        for s in range(2):
            assert table.worker_name(d, s) == f"rank {table.ranks[d, s]}"


@pytest.mark.parametrize("encoding", ["plain", "dictionary"])
def test_host_column_gives_each_worker_its_host(job: dict[str, Path], tmp_path: Path,
                                               encoding: str) -> None:
    ranks = pq.read_table(job["trace"]).column("rank").to_numpy()
    hosts = pa.array(_host_of_rank(ranks))
    if encoding == "dictionary":
        hosts = hosts.dictionary_encode()
    path = _with_hosts(job, tmp_path / "hosts.parquet", hosts)
    table = build_table(read_trace(path), read_meta(job["meta"]))
    assert table.hosts is not None and table.hosts.shape == (2, 2)
    for d in range(2):
        for s in range(2):
            rank = int(table.ranks[d, s])
            assert table.hosts[d, s] == f"node-{rank // 2}"
            assert table.worker_name(d, s) == f"rank {rank} (node-{rank // 2})"
    names = table.worker_names()
    assert set(names) == {"0,0", "1,0", "0,1", "1,1"}
    assert names["1,1"] == table.worker_name(1, 1)


def test_host_survives_selection_and_both_file_formats(job: dict[str, Path],
                                                      tmp_path: Path) -> None:
    trace = read_trace(_with_hosts(job, tmp_path / "hosts.parquet"))
    for name in ("again.parquet", "again.jsonl"):
        back = read_trace(write_trace(trace.take(trace.step == trace.step.max()),
                                      tmp_path / name))
        assert back.host is not None
        got = [back.host_names[c] for c in back.host]
        assert got == _host_of_rank(back.rank)


def test_a_jsonl_trace_without_host_has_none(job: dict[str, Path], tmp_path: Path) -> None:
    back = read_trace(write_trace(read_trace(job["trace"]), tmp_path / "plain.jsonl"))
    assert back.host is None


def _analyze(trace: Path, meta: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
             ) -> tuple[int, str]:
    code = main(["analyze", str(trace), "--meta", str(meta), "--out", str(tmp_path / "out"),
                 "--no-timelines"])
    return code, capsys.readouterr().err.strip()


def test_two_hosts_in_one_worker_is_one_line_naming_field_and_row(
        job: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = pq.read_table(job["trace"])
    hosts = _host_of_rank(table.column("rank").to_numpy())
    # the last row of the file moves to another machine
    hosts[-1] = "elsewhere"
    path = _with_hosts(job, tmp_path / "bad.parquet", pa.array(hosts))
    with pytest.raises(InputError, match=r"field 'host' differs within one worker"):
        build_table(read_trace(path), read_meta(job["meta"]))
    code, err = _analyze(path, job["meta"], tmp_path, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and f"row {len(hosts) - 1}" in err and "'elsewhere'" in err


@pytest.mark.parametrize(("hosts", "needle"), [
    (lambda n: pa.array([None] + ["node-0"] * (n - 1), pa.string()),
     "column 'host' is empty at row 0"),
    (lambda n: pa.array(np.arange(n)), "column 'host' must hold strings"),
])
def test_bad_host_values_are_one_line(job: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str], hosts,  # type: ignore[no-untyped-def]
                                      needle: str) -> None:
    n = pq.read_metadata(job["trace"]).num_rows
    path = _with_hosts(job, tmp_path / "bad.parquet", hosts(n))
    code, err = _analyze(path, job["meta"], tmp_path, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and needle in err, err


def test_a_jsonl_host_of_the_wrong_type_names_the_line(job: dict[str, Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    path = write_trace(read_trace(job["trace"]), tmp_path / "t.jsonl")
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:-1] + ', "host": 7}'
    path.write_text("\n".join(lines) + "\n")
    code, err = _analyze(path, job["meta"], tmp_path, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{path}:3" in err and "field 'host' must be a string" in err, err
