"""Clock alignment and torch.distributed hooks across two real gloo processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from stragglers.probe import CommHooks, Probe, ProbeConfig, WorkerInfo  # noqa: E402
from stragglers.probe.merge import read_rank_file  # noqa: E402

pytestmark = pytest.mark.slow  # real processes (`pytest -m "not slow"` skips them)

SKEW = {0: 0.0, 1: 123.456}  # rank 1's clock runs 123.456 s ahead of rank 0's


def _worker(rank: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out}/rendezvous", rank=rank,
                            world_size=2)
    skew = SKEW[rank]
    probe = Probe(out, WorkerInfo(rank=rank, world_size=2, dp_rank=0, stage=rank),
                  ProbeConfig(device="cpu", sync_gap_steps=1, profile_steps=2, every=2),
                  clock=lambda: time.perf_counter() + skew)
    probe.start()
    hooks = CommHooks(probe)
    hooks.install()
    assert dist.isend is not hooks._saved[(dist, "isend")]
    buf = torch.zeros(1000)
    for step in range(4):
        probe.begin_step(step)
        if rank == 0:
            time.sleep(0.01)
            with probe.span("forward-send"):
                dist.send(torch.ones(1000), dst=1)
        else:
            with probe.span("forward-recv"):
                dist.recv(buf, src=0)
        probe.end_step()  # steps 1 and 3 end a window: clock re-alignment
    x = torch.full((4,), float(rank + 1))
    dist.all_reduce(x)
    peer = 1 - rank
    ops = [dist.P2POp(dist.isend, torch.ones(64), peer),
           dist.P2POp(dist.irecv, torch.zeros(64), peer)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    req = dist.isend(torch.ones(8), peer) if rank == 0 else dist.irecv(torch.zeros(8), peer)
    req.wait()
    shard = torch.zeros(2)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    scatter(shard, torch.ones(4))
    gathered = torch.zeros(4)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(gathered, shard)
    dist.barrier()
    probe.close()  # with hooks installed: the clock exchange must not be recorded
    hooks.uninstall()
    import torch.distributed.distributed_c10d as c10d

    ok = dist.isend is c10d.isend and getattr(dist.isend, "__wrapped__", None) is None
    Path(out, f"check-{rank}.json").write_text(json.dumps({
        "restored": ok, "all_reduce": x.tolist(), "gathered": gathered.tolist()}))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("two-ranks")
    mp.start_processes(_worker, args=(str(out),), nprocs=2, join=True, start_method="spawn")
    return out


def test_offsets_measured_against_rank_0(two_ranks: Path) -> None:
    rec0 = read_rank_file(two_ranks / "rank-00000.jsonl")
    rec1 = read_rank_file(two_ranks / "rank-00001.jsonl")
    assert [s.offset for s in rec0.samples] == [0.0] * len(rec0.samples)
    assert len(rec1.samples) == 4  # start, two window ends, close
    for sample in rec1.samples:
        assert sample.offset == pytest.approx(-SKEW[1], abs=max(sample.rtt, 1e-4))
        assert 0 <= sample.rtt < 0.05


def test_aligned_spans_respect_causality(two_ranks: Path) -> None:
    from stragglers.probe.clock import OffsetTrack

    rec0 = read_rank_file(two_ranks / "rank-00000.jsonl")
    rec1 = read_rank_file(two_ranks / "rank-00001.jsonl")
    t0, t1 = OffsetTrack(rec0.samples), OffsetTrack(rec1.samples)
    sends = {s.step: s for s in rec0.spans}
    recvs = {s.step: s for s in rec1.spans}
    assert sorted(sends) == sorted(recvs) == [0, 1, 2, 3]
    for step, recv in recvs.items():
        send_start = t0.align(sends[step].start)
        recv_end = t1.align(recv.end)
        # the receive cannot end before the send starts, up to the alignment's error: an
        # offset measured by a round trip is known to within that round trip (on a loaded
        # machine, a few ms); without alignment it would be 123 s off; and it ends soon after
        # the send (a 4 kB message on one machine)
        bound = max([1e-3] + [s.rtt for s in rec0.samples + rec1.samples])
        assert recv_end >= send_start - bound
        assert recv_end - t0.align(sends[step].end) < 0.05


def test_hooks_record_calls(two_ranks: Path) -> None:
    checks = [json.loads((two_ranks / f"check-{r}.json").read_text()) for r in (0, 1)]
    assert all(c["restored"] for c in checks)
    assert checks[0]["all_reduce"] == [3.0] * 4
    assert checks[1]["gathered"] == [2.0] * 4
    for rank in (0, 1):
        calls = [json.loads(line) for line in
                 (two_ranks / f"calls-rank-{rank:05d}.jsonl").read_text().splitlines()]
        by_type: dict[str, list[dict]] = {}
        for c in calls:
            assert set(c) >= {"rank", "type", "size", "ts", "duration", "group", "step"}
            assert c["rank"] == rank and c["duration"] >= 0 and c["group"] == [0, 1]
            by_type.setdefault(c["type"], []).append(c)
        p2p = "send" if rank == 0 else "recv"
        assert [c["size"] for c in by_type[p2p]] == [4000] * 4
        assert all(c["peer"] == 1 - rank for c in by_type[p2p])
        assert [c["step"] for c in by_type[p2p]] == [0, 1, 2, 3]
        assert by_type["all_reduce"][0]["size"] == 16
        # batch_isend_irecv: one record per op (64 floats), not one more for the inner calls
        batched = [c for c in by_type["isend"] + by_type["irecv"] if c["size"] == 256]
        assert len(batched) == 2
        single = by_type["isend" if rank == 0 else "irecv"]
        assert [c["size"] for c in single if c["size"] == 32] == [32]
        assert any(t in by_type for t in ("reduce_scatter_single", "reduce_scatter_tensor"))
        assert any(t in by_type for t in ("all_gather_single", "all_gather_into_tensor"))
        assert len(by_type["barrier"]) == 1
        # the probe's own clock exchange (float64 stamps of 8 and 16 bytes) is not recorded
        assert not [c for c in calls if c["type"] in ("send", "recv") and c["size"] in (8, 16)]
