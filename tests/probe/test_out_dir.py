"""Output folders of `probe example` / `probe fidelity`: never a user's folder without
--force, never the current folder unasked."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.probe.outdir import OUT_MARKER, claim_out_dir
from stragglers.testbed.job import RUN_OUTPUTS


def _claim(out: Path, force: bool) -> Path:
    """The example job's claim of its --out-dir."""
    return claim_out_dir(out, force, "--out-dir", RUN_OUTPUTS)


def test_claim_creates_and_marks(tmp_path: Path) -> None:
    out = _claim(tmp_path / "a" / "b", force=False)
    assert out.is_dir() and (out / OUT_MARKER).is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    _claim(empty, force=False)
    assert (empty / OUT_MARKER).is_file()


def test_a_user_folder_is_refused_and_left_alone(tmp_path: Path) -> None:
    user = tmp_path / "mine"
    (user / "probe").mkdir(parents=True)
    (user / "probe" / "notes.txt").write_text("keep")
    (user / "summary.json").write_text("{}")
    with pytest.raises(InputError, match="not empty and was not created by stragglers"):
        _claim(user, force=False)
    assert (user / "probe" / "notes.txt").read_text() == "keep"
    assert not (user / OUT_MARKER).exists()
    # --force: the run's own names are replaced, everything else stays
    (user / "other.txt").write_text("stay")
    _claim(user, force=True)
    assert not (user / "probe").exists() and not (user / "summary.json").exists()
    assert (user / "other.txt").read_text() == "stay" and (user / OUT_MARKER).is_file()


def test_a_marked_folder_is_reused(tmp_path: Path) -> None:
    out = _claim(tmp_path / "run", force=False)
    (out / "probe").mkdir()
    (out / "probe" / "rank-00000.jsonl").write_text("old")
    (out / "trace.parquet").write_text("old")
    _claim(out, force=False)
    assert sorted(p.name for p in out.iterdir()) == [OUT_MARKER]


def test_example_cli_refuses_before_spawning(tmp_path: Path, capsys) -> None:
    user = tmp_path / "mine"
    user.mkdir()
    (user / "thesis.tex").write_text("x")
    assert main(["probe", "example", "--out-dir", str(user)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass --force" in err
    assert main(["probe", "example"]) == 2  # --out-dir is required
    assert "--out-dir" in capsys.readouterr().err
    assert main(["probe", "example", "--out-dir", str(tmp_path / "x"),
                 "--slow-factor", "nan"]) == 2
    assert "argument --slow-factor: expected a finite number" in capsys.readouterr().err


@pytest.mark.slow
def test_validate_without_out_dir_writes_into_a_reported_temporary_folder(
        tmp_path: Path, capsys, monkeypatch) -> None:
    pytest.importorskip("torch")
    cwd = tmp_path / "repo"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["probe", "validate", "--cases", "nope"]) == 2  # refused before any folder
    assert "unknown case 'nope'" in capsys.readouterr().err
    code = main(["probe", "validate", "--cases", "baseline", "--steps", "4",
                 "--warmup-steps", "2", "--hidden", "32", "--layers-per-stage", "1",
                 "--seq-len", "16", "--microbatches", "2", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert list(cwd.iterdir()) == []  # the current folder is untouched
    match = re.search(r"writing the runs under (\S+)", captured.err)
    assert match, captured.err
    runs = Path(match.group(1))
    try:
        assert (runs / "fidelity.json").is_file() and (runs / OUT_MARKER).is_file()
        rows = json.loads(captured.out)
        assert rows[0]["case"] == "baseline" and rows[0]["run_dir"].startswith(str(runs))
    finally:
        shutil.rmtree(runs)


def test_probe_fidelity_is_the_name_and_validate_a_deprecated_alias(capsys) -> None:
    assert main(["probe", "fidelity", "--cases", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown case 'nope'" in err and "deprecated" not in err
    assert main(["probe", "validate", "--cases", "nope"]) == 2
    err = capsys.readouterr().err
    assert "`stragglers probe validate` is deprecated" in err and "probe fidelity" in err
    assert "unknown case 'nope'" in err  # the alias runs the same command
