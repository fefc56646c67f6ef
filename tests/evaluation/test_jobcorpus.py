"""The record-stream corpus (stragglers.evaluation.jobcorpus): determinism and true labels."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from scipy.stats import trim_mean

from stragglers.evaluation.jobcorpus import (
    AC_MIN_CYCLES,
    AC_SLOW_ITERS,
    AC_SLOWDOWN,
    AC_STEPS,
    EVENT_LOSS,
    FAMILIES,
    FB_ERR,
    FB_KINDS,
    FB_MOVE_HEALTHY,
    FB_NODE,
    FB_REHASH_MAX,
    HELD_OUT,
    LD_MEAN_MIN,
    LD_RUNG,
    LD_RUNGS,
    LD_TOTAL,
    LEAD_ITERS,
    MIN_EVENT_ITERS,
    NODE_SLOW_ITERS,
    NODE_SLOWDOWN,
    NU_KINDS,
    NU_MEMBW,
    NU_NODE,
    NV_KINDS,
    NV_NODE,
    OB_KINDS,
    OB_NODE,
    PC_KINDS,
    PC_NODE,
    PP_CHANGE_RATIO,
    PP_SETTLE,
    PP_SLOW_ITERS,
    PP_SLOWDOWN,
    PW_KINDS,
    PW_MIN_CLOCK,
    PW_NODE,
    RO_KINDS,
    RO_TP,
    SAMPLE_STRIDES,
    SCENARIOS,
    SHORT_ITERS,
    SL_SLOW_ITERS,
    SL_SLOWDOWN,
    SLOWDOWN_EVENT,
    SPAN_CLEAR,
    SPAN_OVERSHOOT,
    ST_KINDS,
    ST_VM,
    WN_KINDS,
    WN_SITE,
    JobEvent,
    JobSeries,
    _backward,  # the hardware queues' backward pass, checked below
    _capped_lognormal,  # the responses' lengths, checked below
    _circular_overlap,  # two transfers that repeat every step, checked below
    _CompileSlow,
    _Drives,  # the optimizer's drive I/O of a node, checked below
    _ecmp,  # ECMP hashing, checked below
    _Experts,  # the MoE layers' time, checked below
    _Graphs,  # the compile schedule, checked below
    _Links,  # the PCIe links and switches of a node, checked below
    _MoeSlow,
    _Nodes,  # the power capping of a node, checked below
    _NodeSlow,
    _Observers,  # the observability overhead of the observer ranks, checked below
    _phase_busy,  # the launch queue, checked below
    _Rollout,  # the generation workers of an RL step, checked below
    _Sites,  # the sites of a job across a wide-area link, checked below
    _Sockets,  # the host CPU placement of a node, checked below
    _Spines,  # the leaf / spine fabric of a ring all-reduce, checked below
    _Vms,  # the steal time of a cloud VM's vCPUs, checked below
    generate_call_job,
    generate_job_corpus,
    generate_series,
)

#: The families of issue 29: events defined by the rise of the iteration time.
NEW = ("failslow", "ramp", "short", "hump", "warmup_onset", "reconfig", "ckpt_burst")


@pytest.fixture(scope="module")
def corpus() -> list[JobSeries]:
    return generate_job_corpus(7, scale=0.1)


def _same(a: JobSeries, b: JobSeries) -> bool:
    return (a.events == b.events and np.array_equal(a.iter, b.iter)
            and np.array_equal(a.rank, b.rank)
            and np.array_equal(a.duration, b.duration, equal_nan=True)
            and np.array_equal(a.ts, b.ts, equal_nan=True))


def test_deterministic_per_seed_and_different_across_seeds(corpus) -> None:
    again = generate_job_corpus(7, scale=0.1)
    assert [s.name for s in corpus] == [s.name for s in again]
    assert all(_same(a, b) for a, b in zip(corpus, again, strict=True))
    other = generate_job_corpus(8, scale=0.1)
    assert not any(_same(a, b) for a, b in zip(corpus, other, strict=True))
    # a series does not depend on how many series the scale asks for
    assert _same(generate_series(7, "greyhound", "injected", 0),
                 next(s for s in corpus if s.name == "greyhound/injected/000"))


def test_every_family_and_scenario_is_present(corpus) -> None:
    assert {s.family for s in corpus} == set(FAMILIES)
    assert {(s.family, s.scenario) for s in corpus} == {(f, s) for f, s, _, _ in SCENARIOS}
    assert len(generate_job_corpus(0, scale=1.0, families=("flapping",))) == 24
    assert sum(c for _, _, c, _ in SCENARIOS) in range(345, 940)
    assert set(HELD_OUT) < set(FAMILIES)


def test_records_are_well_formed(corpus) -> None:
    for s in corpus:
        n = s.iter.size
        assert s.rank.dtype == np.int64 and s.iter.dtype == np.int64
        assert s.ts.dtype == np.float64 and s.duration.dtype == np.float64
        assert s.rank.size == s.ts.size == s.duration.size == s.level.size == n
        assert np.all(np.isfinite(s.ts) | np.isfinite(s.duration))  # one of them at least
        ok = np.isfinite(s.duration)
        assert np.all(s.duration[ok] > 0)
        for r in range(s.ranks):  # per rank, timestamps never go back
            t = s.ts[s.rank == r]
            t = t[np.isfinite(t)]
            assert np.all(np.diff(t) > 0)
        scenario_positive = {(f, sc): p for f, sc, _, p in SCENARIOS}[(s.family, s.scenario)]
        assert s.positive == scenario_positive, s.name


def test_labels_are_true_by_construction(corpus) -> None:
    checked = 0
    for s in corpus:
        if s.family in ("contention", "megatron", "bimodal_replay", "ladder",
                        "seqlen", "accum", "memory", "prefetch", "pipeline"):  # own rules
            continue
        factor = s.level / s.healthy
        for e in s.events:
            if s.family in NEW:  # slowdowns of the iteration time, some shorter
                assert e.end_iter - e.start_iter >= SHORT_ITERS[0]
                if e.kind != "step":
                    assert (e.kind == "minor") == (e.loss / (1 - e.loss) < SLOWDOWN_EVENT)
                    continue
            assert e.end_iter - e.start_iter >= MIN_EVENT_ITERS
            assert (e.kind == "minor") == (e.loss < EVENT_LOSS)
            assert e.peak_loss >= e.loss - 1e-12
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            if e.ranks:
                inside &= np.isin(s.rank, e.ranks)
                assert not np.any(factor[~np.isin(s.rank, e.ranks)] > 1 + 1e-9)
            assert inside.any()
            level = 1.0 / (1.0 - e.loss)
            if e.kind in ("step", "injected", "minor") and not s.mean_of_stride:
                overlaps = [o for o in s.events if o is not e and o.start_iter < e.end_iter
                            and e.start_iter < o.end_iter]
                if not overlaps:  # the level inside over the noise-free healthy level
                    assert np.allclose(factor[inside], level), s.name
                    checked += 1
                else:
                    assert np.all(factor[inside] >= level - 1e-9)
            if e.kind == "flapping":
                assert np.isclose(factor[inside].max(), level)
                assert np.isclose(factor[inside].min(), 1.0)  # fast phases inside
        if not s.events:
            assert np.allclose(factor, 1.0), s.name
    assert checked >= 8


def test_restarts_replay_iterations(corpus) -> None:
    restarts = [s for s in corpus if s.family == "restart"]
    assert restarts and all(s.restarts >= 1 for s in restarts)
    for s in restarts:
        back = np.flatnonzero(np.diff(s.iter) <= 0)
        assert back.size >= 1
        # the iteration number goes back and the timestamp jumps forward by the downtime
        t = s.ts
        if np.isfinite(t).all():
            gaps = np.diff(t)[back]
            assert np.all(gaps >= 60.0)
        # labelled iterations are never replayed
        for e in s.events:
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            assert np.unique(s.iter[inside]).size == inside.sum()


def test_sampled_families_have_their_stride(corpus) -> None:
    sampled = [s for s in corpus if s.family == "sampled"]
    assert {s.mean_of_stride for s in sampled} == {True, False}
    for s in sampled:
        assert s.stride in SAMPLE_STRIDES
        assert np.all(s.iter % s.stride == 0)
        assert np.all(np.diff(s.iter) == s.stride)
        for e in s.events:
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            assert inside.sum() >= 3
    others = [s for s in corpus if s.family != "sampled"]
    assert all(s.stride == 1 and not s.mean_of_stride for s in others)


def test_multirank_one_slow_rank(corpus) -> None:
    multi = [s for s in corpus if s.family == "multirank"]
    assert all(2 <= s.ranks <= 4 for s in multi)
    one = [e for s in multi if s.scenario == "one_slow" for e in s.events]
    assert one and all(len(e.ranks) == 1 for e in one)
    for s in multi:  # interleaved by iteration: ranks alternate
        assert set(s.rank[:s.ranks].tolist()) == set(range(s.ranks))


def test_missing_records_and_minor_events_appear() -> None:
    big = generate_job_corpus(0, scale=0.5)
    assert sum(s.dropped > 0 for s in big) >= 10
    assert {s.family for s in big if s.dropped} >= {"greyhound", "multirank"}
    assert any(e.kind == "minor" for s in big for e in s.events)
    assert any(not s.positive and s.events for s in big)  # a negative with a minor event
    for s in big:  # records of labelled events are never dropped
        for e in s.events:
            for r in (e.ranks or range(s.ranks)):
                it = s.iter[(s.rank == r) & (s.iter >= e.start_iter) & (s.iter < e.end_iter)]
                if s.restarts == 0:
                    assert np.all(np.diff(it) == s.stride), s.name


def test_issue_29_families_are_true_by_construction(corpus) -> None:
    """Every labelled slowdown of the new families is slow where it says, by at least its
    own definition, and the iteration time outside the events is the healthy one."""
    seen = set()
    for s in (x for x in corpus if x.family in NEW and x.family != "contention"):
        factor = s.level / s.healthy
        inside_any = np.zeros(s.iter.size, dtype=bool)
        for e in s.events:
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            inside_any |= inside
            seen.add(e.kind)
            rise = factor[inside] - 1.0
            s_e = e.loss / (1.0 - e.loss)
            if e.kind in ("short", "warmup", "step"):  # a step: the level everywhere
                assert np.allclose(rise, s_e) or s.family == "reconfig", s.name
            elif e.kind in ("hump", "ramp"):  # it reaches its level, from below
                assert rise.max() <= s_e + 1e-9 and rise.max() >= 0.9 * s_e, s.name
            elif e.kind == "failslow":  # fluctuating around its mean
                assert abs(np.mean(rise) - s_e) < 0.35 * s_e, s.name
        if s.family != "ramp":  # a ramp cools back after its label
            assert np.allclose(factor[~inside_any], 1.0), s.name
    assert seen >= {"failslow", "ramp", "short", "hump", "warmup", "minor"}


def test_contention_labels() -> None:
    """The replay-style family: slowdowns (+10-50 %, step / ramp / hump) are labelled by their
    level; contention episodes are unlabelled up to CT_STALL_MAX iterations (an alert there
    is spurious), optional below MIN_EVENT_ITERS, and labelled by their mean rise from
    there; nothing else is slow."""
    from stragglers.evaluation.jobcorpus import CT_STALL_MAX

    kinds: set[str] = set()
    unlabelled = 0
    for scenario in ("slow", "episodes"):
        for i in range(6):
            s = generate_series(5, "contention", scenario, i)
            assert s.positive == (scenario == "slow")
            factor = s.level / s.healthy
            inside_any = np.zeros(s.iter.size, dtype=bool)
            for e in s.events:
                kinds.add(e.kind)
                inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
                inside_any |= inside
                rise = factor[inside] - 1.0
                s_e = e.loss / (1.0 - e.loss)
                length = e.end_iter - e.start_iter
                assert length > CT_STALL_MAX
                if e.kind == "shift":
                    assert np.allclose(rise, s_e) and s_e >= SLOWDOWN_EVENT
                elif e.kind in ("ramp", "hump"):
                    assert s_e - 1e-9 <= rise.max() <= s_e + 1e-9 and s_e >= SLOWDOWN_EVENT
                else:  # a contention episode: its mean rise
                    assert np.isclose(np.mean(rise), s_e)
                    major = length >= MIN_EVENT_ITERS and s_e >= SLOWDOWN_EVENT
                    assert (e.kind == "contention") == major
                    assert e.kind in ("contention", "minor")
                if e.kind != "minor":
                    assert e.start_iter >= 300
            # outside the labels: healthy, or a short unlabelled episode
            out = np.flatnonzero(~inside_any & (factor > 1.0 + 1e-9))
            if out.size:
                runs = np.split(out, np.flatnonzero(np.diff(out) > 1) + 1)
                assert max(r.size for r in runs) <= CT_STALL_MAX
                unlabelled += len(runs)
    assert kinds >= {"shift", "ramp", "hump", "minor"}
    assert unlabelled > 0


def test_warm_up_onsets_start_inside_the_warm_up_and_reconfig_renumbers(corpus) -> None:
    for s in corpus:
        if s.family == "warmup_onset":
            assert all(e.start_iter <= 40 for e in s.events)
        if s.family == "reconfig":
            assert s.restarts >= 1
            assert np.any(np.diff(s.iter) != 1)  # back, or far ahead


def test_call_job_truth() -> None:
    """The call-record job: its step numbers give the job iterations (replays once), the
    records the executed ones, and restarts replay steps."""
    job = generate_call_job(3, ranks=2, restarts=2)
    steps = [c.step for c in job.records if c.rank == 0 and c.step is not None and c.step >= 0]
    assert max(steps) == job.job_iterations
    assert job.executed[0] == job.executed[1] >= job.job_iterations
    assert sum(1 for a, b in zip(steps, steps[1:], strict=False) if b < a) >= 1
    bare = generate_call_job(3, ranks=2, restarts=2, with_step=False)
    assert all(c.step is None for c in bare.records)
    assert [c.ts for c in bare.records] == [c.ts for c in job.records]


def test_megatron_labels() -> None:
    """The component replay: every slowdown raises the mean iteration time by its labelled
    rise (+10-50 % at its plateau) and nothing else is slow; negatives carry no event."""
    kinds: set[str] = set()
    for scenario in ("slow", "healthy"):
        for i in range(8):
            s = generate_series(5, "megatron", scenario, i)
            assert s.positive == (scenario == "slow")
            factor = s.level / s.healthy
            inside_any = np.zeros(s.iter.size, dtype=bool)
            for e in s.events:
                kinds.add(e.kind)
                inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
                inside_any |= inside
                s_e = e.loss / (1.0 - e.loss)
                assert 0.10 - 1e-9 <= s_e <= 0.50 + 1e-9 and e.kind != "minor"
                assert e.end_iter - e.start_iter >= MIN_EVENT_ITERS
                # the absolute rise over the series' mean healthy time peaks at s_e
                rise = (s.level[inside] - s.healthy[inside]) / np.median(s.healthy)
                assert 0.5 * s_e < rise.max() < 2.5 * s_e
            assert np.allclose(factor[~inside_any], 1.0)
    assert kinds <= {"shift", "ramp", "hump"} and len(kinds) >= 2


def test_bimodal_replay_labels() -> None:
    """Healthy modes by a Markov chain of dwells: negatives carry no event and stay healthy;
    every slowdown is labelled by its rise over the healthy mean (+10-50 %, or the highest
    mode stuck for 80 iterations or more) and is no healthy mode: at its plateau the level is
    beyond every mode (a shift) or the highest mode all along (stuck)."""
    kinds: set[str] = set()
    dwells: list[int] = []
    for scenario in ("slow", "healthy"):
        for i in range(10):
            s = generate_series(5, "bimodal_replay", scenario, i)
            assert s.positive == (scenario == "slow")
            factor = s.level / s.healthy
            inside_any = np.zeros(s.iter.size, dtype=bool)
            # the healthy modes: runs of the noise-free level at one mode
            h = s.healthy / np.median(s.healthy)
            for e in s.events:
                kinds.add(e.kind)
                inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
                inside_any |= inside
                s_e = e.loss / (1.0 - e.loss)
                assert 0.10 - 1e-9 <= s_e <= 0.50 + 1e-9 and e.kind != "minor"
                assert e.start_iter >= 300 and e.end_iter - e.start_iter >= MIN_EVENT_ITERS
                if e.kind == "stuck":
                    assert e.end_iter - e.start_iter >= 80 or e.end_iter == s.iter.max() + 1
                    lv = s.level[inside] / s.level[inside][0]
                    assert np.ptp(np.log(lv)) < 0.2  # one mode (and the jitter) throughout
                elif e.kind == "shift":
                    assert np.allclose(factor[inside], 1.0 + s_e)
                else:
                    assert np.isclose(factor[inside].max(), 1.0 + s_e)
            assert np.allclose(factor[~inside_any], 1.0)
            if scenario == "healthy":
                assert not s.events
                # two or more modes that persist: the level of the sorted halves differs
                lh = np.log(h[50:])  # after the warm-up
                top = lh > np.percentile(lh, 2) + 0.06
                runs = np.split(top, np.flatnonzero(np.diff(top.astype(int))) + 1)
                dwells += [r.size for r in runs if r[0]]
    assert kinds <= {"shift", "ramp", "hump", "stuck"} and len(kinds) >= 3
    assert max(dwells) >= 5


#: Fingerprints of series 0 and of the last series of every scenario of seed 0, per family,
#: computed with the corpus of main before ``ladder`` was appended (commit a9d633b; ``ladder``'s
#: own before ``seqlen`` was, commit f0ac124; ``seqlen``'s before ``accum`` was, commit
#: 8fc6638; ``accum``'s before ``memory`` was, commit 54f4b8d; ``memory``'s before
#: ``prefetch`` was, commit 11edf64; ``prefetch``'s before ``pipeline`` was, commit b179149;
#: ``pipeline``'s and ``lossy_link``'s before ``gc_pause`` was, commit a114d3e; ``gc_pause``'s
#: before ``dispatch`` was, commit 3e2e36e; ``dispatch``'s before ``moe`` was, commit d961c77;
#: ``moe``'s before ``hw_queue`` was, commit 433fd4c; ``hw_queue``'s before ``compile`` was,
#: commit fb31b1b; ``compile``'s before ``power`` was, commit 9fa972a; ``power``'s before
#: ``numa`` was, commit 47b9dcd; ``numa``'s before ``rollout`` was, commit 3eb9d1f;
#: ``rollout``'s before ``fabric`` was, commit 8f20175; ``fabric``'s, held out in the twentieth
#: round, before ``nvme`` was, commit 6af7110; ``nvme``'s, held out in the twenty-first round,
#: before ``observe`` was, commit a3db2b5; ``observe``'s, held out in the twenty-second round,
#: before ``wan`` was, commit cfc22a8; ``wan``'s, held out in the twenty-third round, before
#: ``pcie`` was, commit 4c63601; ``pcie``'s, held out in the twenty-fourth round, before
#: ``steal`` was, commit 5ae5153): a family appended at the end of FAMILIES / SCENARIOS must
#: leave every other family's bytes alone.
FINGERPRINTS = {
    "restart": "73ad9d2339f0bd2b",
    "ckpt_stall": "a80f728be80fd00f",
    "flapping": "4e01987ee587f4fc",
    "staircase": "bac42ff03d9ca436",
    "noise_regime": "84621661224b9531",
    "sampled": "68e3b270915a88c8",
    "multirank": "c3ff0a420402d6d4",
    "greyhound": "9712f85c8a94cddf",
    "failslow": "31d4098c4373c850",
    "ramp": "5b9b09b6941d750a",
    "short": "047aa299a991c3c7",
    "hump": "b67e1873f2d0c38c",
    "warmup_onset": "a2c34b6134f68c4e",
    "reconfig": "778c80fe3d2b21fe",
    "ckpt_burst": "dc2406dab4e89eb9",
    "contention": "fe32e065721e4fec",
    "megatron": "7e1bd0bab1dd05c7",
    "bimodal_replay": "11b2727c632b08f6",
    "ladder": "6f9ef8805904670a",
    "seqlen": "894dc2c423f57db2",
    "accum": "6e272925722771df",
    "memory": "bade849fba185adf",
    "prefetch": "958f2c91d519da9e",
    "pipeline": "77f03227529405ff",
    "lossy_link": "68bb6c2fd794c0b8",
    "gc_pause": "4ea64fc9dcd7544a",
    "dispatch": "c1145c9e72fb484c",
    "moe": "f0b2ae7a02820035",
    "hw_queue": "fa1b188ae2660817",
    "compile": "a9f9025eca4fc6c4",
    "power": "b255da662bf90f2a",
    "numa": "b1916c38f6ed60c6",
    "rollout": "ee5ca1ce7065a72a",
    "fabric": "ba31ccf3c8e52d33",
    "nvme": "7acef531cc6f17f9",
    "observe": "15bb2af432b41243",
    "wan": "ee2e5e7e9136d24b",
    "pcie": "68981f6a6f35013b",
}


def _fingerprint(family: str) -> str:
    m = hashlib.sha256()
    for f, sc, c, _ in SCENARIOS:
        if f != family:
            continue
        for i in (0, c - 1):
            s = generate_series(0, f, sc, i)
            m.update(np.ascontiguousarray(s.rank).tobytes())
            m.update(np.ascontiguousarray(s.iter).tobytes())
            for a, nd in ((s.duration, 9), (s.ts, 6), (s.level, 9), (s.healthy, 9)):
                m.update(np.ascontiguousarray(np.round(a, nd)).tobytes())
            m.update(repr([(e.start_iter, e.end_iter, round(e.loss, 12), round(e.peak_loss, 12),
                            e.kind, e.ranks) for e in s.events]).encode())
    return m.hexdigest()[:16]


def test_existing_families_are_unchanged() -> None:
    assert set(FINGERPRINTS) == set(FAMILIES) - {"steal"}
    assert FAMILIES[-21:] == ("ladder", "seqlen", "accum", "memory", "prefetch", "pipeline",
                              "lossy_link", "gc_pause", "dispatch", "moe", "hw_queue",
                              "compile", "power", "numa", "rollout", "fabric", "nvme",
                              "observe", "wan", "pcie", "steal")
    assert {f: _fingerprint(f) for f in FINGERPRINTS} == FINGERPRINTS


def _durations(s: JobSeries) -> np.ndarray:
    """The iteration times the records give: ``duration``, else the difference of ``ts``."""
    if np.isfinite(s.duration).all():
        return s.duration
    return np.concatenate([[np.nan], np.diff(s.ts)])


@pytest.mark.parametrize(("family", "slow"), [("ladder", "congested"), ("seqlen", "slow"),
                                              ("accum", "slow"), ("memory", "slow"),
                                              ("prefetch", "slow"),
                                              ("pipeline", "slow"),
                                              ("lossy_link", "slow"),
                                              ("gc_pause", "slow"),
                                              ("dispatch", "slow"),
                                              ("moe", "slow"),
                                              ("hw_queue", "slow"),
                                              ("compile", "slow"),
                                              ("power", "slow"),
                                              ("numa", "slow"),
                                              ("rollout", "slow"),
                                              ("fabric", "slow"),
                                              ("nvme", "slow"),
                                              ("observe", "slow"),
                                              ("wan", "slow"),
                                              ("pcie", "slow"),
                                              ("steal", "slow")])
def test_family_is_deterministic_per_seed(family: str, slow: str) -> None:
    a = generate_series(11, family, slow, 2)
    assert _same(a, generate_series(11, family, slow, 2))
    assert not _same(a, generate_series(12, family, slow, 2))
    assert not _same(a, generate_series(11, family, slow, 3))
    h = generate_series(11, family, "healthy", 0)
    assert _same(h, generate_series(11, family, "healthy", 0))


def test_steal_is_the_held_out_family() -> None:
    assert HELD_OUT == ("steal",)


def test_steal_fingerprint() -> None:
    """The held-out family's own bytes (seed 0), as committed before its one evaluation."""
    assert _fingerprint("steal") == "2c6a531c85d556ca"


def test_ladder_labels() -> None:
    """Congestion ladders: every labelled ladder climbs in rungs that are each below the 10 %
    rule (+3-8 %) to a top of +18 % or more, its mean rise over the labelled span is its
    label (>= LD_MEAN_MIN), and the records show it: their trimmed mean over the span is at
    least 1.1 x the one around it.  Nothing else is slow, 40 healthy iterations follow each
    ladder, and negatives carry no label and no sustained rise in their records."""
    shapes: set[str] = set()
    for seed in (3, 4):
        for scenario, count in (("congested", 14), ("healthy", 10)):
            for i in range(count):
                s = generate_series(seed, "ladder", scenario, i)
                assert s.positive == (scenario == "congested")
                factor = s.level / s.healthy
                d = _durations(s)
                inside_any = np.zeros(s.iter.size, dtype=bool)
                for e in s.events:
                    assert e.kind == "ladder" and not e.ranks
                    assert e.start_iter >= LEAD_ITERS
                    assert e.end_iter - e.start_iter >= MIN_EVENT_ITERS
                    inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
                    inside_any |= inside
                    rise = factor[inside] - 1.0
                    s_e = e.loss / (1.0 - e.loss)
                    assert np.isclose(rise.mean(), s_e) and s_e >= LD_MEAN_MIN - 1e-9
                    assert LD_TOTAL[0] - 1e-9 <= rise.max() <= LD_TOTAL[1] + 1e-9
                    steps = np.diff(np.concatenate([[0.0], rise]))
                    up = steps[steps > 1e-12]
                    assert LD_RUNGS[0] <= up.size <= LD_RUNGS[1]
                    assert np.all((up >= LD_RUNG[0] - 1e-9) & (up <= LD_RUNG[1] + 1e-9))
                    assert up.max() < SLOWDOWN_EVENT  # no single rung crosses the rule
                    down = steps[steps < -1e-12]
                    shapes.add("abrupt" if down.size == 0 else "stepwise")
                    after = _clear_after(s, e, factor)
                    # on the records: the span over the iterations around it
                    around = (((s.iter >= e.start_iter - 100) & (s.iter < e.start_iter))
                              | after)
                    x, y = d[inside], d[around]
                    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
                    assert trim_mean(x, 0.05) >= (1.0 + SLOWDOWN_EVENT) * trim_mean(y, 0.05)
                assert np.allclose(factor[~inside_any], 1.0), s.name
                if scenario == "healthy":
                    assert not s.events
                    # no sustained rise: the median of any 50 records after the warm-up
                    # stays below 1.1 x the median of the 300 records before them
                    x = d[LEAD_ITERS + 1:]
                    win = np.median(sliding_window_view(x, 50), axis=1)[300:]
                    base = np.median(sliding_window_view(x, 300), axis=1)[:win.size]
                    assert np.all(win < (1.0 + SLOWDOWN_EVENT) * base), s.name
    assert shapes == {"abrupt", "stepwise"}


def _family_series(family: str) -> Iterator[JobSeries]:
    """The series of ``family``'s scenarios ``slow`` (14) and ``healthy`` (10) of seeds 3
    and 4, each one rank, positive exactly when ``slow``."""
    for seed in (3, 4):
        for scenario, count in (("slow", 14), ("healthy", 10)):
            for i in range(count):
                s = generate_series(seed, family, scenario, i)
                assert s.positive == (scenario == "slow") and s.ranks == 1
                yield s


def _in_events(s: JobSeries) -> np.ndarray:
    """Which records of ``s`` lie in one of its labelled events."""
    inside = np.zeros(s.iter.size, dtype=bool)
    for e in s.events:
        inside |= (s.iter >= e.start_iter) & (s.iter < e.end_iter)
    return inside


class _Labelled(NamedTuple):
    """A series of :func:`_family_series` with what the label tests read from it: the factor
    of each record (its level over its healthy time), its durations, the records after the
    lead, their healthy mean, the records inside a labelled event and the healthy ones
    after the lead (outside every event)."""

    s: JobSeries
    factor: np.ndarray
    d: np.ndarray
    steady: np.ndarray
    mean: float
    inside: np.ndarray
    ok: np.ndarray


def _labelled_series(family: str, slower_only: bool = True) -> Iterator[_Labelled]:
    """:func:`_family_series` with its :class:`_Labelled` reading; ``slower_only``: no record
    is faster than its healthy time (not so where a slowdown moves work, e.g. collections, to
    other steps)."""
    for s in _family_series(family):
        factor = s.level / s.healthy
        if slower_only:
            assert np.all(factor >= 1.0 - 1e-12), s.name
        steady = s.iter > LEAD_ITERS
        inside = _in_events(s)
        yield _Labelled(s, factor, _durations(s), steady, float(s.healthy[steady].mean()),
                        inside, steady & ~inside)


def test_seqlen_labels() -> None:
    """Variable-length batches through the slowest rank: the healthy step time is wide and
    skewed (data-dependent), every labelled slowdown raises the mean step time over its span
    to its label (+12-45 % over the healthy mean after the warm-up) and the records show it
    (their mean over the span is at least 1.1 x their mean outside every event, and 1.1 x
    the trimmed mean of the 100 iterations before and 40 after it); nothing else is slow and
    negatives carry no label and no sustained rise in their records."""
    kinds: set[str] = set()
    cvs: list[float] = []
    for c in _labelled_series("seqlen"):
        s, factor, d, inside_any = c.s, c.factor, c.d, c.inside
        steady = s.healthy[s.iter > LEAD_ITERS]
        mean = steady.mean()
        h = s.healthy[(s.iter > LEAD_ITERS) & ~inside_any]
        cvs.append(float(h.std() / h.mean()))
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks  # (its kind: in the set of kinds checked below)
            assert e.start_iter >= LEAD_ITERS
            assert e.end_iter - e.start_iter >= max(MIN_EVENT_ITERS, SL_SLOW_ITERS[0])
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            s_e = e.loss / (1.0 - e.loss)
            assert SL_SLOWDOWN[0] - 1e-9 <= s_e <= SL_SLOWDOWN[1] + 1e-9
            # the label is the span's mean rise over the healthy mean
            assert np.isclose(s.level[inside].mean(), (1.0 + s_e) * mean, rtol=1e-6)
            after = _clear_after(s, e, factor)
            # on the records
            x = d[inside]
            x = x[np.isfinite(x)]
            out = d[(s.iter > LEAD_ITERS) & ~inside_any]
            assert x.mean() >= (1.0 + SLOWDOWN_EVENT) * np.nanmean(out), s.name
            around = (((s.iter >= e.start_iter - 100) & (s.iter < e.start_iter))
                      | after)
            y = d[around]
            y = y[np.isfinite(y)]
            assert trim_mean(x, 0.05) >= (1.0 + SLOWDOWN_EVENT) * trim_mean(y, 0.05)
        assert np.allclose(factor[~inside_any], 1.0), s.name
        if not s.positive:
            assert not s.events
            # no sustained rise: the mean of any 100 records after the warm-up stays
            # below 1.1 x the series' mean
            x = d[LEAD_ITERS + 1:]
            win = sliding_window_view(x, 100).mean(axis=1)
            assert np.all(win < (1.0 + SLOWDOWN_EVENT) * x.mean()), s.name
    assert kinds == {"worker", "comm"}
    # the healthy step time is data-dependent: some series wide, none flat
    assert min(cvs) > 0.02 and max(cvs) > 0.12


def test_every_checkpoint_burst_shift_is_built_with_its_event() -> None:
    """A shift drawn to start past the series' end (seed 29, ``ckpt_burst/shift/013``: the
    draw after the chosen checkpoint went beyond the last iteration, and building the
    series raised) starts right after that checkpoint instead: every such series of seeds
    0-31 is built, with one labelled event of at least MIN_EVENT_ITERS iterations."""
    for seed in range(32):
        for i in range(14):
            s = generate_series(seed, "ckpt_burst", "shift", i)
            assert len(s.events) == 1, (seed, i)
            assert s.events[0].end_iter - s.events[0].start_iter >= MIN_EVENT_ITERS


def _around(d: np.ndarray, ok: np.ndarray, a: int, b: int, span: int = 200) -> np.ndarray:
    """Means of 48 records in a row (whole accumulation cycles for every ``k`` of
    :data:`AC_STEPS`) over the healthy records of ``span`` iterations before ``a`` and after
    ``b`` (``ok``: healthy and after the warm-up)."""
    out = []
    for lo, hi in ((max(0, a - span), a), (b, b + span)):
        y = d[lo:hi][ok[lo:hi]]
        y = y[np.isfinite(y)]
        if y.size >= 48:
            out.append(sliding_window_view(y, 48).mean(axis=1))
    return np.concatenate(out)


def _above_the_healthy_around(d: np.ndarray, ok: np.ndarray, inside: np.ndarray, name: str,
                              drop: int = 0, after: bool = True) -> None:
    """The records' mean over the span ``inside`` is at least ``1 + SLOWDOWN_EVENT`` times
    the mean of the healthy records (``ok``) of the 200 iterations before it and of the 200
    after it (each side with 100 records or more; its largest ``drop`` left out; ``after``
    False: before it only)."""
    x = d[inside]
    x = x[np.isfinite(x)]
    a, b = int(np.flatnonzero(inside)[0]), int(np.flatnonzero(inside)[-1]) + 1
    for lo, hi in ((max(0, a - 200), a), (b, b + 200))[:2 if after else 1]:
        y = d[lo:hi][ok[lo:hi]]
        y = y[np.isfinite(y)]
        if y.size >= 100:
            y = np.sort(y)[:y.size - drop]
            assert x.mean() >= (1.0 + SLOWDOWN_EVENT) * y.mean(), name


def _clear_after(s, e, factor: np.ndarray) -> np.ndarray:
    """40 healthy iterations follow the event ``e`` of series ``s``; returns them (a mask)."""
    after = (s.iter >= e.end_iter) & (s.iter < e.end_iter + 40)
    assert after.sum() == 40 and np.allclose(factor[after], 1.0)
    return after


def _span_above_the_rest(d: np.ndarray, ok: np.ndarray, inside: np.ndarray, name: str
                         ) -> np.ndarray:
    """The records' mean over the span ``inside`` is at least ``1 + SLOWDOWN_EVENT`` times
    the mean of the healthy records ``ok``; returns the span's finite records."""
    x = d[inside]
    x = x[np.isfinite(x)]
    assert x.mean() >= (1.0 + SLOWDOWN_EVENT) * np.nanmean(d[ok]), name
    return x


def _no_sustained_rise(d: np.ndarray, name: str, drop: int) -> None:
    """No sustained rise: the mean of any 200 records after the warm-up, their largest
    ``drop`` left out, stays below ``1 + SLOWDOWN_EVENT`` times the series' mean."""
    x = d[LEAD_ITERS + 1:]
    v = np.sort(sliding_window_view(x, 200), axis=1)[:, :200 - drop]
    assert np.all(v.mean(axis=1) < (1.0 + SLOWDOWN_EVENT) * x.mean()), name


def test_accum_labels() -> None:
    """Gradient accumulation logged per micro-batch: the healthy series has its own periodic
    long iterations (the boundaries); every labelled slowdown raises the mean iteration time
    over its span to its label (+12-45 % over the healthy mean after the warm-up) and the
    records show it (their mean over the span is at least 1.1 x their mean outside every
    event, and 1.1 x the typical mean of 48 healthy records around it), in ``comm`` ones
    while most iterations and the median stay healthy; nothing else is slow, and negatives
    carry no label and no sustained rise in their records."""
    kinds: set[str] = set()
    assert all(48 % k == 0 for k in AC_STEPS)
    for c in _labelled_series("accum"):
        s, factor, d, steady, mean, inside_any, ok = (
            c.s, c.factor, c.d, c.steady, c.mean, c.inside, c.ok)
        # periodic long iterations over the micro-batches' level: the boundaries
        # (1/16 to 1/2 of the iterations), validation passes, epoch restarts
        h = s.healthy[steady] / np.percentile(s.healthy[steady], 10)
        assert 1 / 17 <= np.mean(h > 1.15) <= 0.6, s.name
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks  # (its kind: in the set of kinds checked below)
            assert e.start_iter > LEAD_ITERS
            length = e.end_iter - e.start_iter
            assert length >= max(MIN_EVENT_ITERS, AC_MIN_CYCLES * 2)
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            s_e = e.loss / (1.0 - e.loss)
            assert AC_SLOWDOWN[0] - 1e-9 <= s_e <= AC_SLOWDOWN[1] + 1e-9
            # the label is the span's mean rise over the healthy mean
            assert np.isclose(s.level[inside].mean(), (1.0 + s_e) * mean, rtol=1e-6)
            # ... and the slowdown makes at least half of it
            added = (s.level[inside] - s.healthy[inside]).sum()
            assert added >= 0.5 * s_e * mean * inside.sum()
            slowed = factor[inside] > 1.0 + 1e-9
            if e.kind == "comm":  # only boundaries: at most every other iteration,
                # and the long ones
                assert slowed.mean() <= 0.5 + 1e-9
                assert np.all(s.healthy[inside][slowed]
                              > np.median(s.healthy[inside]))
            elif e.kind == "offload":  # boundaries, and a little everywhere
                assert np.percentile(factor[inside], 40) <= 1.03 + 1e-9
            else:  # every micro-batch
                assert slowed.all()
            # at least max(40, 3k) healthy iterations after it
            _clear_after(s, e, factor)
            # on the records
            x = _span_above_the_rest(d, ok, inside, s.name)
            typical = float(np.median(_around(d, ok, int(np.flatnonzero(inside)[0]),
                                              int(np.flatnonzero(inside)[-1]) + 1)))
            assert x.mean() >= (1.0 + SLOWDOWN_EVENT) * typical, s.name
            if e.kind == "comm" and slowed.mean() <= 1 / 3:  # the median stays
                assert np.median(x) < (1.0 + SLOWDOWN_EVENT) * np.nanmedian(d[ok])
        assert np.allclose(factor[~inside_any], 1.0), s.name
        if not s.positive:
            assert not s.events
            # no sustained rise: the mean of any 96 records after the warm-up (whole
            # cycles), its largest left out, stays below 1.1 x the series' mean
            x = d[LEAD_ITERS + 1:]
            v = sliding_window_view(x, 96)
            top = (v.sum(axis=1) - v.max(axis=1)) / 95
            assert np.all(top < (1.0 + SLOWDOWN_EVENT) * x.mean()), s.name
    assert kinds == {"comm", "offload", "compute"}
    assert AC_SLOW_ITERS[0] >= MIN_EVENT_ITERS


def test_memory_labels() -> None:
    """Memory pressure (the caching allocator's sawtooth, GC pauses that grow with the heap):
    every labelled slowdown raises the mean time over its span to its label (+12-45 % over
    the healthy mean after the warm-up) and the records show it (their mean over the span is
    at least 1.1 x their mean outside every event, and 1.1 x the mean of the 200 healthy
    records before it or after it, whichever is larger); ``leak`` ones creep up (the span's
    second half slower than its first) and drop back at its end; nothing else is slow, and
    negatives carry no label and no sustained rise in their records."""
    kinds: set[str] = set()
    for c in _labelled_series("memory", slower_only=False):
        s, factor, d, mean, inside_any, ok = c.s, c.factor, c.d, c.mean, c.inside, c.ok
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks  # (its kind: in the set of kinds checked below)
            assert e.start_iter > LEAD_ITERS
            length = e.end_iter - e.start_iter
            assert length >= max(MIN_EVENT_ITERS, NODE_SLOW_ITERS[0])
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            s_e = e.loss / (1.0 - e.loss)
            assert NODE_SLOWDOWN[0] - 1e-9 <= s_e <= NODE_SLOWDOWN[1] + 1e-9
            # the label is the span's mean rise over the healthy mean
            assert np.isclose(s.level[inside].mean(), (1.0 + s_e) * mean, rtol=1e-6)
            lv = s.level[inside] / s.healthy[inside]
            if e.kind == "leak":  # a creep: the second half slower than the first
                half = lv.size // 2
                assert lv[half:].mean() > lv[:half].mean() + 0.5 * s_e
            _clear_after(s, e, factor)
            # on the records
            _span_above_the_rest(d, ok, inside, s.name)
            _above_the_healthy_around(d, ok, inside, s.name)
        assert np.allclose(factor[~inside_any], 1.0), s.name
        if not s.positive:
            assert not s.events
            assert np.allclose(factor, 1.0)
            _no_sustained_rise(d, s.name, drop=1)
    assert kinds == {"frag", "leak"}


def test_prefetch_labels() -> None:
    """Input-pipeline stalls behind a prefetch queue: every labelled slowdown raises the mean
    step time over its span to its label (+12-45 % over the healthy mean after the warm-up)
    and the records show it (their mean over the span is at least 1.1 x their mean outside
    every event, and 1.1 x the mean of the 200 healthy records before it or after it, their
    largest 4 left out); in a ``storage`` slowdown a quarter of the steps or more are slower
    (they wait for the loader), in a ``storm``
    the median step stays healthy while the mean rises (dense stalls); nothing else is slow
    (the queue hides the rest), and negatives carry no label and no sustained rise."""
    kinds: set[str] = set()
    for c in _labelled_series("prefetch"):
        s, factor, d, mean, inside_any, ok = c.s, c.factor, c.d, c.mean, c.inside, c.ok
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks  # (its kind: in the set of kinds checked below)
            assert e.start_iter > LEAD_ITERS
            assert e.end_iter - e.start_iter >= max(MIN_EVENT_ITERS, NODE_SLOW_ITERS[0])
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            s_e = e.loss / (1.0 - e.loss)
            assert NODE_SLOWDOWN[0] - 1e-9 <= s_e
            # the label is the span's mean rise over the healthy mean
            assert np.isclose(s.level[inside].mean(), (1.0 + s_e) * mean, rtol=1e-6)
            # the span starts and ends with a step slower than the healthy one
            lv = factor[inside]
            assert lv[0] > 1.0 + 1e-9 and lv[-1] > 1.0 + 1e-9
            if e.kind == "storage":  # many steps wait for the loader
                assert np.mean(lv > 1.0 + 1e-9) >= 0.25, s.name
            else:  # dense stalls: the median step stays healthy
                assert np.median(lv) < 1.0 + 1e-6, s.name
            _clear_after(s, e, factor)
            # on the records
            _span_above_the_rest(d, ok, inside, s.name)
            # its largest 4 (hiccups, a restart) left out
            _above_the_healthy_around(d, ok, inside, s.name, drop=4)
        assert np.allclose(factor[~inside_any], 1.0), s.name
        if not s.positive:
            assert not s.events
            _no_sustained_rise(d, s.name, drop=4)  # hiccups, a restart
    assert kinds == {"storage", "storm"}


def test_pipeline_labels() -> None:
    """Pipeline-parallel training: every labelled slowdown raises the mean iteration time over
    its span to its label (+12-45 % over the span's healthy mean) and the records show it
    (their mean over the span is at least 1.1 x the mean of the 200 healthy records before it
    and after it, their largest 4 left out: transfer hiccups); nothing outside the spans is
    slow, SPAN_CLEAR healthy iterations follow each; the healthy level may step down (or up by
    at most 3 %) at a micro-batch schedule change, never inside or next to a span; negatives
    carry no label and no sustained rise."""
    kinds: set[str] = set()
    changes = 0
    for c in _labelled_series("pipeline"):
        s, factor, d, steady, inside_any = c.s, c.factor, c.d, c.steady, c.inside
        # a schedule change: the healthy level of 100 iterations after a point over the 100
        # before, away from the warm-up, stays within PP_CHANGE_RATIO (plus the wander)
        h = s.healthy[LEAD_ITERS:]
        v = sliding_window_view(h, 100).mean(axis=1)
        ratio = v[100:] / v[:-100]
        assert ratio.max() <= PP_CHANGE_RATIO[1] + 0.03, s.name
        changes += int(ratio.min() < 0.95)
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks  # (its kind: in the set of kinds checked below)
            assert e.start_iter >= LEAD_ITERS + PP_SETTLE
            assert e.end_iter - e.start_iter >= max(MIN_EVENT_ITERS, PP_SLOW_ITERS[0])
            inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
            s_e = e.loss / (1.0 - e.loss)
            assert PP_SLOWDOWN[0] - 1e-6 <= s_e <= PP_SLOWDOWN[1] + 1e-3
            # the label is the span's mean rise over its healthy mean
            assert np.isclose(s.level[inside].mean(), (1.0 + s_e) * s.healthy[inside].mean(),
                              rtol=1e-6)
            # healthy iterations after it
            after = (s.iter >= e.end_iter) & (s.iter < e.end_iter + SPAN_CLEAR)
            assert after.sum() == min(SPAN_CLEAR, int((s.iter >= e.end_iter).sum()))
            assert np.allclose(factor[after], 1.0)
            # on the records
            # their largest 4 (transfer hiccups) left out
            _above_the_healthy_around(d, steady & ~inside_any, inside, s.name, drop=4)
        assert np.allclose(factor[~inside_any], 1.0), s.name
        if not s.positive:
            assert not s.events
            # no sustained rise: the mean of any 200 records after the warm-up, their
            # largest 4 (hiccups) left out, stays below 1.1 x the mean of the 400 before
            x = d[LEAD_ITERS + 1:]
            v = np.sort(sliding_window_view(x, 200), axis=1)[:, :-4].mean(axis=1)
            ref = sliding_window_view(x, 400).mean(axis=1)
            assert np.all(v[400:] < (1.0 + SLOWDOWN_EVENT) * ref[:v.size - 400]), s.name
    assert kinds == {"stage", "link"}
    assert changes >= 5  # schedule changes appear


def test_lossy_link_labels() -> None:
    """Packet loss and interface flapping on the fabric: every labelled slowdown raises the
    mean iteration time over its span to its label (+12-45 % over the healthy mean, up to
    SPAN_OVERSHOOT more: losses come whole) and the records show it (their mean over the span
    is at least 1.1 x their mean outside every event, and 1.1 x the mean of the 200 healthy
    records before it and after it, their largest 4 left out); the span starts and ends with
    a slower iteration; a lossy link or a flapping interface slows only a minority of the
    span's iterations (the median iteration stays healthy: the rise is made of intermittent
    long iterations), a link trained down slows every one a little (a small level shift) and
    some a lot; 40 healthy iterations follow each; nothing else is slow, and negatives carry
    no label and no sustained rise although they have long iterations of their own."""
    kinds: set[str] = set()
    for c in _labelled_series("lossy_link"):
        s, factor, d, steady, mean, inside_any, ok = (
            c.s, c.factor, c.d, c.steady, c.mean, c.inside, c.ok)
        for e in s.events:
            kinds.add(e.kind)
            lv = _a_mean_rise_label(s, e, factor, mean, d, ok, NODE_SLOW_ITERS[0],
                                    NODE_SLOWDOWN, SPAN_OVERSHOOT)
            assert lv[0] > 1.0 + 1e-9 and lv[-1] > 1.0 + 1e-9
            if e.kind == "downshift":  # every iteration a little slower
                assert np.all(lv > 1.0 + 1e-9), s.name
            else:  # intermittent long iterations: most iterations, the median, healthy
                assert np.mean(lv > 1.0 + 1e-9) < 0.5 and np.median(lv) < 1.0 + 1e-6, s.name
        assert np.allclose(factor[~inside_any], 1.0), s.name
        # healthy long iterations (losses, blips, checkpoints, evaluations) in every series
        h = s.healthy[steady] / mean
        assert np.sum(h > 1.5) >= 3, s.name
        if not s.positive:
            assert not s.events
            _no_sustained_rise(d, s.name, drop=4)
    assert kinds == {"lossy", "flap", "downshift"}


def _a_mean_rise_label(s: JobSeries, e: JobEvent, factor: np.ndarray, mean: float,
                       d: np.ndarray, ok: np.ndarray, least_iters: int,
                       slowdown: tuple[float, float], overshoot: float) -> np.ndarray:
    """The checks every label of a family of mean rises passes (``lossy_link``, ``gc_pause``):
    every rank, after the lead, at least ``least_iters`` long; its rise within ``slowdown``
    (up to ``overshoot`` more) and equal to the span's mean rise over the healthy mean;
    decidable (the rise five standard errors of the span's mean); 40 healthy iterations
    after it; the records over the span above the rest and above the healthy records around
    it (their largest 4 left out).  Returns the span's factors over the healthy time."""
    assert not e.ranks and e.start_iter > LEAD_ITERS
    assert e.end_iter - e.start_iter >= max(MIN_EVENT_ITERS, least_iters)
    inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
    s_e = e.loss / (1.0 - e.loss)
    assert slowdown[0] - 1e-9 <= s_e <= slowdown[1] + overshoot + 1e-9
    assert np.isclose(s.level[inside].mean(), (1.0 + s_e) * mean, rtol=1e-6)
    x = s.level[inside] / mean
    assert x.size >= 25.0 * x.var() / s_e ** 2, s.name
    _clear_after(s, e, factor)
    _span_above_the_rest(d, ok, inside, s.name)
    _above_the_healthy_around(d, ok, inside, s.name, drop=4)
    return factor[inside]


def _a_solved_rise(s: JobSeries, e: JobEvent, factor: np.ndarray, d: np.ndarray,
                   ok: np.ndarray, least_iters: int, slowdown: tuple[float, float],
                   overshoot: float, after: bool = True) -> np.ndarray:
    """The checks every label of a family whose rise is solved over the span's own healthy
    steps passes (``dispatch``, ``moe``, ``hw_queue``, ``compile``): at least ``least_iters``
    long; its rise within ``slowdown`` (up to ``overshoot`` more) and equal to the span's mean
    rise over the span's healthy mean; decidable (the rise five standard errors of the span's
    mean); 40 healthy iterations after it; the records above the healthy ones around it
    (their largest 4 left out; ``after`` False: before it only).  Returns the span's factors
    over the healthy time."""
    assert e.end_iter - e.start_iter >= max(MIN_EVENT_ITERS, least_iters)
    inside = (s.iter >= e.start_iter) & (s.iter < e.end_iter)
    s_e = e.loss / (1.0 - e.loss)
    assert slowdown[0] - 1e-9 <= s_e <= slowdown[1] + overshoot + 1e-9
    ref = s.healthy[inside].mean()
    assert np.isclose(s.level[inside].mean(), (1.0 + s_e) * ref, rtol=1e-6)
    x = s.level[inside] / ref
    assert x.size >= 25.0 * x.var() / s_e ** 2, s.name
    _clear_after(s, e, factor)
    _above_the_healthy_around(d, ok, inside, s.name, drop=4, after=after)
    return factor[inside]


def _no_rise_over_the_400_before(d: np.ndarray, name: str, drop: int = 4) -> None:
    """A negative's records after the lead: any 200 of them, their largest ``drop`` left out,
    below (1 + SLOWDOWN_EVENT) x the mean of the 400 before them."""
    x = d[LEAD_ITERS + 1:]
    v = np.sort(sliding_window_view(x, 200), axis=1)[:, :-drop].mean(axis=1)
    ref_400 = sliding_window_view(x, 400).mean(axis=1)
    assert np.all(v[400:] < (1.0 + SLOWDOWN_EVENT) * ref_400[:v.size - 400]), name


def test_gc_pause_labels() -> None:
    """Python's garbage collector in the training loop: every labelled slowdown (collections
    made more often by lowered thresholds, ranks whose planned GC was switched off, a leak of
    Python objects) raises the mean step time over its span to its label (+12-45 % over the
    healthy mean, up to SPAN_OVERSHOOT more: pauses come whole), decidably (the rise five
    standard errors of the span's mean), and the records show it (their mean over the span is
    at least 1.1 x their mean outside every event, and 1.1 x the mean of the 200 healthy
    records before it and after it, their largest 4 left out); the family has slowdowns made
    of intermittent long steps (most steps, the median, healthy) and slowdowns of the level
    (most steps slower); 40 healthy steps follow each; nothing else is slow; every series
    has long healthy steps (pauses, checkpoints, evaluations), and negatives carry no label
    and no sustained rise."""
    kinds: set[str] = set()
    shapes: set[str] = set()
    for c in _labelled_series("gc_pause", slower_only=False):
        s, factor, d, steady, mean, inside_any, ok = (
            c.s, c.factor, c.d, c.steady, c.mean, c.inside, c.ok)
        for e in s.events:
            kinds.add(e.kind)
            lv = _a_mean_rise_label(s, e, factor, mean, d, ok, NODE_SLOW_ITERS[0],
                                    NODE_SLOWDOWN, SPAN_OVERSHOOT)
            shapes.add("level" if np.median(lv) > 1.0 + 1e-6 else "intermittent")
        assert np.allclose(factor[~inside_any], 1.0), s.name
        # healthy long steps (GC pauses, checkpoints, evaluations) in every series
        h = s.healthy[steady] / mean
        assert np.sum(h > 1.5) >= 3, s.name
        if not s.positive:
            assert not s.events
            _no_sustained_rise(d, s.name, drop=4)
    assert kinds == {"threshold", "desync", "leak"}
    assert shapes == {"level", "intermittent"}


def _launch_queue(dev: list[float], host: list[float], kernels: int) -> float:
    """When the device runs the last kernel of a phase, simulated kernel by kernel: group
    ``j`` is ``kernels`` equal kernels, launched one after the other over ``host[j]``; each
    runs ``dev[j] / kernels`` once launched and once the previous one is done."""
    launched = done = 0.0
    for d, h in zip(dev, host, strict=True):
        for _ in range(kernels):
            launched += h / kernels
            done = max(done, launched) + d / kernels
    return done


def test_dispatch_phase_is_the_launch_queue() -> None:
    """A phase of the ``dispatch`` family lasts what a launch queue of many small kernels
    gives: the device time while the host keeps ahead (a slower host hidden), more once the
    host falls behind (the rise non-linear in the host's slowdown)."""
    dev = [0.5, 0.1, 0.3, 0.1]
    host = [0.05, 0.2, 0.1, 0.05]  # the second group host-bound, the others not
    for x in (1.0, 1.5, 2.0, 3.0, 6.0):
        h = [x * v for v in host]
        got = float(_phase_busy(np.array([[dev]]), np.array([[h]]))[0])
        assert got == pytest.approx(_launch_queue(dev, h, 2000), abs=2e-3)
    busy = [float(_phase_busy(np.array([[dev]]), np.array([[[x * v for v in host]]]))[0])
            for x in (1.0, 1.5, 3.0, 6.0)]
    assert busy[0] == pytest.approx(1.0) and busy[1] == pytest.approx(1.0)  # hidden
    # crossed: the second group's launches fall behind, then the whole phase follows the host
    assert busy[2] == pytest.approx(1.2) and busy[3] == pytest.approx(6.0 * sum(host))


def test_dispatch_labels() -> None:
    """Host dispatch-bound steps: every labelled slowdown of the host side (a co-located
    process, CFS quota throttling, a capped CPU frequency, metrics that sync every few steps)
    raises the mean step time over its span to its label (+12-45 % over the span's healthy
    mean, up to SPAN_OVERSHOOT more: stalls come whole), decidably (the rise five standard
    errors of the span's mean); the span starts and ends with a slower step; the records show
    it (their mean over the span is at least 1.1 x the mean of the 200 healthy records before
    it and after it, their largest 4 left out); the family has slowdowns of the level (most
    steps slower) and intermittent ones (most steps healthy); 40 healthy steps follow each;
    nothing else is slow; every series has long healthy steps (host spikes, checkpoints,
    evaluations); negatives carry no label and no sustained rise (any 200 records, their
    largest 4 left out, below 1.1 x the mean of the 400 before them: a batch-shape change
    moves the level down or up by at most a few %)."""
    kinds: set[str] = set()
    shapes: set[str] = set()
    for c in _labelled_series("dispatch"):
        s, factor, d, steady, inside_any, ok = c.s, c.factor, c.d, c.steady, c.inside, c.ok
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks  # (its kind: in the set of kinds checked below)
            assert e.start_iter > LEAD_ITERS
            lv = _a_solved_rise(s, e, factor, d, ok, NODE_SLOW_ITERS[0], NODE_SLOWDOWN,
                                SPAN_OVERSHOOT)
            assert lv[0] > 1.0 + 1e-9 and lv[-1] > 1.0 + 1e-9
            shapes.add("level" if np.mean(lv > 1.02) > 0.5 else "intermittent")
        assert np.allclose(factor[~inside_any], 1.0), s.name
        h = s.healthy[steady] / s.healthy[steady].mean()
        assert np.sum(h > 1.5) >= 3, s.name
        if not s.positive:
            assert not s.events
            _no_rise_over_the_400_before(d, s.name)
    assert kinds == {"neighbour", "quota", "freq_cap", "sync"}
    assert shapes == {"level", "intermittent"}


def _layers(mix: list[list[float]], ranks: int, cap: float = 0.0, padded: bool = False,
            fixed: float = 0.1, cost: list[float] | None = None, sl: _MoeSlow | None = None
            ) -> _Experts:
    """A one-layer, one-step-per-row ``moe`` series with the routing shares ``mix`` (rows:
    steps), no gate bias, no count noise, a MoE share of 1 and nothing else in the step."""
    m = np.array(mix, dtype=float)[:, None, :]
    n, e = m.shape[0], m.shape[2]
    c = np.ones((ranks, n)) if cost is None else np.array(cost, dtype=float)[:, None] * np.ones(n)
    return _Experts(count_z=np.zeros((n, 1, e)), mix=m, bias=np.zeros((n, 1, e)),
                    innov=np.zeros((n, 1, e)), domain=np.zeros((1, e)), cost=c,
                    rate=np.ones(n), warm=np.ones(n), level=np.ones(n),
                    ep=np.full(n, ranks), cap=np.full(n, cap), padded=padded, tokens=100.0,
                    share=1.0, fixed=fixed, tau=50.0, rest=np.zeros(n))


def test_moe_layer_waits_for_the_busiest_rank() -> None:
    """An MoE layer of the ``moe`` family lasts, over its balanced time, its fixed share plus
    the rest times the busiest rank's load over the balanced one (by hand: 4 experts on 2
    ranks, 400 assignments): dropless, the load follows the routing; a capacity cuts each
    expert at capacity x 100 tokens (a collapse then costs at most the capacity); padded
    buffers cost the capacity whatever the routing; a slow rank shows only in the steps where
    its load times its cost is the largest."""
    even, skew, one = [0.25] * 4, [0.5, 0.3, 0.1, 0.1], [0.97, 0.01, 0.01, 0.01]
    got = _layers([even, skew, one], 2).busy(0, 3)
    # rank loads (experts 0-1, 2-3) over the balanced 200: 1, 1.6, 1.96
    assert got == pytest.approx([0.1 + 0.9 * 1.0, 0.1 + 0.9 * 1.6, 0.1 + 0.9 * 1.96])
    capped = _layers([even, skew, one], 2, cap=1.25).busy(0, 3)
    # capped at 125 a expert: rank 0 holds min(200, 125) + min(120, 125), 125 + 4
    assert capped == pytest.approx([1.0, 0.1 + 0.9 * 245 / 200, 0.1 + 0.9 * 129 / 200])
    padded = _layers([even, skew, one], 2, cap=1.5, padded=True).busy(0, 3)
    assert padded == pytest.approx([0.1 + 0.9 * 1.5] * 3)
    # rank 1 1.5x slower: hidden where rank 0 is far busier, seen where the loads are even
    slow = _layers([even, skew, [0.1, 0.1, 0.4, 0.4]], 2, cost=[1.0, 1.5]).busy(0, 3)
    assert slow == pytest.approx([0.1 + 0.9 * 1.5, 0.1 + 0.9 * 1.6, 0.1 + 0.9 * 1.6 * 1.5])
    # a collapse onto expert 3 (its bias +g) and a raised capacity, over steps [1, 3)
    ex = _layers([even] * 3, 2, cap=1.0)
    col = _layers([even] * 3, 2).busy(0, 3, _MoeSlow(1, 3, "collapse", float(np.log(7.0)),
                                                       who=(3,)))
    assert col == pytest.approx([1.0, 0.1 + 0.9 * 1.6, 0.1 + 0.9 * 1.6])  # 7/10 on expert 3
    raised = ex.busy(0, 3, _MoeSlow(1, 3, "capacity", 1.0))
    assert raised == pytest.approx([1.0, 1.0, 1.0])  # even: nothing was dropped
    # skewed: rank 0 cut at 100 + 100 a step; the capacity doubled over step 1 only
    raised = _layers([skew] * 3, 2, cap=1.0).busy(0, 3, _MoeSlow(1, 2, "capacity", 1.0))
    assert raised == pytest.approx([1.0, 0.1 + 0.9 * 1.6, 1.0])


def test_moe_labels() -> None:
    """Mixture-of-experts load imbalance: every labelled slowdown (a router collapse, the
    balancing loss switched off, a raised capacity factor, a data domain that concentrates
    the tokens, a slow expert-parallel rank) raises the mean step time over its span to its
    label (+12-45 % over the span's healthy mean, up to SPAN_OVERSHOOT more), decidably (the
    rise five standard errors of the span's mean); the span starts and ends with a changed
    step; a configuration change (balancing loss off, capacity raised) comes with a restart
    and another that restores it; the records show the slowdown (their mean over the span is
    at least 1.1 x the mean of the 200 healthy records before and after it, their largest 4
    left out); 40 healthy steps follow each; nothing else is slow; every series has long
    healthy steps (checkpoints, evaluations, heavy batches) and a data-dependent step time;
    negatives carry no label and no sustained rise (any 200 records, their largest 4 left out,
    below 1.1 x the mean of the 400 before them: a restart's new configuration moves the
    level by -15 % to +4 %)."""
    kinds: set[str] = set()
    for c in _labelled_series("moe", slower_only=False):
        s, factor, d, inside_any, ok = c.s, c.factor, c.d, c.inside, c.ok
        changes = 0
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks and e.start_iter > LEAD_ITERS
            changes += e.kind in ("aux_off", "capacity")
            lv = _a_solved_rise(s, e, factor, d, ok, NODE_SLOW_ITERS[0], NODE_SLOWDOWN,
                                SPAN_OVERSHOOT)
            assert abs(lv[0] - 1.0) > 1e-9 and abs(lv[-1] - 1.0) > 1e-9
        assert s.restarts >= 2 * changes, s.name
        assert np.allclose(factor[~inside_any], 1.0), s.name
        h = s.healthy[ok] / s.healthy[ok].mean()
        assert np.sum(h > 1.5) >= 3 and h.std() > 0.02, s.name
        if not s.positive:
            assert not s.events
            _no_rise_over_the_400_before(d, s.name)
    assert kinds == {"collapse", "aux_off", "capacity", "domain", "slow_rank"}


def test_hw_queue_backward_waits_on_shared_queues() -> None:
    """The backward pass of the ``hw_queue`` family, by hand (3 buckets of 1 compute each,
    reduce-scatters of ``m``): on separate queues the reduce-scatters hide behind the compute
    but the last one (3 + m) until they outgrow it (then the last compute's end plus the
    reduce-scatters still queued: 1 + 3 m); where a reduce-scatter shares the compute's queue
    the next bucket's compute waits for it, so a slower link costs linearly from the start."""
    c = np.ones((1, 3))
    free = np.zeros((1, 3), dtype=bool)
    for m, want in ((0.5, 3.5), (0.8, 3.8), (1.0, 4.0), (1.5, 5.5), (2.0, 7.0)):
        assert float(_backward(c, np.full((1, 3), m), free)[0]) == pytest.approx(want)
    first = np.array([[True, False, False]])  # bucket 0's reduce-scatter ahead of bucket 1
    # bucket 1 starts at 1.5 (ends 2.5), its reduce-scatter 2.5-3.0, bucket 2 ends 3.5, 3.5-4.0
    assert float(_backward(c, np.full((1, 3), 0.5), first)[0]) == pytest.approx(4.0)
    every = np.ones((1, 3), dtype=bool)
    for m in (0.2, 0.5, 1.5):  # all on one queue: the compute and the reduce-scatters in turn
        assert float(_backward(c, np.full((1, 3), m), every)[0]) == pytest.approx(3.0 + 3 * m)
    # steps in rows, vectorised: the same as one by one
    ms = np.array([[0.5, 0.5, 0.5], [1.5, 1.5, 1.5]])
    got = _backward(np.ones((2, 3)), ms, np.vstack([first, free]))
    assert got == pytest.approx([4.0, 5.5])


def test_hw_queue_labels() -> None:
    """CUDA hardware-queue false dependencies: every labelled slowdown (fewer hardware
    connections or another kernel order after a restart, gradient buckets that grow, a
    slower link) raises the mean step time over its span to its label (+12-45 % over the
    span's healthy mean, up to SPAN_OVERSHOOT more), decidably (the rise five standard errors
    of the span's mean); the span starts and ends with a changed step; a configuration change
    comes with a restart and another that restores it; the records show the slowdown (their
    mean over the span is at least 1.1 x the mean of the 200 healthy records before and after
    it, their largest 4 left out); 40 healthy steps follow each; nothing else is slow; every
    series has long healthy steps (checkpoints, evaluations, congestion); negatives carry no
    label and no sustained rise (any 200 records, their largest 4 left out, below 1.1 x the
    mean of the 400 before them: a restart's new buckets move the level by less than 4 %)."""
    kinds: set[str] = set()
    for c in _labelled_series("hw_queue"):
        s, factor, d, inside_any, ok = c.s, c.factor, c.d, c.inside, c.ok
        changes = 0
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks and e.start_iter > LEAD_ITERS
            changes += e.kind in ("connections", "order")
            lv = _a_solved_rise(s, e, factor, d, ok, NODE_SLOW_ITERS[0], NODE_SLOWDOWN,
                                SPAN_OVERSHOOT)
            assert lv[0] > 1.0 + 1e-9 and lv[-1] > 1.0 + 1e-9
        assert s.restarts >= 2 * changes, s.name
        assert np.allclose(factor[~inside_any], 1.0), s.name
        h = s.healthy[ok] / s.healthy[ok].mean()
        assert np.sum(h > 1.5) >= 3, s.name
        if not s.positive:
            assert not s.events
            _no_rise_over_the_400_before(d, s.name)
    assert kinds == {"connections", "order", "bucket", "link"}


def _graphs(bucket: list[int], dynamic: float = 0.0) -> _Graphs:
    """A ``compile`` series by hand: 3 shapes of compute 1, no host time, no extra work, a
    device at rate 1; a cold compile of shapes 0-2 costs 10, 20 and 30, the partial batch's
    40 and the evaluation graph's 50, from the on-disk cache half that; the slowest rank's
    compile is twice a graph's own at step 2; the partial batch at step 8 (half a batch), the
    evaluation at step 3; a restart that keeps the shapes at step 6."""
    n = len(bucket)
    spread = np.ones(n)
    spread[2] = 2.0
    batch = np.ones(n)
    batch[8] = 0.5
    evals = np.zeros(n, dtype=bool)
    evals[3] = True
    return _Graphs(bucket=np.array(bucket), cost=np.ones(3), dev=np.ones(n), host=np.zeros(n),
                   batch=batch, evals=evals, cold=np.array([10.0, 20.0, 30.0, 40.0, 50.0]),
                   spread=spread, dynamic=dynamic, cached=0.5, level=np.ones(n),
                   warm=np.ones(n), rest=np.zeros(n), cuts=((0, True), (6, False)))


def test_compile_schedule_by_hand() -> None:
    """The compiles of the ``compile`` family, by hand: after the start and after the restart
    the first batch of each shape compiles its graph (cold, then from the cache), the first
    partial batch and the first evaluation theirs, the step waiting for the slowest rank;
    under dynamic shapes only the first two shapes compile (the second a dynamic graph that
    serves the rest, 5 % slower); thrash recompiles every 1 / g steps, an eager fallback or a
    graph break slows the steps of its shapes only, a graph break climbing over its ramp."""
    bucket = [0, 0, 1, 0, 2, 1, 1, 0, 1, 2]
    g = _graphs(bucket)
    stall, slow = g.compiles(g.cuts)
    assert stall.tolist() == [10, 0, 40, 50, 30, 0, 10, 5, 20, 15]
    assert slow.tolist() == [1.0] * 10
    assert g.steps(0, 10).tolist() == [11, 1, 41, 51, 31, 1, 11, 6, 20.5, 16]
    # without the restart: no compile after the first sight of each shape
    assert g.compiles(((0, True),))[0].tolist() == [10, 0, 40, 50, 30, 0, 0, 0, 40, 0]
    dyn = _graphs(bucket, dynamic=0.05)
    stall, slow = dyn.compiles(dyn.cuts)
    assert stall.tolist() == [10, 0, 40, 50, 0, 0, 10, 5, 20, 0]
    assert slow == pytest.approx([1, 1, 1.05, 1, 1.05, 1.05, 1, 1.05, 1, 1.05])
    # thrash: a recompile of 3 every 4 steps from step 1 (steps 4 and 8)
    got = g.steps(0, 10, _CompileSlow(1, 9, "thrash", 0.25, stall=3.0))
    assert (got - g.steps(0, 10)).tolist() == [0, 0, 0, 0, 3, 0, 0, 0, 3, 0]
    # eager on shape 1 (1.5x its steps' compute), a graph break of shape 2 climbing over 4
    got = g.steps(0, 10, _CompileSlow(0, 10, "eager", 0.5, who=(1,)))
    assert (got - g.steps(0, 10)).tolist() == [0, 0, 0.5, 0, 0, 0.5, 0.5, 0, 0.25, 0]
    got = g.steps(0, 10, _CompileSlow(2, 10, "graph_break", 1.0, ramp=4, who=(2,)))
    assert (got - g.steps(0, 10)).tolist() == [0, 0, 0, 0, 0.75, 0, 0, 0, 0, 1.0]


def test_compile_labels() -> None:
    """torch.compile: every labelled slowdown (the cache limit hit and a graph falling back to
    eager until a restart, recompile thrash, a graph break brought by a code change at a
    restart and fixed at another) raises the mean step time over its span to its label
    (+12-45 % over the span's healthy mean, up to SPAN_OVERSHOOT more), decidably (the rise
    five standard errors of the span's mean); the span starts and ends with a changed step;
    the records show it (their mean over the span at least 1.1 x the mean of the 200 healthy
    records before it, their largest 4 left out, and of the 200 after it where no restart
    follows); an eager or broken step is at most 2x, thrash leaves most steps healthy; 40
    healthy steps follow each; nothing else is slow; every series has long healthy steps
    (compiles, checkpoints, evaluations); negatives carry no label and no sustained rise (any
    200 records, their largest 10 left out, below 1.1 x the mean of the 400 before them: a
    restart compiles up to 8 shapes, the partial batch and the evaluation graph again)."""
    kinds: set[str] = set()
    shapes: set[str] = set()
    for c in _labelled_series("compile"):
        s, factor, d, inside_any, ok = c.s, c.factor, c.d, c.inside, c.ok
        restarts = 0
        for e in s.events:
            kinds.add(e.kind)
            assert not e.ranks and e.start_iter > LEAD_ITERS
            restarts += {"eager": 1, "thrash": 0, "graph_break": 2}[e.kind]
            lv = _a_solved_rise(s, e, factor, d, ok, NODE_SLOW_ITERS[0], NODE_SLOWDOWN,
                                SPAN_OVERSHOOT, after=e.kind == "thrash")
            assert lv[0] > 1.0 + 1e-9 and lv[-1] > 1.0 + 1e-9
            changed = np.mean(lv > 1.0 + 1e-9)
            if e.kind == "thrash":
                assert np.median(lv) == pytest.approx(1.0) and lv.max() > 1.25, s.name
                shapes.add("intermittent")
            else:
                assert lv.max() <= 2.0 + 1e-9, s.name
                shapes.add("level" if changed == 1.0 else "some shapes")
        assert s.restarts >= restarts, s.name
        assert np.allclose(factor[~inside_any], 1.0), s.name
        h = s.healthy[ok] / s.healthy[ok].mean()
        assert np.sum(h > 1.5) >= 2, s.name
        if not s.positive:
            assert not s.events
            _no_rise_over_the_400_before(d, s.name, drop=10)
    assert kinds == {"eager", "thrash", "graph_break"}
    assert shapes == {"level", "some shapes", "intermittent"}


def _nodes(n: int, bound: float = 1.0, draw: float = 1.0) -> _Nodes:
    """A ``power`` series by hand: 2 nodes of 2 ranks, compute 1 of which 0.6 clock-bound, no
    host time, no extra work; static power half of the draw, the rest linear in the clock
    (``f = (cap / draw - 0.5) / 0.5``), the controller's throttle over ``bound`` of each heavy
    block."""
    return _Nodes(node=np.array([0, 0, 1, 1]), dev=np.ones((4, n)), host=np.zeros((4, n)),
                  heavy=0.6, draw=np.full((2, n), draw), clock=np.ones((2, n)),
                  bound=np.full((2, n), bound), static=0.5, kappa=1.0, level=np.ones(n),
                  warm=np.ones(n), rest=np.zeros(n))


def test_power_cap_slows_the_heavy_block_of_its_node() -> None:
    """Power capping by hand: under the cap nothing changes; a cap of 0.8 of the draw sets the
    clock to 0.6 (0.5 + 0.5 x 0.6 = 0.8), so the heavy block (0.6 of the compute) takes 1 /
    0.6 as long over the share of it the controller throttles: 0.6 / 0.6 + 0.4 = 1.4 where it
    binds the whole block, 1.2 over half of it; every rank of the capped node and no other;
    a cap far below the draw stops at the lowest clock; a draw that climbs (cooling) binds
    once it crosses the cap."""
    pw = _nodes(4, draw=0.9)
    assert pw.busy().tolist() == [[1.0] * 4] * 4  # below the cap: full clock
    pw = _nodes(4)
    assert np.allclose(pw.busy(), 1.0)  # at the cap
    got = pw.busy((_NodeSlow(1, 3, "demand", 0.25, node=1),))
    assert np.allclose(got[:2], 1.0)  # the other node
    assert got[2:] == pytest.approx(np.array([[1.0, 1.4, 1.4, 1.0]] * 2))
    half = _nodes(4, bound=0.5).busy((_NodeSlow(0, 4, "psu", 0.25, node=0),))
    assert half[0] == pytest.approx([1.2] * 4) and np.allclose(half[2:], 1.0)
    low = pw.busy((_NodeSlow(0, 4, "demand", 9.0, node=0),))
    assert low[0] == pytest.approx([0.6 / PW_MIN_CLOCK + 0.4] * 4)
    # a configuration change raises every node's draw: x 1.25 -> cap / draw 0.8, every rank
    assert np.allclose(pw.busy((_NodeSlow(0, 4, "config", 0.25),)), 1.4)
    # cooling: the draw x 1 + 0.25 w, w climbing over 4 steps: 1/0.9375 ... the cap at 0.8
    climb = pw.busy((_NodeSlow(0, 4, "cooling", 0.25, ramp=4, node=1),))[3]
    f = (1.0 / (1.0 + 0.25 * np.arange(1, 5) / 4) - 0.5) / 0.5
    assert climb == pytest.approx(0.6 / f + 0.4)


def _per_rank(s: JobSeries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(level, healthy, durations)`` of every rank, ``(ranks, steps)`` (no record dropped:
    the records go by step, then rank; the durations from ``ts`` where they are missing)."""
    r = s.ranks
    lv, hl = s.level.reshape(-1, r).T, s.healthy.reshape(-1, r).T
    if np.isfinite(s.duration).all():
        return lv, hl, s.duration.reshape(-1, r).T
    ts = s.ts.reshape(-1, r).T
    return lv, hl, np.concatenate([np.full((r, 1), np.nan), np.diff(ts, axis=1)], axis=1)


@dataclass(frozen=True)
class _NodeRules:
    """What a family of ranks on nodes labels (``power``, ``numa``, ``rollout``, ``fabric``):
    its kinds, the kinds that name every rank, the restarts each kind brings, the kinds
    whose span is checked against the steps after it too (no restart follows), its span and
    rise ranges (up to SPAN_OVERSHOOT more) and its nodes' sizes; ``named(ranks, of)``: the
    rank set another kind names, where it is not one whole node (``observe``'s observers)."""

    kinds: tuple[tuple[str, float], ...]
    every: tuple[str, ...]
    restarts: dict[str, int]
    after: tuple[str, ...]
    slow_iters: tuple[int, int]
    slowdown: tuple[float, float]
    node: tuple[int, ...]
    named: Callable[[list[int], int], bool] | None = None


def _node_family_labels(family: str, rules: _NodeRules,
                        each: Callable[[JobSeries], None] | None = None
                        ) -> tuple[list[tuple[JobEvent, np.ndarray]], bool]:
    """The checks every series of seeds 3-4 of a family of ranks on nodes passes: positive
    exactly when ``slow``, no record dropped, nothing faster than healthy; every labelled
    slowdown names the ranks of one whole node (every rank for ``rules.every``'s kinds) and slows
    nobody else; the mean busy time of those ranks over its span rises to its label (within
    ``rules.slowdown``, up to SPAN_OVERSHOOT more, over their healthy mean), decidably
    (the rise five standard errors of the span's mean per step), each named rank by at least
    half of it, and visibly (their records' mean over the span at least 1.1 x that of the
    200 healthy steps before it, their largest 4 left out, and of the 200 after it where no
    restart follows, neither side reaching into another slowdown); 40 healthy steps follow
    each; a series restarts at least as often as its slowdowns bring restarts; negatives
    carry no label and no sustained rise on any rank (:func:`_no_rise_over_the_400_before`);
    ``each(series)``: a family's own checks of every series.  Returns each event with its
    named ranks' factor over the span, step by step, and whether a multi-node job names a
    strict subset."""
    out: list[tuple[JobEvent, np.ndarray]] = []
    subset = False
    for seed in (3, 4):
        for scenario, count in (("slow", 14), ("healthy", 10)):
            for i in range(count):
                s = generate_series(seed, family, scenario, i)
                assert s.positive == (scenario == "slow") and s.dropped == 0
                lv, hl, d = _per_rank(s)
                factor = lv / hl
                assert np.all(factor >= 1.0 - 1e-12), s.name
                touched = np.zeros(factor.shape, dtype=bool)
                restarts = 0
                for e in s.events:
                    assert e.kind in dict(rules.kinds) and e.start_iter > LEAD_ITERS
                    rk = list(e.ranks)
                    if e.kind in rules.every:
                        assert rk == list(range(s.ranks))
                    elif rules.named is not None:  # the family's own rank set
                        assert rules.named(rk, s.ranks), s.name
                        subset |= len(rk) < s.ranks
                    else:  # one whole node
                        assert len(rk) in rules.node and rk[0] % len(rk) == 0
                        assert rk == list(range(rk[0], rk[0] + len(rk)))
                        subset |= len(rk) < s.ranks
                    restarts += rules.restarts.get(e.kind, 0)
                    a, b = e.start_iter - 1, e.end_iter - 1
                    assert b - a >= rules.slow_iters[0]
                    touched[rk, a:b] = True
                    s_e = e.loss / (1.0 - e.loss)
                    assert (rules.slowdown[0] - 1e-9 <= s_e
                            <= rules.slowdown[1] + SPAN_OVERSHOOT + 1e-9)
                    ref = hl[rk, a:b].mean()
                    assert np.isclose(lv[rk, a:b].mean(), (1.0 + s_e) * ref, rtol=1e-6)
                    x = lv[rk, a:b].mean(axis=0) / ref
                    assert x.size >= 25.0 * x.var() / s_e ** 2, s.name
                    assert np.all(lv[rk, a:b].mean(axis=1)
                                  > (1.0 + 0.5 * s_e) * hl[rk, a:b].mean(axis=1)), s.name
                    assert np.allclose(factor[:, b:b + 40], 1.0), s.name
                    y = d[rk].mean(axis=0)  # NaN at the first step only (ts)
                    after = e.kind in rules.after
                    # the healthy steps around it: from the slowdown before it, up to the
                    # next one (and its restart)
                    prv = max([o.end_iter - 1 for o in s.events if o.end_iter <= a + 1],
                              default=0)
                    nxt = min([o.start_iter - 1 for o in s.events if o.start_iter > b],
                              default=b + 200)
                    for lo, hi in ((max(a - 200, prv), a),
                                   (b, min(b + 200, nxt)))[:2 if after else 1]:
                        side = np.sort(y[max(0, lo):hi])[:-4]
                        if side.size >= 100:
                            assert y[a:b].mean() >= 1.1 * side.mean(), s.name
                    out.append((e, factor[rk, a:b].mean(axis=0)))
                assert np.allclose(factor[~touched], 1.0), s.name
                assert s.restarts >= restarts, s.name
                if not s.positive:
                    assert not s.events
                    for r in range(s.ranks):
                        _no_rise_over_the_400_before(d[r], s.name)
                if each is not None:
                    each(s)
    return out, subset


def test_power_labels() -> None:
    """Node power capping: every labelled slowdown (a facility's demand response lowering a
    node's cap, a PSU failure until a restart, a configuration change at a restart raising
    every node's draw until its revert, a node's cooling degrading) names the ranks of the
    capped node (every rank for a configuration change) and passes the checks of
    :func:`_node_family_labels` (+12-45 % over their healthy mean, up to SPAN_OVERSHOOT more;
    negatives: the healthy binding, the inlet temperature, a slower bin, a new batch at a
    restart stay under the rule); a multi-node job names a strict subset of its ranks; the
    family has aliased spans (the throttled share beating against the step: the factor moving
    by over 5 % from step to step on average) and level ones (its sd under 2 %)."""
    events, subset = _node_family_labels("power", _NodeRules(
        PW_KINDS, ("config",), {"psu": 1, "config": 2}, ("demand", "cooling"), NODE_SLOW_ITERS,
        NODE_SLOWDOWN, PW_NODE))
    shapes = {"aliased" if np.abs(np.diff(f)).mean() > 0.05 else  # the throttle, step to step
              "level" if f.std() < 0.02 else "between" for _, f in events}
    assert {e.kind for e, _ in events} == {"demand", "psu", "config", "cooling"}
    assert {"aliased", "level"} <= shapes and subset


def _sockets(feed: float = 0.5, demand: float = 0.5) -> _Sockets:
    """A ``numa`` series by hand: 2 nodes of 2 ranks, 4 steps; compute 1, host work 0.2,
    copies 0.1, the loader's time per batch ``feed``; the training's CPU demand ``demand`` of
    a node's cores; NUMA balancing's keys 0.1, 0.6, 0.3, 0.9 on node 0 (0.2 on node 1), a burst
    doubling the host work and copies; no stall, no extra work."""
    n = 4
    return _Sockets(node=np.array([0, 0, 1, 1]), dev=np.ones((4, n)), host=np.full((4, n), 0.2),
                    copy=np.full((4, n), 0.1), feed=np.full((4, n), feed),
                    stall=np.zeros((4, n)), demand=demand,
                    key=np.array([[0.1, 0.6, 0.3, 0.9], [0.2] * 4]), burst=np.ones((2, n)),
                    level=np.ones(n), warm=np.ones(n), rest=np.zeros(n))


def test_numa_slows_the_cpu_work_of_its_node() -> None:
    """Host CPU placement by hand (healthy busy time 1 + 0.2 + 0.1 = 1.3): a lost affinity
    makes the host work and the copies of its node's ranks 1 + g times (1.45 at g = 0.5) and
    no one else's; a governor change slows the host work of every rank but not the DMA copies
    (1.5 at g = 1); a co-scheduled CPU job costs nothing beyond its caches while the node's
    cores suffice (demand 0.5 + 0.3: x1.045) and time-slices the CPU work once they do not
    (0.5 + 2.5 = 3x, x1.15 for the caches: the loader's 0.6 x 3.45 = 2.07 per batch then
    binds the step, over 1 + 0.69 + 0.1); NUMA balancing doubles the CPU work and copies in
    the steps whose key is below its rate (0.1 and 0.3 under 0.5; under a rate climbing over 4
    steps to 0.5, 0.125 ... 0.5, the same two); stalls add, the warm-up multiplies."""
    sk = _sockets()
    assert np.allclose(sk.busy(), 1.3)
    got = sk.busy((_NodeSlow(1, 3, "affinity", 0.5, node=1),))
    assert np.allclose(got[:2], 1.3)
    assert got[2:] == pytest.approx(np.array([[1.3, 1.45, 1.45, 1.3]] * 2))
    assert np.allclose(sk.busy((_NodeSlow(0, 4, "governor", 1.0),)), 1.5)
    low = sk.busy((_NodeSlow(0, 4, "cojob", 0.3, node=0),))
    assert low[:2] == pytest.approx(np.full((2, 4), 1.0 + 0.2 * (1.0 + NU_MEMBW * 0.3) + 0.1))
    assert np.allclose(low[2:], 1.3)
    x = 3.0 * (1.0 + NU_MEMBW)
    assert np.allclose(sk.busy((_NodeSlow(0, 4, "cojob", 2.5, node=0),))[0],
                       1.0 + 0.2 * x + 0.1)
    assert np.allclose(_sockets(feed=0.6).busy((_NodeSlow(0, 4, "cojob", 2.5, node=0),))[0],
                       0.6 * x)
    for ramp in (1, 4):
        bal = sk.busy((_NodeSlow(0, 4, "balancing", 0.5, ramp=ramp, node=0),))
        assert bal[:2] == pytest.approx(np.array([[1.6, 1.3, 1.6, 1.3]] * 2))
        assert np.allclose(bal[2:], 1.3)
    sk.stall[1, 2] = 0.5
    sk.warm[:] = [2.0, 1.0, 1.0, 1.0]
    assert sk.busy()[1].tolist() == pytest.approx([2.6, 1.3, 1.8, 1.3])


def test_numa_labels() -> None:
    """Host CPU placement: every labelled slowdown (the affinity lost at a restart until the
    next, NUMA balancing migrating pages in bursts at a climbing rate, a governor change at a
    restart on every node until its revert, a co-scheduled CPU job) names the ranks of the
    slowed node (every rank for a governor change) and passes the checks of
    :func:`_node_family_labels` (+12-45 % over their healthy mean, up to SPAN_OVERSHOOT more;
    negatives: housekeeping, compaction stalls, the logging rank, the shared-node wave,
    another worker count at a restart stay under the rule); a multi-node job names a strict
    subset of its ranks; the family has intermittent spans (most steps of the span unchanged:
    bursts) and level ones (every step slower)."""
    events, subset = _node_family_labels("numa", _NodeRules(
        NU_KINDS, ("governor",), {"affinity": 2, "governor": 2}, ("balancing", "cojob"),
        NODE_SLOW_ITERS, NODE_SLOWDOWN, NU_NODE))
    shapes = {"intermittent" if np.median(f) < 1.0 + 1e-9 else
              "level" if f.min() > 1.0 + 1e-9 else "between" for _, f in events}
    assert {e.kind for e, _ in events} == {"affinity", "balancing", "governor", "cojob"}
    assert {"intermittent", "level"} <= shapes and subset


def test_capped_lognormal_moments() -> None:
    """The first two moments of a response length capped at the maximum, against a sample:
    a median of 1/8 and a spread of 1 put 1.8 % of the responses at the cap."""
    rng = np.random.default_rng(0)
    x = np.minimum(1.0, 0.125 * np.exp(rng.standard_normal(1_000_000)))
    e1, e2 = _capped_lognormal(np.array([0.125]), 1.0)
    assert e1[0] == pytest.approx(x.mean(), rel=3e-3)
    assert e2[0] == pytest.approx((x * x).mean(), rel=1e-2)


def _rollout_by_hand() -> _Rollout:
    """A ``rollout`` series by hand: 2 workers of 2 ranks, 4 steps; the longest response half
    the maximum, a demand of half the cache, a KV read of 0.4 at a full cache: a decode time
    0.5 x (1 + 0.4 x 0.5) = 0.6; the preemption's unit 0.25; training 0.4 (busy time 1.0);
    a weight sync of 0.1 at steps 1 and 3; the reward server's keys 0.1, 0.6, 0.3, 0.9 on
    worker 0 (0.2 on worker 1), an episode doubling the decode; no host work, no extra work."""
    n = 4
    sync = np.zeros((2, n))
    sync[:, [1, 3]] = 0.1
    return _Rollout(node=np.array([0, 0, 1, 1]), dev=np.ones((4, n)), host=np.zeros((4, n)),
                    longest=np.full((2, n), 0.5), demand=np.full((2, n), 0.5),
                    cache=np.ones(2), kv=0.4, preempt=0.25, scale=1.0, train=np.full(n, 0.4),
                    sync=sync, key=np.array([[0.1, 0.6, 0.3, 0.9], [0.2] * 4]),
                    burst=np.ones((2, n)), level=np.ones(n), warm=np.ones(n),
                    rest=np.zeros(n))


def test_rollout_slows_the_generation_of_its_worker() -> None:
    """An RL step by hand (busy time 0.6 + 0.4, +0.1 at the sync steps): a cache halved on
    worker 1 fills it (the KV read 0.4 x 1: 0.7) without a preemption, a quarter of it
    doubles the demand over it (x = 1: recompute 0.25 x 1 x 2 = 0.5, 1.2 in all); no other
    worker changes; a degraded worker decodes 1.5x slower (0.9); the reward server's episodes
    double the decode in the steps whose key is below its rate (0.1 and 0.3 under 0.5; under
    a rate climbing over 4 steps to 0.5, 0.125 ... 0.5, the same two); a degraded sync path
    lengthens the sync steps only (intermittent); the warm-up multiplies the generation and
    the training, not the sync."""
    ro = _rollout_by_hand()
    healthy = np.array([1.0, 1.1, 1.0, 1.1])
    assert np.allclose(ro.busy(), healthy)
    half = ro.busy((_NodeSlow(1, 3, "cache", 1.0, node=1),))
    assert np.allclose(half[:2], healthy)
    assert half[2:] == pytest.approx(np.array([[1.0, 1.2, 1.1, 1.1]] * 2))
    quarter = ro.busy((_NodeSlow(0, 4, "cache", 3.0, node=1),))
    assert quarter[2:] == pytest.approx(np.array([healthy + 1.2 - 0.6] * 2))
    assert np.allclose(ro.busy((_NodeSlow(0, 4, "degraded", 0.5, node=0),))[:2],
                       healthy + 0.3)
    for ramp in (1, 4):
        rw = ro.busy((_NodeSlow(0, 4, "reward", 0.5, ramp=ramp, node=0),))
        assert rw[:2] == pytest.approx(np.array([[1.6, 1.1, 1.6, 1.1]] * 2))
        assert np.allclose(rw[2:], healthy)
    sy = ro.busy((_NodeSlow(0, 4, "sync", 4.0, node=0),))
    assert sy[:2] == pytest.approx(np.array([[1.0, 1.5, 1.0, 1.5]] * 2))
    assert np.allclose(sy[2:], healthy)
    ro.warm[:] = [2.0, 1.0, 1.0, 1.0]
    assert ro.busy()[0] == pytest.approx([2.0, 1.1, 1.0, 1.1])


def test_rollout_labels() -> None:
    """RL steps bound by generation: every labelled slowdown (a worker's KV cache smaller
    after a restart until the next, a co-located reward server's episodes at a climbing rate,
    a degraded worker, a degraded weight-sync path) names the ranks of one generation worker
    and passes the checks of :func:`_node_family_labels` (+12-45 % over their healthy mean,
    up to SPAN_OVERSHOOT more; negatives: the ceiling mode, preempting heavy batches, the
    policy's length drift, the weight sync, validation rollouts, another batch at a restart
    stay under the rule); a multi-worker job names a strict subset of its ranks; the family
    has intermittent spans (most steps unchanged: episodes, syncs) and level ones (every
    step slower)."""
    events, subset = _node_family_labels("rollout", _NodeRules(
        RO_KINDS, (), {"cache": 2}, ("reward", "degraded", "sync"), NODE_SLOW_ITERS,
        NODE_SLOWDOWN, RO_TP))
    shapes = {"intermittent" if np.median(f) < 1.0 + 1e-9 else
              "level" if f.min() > 1.0 + 1e-9 else "between" for _, f in events}
    assert {e.kind for e, _ in events} == {"cache", "reward", "degraded", "sync"}
    assert {"intermittent", "level"} <= shapes and subset


def test_ecmp_hashes_flows_uniformly() -> None:
    """ECMP hashing is balls into bins: every leaf's flows are all on its uplinks, and two
    flows on four uplinks share one with chance 1/4 (so the ring's level is discrete and
    sometimes doubled)."""
    loads = _ecmp(np.random.default_rng(0), 20_000, 4, 2)
    assert loads.shape == (20_000, 4) and np.all(loads.sum(axis=1) == 2)
    assert (loads.max(axis=1) == 2).mean() == pytest.approx(0.25, abs=0.01)


def _spines_by_hand() -> _Spines:
    """A ``fabric`` series by hand: 2 ranks, 4 steps, 2 leaves of 4 uplinks; the job's 4 flows
    of a leaf 2, 1, 1, 0 on leaf 0's uplinks and one on each of leaf 1's, an uplink's capacity
    one flow (leaf 0's factor 2, the ring's); no other traffic; the collective 0.5 at its
    NIC-bound rate (1.0 at the factor 2), hidden behind 0.6 of the compute 1, its last bucket
    0.1: exposed max(0.1, 1.0 - 0.6) = 0.4, a busy time of 1.4; an uplink of leaf 0 down
    re-hashes its flows onto uplinks 1, 2, 2, 3 of the three left (``spill``); the
    neighbour's keys 0.1, 0.9, 0.1, 0.9 (duty 0.5), its episodes x1; errors at step 0 (cost
    1)."""
    n = 4
    return _Spines(node=np.array([0, 1]), dev=np.ones((2, n)), host=np.zeros((2, n)),
                   rate=np.ones(n), loads=np.array([[[2.0, 1, 1, 0], [1, 1, 1, 1]]]),
                   epoch=np.zeros(n, dtype=np.int64), alt=np.ones((2, n)),
                   bg=np.zeros((2, 4, n)), cap=1.0,
                   spill=np.array([[0.0, 0.4, 0.5, 0.9], [0.0, 0.4, 0.5, 0.9]]),
                   key=np.array([[0.1, 0.9, 0.1, 0.9]] * 2), burst=np.ones((2, n)), duty=0.5,
                   err_u=np.array([0.01, 0.9, 0.9, 0.9]), err_x=np.ones(n), comm=0.5,
                   hide=0.6, tail=0.1, jit=np.ones(n), level=np.ones(n), warm=np.ones(n),
                   rest=np.zeros(n))


def test_fabric_ring_waits_for_the_most_loaded_uplink() -> None:
    """The ring all-reduce by hand (busy 1.4 on every rank): other jobs' traffic on an uplink
    the job does not use costs nothing; a neighbour's 2 flows on leaf 1's first uplink (3
    flows share it: the collective 1.5, exposed 0.9) in its episodes only; an uplink down
    whose re-hash keeps the busiest at 2 flows costs nothing, one that puts 3 flows on one
    costs as the neighbour, and the other jobs' traffic it carried (0.75 of a capacity, a
    quarter on each uplink left: 3 / 0.75 flows) more; a degraded uplink at half its rate (2
    flows: a factor 4, exposed 2.0 - 0.6) and its retransmissions (+1 at step 0); a restart's
    other hashes replace the leaves' factors over its span; a warm-up (compute 2) hides more
    of the collective (exposed max(0.1, 1.0 - 1.2))."""
    sp = _spines_by_hand()
    assert np.allclose(sp.busy(), 1.4)
    sp.bg[0, 3] = 0.25
    sp.refresh()
    assert np.allclose(sp.busy(), 1.4)
    sp.bg[0, 3] = 0.0
    nb = sp.busy((_NodeSlow(0, 4, "neighbour", 2.0, aim=0.5),))  # leaf 1, uplink 0
    assert nb == pytest.approx(np.array([[1.9, 1.4, 1.9, 1.4]] * 2))
    assert np.allclose(sp.busy((_NodeSlow(0, 4, "down", 0.0),)), 1.4)  # leaf 0, uplink 0
    sp.spill[0] = [0.0, 0.7, 0.8, 0.9]  # uplinks 1, 3, 3, 3
    assert np.allclose(sp.busy((_NodeSlow(0, 4, "down", 0.0),)), 1.9)
    assert np.allclose(sp.busy((_NodeSlow(0, 4, "down", 0.75),)), 2.4)
    dg = sp.busy((_NodeSlow(0, 4, "degraded", 1.0),))  # errors with chance 0.05
    assert FB_ERR == pytest.approx(0.05)
    assert dg == pytest.approx(np.array([[2.9, 2.4, 2.4, 2.4]] * 2))
    sp.alt[:, 1:3] = 3.0
    assert sp.busy((_NodeSlow(1, 3, "rehash", 0.0),)) == pytest.approx(
        np.array([[1.4, 1.9, 1.9, 1.4]] * 2))
    sp.warm[0] = 2.0
    assert sp.busy()[:, 0] == pytest.approx([2.1, 2.1])


def test_fabric_labels() -> None:
    """Inter-node collectives over ECMP-hashed uplinks: every labelled slowdown (a neighbour
    job's heavy traffic in episodes on a shared uplink, an uplink down until it is repaired,
    a degraded uplink, a restart whose new hashes make the ring slower by the rule) names
    every rank (the ring is the whole job's) and passes the checks of
    :func:`_node_family_labels` (+12-45 % over the healthy mean, up to SPAN_OVERSHOOT more;
    a restart's up to FB_REHASH_MAX; negatives: other jobs' traffic, micro-bursts, adaptive
    routing, restarts that move the level by less than FB_MOVE_HEALTHY or down stay under
    the rule); a resume labelled slower starts at a restart (the timestamps jump by its
    downtime); the family has intermittent spans (episodes) and level ones."""

    jumps: list[float] = []

    def resumed_at_a_restart(s: JobSeries) -> None:
        ts = s.ts[s.rank == 0]
        for e in s.events:
            if e.kind == "rehash" and np.isfinite(ts).all():
                jumps.append(float(ts[e.start_iter - 1] - ts[e.start_iter - 2]))

    events, subset = _node_family_labels("fabric", _NodeRules(
        (*FB_KINDS, ("rehash", 0.0)), ("neighbour", "down", "degraded", "rehash"), {},
        ("neighbour", "down", "degraded"), NODE_SLOW_ITERS,
        (NODE_SLOWDOWN[0], FB_REHASH_MAX - SPAN_OVERSHOOT), FB_NODE), resumed_at_a_restart)
    shapes = {"intermittent" if np.median(f) < 1.0 + 1e-9 else
              "level" if f.min() > 1.0 + 1e-9 else "between" for _, f in events}
    assert {e.kind for e, _ in events} == {"neighbour", "down", "degraded", "rehash"}
    assert {"intermittent", "level"} <= shapes and not subset
    assert all(e.loss / (1.0 - e.loss) <= NODE_SLOWDOWN[1] + SPAN_OVERSHOOT + 1e-9
               for e, _ in events if e.kind != "rehash")
    assert FB_MOVE_HEALTHY < NODE_SLOWDOWN[0]
    assert jumps and min(jumps) >= 60.0


def _drives_by_hand() -> _Drives:
    """An ``nvme`` series by hand: 2 nodes of 2 ranks, 6 steps; compute 1, no host time, no
    extra work, no CPU update (the I/O all exposed); the optimizer's I/O 0.5 at the fast
    rates, half of it the write, a native write 3x slower; each drive's SLC cache one step's
    write, half a write folded back per ordinary step and 1.5 in step 3's idle time (2 mean
    steps: an evaluation); GC chance 0.1 a step: node 0 pauses at step 4 (one native write),
    node 1 draws 0.15 at step 1; the drive's temperature halves its rise per step, its
    throttle at 1.2; the tenant's keys 0.1, 0.9, ... on node 0 (duty 0.5)."""
    n = 6
    gc_u = np.full((2, n), 0.9)
    gc_u[0, 4], gc_u[1, 1] = 0.05, 0.15
    return _Drives(node=np.array([0, 0, 1, 1]), dev=np.ones((4, n)), host=np.zeros((4, n)),
                   opt=0.0, io=np.full((2, n), 0.5), write=0.5, native=3.0,
                   cache=np.ones(2), fold=0.5, idle=np.array([0.0, 0, 0, 2, 0, 0]),
                   gc_u=gc_u, gc_x=np.ones((2, n)), gc_p=np.full(n, 0.1), alpha=0.5,
                   threshold=1.2, key=np.array([[0.1, 0.9] * 3, [0.9] * 6]),
                   burst=np.ones((2, n)), duty=0.5, tail=0.0, level=np.ones(n),
                   warm=np.ones(n), rest=np.zeros(n))


def test_nvme_drive_writes_past_its_cache_at_the_native_rate() -> None:
    """The optimizer's drive I/O by hand: the cache fills by half a write a step (0.5, 1.0),
    then step 2 writes half its volume past it at the native rate (I/O 0.5 x (0.75 + 0.25 x
    3) = 0.75: busy 1.75); the evaluation's idle at step 3 folds 1.5 back, so steps 3-4 write
    into the cache again and step 5 past it (a sawtooth); node 0's GC pause at step 4 costs
    one native write (2.25); a restart at step 4 (its first step 3x) empties the cache, step 5
    fits; a worn drive (g 1) doubles the native write (plateau 2.125) but not the cached
    steps, and GC comes twice as often (node 1's draw 0.15 now pauses: 3.0), on its node
    only; another tenant (g 2) triples the I/O in its episodes; a failed fan (g 3 from step
    1) heats the drive towards 4x its healthy temperature (a first-order lag, time constant
    4x) and past the threshold the I/O is throttled by the ratio; the optimizer's CPU update
    hides the I/O pipelined with it, but for its last sub-group."""
    dr = _drives_by_hand()
    node0 = [1.5, 1.5, 1.75, 1.5, 2.25, 1.75]
    node1 = [1.5, 1.5, 1.75, 1.5, 1.5, 1.75]
    assert dr.busy() == pytest.approx(np.array([node0, node0, node1, node1]))
    warm = np.array([1.0, 1, 1, 1, 3, 1])
    assert dr.busy(warm=warm)[2] == pytest.approx([1.5, 1.5, 1.75, 1.5, 3.5, 1.5])
    worn = dr.busy((_NodeSlow(0, 6, "worn", 1.0, node=1),))
    assert worn[:2] == pytest.approx(np.array([node0] * 2))
    assert worn[2:] == pytest.approx(np.array([[1.5, 3.0, 2.125, 1.5, 1.5, 2.125]] * 2))
    tenant = dr.busy((_NodeSlow(0, 6, "tenant", 2.0, node=0),))
    assert tenant[0] == pytest.approx([2.5, 1.5, 3.25, 1.5, 4.75, 1.75])
    assert tenant[2:] == pytest.approx(np.array([node1] * 2))
    # the drive's temperature, step by step: healthy, then the fan's from step 1
    power = 1.0 / (1.0 + dr.idle)
    healthy, hot = [], []
    for j in range(6):
        healthy.append(0.5 * (healthy[-1] if j else 0.0) + 0.5 * power[j])
    slow = 0.5 ** 0.25
    for j in range(1, 6):
        hot.append(slow * (hot[-1] if hot else healthy[0]) + (1.0 - slow) * 4.0 * power[j])
    assert max(healthy) < 1.0 < dr.threshold  # healthy: never throttled
    thr = np.maximum(1.0, np.array([1.0, *hot]) / 1.2)
    assert thr[1:].max() > 1.5 and thr[1] == 1.0  # it climbs past the threshold
    fan = dr.busy((_NodeSlow(1, 6, "fan", 3.0, node=1),))
    assert fan[2] == pytest.approx(1.0 + (np.array(node1) - 1.0) * thr)
    assert fan[:2] == pytest.approx(np.array([node0] * 2))
    # a CPU update of 0.5 hides the I/O pipelined with it but for the last sub-group's 0.2
    dr.opt, dr.tail = 0.5, 0.2
    assert dr.busy()[2] == pytest.approx([1.6, 1.6, 1.75, 1.6, 1.6, 1.75])


def test_nvme_labels() -> None:
    """Optimizer states offloaded to local NVMe: every labelled slowdown (a worn drive from a
    restart to the next, another tenant's I/O in episodes, a failed cooling fan) names the
    ranks of the node on that drive and passes the checks of :func:`_node_family_labels`
    (+12-45 % over their healthy mean, up to SPAN_OVERSHOOT more; negatives: the SLC cache's
    plateau and sawtooth, GC pauses, the drive's healthy heat, checkpoints, evaluations,
    another batch at a restart stay under the rule); a multi-node job names a strict subset
    of its ranks; the family has intermittent spans (most steps unchanged: episodes, GC),
    level ones (every step slower) and climbing ones (a fan: the span's last quarter slower
    than its first by 10 % or more)."""
    events, subset = _node_family_labels("nvme", _NodeRules(
        NV_KINDS, (), {"worn": 2}, ("tenant", "fan"), NODE_SLOW_ITERS, NODE_SLOWDOWN, NV_NODE))
    shapes = {"intermittent" if np.median(f) < 1.0 + 1e-9 else
              "level" if f.min() > 1.0 + 1e-9 else "between" for _, f in events}
    q = [f.size // 4 for _, f in events]
    climbing = {e.kind for (e, f), k in zip(events, q, strict=True)
                if f[-k:].mean() > 1.1 * f[:k].mean()}
    assert {e.kind for e, _ in events} == {"worn", "tenant", "fan"}
    assert {"intermittent", "level"} <= shapes and subset and "fan" in climbing


def _observers_by_hand() -> _Observers:
    """An ``observe`` series by hand: 4 ranks on nodes of 2, the observers each node's first
    rank (0 and 2), 8 steps; compute 1, no host time, no extra work; a profiler cycle of 4
    steps (a warmup step at half an active step's +100 %, one active step, its trace export
    0.5 mean steps on the step after it); log lines 0.1 a step, a flush of 0.2 at step 3;
    rank 0's progress bar 0.05 at step 1; an evaluation's twice the collectives at step 6;
    the filesystem slow in the even steps (keys 0.1, 0.9, ..., duty 0.5)."""
    n = 8
    flush, bar, calls = np.zeros(n), np.zeros(n), np.ones(n)
    flush[3], bar[1], calls[6] = 0.2, 0.05, 2.0
    return _Observers(dev=np.ones((4, n)), host=np.zeros((4, n)), observers=np.array([0, 2]),
                      every=4, warmup=1, active=1, prof_x=1.0, prof_warm=0.5, export=0.5,
                      log=np.full((4, n), 0.1), flush=flush, bar=bar, calls=calls,
                      key=np.array([0.1, 0.9] * 4), burst=np.ones(n), duty=0.5,
                      level=np.ones(n), warm=np.ones(n), rest=np.zeros(n))


def test_observe_overhead_is_on_the_observers() -> None:
    """The observability overhead by hand: the profiler's warmup step (+50 %), active step
    (+100 %) and trace export (the step after) on the observers only, each step's log line,
    the flush, rank 0's progress bar; a restart (its first step 3x) begins the schedule anew;
    a profiler left active (g 0.8) puts every observer step at 1.8x at least; anomaly
    detection (g 1) doubles every rank's compute; NCCL_DEBUG (g 0.3) adds 0.3 a step on every
    rank, twice that at the evaluation; a slow filesystem (g 9) makes the observers' log
    lines 10x in its episodes; a growing log (g 3, climbing over 4 steps) 1.75x ... 4x."""
    ob = _observers_by_hand()
    obs = np.array([1.1, 1.1, 1.6, 2.3, 1.6, 1.1, 1.6, 2.1])
    got = ob.busy()
    assert got[0] == pytest.approx(obs + np.array([0, 0.05, 0, 0, 0, 0, 0, 0]))
    assert got[2] == pytest.approx(obs) and np.allclose(got[[1, 3]], 1.0)
    warm = np.ones(8)
    warm[5] = 3.0
    assert ob.busy(warm=warm)[2] == pytest.approx([1.1, 1.1, 1.6, 2.3, 1.6, 3.1, 1.1, 1.6])
    prof = ob.busy((_NodeSlow(0, 8, "profiler", 0.8, node=0),))
    assert prof[2] == pytest.approx([1.9, 1.9, 1.9, 2.3, 2.4, 1.9, 1.9, 2.1])
    assert np.allclose(prof[[1, 3]], 1.0)
    anomaly = ob.busy((_NodeSlow(0, 8, "anomaly", 1.0),))
    assert np.allclose(anomaly[[1, 3]], 2.0)
    assert anomaly[2] == pytest.approx([2.1, 2.1, 3.1, 4.3, 2.6, 2.1, 3.1, 4.1])
    nccl = ob.busy((_NodeSlow(0, 8, "nccl_debug", 0.3),))
    assert nccl[1] == pytest.approx([1.3] * 6 + [1.6, 1.3])
    assert nccl[2] == pytest.approx(obs + 0.3 * ob.calls)
    nfs = ob.busy((_NodeSlow(0, 8, "nfs_log", 9.0, node=0),))
    assert nfs[2] == pytest.approx(obs + 0.9 * (np.arange(8) % 2 == 0))
    assert np.allclose(nfs[[1, 3]], 1.0)
    grow = ob.busy((_NodeSlow(0, 4, "log_growth", 3.0, ramp=4, node=0),))
    assert grow[2] == pytest.approx(obs + 0.1 * np.array([0.75, 1.5, 2.25, 3.0, 0, 0, 0, 0]))


def _observers(rk: list[int], ranks: int) -> bool:
    """The observers an ``observe`` label names: rank 0 alone, or each node's first rank."""
    return rk == [0] or (len(rk) > 1 and rk[1] in OB_NODE
                         and rk == list(range(0, ranks, rk[1])))


def test_observe_labels() -> None:
    """The job's own observability overhead: every labelled slowdown (a profiler left active
    until the next restart, anomaly detection or synchronous launches set at a restart until
    the next, NCCL_DEBUG logging at a restart until the next, a synchronous log handler on a
    slow network filesystem in episodes, log lines growing until a restart) names the
    observers (rank 0, or each node's first rank; every rank for the debug modes) and passes
    the checks of :func:`_node_family_labels` (+12-45 % over their healthy mean, up to
    SPAN_OVERSHOOT more; negatives: the profiler's schedule and trace exports, log lines,
    flushes, the progress bar, checkpoints, evaluations, another batch at a restart stay
    under the rule); a multi-rank job names a strict subset of its ranks; the family has
    episodic spans (a tenth of the steps or more unchanged: the filesystem's episodes), level
    ones (every step slower) and climbing ones (a growing log: the span's last quarter slower
    than its first by 10 % or more)."""
    events, subset = _node_family_labels("observe", _NodeRules(
        OB_KINDS, ("anomaly", "nccl_debug"),
        {"profiler": 1, "anomaly": 2, "nccl_debug": 2, "log_growth": 1}, ("nfs_log",),
        NODE_SLOW_ITERS, NODE_SLOWDOWN, OB_NODE, _observers))
    shapes = {"episodic" if (f < 1.0 + 1e-9).mean() >= 0.1 else
              "level" if f.min() > 1.0 + 1e-9 else "between" for _, f in events}
    q = [f.size // 4 for _, f in events]
    climbing = {e.kind for (e, f), k in zip(events, q, strict=True)
                if f[-k:].mean() > 1.1 * f[:k].mean()}
    assert {e.kind for e, _ in events} == {k for k, _ in OB_KINDS}
    assert {"episodic", "level"} <= shapes and subset and "log_growth" in climbing


def _sites_by_hand(every: int = 4, window: int = 0, behind: float = 0.0) -> _Sites:
    """A ``wan`` series by hand: 2 sites of 2 ranks, 8 steps; compute 1, no host time, no
    extra work; each site's all-reduce 0.5, hidden behind 0.4 of the compute but for its last
    0.2 (exposed 0.1); an outer sync every ``every`` steps: latency 0.2, volume 1.0 at the full
    bandwidth, the transfer's window twice the bandwidth-delay product, no wave, no jitter; at
    least 0.1 of it exposed; the site's all-reduce 1 + 0.5 x the window's use meanwhile."""
    n = 8
    return _Sites(node=np.array([0, 0, 1, 1]), dev=np.ones((4, n)), host=np.zeros((4, n)),
                  inner=np.full((2, n), 0.5), hide=0.4, tail=0.2, every=every, lat=0.2,
                  vol=1.0, bdp=2.0, wave=np.ones(n), jit=np.ones(n), window=window,
                  behind=behind, wtail=0.1, eta=0.5, level=np.ones(n), warm=np.ones(n),
                  rest=np.zeros(n))


def test_wan_outer_sync_waits_for_the_wide_area_link() -> None:
    """The sites' syncs by hand: every step 1.1 (compute, the site's exposed all-reduce); a
    blocking outer sync after steps 3 and 7 (latency 0.2 + volume 1.0: 2.3); a longer route
    (g 3: the round trip 4x, the window-limited transfer 2x: 2.8), a degraded circuit (g 1:
    half the bandwidth: 2.2) and a peak hour (g 1: a half-sine hump over the span) on every
    rank; a site's fabric (g 1: its all-reduce 1.0, 0.6 exposed) on its own ranks; a restart
    at step 2 begins the outer schedule anew (one sync, after step 5); overlapped over the 2
    steps after it, the sync (1.2 in a window of 2.2) shows only its last 0.12 and slows the
    window's all-reduce by 0.5 x 1.2 / 2.2; a circuit at a quarter of the bandwidth (4.2)
    spills 2.0 past the window (a sync whose window ends past the series is not run);
    hierarchical (a sync every step behind half the compute) exposes 0.7 a step."""
    ws = _sites_by_hand()
    sync = np.array([0, 0, 0, 1, 0, 0, 0, 1.0])
    assert ws.busy() == pytest.approx(np.tile(1.1 + 1.2 * sync, (4, 1)))
    every = ("route", 3.0, 2.8), ("circuit", 1.0, 2.2)
    for kind, g, t in every:
        assert ws.busy((_NodeSlow(0, 8, kind, g),)) == pytest.approx(
            np.tile(1.1 + t * sync, (4, 1)))
    hump = np.sin(np.pi * (np.arange(8) + 0.5) / 8)
    assert ws.busy((_NodeSlow(0, 8, "peak", 1.0),)) == pytest.approx(
        np.tile(1.1 + (0.2 + 1.0 + hump) * sync, (4, 1)))
    fabric = ws.busy((_NodeSlow(0, 8, "fabric", 1.0, node=1),))
    assert fabric[:2] == pytest.approx(np.tile(1.1 + 1.2 * sync, (2, 1)))
    assert fabric[2:] == pytest.approx(np.tile(1.6 + 1.2 * sync, (2, 1)))
    warm = np.ones(8)
    warm[2] = 3.0
    assert ws.busy(warm=warm)[0] == pytest.approx([1.1, 1.1, 3.1, 1.1, 1.1, 2.3, 1.1, 1.1])
    ov = _sites_by_hand(window=2)
    slower = 0.5 * 1.2 / 2.2 * 0.1
    assert ov.busy()[3] == pytest.approx([1.1] * 4 + [1.1 + slower, 1.1 + slower + 0.12]
                                         + [1.1] * 2)
    spill = ov.busy((_NodeSlow(0, 8, "circuit", 3.0),))
    assert spill[0] == pytest.approx([1.1] * 4 + [1.15, 1.15 + 2.0] + [1.1] * 2)
    assert np.allclose(_sites_by_hand(every=1, behind=0.5).busy(), 1.8)


def test_wan_labels() -> None:
    """Training across sites over a wide-area link: every labelled slowdown (a route change to
    a longer path, a congested peak hour, a degraded WAN circuit: every rank, every site
    waits at the outer sync; a site's local fabric degrading: that site's ranks) passes the
    checks of :func:`_node_family_labels` (+12-45 % over the named ranks' healthy mean, up
    to SPAN_OVERSHOOT more; negatives: the outer syncs, the WAN's wave and jitter,
    checkpoints, evaluations, another batch at a restart stay under the rule); a multi-site
    job names a strict subset of its ranks (a site); the family has intermittent spans (the
    median step unchanged: only the outer syncs slower) and level ones (every step
    slower)."""
    events, subset = _node_family_labels("wan", _NodeRules(
        WN_KINDS, ("route", "peak", "circuit"), {}, tuple(k for k, _ in WN_KINDS),
        NODE_SLOW_ITERS, NODE_SLOWDOWN, WN_SITE))
    shapes = {"intermittent" if np.median(f) < 1.0 + 1e-9 else
              "level" if f.min() > 1.0 + 1e-9 else "between" for _, f in events}
    assert {e.kind for e, _ in events} == {k for k, _ in WN_KINDS}
    assert {"intermittent", "level"} <= shapes and subset


def _links_by_hand() -> _Links:
    """A ``pcie`` series by hand: a node of 4 ranks, two PCIe switches (ranks 0-1, 2-3), 8
    steps; compute 1, no host time, no extra work, a mean step of 1; each rank's transfers 0.4
    a step at the full rate, hidden behind half the compute but for their last 0.1 (0.04
    exposed); the second copy of switch 0 starts 0.2 of a step after its first, switch 1's
    0.5; no contention (the upstream carries both); a neighbour's episodes in the even steps
    (keys 0.1, 0.9, ..., duty 0.5); the storm's step factor 1."""
    n = 8
    return _Links(switch=np.array([0, 0, 1, 1]), first=np.array([0, 0, 2, 2]),
                  last=np.array([1, 1, 3, 3]), dev=np.ones((4, n)), host=np.zeros((4, n)),
                  xfer=np.full((4, n), 0.4), hide=0.5, tail=0.1, unit=1.0, share=0.0,
                  phase=np.array([[0.2] * n, [0.5] * n]), hidden=-1, hidden_at=0,
                  hidden_x=1.0, jolt=np.ones((4, n)), key=np.tile([0.1, 0.9], (2, 4)),
                  burst=np.ones((2, n)), duty=0.5, level=np.ones(n), warm=np.ones(n),
                  rest=np.zeros(n))


def test_pcie_links_and_switches_by_hand() -> None:
    """The PCIe path by hand: two transfers that repeat every step overlap on a circle
    (0.4 and 0.4, 0.2 apart: 0.2; 0.8 apart: 0.2 across the step's end; 0.5 apart: none);
    healthy, 0.04 of the 0.4 exposed (1.04); an upstream that halves two overlapping copies
    (share 1) lengthens switch 0's by its 0.2 of overlap (0.6: 0.1 exposed), not switch 1's;
    a link trained down (g 0.5: 3x, 1.2) shows 0.7 on its rank alone (its neighbour's
    contention is the healthy one); a replay storm (g 1) a half-sine hump on its rank; a
    neighbour on switch 1 (g 1) doubles its two ranks' transfers in the even steps (0.3
    exposed); a hidden downtraining of rank 1 from step 2 (x2: 0.8, 0.3 exposed) ends at the
    restart at step 5 (its first step 3x), which retrains the link."""
    c = np.array([0.4, 0.4, 0.4])
    assert _circular_overlap(c, c, np.array([0.2, 0.8, 0.5])) == pytest.approx([0.2, 0.2, 0.0])
    assert float(_circular_overlap(np.array(1.0), np.array(0.3), np.array(0.9))) == (
        pytest.approx(0.3))
    ln = _links_by_hand()
    assert np.allclose(ln.busy(), 1.04)
    ln.share = 1.0
    shared = ln.busy()
    assert np.allclose(shared[:2], 1.1) and np.allclose(shared[2:], 1.04)
    ln.share = 0.0
    down = ln.busy((_NodeSlow(0, 8, "downtrain", 0.5, node=3),))
    assert np.allclose(down[3], 1.7) and np.allclose(down[:3], 1.04)
    hump = np.sin(np.pi * (np.arange(8) + 0.5) / 8)
    storm = ln.busy((_NodeSlow(0, 8, "storm", 1.0, node=0),))
    assert storm[0] == pytest.approx(1.0 + np.maximum(0.04 * (1 + hump), 0.4 * (1 + hump) - 0.5))
    assert np.allclose(storm[1:], 1.04)
    nb = ln.busy((_NodeSlow(0, 8, "neighbour", 1.0, node=1),))
    assert nb[2:] == pytest.approx(np.tile([1.3, 1.04] * 4, (2, 1))) and np.allclose(nb[:2], 1.04)
    ln.hidden, ln.hidden_at, ln.hidden_x = 1, 2, 2.0
    warm = np.ones(8)
    warm[5] = 3.0
    assert ln.busy(warm=warm)[1] == pytest.approx([1.04, 1.04, 1.3, 1.3, 1.3, 3.04, 1.04, 1.04])
    assert ln.busy()[1] == pytest.approx([1.04, 1.04] + [1.3] * 6)


def _one_link(rk: list[int], ranks: int) -> bool:
    """The ranks a ``pcie`` label names: one rank (its link), or the two ranks behind one
    switch (``neighbour``: ``2k`` and ``2k + 1``, on one node)."""
    return len(rk) == 1 or (len(rk) == 2 and rk[0] % 2 == 0 and rk[1] == rk[0] + 1)


def test_pcie_labels() -> None:
    """The host-device PCIe path: every labelled slowdown (a link trained down after an error
    burst until the restart that retrains it, a replay storm that rises and recovers: one
    rank; another tenant's or the NIC's traffic on a switch's upstream in episodes: its one or
    two ranks) passes the checks of :func:`_node_family_labels` (+12-45 % over the named
    ranks' healthy mean, up to SPAN_OVERSHOOT more; negatives: the switch's drifting
    contention, AER replays, variable batches, a downtrained link hidden behind the compute,
    checkpoints, evaluations, another batch at a restart stay under the rule); a multi-rank
    job names a strict subset of its ranks; the family has level spans (every step slower: a
    downtrained link), humps (the middle third of the span 10 % above its first and last
    quarters: a storm) and intermittent ones (a tenth of the steps or more unchanged: the
    neighbour's episodes)."""
    events, subset = _node_family_labels("pcie", _NodeRules(
        PC_KINDS, (), {"downtrain": 1}, ("storm", "neighbour"), NODE_SLOW_ITERS,
        NODE_SLOWDOWN, PC_NODE, _one_link))
    shapes: dict[str, set[str]] = {}
    for e, f in events:
        q, third = f.size // 4, f.size // 3
        mid = f[third:2 * third].mean()
        shape = ("level" if f.min() > 1.0 + 1e-9 else
                 "intermittent" if (f < 1.0 + 1e-9).mean() >= 0.1 else "between")
        if mid > 1.1 * f[:q].mean() and mid > 1.1 * f[-q:].mean():
            shape = "hump"
        shapes.setdefault(e.kind, set()).add(shape)
    assert set(shapes) == {k for k, _ in PC_KINDS} and subset
    assert ("level" in shapes["downtrain"] and "hump" in shapes["storm"]
            and "intermittent" in shapes["neighbour"])


def _vms_by_hand(n: int = 8) -> _Vms:
    """A ``steal`` series by hand: 2 VMs of 2 ranks, ``n`` steps; compute 1, the launch
    thread's CPU time 0.2 a step, the launch queue ahead of the device by half the compute but
    for the thread's last 0.1 (0.02 exposed), the loader's CPU time 0.2 a batch; each VM's own
    demand 0.3 of its host's CPUs and its co-tenants' 0.5 (0.8: no steal), no variation, no
    maintenance; a time slice of 0.1, the ranks' phases against it 0.3 (ranks 0 and 2) and
    0.5 (ranks 1 and 3); a neighbour's episodes in the even steps (keys 0.1, 0.9, ..., duty
    0.5, demand 1 x g); a migration's pre-copy of 2 steps at +50 % and a blackout of 3; no
    extra work."""
    return _Vms(node=np.array([0, 0, 1, 1]), dev=np.ones((4, n)), host=np.full((4, n), 0.2),
                hide=0.5, tail=0.1, feed=np.full((4, n), 0.2),
                phase=np.repeat([[0.3], [0.5], [0.3], [0.5]], n, axis=1), quantum=0.1,
                own=np.full(2, 0.3), other=np.full(2, 0.5), vary=np.zeros((2, n)), scale=1.0,
                dirty=np.zeros((2, n)), frozen=np.zeros((2, n)), pre=2, pre_dirty=0.5,
                blackout=3.0, key=np.tile([0.1, 0.9], (2, n // 2)), burst=np.ones((2, n)),
                duty=0.5, level=np.ones(n), warm=np.ones(n), rest=np.zeros(n))


def test_steal_vms_by_hand() -> None:
    """A VM's steal by hand: under its host's CPUs (demand 0.8) nothing is stolen (1.02); a
    neighbour of g 1 on VM 1 (demand 1.8 in the even steps: every vCPU runs 1 / 1.8 of the
    time) makes the launch thread's 0.2 wait 0.2 x 0.8 = 0.16 on average, in whole time
    slices: floor(0.3 + 1.6) = 1 or floor(0.5 + 1.6) = 2 slices (0.3 / 0.4 of host time, 0.03
    / 0.04 exposed), nobody else; at g 4 (demand 4.8) 7 / 8 slices (0.9 / 1.0 of host time,
    0.4 / 0.5 past the queue's lead of 0.5) and the loader (0.2 x 4.8 = 0.96 a batch) still
    behind the device; with the loader at 0.5 a batch, 2.4, it binds the step; packing k = 2
    tenants of g 1 over a climb of 4 steps (demand 1.3 for 2 steps, then 1.8); a migration on
    VM 0 from step 2: the pre-copy's dirty pages (host 0.3: 0.03 exposed) for 2 steps, the VM
    frozen 3 more at step 4, then demand 1.8 (0.8 x 0.2 / 0.1 = 1.6 slices); a short launch
    thread (0.02, demand 1.1: 0.02 slices on average) waits a whole slice at a phase past
    0.98, none otherwise, and its mean wait over evenly spread phases is 0.02 x 0.1; the
    co-tenants' variation (log 2) doubles their demand at scale 1 and does by its square root
    at scale 0.5; a warm-up multiplies the work, not a blackout."""
    vm = _vms_by_hand()
    assert np.allclose(vm.busy(), 1.02)
    nb = vm.busy((_NodeSlow(0, 8, "neighbour", 1.0, node=1),))
    assert np.allclose(nb[:2], 1.02)
    assert nb[2:] == pytest.approx(np.array([[1.03, 1.02] * 4, [1.04, 1.02] * 4]))
    big = vm.busy((_NodeSlow(0, 8, "neighbour", 4.0, node=1),))
    assert big[2:] == pytest.approx(np.array([[1.4, 1.02] * 4, [1.5, 1.02] * 4]))
    vm.feed[:] = 0.5
    assert vm.busy((_NodeSlow(0, 8, "neighbour", 4.0, node=1),))[2:] == pytest.approx(
        np.array([[2.4, 1.02] * 4] * 2))
    vm.feed[:] = 0.2
    pack = vm.busy((_NodeSlow(0, 8, "packing", 1.0, ramp=4, node=0, aim=0.0),))
    # demand 1.3: 0.2 x 0.3 / 0.1 = 0.6 slices, floor(0.9) = 0, floor(1.1) = 1
    assert pack[0] == pytest.approx([1.02, 1.02] + [1.03] * 6)
    assert pack[1] == pytest.approx([1.03, 1.03] + [1.04] * 6) and np.allclose(pack[2:], 1.02)
    mig = vm.busy((_NodeSlow(2, 8, "migrated", 1.0, node=0),))
    assert mig[0] == pytest.approx([1.02, 1.02, 1.03, 1.03, 4.03, 1.03, 1.03, 1.03])
    assert mig[1] == pytest.approx([1.02, 1.02, 1.03, 1.03, 4.04, 1.04, 1.04, 1.04])
    assert np.allclose(mig[2:], 1.02)
    assert vm.busy((_NodeSlow(2, 8, "migrated", 1.0, node=0),), frozen=False)[0, 4] == (
        pytest.approx(1.03))
    short = _vms_by_hand(1000)
    short.host[:] = 0.02
    short.other[:] = 0.8  # demand 1.1
    short.phase = np.tile((np.arange(1000) + 0.5) / 1000, (4, 1))
    wait = short.busy() - 1.0 - 0.1 * 0.02  # the exposed launch thread's share
    assert np.allclose(wait[:, :980], 0.0) and np.allclose(wait[:, 980:], 0.1 * 0.1)
    assert float(wait.mean()) / 0.1 == pytest.approx(0.02 * 0.1)
    vm.vary[:] = np.log(2.0)
    vm.other[:] = 0.9  # 0.3 + 1.8 = 2.1: 0.2 x 1.1 / 0.1 = 2.2 slices, floor 2 and 2
    assert np.allclose(vm.busy(), 1.04)
    vm.scale = 0.5  # 0.3 + 0.9 x 1.414 = 1.57: 1.14 slices, floor 1 and 1
    assert np.allclose(vm.busy(), 1.03)
    vm.scale, vm.vary[:], vm.other[:] = 1.0, 0.0, 0.5
    vm.warm[:] = 2.0
    vm.frozen[0, 3] = 5.0
    assert vm.busy()[0] == pytest.approx([2.04] * 3 + [7.04] + [2.04] * 4)


def test_steal_labels() -> None:
    """A cloud VM's steal time: every labelled slowdown (a co-tenant's CPU-heavy work in
    episodes, tenants packed onto the host one after another, a live migration onto a busier
    host until the restart that moves the job off it) names the ranks of one VM and passes the
    checks of :func:`_node_family_labels` (+12-45 % over their healthy mean, up to
    SPAN_OVERSHOOT more; negatives: the co-tenants' wandering demand, tenants that come and
    go, the day, the whole time slices a short launch thread waits, the maintenance's
    pre-copies and blackouts, checkpoints, evaluations, another batch at a restart stay under
    the rule); a multi-VM job names a strict subset of its ranks; the family has level spans
    (every step slower), climbs (the last quarter of the span 10 % above its first: tenants
    arriving one by one, a pre-copy before the busier host) and intermittent ones (a tenth of
    the steps or more unchanged: the neighbour's episodes, or steal that only shows past the
    host's capacity)."""
    events, subset = _node_family_labels("steal", _NodeRules(
        ST_KINDS, (), {"migrated": 1}, ("neighbour", "packing"), NODE_SLOW_ITERS,
        NODE_SLOWDOWN, ST_VM))
    shapes: dict[str, set[str]] = {}
    for e, f in events:
        q = f.size // 4
        shape = ("level" if f.min() > 1.0 + 1e-9 else
                 "intermittent" if (f < 1.0 + 1e-9).mean() >= 0.1 else "between")
        if f[-q:].mean() > 1.1 * f[:q].mean():
            shape = "climb"
        shapes.setdefault(e.kind, set()).add(shape)
    assert set(shapes) == {k for k, _ in ST_KINDS} and subset
    assert "climb" in shapes["packing"] and "level" in shapes["neighbour"]
    assert "intermittent" in shapes["neighbour"] | shapes["packing"]
