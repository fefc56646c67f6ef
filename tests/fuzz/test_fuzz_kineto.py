"""Fuzz: damaged profiler traces through ``stragglers import kineto``.

Each example takes the valid one-rank trace of :mod:`tests.kineto.hostile` and applies one
to three mutations: a value nested deep (anywhere: a header key, ``distributedInfo``, an
event's arguments, the keys after the events), a key given twice, a field set to a weird
value or a raw token (``1e999``, 5,000 digits, 100,000 brackets), an event replaced by a
scalar, data after the document (a second gzip member), byte damage. The import runs in the
worker process and must end with exit 0 or exit 2 and one line, within the memory bound and
the time limit (see harness); an import that succeeds must give back the ops it was given
or say what it did not use.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.harness import FUZZ, CliWorker, check_contract
from tests.fuzz.mutations import BYTE_DAMAGE, NUMBERS, RAW_TOKENS, SCALARS, damage_bytes
from tests.kineto.hostile import document, events

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

PLACES = ["header", "distributedInfo", "event", "args", "trailer"]
FIELDS = ["ts", "dur", "tid", "name", "cat", "ph", "args", "args.correlation",
          "args.stream", "args.Collective name", "args.Group size", "args.Seq"]


def _raw(value: object) -> str:
    try:
        return json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        return "null"


def mutate(data: st.DataObject) -> bytes:
    evs: list[object] = [json.dumps(e) for e in events()]
    head, tail, info = "", "", '{"rank": 0, "world_size": 1}'
    gz, after, damage = False, b"", ("none", 0.0)
    for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
        kind = data.draw(st.sampled_from(["nest", "twice", "value", "token", "scalar",
                                          "after", "bytes", "gzip"]), label="kind")
        i = data.draw(st.integers(0, len(evs) - 1), label="event")
        if kind == "nest":
            depth = data.draw(st.integers(1, 100_000) | st.integers(55, 70), label="depth")
            bracket = data.draw(st.sampled_from(["[]", '{"a":}']), label="bracket")
            open_, inner, close = (b"[", b"", b"]") if bracket == "[]" else (b'{"a":', b"1",
                                                                              b"}")
            value = (open_ * depth + inner + close * depth).decode()
            place = data.draw(st.sampled_from(PLACES), label="place")
            if place == "header":
                head += f'"x": {value}, '
            elif place == "distributedInfo":
                info = info[:-1] + f', "x": {value}}}'
            elif place == "trailer":
                tail += f', "x": {value}'
            elif place == "event":
                evs[i] = str(evs[i])[:-1] + f', "x": {value}}}'
            else:
                ev = str(evs[i])
                evs[i] = ev.replace('"args": {', f'"args": {{"x": {value}, ', 1)
        elif kind == "twice":
            key = data.draw(st.sampled_from(FIELDS), label="key").split(".")[-1]
            value = _raw(data.draw(SCALARS, label="value"))
            evs[i] = "{" + f'"{key}": {value}, ' + str(evs[i])[1:]
        elif kind in ("value", "token"):
            field = data.draw(st.sampled_from(FIELDS), label="field")
            value = (_raw(data.draw(NUMBERS | SCALARS, label="value")) if kind == "value"
                     else data.draw(RAW_TOKENS, label="token"))
            try:
                ev = json.loads(str(evs[i]))
            except (ValueError, RecursionError):  # made invalid by an earlier mutation
                continue
            target = (ev.get("args") if field.startswith("args.") else ev) \
                if isinstance(ev, dict) else None
            if isinstance(target, dict):
                target[field.split(".")[-1]] = "@@V@@"
                evs[i] = json.dumps(ev).replace('"@@V@@"', value or "null")
        elif kind == "scalar":
            evs[i] = data.draw(st.sampled_from(["5", '"x"', "[]", "null", "[{}]"]),
                               label="scalar")
        elif kind == "after":
            after += data.draw(st.sampled_from([b'{"traceEvents": []}', b"x", b"\n",
                                                b"}", b"\x00"]), label="after")
        elif kind == "gzip":
            gz = True
        else:
            damage = (data.draw(BYTE_DAMAGE, label="damage"),
                      data.draw(st.floats(0, 1), label="at"))
    doc = document([e.encode() if isinstance(e, str) else e for e in evs],
                   head=head.encode(), tail=tail.encode(), info=info.encode())
    doc = damage_bytes(doc, *damage)
    if gz:
        return gzip.compress(doc) + (gzip.compress(after) if after else b"")
    return doc + after


@FUZZ
@given(data=st.data())
def test_damaged_profiler_traces_keep_the_contract(cli: CliWorker, data: st.DataObject) -> None:
    raw = mutate(data)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "prof"
        folder.mkdir()
        name = "rank-0.json.gz" if raw[:2] == b"\x1f\x8b" else "rank-0.json"
        (folder / name).write_bytes(raw)
        meta = Path(tmp) / "job.yaml"
        meta.write_text("dp_size: 1\npp_size: 1\n")
        out = Path(tmp) / "out"
        outcome = cli.run(["import", "kineto", str(folder), "--meta", str(meta), "--out",
                           str(out), "--jobs", "1"])
        check_contract(outcome)
        if outcome.code == 0:
            assert (out / "trace.parquet").exists() and "steps" in outcome.stdout
