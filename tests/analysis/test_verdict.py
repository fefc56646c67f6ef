"""The verdict: each hypothesis tested alone on synthetic traces with a known injected cause,
the choice among them, the confidence, and the configuration."""

from __future__ import annotations

import json
from functools import cache

import pytest

from stragglers.analysis import analyze_table
from stragglers.analysis.engine import prepare
from stragglers.analysis.metrics import compute_metrics
from stragglers.analysis.verdict import Cause, Finding, VerdictConfig, VerdictContext, decide
from stragglers.analysis.verdict.hypotheses import (
    CommunicationHypothesis,
    GcHypothesis,
    LastStageHypothesis,
    PausesHypothesis,
    SequenceLengthHypothesis,
    WorkerHypothesis,
)
from stragglers.analysis.workers import Worker
from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.synth import SynthSpec, generate
from stragglers.trace import build_table

#: Injections with a known answer (the synthetic generator's ground truth).
CASES = {
    "slow": dict(dp=4, pp=4, steps=8, jitter=0.01, slow_workers=[(2, 1, 1.5)]),
    "slow_last_dp2": dict(dp=2, pp=4, steps=8, jitter=0.01, slow_workers=[(1, 3, 1.6)]),
    "heavy_last": dict(dp=2, pp=4, steps=8, jitter=0.01, heavy_last_stage=1.4),
    "seq": dict(dp=2, pp=4, steps=8, jitter=0.01, seq_len_sigma=0.5),
    "gc_ops": dict(dp=2, pp=4, steps=10, jitter=0.01, gc_prob=0.2, gc_pause=1.0),
    "gc_inside": dict(dp=4, pp=4, steps=10, jitter=0.01, gc_prob=0.15, gc_pause=0.5,
                      gc_in_compute=True),
    "link": dict(dp=2, pp=4, steps=6, jitter=0.01, slow_links=[(0, 1, 200)]),
    "healthy": dict(dp=4, pp=4, steps=8, jitter=0.03),
}


@cache
def context(case: str, **overrides: float) -> VerdictContext:
    trace, meta, _ = generate(SynthSpec(seed=3, **CASES[case]))
    engine = prepare(build_table(trace, meta))
    return VerdictContext(engine, compute_metrics(engine), VerdictConfig(**overrides))


# -- each hypothesis alone ------------------------------------------------------------------
def test_worker_hypothesis_names_the_slow_worker():
    f = WorkerHypothesis().test(context("slow"))
    assert f.applicable and f.cause == Cause.WORKER
    assert f.workers == (Worker(2, 1),)
    assert f.share > 0.8


def test_a_steadily_slow_worker_is_never_pauses():
    ctx = context("slow")
    f = PausesHypothesis().test(ctx)
    assert not f.applicable
    assert Worker(2, 1) not in ctx.pauses.workers


def test_one_slow_worker_on_the_last_stage_is_not_stage_imbalance():
    ctx = context("slow_last_dp2")
    last = LastStageHypothesis().test(ctx)
    assert not last.applicable  # its DP peer on the last stage is not heavy
    assert last.gates["last_stage_compute_ratio"] < 1.05
    worker = WorkerHypothesis().test(ctx)
    assert worker.applicable and worker.workers == (Worker(1, 3),)


def test_heavy_last_stage_hypothesis_and_no_pauses_there():
    ctx = context("heavy_last")
    f = LastStageHypothesis().test(ctx)
    assert f.applicable and f.share > 0.8
    assert set(f.workers) == {Worker(0, 3), Worker(1, 3)}
    # the loss layer's consistently long ops are not pauses
    assert ctx.pauses.count == 0
    assert not WorkerHypothesis().test(ctx).applicable


def test_sequence_length_hypothesis_and_long_sequences_are_not_pauses():
    ctx = context("seq")
    f = SequenceLengthHypothesis().test(ctx)
    assert f.applicable and f.share > 0.8
    assert f.gates["fb_correlation_within"] > 0.9
    pz = ctx.pauses
    # long microbatches are long forward *and* backward: dropped as partners, not pauses
    assert pz.dropped_partner > 0
    assert not PausesHypothesis().test(ctx).applicable


def test_gc_hypothesis_on_recorded_gc_ops():
    f = GcHypothesis().test(context("gc_ops"))
    assert f.applicable and f.share > 0.8
    assert f.gates["gc_ops"] is True


def test_unrecorded_gc_is_pauses_not_gc():
    ctx = context("gc_inside")
    pauses = PausesHypothesis().test(ctx)
    assert pauses.applicable and pauses.share > 0.8
    # Uncoordinated pauses hit 14 of 16 workers, none more than its peers: nobody is blamed.
    assert pauses.gates["workers_hit"] >= 8
    assert pauses.workers == ()
    assert "on no worker more than on its peers beyond the noise" in pauses.evidence
    gc = GcHypothesis().test(ctx)
    assert gc.share < 0.05  # the gc ops are clean and nothing else records GC
    # the worker hit most stands out by S_w, but its excess is sporadic: not a slow worker
    worker = WorkerHypothesis().test(ctx)
    assert not worker.applicable


def test_communication_hypothesis_names_the_link_and_not_a_worker():
    ctx = context("link")
    comm = CommunicationHypothesis().test(ctx)
    assert comm.applicable and comm.share > 0.8
    assert set(comm.workers) == {Worker(0, 1), Worker(0, 2)}
    assert not WorkerHypothesis().test(ctx).applicable


# -- the verdict ----------------------------------------------------------------------------
@pytest.mark.parametrize(("case", "cause", "workers"), [
    ("slow", Cause.WORKER, (Worker(2, 1),)),
    ("slow_last_dp2", Cause.WORKER, (Worker(1, 3),)),
    ("heavy_last", Cause.LAST_STAGE, (Worker(0, 3), Worker(1, 3))),
    ("seq", Cause.SEQUENCE_LENGTH, ()),
    ("gc_ops", Cause.GC, ()),
    ("gc_inside", Cause.PAUSES, None),
    ("link", Cause.COMMUNICATION, (Worker(0, 1), Worker(0, 2))),
    ("healthy", Cause.NONE, ()),
])
def test_verdict_names_the_injected_cause_confidently(case, cause, workers):
    ctx = context(case)
    v = decide(ctx.engine, ctx.metrics, ctx.config)
    assert v.cause == cause, v.evidence
    if workers is not None:
        assert set(v.workers) == set(workers)
    assert v.confidence >= 0.9


def test_below_the_threshold_the_verdict_is_none_but_names_the_leading_cause():
    """A worker slowed x1.1 (S 1.04, S_w 1.045): no straggler problem, but the small slowdown
    there is is that worker's, and the verdict says so in ``leading``."""
    trace, meta, _ = generate(SynthSpec(dp=4, pp=4, steps=8, jitter=0.005, seed=3,
                                        slow_workers=[(2, 1, 1.1)]))
    a = analyze_table(build_table(trace, meta)).result
    v = a.verdict
    assert v.cause == Cause.NONE and v.workers == ()
    assert v.leading is not None and v.leading.cause == Cause.WORKER
    assert v.leading.workers == (Worker(2, 1),)
    doc = a.to_document()["verdict"]
    assert doc["leading"]["cause"] == "worker" and doc["leading"]["workers"] == ["2,1"]
    # the share is bounded (schema 1.3): a raw rem above 1 reads "all", never "108%"
    assert doc["leading"]["share"] == round(v.leading.share, 4) <= 1.0
    assert doc["leading"]["rem"] == round(v.leading.m.rem, 4)
    line = next(e for e in doc["evidence"] if "largest part is 'worker'" in e)
    assert "removes all of the slowdown" in line or "%" in line.split(":")[0]
    healthy = context("healthy")
    assert decide(healthy.engine, healthy.metrics, healthy.config).leading is None


def test_confidence_is_low_when_the_evidence_rests_on_one_step():
    """A slowdown carried by a single step of eight: resamples without that step fall below
    the threshold, so the verdict cannot be confident."""
    trace, meta, _ = generate(SynthSpec(dp=2, pp=2, steps=8, jitter=0.01, seed=5,
                                        gc_prob=0.07, gc_pause=2.0))
    a = analyze_table(build_table(trace, meta)).result
    hit = sum(1 for s in a.metrics.step_slowdown if s > 1.05)
    assert hit <= 2  # the pauses landed in one or two steps
    assert a.slowdown >= 1.1
    v = a.verdict
    assert v.cause == Cause.GC
    assert v.agreement < 0.9 and v.confidence < 0.9


def test_untrustworthy_result_lowers_confidence():
    trace, meta, _ = generate(SynthSpec(dp=2, pp=2, steps=6, jitter=0.01, seed=2,
                                        slow_workers=[(1, 0, 1.6)]))
    table = build_table(trace, meta)
    table.caveats.append("timestamps are coarse")  # what the reader finds in such a trace
    a = analyze_table(table).result
    assert not a.trustworthy
    assert a.verdict.cause == Cause.WORKER
    assert a.verdict.confidence <= 0.5


def test_the_bootstrap_is_reproducible():
    ctx = context("gc_inside")
    a = decide(ctx.engine, ctx.metrics, VerdictConfig(seed=7))
    b = decide(ctx.engine, ctx.metrics, VerdictConfig(seed=7))
    assert a.confidence == b.confidence and a.agreement == b.agreement


def test_hypotheses_are_listed_in_the_result_with_the_config():
    trace, meta, _ = generate(SynthSpec(seed=3, **CASES["slow"]))
    doc = analyze_table(build_table(trace, meta),
                        config=VerdictConfig(pause_factor=2.0)).result.to_document()
    assert doc["schema_version"] == "1.4"
    assert doc["verdict_config"]["pause_factor"] == 2.0
    assert doc["verdict_config"] == VerdictConfig(pause_factor=2.0).to_dict()
    causes = [h["cause"] for h in doc["verdict"]["hypotheses"]]
    assert causes == ["worker", "last_stage", "sequence_length", "gc", "pauses",
                      "communication", "host"]
    parts = doc["verdict"]["confidence_parts"]
    assert doc["verdict"]["confidence"] == pytest.approx(
        parts["agreement"] * parts["strength"] * parts["trust"], abs=1e-4)
    json.dumps(doc, allow_nan=False)


# -- configuration --------------------------------------------------------------------------
def test_config_from_yaml_and_assignments(tmp_path):
    f = tmp_path / "v.yaml"
    f.write_text("pause_factor: 2.5\nexplain: 0.6\n")
    cfg = VerdictConfig.from_file(f)
    assert (cfg.pause_factor, cfg.explain, cfg.threshold) == (2.5, 0.6, 1.1)
    cfg = VerdictConfig.from_assignments(["threshold=1.2", "bootstrap=50"], cfg)
    assert (cfg.threshold, cfg.bootstrap, cfg.pause_factor) == (1.2, 50, 2.5)


@pytest.mark.parametrize(("text", "message"), [
    ("pause-factor: 2\n", "did you mean 'pause_factor'"),
    ("explain: .nan\n", "finite number"),
    ("explain: 1.5\n", "at most 1"),
    ("threshold: 0.9\n", "at least 1"),
    ("bootstrap: 2.5\n", "integer"),
    ("pause_factor: [1]\n", "must be a number"),
    ("- 1\n- 2\n", "mapping"),
])
def test_bad_config_files_are_one_line_errors(tmp_path, text, message):
    f = tmp_path / "v.yaml"
    f.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        VerdictConfig.from_file(f)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_cli_settings_reach_the_result(tmp_path, capsys):
    trace, meta, _ = generate(SynthSpec(seed=3, **CASES["slow"]))
    from stragglers.synth import write_synth

    paths = write_synth(SynthSpec(seed=3, **CASES["slow"]), tmp_path / "job")
    cfg = tmp_path / "v.yaml"
    cfg.write_text("pause_factor: 3\n")
    out = tmp_path / "out"
    assert main(["analyze", str(paths["trace"]), "--meta", str(paths["meta"]), "--out", str(out),
                 "--no-timelines", "--verdict-config", str(cfg), "--verdict", "explain=0.4",
                 "--threshold", "1.05"]) == 0
    doc = json.loads((out / "result.json").read_text())
    assert doc["verdict_config"]["pause_factor"] == 3
    assert doc["verdict_config"]["explain"] == 0.4
    assert doc["verdict_config"]["threshold"] == 1.05
    assert main(["analyze", str(paths["trace"]), "--meta", str(paths["meta"]), "--out", str(out),
                 "--verdict", "nonsense=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown verdict setting 'nonsense'" in err[0]


# -- a verdict never contradicts its own evidence (issue 23, item 3) ------------------------
def _verdict_and_summary(spec: dict, cfg: VerdictConfig, caveat: str | None = None
                         ) -> tuple[dict, str]:
    from stragglers.analysis.result import summary

    trace, meta, _ = generate(SynthSpec(**spec))
    table = build_table(trace, meta)
    if caveat:
        table.caveats.append(caveat)
    a = analyze_table(table, config=cfg).result
    return a.to_document()["verdict"], summary(a)


def test_a_cause_that_explains_none_of_the_slowdown_is_unexplained():
    """Five workers slowed x1.5 (S 1.17), with at most one worker allowed as individual
    stragglers: the worker hypothesis does not apply, and communication ops explain none of
    the slowdown (0.3%). The verdict used to be `communication` blaming 8 workers with
    confidence 0.01 next to "communication ops explain none of the slowdown"."""
    spec = dict(dp=4, pp=4, steps=8, jitter=0.01, seed=3,
                slow_workers=[(0, 0, 1.5), (1, 1, 1.5), (2, 2, 1.5), (3, 3, 1.5), (1, 2, 1.5)])
    doc, text = _verdict_and_summary(spec, VerdictConfig(max_suspect_fraction=0.05))
    assert doc["cause"] == "unexplained" and doc["workers"] == [] and doc["confidence"] == 0
    assert doc["contributing"] == [] and doc["leading"] is None
    hyp = {h["cause"]: h for h in doc["hypotheses"]}
    assert not any(h["applicable"] for h in hyp.values())
    assert hyp["communication"]["why_not"].startswith("its ops explain none of the slowdown")
    assert hyp["communication"]["workers"] == []
    assert hyp["gc"]["why_not"].startswith("its ops explain none of the slowdown")
    assert any("no hypothesis applies" in e and "communication: its ops explain none" in e
               for e in doc["evidence"])
    # the printed text says the same
    lines = text.splitlines()
    assert "verdict: unexplained  confidence 0.00" in lines
    assert not any(line.startswith("verdict: communication") for line in lines)
    assert all("  - " + e in lines for e in doc["evidence"])


def test_a_verdict_with_confidence_zero_is_unexplained():
    """A slow worker in an untrustworthy result, with untrustworthy results given no weight
    (untrustworthy_factor 0): confidence 0, so the cause is not claimed."""
    spec = dict(dp=2, pp=2, steps=6, jitter=0.01, seed=2, slow_workers=[(1, 0, 1.6)])
    doc, text = _verdict_and_summary(spec, VerdictConfig(untrustworthy_factor=0.0),
                                     caveat="timestamps are coarse")
    assert doc["cause"] == "unexplained" and doc["workers"] == [] and doc["confidence"] == 0
    hyp = {h["cause"]: h for h in doc["hypotheses"]}
    assert hyp["worker"]["applicable"] and hyp["worker"]["workers"] == ["1,0"]
    assert any("'worker' (1,0) would explain" in e and "confidence is 0" in e
               for e in doc["evidence"])
    assert "verdict: unexplained  confidence 0.00" in text.splitlines()
    # with the default weight the same trace names the worker
    doc, _ = _verdict_and_summary(spec, VerdictConfig())
    assert doc["cause"] == "worker" and doc["workers"] == ["1,0"] and doc["confidence"] > 0
# -- the ranking rule (issue 20) ------------------------------------------------------------
def _finding(cause: Cause, rem: float, add: float | None) -> Finding:
    import numpy as np

    from stragglers.analysis.metrics import Characterisation

    ori, ideal = np.array([2.0, 2.0]), np.array([1.0, 1.0])
    m = Characterisation(ori, ideal, ori - rem, None if add is None else ideal + add)
    return Finding(cause=cause, applicable=True, m=m, evidence=f"{cause.value} evidence")


def test_ranked_by_removal_share_not_by_add():
    from stragglers.analysis.verdict.decide import _choose

    seq = _finding(Cause.SEQUENCE_LENGTH, 0.73, None)
    last = _finding(Cause.LAST_STAGE, 0.40, 0.81)
    assert _choose([last, seq], VerdictConfig()).cause == Cause.SEQUENCE_LENGTH


def test_add_breaks_a_tie_within_the_margin_and_the_evidence_says_so():
    from stragglers.analysis.verdict.decide import _choose, _overlap_line, _tie_line

    seq = _finding(Cause.SEQUENCE_LENGTH, 0.73, 0.70)
    last = _finding(Cause.LAST_STAGE, 0.69, 0.81)
    cfg = VerdictConfig()
    assert _choose([seq, last], cfg).cause == Cause.LAST_STAGE  # within 0.05: add decides
    assert _choose([seq, last], VerdictConfig(tie_margin=0.0)).cause == Cause.SEQUENCE_LENGTH
    line = _tie_line(last, [seq, last], cfg)
    assert line is not None and "add 0.81 against 0.70" in line
    both = _overlap_line(seq, [last], VerdictConfig(tie_margin=0.0))
    assert both is not None and both.endswith(
        "sequence length (73% removed) and the last stage (69%)")


def test_a_removal_share_above_one_reads_all_and_is_bounded():
    f = _finding(Cause.LAST_STAGE, 1.22, 1.30)
    assert f.share == 1.0 and f.m is not None and f.m.rem == pytest.approx(1.22)
    assert _finding(Cause.GC, -0.2, 0.1).share == 0.0


def test_the_bootstrap_applies_the_same_rule():
    import numpy as np

    from stragglers.analysis.verdict.decide import _winner

    share = np.array([[0.73, 0.73, 0.9], [0.69, 0.60, 0.2]])
    add = np.array([[0.70, 0.70, np.nan], [0.81, 0.81, 0.3]])
    assert _winner(share, add, 0.05).tolist() == [1, 0, 0]


@pytest.mark.parametrize("case", ["slow", "slow_last_dp2"])
def test_equal_microbatches_do_not_make_a_slow_worker_fast(case):
    """M_seq (equal microbatches) keeps a worker that is slower at every step: it removes
    none of a slow worker's slowdown (a loaded machine's correlated noise can open the
    sequence gate; before, M_seq then removed the worker's whole excess and, ranked by rem,
    `sequence_length` outranked `worker`)."""
    from stragglers.analysis.verdict.hypotheses.sequence import even_microbatches

    ctx = context(case)
    m_seq = ctx.with_values("M_seq", even_microbatches(ctx))
    worker = WorkerHypothesis().test(ctx)
    assert worker.applicable and worker.m is not None and worker.m.rem is not None
    assert m_seq.rem is not None and m_seq.rem < 0.1 < 0.8 < worker.m.rem


def test_equal_microbatches_remove_sequence_imbalance():
    """... while random sequence lengths (a worker above the mean in some steps, below in
    others) are still removed."""
    f = SequenceLengthHypothesis().test(context("seq"))
    assert f.applicable and f.m is not None and f.m.rem is not None and f.m.rem > 0.5


def test_pauses_on_one_rank_blame_it():
    """Pauses on DP rank 1 only (every stage of it), not on its peers: they stand out beyond
    the noise and rank 1's workers are blamed; the same pauses on every rank blame nobody
    (test_unrecorded_gc_is_pauses_not_gc)."""
    trace, meta, _ = generate(SynthSpec(dp=4, pp=2, steps=10, jitter=0.01, seed=3,
                                        gc_prob=0.5, gc_pause=0.5, gc_in_compute=True,
                                        gc_ranks=[1]))
    engine = prepare(build_table(trace, meta))
    ctx = VerdictContext(engine, compute_metrics(engine), VerdictConfig())
    f = PausesHypothesis().test(ctx)
    assert f.applicable and f.share > 0.5
    assert f.workers and {w.dp_rank for w in f.workers} == {1}
