"""Heartbeats: what the ranks write, what the driver reads back (``Beat``), what it skips,
and the hang evidence it draws from them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stragglers.hang.heartbeats import (
    Beat,
    FlightRecorderEvidence,
    HangEvidence,
    heartbeat_evidence,
    read_beats,
)
from stragglers.recover.heartbeat import Heartbeat


def test_written_beats_read_back(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path, rank=3, slot=5, interval=60.0)
    hb.step(7)
    hb.enter("all_reduce", "dp", seq=12)
    hb.flush()
    # the writer thread, woken by step(), may write again (a new beat and ts) between two
    # reads: read the file, the beats and the file again until no write came in between
    for _ in range(100):
        text = (tmp_path / "hb-3.json").read_text()
        beat = read_beats(tmp_path)[3]
        if (tmp_path / "hb-3.json").read_text() == text:
            break
    raw = json.loads(text)
    assert set(raw) == {"rank", "slot", "node", "local_rank", "world", "pid", "started", "step",
                        "op", "group", "seq", "peer", "since", "phase", "status", "error",
                        "beat", "ts"}
    assert beat == Beat(3, 7, "running", "all_reduce", "dp", 12, None, raw["ts"],
                        since=raw["since"], pid=os.getpid(), started=raw["started"])
    hb.leave()
    hb.close("done")  # a status is written at once
    beat = read_beats(tmp_path)[3]
    assert beat.status == "done" and beat.op is None and beat.group is None


def test_calls_cost_no_file_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """step / enter / leave / phase never write the file on the job's thread: enter, leave
    and phase only change memory, a step wakes the background thread, which writes."""
    writers: list[str] = []
    write = Heartbeat._write

    def recorded(self: Heartbeat) -> None:
        writers.append(threading.current_thread().name)
        write(self)

    monkeypatch.setattr(Heartbeat, "_write", recorded)
    hb = Heartbeat(tmp_path, rank=0, slot=0, interval=60.0)
    writers.clear()
    before = (tmp_path / "hb-0.json").read_text()
    for i in range(500):
        hb.enter("all_gather", "dp", seq=i)
        hb.leave()
        with hb.phase("checkpoint"):
            hb.enter("barrier", "world", seq=i)
    assert writers == [] and (tmp_path / "hb-0.json").read_text() == before
    for i in range(500):
        hb.step(i)
        hb.enter("all_gather", "dp", seq=i)
        hb.leave()
    deadline = time.monotonic() + 60
    while read_beats(tmp_path)[0].step != 499:  # the thread writes the last step soon
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert set(writers) == {"stragglers-heartbeat"}
    assert len(writers) < 500  # at most one write every MIN_GAP_S, not one per step
    hb.close()


def test_the_thread_writes_every_interval(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path, rank=0, slot=0, interval=0.05)
    with hb.phase("checkpoint"):
        deadline = time.monotonic() + 30
        while read_beats(tmp_path)[0].phase != "checkpoint":
            assert time.monotonic() < deadline
            time.sleep(0.01)
    hb.close()
    assert read_beats(tmp_path)[0].phase is None


def test_the_newest_process_of_a_rank_wins(tmp_path: Path) -> None:
    """Under a guard the files are named by node and local rank: a rank moves between nodes
    across rendezvous rounds; the newest process's beat is the rank's."""
    old = Heartbeat(tmp_path, rank=1, slot=1, interval=60.0, node="b", local_rank=0)
    old.step(9)
    old.close("comm_error")
    new = Heartbeat(tmp_path, rank=1, slot=1, interval=60.0, node="a", local_rank=1)
    new.step(4)
    new.flush()
    assert sorted(p.name for p in tmp_path.glob("hb-*")) == ["hb-a.1.json", "hb-b.0.json"]
    beat = read_beats(tmp_path)[1]
    assert (beat.node, beat.step, beat.local_rank) == ("a", 4, 1)
    new.close()


EXIT = """
import sys
from stragglers.recover.heartbeat import Heartbeat
hb = Heartbeat(sys.argv[1], rank=0, slot=0, interval=60.0)
hb.step(2)
if sys.argv[2] == "in-call":
    hb.enter("all_reduce", "dp", seq=3)
    raise RuntimeError("Connection reset by peer\\nmore")
if sys.argv[2] == "own":
    raise ValueError("bad batch")
"""


@pytest.mark.slow
@pytest.mark.parametrize("how, status, error", [
    ("in-call", "comm_error", "RuntimeError: Connection reset by peer"),
    ("own", "error", "ValueError: bad batch"),
    ("normal", "exited", None)])
def test_the_status_a_process_leaves_when_it_ends(how: str, status: str, error: str | None,
                                                  tmp_path: Path) -> None:
    """Small processes without torch: the exit hook writes the status before the process
    ends (a failed call: comm_error; its own exception: error; no close(): exited)."""
    proc = subprocess.run([sys.executable, "-c", EXIT, str(tmp_path), how],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == (0 if how == "normal" else 1), proc.stderr
    beat = read_beats(tmp_path)[0]
    assert (beat.status, beat.error, beat.step) == (status, error, 2)


def test_unreadable_files_are_skipped(tmp_path: Path) -> None:
    good = {"rank": 0, "step": 2, "status": "running", "op": None, "group": None,
            "seq": None, "peer": None, "ts": 1.0}
    (tmp_path / "hb-0.json").write_text(json.dumps(good))
    (tmp_path / "hb-1.json").write_text('{"rank": 1, "st')  # being replaced
    (tmp_path / "hb-2.json").write_text("[2]")
    (tmp_path / "hb-3.json").write_text(json.dumps({**good, "rank": "3"}))
    (tmp_path / "hb-4.json").write_text(json.dumps({**good, "rank": 4, "step": "x"}))
    (tmp_path / "hb-5.json").write_text(json.dumps({**good, "rank": 5, "ts": None}))
    assert list(read_beats(tmp_path)) == [0]


def test_odd_fields_are_read_as_the_driver_used_them() -> None:
    beat = Beat.from_dict({"rank": 1, "step": 3, "op": "", "group": 7, "seq": "4",
                           "peer": 2, "status": 5})
    assert beat == Beat(1, 3, None, None, "7", None, 2, 0.0)


def testheartbeat_evidence() -> None:
    now = time.time()

    def beat(rank: int, op: str | None, group: str | None, ts: float = now) -> Beat:
        return Beat(rank, 9, "running", op, group, 4 if op else None, None, ts)

    beats = {0: beat(0, "all_reduce", "dp"), 1: beat(1, None, None),
             2: beat(2, "all_reduce", "emb"), 3: beat(3, "all_reduce", "dp", ts=now - 60)}
    ev = heartbeat_evidence(beats, 5, now, 3.0, pp=1, tp=1).to_dict()
    assert ev["stale_heartbeat"] == [3, 4] and ev["alive_not_in_a_call"] == [1]
    assert ev["in_other_group_call"] == {"2": "all_reduce in emb"}
    assert ev["last_ops"] == {"0": {"op": "all_reduce", "group": "dp", "seq": 4, "peer": None}}
    assert ev["steps"] == {"0": 9, "1": 9, "2": 9, "3": 9}


def _ckpt_beats(now: float, culprit_ts: float) -> dict[int, Beat]:
    """dp 2 x pp 2: ranks 0, 1, 3 wait in the checkpoint barrier (world group, the 5th world
    call); rank 2 is still writing its part (phase checkpoint, not in a call)."""
    beats = {r: Beat(r, 6, "running", "barrier", "world", 5, None, now, phase="checkpoint")
             for r in (0, 1, 3)}
    beats[2] = Beat(2, 6, "running", None, None, None, None, culprit_ts, phase="checkpoint",
                    since=now - 20)
    return beats


@pytest.mark.parametrize("culprit_ts_ago, stale", [(0.0, []), (60.0, [2])],
                         ids=["alive but stuck", "frozen"])
def test_a_hang_in_the_checkpoint_write_is_localised_from_the_heartbeats(
        culprit_ts_ago: float, stale: list[int]) -> None:
    """Every other rank waits in the world barrier after writing: the rank still writing is
    the culprit, whether frozen (stale heartbeat) or alive, with no flight recorder."""
    now = time.time()
    hb = heartbeat_evidence(_ckpt_beats(now, now - culprit_ts_ago), 4, now, 3.0, pp=2, tp=1)
    ev = HangEvidence.decide(hb, FlightRecorderEvidence())
    assert ev.culprit_ranks == (2,) and ev.localised_by == "heartbeats"
    out = ev.to_dict()
    assert out["stale_heartbeat"] == stale
    assert out["phases"] == {"0": "checkpoint", "1": "checkpoint", "2": "checkpoint",
                             "3": "checkpoint"}
    assert out["diagnosis"][0]["ranks"] == [2] and out["diagnosis"][0]["waited_on_by"] == 3


def test_a_stale_heartbeat_alone_names_its_rank() -> None:
    """Nobody is in a call the topology tracks (the others compute, or wait in a group it
    does not describe): the diagnosis names nobody, the stale heartbeat names its rank."""
    now = time.time()
    beats = {0: Beat(0, 3, "running", None, None, None, None, now),
             1: Beat(1, 3, "running", None, None, None, None, now - 60),
             2: Beat(2, 3, "running", "all_reduce", "emb", 1, None, now)}
    hb = heartbeat_evidence(beats, 3, now, 3.0, pp=1, tp=1)
    assert hb.diagnosis.suspect_ranks == ()
    ev = HangEvidence.decide(hb, FlightRecorderEvidence())
    assert ev.culprit_ranks == (1,) and ev.to_dict()["localised_by"] == "stale_heartbeat"
    # every rank stale: nothing tells them apart, nobody is named
    frozen = {r: Beat(r, 3, "running", None, None, None, None, now - 60) for r in range(3)}
    ev = HangEvidence.decide(heartbeat_evidence(frozen, 3, now, 3.0, pp=1, tp=1),
                             FlightRecorderEvidence())
    assert ev.culprit_ranks == ()
