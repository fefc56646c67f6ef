"""The chunked event scanner against ``json.loads`` on tricky inputs, with chunk boundaries
everywhere (tiny chunks): strings holding quotes, backslashes and brackets, nested values,
a header before the array and keys after it, skipped categories counted (but for
``record_param_comms`` CPU ops and device<->host copies)."""

from __future__ import annotations

import io
import json

import numpy as np
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


def test_the_category_is_the_value_of_a_cat_key_not_a_string_cat() -> None:
    """A top-level string value "cat" (an event named "cat") is not its category key: the
    string after it (here a key named like a skipped category) does not make the event
    skipped."""
    kernel = {"ph": "X", "name": "cat", "cpu_op": 1, "cat": "kernel", "ts": 1, "dur": 2,
              "args": {"correlation": 3}}
    data = json.dumps({"traceEvents": [kernel, {"ph": "X", "cat": "cpu_op", "name": "cat",
                                                "ac2g": 0}]}).encode()
    batches = list(jsonstream.iter_event_batches(io.BytesIO(data)))
    assert [e for b in batches for e in b.events] == [kernel]
    assert sum((b.skipped for b in batches), start=jsonstream.Counter()) == {"cpu_op": 1}


def _naive_quotes(data: bytes) -> list[int]:
    """The valid quotes of a text, one byte at a time: those not escaped by an odd run of
    backslashes right before them (inside a string or not: the scan's definition)."""
    out = []
    for i, c in enumerate(data):
        if c == 34:
            run = len(data[:i]) - len(data[:i].rstrip(b"\\"))
            if run % 2 == 0:
                out.append(i)
    return out


def _texts() -> list[bytes]:
    """Texts with keys at every offset of a 64-bit word, escaped quotes and backslashes
    before a key, a key's name inside a string value, and ``"cat"`` in other spellings."""
    rng = np.random.default_rng(7)
    pieces = [b'"cat"', b'"cat": "k"', b' "cat" ', b'"\\"cat\\""', b'"\\\\"', b'"ca"',
              b'"catt"', b'"xcat"', b'"c"', b'"args": {}', b'"\\\\\\"cat"', b"cat", b" ",
              b", ", b'"', b"\\", b'"a\\"r"', b'"\xc3\xa9cat"']
    out = [b'"cat"' * 40, b' ' * 59 + b'"cat"' + b' ' * 70, b'"cat"']
    for _ in range(60):
        out.append(b"".join(pieces[k] for k in rng.integers(0, len(pieces), 60)))
    return out


@pytest.mark.parametrize("key", [b'"cat"', b'"args"', b'"c"'])
def test_quoted_keys_found_on_the_bit_sets_are_those_of_a_byte_by_byte_search(
        key: bytes) -> None:
    """``_find_quoted`` (bit sets of the quotes and of the key's first byte) gives the
    occurrences of the key whose opening quote is a valid quote, as a search byte by byte
    does, at every offset within a 64-bit word and up to any end."""
    for data in _texts():
        b = np.frombuffer(data, np.uint8)
        quotes = jsonstream._Quotes(data, b)
        valid = set(_naive_quotes(data))
        for end in {len(data), len(data) - 1, len(data) // 2, 0}:
            want = [p for p in range(max(end - len(key) + 1, 0))
                    if data[p: p + len(key)] == key and p in valid]
            got = jsonstream._find_quoted(b, quotes, key, end)
            assert got.tolist() == want, (data, end)


def test_bit_positions_and_the_bytes_inside_strings() -> None:
    """``_bit_positions`` lists the set bits of any bit set (sparse, dense, words full of
    ones); ``inside_words`` marks the bytes from each opening quote to before its closing
    one, across words (checked byte by byte)."""
    rng = np.random.default_rng(3)
    for density in (0.0, 0.01, 0.3, 1.0):
        mask = rng.random(1000) < density
        words = jsonstream._packed(mask)
        assert jsonstream._bit_positions(words).tolist() == np.flatnonzero(mask).tolist()
    for data in _texts():
        b = np.frombuffer(data, np.uint8)
        quotes = jsonstream._Quotes(data, b)
        q = _naive_quotes(data)
        inside = np.zeros(len(data), bool)
        for start, stop in zip(q[::2], [*q[1::2], len(data)], strict=False):
            inside[start:stop] = True
        bits = np.unpackbits(quotes.inside_words().view(np.uint8), bitorder="little")
        assert bits[: len(data)].tolist() == inside.tolist(), data
