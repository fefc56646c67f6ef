"""The example job's sample loader with sequence-length rebalancing (issue 11 pt 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stragglers.mitigate.lengths import read_lengths
from stragglers.mitigate.seqlen import CostModel, fit_from_trace
from stragglers.testbed.job import JobConfig, run_job
from stragglers.testbed.loader import SampleLoader, check_config, sample_lengths
from stragglers.trace.io import read_trace

torch = pytest.importorskip("torch")

QUADRATIC = CostModel(0.01, 1.0, 0.5)
SMALL = dict(dp=2, pp=2, steps=4, warmup_steps=1, hidden=32, heads=2, seq_len=32,
             vocab_size=64, microbatches=2, micro_batch_size=3, gc_interval=0,
             seq_len_dist="longtail")


def _loader(mode: str, model: CostModel = QUADRATIC, dp: int = 2, microbatches: int = 3,
            size: int = 4, longtail: bool = True) -> SampleLoader:
    return SampleLoader(mode, seed=7, dp=dp, microbatches=microbatches,
                        micro_batch_size=size, seq_len=64, vocab=97, longtail=longtail,
                        model=model)


def _samples_fed(loader: SampleLoader, step: int) -> dict[tuple[int, ...], int]:
    """Every sample the loader feeds in a step, as its token tuple -> count."""
    fed: dict[tuple[int, ...], int] = {}
    for d in range(loader.dp):
        for m in range(loader.microbatches):
            tokens, labels, lengths, _ = loader.batch(step, True, d, m, "cpu")
            assert tokens.shape == labels.shape == (1, sum(lengths))
            assert loader.shape(step, True, d, m, 8) == (1, sum(lengths), 8)
            for piece, lab in zip(tokens[0].split(lengths), labels[0].split(lengths),
                                  strict=True):
                assert torch.equal(piece[1:], lab[:-1])  # next-token labels, per sample
                key = tuple(piece.tolist()) + (int(lab[-1]),)
                fed[key] = fed.get(key, 0) + 1
    return fed


def test_same_samples_with_and_without_rebalancing() -> None:
    plain, greedy = _loader("in-order"), _loader("greedy")
    for step in (0, 5, 11):
        a, b = _samples_fed(plain, step), _samples_fed(greedy, step)
        assert sum(a.values()) == plain.samples == 24
        assert a == b  # the same multiset of samples (tokens and labels), split differently
        split = [[idx.tolist() for idx in rank] for rank in greedy.plan(step).partition.batches]
        assert sorted(i for rank in split for idx in rank for i in idx) == list(range(24))
        # in order: micro_batch_size consecutive samples per micro-batch, rank by rank
        dealt = [idx.tolist() for rank in plain.plan(step).partition.batches for idx in rank]
        assert dealt == [list(range(4 * k, 4 * k + 4)) for k in range(6)]
        assert split != [dealt[:3], dealt[3:]]  # greedy moved samples


def _reference_lpt(cost: list[float], bins: int) -> list[list[int]]:
    """Largest first onto the least-loaded bin, the lowest bin on a tie (written out)."""
    load = [0.0] * bins
    out: list[list[int]] = [[] for _ in range(bins)]
    for i in sorted(range(len(cost)), key=lambda j: (-cost[j], j)):
        b = min(range(bins), key=lambda k: (load[k], k))
        out[b].append(i)
        load[b] += cost[i]
    return out


def test_loader_feeds_the_greedy_partition() -> None:
    loader = _loader("greedy")
    for step in (2, 9):
        lengths = sample_lengths(7, step, 24, 64, True)
        assert len(set(lengths.tolist())) > 3  # long-tailed: many lengths
        cost = [0.01 * x * x + x for x in lengths.tolist()]
        for d, rank in enumerate(_reference_lpt(cost, 2)):
            mbs = _reference_lpt([cost[i] for i in rank], 3)
            for m, members in enumerate(mbs):
                expect = sorted(int(lengths[rank[j]]) for j in members)
                assert sorted(loader.microbatch_lengths(step, True, d, m)) == expect
                assert sorted(loader.batch(step, True, d, m, "cpu")[2]) == expect


def test_equal_lengths_split_evenly() -> None:
    loader = _loader("greedy", longtail=False)
    plan = loader.plan(3)
    assert all(idx.size == 4 for rank in plan.partition.batches for idx in rank)
    assert plan.tokens == 24 * 64


def test_greedy_balances_the_modelled_cost() -> None:
    plain, greedy = _loader("in-order"), _loader("greedy")
    worse = [plain.plan(s).partition.makespan / greedy.plan(s).partition.makespan
             for s in range(20)]
    assert min(worse) >= 1.0 and np.median(worse) > 1.05


def test_config_errors(tmp_path: Path) -> None:
    base = JobConfig(out_dir=str(tmp_path / "o"), **SMALL)
    with pytest.raises(ValueError, match="must be one of off, in-order, greedy, paired"):
        JobConfig(out_dir=str(tmp_path / "o"), rebalance="lpt").check()
    with pytest.raises(ValueError, match="--cost-model is used by --rebalance greedy and "):
        JobConfig(out_dir=str(tmp_path / "o"), rebalance="in-order",
                  cost_model=str(tmp_path / "m.json")).check()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"a": 0.0, "b": -1.0, "c": 0.0}))
    with pytest.raises(ValueError, match=r"bad.json: field 'a'/'b': a sample of 16 tokens"):
        JobConfig(out_dir=str(tmp_path / "o"), rebalance="greedy",
                  cost_model=str(bad)).check()
    bad.write_text(json.dumps({"a": 0.0, "b": "x", "c": 0.0}))
    with pytest.raises(ValueError, match=r"bad.json: field 'b': expected a finite number"):
        JobConfig(out_dir=str(tmp_path / "o"), rebalance="greedy",
                  cost_model=str(bad)).check()
    base.check()


def test_empty_micro_batch_is_refused_before_the_run(tmp_path: Path) -> None:
    # 4 samples over 2 DP ranks x 2 micro-batches: a rank whose largest sample outweighs
    # the two next ones together gets one sample only, and one micro-batch stays empty.
    cfg = JobConfig(out_dir=str(tmp_path / "o"), dp=2, microbatches=2, micro_batch_size=1,
                    seq_len=64, steps=40, warmup_steps=0, seq_len_dist="longtail",
                    rebalance="greedy")
    first = None
    for step in range(40):
        s = sorted(sample_lengths(cfg.seed, step, 4, 64, True).tolist(), reverse=True)
        if s[0] > s[1] + s[2]:
            first = step
            break
    assert first is not None  # the premise: such a step exists in the run
    with pytest.raises(ValueError, match=f"in step {first} the split leaves micro-batch 1 "):
        check_config(cfg)


@pytest.mark.slow
def test_cli_refuses_a_bad_rebalance_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "stragglers.testbed.job",
                           "--out-dir", str(tmp_path / "o"), "--rebalance", "sorted"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "rebalance must be one of off, in-order, greedy, paired, got 'sorted'")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_real_runs_train_the_same_and_record_lengths(tmp_path: Path) -> None:
    """In-order and greedy runs see the same samples with the same loss weights: the same
    losses (the partition changes only float rounding); the greedy run (ranks pinned to CPUs)
    writes its trace and the lengths it fed, and the cost model can be fitted from them."""
    plain = run_job(JobConfig(out_dir=str(tmp_path / "plain"), rebalance="in-order",
                              **SMALL))
    model = tmp_path / "cost.json"
    model.write_text(json.dumps({"a": 0.001, "b": 1.0, "c": 0.0, "r2": 0.5}))
    greedy = run_job(JobConfig(out_dir=str(tmp_path / "greedy"), rebalance="greedy",
                               cost_model=str(model), pin_cpus=True, **SMALL))
    assert len(plain["losses"]) == len(greedy["losses"]) == 4
    assert greedy["losses"] == pytest.approx(plain["losses"], rel=1e-4)
    off = run_job(JobConfig(out_dir=str(tmp_path / "off"), probe=False, **SMALL))
    assert "lengths" not in off and not (tmp_path / "off" / "lengths.jsonl").exists()

    out = tmp_path / "greedy"
    assert Path(greedy["trace"]).is_file() and greedy["trace_steps"] == [1, 2, 3]
    lengths = read_lengths(out / "lengths.jsonl")
    assert lengths.keys.shape == (3 * 2 * 2, 3)  # 3 probed steps x 2 DP ranks x 2 mbs
    loader = SampleLoader("greedy", 1234, 2, 2, 3, 32, 64, True, CostModel(0.001, 1.0, 0.0))
    for (step, d, m), total in zip(lengths.keys.tolist(), lengths.sum_len, strict=True):
        assert total == sum(loader.microbatch_lengths(step, True, d, m))
    fit = fit_from_trace(read_trace(out / "trace.parquet"), lengths, stage=1)
    assert fit.microbatches == 12 and fit.trace_only == 0 and fit.lengths_only == 0
    assert min(fit.model.a, fit.model.b, fit.model.c) >= 0


def test_paired_steps_train_the_same_samples_both_ways() -> None:
    paired, plain, greedy = _loader("paired"), _loader("in-order"), _loader("greedy")
    for k in (1, 4):
        fed = _samples_fed(plain, k)
        assert _samples_fed(paired, 2 * k) == fed == _samples_fed(paired, 2 * k + 1)
        for step, ref in ((2 * k, plain), (2 * k + 1, greedy)):
            got = [[i.tolist() for i in r] for r in paired.plan(step).partition.batches]
            assert got == [[i.tolist() for i in r] for r in ref.plan(k).partition.batches]
