"""The Grafana dashboard shipped with SMon (``service/grafana/smon.json``, also
``GET /grafana.json``). No Grafana can be installed here (Debian has none), so its structure
is checked as Grafana's dashboard model (schemaVersion 39) requires, every metric its
queries name is checked against a real server's ``/metrics``, and every query is run by a
real Prometheus (Debian's ``prometheus``) scraping a real `stragglers serve` process — which
also shows that the ``training_job`` label arrives as it is (issue 24 defect 7: a ``job``
label became ``exported_job``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stragglers.service.dashboard import GRAFANA
from tests.service.helpers import Job, Server, in_ci, iteration_records, poll
from tests.service.prometheus import Prometheus, prometheus_bin

METRIC = re.compile(r"\bstragglers_[a-z0-9_]+")
PANEL_TYPES = {"row", "timeseries", "stat", "table", "bargauge", "gauge", "text"}
JOB_LINK = "${smon_url}/jobs/${__field.labels.training_job}"


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(GRAFANA.read_text(encoding="utf-8"))
    return doc


def _panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in doc["panels"] if p["type"] != "row"]


def _exprs(doc: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in _panels(doc) for t in p["targets"]]
    out += [a["expr"] for a in doc["annotations"]["list"] if "expr" in a]
    out += [v["query"]["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return out


def _promql(expr: str) -> str:
    """A dashboard expression as Grafana sends it (the variables filled in)."""
    return expr.replace("$training_job", ".*").replace("$__rate_interval", "1m")


def test_grafana_dashboard_structure():
    doc = _doc()
    assert doc["schemaVersion"] >= 36 and doc["uid"] and doc["title"]
    assert isinstance(doc["version"], int) and doc["time"]["from"].startswith("now-")
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["training_job"]["type"] == "query"
    assert variables["smon_url"]["type"] == "textbox"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in doc["panels"]:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy") and 0 < g["w"] and g["x"] + g["w"] <= 24
    per_job = 0
    for p in _panels(doc):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"] and p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and METRIC.search(t["expr"])
            for var in re.findall(r"\$\{?(\w+)", t["expr"]):
                assert var in variables or var.startswith("__"), var
        if any("training_job" in t["expr"] for t in p["targets"]):
            per_job += 1  # a job's line leads to its SMon page (the heatmap drill-down)
            assert [lk["url"] for lk in p["fieldConfig"]["defaults"]["links"]] == [JOB_LINK]
    assert per_job >= 4
    names = {t["expr"] for p in _panels(doc) for t in p["targets"]}
    assert any(n.startswith("stragglers_job_slowdown_ratio{") for n in names)
    assert any(n.startswith("stragglers_job_waste_ratio{") for n in names)
    (onsets,) = [a for a in doc["annotations"]["list"] if a.get("name") == "Onsets"]
    assert onsets["datasource"]["uid"] == "${datasource}" and onsets["enable"]
    assert "stragglers_job_onsets_total" in onsets["expr"]
    assert onsets["titleFormat"] == "onset: {{training_job}}"


@pytest.fixture
def served(server_factory, slow_job: Job) -> Iterator[Server]:
    """A server with an analysed session job and a record stream."""
    server: Server = server_factory()
    r = server.upload(slow_job.trace, slow_job.meta, job="graf-a", labels='{"cluster": "a"}')
    assert server.wait(r.json()["session"])["status"] == "done"
    r = httpx.post(f"{server.url}/api/v1/jobs/graf-s/records", headers=server.headers(),
                   content=iteration_records(0, 250, 1.0, 0, seed=1).encode(), timeout=60)
    assert r.status_code == 200
    yield server


def _slow_down(server: Server) -> None:
    r = httpx.post(f"{server.url}/api/v1/jobs/graf-s/records", headers=server.headers(),
                   content=iteration_records(0, 60, 1.4, 250, seed=3).encode(), timeout=60)
    assert [e["event"] for e in r.json()["events"]] == ["onset"]


@pytest.mark.slow
def test_every_metric_the_dashboard_names_is_exported(served: Server):
    _slow_down(served)
    text = served.get("/metrics").text
    samples = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    used = {m for e in _exprs(_doc()) for m in METRIC.findall(e)}
    assert used and used <= samples, used - samples
    # /grafana.json: the same dashboard, its links to this server
    got = served.get("/grafana.json")
    assert got.status_code == 200
    doc = got.json()
    (url,) = [v for v in doc["templating"]["list"] if v["name"] == "smon_url"]
    assert url["query"] == url["current"]["value"] == served.url
    assert doc["panels"] == _doc()["panels"]


def _until(what: str, check: Any, timeout: float = 120.0) -> Any:
    return poll(check, what, timeout, every=0.5)


@pytest.mark.slow
def test_a_real_prometheus_runs_every_dashboard_query(served: Server):
    if prometheus_bin() is None:
        reason = "prometheus not found (install Debian's prometheus: `make system-deps`)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    prom = Prometheus(served.url, job="smon").start()
    try:
        (s,) = _until("S scraped", lambda: prom.series(
            'stragglers_job_slowdown_ratio{training_job="graf-a"}'))
        # the target's job label and ours side by side: nothing renamed to exported_job
        assert s["metric"]["job"] == "smon" and s["metric"]["cluster"] == "a"
        assert "exported_job" not in s["metric"]
        expected = served.get("/api/v1/jobs/graf-a").json()["last_slowdown"]
        assert float(s["value"][1]) == pytest.approx(expected)
        _until("the healthy stream scraped", lambda: prom.series(
            'stragglers_job_onsets_total{training_job="graf-s"} == 0'))
        _slow_down(served)
        # the onsets annotation query finds the onset
        (onsets,) = [a for a in _doc()["annotations"]["list"] if a.get("name") == "Onsets"]
        (hit,) = _until("the onset annotation", lambda: prom.series(_promql(onsets["expr"])))
        assert hit["metric"]["training_job"] == "graf-s"
        # every query of the dashboard parses and runs; the per-job ones find both jobs
        for expr in _exprs(_doc()):
            if expr.startswith("label_values("):
                metric = expr[len("label_values("):].split(",")[0]
                found = prom.series(metric)
                assert {x["metric"]["training_job"] for x in found} == {"graf-a", "graf-s"}
                continue
            found = prom.series(_promql(expr))
            if "training_job" in expr and "onsets" not in expr:
                assert found, expr
                assert {x["metric"]["training_job"] for x in found} <= {"graf-a", "graf-s"}
        assert prom.series('stragglers_job_slow_ranks{training_job="graf-s"}')[0]["value"][1] \
            == "1"
    finally:
        prom.stop()

