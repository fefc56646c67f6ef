"""The Lightning and Hugging Face callbacks end to end, as docs/integrations.md shows them
(its snippets and command lines): a real 2-process DDP training on CPU (gloo) with rank 1
slowed (a sleep inside its forward, several times its compute), its trace analysed by
``stragglers analyze``; and with rank 1's data loader slowed (``SLOW_LOADER_RANK=1``), the
trace shows rank 1's late start.

Lightning starts its two processes itself (``python docs/snippets/lightning_ddp.py``); the
``Trainer`` runs under ``torchrun``. Each test skips when its library is missing (fails under
CI=true: CI installs the ``lightning`` and ``hf`` extras)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from stragglers.probe.check import check_trace
from stragglers.probe.merge import load_meta

from .integration import REPO, check_slow_loader, need, result, run, run_doc, tool

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

pytest.importorskip("torch")


def _check_live_records(probe: Path, steps: int) -> None:
    """The callback's live step records (issue 29): one per rank and step; rank 1, slowed
    0.3 s in every step, is the rank whose busy time is high, rank 0 the one that waits."""
    import statistics

    from stragglers.logs.records import StepRecord, parse_line
    from stragglers.probe.recorder import rank_file

    recs = {r: [parse_line(x) for x in rank_file(probe, r, "steps").read_text().splitlines()]
            for r in (0, 1)}
    for r, rs in recs.items():
        assert all(type(x) is StepRecord and x.rank == r for x in rs), rs[:3]
        assert [x.step for x in rs] == list(range(steps)), r
    busy = {r: statistics.median(x.busy for x in rs) for r, rs in recs.items()}
    wait = {r: statistics.median(x.wait for x in rs) for r, rs in recs.items()}
    assert busy[1] - busy[0] >= 0.2 and wait[0] - wait[1] >= 0.2, (busy, wait)


def _check_slowed_rank_found(out: Path, analysis: Path, trial: str) -> None:
    _check_live_records(out / "probe", 20)
    meta = load_meta(out / "meta.yaml")
    assert (meta.trial_name, meta.dp_size, meta.pp_size) == (trial, 2, 1)
    trace = pd.read_parquet(out / "trace.parquet")
    assert check_trace(trace, meta) == []
    assert sorted(trace["step"].unique()) == list(range(2, 20))  # steps 0-1: warm-up
    fwd = trace[trace["optype"] == "forward-compute"].groupby("dp_rank")["duration"].min()
    assert fwd[1] >= 0.3  # the sleep is inside rank 1's forward span
    res = result(analysis)
    verdict = res["verdict"]
    assert verdict["cause"] == "worker", verdict["evidence"]
    assert verdict["workers"] == ["1,0"]
    scores = res["attribution"]["worker"]
    assert scores["1,0"] > scores["0,0"] + 0.15, scores


def test_lightning_callback_finds_the_slowed_rank(tmp_path: Path) -> None:
    need("lightning", "lightning")
    run_doc("SLOW_RANK=1 python docs/snippets/lightning_ddp.py runs/pl", tmp_path)
    run_doc("stragglers analyze runs/pl/trace.parquet --meta runs/pl/meta.yaml "
            "--out runs/pl/analysis", tmp_path)
    _check_slowed_rank_found(tmp_path / "pl", tmp_path / "pl" / "analysis", "lightning")


def test_hf_trainer_callback_finds_the_slowed_rank(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    need("transformers", "hf")
    need("accelerate", "hf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be downloaded
    run_doc("SLOW_RANK=1 torchrun --standalone --nproc-per-node 2 docs/snippets/hf_trainer.py "
            "runs/hf", tmp_path)
    run_doc("stragglers analyze runs/hf/stragglers/trace.parquet --meta "
            "runs/hf/stragglers/meta.yaml --out runs/hf/analysis", tmp_path)
    _check_slowed_rank_found(tmp_path / "hf" / "stragglers", tmp_path / "hf" / "analysis", "hf")


def test_lightning_slow_loader_is_the_late_start_of_its_rank(tmp_path: Path) -> None:
    """Lightning fetches the batch before ``on_train_batch_start``: outside the spans, so
    rank 1 starts late and rank 0 waits in the gradient synchronisation."""
    need("lightning", "lightning")
    run_doc("SLOW_LOADER_RANK=1 SLOW_LOADER_MS=130 python docs/snippets/lightning_ddp.py "
            "runs/pl-loader", tmp_path)
    out = tmp_path / "pl-loader"
    assert check_trace(pd.read_parquet(out / "trace.parquet"), load_meta(out / "meta.yaml")) == []
    check_slow_loader(out / "trace.parquet", "grads-reduce-scatter")


def test_hf_slow_loader_is_the_late_start_of_its_rank(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``Trainer`` all-gathers the token count after fetching the batches and before
    ``on_step_begin``: rank 0 waits for rank 1 there. That collective is recorded
    (``params-all-gather``, each rank's arrival its start), so rank 1's first op starts late
    and rank 0's wait is inside it; without it both ranks' steps started together."""
    need("transformers", "hf")
    need("accelerate", "hf")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be downloaded
    run_doc("SLOW_LOADER_RANK=1 SLOW_LOADER_MS=130 torchrun --standalone --nproc-per-node 2 "
            "docs/snippets/hf_trainer.py runs/hf-loader", tmp_path)
    out = tmp_path / "hf-loader" / "stragglers"
    assert check_trace(pd.read_parquet(out / "trace.parquet"), load_meta(out / "meta.yaml")) == []
    check_slow_loader(out / "trace.parquet", "params-all-gather")


def _with_batchnorm(snippet: str, out: Path) -> Path:
    """The snippet with a BatchNorm layer after its first Linear: buffers that DDP broadcasts
    from rank 0 before every forward (every rank waits there for the last one)."""
    text = (REPO / "docs" / "snippets" / snippet).read_text()
    layers = "nn.Linear(512, 1024), nn.ReLU()"
    assert layers in text
    out.write_text(text.replace(layers, "nn.Linear(512, 1024), nn.BatchNorm1d(1024), nn.ReLU()"))
    return out


@pytest.mark.parametrize("snippet", ["ddp_loop.py", "lightning_ddp.py"])
def test_a_slow_loader_with_ddp_buffers_is_not_compute(tmp_path: Path, snippet: str) -> None:
    """With buffers, DDP broadcasts them before each forward: rank 0 waits there for the rank
    that loads slowly. That broadcast is timed (``params-all-gather``, from the DDP module's
    forward call to its inner module's), not left inside rank 0's forward span (where rank 0
    would look like a slow worker)."""
    if snippet.startswith("lightning"):
        need("lightning", "lightning")
        cmd = [sys.executable]
    else:
        cmd = [*tool("torchrun"), "--standalone", "--nproc-per-node", "2"]
    script = _with_batchnorm(snippet, tmp_path / snippet)
    run([*cmd, str(script), str(tmp_path / "out")],
        {"SLOW_LOADER_RANK": "1", "SLOW_LOADER_MS": "130"})
    out = tmp_path / "out"
    assert check_trace(pd.read_parquet(out / "trace.parquet"), load_meta(out / "meta.yaml")) == []
    check_slow_loader(out / "trace.parquet", "params-all-gather")
