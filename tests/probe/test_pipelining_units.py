"""PipelineProbe in one process: a stand-in stage and a stand-in schedules module driven
through the calls torch's Schedule1F1B makes (hand-written sequences with known answers),
the steps left out and their reasons, the layout of the workers, and the refusals."""

from __future__ import annotations

import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stragglers.probe import PipelineProbe, Probe, ProbeConfig, WorkerInfo, attach
from stragglers.probe.merge import SpanRecord, read_rank_file
from stragglers.probe.pipelining import check_supported, pipeline_layout
from stragglers.probe.settings import JobLayout

torch = pytest.importorskip("torch")
nn = torch.nn


class Work:
    """A stand-in for a ``dist.Work`` of one P2P op."""


class Stage:
    """A stand-in ``PipelineStage``: real autograd on a tiny module (so parameter hooks
    fire), stand-in P2P ops (plain objects), ``pause`` seconds inside each compute."""

    def __init__(self, index: int, stages: int, pause: float = 0.002,
                 after_grads: float = 0.0) -> None:
        self.stage_index, self.num_stages, self.group = index, stages, None
        self.is_first, self.is_last = index == 0, index == stages - 1
        self.submod = nn.Linear(4, 4)
        self.pause, self.after_grads = pause, after_grads
        self.outputs: dict[int, Any] = {}

    def forward_one_chunk(self, fwd_chunk_id: int, args: Any = (), kwargs: Any = None,
                          save_forward_output: bool = True) -> Any:
        time.sleep(self.pause)
        self.outputs[fwd_chunk_id] = self.submod(torch.ones(2, 4)).sum()
        return self.outputs[fwd_chunk_id]

    def backward_one_chunk(self, bwd_chunk_id: int, loss: Any = None,
                           full_backward: bool = True, last_backward: bool = False) -> None:
        time.sleep(self.pause)
        self.outputs.pop(bwd_chunk_id).backward()
        if last_backward:
            time.sleep(self.after_grads)  # as DDP waits for its gradient all-reduce here

    def get_fwd_recv_ops(self, fwd_chunk_id: int) -> list[object]:
        return [] if self.is_first else [object()]

    def get_fwd_send_ops(self, fwd_chunk_id: int) -> list[object]:
        return [] if self.is_last else [object()]

    def get_bwd_recv_ops(self, bwd_chunk_id: int) -> list[object]:
        return [] if self.is_last else [object()]

    def get_bwd_send_ops(self, bwd_chunk_id: int) -> list[object]:
        return [] if self.is_first else [object()]


def schedules_module() -> types.SimpleNamespace:
    """A stand-in for ``torch.distributed.pipelining.schedules``: one work per op."""

    def batch_p2p(ops: list[object], desc: str | None = None) -> list[Work]:
        return [Work() for _ in ops]

    def wait_batch_p2p(work: list[Work]) -> None:
        time.sleep(0.001)

    return types.SimpleNamespace(_batch_p2p=batch_p2p, _wait_batch_p2p=wait_batch_p2p)


def one_f_one_b(stage: Stage, s: Any, n: int) -> None:
    """The calls of torch 2.13's ``Schedule1F1B._step_microbatches`` (warm-up forwards with
    asynchronous sends, the fused send/receive batches of the steady phase, the cool-down),
    the private functions looked up on ``s`` at each call as the real schedule does."""
    warmup = min(n, stage.num_stages - stage.stage_index)
    fwd = bwd = 0
    send_work: list[Work] = []
    fwd_sends: list[object] = []
    for _ in range(warmup):
        s._wait_batch_p2p(s._batch_p2p(stage.get_fwd_recv_ops(fwd)))
        stage.forward_one_chunk(fwd, ())
        s._wait_batch_p2p(send_work)
        fwd_sends = stage.get_fwd_send_ops(fwd)
        if fwd != warmup - 1:
            send_work = s._batch_p2p(fwd_sends)
        fwd += 1
    while True:
        bwd_recvs = stage.get_bwd_recv_ops(bwd)
        s._wait_batch_p2p(s._batch_p2p(fwd_sends + bwd_recvs))
        stage.backward_one_chunk(bwd, last_backward=bwd == n - 1)
        bwd_sends = stage.get_bwd_send_ops(bwd)
        bwd += 1
        if fwd == n:
            break
        fwd_recvs = stage.get_fwd_recv_ops(fwd)
        s._wait_batch_p2p(s._batch_p2p(bwd_sends + fwd_recvs))
        stage.forward_one_chunk(fwd, ())
        fwd_sends = stage.get_fwd_send_ops(fwd)
        fwd += 1
    send_work = s._batch_p2p(bwd_sends)
    while bwd < n:
        s._wait_batch_p2p(s._batch_p2p(stage.get_bwd_recv_ops(bwd)))
        stage.backward_one_chunk(bwd, last_backward=bwd == n - 1)
        s._wait_batch_p2p(send_work)
        send_work = s._batch_p2p(stage.get_bwd_send_ops(bwd))
        bwd += 1
    s._wait_batch_p2p(send_work)


def record(tmp_path: Path, stage: Stage, steps: list[Callable[[Any, Any], None]], *,
           dp_sync: bool = False, first_step: int = 0
           ) -> tuple[PipelineProbe, list[SpanRecord], set[int], types.SimpleNamespace]:
    """Run ``steps`` (each gets the schedules stand-in and an optimizer) inside
    ``probe.step()``; the probe, its span records and the steps it ended."""
    s = schedules_module()
    probe = Probe(tmp_path / "probe", WorkerInfo(rank=0, world_size=1, dp_rank=0,
                                                 stage=stage.stage_index),
                  ProbeConfig(first_step=first_step, device="cpu"),
                  layout=JobLayout(dp_size=1, pp_size=stage.num_stages))
    probe.start()
    pipe = PipelineProbe(probe, stage, s, dp_sync=dp_sync).install()
    optimizer = torch.optim.SGD(stage.submod.parameters(), lr=0.1)
    for body in steps:
        try:
            with pipe.step():
                body(s, optimizer)
        except RuntimeError:
            pass
    pipe.close()
    records = read_rank_file(tmp_path / "probe" / "rank-00000.jsonl")
    return pipe, records.spans, records.step_ends, s


def train(stage: Stage, n: int) -> Callable[[Any, Any], None]:
    """A complete training step of ``n`` microbatches."""

    def body(s: Any, optimizer: Any) -> None:
        one_f_one_b(stage, s, n)
        optimizer.step()
        optimizer.zero_grad()

    return body


def run(tmp_path: Path, stage: Stage, bodies: list[Callable[[Any, Any], None]],
        **kwargs: Any) -> tuple[PipelineProbe, list[SpanRecord], set[int]]:
    pipe, spans, ends, _ = record(tmp_path, stage, bodies, **kwargs)
    return pipe, spans, ends


def by_type(spans: list[SpanRecord], step: int = 0) -> dict[str, list[SpanRecord]]:
    out: dict[str, list[SpanRecord]] = {}
    for span in sorted((x for x in spans if x.step == step), key=lambda x: x.start):
        for optype in span.optypes:
            out.setdefault(optype, []).append(span)
    return out


def test_first_stage_records_the_1f1b_order_and_fused_batches(tmp_path: Path) -> None:
    stage = Stage(0, 2)
    pipe, spans, ends = run(tmp_path, stage, [train(stage, 4)])
    assert (pipe.steps_recorded, pipe.steps_discarded, ends) == (1, 0, {0})
    ops = by_type(spans)
    compute = sorted(ops["forward-compute"] + ops["backward-compute"], key=lambda x: x.start)
    order = [("F" if x.optypes == ("forward-compute",) else "B", x.mb_id) for x in compute]
    assert order == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2),
                     ("B", 3)]
    assert "forward-recv" not in ops and "backward-send" not in ops  # the first stage
    sends, recvs = ops["forward-send"], ops["backward-recv"]
    assert len(sends) == len(recvs) == 4 and all(x.mb_id == -1 for x in sends + recvs)
    f = {x.mb_id: x for x in ops["forward-compute"]}
    b = {x.mb_id: x for x in ops["backward-compute"]}
    # send 0 runs asynchronously: launched after F0, waited on after F1
    assert f[0].end <= sends[0].start and sends[0].end >= f[1].end
    # send k+1 is fused with receive k: the same timing, before backward k
    for k in range(3):
        assert (sends[k + 1].start, sends[k + 1].end) == (recvs[k].start, recvs[k].end)
        assert recvs[k].end <= b[k].start
    assert recvs[3].end <= b[3].start
    for name in ("gc", "layernorm-grads-all-reduce", "embedding-grads-all-reduce"):
        (marker,) = ops[name]
        assert marker.start == marker.end == b[3].end
    assert "grads-reduce-scatter" not in ops  # no data parallelism
    (opt,) = ops["optimizer"]
    assert opt.start >= b[3].end


def test_last_stage_receives_forward_and_sends_backward(tmp_path: Path) -> None:
    stage = Stage(1, 2)
    _, spans, _ = run(tmp_path, stage, [train(stage, 4)])
    ops = by_type(spans)
    compute = sorted(ops["forward-compute"] + ops["backward-compute"], key=lambda x: x.start)
    assert [(x.optypes[0][0].upper(), x.mb_id) for x in compute] == [
        ("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]
    assert "forward-send" not in ops and "backward-recv" not in ops
    assert len(ops["forward-recv"]) == len(ops["backward-send"]) == 4
    assert "embedding-grads-all-reduce" in ops  # the last stage holds it too


def test_middle_stage_has_no_embedding_marker(tmp_path: Path) -> None:
    stage = Stage(1, 3)
    _, spans, _ = run(tmp_path, stage, [train(stage, 4)])
    ops = by_type(spans)
    assert {len(ops[t]) for t in ("forward-recv", "forward-send", "backward-recv",
                                  "backward-send")} == {4}
    assert "embedding-grads-all-reduce" not in ops and len(ops["gc"]) == 1


def test_with_data_parallelism_the_gradient_sync_follows_the_last_gradient(
        tmp_path: Path) -> None:
    stage = Stage(0, 2, after_grads=0.03)
    _, spans, _ = run(tmp_path, stage, [train(stage, 2)], dp_sync=True)
    ops = by_type(spans)
    last = max(ops["backward-compute"], key=lambda x: x.start)
    (sync,) = ops["grads-reduce-scatter"]
    (opt,) = ops["optimizer"]
    assert sync.start == last.end and sync.end == opt.start
    assert sync.end - sync.start >= 0.03  # the wait after the last gradient
    assert last.end - last.start < 0.03
    assert ops["gc"][0].start == last.end


def test_incomplete_steps_are_left_out_and_counted_by_reason(tmp_path: Path) -> None:
    stage = Stage(0, 2)

    def no_optimizer(s: Any, optimizer: Any) -> None:
        one_f_one_b(stage, s, 2)

    def twice(s: Any, optimizer: Any) -> None:
        one_f_one_b(stage, s, 2)
        one_f_one_b(stage, s, 2)
        optimizer.step()

    def never_waited(s: Any, optimizer: Any) -> None:
        one_f_one_b(stage, s, 2)
        s._batch_p2p(stage.get_fwd_send_ops(0))  # launched, never waited on
        optimizer.step()

    def missing_p2p(s: Any, optimizer: Any) -> None:
        stage.forward_one_chunk(0, ())
        stage.backward_one_chunk(0, last_backward=True)
        optimizer.step()

    def raises(s: Any, optimizer: Any) -> None:
        stage.forward_one_chunk(0, ())
        raise RuntimeError("boom")

    bodies = [train(stage, 2), no_optimizer, twice, never_waited, missing_p2p, raises,
              train(stage, 2)]
    pipe, spans, ends = run(tmp_path, stage, bodies)
    assert ends == {0, 6}
    assert {x.step for x in spans} == {0, 6}
    assert (pipe.steps_recorded, pipe.steps_discarded) == (2, 4)
    assert pipe.discarded == {
        "no optimizer step after the backwards": 1,
        "a microbatch ran twice in one step (schedule.step called twice inside "
        "probe.step?)": 1,
        "a P2P batch was never waited on": 1,
        "forward-send ops for microbatches [], computes for [0]": 1,
    }


def test_steps_before_first_step_pass_through(tmp_path: Path) -> None:
    stage = Stage(0, 2)
    pipe, spans, ends = run(tmp_path, stage, [train(stage, 2), train(stage, 2)],
                             first_step=1)
    assert ends == {1} and {x.step for x in spans} == {1}
    assert pipe.steps_recorded == 1


def test_close_restores_the_stage_and_the_schedules_module(tmp_path: Path) -> None:
    stage = Stage(0, 2)
    _, _, _, s = record(tmp_path, stage, [])
    originals = schedules_module()
    assert not {"forward_one_chunk", "get_fwd_send_ops"} & set(vars(stage))
    assert s._batch_p2p.__qualname__ == originals._batch_p2p.__qualname__
    assert s._wait_batch_p2p.__qualname__ == originals._wait_batch_p2p.__qualname__


def test_layout_places_each_process_among_the_processes_of_its_stage() -> None:
    # dp 2 x pp 2, rank = dp * 2 + stage (pipelines [0, 1] and [2, 3])
    everyone = [(0, 2, (0, 1), None), (1, 2, (0, 1), None), (0, 2, (2, 3), None),
                (1, 2, (2, 3), None)]
    assert [pipeline_layout(2, everyone[r][2], r, everyone) for r in range(4)] == [
        (0, 2), (0, 2), (1, 2), (1, 2)]
    # rank = stage * 2 + dp (pipelines [0, 2] and [1, 3])
    everyone = [(0, 2, (0, 2), None), (0, 2, (1, 3), None), (1, 2, (0, 2), None),
                (1, 2, (1, 3), None)]
    assert [pipeline_layout(2, everyone[r][2], r, everyone)[0] for r in range(4)] == [
        0, 1, 0, 1]


@pytest.mark.parametrize(("everyone", "message"), [
    ([(0, 2, (0, 1), None), (0, 2, (0, 1), None), (1, 2, (0, 1), None)],
     "every process must run one stage"),
    ([(0, 2, (0, 1), None), (1, 3, (0, 1), None)], "disagree on the number of stages"),
    ([(0, 2, (0, 3), None), (0, 2, (1, 2), None), (1, 2, (1, 2), None),
      (1, 2, (0, 3), None)], "pass dp_rank="),
    ([(0, 2, (0, 1), 0), (1, 2, (0, 1), None)], "on every process or on none"),
    ([(0, 2, (0, 1), 0), (1, 2, (0, 1), 1), (0, 2, (2, 3), 1), (1, 2, (2, 3), 0)],
     "exchanges activations with ranks"),
    ([(0, 2, (0, 1), 0), (1, 2, (0, 1), 0), (0, 2, (2, 3), 0), (1, 2, (2, 3), 0)],
     "do not give each"),
])
def test_layout_refuses_what_the_trace_cannot_describe(everyone: list[Any],
                                                       message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pipeline_layout(everyone[0][1], everyone[0][2], 0, everyone)


def test_unsupported_schedules_and_torch_internals_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.pipelining import schedules

    stage = Stage(0, 2)
    for cls in (schedules.Schedule1F1B, schedules.ScheduleGPipe):
        assert check_supported(stage, object.__new__(cls)) is schedules
    with pytest.raises(TypeError, match="ScheduleInterleaved1F1B is not supported"):
        check_supported(stage, object.__new__(schedules.ScheduleInterleaved1F1B))
    monkeypatch.delattr(schedules, "_wait_batch_p2p")
    with pytest.raises(RuntimeError, match=r"torch 2\.\S+ lacks schedules\._wait_batch_p2p"):
        check_supported(stage, object.__new__(schedules.Schedule1F1B))
    monkeypatch.undo()

    class OwnLoop(schedules.Schedule1F1B):
        def _step_microbatches(self, *args: Any, **kwargs: Any) -> None:
            pass  # sends and waits some other way

    with pytest.raises(RuntimeError, match="OwnLoop._step_microbatches calling"):
        check_supported(stage, object.__new__(OwnLoop))


def test_attach_refuses_a_pipelining_object(tmp_path: Path) -> None:
    from torch.distributed.pipelining import Schedule1F1B

    with pytest.raises(TypeError, match="attach_pipeline"):
        attach(object.__new__(Schedule1F1B), tmp_path / "run")
    assert not (tmp_path / "run").exists()
