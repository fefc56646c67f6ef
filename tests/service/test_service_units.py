"""Unit tests of the service's small parts: alert rules, tokens, job names, the colour ramp
and the heatmap view model, the detector adapter."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from stragglers.analysis.heatmaps import HeatmapData
from stragglers.analysis.workers import Worker
from stragglers.errors import InputError
from stragglers.service.alert_rules import AlertConfig
from stragglers.service.auth import basic_matches, load_token, token_matches
from stragglers.service.datadir import DataDir, check_job_name
from stragglers.service.detection import JobDetector, check_records
from stragglers.service.views import colour, worker_grid


def test_alert_rules_parse_and_match():
    cfg = AlertConfig.from_dict({
        "webhook": "http://127.0.0.1:9/h", "realert_s": 60,
        "rules": [{"name": "s", "jobs": "train-*", "slowdown": 1.2},
                  {"name": "w", "cause": "worker", "confidence": 0.8,
                   "webhook": "http://127.0.0.1:9/other"},
                  {"name": "o", "onset": 0.15, "realert_s": 5}]}, "a.yaml")
    s, w, o = cfg.rules
    assert s.matches_job("train-a") and not s.matches_job("eval-a")
    assert s.matches_session(1.2, "gc", 0.1) and not s.matches_session(1.19, "gc", 1.0)
    assert w.matches_session(1.0, "worker", 0.8) and not w.matches_session(3, "worker", 0.79)
    assert not o.on_sessions and not o.matches_session(9, "worker", 1)
    assert (s.webhook, w.webhook, s.realert_s, o.realert_s) == (
        "http://127.0.0.1:9/h", "http://127.0.0.1:9/other", 60, 5)


@pytest.mark.parametrize("doc, words", [
    ({"rules": [{"name": "x"}]}, ["rules[0]", "at least one"]),
    ({"rules": [{"slowdown": "big"}]}, ["rules[0].slowdown", "number"]),
    ({"rules": [{"slowdown": 0.5}]}, ["rules[0].slowdown", "between 1"]),
    ({"rules": [{"cause": "cosmic-rays"}]}, ["rules[0].cause", "not a verdict cause"]),
    ({"rules": [{"onset": 0.2, "slowdown": 1.2}]}, ["onset rule cannot"]),
    ({"rules": [{"slowdown": 1.2, "colour": "red"}]}, ["unknown key 'colour'"]),
    ({"webhook": "ftp://x"}, ["'webhook'", "http(s) URL"]),
    ({"alertmanager": "am:9093"}, ["'alertmanager'", "http(s) URL"]),
    ({"resend_s": 0}, ["'resend_s'", "between 1"]),
    ({"timeout_s": "slow"}, ["'timeout_s'", "number"]),
    ({"rules": [{"name": "a", "slowdown": 2}, {"name": "a", "slowdown": 3}]}, ["used twice"]),
])
def test_bad_alert_rules_are_one_line_naming_the_field(doc, words):
    with pytest.raises(InputError) as err:
        AlertConfig.from_dict(doc, "alerts.yaml")
    msg = str(err.value)
    assert msg.startswith("alerts.yaml: ") and "\n" not in msg
    assert all(w in msg for w in words), msg


def test_alert_rules_file_errors_name_the_file(tmp_path: Path):
    p = tmp_path / "alerts.yaml"
    p.write_text("rules: [\n")
    with pytest.raises(InputError, match="alerts.yaml"):
        AlertConfig.from_file(p)


def test_tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    p = tmp_path / "t"
    p.write_text("  abcdefghijklmnopqrstuvwxyz \n")
    token = load_token(p)
    assert token == "abcdefghijklmnopqrstuvwxyz"
    assert token_matches(f"Bearer {token}", token)
    assert not token_matches(token, token) and not token_matches(None, token)
    assert not token_matches(f"Bearer {token}x", token)
    p.write_text("short\n")
    with pytest.raises(InputError, match="at least 16"):
        load_token(p)
    monkeypatch.delenv("STRAGGLERS_TOKEN", raising=False)
    with pytest.raises(InputError, match="no token"):
        load_token(None)
    monkeypatch.setenv("STRAGGLERS_TOKEN", "from-the-environment-1234")
    assert load_token(None) == "from-the-environment-1234"


@pytest.mark.parametrize("name", ["../x", "a/b", ".hidden", "", "x" * 129, "a b", "ä",
                                  "..", "a\\b", "a\x00"])
def test_job_names_cannot_name_paths(name: str):
    with pytest.raises(InputError):
        check_job_name(name)


def test_paths_come_only_from_generated_ids(tmp_path: Path):
    data = DataDir(tmp_path).create()
    with pytest.raises(ValueError):
        data.session("../../etc")
    assert data.download("a" * 32, "out-1", "../meta.yaml") is None
    assert data.download("a" * 32, "../x", "result.json") is None
    assert data.download("a" * 32, "out-1", "result.json") == \
        tmp_path / "sessions" / ("a" * 32) / "out-1" / "result.json"


def test_colour_ramp_ends():
    assert colour(1.0, 2.0) == "#ffffff" and colour(0.5, 2.0) == "#ffffff"
    assert colour(2.0, 2.0) == colour(9.0, 2.0) == "#800026"
    assert colour(float("nan"), 2.0) == "#dddddd"


def test_worker_grid_places_each_worker_at_its_dp_rank_and_stage():
    grid = np.array([[1.0, 1.1, 1.2], [1.3, 1.4, 2.0]])  # (pp 2, dp 3)
    data = HeatmapData(name="j", dp=3, pp=2, worker=grid, method="exact", slowdown=2.0,
                       cause="worker", highlight=(Worker(2, 1),), steps=(),
                       per_step={})
    g = worker_grid(data)
    rects = re.findall(r'<rect class="([^"]+)"[^>]* fill="([^"]+)" data-dp="(\d)" '
                       r'data-stage="(\d)" data-value="([^"]+)" data-tip="([^"]+)">', g.rects)
    by_pos = {(dp, st): (cls, fill, float(v), tip) for cls, fill, dp, st, v, tip in rects}
    assert len(by_pos) == 6 and by_pos[("2", "1")][2] == 2.0
    assert by_pos[("2", "1")][0] == "cell mark" and sum("mark" in r[0] for r in rects) == 1
    assert by_pos[("1", "0")][3] == "DP rank 1, stage 0: S_w = 1.1000"
    assert by_pos[("2", "1")][1] == "#800026" and by_pos[("0", "0")][1] == "#ffffff"
    assert (g.n_x, g.n_y) == (3, 2)


def test_detector_adapter_reports_a_step_change():
    rng = np.random.default_rng(0)
    # 250 healthy iterations (past the detector's 100-iteration minimum warm-up), then slow
    lines = [f'{{"rank": 0, "iter": {i}, "duration": {d:.5f}}}'
             for i, d in enumerate(np.r_[np.ones(250), 1.5 * np.ones(50)]
                                   * (1 + 0.01 * rng.standard_normal(300)))]
    assert check_records(lines, "s") == 300
    found = JobDetector("s").feed(lines)
    onsets = [e for e in found if e.kind == "onset"]
    assert len(onsets) == 1 and onsets[0].rank == 0
    assert 250 <= onsets[0].iteration <= 260
    restored = JobDetector("s")
    restored.replay(lines)  # rebuilt state: the level is already the slow one
    more = [f'{{"rank": 0, "iter": {300 + i}, "duration": 1.5}}' for i in range(30)]
    assert [e for e in restored.feed(more) if e.kind == "onset"] == []
    with pytest.raises(InputError, match=r"s:2: field 'iter'"):
        check_records([lines[0], '{"rank": 0, "iter": -1, "duration": 1}'], "s")


def test_serve_takes_the_detector_threshold_and_warmup(tmp_path: Path) -> None:
    """``serve --threshold`` (and the other options of watch's default detector) reach the
    detector of every job's records: a +15 % level is an onset at the default threshold
    (0.10) and not at 0.20; --warmup is held to its limit."""
    from stragglers.cli import build_parser
    from stragglers.cli.detect_cmd import robust_settings
    from stragglers.detect.robust import RobustSettings
    from stragglers.service.state import service_config

    rng = np.random.default_rng(1)
    lines = [f'{{"rank": 0, "iter": {i}, "duration": {d:.5f}}}'
             for i, d in enumerate(np.r_[np.ones(250), 1.15 * np.ones(60)]
                                   * (1 + 0.005 * rng.standard_normal(310)))]

    def onsets(settings: RobustSettings) -> list[int]:
        return [e.iteration for e in JobDetector("s", settings).feed(lines)
                if e.kind == "onset"]

    args = build_parser().parse_args(["serve", "--data", str(tmp_path / "d"), "--threshold",
                                      "0.2", "--stall-iters", "4", "--warmup", "50"])
    (tmp_path / "t").write_text("x" * 32)
    config = service_config(args.data, str(tmp_path / "t"), detector=robust_settings(args))
    assert config.detector == RobustSettings(threshold=0.2, stall_iters=4, warmup_iters=50)
    default = build_parser().parse_args(["serve", "--data", str(tmp_path / "d")])
    assert robust_settings(default) == RobustSettings()
    assert [250 <= it <= 255 for it in onsets(RobustSettings())] == [True]
    assert onsets(config.detector) == []
    assert onsets(RobustSettings(threshold=0.12)) == onsets(RobustSettings())
    with pytest.raises(InputError, match="--warmup"):
        service_config(args.data, str(tmp_path / "t"),
                       detector=RobustSettings(warmup_iters=10**12))


def test_alertmanager_settings_and_payload():
    from stragglers.service.alerts import alertmanager_alert
    from stragglers.service.rows import AlertRow

    cfg = AlertConfig.from_dict({"alertmanager": "http://127.0.0.1:9093", "resend_s": 30,
                                 "timeout_s": 2, "rules": [{"slowdown": 1.2}]}, "a.yaml")
    assert (cfg.alertmanager, cfg.resend_s, cfg.timeout_s, cfg.rules[0].webhook) == (
        "http://127.0.0.1:9093", 30, 2, None)
    row = AlertRow(id=3, job="train-a", job_id=1, rule="slow", cause="worker",
                   session_id="s1", event_id=None, created_at=1767225600.0,
                   status="pending", attempts=0, sent_at=None, http_status=None, error=None,
                   webhook=None, body={"kind": "session", "message": "job train-a: S = 1.5",
                                       "url": "http://smon/jobs/train-a", "session": "s1",
                                       "slowdown": 1.5, "waste": None, "first_seen": 1767225600.0,
                                       "labels": {"cluster": "a", "job": "x", "empty": ""}},
                   repeat=0, suppressed=0, open=True, resolved_at=None)
    doc = alertmanager_alert(row, 1767225660.0)
    assert set(doc) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
    assert doc["labels"] == {"alertname": "slow", "training_job": "train-a", "cause": "worker",
                             "kind": "session", "source": "stragglers", "cluster": "a",
                             "label_job": "x"}
    assert doc["annotations"] == {"summary": "job train-a: S = 1.5",
                                  "url": "http://smon/jobs/train-a", "session": "s1",
                                  "slowdown": "1.5"}
    assert (doc["startsAt"], doc["endsAt"]) == ("2026-01-01T00:00:00.000Z",
                                                "2026-01-01T00:01:00.000Z")


@pytest.mark.parametrize("key, name", [
    ("cluster", "cluster"), ("team-name", "team_name"), ("9k", "_9k"), ("job", "label_job"),
    ("training_job", "label_training_job"), ("__name__", "label_name__"), ("le", "label_le"),
    ("a.b/c", "a_b_c")])
def test_session_labels_become_valid_prometheus_label_names(key, name):
    from stragglers.service.prometheus import label_name

    assert label_name(key) == name
    assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name) and not name.startswith("__")


def test_basic_auth_takes_the_token_as_password():
    import base64

    def basic(text: str) -> str:
        return "Basic " + base64.b64encode(text.encode()).decode()

    token = "abcdefghijklmnopqrstuvwxyz"
    assert basic_matches(basic(f"anyone:{token}"), token)
    assert basic_matches(basic(f":{token}"), token)
    assert not basic_matches(basic(f"{token}:x"), token)
    assert not basic_matches(basic(token), token)  # no colon: no password
    assert not basic_matches("Basic !!!", token) and not basic_matches(None, token)
    assert not basic_matches(f"Bearer {token}", token)


def test_time_axes_are_wall_clock_utc():
    from stragglers.service.views import series_chart, time_ticks

    t0 = 1767225600.0  # 2026-01-01 00:00:00 UTC
    ticks, caption = time_ticks(t0, t0 + 3600, lambda t: t - t0)
    assert [label for _, label in ticks] == ["00:00", "00:15", "00:30", "00:45", "01:00"]
    assert caption == "time (UTC, 2026-01-01)"
    ticks, caption = time_ticks(t0, t0 + 2, lambda t: t)  # a short span: no repeated label
    assert [label for _, label in ticks] == ["00:00:00", "00:00:01", "00:00:02"]
    ticks, caption = time_ticks(t0, t0 + 3 * 86400, lambda t: t)
    assert ticks[0][1] == "01-01 00:00" and caption == "time (UTC)"
    chart = series_chart([("a", t0, 1.5, 1 / 3), ("b", t0 + 60, 1.2, 1 / 6),
                          ("c", t0 + 600, 1.3, 0.23)])
    assert chart is not None
    xs = [p.x for p in chart.s_points]  # by time, not by index: b is near a
    assert xs[1] - xs[0] < (xs[2] - xs[1]) / 5


def test_record_activity_sees_a_job_send_records_without_its_log():
    """When a job last sent records: its record count growing between two looks, or (first
    look after a start) its log's mtime — so staleness does not hang on the log file."""
    import time as _time

    from stragglers.service.overview import RecordActivity
    from stragglers.service.rows import JobRow

    def job(records: int) -> JobRow:
        return JobRow(id=7, name="j", created_at=1.0, sessions=0, failed=0, records=records,
                      last_session=None, last_done_at=None, last_slowdown=None,
                      last_waste=None, last_cause=None, last_confidence=None,
                      last_step_time=None)

    seen = RecordActivity(lambda job_id: 1000.0 if job_id == 7 else None)
    assert seen(job(10)) == 1000.0  # first look: the log's time
    assert seen(job(10)) == 1000.0  # nothing new
    before = _time.time()
    assert seen(job(15)) >= before  # more records: now
    blind = RecordActivity(None)
    assert blind(job(10)) is None and blind(job(11)) is not None
