"""``stragglers diff``: the terminal table, --json, --out (diff.json and a self-contained
diff.html, together or not at all) and the error contract."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stragglers.cli import main

JOB = ["--dp", "2", "--pp", "4", "--steps", "8", "--jitter", "0.02"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two healthy runs of one job, one with a slow worker 1,2, and the first analysed into
    a result folder."""
    root = tmp_path_factory.mktemp("diff")
    out = {name: root / name for name in ("h0", "h1", "slow", "res")}
    assert main(["synth", *JOB, "--seed", "0", "--out", str(out["h0"])]) == 0
    assert main(["synth", *JOB, "--seed", "1", "--out", str(out["h1"])]) == 0
    assert main(["synth", *JOB, "--seed", "1", "--slow-worker", "1,2:1.5",
                 "--out", str(out["slow"])]) == 0
    assert main(["analyze", str(out["h0"] / "trace.parquet"), "--meta",
                 str(out["h0"] / "meta.yaml"), "--out", str(out["res"]),
                 "--no-timelines"]) == 0
    return out


def test_the_table_names_the_new_straggler_first(runs, capsys) -> None:
    capsys.readouterr()
    assert main(["diff", str(runs["res"]), str(runs["slow"])]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    conclusion = next(x for x in lines if x.startswith("step time"))
    assert "worker 1,2 (rank 5) is a new straggler" in conclusion
    assert "  1. worker 1,2 (rank 5) is a new straggler" in text
    assert re.search(r"step time \(actual\) +2\.\d{4} s +2\.\d{4} s +\+0\.\d{4} s", text)
    assert "not compared: mean_op_time: A is a result.json" in text
    assert "new: 1,2 (worker); gone: -" in text


def test_two_healthy_runs_are_no_change(runs, capsys) -> None:
    capsys.readouterr()
    assert main(["diff", str(runs["h0"]), str(runs["h1"])]) == 0
    text = capsys.readouterr().out
    assert "\nno change: step time" in text and "nothing changed beyond the noise" in text


def test_json_and_out(runs, tmp_path, capsys) -> None:
    capsys.readouterr()
    out = tmp_path / "d"
    assert main(["diff", str(runs["h0"] / "trace.parquet"), str(runs["slow"] / "trace.parquet"),
                 "--meta", str(runs["h0"] / "meta.yaml"), "--json", "--out", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == "1.0" and doc["kind"] == "stragglers.diff"
    assert doc["changed"] and doc["changes"][0]["key"] == "1,2"
    assert doc["changes"][0]["kind"] == "appears" and doc["changes"][0]["rank"] == 1
    assert doc["a"]["kind"] == "trace" and doc["layout"]["same"]
    assert {r["key"] for r in doc["workers"]} == {f"{d},{s}" for d in range(2) for s in range(4)}
    assert all(r["mean_op_a_s"] is not None for r in doc["optypes"])
    assert json.loads((out / "diff.json").read_text()) == doc
    assert sorted(p.name for p in out.iterdir()) == ["diff.html", "diff.json"]
    html = (out / "diff.html").read_text()
    assert doc["conclusion"].replace("->", "-&gt;") in html
    assert 'id="worker-heatmap-a"' in html and 'id="worker-heatmap-b"' in html
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    assert csp is not None and "default-src 'none'" in csp.group(1)
    assert "unsafe-inline" not in csp.group(1)
    assert not re.search(r"""\b(src|href|action|srcset|poster|data)\s*=\s*["']?\s*(https?:)?//""",
                         html, re.I)
    assert not re.search(r"<(script|link|iframe|img|object|embed)\b", html, re.I)
    assert not re.search(r"\sstyle=", html)  # inline style attributes would be blocked


@pytest.mark.parametrize(("args", "message"), [
    (["{h0}/missing", "{slow}"], "{h0}/missing: not found"),
    (["{h0}/trace.parquet", "{slow}"], "{h0}/trace.parquet: a trace needs its job metadata: "
                                       "give --meta-a (or --meta) META.yaml"),
    (["{res}", "{slow}", "--meta", "{h0}/meta.yaml"], "--meta {h0}/meta.yaml: neither A nor B"),
    (["{res}", "{slow}", "--meta-a", "{h0}/meta.yaml"], "needs no metadata"),
    (["{res}", "{broken}"], "{broken}/result.json: field 'step_time.actual['0']' must be a "
                            "number"),
    (["{res}", "{slow}", "--alpha", "0"], "argument --alpha"),
    (["{res}", "{slow}", "--out", "{h0}/meta.yaml"], "exists and is not a folder"),
])
def test_bad_input_is_exit_2_and_one_line(runs, tmp_path, capsys, args, message) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    doc = json.loads((runs["res"] / "result.json").read_text())
    doc["step_time"]["actual"]["0"] = None
    (broken / "result.json").write_text(json.dumps(doc))
    names = {k: str(v) for k, v in runs.items()} | {"broken": str(broken)}
    capsys.readouterr()
    assert main(["diff", *(a.format(**names) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stragglers diff: error: ")
    assert message.format(**names) in err


def test_a_failed_diff_leaves_out_as_it_was(runs, tmp_path) -> None:
    out = tmp_path / "keep"
    out.mkdir()
    (out / "diff.json").write_text("old")
    assert main(["diff", str(runs["res"]), str(runs["h0"] / "nothing"), "--out", str(out)]) == 2
    assert [p.name for p in out.iterdir()] == ["diff.json"]
    assert (out / "diff.json").read_text() == "old"
