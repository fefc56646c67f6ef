"""Corpus labels and the per-series scoring rules."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.detect.detector import Alarm
from stragglers.evaluation.corpus import (
    EVENT_LOSS,
    LOCATION_TOLERANCE,
    MIN_EVENT_ITERS,
    Event,
    Series,
    generate_corpus,
    generate_series,
)
from stragglers.evaluation.detect_eval import score_series, summarize


def test_corpus_is_deterministic_and_labelled() -> None:
    a = generate_corpus(3, scale=0.05)
    b = generate_corpus(3, scale=0.05)
    assert [s.name for s in a] == [s.name for s in b]
    assert all(np.array_equal(x.values, y.values) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0].values, generate_corpus(4, scale=0.05)[0].values)
    for s in a:
        assert np.all(s.values > 0) and np.all(np.isfinite(s.values))
        assert s.positive == (s.scenario not in ("jitter", "spikes", "drift_minor"))
        for e in s.events:
            assert 0 < e.onset < e.end <= s.values.size
            assert e.loss >= EVENT_LOSS - 1e-9 and e.peak_loss >= e.loss
            if e.kind != "drift":
                assert e.match_from == e.onset - LOCATION_TOLERANCE
                assert e.end - e.onset >= MIN_EVENT_ITERS


def test_step_labels_match_the_generated_levels() -> None:
    rng = np.random.default_rng(0)
    s = generate_series(rng, "communication", "step", "x")
    (e,) = s.events
    ratio = s.values / s.base_s
    # the median over the event is the slowdown factor; outside it is ~1
    assert abs(np.median(ratio[e.onset : e.end]) - 1 / (1 - e.loss)) < 0.05 / (1 - e.loss)
    assert abs(np.median(ratio[: e.onset]) - 1.0) < 0.02
    d = generate_series(np.random.default_rng(1), "computation", "drift", "d")
    (e,) = d.events
    assert e.kind == "drift" and e.match_from < e.onset and e.end == d.values.size


def _alarm(kind: str, index: int, declared: int) -> Alarm:
    return Alarm(kind, index, declared, 1.0, 1.3, 1.0, 0.23)


def _series(events) -> Series:
    return Series("t", "computation", "step", np.ones(1000), tuple(events), 1.0, 0.01)


def test_scoring_rules() -> None:
    ev = Event(onset=300, end=500, match_from=295, loss=0.2, peak_loss=0.2, kind="step",
               duration_s=200.0)
    good = score_series(_series([ev]), [_alarm("onset", 301, 306), _alarm("recovery", 500, 504)])
    assert good.correct and good.delays == (6,) and good.target_delays == (6,)
    assert good.recovered == 1 and good.recovery_delays == (4,)
    late_loc = score_series(_series([ev]), [_alarm("onset", 294, 300)])
    assert not late_loc.correct and late_loc.detected == 0 and late_loc.spurious == 1
    extra = score_series(_series([ev]), [_alarm("onset", 100, 101), _alarm("onset", 300, 303)])
    assert not extra.correct and extra.detected == 1 and extra.spurious == 1
    neg_ok = score_series(_series([]), [_alarm("recovery", 10, 12)])
    neg_fp = score_series(_series([]), [_alarm("onset", 10, 12)])
    assert neg_ok.correct and not neg_fp.correct
    m = summarize([good, late_loc, extra, neg_ok, neg_fp])
    assert (m.correct, m.total) == (2, 5)
    assert (m.false_positives, m.negatives, m.false_negatives, m.positives) == (1, 2, 1, 3)
    assert m.accuracy == 0.4 and m.fpr == 0.5 and abs(m.fnr - 1 / 3) < 1e-12
    assert m.mean_delay_iters == 4.5  # (6 + 3) / 2


@pytest.mark.slow
def test_detect_eval_json_shape(capsys) -> None:
    assert main(["detect-eval", "--json", "--scale", "0.01", "--jobs", "1", "--seed", "5"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert sorted(res) == ["bocd", "bocd_verify", "falcon", "robust", "sliding_window"]
    for v in res.values():
        assert sorted(v) == ["accuracy", "fnr", "fpr", "mean_delay_iters"]
        assert 0.0 <= v["accuracy"] <= 1.0
    assert main(["detect-eval", "--scale", "0"]) == 2
