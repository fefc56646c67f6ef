"""JSON-lines record schema: kinds, inference and error messages."""

from __future__ import annotations

import json

import pytest

from stragglers.errors import InputError
from stragglers.logs.records import (
    CallRecord,
    IterationRecord,
    MessageRecord,
    RecordError,
    parse_line,
    read_records,
)


def test_kinds_and_inference() -> None:
    c = parse_line('{"rank": 3, "type": "allreduce", "size": 1024, "ts": 12.5, "group": "dp0",'
                   ' "duration": 0.01, "wait": 0.002}', source="f", line=1)
    assert c == CallRecord(3, "allreduce", 1024, 12.5, "dp0", 0.01, 0.002)
    i = parse_line('{"rank": 0, "iter": 7, "duration": 1.5}')
    assert i == IterationRecord(0, 7, None, 1.5)
    m = parse_line('{"src": 1, "dst": 2, "latency": 1e-5, "wait": 0.1}')
    assert m == MessageRecord(1, 2, 1e-5, None, 0.1)
    k = parse_line('{"kind": "iter", "rank": 1, "iter": 2, "ts": 5}')
    assert k == IterationRecord(1, 2, 5.0, None)
    assert parse_line("   ") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"rank": -1, "type": "ar", "size": 1, "ts": 0}', "f.jsonl:4: field 'rank': expected an "
         "integer >= 0, got -1"),
        ('{"rank": 0, "type": "ar", "ts": 0}', "f.jsonl:4: field 'size': expected an integer >= 0,"
         " got missing"),
        ('{"rank": 0, "type": "ar", "size": 1, "ts": "x"}', "field 'ts': expected a number, got "
         '"x"'),
        ('{"rank": 0, "type": "ar", "size": 1, "ts": 1e999}',
         "not valid JSON (number out of range"),
        ('{"rank": 0, "type": "ar", "size": 1, "ts": true}', "field 'ts': expected a number, got "
         "true"),
        ('{"rank": 0, "type": "ar", "size": [], "ts": 1}', "field 'size': expected an integer >= 0,"
         " got []"),
        ('{"rank": "3", "iter": 1, "duration": 1}', "field 'rank': expected an integer >= 0, got "
         '"3"'),
        ('{"rank": 3.0, "iter": 1, "duration": 1}', "field 'rank': expected an integer >= 0, got "
         "3.0"),
        ('{"rank": 0, "iter": 1e300, "duration": 1}', "field 'iter': expected an integer >= 0"),
        ('{"rank": 0, "iter": 9223372036854775808, "duration": 1}', "field 'iter': expected an "
         "integer <= 9223372036854775807"),
        ('{"rank": 0, "iter": ' + "9" * 5000 + ', "duration": 1}', "f.jsonl:4: not valid JSON "
         "(number out of range (a float beyond 1.8e308, or an integer this long) at column 21)"),
        ('{"rank": 0, "type": 7, "size": 1, "ts": 1}', "field 'type': expected a non-empty string,"
         " got 7"),
        ('{"rank": 0, "type": "ar", "size": 1, "ts": 1, "group": {}}', "field 'group': expected a "
         "non-empty string or a non-empty list of ranks, got {}"),
        ('{"rank": 0, "iter": 1, "duration": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
         "f.jsonl:4: not valid JSON (depth limit exceeded at column 1068)"),
        (b'{"rank": 0, "type": "all\xffreduce", "size": 1, "ts": 1}',
         "f.jsonl:4: not UTF-8 text (bad byte at column 25)"),
        ('{"rank": true, "iter": 1, "duration": 1}', "field 'rank'"),
        ('{"rank": 0, "iter": 1}', "field 'ts': expected a number (an iteration record needs"),
        ('{"rank": 0, "iter": 1, "duration": 0}', "field 'duration': expected a number > 0"),
        ('{"kind": "blob", "rank": 0}', "field 'kind': expected one of"),
        ('{"rank": 0}', "field 'kind': cannot tell the record kind"),
        ("[1, 2]", "f.jsonl:4: expected a JSON object, got an array"),
        ('{"rank": 0,', "f.jsonl:4: not valid JSON"),
    ],
)
def test_errors_name_source_line_and_field(text: str | bytes, message: str) -> None:
    with pytest.raises(RecordError) as exc:
        parse_line(text, source="f.jsonl", line=4)
    assert message in str(exc.value)
    assert isinstance(exc.value, InputError)


def test_read_records_is_strict(tmp_path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text('{"rank": 0, "iter": 1, "duration": 1}\n\n{"rank": 0, "iter": "a", '
                 '"duration": 1}\n')
    with pytest.raises(RecordError, match=r"r.jsonl:3: field 'iter'"):
        read_records(p)
    with pytest.raises(InputError, match="missing.jsonl: JSON-lines file not found"):
        read_records(tmp_path / "missing.jsonl")
    with pytest.raises(InputError, match="is a folder, expected a JSON-lines file"):
        read_records(tmp_path)


def test_probe_group_lists_and_extra_fields() -> None:
    """The probe writes a group as the list of its ranks, plus step and peer."""
    c = parse_line('{"rank": 3, "type": "send", "size": 8, "ts": 1.5, "duration": 0.1, '
                   '"group": [3, 1], "step": 17, "peer": 1}')
    assert c == CallRecord(3, "send", 8, 1.5, "[1,3]", 0.1, None)
    with pytest.raises(RecordError, match="field 'peer'"):
        parse_line('{"rank": 3, "type": "send", "size": 8, "ts": 1.5, "peer": -1}')


def test_long_lines_are_refused_without_reading_them_whole(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRAGGLERS_MAX_RECORD_BYTES", "100")
    p = tmp_path / "r.jsonl"
    p.write_bytes(b'{"rank": 0, "iter": 1, "duration": 1}\n' + b"x" * (3 << 20))
    with pytest.raises(RecordError, match=r"r.jsonl:2: record longer than the limit of 100"):
        read_records(p)


def test_record_count_limit(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STRAGGLERS_MAX_DETECT_RECORDS", "3")
    p = tmp_path / "r.jsonl"
    p.write_text("".join(f'{{"rank": 0, "iter": {i}, "duration": 1}}\n' for i in range(4)))
    with pytest.raises(InputError, match=r"r.jsonl:4: 4 records of one input of a detect "
                       "command exceed the limit of 3"):
        read_records(p)


def test_calls_before_the_first_step_are_read() -> None:
    """The probe writes ``"step": -1`` for calls made before the first step (DDP's initial
    broadcast); the reader takes them, and refuses a step below -1."""
    from stragglers.probe.calls import PendingCall

    written = PendingCall("broadcast", 64, (0, 1), None, -1, 1.0, 1.5)
    record = written.record(rank=0, start=1.0, end=1.5, offset=0.0)
    assert record.step == -1
    c = parse_line(json.dumps(record.to_dict()))
    assert isinstance(c, CallRecord) and c.step == -1 and c.type == "broadcast"
    with pytest.raises(RecordError, match="field 'step'.*>= -1"):
        parse_line('{"rank": 3, "type": "send", "size": 8, "ts": 1.5, "step": -2}')
