"""The fleet study through a real Dask LocalCluster against the sequential path; a corrupt
trace in the fleet; an interrupted run that resumes; the CLI's outputs and errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stragglers.cli import main
from stragglers.fleet.discover import discover
from stragglers.fleet.execute import open_client, run_dask, run_sequential
from stragglers.fleet.rowstore import RowStore
from stragglers.fleet.study import gather
from stragglers.fleet.task import STATUS_ANALYSED, STATUS_FAILED


def _rows(jobs: list, keys: list[str], store: RowStore) -> dict[str, dict]:
    return {r.job: r.row.to_dict() for r in gather(jobs, keys, store)}


@pytest.mark.slow
def test_dask_rows_equal_sequential_rows_exactly(small_fleet: Path, tmp_path: Path) -> None:
    jobs = discover([str(small_fleet)])
    assert len(jobs) == 12
    seq_store, dask_store = RowStore(tmp_path / "seq"), RowStore(tmp_path / "dask")
    keys_seq, stats_seq = run_sequential(jobs, seq_store)
    with open_client(workers=2, processes=False) as client:
        keys_dask, stats_dask = run_dask(jobs, dask_store, client, window=3)
    assert keys_seq == keys_dask
    assert stats_seq.computed == stats_dask.computed == 12
    seq, dsk = _rows(jobs, keys_seq, seq_store), _rows(jobs, keys_dask, dask_store)
    assert seq == dsk  # every field, floats bit for bit (JSON keeps a float's repr)
    assert all(r["status"] == STATUS_ANALYSED for r in seq.values())


def test_row_matches_the_analyze_command(small_fleet: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A fleet row holds what `stragglers analyze --no-exact` reports on that job."""
    jobs = discover([str(small_fleet)])
    store = RowStore(tmp_path)
    keys, _ = run_sequential(jobs[:3], store)
    for job, key in zip(jobs[:3], keys, strict=True):
        capsys.readouterr()
        assert main(["analyze", str(job.trace), "--meta", str(job.meta), "--no-exact",
                     "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        row = store.get(key)
        assert row.slowdown == doc["slowdown"]
        assert row.discrepancy == doc["discrepancy"]
        assert row.verdict == doc["verdict"]["cause"]
        assert row.confidence == doc["verdict"]["confidence"]
        assert row.m_w == doc["m_w"]["rem"] and row.m_s == doc["m_s"]["rem"]
        assert list(row.step_slowdown) == list(doc["step_slowdown"].values())


@pytest.mark.slow
def test_corrupt_trace_is_reported_and_skipped(small_fleet: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    fleet = tmp_path / "fleet"
    shutil.copytree(small_fleet, fleet)
    bad = fleet / "job-00003" / "trace.parquet"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # truncated
    (fleet / "job-00007" / "trace.parquet").unlink()  # metadata without a trace
    out = tmp_path / "out"
    assert main(["fleet", str(fleet), "--out", str(out), "--sequential", "--json",
                 "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["jobs"] == 12 and summary["analysed"] == 10 and summary["failed"] == 2
    table = pq.read_table(out / "fleet.parquet").to_pylist()
    by_job = {Path(r["job"]).name: r for r in table}
    for name in ("job-00003", "job-00007"):
        row = by_job[name]
        assert row["status"] == STATUS_FAILED
        assert "\n" not in row["reason"] and row["reason"]
    assert "trace.parquet" in by_job["job-00003"]["reason"]
    assert "no trace" in by_job["job-00007"]["reason"]
    assert "job-00003" in (out / "report.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_interrupted_run_resumes_without_recomputing(small_fleet: Path, tmp_path: Path) -> None:
    """Interrupt a run on a 2-process local cluster after 4 rows; the re-run computes only
    the rest and leaves the stored rows untouched."""
    jobs = discover([str(small_fleet)])
    store = RowStore(tmp_path)

    def stop_after_four(done: int, total: int, failed: int) -> None:
        if done == 4:
            raise KeyboardInterrupt

    with open_client(workers=2, processes=True) as client:
        with pytest.raises(KeyboardInterrupt):
            run_dask(jobs, store, client, progress=stop_after_four, window=2)
        stored = store.done()
        assert len(stored) == 4
        before = {k: (store.root / f"{k}.json").stat().st_mtime_ns for k in stored}
        keys, stats = run_dask(jobs, store, client)
    assert stats.reused == 4 and stats.computed == 8
    assert store.done() == set(keys)
    assert {k: (store.root / f"{k}.json").stat().st_mtime_ns for k in stored} == before
    # and a third run computes nothing
    _, again = run_sequential(jobs, store)
    assert again.computed == 0 and again.reused == 12


@pytest.mark.slow
def test_cli_outputs(small_fleet: Path, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "study"
    assert main(["fleet", str(small_fleet), "--out", str(out), "--workers", "1",
                 "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "jobs straggle" in text and "GPU-hours" in text
    for name in ("fleet.parquet", "report.html", "summary.json", "fig3_waste_cdf.png",
                 "fig4_step_slowdown_cdf.png", "fig5_waste_by_optype.png", "fig6_mw_cdf.png",
                 "fig7_ms_cdf.png", "fig11_fb_correlation_cdf.png", "confusion.png"):
        assert (out / name).stat().st_size > 0, name
    table = pq.read_table(out / "fleet.parquet")
    assert table.num_rows == 12
    for col in ("slowdown", "waste", "discrepancy", "trustworthy", "verdict", "confidence",
                "m_w", "m_s", "fb_correlation", "workers", "steps", "gpu_hours",
                "share_forward_compute", "share_forward_pp_comm", "step_slowdown"):
        assert col in table.column_names, col


@pytest.mark.parametrize("argv, needle", [
    (["fleet", "/nonexistent/fleet", "--out", "{tmp}/o"], "no such folder"),
    (["fleet", "{tmp}/empty", "--out", "{tmp}/o"], "no job folder"),
    (["fleet", "{tmp}/nomatch*", "--out", "{tmp}/o"], "matches no folder"),
])
def test_cli_bad_inputs_exit_2_with_one_line(argv: list[str], needle: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and err.startswith("stragglers fleet: error:")


@pytest.mark.parametrize("address", ["foo:bar", "tcp://", "bogus://x:1", "tcp://h:99999"])
def test_bad_scheduler_address_exits_2(address: str, small_fleet: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", str(small_fleet), "--out", str(tmp_path / "o"), "--scheduler",
                 address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--scheduler" in err


def test_smon_data_folder_sessions_only(small_fleet: Path, tmp_path: Path) -> None:
    """An SMon data folder: the accepted sessions are jobs, an upload being received is not."""
    data = tmp_path / "smon"
    for i, sid in enumerate(("0" * 31 + "1", "0" * 31 + "2")):
        shutil.copytree(small_fleet / f"job-0000{i}", data / "sessions" / sid)
        (data / "sessions" / sid / "out-1").mkdir()
    partial = data / "uploads" / ("f" * 32)
    partial.mkdir(parents=True)
    shutil.copy(small_fleet / "job-00003" / "meta.yaml", partial / "meta.yaml")
    (data / "smon.sqlite3").write_bytes(b"")
    jobs = discover([str(data)])
    assert [Path(j.name).name for j in jobs] == ["0" * 31 + "1", "0" * 31 + "2"]
    assert all(j.trace is not None for j in jobs)
