"""The error contract at the top of every command (stragglers.cli.main)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stragglers.cli import main


def test_bad_option_is_one_line_exit_2(capsys):
    assert main(["synth", "--dp", "two", "--out", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "stragglers synth: error: argument --dp: expected an integer, got 'two' "
        "(see stragglers synth --help)"]
    assert main(["no-such-command"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_subcommand_named_in_errors(capsys, tmp_path):
    assert main(["probe", "merge", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("stragglers probe merge: error: ")


@pytest.mark.slow
def test_closed_stdout_pipe_ends_quietly(tmp_path):
    """`stragglers analyze ... --json | true`: the reader is gone before anything is printed
    (``true`` exits at once; the analysis takes a second): exit 141 (as SIGPIPE), nothing on
    stderr, the outputs written."""
    exe = str(Path(sys.executable).with_name("stragglers"))
    subprocess.run([exe, "synth", "--dp", "2", "--pp", "2", "--steps", "2", "--out",
                    str(tmp_path / "job")], check=True, capture_output=True)
    cmd = (f"'{exe}' analyze '{tmp_path}/job/trace.parquet' --meta '{tmp_path}/job/meta.yaml' "
           f"--out '{tmp_path}/out' --no-timelines --json | true; "
           "echo ${PIPESTATUS[0]}")
    res = subprocess.run(cmd, shell=True, executable="/bin/bash", capture_output=True,
                         text=True)
    assert res.stdout.strip() == "141", res
    assert res.stderr == ""
    assert (tmp_path / "out" / "result.json").is_file()


def test_timeline_choices_are_the_analysis_timelines():
    from stragglers.analysis.timelines import TIMELINES
    from stragglers.cli.whatif_cmd import TIMELINE_CHOICES

    assert TIMELINE_CHOICES == TIMELINES


def test_watch_does_not_load_the_analysis_or_matplotlib():
    """Building the parser must not import the what-if analysis (pandas, matplotlib): the
    commands that do not analyse start in a fraction of the time."""
    import subprocess
    import sys

    code = ("import sys; from stragglers.cli import build_parser; build_parser(); "
            "print(sorted(m for m in ('matplotlib', 'pandas', 'stragglers.analysis.runner',"
            " 'stragglers.viz') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
