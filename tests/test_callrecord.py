"""The call record's line: what ``to_dict`` writes and what the reader makes of it."""

from __future__ import annotations

import json

from stragglers.callrecord import CallRecord, rank_list_name
from stragglers.logs.records import parse_line


def test_to_dict_writes_the_probe_line_and_leaves_out_absent_fields() -> None:
    rec = CallRecord(3, "irecv", 256, 12.5, rank_list_name((3, 1)), 0.5, step=-1, peer=1)
    assert json.dumps(rec.to_dict()) == (
        '{"rank": 3, "type": "irecv", "size": 256, "ts": 12.5, "duration": 0.5, '
        '"group": [3, 1], "step": -1, "peer": 1}')
    assert CallRecord(0, "allreduce", 8, 1.0).to_dict() == {
        "rank": 0, "type": "allreduce", "size": 8, "ts": 1.0}


def test_named_groups_and_waits_round_trip() -> None:
    line = ('{"rank": 1, "type": "allreduce", "size": 1024, "ts": 2.0, "duration": 0.01, '
            '"wait": 0.002, "group": "dp0"}')
    rec = parse_line(line)
    assert rec == CallRecord(1, "allreduce", 1024, 2.0, "dp0", 0.01, 0.002)
    assert json.dumps(rec.to_dict()) == line
    assert parse_line(json.dumps(rec.to_dict())) == rec


def test_step_and_peer_are_kept_but_not_compared() -> None:
    rec = parse_line('{"rank": 3, "type": "send", "size": 8, "ts": 1.5, "group": [3, 1], '
                     '"step": 17, "peer": 1}')
    assert isinstance(rec, CallRecord) and (rec.group, rec.step, rec.peer) == ("[1,3]", 17, 1)
    assert rec == CallRecord(3, "send", 8, 1.5, "[1,3]")
