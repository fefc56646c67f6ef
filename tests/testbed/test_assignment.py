"""Live S2 in the example job: a micro-batch assignment changes where micro-batches run, not
what the step computes (same loss, same gradients), and a bad action file never stops it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stragglers.errors import InputError
from stragglers.mitigate.action import ACTION_SCHEMA, parse_action
from stragglers.testbed.job import JobConfig, run_job

torch = pytest.importorskip("torch")

# clip far above the gradient norm: AdamW's first exp_avg is then exactly 0.1 x the gradient
TINY = dict(dp=2, pp=2, warmup_steps=0, hidden=32, heads=2, seq_len=16, vocab_size=64,
            microbatches=2, micro_batch_size=2, gc_interval=0, probe=False, clip=1e9)


def _action(path: Path, assignment: list[int], seq: int = 1, step: int = 0) -> Path:
    path.write_text(json.dumps({"schema": ACTION_SCHEMA, "seq": seq, "step": step,
                                "kind": "microbatch", "assignment": assignment}))
    return path


def _gradients(ckpt: Path) -> dict[str, torch.Tensor]:
    """exp_avg after one step = (1 - beta1) * gradient, per (stage, shard) checkpoint file."""
    files = sorted(ckpt.rglob("*.pt"))
    assert files, f"no checkpoint files under {ckpt}"
    return {f.name: torch.load(f, weights_only=True)["exp_avg"] / 0.1 for f in files}


def _record(out: Path, rank: int = 0) -> dict:
    return json.loads((out / "workers" / f"worker-{rank:05d}.json").read_text())


@pytest.fixture(scope="module")
def even_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One step with the even split and the default seed, checkpointed: the summary and the
    checkpoint folder (read by both tests below, written by neither)."""
    root = tmp_path_factory.mktemp("even")
    even = run_job(JobConfig(out_dir=str(root / "even"), steps=1,
                             ckpt_dir=str(root / "ck_even"), ckpt_every=1, **TINY))
    return even, root / "ck_even"


@pytest.mark.slow
def test_uneven_assignment_keeps_loss_and_gradients(
        even_run: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    """[M, M] and [M + 1, M - 1] on dp 2 x pp 2 (gloo, real processes): the same loss, and the
    same gradient on every stage and optimizer shard (up to float summation order)."""
    even, ck_even = even_run
    moved = run_job(JobConfig(out_dir=str(tmp_path / "moved"), steps=1,
                              ckpt_dir=str(tmp_path / "ck_moved"), ckpt_every=1,
                              action_file=str(_action(tmp_path / "a.json", [3, 1])), **TINY))
    live = _record(tmp_path / "moved")["live"]
    assert live["applied"] == [{"seq": 1, "step": 0, "assignment": [3, 1]}]
    assert live["errors"] == 0
    assert moved["losses"] == pytest.approx(even["losses"], rel=1e-6)
    g_even, g_moved = _gradients(ck_even), _gradients(tmp_path / "ck_moved")
    assert g_even.keys() == g_moved.keys() and len(g_even) == 4
    for name in g_even:
        assert g_even[name].abs().max() > 0
        torch.testing.assert_close(g_moved[name], g_even[name], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_assignment_without_global_indexing_would_differ(
        even_run: tuple[dict[str, Any], Path], tmp_path: Path) -> None:
    """The control of the test above: the gradient does depend on which samples run (a
    different seed = other samples), so equal gradients are not a tautology."""
    other = {**TINY, "seed": 99}
    run_job(JobConfig(out_dir=str(tmp_path / "b"), steps=1, ckpt_dir=str(tmp_path / "ck_b"),
                      ckpt_every=1, **other))
    g_a, g_b = _gradients(even_run[1]), _gradients(tmp_path / "ck_b")
    assert any(not torch.allclose(g_a[k], g_b[k], rtol=1e-3) for k in g_a)


@pytest.mark.slow
def test_bad_action_file_is_counted_and_ignored(tmp_path: Path) -> None:
    """A file that sums to the wrong total: logged, counted, ignored; the job trains on with
    the even split, its losses those of a run without an action file."""
    base = run_job(JobConfig(out_dir=str(tmp_path / "base"), steps=2, **TINY))
    bad = _action(tmp_path / "bad.json", [3, 3])
    summary = run_job(JobConfig(out_dir=str(tmp_path / "o"), steps=2, action_file=str(bad),
                                **TINY))
    live = _record(tmp_path / "o")["live"]
    assert live["errors"] == 1 and live["applied"] == []
    assert summary["losses"] == pytest.approx(base["losses"], rel=1e-6)


@pytest.mark.parametrize(("body", "match"), [
    ("{", "line 1: not JSON"),
    ('{"schema": "x", "seq": 1, "step": 0, "kind": "microbatch", "assignment": [2, 2]}',
     "field 'schema'"),
    (json.dumps({"schema": ACTION_SCHEMA, "seq": 0, "step": 0, "kind": "microbatch",
                 "assignment": [2, 2]}), "field 'seq'"),
    (json.dumps({"schema": ACTION_SCHEMA, "seq": 1, "step": 0, "kind": "microbatch",
                 "assignment": [4, 0]}), "field 'assignment' row 1"),
    (json.dumps({"schema": ACTION_SCHEMA, "seq": 1, "step": 0, "kind": "microbatch",
                 "assignment": [2, 2, 0]}), "a list of 2"),
    (json.dumps({"schema": ACTION_SCHEMA, "seq": 1, "step": 0, "kind": "restart",
                 "assignment": [2, 2]}), "field 'kind'"),
])
def test_parse_action_names_the_field(body: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_action(body, "act.json", dp=2, microbatches=2)


def test_parse_action_accepts_a_valid_file() -> None:
    act = parse_action(json.dumps({"schema": ACTION_SCHEMA, "seq": 2, "step": 7,
                                   "kind": "microbatch", "assignment": [3, 1]}),
                       "act.json", dp=2, microbatches=2)
    assert (act.seq, act.step, act.assignment) == (2, 7, (3, 1))
