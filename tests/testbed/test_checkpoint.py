"""Checkpoints of the example job: K steps + resume for K steps equals 2K steps."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from stragglers.testbed import checkpoint
from stragglers.testbed.job import JobConfig, run_job

pytest.importorskip("torch")

SMALL = dict(dp=2, pp=2, warmup_steps=1, hidden=32, heads=2, seq_len=16, vocab_size=64,
             microbatches=2, micro_batch_size=2, gc_interval=0, probe=False)


@pytest.fixture(scope="module")
def first_half(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted 6-step run, and a 3-step run that checkpointed at step 3: the
    resume tests start from copies of that checkpoint (a resume only reads it)."""
    root = tmp_path_factory.mktemp("ckpt-runs")
    whole = run_job(JobConfig(out_dir=str(root / "whole"), steps=6, **SMALL))
    ckpt = root / "ckpt"
    first = run_job(JobConfig(out_dir=str(root / "a"), steps=3, ckpt_dir=str(ckpt),
                              ckpt_every=3, **SMALL))
    return {"whole": whole, "first": first, "ckpt": ckpt}


def _checkpoint_copy(first_half: dict[str, Any], tmp_path: Path) -> Path:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(first_half["ckpt"], ckpt)
    return ckpt


@pytest.mark.slow
def test_resume_continues_the_loss_curve(first_half: dict[str, Any], tmp_path: Path) -> None:
    """The losses of steps K..2K after a resume are those of the uninterrupted run."""
    whole, first = first_half["whole"], first_half["first"]
    ckpt = _checkpoint_copy(first_half, tmp_path)
    assert checkpoint.read_marker(ckpt) == checkpoint.Marker(step=3, dp=2, pp=2)
    second = run_job(JobConfig(out_dir=str(tmp_path / "b"), steps=6, ckpt_dir=str(ckpt),
                               resume=True, **SMALL))
    assert second["first_step"] == 3
    assert first["losses"] == pytest.approx(whole["losses"][:3], rel=1e-6, abs=1e-7)
    assert second["losses"] == pytest.approx(whole["losses"][3:], rel=1e-6, abs=1e-7)
    # a resume that did not load would restart at the initial loss: the test can fail
    assert second["losses"][0] != pytest.approx(whole["losses"][0], rel=1e-3)


@pytest.mark.slow
def test_resume_without_checkpoint_starts_at_zero(tmp_path: Path) -> None:
    """--resume with an empty folder (no `latest` yet) trains from step 0."""
    summary = run_job(JobConfig(out_dir=str(tmp_path / "o"), steps=3,
                                ckpt_dir=str(tmp_path / "none"), resume=True, **SMALL))
    assert summary["first_step"] == 0 and len(summary["losses"]) == 3


@pytest.mark.slow
def test_resume_with_permuted_ranks(first_half: dict[str, Any], tmp_path: Path) -> None:
    """After a restart with the roles reversed (rank r takes position 3 - r, so each rank
    loads another role's checkpoint and holds another optimizer shard), the losses are those
    of the uninterrupted run."""
    whole = first_half["whole"]
    ckpt = _checkpoint_copy(first_half, tmp_path)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"dp_size": 2, "pp_size": 2, "rank_permutation": [3, 2, 1, 0]}))
    second = run_job(JobConfig(out_dir=str(tmp_path / "b"), steps=6, ckpt_dir=str(ckpt),
                               resume=True, rank_map=str(plan), **SMALL))
    records = {r: json.loads((tmp_path / "b" / "workers" / f"worker-{r:05d}.json").read_text())
               for r in range(4)}
    assert (records[0]["dp_rank"], records[0]["stage"]) == (1, 1)
    assert second["losses"] == pytest.approx(whole["losses"][3:], rel=1e-5, abs=1e-6)


def test_bad_rank_map_is_refused(tmp_path: Path) -> None:
    """A map that is not a permutation names the file, field and row."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([0, 1, 1, 3]))
    with pytest.raises(ValueError, match=r"plan.json: field 'rank_permutation'"):
        JobConfig(out_dir=str(tmp_path / "o"), rank_map=str(plan), **SMALL).check()
    plan.write_text(json.dumps([0, 1, 2, 9]))
    with pytest.raises(ValueError, match=r"row 3"):
        JobConfig(out_dir=str(tmp_path / "o"), rank_map=str(plan), **SMALL).check()
