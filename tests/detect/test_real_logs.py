"""Detection on real training logs (issue 9): the Megatron readers on real excerpts, spikes
that are not slow periods, recovery after a warm-up, job-level events, following a Megatron
log through rotation.

Real data: ``../shared/real/megatron-iter/`` (NVIDIA/Megatron-LM @ d98e8a6,
``tests/functional_tests/test_cases/<model>/<case>/golden_values_<env>.json``; NVIDIA
Megatron-LM licence, BSD-3-Clause style).  Read at test time, never copied.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.detect.spikes import SpikeCounter
from stragglers.detect.warmup import WarmUp
from stragglers.detect.watch import Watcher
from stragglers.evaluation.bocd import make_detector, run_detector
from stragglers.logs.follow import Follower
from stragglers.logs.megatron import (
    Gap,
    guess_format,
    parse_log_line,
    read_iteration_json,
    series_items,
)
from stragglers.logs.records import IterationRecord, RecordError

#: ``../shared`` beside the checkout (as tests/conftest.py finds it); STRAGGLERS_SHARED
#: points elsewhere.
SHARED = Path(os.environ.get("STRAGGLERS_SHARED")
              or Path(__file__).resolve().parents[2].parent / "shared")
REAL = SHARED / "real" / "megatron-iter"
MIXTRAL = REAL / "mixtral_mixtral_8x7b_alltoall_tp2pp4ep4_release__lts_dgx_a100.json"
GPT3_GB200 = REAL / ("gpt_gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_"
                     "tp_overlap__dev_dgx_gb200.json")


def _real(path: Path) -> Path:
    """A real run of ../shared; skip outside CI when it is absent, fail inside CI."""
    if path.exists():
        return path
    reason = (f"real Megatron runs not found at {REAL} (they live in ../shared beside the "
              "checkout, which CI provides)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _raw(path: Path) -> dict[str, object]:
    """The iteration-time values as the standard library reads them (independent truth)."""
    with path.open() as fh:
        return json.load(fh)["iteration-time"]["values"]


# -- readers ----------------------------------------------------------------------------------
def test_iteration_json_reader_on_a_real_run_with_restarts() -> None:
    path = _real(MIXTRAL)
    raw = _raw(path)
    series = read_iteration_json(path)
    assert series.errors == [] and series.step_interval == 5
    assert series.steps == sorted(int(k) for k in raw)
    nans = [int(k) for k, v in raw.items() if v == "nan"]
    assert len(nans) == sum(1 for x in series.values if math.isnan(x)) > 1000
    items = series_items(series)
    gaps = [g for _, g in items if isinstance(g, Gap)]
    recs = [r for _, r in items if isinstance(r, IterationRecord)]
    # every nan is in exactly one gap, every number is one record with the same value
    assert sum(g.values for g in gaps) == len(nans)
    assert [(r.iter, r.duration) for r in recs] == [
        (int(k), float(v)) for k, v in sorted(raw.items(), key=lambda kv: int(kv[0]))
        if v != "nan"]
    # the restarts: runs of nan between logged stretches
    runs = []
    for s in sorted(nans):
        if runs and s - runs[-1][1] == 5:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    assert [(g.first_step, g.last_step) for g in gaps] == [tuple(r) for r in runs]


def test_watch_a_real_iteration_json_counts_gaps_and_stays_quiet(capsys) -> None:
    path = _real(MIXTRAL)
    assert guess_format(path.read_bytes()[:65536]) == "megatron-json"
    assert main(["watch", str(path)]) == 0  # auto format, read once
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    s = out[-1]
    raw = _raw(path)
    n_nan = sum(1 for v in raw.values() if v == "nan")
    assert s["records"] == len(raw) - n_nan and s["gaps"]["values"] == n_nan
    assert s["lines"] == s["records"] + s["gaps"]["values"]  # every value accounted for
    assert not [e for e in out if e["event"] in ("onset", "change")]
    # the first iteration after each restart is 5-6x the steady time: a spike, not a period
    assert s["spikes"]["spikes"] >= 4 and s["slow_ranks"] == []


def _log_line(it: int, total: int, ms: float, rank: int | None = None,
              stamp: str | None = "2025-01-10 07:43:21") -> str:
    prefix = "" if rank is None else f"[rank{rank}]: "
    when = "" if stamp is None else f" [{stamp}]"
    return (f"{prefix}{when} iteration {it:8d}/{total:8d} | consumed samples: {it * 512:10d} | "
            f"elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.000000E-04 | "
            "global batch size:   512 | lm loss: 2.345678E+00 | loss scale: 1.0 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |")


def test_log_line_reader() -> None:
    rec = parse_log_line(_log_line(120, 500000, 1234.5, rank=3), source="f", line=7)
    assert rec == IterationRecord(rank=3, iter=120, ts=1736495001.0, duration=1.2345)
    assert parse_log_line(_log_line(5, 10, 80.0, stamp=None)) == IterationRecord(
        rank=0, iter=5, ts=None, duration=0.08)
    assert parse_log_line("[rank0]: building GPT model ...") is None
    with pytest.raises(RecordError, match=r"^f:9: field 'elapsed time per iteration \(ms\)'"):
        parse_log_line(_log_line(5, 10, 80.0).replace("80.0", "abc"), source="f", line=9)
    with pytest.raises(RecordError, match=r"^f:2: field 'iteration'"):
        parse_log_line(" iteration x/ 10 | elapsed time per iteration (ms): 3 |", source="f",
                       line=2)


def test_watch_a_megatron_log_of_real_times_with_a_restart(tmp_path, capsys) -> None:
    """The real GPT-3 GB200 times written as a Megatron log of two ranks (the second at
    the same times x 1.01), with start-up text, a bad line and a checkpoint restart."""
    raw = _raw(_real(GPT3_GB200))
    steps = sorted(int(k) for k in raw)
    lines = ["[rank0]: > building GPT model ...", "[rank1]: > building GPT model ..."]
    for s in steps:
        for r in (0, 1):
            lines.append(_log_line(s, 2000, 1000 * float(raw[str(s)]) * (1 + 0.01 * r), rank=r,
                                   stamp=None))
        if s == 1000:  # restart from the checkpoint of iteration 900
            lines.append("[rank0]: loading checkpoint from iteration 900")
            lines.append(_log_line(901, 2000, 1.0, rank=0).replace("1.0 |", "oops |"))
            for s2 in range(901, 1001):
                for r in (0, 1):
                    lines.append(_log_line(s2, 2000, 1000 * float(raw[str(s2)]) * (1 + 0.01 * r),
                                           rank=r, stamp=None))
    p = tmp_path / "train.log"
    p.write_text("\n".join(lines) + "\n")
    assert main(["watch", str(p), "--once"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    s = out[-1]
    n_iter = 2 * (len(steps) + 100)
    assert s["records"] == n_iter and s["bad"] == 1 and s["ignored"] == {"text": 3}
    assert s["lines"] == len(lines)
    assert s["segments"] == {"restart": 2}
    (bad,) = [e for e in out if e["event"] == "bad_record"]
    assert "elapsed time per iteration" in bad["error"] and bad["line"] == 2 + 2 * 999 + 2
    onsets = [e for e in out if e["event"] == "onset"]
    # the two real slow episodes of this run (steps 214-244 and 1407-1426), on both ranks,
    # named by the job's iteration number (step 1406 is already 7.5 % slower: the rise into
    # the second episode; an onset there is right too)
    got = sorted((e["rank"], e["job_iteration"]) for e in onsets)
    assert [(r, it) for r, it in got if it == 214] == [(0, 214), (1, 214)]
    assert [r for r, it in got if it in (1406, 1407)] == [0, 1] and len(got) == 4
    jobs = [e for e in out if e["event"] == "job"]
    assert [(e["kind"], e["ranks"], e["job_iteration"] in (214, 1406, 1407)) for e in jobs
            if e["kind"] == "onset"] == [("onset", [0, 1], True)] * 2


# -- spikes are not slow periods ---------------------------------------------------------------
def _spiky(seed: int, n: int = 3000) -> tuple[np.ndarray, int]:
    """1 % jitter with clusters of 1-5 spikes (1.3-1.8x, contiguous or with one healthy
    iteration between them) every 60-140 iterations; returns the series and spike count."""
    rng = np.random.default_rng(seed)
    x = 2.0 * np.exp(rng.normal(0, 0.01, n))
    pos = 100
    spikes = 0
    while pos < n - 20:
        for _ in range(int(rng.integers(1, 6))):
            x[pos] *= rng.uniform(1.3, 1.8)
            spikes += 1
            pos += int(rng.integers(1, 3))
        pos += int(rng.integers(60, 140))
    return x, spikes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spike_clusters_raise_no_onset(seed: int) -> None:
    x, _ = _spiky(seed)
    alarms = run_detector(make_detector("bocd_verify"), x)
    assert [a for a in alarms if a.kind in ("onset", "change")] == []
    # the rules that make it so: without persistence and with 5-point candidates, the same
    # detector opens slow periods on these clusters
    loose = make_detector("bocd_verify", persist_fraction=0.0, min_segment=5, band_points=0)
    assert any(a.kind == "onset" for a in run_detector(loose, x))


def test_spikes_are_counted_and_a_slow_period_among_them_is_found() -> None:
    x, n_spikes = _spiky(3)
    x[1500:1700] *= 1.3  # a real slow period (23 % loss) with the spikes going on
    lines = [json.dumps({"rank": 0, "iter": i, "duration": float(v)}) for i, v in enumerate(x)]
    w = Watcher(warmup_iters=0, spike_report_points=1000)
    ev = [e.to_dict() for e in w.process_lines(list(enumerate(lines, start=1))) + w.finish()]
    alarms = [(e["event"], e["job_iteration"]) for e in ev
              if e["event"] in ("onset", "change", "recovery")]
    assert [a[0] for a in alarms] == ["onset", "recovery"]
    assert abs(alarms[0][1] - 1500) <= 3 and abs(alarms[1][1] - 1700) <= 3
    reports = [e for e in ev if e["event"] == "spikes"]
    total = w.summary().to_dict()["spikes"]
    assert sum(r["spikes"] for r in reports) == total["spikes"]
    # every injected spike outside the slow period is counted once (spikes inside it are
    # measured against the slow level: 1.3x on top of 1.3x, most of them still count)
    outside = n_spikes - int(np.sum(_spike_mask(3)[1500:1700]))
    assert outside <= total["spikes"] <= n_spikes
    assert total["seconds_lost"] > 0 and reports[0]["points"] == 1000


def _spike_mask(seed: int) -> np.ndarray:
    x, _ = _spiky(seed)
    return x > 2.0 * 1.2


# -- warm-up and recovery -------------------------------------------------------------------
def test_recovery_after_a_warm_up_shift() -> None:
    """A job warms up slowly (2x falling to 1x), then runs 12 % slower for 200 iterations
    and comes back: the warm-up sets no baseline, and the return gives a recovery although
    the slow level is barely above the threshold (the case the issue saw go unreported)."""
    rng = np.random.default_rng(4)
    warm = 1.0 + np.exp(-np.arange(80) / 15.0)
    level = np.concatenate([warm, np.ones(400), np.full(200, 1.12), np.ones(400)])
    x = 3.0 * level * np.exp(rng.normal(0, 0.01, level.size))
    lines = [json.dumps({"rank": 0, "iter": i, "duration": float(v)}) for i, v in enumerate(x)]
    w = Watcher(warmup_iters=50)
    ev = [e.to_dict() for e in w.process_lines(list(enumerate(lines, start=1))) + w.finish()]
    alarms = [e for e in ev if e["event"] in ("onset", "change", "recovery", "speedup")]
    assert [e["event"] for e in alarms] == ["onset", "recovery"]
    onset, rec = alarms
    assert abs(onset["job_iteration"] - 480) <= 3 and abs(rec["job_iteration"] - 680) <= 3
    assert onset["healthy_s"] == pytest.approx(3.0, rel=0.02)  # not the warm-up level
    s = w.summary().to_dict()
    assert 50 <= s["warmup_points"] <= 80 and s["slow_ranks"] == []
    assert int(s["warmup_ends"]["0"]) == s["warmup_points"]


def test_warm_up_lasts_until_the_level_settles() -> None:
    w = WarmUp(min_iters=10, settle_points=5, tolerance=0.05)
    x = [5.0, 3.0, 2.0, 1.5, 1.2, 1.1, 1.05] + [1.0] * 20
    done = [w.feed(v, i) for i, v in enumerate(x)]
    first = done.index(True)
    # settled: the median of the last 5 within 5 % of the 5 before, and at least 10 in
    assert first >= 10 and all(done[first:])
    w.rearm()
    assert not w.feed(9.0, 100)


def test_spike_counter_cluster_of_a_level_is_not_spikes() -> None:
    c = SpikeCounter()
    for i in range(50):
        c.add(1.0, 1.0, 1, i)
    for i in range(50, 62):  # 12 elevated points: a new level
        c.add(1.5, 1.0, 1, i)
    for i in range(62, 70):
        c.add(1.0, 1.0, 1, i)
    assert c.total_spikes == 0
    for i, v in enumerate([1.5, 1.0, 1.6, 1.0, 1.0, 1.0]):  # one cluster of 2 spikes
        c.add(v, 1.0, 2, 70 + i)
    assert (c.total_spikes, c.total_clusters) == (2, 1)
    assert c.total_seconds == pytest.approx((0.5 + 0.6) * 2)


# -- job-level events ---------------------------------------------------------------------------
def test_job_level_event_names_the_ranks_that_changed_together() -> None:
    """8 ranks; one slow GPU slows ranks 0-3 (its data-parallel group) at iteration 400 until
    600; rank 6 alone is slow from 900 to 1000."""
    rng = np.random.default_rng(5)
    lines = []
    for it in range(1200):
        for r in range(8):
            d = 1.0 * math.exp(rng.normal(0, 0.01))
            if (r < 4 and 400 <= it < 600) or (r == 6 and 900 <= it < 1000):
                d *= 1.4
            lines.append(json.dumps({"rank": r, "iter": it, "duration": d}))
    w = Watcher(warmup_iters=0)
    ev = [e.to_dict() for e in w.process_lines(list(enumerate(lines, start=1))) + w.finish()]
    jobs = [e for e in ev if e["event"] == "job"]
    assert [(e["kind"], e["ranks"]) for e in jobs] == [("onset", [0, 1, 2, 3]),
                                                        ("recovery", [0, 1, 2, 3])]
    assert abs(jobs[0]["job_iteration"] - 400) <= 3 and jobs[0]["ranks_followed"] == 8
    per_rank = sorted(e["rank"] for e in ev if e["event"] == "onset")
    assert per_rank == [0, 1, 2, 3, 6]  # the per-rank events are still there
    assert w.summary().to_dict()["job_events"] == {"onset": 1, "recovery": 1}


# -- rotation -----------------------------------------------------------------------------------
def test_follow_a_megatron_log_through_rotation(tmp_path) -> None:
    p = tmp_path / "train.log"
    p.write_text("")
    rng = np.random.default_rng(6)
    times = [1000 * math.exp(rng.normal(0, 0.01)) * (1.5 if 300 <= i < 400 else 1.0)
             for i in range(600)]
    lines = [_log_line(i, 600, t, stamp=None) for i, t in enumerate(times)]
    parts = [lines[:250], lines[250:]]
    reached = threading.Event()

    def writer() -> None:
        p.write_text("\n".join(parts[0]) + "\n")
        reached.wait(timeout=120)
        # rotated with no moment without the path (a rename, then a new file, leaves one:
        # a follower polling then reports `file_missing` too, as it should; seen in CI)
        new = tmp_path / "train.log.new"
        new.write_text("\n".join(parts[1]) + "\n")
        os.link(p, tmp_path / "train.log.1")
        os.replace(new, p)

    th = threading.Thread(target=writer)
    th.start()
    w = Watcher(input_format="megatron-log", warmup_iters=0)
    events: list = []
    got = 0
    deadline = time.monotonic() + 120
    for batch in Follower(str(p), poll=0.01, idle_timeout=60.0):
        if batch.notice is not None:
            events += w.notice(batch.notice)
            continue
        got += len(batch.lines)
        events += w.process_lines(batch.lines)
        if got >= 250:
            reached.set()
        if got >= len(lines) or time.monotonic() > deadline:
            break
    th.join()
    events = [e.to_dict() for e in events + w.finish()]
    s = events[-1]
    assert got == len(lines) and s["files"] == {"rotated": 1} and s["records"] == 600
    alarms = [(e["event"], e["job_iteration"]) for e in events
              if e["event"] in ("onset", "recovery")]
    assert [a[0] for a in alarms] == ["onset", "recovery"]
    assert abs(alarms[0][1] - 300) <= 3 and abs(alarms[1][1] - 400) <= 3


# -- evaluation families ------------------------------------------------------------------------
@pytest.mark.slow
def test_detect_eval_real_family(capsys) -> None:
    """The six real runs after warm-up: no false alarm, the three labelled episodes found."""
    _real(MIXTRAL)
    assert main(["detect-eval", "--family", "real", "--real-dir", str(REAL), "--json",
                 "--jobs", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    bv = doc["real"]["bocd_verify"]
    assert bv["accuracy"] == 1.0 and bv["fpr"] == 0.0 and bv["fnr"] == 0.0
    assert doc["real"]["bocd"]["fpr"] > 0  # plain BOCD alarms on the spikes


def test_semi_real_series_carry_their_labels() -> None:
    from stragglers.evaluation.corpus import EVENT_LOSS
    from stragglers.evaluation.realdata import load_runs, semi_real_corpus

    _real(MIXTRAL)
    runs = load_runs(REAL)
    corpus = semi_real_corpus(runs, seed=0, per_run=8)
    assert len(corpus) == 6 * 8
    for s in corpus:
        assert np.all(np.isfinite(s.values)) and np.all(s.values > 0)
        for e in s.events:
            assert 20 <= e.end - e.onset <= 5000 and 0.05 <= e.loss <= 0.60
            assert (e.kind == "minor") == (e.loss < EVENT_LOSS)
            # the injected level: the median over the event is 1/(1-loss) times the median
            # of the same run's noise
            base = np.median(s.values[: e.onset])
            ratio = np.median(s.values[e.onset:e.end]) / base
            assert abs(ratio * (1 - e.loss) - 1) < 0.06


def test_a_minor_event_is_optional_in_the_scores() -> None:
    from stragglers.detect.detector import Alarm
    from stragglers.evaluation.corpus import Event, Series
    from stragglers.evaluation.detect_eval import score_series

    minor = Event(onset=300, end=400, match_from=295, loss=0.07, peak_loss=0.07, kind="minor",
                  duration_s=100.0)
    s = Series("t", "semi-real", "x", np.ones(1000), (minor,), 1.0, 0.01)
    quiet = score_series(s, [])
    inside = score_series(s, [Alarm("onset", 302, 310, 1.0, 1.08, 1.0, 0.07)])
    outside = score_series(s, [Alarm("onset", 700, 710, 1.0, 1.2, 1.0, 0.17)])
    assert not quiet.positive and quiet.correct and inside.correct
    assert not outside.correct and outside.spurious == 1


@pytest.mark.slow
def test_slow_periods_right_after_spikes_are_declared_within_10_points() -> None:
    """Semi-real series of the tuned runs (real noise with injected slow periods and spikes,
    seed 2): every slow period of >= 15 % loss is declared within 10 points of its known
    start, also those that begin right after spikes (before, three were declared 11 to 15
    points late, e.g. nemotron-gb200/048: the spikes widened the variance of BOCD's current
    run, so the new level looked like more of it for several points)."""
    from stragglers.evaluation.detect_eval import score_series
    from stragglers.evaluation.realdata import TUNED, load_runs, semi_real_corpus

    _real(MIXTRAL)
    corpus = [s for s in semi_real_corpus(load_runs(REAL), seed=2) if s.scenario in TUNED]
    late = []
    targets = 0
    for s in corpus:
        out = score_series(s, run_detector(make_detector("bocd_verify"), s.values))
        targets += len(out.target_delays)
        late += [(s.name, d) for d in out.target_delays if d > 10]
    assert targets > 150 and late == []
