"""Heartbeats: what the ranks write, what the driver reads back (``Beat``), what it skips,
and the hang evidence it draws from them."""

from __future__ import annotations

import json
import time
from pathlib import Path

from stragglers.recover.driver import _heartbeat_evidence
from stragglers.recover.heartbeat import Beat, Heartbeat, read_beats


def test_written_beats_read_back(tmp_path: Path) -> None:
    hb = Heartbeat(tmp_path, rank=3, slot=5, interval=60.0)
    hb.step(7)
    hb.enter("all_reduce", "dp", seq=12)
    raw = json.loads((tmp_path / "hb-3.json").read_text())
    assert set(raw) == {"rank", "slot", "pid", "step", "op", "group", "seq", "peer", "status",
                        "beat", "ts"}
    beat = read_beats(tmp_path)[3]
    assert beat == Beat(3, 7, "running", "all_reduce", "dp", 12, None, raw["ts"])
    hb.leave()
    hb.close("done")
    beat = read_beats(tmp_path)[3]
    assert beat.status == "done" and beat.op is None and beat.group is None


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


def test_heartbeat_evidence() -> None:
    now = time.time()

    def beat(rank: int, op: str | None, group: str | None, ts: float = now) -> Beat:
        return Beat(rank, 9, "running", op, group, 4 if op else None, None, ts)

    beats = {0: beat(0, "all_reduce", "dp"), 1: beat(1, None, None),
             2: beat(2, "all_reduce", "world"), 3: beat(3, "all_reduce", "dp", ts=now - 60)}
    ev = _heartbeat_evidence(beats, 5, now, 3.0, pp=1, tp=1).to_dict()
    assert ev["stale_heartbeat"] == [3, 4] and ev["alive_not_in_a_call"] == [1]
    assert ev["in_other_group_call"] == {"2": "all_reduce in world"}
    assert ev["last_ops"] == {"0": {"op": "all_reduce", "group": "dp", "seq": 4, "peer": None}}
    assert ev["steps"] == {"0": 9, "1": 9, "2": 9, "3": 9}
