"""The collective a loop runs before a step's first forward (issue 28): timed by the wrappers
``attach`` puts on ``torch.distributed`` and recorded as the step's ``params-all-gather``
(the last such collective; each rank's start of it is its arrival). One process, a gloo group
of one rank."""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from stragglers.probe import ProbeConfig, attach

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
nn = torch.nn


@pytest.fixture(scope="module", autouse=True)
def one_rank_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    folder = tmp_path_factory.mktemp("pg")
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _model() -> tuple[object, object]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _train(model, opt) -> None:  # type: ignore[no-untyped-def]
    model(torch.randn(4, 8)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()


def _trace(out: Path) -> pd.DataFrame:
    trace = pd.read_parquet(out / "trace.parquet")
    return trace.assign(optype=trace["optype"].astype(str))


def test_the_last_collective_before_the_forward_is_recorded(tmp_path: Path) -> None:
    model, opt = _model()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
    t = torch.ones(3)
    for _ in range(3):
        dist.all_reduce(t)  # e.g. a logging all-reduce: followed by the batch loading
        time.sleep(0.2)     # the batch loading
        dist.all_gather([torch.zeros(3)], t)  # e.g. the token count: the one recorded
        with probe.step():
            _train(model, opt)
    probe.close()
    assert probe.merge_error is None and probe.steps_recorded == 3
    trace = _trace(tmp_path / "run")
    gather = trace[trace["optype"] == "params-all-gather"].set_index("step")
    fwd = trace[trace["optype"] == "forward-compute"].set_index("step")
    assert list(gather.index) == [0, 1, 2] and (gather["mc"] == 0).all()
    assert (gather["start_ts"] == 0).all()  # each step's first op
    gap = fwd["start_ts"] - (gather["start_ts"] + gather["duration"])
    assert (gap >= 0).all() and (gap < 0.2).all()  # after the loading, not before it


def test_collectives_after_the_forward_or_async_or_on_other_threads_are_not(
        tmp_path: Path) -> None:
    model, opt = _model()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
    t = torch.ones(3)
    for _ in range(2):
        dist.all_reduce(t, async_op=True).wait()
        other = threading.Thread(target=dist.all_reduce, args=(torch.ones(2),))
        other.start()
        other.join()
        with probe.step():
            _train(model, opt)
            dist.all_reduce(t)  # inside the step, after the forward
    probe.close()
    assert probe.steps_recorded == 2
    assert "params-all-gather" not in set(_trace(tmp_path / "run")["optype"])


def test_a_step_unlike_the_first_recorded_one_is_left_out(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model, opt = _model()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
    t = torch.ones(3)
    with caplog.at_level(logging.WARNING, logger="stragglers.probe"):
        for step in range(4):
            if step != 2:
                dist.all_reduce(t)
            with probe.step():
                _train(model, opt)
    probe.close()
    assert (probe.steps_recorded, probe.steps_discarded) == (3, 1)
    assert sorted(_trace(tmp_path / "run")["step"].unique()) == [0, 1, 3]
    assert any("step 2 did not run a collective before its first forward" in r.message
               for r in caplog.records)


def test_close_puts_the_functions_back(tmp_path: Path) -> None:
    import torch.distributed.distributed_c10d as c10d

    before = (dist.all_reduce, c10d.all_gather, dist.barrier)
    model, _ = _model()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
    assert dist.all_reduce is not before[0]
    probe.close()
    assert (dist.all_reduce, c10d.all_gather, dist.barrier) == before


@pytest.mark.parametrize("broadcast", [True, False])
def test_a_ddp_buffer_broadcast_before_the_forward_is_timed(tmp_path: Path,
                                                            broadcast: bool) -> None:
    """A DDP module with buffers (BatchNorm) broadcasts them before each forward: from its
    forward call to its inner module's is that collective, and the forward span starts at
    the inner module; with ``forward_sync_buffers=False`` (``broadcast_buffers`` before torch
    2.13) there is none."""
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    ddp = nn.parallel.DistributedDataParallel
    flag = ("forward_sync_buffers" if "forward_sync_buffers" in
            inspect.signature(ddp.__init__).parameters else "broadcast_buffers")  # torch 2.13
    model = ddp(inner, **{flag: broadcast})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
    for _ in range(3):
        with probe.step():
            _train(model, opt)
    probe.close()
    assert probe.steps_recorded == 3
    trace = _trace(tmp_path / "run")
    gather = trace[trace["optype"] == "params-all-gather"].set_index("step")
    if not broadcast:
        assert gather.empty
        return
    fwd = trace[trace["optype"] == "forward-compute"].set_index("step")
    assert list(gather.index) == [0, 1, 2]
    assert ((gather["start_ts"] + gather["duration"]) <= fwd["start_ts"]).all()
