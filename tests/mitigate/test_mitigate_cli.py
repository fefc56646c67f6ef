"""`stragglers mitigate ...` end to end, and its errors."""

from __future__ import annotations

import json

import pytest

from stragglers.cli import main


def test_microbatch_json_and_text(tmp_path, capsys) -> None:
    assert main(["mitigate", "microbatch", "--times", "1,1,1,2", "--microbatches", "16",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["assignment"] == [5, 5, 4, 2] and out["makespan"] == 5.0
    assert out["solve_s"] >= 0
    times = tmp_path / "t.txt"
    times.write_text("1 1\n1,\n2\n")
    assert main(["mitigate", "microbatch", "--times", f"@{times}", "--microbatches", "16"]) == 0
    text = capsys.readouterr().out
    assert "makespan 5 s (even split: 8 s or more)" in text and "5,5,4,2" in text


@pytest.mark.parametrize(("argv", "needle"), [
    (["--times", "1,nan", "--microbatches", "4"], "--times: time 2 'nan' must be a finite"),
    (["--times", "1,0", "--microbatches", "4"], "--times: time 2 '0' must be a finite"),
    (["--times", "1,-2", "--microbatches", "4"], "time 2 '-2' must be"),
    (["--times", "1,a", "--microbatches", "4"], "time 2 'a' is not a number"),
    (["--times", "1,2,3", "--microbatches", "2"], "cannot give each of the 3 DP groups"),
    (["--times", "", "--microbatches", "2"], "no micro-batch times"),
    (["--times", "1", "--microbatches", "x"], "argument --microbatches"),
    (["--times", "@/nonexistent/t", "--microbatches", "2"], "times file not found"),
])
def test_microbatch_errors(argv, needle, capsys) -> None:
    assert main(["mitigate", "microbatch", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stragglers mitigate microbatch: error:")
    assert needle in err


def test_microbatch_file_errors(tmp_path, capsys, monkeypatch) -> None:
    bad = tmp_path / "t.txt"
    bad.write_text("1,2\n3 x\n")
    assert main(["mitigate", "microbatch", "--times", f"@{bad}", "--microbatches", "9"]) == 2
    assert f"{bad}: line 2: time 4 'x' is not a number" in capsys.readouterr().err
    bad.write_bytes(b"1,\xff\n")
    assert main(["mitigate", "microbatch", "--times", f"@{bad}", "--microbatches", "9"]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    monkeypatch.setenv("STRAGGLERS_MAX_MITIGATE_GROUPS", "3")
    assert main(["mitigate", "microbatch", "--times", "1,1,1,1", "--microbatches", "9"]) == 2
    assert "4 DP groups of a micro-batch assignment" in capsys.readouterr().err


def test_predict_cli(tmp_path, capsys) -> None:
    out = tmp_path / "job"
    assert main(["synth", "--dp", "4", "--pp", "2", "--microbatches", "8", "--steps", "2",
                 "--slow-worker", "1,1:2", "--out", str(out)]) == 0
    capsys.readouterr()
    trace, meta = str(out / "trace.parquet"), str(out / "meta.yaml")
    assert main(["mitigate", "predict", trace, "--meta", meta, "--json"]) == 0
    pred = json.loads(capsys.readouterr().out)
    assert pred["action"] == "microbatch" and pred["after_s"] < pred["before_s"]
    assert pred["assignment"][1] < 8 and sum(pred["assignment"]) == 32
    assert main(["mitigate", "predict", trace, "--meta", meta, "--slow-ranks", "5"]) == 0
    assert "consolidation: mean step time" in capsys.readouterr().out
    assert main(["mitigate", "predict", trace, "--meta", meta, "--slow-ranks", "99"]) == 2
    assert "rank 99 is outside the job's 8 ranks" in capsys.readouterr().err
