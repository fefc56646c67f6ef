"""Outputs are atomic (issue 8, point 4): a write that fails half-way — here a real one, the
kernel refusing to grow a file past RLIMIT_FSIZE, as a full disk would — leaves the output
folder exactly as it was, and the one-line error names the output."""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stragglers.atomic import StagedDir, write_text
from stragglers.cli import main

CLI = [sys.executable, "-c", "import sys; from stragglers.cli import main; sys.exit(main())"]


def _small_files() -> None:
    # writes past 30 kB fail with EFBIG instead of killing the process with SIGXFSZ
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (30_000, 30_000))


def _snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jobs")
    for name, slow in (("a", "1,1:1.5"), ("b", "0,1:2")):
        assert main(["synth", "--dp", "2", "--pp", "2", "--steps", "6", "--slow-worker", slow,
                     "--out", str(root / name)]) == 0
    return root


def _analyze(job: Path, out: Path, limited: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "analyze", str(job / "trace.parquet"), "--meta",
                           str(job / "meta.yaml"), "--out", str(out)], capture_output=True,
                          text=True, preexec_fn=_small_files if limited else None, timeout=300)


@pytest.mark.slow
def test_failed_analyze_leaves_the_earlier_result_whole(jobs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _analyze(jobs / "a", out, limited=False).returncode == 0
    before = _snapshot(out)
    assert {"result.json", "heatmap.png", "timeline-original.json", "report.html"} <= set(before)
    assert max(size for size, _, _ in before.values()) > 30_000  # the limit will bite
    done = _analyze(jobs / "b", out, limited=True)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("stragglers analyze: error: "), done.stderr
    assert str(out) in lines[0] and "File too large" in lines[0]
    assert _snapshot(out) == before  # same files, same bytes, not even touched


@pytest.mark.slow
def test_failed_analyze_into_a_new_folder_leaves_nothing(jobs: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    done = _analyze(jobs / "a", out, limited=True)
    assert done.returncode == 2, done.stderr
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_failed_timeline_leaves_no_truncated_file(jobs: Path, tmp_path: Path) -> None:
    out = tmp_path / "tl"
    out.mkdir()
    done = subprocess.run([*CLI, "timeline", str(jobs / "a" / "trace.parquet"), "--meta",
                           str(jobs / "a" / "meta.yaml"), "--out", str(out)],
                          capture_output=True, text=True, preexec_fn=_small_files, timeout=300)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert list(out.iterdir()) == []


def test_outputs_get_the_mode_of_a_plain_open(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = write_text(tmp_path / "x.json", "{}\n")
        with StagedDir(tmp_path / "o") as stage:
            write_text(stage.path("result.json"), "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "o" / "result.json").stat().st_mode) == 0o640


@pytest.mark.slow
def test_analyze_without_out_writes_nothing(jobs: Path, tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "analyze", str(jobs / "a" / "trace.parquet"), "--meta",
                           str(jobs / "a" / "meta.yaml")], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "verdict: worker (1,1)" in done.stdout
    assert list(tmp_path.iterdir()) == []
