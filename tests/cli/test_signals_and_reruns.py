"""Interrupted and repeated writes (issue 31, point 5): a signal that ends a command while it
writes leaves no staging folder and the output folder as it was; a staging folder left by
``kill -9`` is removed by the next run; a rerun into the same ``--out`` leaves only the new
run's files (never the user's, nor another command's)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stragglers.atomic import MANIFEST, StagedDir, command, write_text
from stragglers.cli import main

#: analyze, with the timeline writer stopping after its first file: "ready" on stdout, then
#: asleep inside the staging phase until the test sends its signal.
#: SIGHUP back to its default first, as in a terminal: a test runner's worker (pytest-xdist)
#: may ignore it, an ignored signal is inherited, and analyze leaves ignored signals ignored.
_PAUSED = """
import signal, sys, time
signal.signal(signal.SIGHUP, signal.SIG_DFL)
import stragglers.analysis.outputs as outputs
real = outputs.write_timeline
def paused(*args, **kwargs):
    real(*args, **kwargs)
    print("ready", flush=True)
    time.sleep(300)
outputs.write_timeline = paused
from stragglers.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("job")
    assert main(["synth", "--dp", "2", "--pp", "2", "--steps", "3", "--slow-worker", "1,1:1.5",
                 "--out", str(root)]) == 0
    return root


def _analyze_argv(job: Path, out: Path, *opts: str) -> list[str]:
    return ["analyze", str(job / "trace.parquet"), "--meta", str(job / "meta.yaml"),
            "--out", str(out), *opts]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _paused_run(argv: list[str]) -> subprocess.Popen[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.Popen([sys.executable, "-c", _PAUSED, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": src})
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 240)
    line = proc.stdout.readline() if ready else ""
    if line.strip() != "ready":
        proc.kill()
        pytest.fail(f"the paused analyze did not start: {line!r} {proc.stderr.read()}")
    return proc


def _staging(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".stragglers-staging-")]


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGUSR1"])
def test_a_signal_during_analyze_leaves_the_folder_as_it_was(job: Path, tmp_path: Path,
                                                             signame: str) -> None:
    out = tmp_path / "out"
    assert main(_analyze_argv(job, out)) == 0
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)
    proc = _paused_run(_analyze_argv(job, out))
    assert _staging(out)  # it is writing
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=60)
    signum = int(getattr(signal, signame))
    assert proc.returncode == 128 + signum, err
    assert err.strip() == f"stragglers analyze: terminated by {signame} (outputs left as " \
                          "they were)"
    assert _staging(out) == []
    assert _snapshot(out) == before


@pytest.mark.slow
def test_a_signal_during_a_first_analyze_leaves_nothing(job: Path, tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    proc = _paused_run(_analyze_argv(job, out))
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_the_staging_folder_of_a_killed_run_is_removed_by_the_next(job: Path,
                                                                   tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _paused_run(_analyze_argv(job, out))
    proc.kill()  # SIGKILL: nothing can clean up
    proc.communicate(timeout=60)
    left = _staging(out)
    assert len(left) == 1 and f"-{proc.pid}-" in left[0]
    assert main(_analyze_argv(job, out, "--no-timelines")) == 0
    assert _staging(out) == []
    assert (out / "result.json").exists()


@pytest.mark.slow
def test_a_rerun_leaves_only_its_own_files(job: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(_analyze_argv(job, out)) == 0
    first = {p.name for p in out.iterdir()}
    assert {"timeline-original.json", "timeline-ideal.json", "result.json"} <= first
    (out / "notes.txt").write_text("mine")  # the user's file
    with (out / "timeline-ideal.json").open("a") as fh:  # changed by the user since
        fh.write(" ")
    # another command's file in the folder
    assert main(["timeline", str(job / "trace.parquet"), "--meta", str(job / "meta.yaml"),
                 "--out", str(out), "--which", "no-delay"]) == 0
    assert (out / "timeline-no-delay.json").exists()
    assert main(_analyze_argv(job, out, "--no-timelines")) == 0
    now = {p.name for p in out.iterdir()}
    assert "timeline-original.json" not in now  # the earlier run's, not rewritten: removed
    assert {"timeline-ideal.json", "notes.txt", "timeline-no-delay.json"} <= now  # kept
    doc = json.loads((out / "result.json").read_text())
    assert not any(key.startswith("timeline") and isinstance(v, str)
                   for key, v in doc["outputs"].items())
    assert now == first - {"timeline-original.json"} | {"notes.txt", "timeline-no-delay.json"}
    record = json.loads((out / MANIFEST).read_text())["owners"]
    assert set(record) == {"stragglers analyze", "stragglers timeline"}
    assert "timeline-ideal.json" not in record["stragglers analyze"]


# -- the pieces, in-process -----------------------------------------------------------------
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_staging_folders_are_removed_live_ones_kept(tmp_path: Path) -> None:
    host = os.uname().nodename
    host = "".join(c if c.isalnum() or c in "_." else "_" for c in host)[:64]
    dead = tmp_path / f".stragglers-staging-{host}-{_dead_pid()}-abc123"
    live = tmp_path / f".stragglers-staging-{host}-{os.getpid()}-def456"
    other_host = tmp_path / ".stragglers-staging-elsewhere-1-ghi789"
    legacy_old = tmp_path / ".stragglers-staging-k2j3h4g5"
    legacy_new = tmp_path / ".stragglers-staging-a1b2c3d4"
    for folder in (dead, live, other_host, legacy_old, legacy_new):
        folder.mkdir()
        (folder / "result.json").write_text("{}")
    hours_ago = time.time() - 7200
    os.utime(legacy_old, (hours_ago, hours_ago))
    with StagedDir(tmp_path) as stage:
        write_text(stage.path("a.txt"), "a")
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".stragglers-st"))
    assert left == sorted([live.name, other_host.name, legacy_new.name])


def test_the_record_of_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with StagedDir(out) as stage:  # no owner (a library call): nothing recorded
        write_text(stage.path("lib.txt"), "x")
    assert not (out / MANIFEST).exists()
    with command("stragglers one"), StagedDir(out) as stage:
        for name in ("a", "b", "c"):
            write_text(stage.path(name), name)
    with StagedDir(out, owner="stragglers two") as stage:
        write_text(stage.path("c"), "c2")  # now the other command's
        write_text(stage.path("d"), "d")
    (out / "b").write_text("changed")  # the user's now
    (out / "user").write_text("u")
    with command("stragglers one"), StagedDir(out) as stage:
        write_text(stage.path("e"), "e")
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "b", "c", "d", "e", "lib.txt",
                                                     "user"]
    assert (out / "c").read_text() == "c2"
    owners = json.loads((out / MANIFEST).read_text())["owners"]
    assert {k: sorted(v) for k, v in owners.items()} == {"stragglers one": ["e"],
                                                         "stragglers two": ["c", "d"]}
    (out / MANIFEST).write_text("{damaged")  # a damaged record: nothing known, nothing lost
    with command("stragglers two"), StagedDir(out) as stage:
        write_text(stage.path("f"), "f")
    assert {"c", "d", "e", "f"} <= {p.name for p in out.iterdir()}
    with pytest.raises(ValueError, match="not a plain file name"), StagedDir(out) as stage:
        stage.path(MANIFEST)
