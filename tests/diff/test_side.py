"""The inputs of a diff: an analysis in process and its result.json give the same side; a
broken result.json is one line naming the file and the field; what a user names on the
command line (folders, files, traces) is read as documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from stragglers.diff import compare, read_side
from stragglers.diff.document import to_document
from stragglers.diff.side import load_side, takes_meta
from stragglers.errors import InputError
from stragglers.synth import SynthSpec, synthesize
from tests.diff.helpers import result, side


def test_a_result_document_reads_as_the_analysis_it_came_from() -> None:
    res = result(seed=3, slow_loaders=[(1, 0.5, 1.0)], slow_workers=[(2, 2, 1.3)])
    live = side(seed=3, slow_loaders=[(1, 0.5, 1.0)], slow_workers=[(2, 2, 1.3)])
    doc = json.loads(res.to_json())
    read = read_side(doc, "r.json")
    assert read.kind == "result.json" and read.op_mean is None
    assert np.array_equal(read.steps, live.steps)
    for name in ("actual", "nodelay", "ideal"):
        np.testing.assert_allclose(getattr(read, name), getattr(live, name), rtol=1e-12)
    assert read.slowdown == pytest.approx(live.slowdown, rel=1e-12)
    assert read.slowdown_healthy == pytest.approx(live.slowdown_healthy, rel=1e-12)
    assert read.discrepancy == pytest.approx(live.discrepancy, rel=1e-12)
    b, lb = read.blame, live.blame
    for name in ("dp_rank", "stage", "dp_rank_steps", "stage_steps", "worker"):
        np.testing.assert_allclose(getattr(b, name), getattr(lb, name), rtol=1e-12)
    assert b.optype == pytest.approx(dict(lb.optype), rel=1e-12)
    for k in lb.optype_steps:
        np.testing.assert_allclose(b.optype_steps[k], lb.optype_steps[k], rtol=1e-12)
    assert read.host is not None and live.host is not None
    np.testing.assert_allclose(read.host.dp_rank, live.host.dp_rank, rtol=1e-12)
    assert dict(read.host.worker) == pytest.approx(dict(live.host.worker), rel=1e-12)
    assert read.verdict == live.verdict
    assert dict(read.worker_names) == dict(live.worker_names)
    # and the diff of two documents is the diff of the two analyses (but the mean op time)
    other = json.loads(result(seed=0).to_json())
    d_doc = to_document(compare(read_side(other, "a"), read))
    d_live = to_document(compare(side(seed=0), live))
    def plain(changes: list[dict]) -> list[dict]:  # the live side also tells the mean op
        return [{**c, "text": re.sub(r", mean op [^,]*", "", c["text"])} for c in changes]

    assert d_doc["changes"] == plain(d_live["changes"]) and len(d_doc["changes"]) >= 2
    assert d_doc["figures"] == d_live["figures"]


def _doc() -> dict:
    return json.loads(result(seed=0).to_json())


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d.pop("step_time"), "step_time"),
    (lambda d: d["step_time"]["actual"].pop("3"), "step_time.actual['3']"),
    (lambda d: d["step_time"]["ideal"].update({"2": "fast"}), "step_time.ideal['2']"),
    (lambda d: d["step_time"]["ideal"].update({"2": 0.0}), "step_time.ideal"),
    (lambda d: d.update(schema_version="2.0"), "schema_version"),
    (lambda d: d["job"].update(dp_size=0), "job"),
    (lambda d: d["attribution"]["worker"].pop("1,1"), "attribution.worker['1,1']"),
    (lambda d: d["attribution"]["worker"].update({"9,9": 1.0}), "attribution.worker['9,9']"),
    (lambda d: d["attribution_per_step"]["4"]["stage"].pop("2"),
     "attribution_per_step['4'].stage['2']"),
    (lambda d: d["verdict"].update(workers="1,2"), "verdict.workers"),
    (lambda d: d.update(steps=[]), "steps"),
    (lambda d: d.update(launch_attribution=[]), "launch_attribution"),
])
def test_a_broken_result_document_names_the_field(edit, field: str) -> None:
    doc = _doc()
    edit(doc)
    with pytest.raises(InputError) as err:
        read_side(doc, "run/result.json")
    msg = str(err.value)
    assert msg.startswith("run/result.json") and field in msg and "\n" not in msg


def test_an_older_result_without_s_h_and_launch_attribution_is_read() -> None:
    doc = _doc()
    doc["schema_version"] = "1.0"
    for key in ("slowdown_healthy", "launch_attribution", "worker_names"):
        doc.pop(key)
    s = read_side(doc, "old.json")
    assert s.slowdown_healthy is None and s.host is None and not s.worker_names


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("side") / "job"
    synthesize(SynthSpec(dp=2, pp=2, steps=4, seed=0), out)
    return out


def test_what_a_user_names(job: Path, tmp_path: Path) -> None:
    from_folder = load_side(job)  # trace.parquet and meta.yaml
    assert from_folder.kind == "trace" and from_folder.op_mean is not None
    assert from_folder.source == str(job)
    from_file = load_side(job / "trace.parquet", job / "meta.yaml")
    np.testing.assert_array_equal(from_file.actual, from_folder.actual)
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "result.json").write_text(result(seed=0).to_json())
    assert load_side(tmp_path / "res").kind == "result.json"
    assert load_side(tmp_path / "res" / "result.json").kind == "result.json"
    assert takes_meta(job / "trace.parquet") and not takes_meta(job)
    assert not takes_meta(tmp_path / "res")


@pytest.mark.parametrize(("name", "meta", "message"), [
    ("missing", None, "missing: not found"),
    ("trace.parquet", None, "needs its job metadata: give --meta"),
    ("bad.json", None, "not a result.json: invalid JSON at line 1"),
    ("empty", None, "holds neither result.json nor trace.parquet"),
    ("res", "meta.yaml", "needs no metadata"),
])
def test_inputs_that_cannot_be_read_are_one_line(job: Path, tmp_path: Path, name: str,
                                                 meta: str | None, message: str) -> None:
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "empty").mkdir()
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "result.json").write_text("{}")
    path = job / name if name == "trace.parquet" else tmp_path / name
    with pytest.raises(InputError, match=message):
        load_side(path, None if meta is None else job / meta)
