"""Hypothesis strategies that damage valid inputs: values, types, structure, bytes."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

#: Numbers that break naive code: special floats, boundaries of integer types, extremes.
WEIRD_NUMBERS = st.sampled_from([
    0, -1, 1, -0.0, 0.5, 1e-300, 5e-324, 1e38, 3.4e38, 1e300, 2**15, 2**31 - 1, 2**31,
    -(2**31) - 1, 2**53 + 1, 2**63 - 1, -(2**63), 10**12, 1.7e9, 86_401.0,
    float("nan"), float("inf"), float("-inf"),
])
NUMBERS = WEIRD_NUMBERS | st.floats(allow_nan=True, allow_infinity=True) | st.integers(
    min_value=-(2**64), max_value=2**64)
SCALARS = (NUMBERS | st.booleans() | st.none() | st.text(max_size=12)
           | st.sampled_from(["forward-compute", "optimizer", "gc", "3", "", "nan"]))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=8)
#: Raw JSON tokens that a JSON encoder never writes but a file can hold.
RAW_TOKENS = st.sampled_from([
    "1e999", "-1e999", "NaN", "Infinity", "-Infinity", "9" * 5000, "-" + "9" * 40,
    "[" * 100_000 + "]" * 100_000, "[" * 70 + "]" * 70, '{"a":' * 500 + "1" + "}" * 500,
    '"\\ud800"', "true", "null", "{}", "[]", '"3"', "3.0", "1e-400", "0x10", "01", "+1",
    "'x'", "",
])
#: Byte-level damage of a file.
BYTE_DAMAGE = st.sampled_from(["truncate", "flip", "insert_bad_utf8", "zero", "none"])


def damage_bytes(data: bytes, kind: str, pos_frac: float) -> bytes:
    """Apply one kind of byte damage at a relative position."""
    if not data or kind == "none":
        return data
    pos = min(int(pos_frac * len(data)), len(data) - 1)
    if kind == "truncate":
        return data[:pos]
    if kind == "flip":
        return data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1:]
    if kind == "insert_bad_utf8":
        return data[:pos] + b"\xff\xfe\xc3" + data[pos:]
    return b"\x00" * len(data)  # zero


def set_value(column: pa.ChunkedArray, row: int, value: Any) -> pa.Array:
    """``column`` with ``row`` replaced by ``value``; the Arrow type follows the values."""
    values = column.to_pylist()
    values[row] = value
    for build in (lambda: pa.array(values, from_pandas=False),
                  lambda: pa.array([None if v is None else str(v) for v in values])):
        try:
            return build()
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            continue
    return pa.array([str(v) for v in values])


CAST_TARGETS = ["string", "float32", "float16", "int8", "uint64", "bool", "dictionary",
                "timestamp", "list", "null", "large_string", "decimal"]


def cast_column(column: pa.ChunkedArray, target: str) -> pa.Array | pa.ChunkedArray:
    """``column`` stored as another Arrow type (a lossy or impossible cast is forced)."""
    col = column.combine_chunks()
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    n = len(col)
    if target == "null":
        return pa.nulls(n)
    if target == "list":
        return pa.array([[v] for v in col.to_pylist()])
    if target == "dictionary":
        return col.dictionary_encode()
    if target == "string":
        return pa.array([str(v) for v in col.to_pylist()])
    if target == "large_string":
        return pa.array([str(v) for v in col.to_pylist()], type=pa.large_string())
    numeric = pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
    if not numeric:
        return pa.array([len(repr(v)) for v in col.to_pylist()])
    if target == "timestamp":
        return col.cast(pa.int64(), safe=False).cast(pa.timestamp("us"))
    if target == "decimal":
        return pa.array([None] * n, type=pa.decimal128(10, 2)) if n == 0 else col.cast(
            pa.float64()).cast(pa.decimal128(38, 6), safe=False)
    types = {"float32": pa.float32(), "float16": pa.float16(), "int8": pa.int8(),
             "uint64": pa.uint64(), "bool": pa.bool_()}
    try:
        return col.cast(types[target], safe=False)
    except pa.ArrowException:
        return col.cast(pa.float64()).cast(types[target], safe=False)


def json_line(record: dict[str, Any], key: str | None, raw: str | None) -> str:
    """A JSON object line; with ``key`` and ``raw``, that field holds the raw token."""
    if key is None or raw is None:
        return json.dumps(record)
    marker = "@@FUZZ@@"
    text = json.dumps({**record, key: marker})
    return text.replace(json.dumps(marker), raw if raw else '""')
