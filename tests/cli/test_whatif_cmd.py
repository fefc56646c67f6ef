"""The console commands: analyze, timeline, heatmap, synth, demo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from stragglers.cli import main
from stragglers.viz.timeline import read_chrome_trace


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("job")
    assert main(["synth", "--dp", "2", "--pp", "4", "--microbatches", "4", "--steps", "4",
                 "--slow-worker", "1,2:1.6", "--jitter", "0.01", "--out", str(out)]) == 0
    return out


def test_analyze_writes_everything(job, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["analyze", str(job / "trace.parquet"), "--meta", str(job / "meta.yaml"),
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verdict: worker (1,2)" in text and "slowdown S =" in text
    r = json.loads((out / "result.json").read_text())
    for key in ("schema_version", "job", "slowdown", "discrepancy", "waste", "step_time",
                "step_slowdown", "attribution", "attribution_per_step", "m_w", "m_s",
                "verdict", "trustworthy", "counts"):
        assert key in r
    assert set(r["step_time"]) == {"actual", "no_delay", "ideal"}
    assert set(r["attribution"]) >= {"dp_rank", "stage", "optype", "worker"}
    for name in ("heatmap.png", "heatmap-steps-dp-rank.png", "timeline-original.json",
                 "timeline-ideal.json"):
        assert (out / name).stat().st_size > 1000
    tl = read_chrome_trace(out / "timeline-original.json")
    assert len(tl) == r["counts"]["ops"]
    assert r["outputs"]["timeline_ideal"].endswith("timeline-ideal.json")


def test_analyze_steps_and_json(job, tmp_path, capsys):
    assert main(["analyze", str(job / "trace.parquet"), "--meta", str(job / "meta.yaml"),
                 "--out", str(tmp_path), "--steps", "1-2", "--json", "--no-timelines",
                 "--no-exact"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["steps"] == [1, 2]
    assert r["attribution"]["worker_method"] == "min-approximation"
    assert main(["analyze", str(job / "trace.parquet"), "--meta", str(job / "meta.yaml"),
                 "--out", str(tmp_path), "--steps", "7-9"]) == 2
    assert "no step in 7-9" in capsys.readouterr().err


@pytest.mark.slow
def test_timeline_and_heatmap_commands(job, tmp_path, capsys):
    assert main(["timeline", str(job / "trace.parquet"), "--meta", str(job / "meta.yaml"),
                 "--out", str(tmp_path), "--steps", "0-0", "--which", "no-delay"]) == 0
    tl = read_chrome_trace(tmp_path / "timeline-no-delay.json")
    assert set(tl["step"]) == {0}
    assert main(["analyze", str(job / "trace.parquet"), "--meta", str(job / "meta.yaml"),
                 "--out", str(tmp_path / "a"), "--no-timelines"]) == 0
    (tmp_path / "a" / "heatmap.png").unlink()
    assert main(["heatmap", str(tmp_path / "a" / "result.json"), "--out",
                 str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "heatmap.png").exists()
    assert main(["heatmap", str(job / "meta.yaml"), "--out", str(tmp_path)]) == 2


def test_synth_rejects_bad_specs(tmp_path, capsys):
    assert main(["synth", "--slow-worker", "9,9:2", "--out", str(tmp_path)]) == 2
    assert main(["synth", "--vpp", "2", "--pp", "4", "--microbatches", "6",
                 "--out", str(tmp_path)]) == 2
    assert main(["synth", "--gc", "half", "--out", str(tmp_path)]) == 2


@pytest.mark.slow
def test_console_script_help_and_demo(tmp_path):
    exe = Path(sys.executable).with_name("stragglers")
    for cmd in (["--help"], ["analyze", "--help"], ["synth", "--help"]):
        res = subprocess.run([str(exe), *cmd], capture_output=True, text=True, check=True)
        assert "usage: stragglers" in res.stdout
    res = subprocess.run([str(exe), "demo", "--out", str(tmp_path / "demo")],
                         capture_output=True, text=True, check=True)
    assert "verdict: worker (1,1)" in res.stdout
    # the heavy last stage applies but removes little: the slow worker masks it
    assert "last_stage 3% / 26%" in res.stdout
    assert (tmp_path / "demo" / "result.json").exists()
