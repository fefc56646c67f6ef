"""Bounded readers (issue 31), in-process and property-based: every case is built at test
time and checked against an independent truth (the nesting of the value a pickle or YAML
document stands for, measured on the value itself; where a format decides in a text).

Cases that could hang or crash the old code (named pipes, a tuple key 200,000 deep) run in a
fresh process: ``test_hostile_cli.py``.
"""

from __future__ import annotations

import io
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stragglers.errors import InputError
from stragglers.hang.flight_recorder import PlainUnpickler, check_pickle, load_dump
from stragglers.inputs import json_object, load_yaml, nesting_depth
from stragglers.limits import limit
from stragglers.logs.megatron import decide_format, guess_format, sniff_format
from stragglers.trace.io import read_trace
from tests.fuzz.harness import FUZZ

CAP = limit("nesting")


# -- pickles: the scan agrees with the value it stands for ------------------------------------
def _nest(depth: int, kind: str, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"k": value} if kind == "dict" else (value,) if kind == "tuple" else [value]
    return value


def _depth(value: Any) -> int:
    """Containers on the longest path (``[]`` is 1, a scalar 0): the scan's measure,
    computed on the loaded value (plain recursion: the values here are shallow enough)."""
    if isinstance(value, dict):
        return 1 + max((max(_depth(k), _depth(v)) for k, v in value.items()), default=0)
    if isinstance(value, list | tuple | set | frozenset):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _plain(protocol4: bool) -> st.SearchStrategy[Any]:
    """Plain data; bytes and frozensets only for protocol 4 and later (before, pickle
    writes them with a global, which the reader refuses)."""
    leaves = (st.none() | st.booleans() | st.integers(-(2**64), 2**64)
              | st.floats(allow_nan=False) | st.text(max_size=6))
    if protocol4:
        leaves = leaves | st.binary(max_size=6)

    def nest(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        out = (st.lists(inner, max_size=4) | st.tuples(inner, inner)
               | st.dictionaries(st.text(max_size=4) | st.integers(0, 9), inner, max_size=4))
        return out | st.frozensets(st.integers(0, 5), max_size=3) if protocol4 else out

    return st.recursive(leaves, nest, max_leaves=20)


PLAIN = _plain(True)


@pytest.mark.slow  # 50 examples
@FUZZ
@given(data=st.data(), depth=st.integers(0, CAP + 6),
       kind=st.sampled_from(["list", "dict", "tuple"]), protocol=st.integers(2, 5),
       shared=st.booleans())
def test_the_pickle_scan_measures_what_the_pickle_builds(data: st.DataObject, depth: int,
                                                         kind: str, protocol: int,
                                                         shared: bool) -> None:
    value = data.draw(_plain(protocol >= 4), label="value")
    obj = _nest(depth, kind, value)
    if shared:  # the same object twice: memoised, written once and fetched (BINGET)
        obj = [obj, obj]
    blob = pickle.dumps(obj, protocol=protocol)
    loaded = PlainUnpickler(io.BytesIO(blob)).load()
    truth = _depth(loaded)
    if truth <= CAP:
        check_pickle(blob)
    else:
        with pytest.raises(ValueError, match=f"nested deeper than {CAP} levels"):
            check_pickle(blob)


@pytest.mark.slow  # 50 examples
@FUZZ
@given(data=st.binary(max_size=300), value=PLAIN)
def test_the_pickle_scan_never_fails_otherwise(data: bytes, value: Any) -> None:
    """On damaged bytes the scan raises ValueError (a one-line error for the reader) and
    nothing else; on a damaged real pickle too."""
    for blob in (data, pickle.dumps(value, protocol=4)[: len(data)]):
        try:
            check_pickle(blob)
        except ValueError:
            pass


def _deep_tuple_key(n: int) -> bytes:
    return b"\x80\x02}K\x01" + b"\x85" * n + b"K\x02s."


def _shared_tuple_key(levels: int) -> bytes:
    ops = b"\x80\x02}K\x01K\x01\x86q\x00"
    for k in range(1, levels):
        ops += b"h" + bytes([k - 1]) + b"h" + bytes([k - 1]) + b"\x86q" + bytes([k])
    return ops + b"K\x02s."


@pytest.mark.parametrize("blob, message", [
    (_deep_tuple_key(200_000), "nested deeper than"),  # hashing it crashed the interpreter
    (_shared_tuple_key(60), "stands for more than"),  # hashing it never ended: 2^60 values
    (b"\x80\x02]q\x00h\x00a.", "holds itself"),  # l = []; l.append(l)
    # a = []; b = [a]; then a.append(1): what only a value that holds itself needs
    (b"\x80\x02]q\x00]q\x01h\x00a0K\x01a.", "changed after another one holds it"),
    (b"\x80\x02\x8b\x00\x00\x01\x00" + b"\xff" * 65536 + b".", "integer longer than"),
    (b"\x80\x02" + b"(" * 200_000 + b"l" * 200_000 + b".", "nested deeper than"),
])
def test_hostile_pickles_are_refused_before_anything_is_built(blob: bytes, message: str
                                                              ) -> None:
    with pytest.raises(ValueError, match=message):
        check_pickle(blob)


def test_a_refused_opcode_ends_the_scan_and_the_unpickler_refuses_it() -> None:
    data = pickle.dumps({"a": [1, os.system]}, protocol=2)
    check_pickle(data)  # stops at the global: nothing beyond it is followed
    with pytest.raises(pickle.UnpicklingError, match="references the global"):
        PlainUnpickler(io.BytesIO(data)).load()


@pytest.mark.parametrize("ranks, shown", [
    ([0, 200_000_000], "rank id 200,000,000"), ([0, 10**30], "rank id 1,000,000"),
    ([0, 3_000_000_000], "rank id 3,000,000,000"), ("[0, 3000000000]", "rank id 3,000,000,000"),
])
def test_rank_ids_are_bounded_by_range_not_only_by_count(tmp_path: Path, ranks: Any,
                                                         shown: str) -> None:
    dump = {"pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
            "entries": []}
    (tmp_path / "_dump_0").write_bytes(pickle.dumps(dump, protocol=2))
    with pytest.raises(InputError, match=f"field 'ranks': {shown}.*beyond the limit of "
                                         "16,384 ranks"):
        load_dump(tmp_path / "_dump_0", 0)


@pytest.mark.parametrize("depth", [CAP, CAP + 1, 300])
def test_json_dumps_are_bounded_by_nesting(tmp_path: Path, depth: int) -> None:
    entry = _nest(depth - 1, "list", 1)  # entries[0] nested: depth levels with "entries"
    dump = {"pg_config": {}, "entries": [entry]}
    path = tmp_path / "_dump_0.json"
    path.write_text(json.dumps(dump))
    if nesting_depth(dump, CAP) <= CAP:
        with pytest.raises(InputError, match=r"entries\[0\]: expected a dict"):
            load_dump(path, 0)
    else:
        with pytest.raises(InputError, match="nested deeper than"):
            load_dump(path, 0)


# -- YAML ------------------------------------------------------------------------------------
@pytest.mark.slow  # 50 examples
@FUZZ
@given(depth=st.integers(0, CAP + 4), flow=st.booleans())
def test_yaml_nesting_is_refused_beyond_the_limit_while_read(tmp_path_factory: Any,
                                                             depth: int, flow: bool) -> None:
    path = tmp_path_factory.mktemp("yaml") / "meta.yaml"
    value = _nest(depth, "list", 1)
    text = json.dumps({"labels": value}) if flow else (
        "labels:\n" + "".join("  " * (i + 1) + "- \n" for i in range(depth)).rstrip(" \n")
        + (" 1\n" if depth else " 1\n"))
    path.write_text(text)
    truth = 1 + depth  # the labels mapping holds the nested lists
    if truth <= CAP:
        assert load_yaml(path) is not None
    else:
        with pytest.raises(InputError, match=f"deeper than {CAP} levels"):
            load_yaml(path)


@pytest.mark.parametrize("text, message", [
    ("a: &a [*a]\n", "refers to a collection that holds it"),
    ("a: &a {b: *a}\n", "refers to a collection that holds it"),
    ("x: [" + ", ".join(["1"] * 1500) + "]\n", "line 1: more than 1,000 values"),
    # each level 16 deep on its own, 68 deep through the aliases
    ("a: &a " + "[" * 16 + "1" + "]" * 16 + "\n"
     + "".join(f"{n}: &{n} " + "[" * 16 + f"*{p} " + "]" * 16 + "\n"
               for p, n in (("a", "b"), ("b", "c"), ("c", "d"))),
     "aliases nest deeper than"),
])
def test_yaml_that_stands_for_too_much_is_refused(tmp_path: Path, text: str, message: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAGGLERS_MAX_YAML_NODES", "1000")  # counted while read
    path = tmp_path / "meta.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_yaml(path)


def test_yaml_is_bounded_by_size_before_it_is_parsed(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "meta.yaml"
    path.write_text("dp_size: 2\n" + "# " + "x" * 2000 + "\n")
    assert load_yaml(path) == {"dp_size": 2}
    monkeypatch.setenv("STRAGGLERS_MAX_YAML_BYTES", "1000")
    with pytest.raises(InputError, match=r"meta.yaml: 2,014 bytes .* exceed the limit of 1,000 "
                                         r"\(set STRAGGLERS_MAX_YAML_BYTES"):
        load_yaml(path)


@pytest.mark.parametrize("depth", [CAP, CAP + 1, 5000])
def test_json_objects_are_bounded_by_nesting(depth: int) -> None:
    text = json.dumps({"a": _nest(depth - 1, "list", 1)}) if depth < 1000 else (
        '{"a": ' + "[" * depth + "]" * depth + "}")
    if depth <= CAP:
        assert json_object(text, "x.json")["a"]
    else:
        with pytest.raises(InputError, match="x.json: nesting"):
            json_object(text, "x.json")


# -- trace columns ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    from stragglers.synth import SynthSpec, write_synth

    out = tmp_path_factory.mktemp("trace")
    paths = write_synth(SynthSpec(dp=2, pp=2, microbatches=2, steps=2, seed=1), out)
    return pq.read_table(paths["trace"])


@pytest.mark.slow  # 50 examples
@FUZZ
@given(name=st.sampled_from(["gc_S", "GC_S", "gcs", "Host", "dur", "duraton", "kernel",
                             "__index_level_0__", "x"]) | st.text(min_size=1, max_size=8))
def test_a_column_that_is_not_a_trace_column_is_refused(tmp_path_factory: Any,
                                                        small_trace: pa.Table,
                                                        name: str) -> None:
    from stragglers.trace.io import KNOWN_COLUMNS

    if name in KNOWN_COLUMNS:
        return
    folder = tmp_path_factory.mktemp("col")
    table = small_trace.append_column(name, pa.array([0.0] * small_trace.num_rows))
    pq.write_table(table, folder / "t.parquet")
    rows = table.cast(pa.schema([pa.field(n, pa.string() if n == "optype" else t)
                                 for n, t in zip(table.column_names, table.schema.types,
                                                 strict=True)])).to_pylist()
    with (folder / "t.jsonl").open("w") as fh:
        for i, row in enumerate(rows):
            if i != 3:  # the field on one line only: that line is named
                row.pop(name)
            fh.write(json.dumps(row) + "\n")
    for path, where in ((folder / "t.parquet", "t.parquet: unknown column"),
                        (folder / "t.jsonl", "t.jsonl:4: unknown field")):
        with pytest.raises(InputError, match=where) as err:
            read_trace(path)
        assert repr(name)[1:-1][:20] in str(err.value)
    if name.lower() == "gc_s":
        assert "did you mean 'gc_s'?" in str(err.value)


def test_pandas_index_columns_are_not_trace_columns(tmp_path: Path,
                                                    small_trace: pa.Table) -> None:
    frame = small_trace.to_pandas()
    frame.index = [f"op{i}" for i in range(len(frame))]  # stored as __index_level_0__
    pq.write_table(pa.Table.from_pandas(frame), tmp_path / "t.parquet")
    assert "__index_level_0__" in pq.ParquetFile(tmp_path / "t.parquet").schema_arrow.names
    assert len(read_trace(tmp_path / "t.parquet")) == small_trace.num_rows


def test_a_long_text_value_is_refused_before_it_is_expanded(tmp_path: Path,
                                                            small_trace: pa.Table) -> None:
    """A dictionary value longer than the limit, on a file whose footer allows it (many
    rows): refused naming the row that uses it, before the dictionary is cast row by row."""
    i = small_trace.column_names.index("optype")
    codes = small_trace.column("optype").combine_chunks()
    names = codes.dictionary.to_pylist()
    long_name = "forward-compute" + "x" * 2000
    indices = codes.indices.to_numpy().copy()
    indices[5] = len(names)
    opt = pa.DictionaryArray.from_arrays(pa.array(indices, codes.indices.type),
                                         pa.array([*names, long_name]))
    big = pa.concat_tables([small_trace.set_column(i, "optype", opt)] * 20)
    pq.write_table(big, tmp_path / "t.parquet", row_group_size=big.num_rows)
    with pytest.raises(InputError, match=r"column 'optype' has a value of 2,015 bytes at "
                                         r"row 5 \(the limit is 1,024 bytes"):
        read_trace(tmp_path / "t.parquet")


# -- format auto-detection -------------------------------------------------------------------
PREAMBLE_LINE = st.text(st.characters(codec="ascii", exclude_characters="{\n\r|"),
                        max_size=120).map(lambda s: s.replace("iteration", "it"))
ITER_LINE = (" [2025-01-10 07:43:21] iteration {i:8d}/  500000 | consumed samples: 512 | "
             "elapsed time per iteration (ms): 1234.5 | lm loss: 2.0 |")


@pytest.mark.slow  # 50 examples
@FUZZ
@given(line=PREAMBLE_LINE, kib=st.integers(0, 300), fmt=st.sampled_from(["log", "jsonl"]))
def test_auto_detection_reads_until_a_line_decides(line: str, kib: int, fmt: str) -> None:
    line = "[2025-01-10 07:00:00] " + line
    preamble = (line + "\n") * (kib * 1024 // (len(line) + 1))
    body = "\n".join(ITER_LINE.format(i=i) for i in range(1, 4)) if fmt == "log" else \
        "\n".join(json.dumps({"rank": 0, "iter": i, "duration": 1.0}) for i in range(1, 4))
    data = (preamble + body + "\n").encode()
    stream = io.BytesIO(data)
    got, head = sniff_format(stream.read, "<input>")
    assert got == ("megatron-log" if fmt == "log" else "jsonl")
    assert data.startswith(head) and head + stream.read() == data  # nothing of it is lost
    if len(preamble) >= 1 << 16 and fmt == "log":  # the first 64 KiB alone: a log still
        assert guess_format(data[: 1 << 16]) == "megatron-log"  # in start-up is a log


def test_auto_detection_says_when_it_cannot_tell() -> None:
    text = b"hello\n" * 100
    with pytest.raises(InputError, match="<x>: cannot tell the format from its: no JSON"):
        sniff_format(io.BytesIO(text).read, "<x>")
    with pytest.raises(InputError, match="from its first 1,024 bytes"):
        sniff_format(io.BytesIO(text * 100).read, "<x>", max_bytes=1024)
    assert decide_format(text) is None and decide_format(text, at_end=True) is None
    assert decide_format(b"") is None and decide_format(b"", at_end=True) == "jsonl"
    doc = json.dumps({"values": {"1": 1.0}, "step_interval": 1}).encode()
    assert sniff_format(io.BytesIO(doc).read, "<x>")[0] == "megatron-json"
    assert sniff_format(io.BytesIO(b"{\n" + doc[1:]).read, "<x>")[0] == "megatron-json"
