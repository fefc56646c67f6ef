"""The chunked event scanner against ``json.loads`` on tricky inputs, with chunk boundaries
everywhere (tiny chunks): strings holding quotes, backslashes and brackets, nested values,
a header before the array and keys after it, skipped categories counted (but for
``record_param_comms`` CPU ops and device<->host copies)."""

from __future__ import annotations

import io
import json

import pytest

from stragglers.kineto import jsonstream

EVENTS = [
    {"ph": "X", "cat": "kernel", "name": 'void f<{lambda()#1}>("]}")', "ts": 1.5, "dur": 2,
     "args": {"correlation": 7, "grid": [1, 2, 3], "x": {"y": "\\"}}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 1, "args": {"a": "\\\""}},
    {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 3, "dur": 1, "args": {}},
    {"ph": "f", "cat": "ac2g", "id": 3, "ts": 4, "name": "ac2g"},
    {"ph": "M", "name": "thread_name", "tid": 5, "args": {"name": "pt_autograd_0 \"q\""}},
    {"ph": "X", "cat": "user_annotation", "name": "## forward ##", "ts": 5, "dur": 1,
     "args": {"cat": "cpu_op"}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 6,
     "dur": 1, "args": {"correlation": 8, "stream": 7}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "ts": 7,
     "dur": 1, "args": {"correlation": 9, "stream": 60}},
]
KEPT = [0, 2, 4, 5, 7]


@pytest.mark.parametrize("chunk", [3, 17, 64, 1 << 20])
@pytest.mark.parametrize("indent", [None, 2])
def test_events_match_json_loads(chunk: int, indent: int | None,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonstream, "CHUNK", chunk)
    doc = {"schemaVersion": 1, "deviceProperties": [{"name": "[{A100}]"}],
           "distributedInfo": {"rank": 0}, "traceEvents": EVENTS, "traceName": "x]",
           "baseTimeNanoseconds": 1711964646000000000}
    data = json.dumps(doc, indent=indent).encode()
    trailer: list[bytes] = []
    batches = list(jsonstream.iter_event_batches(io.BytesIO(data), trailer))
    # the keys after the array come back whole, whatever the chunk boundaries
    assert json.loads(b"{" + trailer[0].strip()[1:]) == {
        "traceName": "x]", "baseTimeNanoseconds": 1711964646000000000}
    got = [e for b in batches for e in b.events]
    index = [i for b in batches for i in b.index.tolist()]
    assert index == KEPT
    assert got == [json.loads(data)["traceEvents"][i] for i in KEPT]
    skipped = sum((b.skipped for b in batches), start=jsonstream.Counter())
    assert skipped == {"cpu_op": 1, "ac2g": 1, "gpu_memcpy": 1}
    assert sum(b.count for b in batches) == len(EVENTS)


@pytest.mark.parametrize("value,kind", [(b"5", "a number"), (b' "x"', "a string"),
                                        (b"\n [[{}]]", "an array"), (b"null", "null")])
def test_values_other_than_objects_are_refused_unparsed(value: bytes, kind: str) -> None:
    data = b'{"traceEvents": [{"ph": "X"}, ' + value + b', {"ph": "X"}]}'
    with pytest.raises(jsonstream.EventSyntaxError,
                       match=f"each event must be a JSON object, got {kind}") as exc:
        list(jsonstream.iter_event_batches(io.BytesIO(data)))
    assert exc.value.index == 1


@pytest.mark.parametrize("data,message", [
    (b'{"traceEvents": [{"ph": "X"}, {"ph": ', "ends inside the traceEvents array"),
    (b'{"other": []}', "field 'traceEvents' missing"),
    (b'{"traceEvents": [{"ph": "X"} {"ph": "Y"}]}', "not valid JSON"),
])
def test_errors(data: bytes, message: str) -> None:
    with pytest.raises(jsonstream.EventSyntaxError, match=message):
        list(jsonstream.iter_event_batches(io.BytesIO(data)))


@pytest.mark.parametrize("chunk", [3, 17, 64, 1 << 20])
@pytest.mark.parametrize("indent", [None, 2])
def test_second_pass_parses_only_cpu_ops_without_their_args(
        chunk: int, indent: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonstream, "CHUNK", chunk)
    events = [*EVENTS,
              {"ph": "X", "cat": "cpu_op", "name": "args", "args": "args", "ts": 6, "dur": 1},
              {"ph": "X", "args": {"args": {"z": [1, {"q": "}"}]}}, "cat": "cpu_op",
               "name": "c10d::allreduce_", "tid": 1, "ts": 7, "dur": 2},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add_", "args": [1, 2], "ts": 8,
               "dur": 3}]
    data = json.dumps({"traceEvents": events}, indent=indent).encode()
    batches = list(jsonstream.iter_event_batches(io.BytesIO(data),
                                                 only=frozenset({b"cpu_op"})))
    got = [e for b in batches for e in b.events]
    want = [e | ({"args": {}} if isinstance(e.get("args"), dict) else {})
            for e in json.loads(data)["traceEvents"] if e.get("cat") == "cpu_op"]
    assert got == want
    assert [i for b in batches for i in b.index.tolist()] == [1, 2, 8, 9, 10]
    assert sum(b.count for b in batches) == len(events)
