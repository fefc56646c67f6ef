"""Synthetic traces: same dependency rules as the analyzer, injected stragglers found."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stragglers.analysis import analyze_table
from stragglers.analysis.scenarios import Scenario
from stragglers.model import build_graph
from stragglers.synth import SynthSpec, generate
from stragglers.synth.generator import _schedule_table
from stragglers.trace import build_table, schema

SHAPES = [
    dict(dp=2, pp=4, microbatches=8),
    dict(dp=3, pp=2, microbatches=5, overlap=True),
    dict(dp=1, pp=4, microbatches=4),
    dict(dp=4, pp=1, microbatches=3),
    dict(dp=2, pp=4, vpp=2, microbatches=8),
    dict(dp=2, pp=2, vpp=3, microbatches=4, overlap=True),
]


def analyse(**kw):
    trace, meta, truth = generate(SynthSpec(**kw))
    return analyze_table(build_table(trace, meta)), truth


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_unperturbed_is_ideal(shape):
    a, truth = analyse(steps=3, **shape)
    r = a.result.to_document()
    assert r["slowdown"] == pytest.approx(1.0, abs=1e-12)
    assert r["discrepancy"] == pytest.approx(1.0, abs=1e-12)
    assert r["verdict"]["cause"] == "none"
    assert truth["expected"]["causes"] == [{"cause": "none", "workers": []}]
    assert r["counts"]["transfer_clipped_to_zero"] == 0


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_analyzer_rebuilds_the_generator_graph(shape):
    spec = SynthSpec(steps=2, jitter=0.05, **shape)
    sched, _ = _schedule_table(spec)
    g_gen = build_graph(sched)
    trace, meta, _ = generate(spec)
    table = build_table(trace, meta)
    g_ana = build_graph(table)

    def ident(t, n):
        return (int(t.node_stage[n]), schema.OPTYPES[t.node_optype[n]], int(t.node_seq[n]))

    def edges(t, g):
        return {(ident(t, d), ident(t, n)) for n in range(g.n_nodes) for d in g.deps[n]}

    def groups(t, g):
        return {(frozenset(ident(t, m) for m in grp), bool(sync))
                for grp, sync in zip(g.groups, g.group_dp_sync, strict=True)}

    assert edges(sched, g_gen) == edges(table, g_ana)
    assert groups(sched, g_gen) == groups(table, g_ana)
    if shape.get("vpp", 1) > 1:
        assert g_ana.noop_chunk.sum() > 0  # interleaved: boundary P2P ops are no-ops


def test_slow_worker_blamed():
    a, truth = analyse(dp=4, pp=4, microbatches=8, steps=6, jitter=0.01,
                       slow_workers=[(2, 1, 1.5)])
    r = a.result.to_document()
    assert r["verdict"]["cause"] == "worker"
    assert r["verdict"]["workers"] == ["2,1"] == truth["expected"]["causes"][0]["workers"]
    sw = r["attribution"]["worker"]
    assert max(sw, key=sw.get) == "2,1"
    assert r["slowdown"] > 1.15


def test_two_slow_workers_blamed():
    a, _ = analyse(dp=8, pp=4, microbatches=8, steps=6, jitter=0.02,
                   slow_workers=[(3, 0, 1.3), (5, 2, 1.3)])
    assert a.result.to_document()["verdict"]["cause"] == "worker"
    assert sorted(a.result.to_document()["verdict"]["workers"]) == ["3,0", "5,2"]


def test_slow_worker_interleaved():
    a, _ = analyse(dp=4, pp=4, vpp=2, microbatches=8, steps=4, jitter=0.01,
                   slow_workers=[(2, 3, 1.5)])
    v = a.result.to_document()["verdict"]
    assert (v["cause"], v["workers"]) == ("worker", ["2,3"])


def test_heavy_last_stage():
    a, truth = analyse(dp=2, pp=4, steps=6, jitter=0.01, heavy_last_stage=1.4)
    v = a.result.to_document()["verdict"]
    assert v["cause"] == "last_stage"
    assert sorted(v["workers"]) == truth["expected"]["causes"][0]["workers"]
    assert a.result.to_document()["m_s"]["rem"] > 0.8


def test_slow_worker_and_heavy_last_stage():
    a, _ = analyse(dp=4, pp=4, steps=8, jitter=0.01, slow_workers=[(1, 1, 1.8)],
                   heavy_last_stage=1.25)
    v = a.result.to_document()["verdict"]
    assert v["cause"] == "worker" and v["workers"] == ["1,1"]
    # The heavy last stage applies, but the slow worker masks it: fixing it alone removes
    # little (rem), though alone it would cause a quarter (add). Ranked by rem, it is not
    # a contributing cause (schema 1.3).
    last = next(h for h in v["hypotheses"] if h["cause"] == "last_stage")
    assert last["applicable"] and last["rem"] < 0.1 and last["add"] > 0.2
    assert "last_stage" not in [c["cause"] for c in v["contributing"]]


def test_sequence_length_imbalance():
    a, _ = analyse(dp=2, pp=4, steps=6, jitter=0.01, seq_len_sigma=0.5)
    r = a.result.to_document()
    assert r["verdict"]["cause"] == "sequence_length"
    assert r["fb_signal"]["correlation_within"] > 0.9


def test_uncoordinated_gc():
    a, _ = analyse(dp=2, pp=4, steps=10, jitter=0.01, gc_prob=0.2, gc_pause=1.0)
    assert a.result.to_document()["verdict"]["cause"] == "gc"


def test_gc_pauses_inside_compute():
    a, _ = analyse(dp=4, pp=4, steps=10, jitter=0.01, gc_prob=0.15, gc_pause=0.5,
                   gc_in_compute=True)
    r = a.result.to_document()
    assert r["m_gc"]["rem"] == 0.0  # the gc ops themselves are clean
    # GC inside compute that nothing records as GC: uncoordinated pauses, never "gc".
    assert r["verdict"]["cause"] == "pauses"
    assert r["pauses"]["workers_hit"] >= 8


def test_slow_link():
    a, truth = analyse(dp=2, pp=4, steps=6, jitter=0.01, slow_links=[(0, 1, 200)])
    v = a.result.to_document()["verdict"]
    assert v["cause"] == "communication"
    assert set(v["workers"]) == set(truth["expected"]["causes"][0]["workers"])


def test_launch_gaps_raise_discrepancy_only():
    a, _ = analyse(dp=2, pp=4, steps=6, launch_gap_prob=0.3, launch_gap=0.01)
    r = a.result.to_document()
    assert r["slowdown"] == pytest.approx(1.0, abs=1e-12)
    assert r["discrepancy"] > 1.01
    # With the launch delays the simulator reproduces the recorded timeline exactly.
    m = a.engine
    res = m.timeline(Scenario.original(), with_delays=True)
    actual = np.array([r["step_time"]["actual"][str(st)] for st in r["steps"]])
    assert np.allclose(res.step_time[0], actual, rtol=0, atol=1e-9)


def test_jsonl_matches_parquet(tmp_path):
    from stragglers.analysis import analyze_files
    from stragglers.synth import write_synth

    spec = SynthSpec(dp=2, pp=2, microbatches=4, steps=3, jitter=0.02, seed=3,
                     slow_workers=[(1, 0, 1.4)])
    a = write_synth(spec, tmp_path / "p")
    b = write_synth(spec, tmp_path / "j", fmt="jsonl")
    ra = analyze_files(a["trace"], a["meta"]).to_document()
    rb = analyze_files(b["trace"], b["meta"]).to_document()
    assert ra["slowdown"] == pytest.approx(rb["slowdown"], rel=1e-12)
    assert ra["attribution"] == rb["attribution"]


def test_synthesize_returns_what_truth_json_holds(tmp_path):
    import json

    from stragglers.synth import synthesize

    job = synthesize(SynthSpec(dp=2, pp=2, microbatches=2, steps=2, heavy_last_stage=1.2,
                               slow_workers=[(1, 0, 1.5)], seq_len_sigma=0.3), tmp_path)
    truth = json.loads(job.files["truth"].read_text(encoding="utf-8"))
    assert (job.n_ops, job.n_workers) == (truth["n_ops"], truth["n_workers"])
    assert [[c.cause, list(c.workers)] for c in job.injected] == [
        [c["cause"], c["workers"]] for c in truth["expected"]["causes"]]
    # and against the spec itself: 2 x 2 workers, the written trace's ops, the three causes
    trace = pd.read_parquet(job.files["trace"])
    assert job.n_workers == 4 and job.n_ops == len(trace)
    assert [(c.cause, tuple(c.workers)) for c in job.injected] == [
        ("worker", ("1,0",)), ("last_stage", ("0,1", "1,1")), ("sequence_length", ())]
    assert job.summary().splitlines()[1] == (
        "injected: worker 1,0; last_stage 0,1 1,1; sequence_length")


def test_large_discrepancy_is_untrustworthy_unless_located():
    """Launch gaps on three DP ranks of four: nothing locates them (no rank stands out from
    the median, they are not common to every rank): untrustworthy. The same gaps on every
    rank are common host overhead: the discrepancy is explained, the result trusted."""
    a, _ = analyse(dp=4, pp=1, steps=8, jitter=0.01, seed=1, launch_gap_prob=0.2,
                   launch_gap=0.08, launch_gap_ranks=[0, 1, 2])
    r = a.result.to_document()
    assert r["discrepancy"] > 1.05
    assert r["trustworthy"] is False
    a, _ = analyse(dp=2, pp=2, microbatches=4, steps=4, launch_gap_prob=0.8, launch_gap=0.05)
    r = a.result.to_document()
    assert r["discrepancy"] > 1.05
    assert r["trustworthy"] is True


# --- issue 8: unchecked options, sizes, atomic output ---------------------------------------

def synth_cli(tmp_path, capsys, *opts):
    from stragglers.cli import main

    out = tmp_path / "out"
    code = main(["synth", "--dp", "2", "--pp", "2", "--microbatches", "2", "--steps", "2",
                 *opts, "--out", str(out)])
    return code, capsys.readouterr().err.strip(), out


@pytest.mark.parametrize("opts,needle", [
    (["--slow-worker", "0,0:nan"], "argument --slow-worker: factor in '0,0:nan': expected a "
                                   "finite number"),
    (["--heavy-last-stage", "-1"], "argument --heavy-last-stage: expected a factor >= 1"),
    (["--heavy-last-stage", "0"], "argument --heavy-last-stage: expected a factor >= 1"),
    (["--launch-gaps", "0.5:-10"], "argument --launch-gaps: seconds in '0.5:-10': expected a "
                                   "number >= 0"),
    (["--jitter", "-1"], "argument --jitter: expected a number >= 0"),
    (["--jitter", "nan"], "argument --jitter: expected a finite number"),
    (["--jitter", "5"], "--jitter: must be a finite number >= 0 and <= 2"),
    (["--gc", "0.5:inf"], "argument --gc: seconds in '0.5:inf': expected a finite number"),
    (["--gc", "1.5:1"], "argument --gc: probability in '1.5:1': expected a probability"),
    (["--gc", "0.5:0"], "--gc: a pause of 0 seconds injects nothing"),
    (["--gc-in-compute"], "--gc-in-compute: needs --gc"),
    (["--gc-recorded"], "--gc-recorded: needs --gc"),
    (["--seq-len-sigma", "-1"], "argument --seq-len-sigma: expected a number >= 0"),
    (["--slow-link", "0,0:inf"], "argument --slow-link: factor in '0,0:inf'"),
    (["--slow-worker", "0,0:1"], "--slow-worker 0,0:1.0: must be a finite number > 1"),
    (["--slow-worker", "0,0:2", "--slow-worker", "0,0:3"], "0,0 is given twice"),
    (["--seed", "-1"], "argument --seed: expected an integer >= 0"),
    (["--steps", "0"], "argument --steps: expected an integer >= 1"),
    (["--tp", "9" * 40], "argument --tp: integer too large"),
    (["--heavy-last-stage", "1e9"], "the injections give a duration of 1.8e+08 s (backward-recv"),
])
def test_synth_option_rejected_with_its_name(tmp_path, capsys, opts, needle):
    code, err, out = synth_cli(tmp_path, capsys, *opts)
    assert code == 2
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not out.exists()  # nothing written


def test_synth_sizes_are_checked_before_generating(tmp_path, capsys):
    import tracemalloc

    tracemalloc.start()
    try:
        code, err, _ = synth_cli(tmp_path, capsys, "--dp", "1000000")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 2 and "2,000,000 workers" in err and "STRAGGLERS_MAX_WORKERS" in err, err
    assert peak < 16 * 2**20
    code, err, _ = synth_cli(tmp_path, capsys, "--microbatches", "100000000")
    assert code == 2 and "ops (dp x pp x ops per worker-step x steps)" in err
    assert "STRAGGLERS_MAX_SYNTH_OPS" in err


def test_synth_spec_checked_for_api_callers():
    from stragglers.errors import InputError

    with pytest.raises(InputError, match="--jitter: must be a finite number"):
        generate(SynthSpec(jitter=float("nan")))
    with pytest.raises(InputError, match="--heavy-last-stage"):
        generate(SynthSpec(heavy_last_stage=float("inf")))


def test_synth_output_is_all_or_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "truth.json").write_text("old")
    code, err, _ = synth_cli(tmp_path, capsys, "--heavy-last-stage", "1e9")
    assert code == 2
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "truth.json"]
    assert (out / "truth.json").read_text() == "old"  # a failed run leaves the folder as it was
    code, err, _ = synth_cli(tmp_path, capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [".stragglers-outputs.json", "meta.yaml",
                                                     "notes.txt", "trace.parquet", "truth.json"]
    assert (out / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    from stragglers.cli import main

    assert main(["synth", "--out", str(tmp_path / "file")]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err
