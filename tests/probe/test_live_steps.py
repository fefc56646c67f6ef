"""Live step records of the loop probe (issue 29): busy and wait per rank and step, every
step whether recorded in the trace or not, against a clock the test moves by known amounts
(the hooks read it), so each record's value is known exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stragglers.logs.records import StepRecord, parse_line
from stragglers.probe import LoopProbe, Probe, ProbeConfig, WorkerInfo
from stragglers.probe.recorder import rank_file

torch = pytest.importorskip("torch")
nn = torch.nn


class Clock:
    """A clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def _loop(tmp_path: Path, config: ProbeConfig) -> tuple[LoopProbe, Clock, object, object]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    clock = Clock()
    probe = Probe(tmp_path / "probe", WorkerInfo(rank=3, world_size=4, dp_rank=3, stage=0),
                  config, clock=clock).start()
    return LoopProbe(probe).install(model), clock, model, opt


def _step(loop: LoopProbe, clock: Clock, model, opt, *, load: float, compute: float,  # type: ignore[no-untyped-def]
          wait: float, pre: float | None = None, fail: bool = False) -> None:
    """One step: ``load`` s before it (the data loader), a collective of ``pre`` s before
    its forward, ``compute`` s of loss and optimizer work, ``wait`` s between the last
    gradient and the optimizer step (the gradient synchronisation)."""
    clock.advance(load)
    if pre is not None:
        a = loop.probe.mark()
        clock.advance(pre)
        loop.collective_done(a, loop.probe.mark())
    with loop.step():
        loss = model(torch.randn(4, 8)).pow(2).mean()
        clock.advance(compute / 2)
        loss.backward()
        if fail:
            raise RuntimeError("a step that raises")
        clock.advance(wait)
        opt.step()
        opt.zero_grad()
        clock.advance(compute / 2)


def _records(folder: Path, rank: int = 3) -> list[StepRecord]:
    lines = rank_file(folder, rank, "steps").read_text().splitlines()
    recs = [parse_line(line) for line in lines]
    assert all(type(r) is StepRecord for r in recs)
    for line in lines:
        assert json.loads(line)["v"] == 1
    return recs  # type: ignore[return-value]


def test_busy_and_wait_of_every_step(tmp_path: Path) -> None:
    """Steps 0-5 (only 2 and 4 recorded in the trace): every one has its record; busy is the
    time since the previous step's end less the waits (the load before the step counts as
    busy, the collective before the forward and the gradient synchronisation as wait)."""
    loop, clock, model, opt = _loop(tmp_path, ProbeConfig(first_step=2, profile_steps=1,
                                                          every=2, write_parquet=False))
    waits = [0.01, 0.02, 0.5, 0.03, 0.04, 0.05]
    for k, w in enumerate(waits):
        _step(loop, clock, model, opt, load=0.2, compute=0.1, wait=w,
              pre=0.07 if k == 3 else None)
    loop.close()
    recs = _records(tmp_path / "probe")
    assert [r.step for r in recs] == list(range(6))
    assert loop.steps_recorded == 2  # the trace has its sampled steps only
    assert recs[0].busy == pytest.approx(0.1)  # the first step: from its start
    for r in recs[1:]:
        assert r.busy == pytest.approx(0.3), r  # load + compute
    for r, w in zip(recs, waits, strict=True):
        want = w + (0.07 if r.step == 3 else 0.0)
        assert r.wait == pytest.approx(want), r
    assert all(r.rank == 3 for r in recs)
    ends = [r.ts for r in recs]
    assert all(b > a for a, b in zip(ends, ends[1:], strict=False))


def test_a_step_that_raises_has_no_record_and_the_next_starts_afresh(tmp_path: Path) -> None:
    loop, clock, model, opt = _loop(tmp_path, ProbeConfig(write_parquet=False))
    _step(loop, clock, model, opt, load=0.2, compute=0.1, wait=0.01)
    with pytest.raises(RuntimeError):
        _step(loop, clock, model, opt, load=0.2, compute=0.1, wait=0.01, fail=True)
    opt.zero_grad()
    _step(loop, clock, model, opt, load=0.2, compute=0.1, wait=0.02, pre=0.05)
    loop.close()
    recs = _records(tmp_path / "probe")
    assert [r.step for r in recs] == [0, 2]
    # after the failed step: from the collective before the forward (the step's first wait)
    assert recs[1].busy == pytest.approx(0.1) and recs[1].wait == pytest.approx(0.07)


def test_every_collective_before_the_forward_is_a_wait(tmp_path: Path) -> None:
    """Two collectives between two steps (a framework's broadcast, then an all-gather):
    both are the next step's wait; the trace keeps the last one as its op."""
    loop, clock, model, opt = _loop(tmp_path, ProbeConfig(write_parquet=False))
    _step(loop, clock, model, opt, load=0.2, compute=0.1, wait=0.01)
    a = loop.probe.mark()
    clock.advance(0.03)
    loop.collective_done(a, loop.probe.mark())
    _step(loop, clock, model, opt, load=0.2, compute=0.1, wait=0.01, pre=0.05)
    loop.close()
    recs = _records(tmp_path / "probe")
    assert recs[1].wait == pytest.approx(0.09) and recs[1].busy == pytest.approx(0.3)


def test_live_records_can_be_turned_off(tmp_path: Path) -> None:
    loop, clock, model, opt = _loop(tmp_path, ProbeConfig(live=False, write_parquet=False))
    _step(loop, clock, model, opt, load=0.2, compute=0.1, wait=0.01)
    loop.close()
    assert not rank_file(tmp_path / "probe", 3, "steps").exists()
    assert loop.probe.steps_written == 0
