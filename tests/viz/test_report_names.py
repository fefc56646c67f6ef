"""report.html names workers by global rank and host (issue 28): a result document's optional
``worker_names`` (``OpTable.worker_names()``: ``"dp,stage"`` to ``"rank 3 (node-1)"``) is shown
beside the worker key in the verdict, the hypotheses and the worker heatmap's tooltips; a
document without it renders as before."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stragglers.analysis.runner import analyze_files, load_table
from stragglers.synth import SynthSpec, write_synth
from stragglers.viz.report import analysis_context, render_report


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A dp 2 x pp 2 job whose worker (1,1) computes 1.8 times slower, with a host column
    (two workers per machine: ranks 0-1 on node-0, 2-3 on node-1)."""
    folder = tmp_path_factory.mktemp("names")
    files = write_synth(SynthSpec(dp=2, pp=2, microbatches=4, steps=4,
                                  slow_workers=[(1, 1, 1.8)]), folder / "job")
    table = pq.read_table(files["trace"])
    hosts = pa.array([f"node-{r // 2}" for r in table.column("rank").to_numpy().tolist()])
    trace = folder / "hosts.parquet"
    pq.write_table(table.append_column("host", hosts), trace)
    doc = analyze_files(trace, files["meta"]).to_document()
    names = load_table(trace, files["meta"]).worker_names()
    return {"doc": doc, "names": names}


def test_the_job_names_worker_1_1(job: dict[str, Any]) -> None:
    assert job["doc"]["verdict"]["workers"] == ["1,1"]
    rank = job["names"]["1,1"]
    assert re.fullmatch(r"rank (\d) \(node-(\d)\)", rank)


def test_the_analysis_writes_the_names(job: dict[str, Any]) -> None:
    assert job["doc"]["worker_names"] == job["names"]


def test_without_names_the_page_shows_worker_keys_only(job: dict[str, Any]) -> None:
    """A document without ``worker_names`` (written before schema 1.4) renders as before."""
    doc = {k: v for k, v in job["doc"].items() if k != "worker_names"}
    html = render_report(doc)
    assert "Verdict: worker (1,1)" in html
    assert '<p class="workers">' not in html and "node-" not in html
    assert not re.search(r"(?<!DP )\brank \d", html)
    assert "<title>DP rank 1, stage 1: S_w = " in html


def test_names_are_shown_wherever_a_worker_is_named(job: dict[str, Any]) -> None:
    html = render_report(job["doc"])
    name = job["names"]["1,1"]
    assert "Verdict: worker (1,1)" in html
    assert f'<p class="workers">worker: 1,1 · {name}</p>' in html
    chosen = re.search(r'<tr class="chosen"><td>worker</td>.*?</tr>', html)
    assert chosen is not None and f"<td>1,1 · {name}</td>" in chosen.group(0)
    for key, label in job["names"].items():  # every cell's tooltip
        d, s = key.split(",")
        assert f"<title>DP rank {d}, stage {s}, {label}: S_w = " in html


def test_a_malformed_names_field_is_reported_not_drawn(job: dict[str, Any]) -> None:
    ctx = analysis_context({**job["doc"], "worker_names": {"1,1": 3}}, "r.json")
    assert ctx["heatmap_error"] == ("r.json: field 'worker_names['1,1']' must be a string, "
                                    "got int")


def test_names_are_escaped(job: dict[str, Any], tmp_path: Path) -> None:
    doc = {**job["doc"], "worker_names": {"1,1": "rank 3 (<b>x</b>)"}}
    html = render_report(doc)
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html
