"""JSON-lines record schema: kinds, inference and error messages."""

from __future__ import annotations

import pytest

from stragglers.detect.records import (
    CallRecord,
    IterationRecord,
    MessageRecord,
    RecordError,
    parse_line,
    read_records,
)
from stragglers.errors import InputError


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
        ('{"rank": 0, "type": "ar", "size": 1, "ts": "x"}', "field 'ts': expected a finite number"),
        ('{"rank": true, "iter": 1, "duration": 1}', "field 'rank'"),
        ('{"rank": 0, "iter": 1}', "field 'ts': expected a number (an iteration record needs"),
        ('{"rank": 0, "iter": 1, "duration": 0}', "field 'duration': expected a number > 0"),
        ('{"kind": "blob", "rank": 0}', "field 'kind': expected one of"),
        ('{"rank": 0}', "field 'kind': cannot tell the record kind"),
        ("[1, 2]", "f.jsonl:4: expected a JSON object, got list"),
        ('{"rank": 0,', "f.jsonl:4: not valid JSON"),
    ],
)
def test_errors_name_source_line_and_field(text: str, message: str) -> None:
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
    with pytest.raises(InputError, match="cannot read"):
        read_records(tmp_path / "missing.jsonl")
