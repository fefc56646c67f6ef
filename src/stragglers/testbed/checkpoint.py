"""Checkpoints of the example job: one file per (dp, stage) role, a ``latest`` marker last.

The job's batches are a pure function of ``(seed, step, dp_rank, microbatch)``
(:func:`stragglers.testbed.gpt.make_batch`), so the data position is the step number
and no RNG state has to be kept. What a rank owns is its shard of the sharded optimizer: the
fp32 main parameters and the two AdamW moments, plus the optimizer's step count (the full
parameters are rebuilt by the all-gather at the start of the next step).

The shard index is the rank's place in its stage's DP group (its dp rank unless
``--rank-map`` moved roles; the shards' content does not depend on which DP replica holds
them, since the gradients are averaged over DP). Layout:
``DIR/step-NNNNNNNN/shard{i}-stage{s}.pt`` (each written to a temporary name and renamed),
then ``DIR/latest`` (JSON ``{"step", "dp", "pp"}``, written atomically by rank 0 once every rank
has saved). A step folder without the marker pointing to it is incomplete and never loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stragglers.atomic import open_atomic
from stragglers.errors import InputError
from stragglers.recover.marker import LATEST, Marker, read_marker


def step_dir(ckpt_dir: Path, step: int) -> Path:
    """Folder of the checkpoint taken after ``step`` steps."""
    return ckpt_dir / f"step-{step:08d}"


def role_file(ckpt_dir: Path, step: int, shard: int, stage: int) -> Path:
    """File of optimizer shard ``shard`` of ``stage`` in the checkpoint after ``step`` steps."""
    return step_dir(ckpt_dir, step) / f"shard{shard}-stage{stage}.pt"


def save_role(ckpt_dir: Path, step: int, shard: int, stage: int, opt: Any) -> Path:
    """Write this rank's optimizer shard (after ``step`` completed steps) atomically."""
    import torch

    path = role_file(ckpt_dir, step, shard, stage)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {"step": step, "opt_steps": opt.steps, "lo": opt.lo, "hi": opt.hi,
             "main": opt.main.detach().cpu(), "exp_avg": opt.exp_avg.detach().cpu(),
             "exp_avg_sq": opt.exp_avg_sq.detach().cpu()}
    with open_atomic(path, "wb") as fh:
        torch.save(state, fh)
    return path


def load_role(ckpt_dir: Path, marker: Marker, shard: int, stage: int, opt: Any) -> None:
    """Load shard ``shard`` of ``stage`` of the checkpoint named by ``marker`` into ``opt``."""
    import torch

    path = role_file(ckpt_dir, marker.step, shard, stage)
    if not path.exists():
        raise InputError(f"{path}: missing (the checkpoint of step {marker.step} has no file "
                         f"for shard {shard}, stage {stage})")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if (state.get("lo"), state.get("hi")) != (opt.lo, opt.hi):
        raise InputError(f"{path}: field 'lo'/'hi': shard [{state.get('lo')}, "
                         f"{state.get('hi')}) does not match this layout's "
                         f"[{opt.lo}, {opt.hi}) (was it written with another dp?)")
    device = opt.main.device
    opt.main.copy_(state["main"].to(device))
    opt.exp_avg.copy_(state["exp_avg"].to(device))
    opt.exp_avg_sq.copy_(state["exp_avg_sq"].to(device))
    opt.steps = int(state["opt_steps"])


def check_resume_layout(ckpt_dir: Path, dp: int, pp: int) -> Marker | None:
    """The ``latest`` marker a ``--resume`` run with ``dp x pp`` would load (None: nothing saved
    yet); an InputError when it was written by another layout (the optimizer shards would not
    fit: re-splitting them for another dp is not supported)."""
    marker = read_marker(ckpt_dir)
    if marker is not None and (marker.dp, marker.pp) != (dp, pp):
        raise InputError(f"{ckpt_dir / LATEST}: field 'dp'/'pp': written by dp {marker.dp} x pp "
                         f"{marker.pp}, this run is dp {dp} x pp {pp} (resuming with another "
                         f"layout is not supported)")
    return marker
