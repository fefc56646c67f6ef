"""The Lightning and Hugging Face callbacks end to end, as the docs show them: a real
2-process DDP training on CPU (gloo) with rank 1 slowed (a sleep inside its forward, several
times its compute), its trace analysed by ``stragglers analyze``.

Lightning starts its two processes itself (``python docs/snippets/lightning_ddp.py``); the
``Trainer`` runs under ``torchrun``. Each test skips when its library is missing (fails under
CI=true: CI installs the ``lightning`` and ``hf`` extras)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from stragglers.probe.check import check_trace
from stragglers.probe.merge import load_meta

from .integration import SNIPPETS, analyze, need, run, torchrun

pytest.importorskip("torch")


def _check_slowed_rank_found(out: Path, trial: str) -> dict[str, Any]:
    meta = load_meta(out / "meta.yaml")
    assert (meta["trial_name"], meta["dp_size"], meta["pp_size"]) == (trial, 2, 1)
    trace = pd.read_parquet(out / "trace.parquet")
    assert check_trace(trace, meta) == []
    assert sorted(trace["step"].unique()) == list(range(2, 12))  # steps 0-1: warm-up
    fwd = trace[trace["optype"] == "forward-compute"].groupby("dp_rank")["duration"].min()
    assert fwd[1] >= 0.1  # the sleep is inside rank 1's forward span
    result = analyze(out)
    verdict = result["verdict"]
    assert verdict["cause"] == "worker", verdict["evidence"]
    assert verdict["workers"] == ["1,0"]
    scores = result["attribution"]["worker"]
    assert scores["1,0"] > scores["0,0"] + 0.15, scores
    return result


def test_lightning_callback_finds_the_slowed_rank(tmp_path: Path) -> None:
    need("lightning", "lightning")
    out = tmp_path / "pl"
    run([sys.executable, str(SNIPPETS / "lightning_ddp.py"), str(out)], env={"SLOW_RANK": "1"})
    _check_slowed_rank_found(out, "lightning")


def test_hf_trainer_callback_finds_the_slowed_rank(tmp_path: Path) -> None:
    need("transformers", "hf")
    need("accelerate", "hf")
    out = tmp_path / "hf"
    torchrun(SNIPPETS / "hf_trainer.py", str(out), env={"SLOW_RANK": "1",
                                                      "HF_HUB_OFFLINE": "1"})
    _check_slowed_rank_found(out / "stragglers", "hf")
