"""The analyzer reproduces every figure of the reference traces (relative error < 1e-6)."""

from __future__ import annotations

import json

import pytest

from stragglers.analysis import analyze_files

RTOL = 1e-6


#: The study's traces, and the two made from them with launch delays (a slow data loader).
CASES = ["AR", "ST", "loader", "loadersome"]
#: Made from which trace: their blocking figures are that trace's.
SOURCE = {"AR": "AR", "ST": "ST", "loader": "AR", "loadersome": "ST"}


@pytest.fixture(scope="module", params=CASES)
def case(request, ref_dir):
    name = request.param
    result = analyze_files(ref_dir / f"trace-{name}.parquet", ref_dir / f"meta-{name}.yaml"
                           ).to_document()
    ref = json.loads((ref_dir / f"result-{name}.json").read_text())
    mw = json.loads((ref_dir / f"mw-{name}.json").read_text())
    ms = json.loads((ref_dir / f"ms-{name}.json").read_text())
    return name, result, ref, mw, ms


def close(a: float, b: float) -> bool:
    return abs(a - b) <= RTOL * abs(b)


def assert_map(ours: dict, theirs: dict, what: str) -> None:
    assert set(ours) == set(theirs), f"{what}: keys differ"
    bad = {k: (ours[k], v) for k, v in theirs.items() if not close(ours[k], v)}
    assert not bad, f"{what}: {len(bad)} value(s) off, e.g. {next(iter(bad.items()))}"


def test_headline(case):
    _, r, ref, _, _ = case
    assert close(r["slowdown"], ref["blocking_slowdown"])
    assert close(r["discrepancy"], ref["launch_slowdown"])
    assert close(r["waste"], 1 - 1 / ref["blocking_slowdown"])
    assert r["trustworthy"]


@pytest.mark.parametrize("by", ["dp_rank", "stage", "optype"])
def test_launch_attribution(case, by):
    """The published launch attribution (``launch_decompose``), overall and per step; null
    where the discrepancy is below 1.03 (AR, ST)."""
    _, r, ref, _, _ = case
    theirs = ref[f"launch_decompose_by_{by}"]
    if theirs is None:
        assert r["launch_attribution"] is None
        assert r["launch_attribution_per_step"] is None
        return
    assert_map(r["launch_attribution"][by], theirs, f"launch {by}")
    per_step = {st: d[by] for st, d in r["launch_attribution_per_step"].items()}
    theirs_ps = ref[f"launch_decompose_by_{by}_per_step"]
    assert set(per_step) == set(theirs_ps)
    for st in theirs_ps:
        assert_map(per_step[st], theirs_ps[st], f"launch {by} step {st}")


def test_launch_blocking_unchanged(case, ref_dir):
    """Launch delays leave the blocking figures alone: a trace made with a slow data loader
    has the S, attributions, M_W and M_S of the trace it was made from."""
    name, r, ref, _, _ = case
    src = json.loads((ref_dir / f"result-{SOURCE[name]}.json").read_text())
    assert close(r["slowdown"], src["blocking_slowdown"])
    for by in ("dp_rank", "stage", "optype"):
        assert_map(r["attribution"][by], src[f"blocking_decompose_by_{by}"], by)


def test_step_times(case):
    _, r, ref, _, _ = case
    assert_map(r["step_time"]["actual"], ref["step_t_base"], "actual")
    assert_map(r["step_time"]["no_delay"], ref["step_t_nodelay"], "no-delay")
    assert_map(r["step_time"]["ideal"], ref["step_t_noblk"], "ideal")
    assert_map(r["step_slowdown"], ref["blocking_step_slowdown"], "step slowdown")


@pytest.mark.parametrize("by", ["dp_rank", "stage", "optype"])
def test_attribution(case, by):
    _, r, ref, _, _ = case
    assert_map(r["attribution"][by], ref[f"blocking_decompose_by_{by}"], by)
    per_step = {st: d[by] for st, d in r["attribution_per_step"].items()}
    theirs = ref[f"blocking_decompose_by_{by}_per_step"]
    assert set(per_step) == set(theirs)
    for st in theirs:
        assert_map(per_step[st], theirs[st], f"{by} step {st}")


def test_characterisation(case):
    _, r, _, mw, ms = case
    for ours, theirs in ((r["m_w"], mw), (r["m_s"], ms)):
        for a, b in (("rem", "rem"), ("add", "add"), ("t_ori", "tori"), ("t_ideal", "tideal"),
                     ("t_rem", "trem"), ("t_add", "tadd")):
            assert close(ours[a], theirs[b]), (a, ours[a], theirs[b])


def test_verdicts(case):
    name, r, _, _, _ = case
    v = r["verdict"]
    if SOURCE[name] == "AR":
        assert v["cause"] == "worker"
        assert v["workers"] == ["0,0"]
        top = max(r["attribution"]["worker"].items(), key=lambda kv: kv[1])
        assert top[0] == "0,0"
    else:
        assert v["cause"] == "last_stage"
        assert sorted(v["workers"]) == ["0,3", "1,3"]
    assert v["confidence"] > 0.9


def test_exact_worker_slowdown_ar(case):
    name, r, _, _, _ = case
    name = SOURCE[name]
    sw = r["attribution"]["worker"]
    assert r["attribution"]["worker_method"] == "exact"
    # The exact S_w of the slowed worker is at least the min approximation and close to S.
    assert sw["0,0" if name == "AR" else "1,3"] >= r["worker_score"]["0,0" if name == "AR"
                                                                    else "1,3"] - 1e-12
    if name == "AR":
        assert abs(sw["0,0"] - r["slowdown"]) < 0.02


#: The data loader of each launch-delay trace: (worker it delays, share of the steps).
LOADER = {"loader": ("0,0", 1.0), "loadersome": ("1,0", 11 / 32)}


def test_host_time_named(case):
    """The slow data loader is named, with the worker and its first-op share, beside the
    blocking cause; the discrepancy it explains no longer makes the result untrustworthy."""
    name, r, _, _, _ = case
    v = r["verdict"]
    host = next(h for h in v["hypotheses"] if h["cause"] == "host")
    if name not in LOADER:
        assert not host["applicable"]
        assert all(c["cause"] != "host" for c in v["contributing"])
        return
    worker, _ = LOADER[name]
    assert host["applicable"] and host["workers"] == [worker]
    assert host["gates"]["first_op_share"] > 0.8
    assert host["gates"]["residual_discrepancy"] < 1.01
    assert [c["workers"] for c in v["contributing"] if c["cause"] == "host"] == [[worker]]
    assert r["trustworthy"] and r["untrustworthy_reasons"] == []
