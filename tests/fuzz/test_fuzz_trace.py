"""Fuzz: damaged traces (parquet and JSON lines) through ``stragglers analyze``.

Each example takes the valid base trace, applies one to three mutations (a value, a column's
Arrow type, a column dropped or renamed, rows removed or duplicated, optype names, bytes of
the file) and runs ``analyze`` in the worker process: it must end with exit 0 and a sane
result, or exit 2 with one line, within the memory bound (see harness).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stragglers.trace.schema import REQUIRED_COLUMNS
from tests.fuzz.harness import FUZZ, CliWorker, check_contract
from tests.fuzz.mutations import (
    BYTE_DAMAGE,
    CAST_TARGETS,
    JSON_VALUES,
    RAW_TOKENS,
    SCALARS,
    cast_column,
    damage_bytes,
    json_line,
    set_value,
)

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

COLUMNS = list(REQUIRED_COLUMNS)


def analyze(cli: CliWorker, trace: Path, meta: Path, out: Path) -> None:
    outcome = cli.run(["analyze", str(trace), "--meta", str(meta), "--out", str(out),
                       "--no-timelines"])
    check_contract(outcome, out / "result.json" if outcome.code == 0 else None)


def mutate_table(data: st.DataObject, table: pa.Table) -> pa.Table:
    for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
        kind = data.draw(st.sampled_from(["value", "value", "cast", "drop", "rename", "rows",
                                          "duplicate", "optype", "column_of"]), label="kind")
        n = table.num_rows
        if n == 0:
            break
        i = data.draw(st.integers(0, table.num_columns - 1), label="column")
        name = table.column_names[i]
        if kind == "value":
            row = data.draw(st.integers(0, n - 1), label="row")
            value = data.draw(SCALARS, label="value")
            table = table.set_column(i, name, set_value(table.column(i), row, value))
        elif kind == "column_of":  # one value for the whole column
            value = data.draw(SCALARS, label="value")
            col = table.column(i)
            for row in range(n):
                col = pa.chunked_array([set_value(col, row, value)])
            table = table.set_column(i, name, col)
        elif kind == "cast":
            target = data.draw(st.sampled_from(CAST_TARGETS), label="cast")
            table = table.set_column(i, name, cast_column(table.column(i), target))
        elif kind == "drop":
            table = table.remove_column(i)
        elif kind == "rename":
            new = data.draw(st.sampled_from(["Step", "dur", "start-ts", name + " ", "step"]))
            table = table.rename_columns([new if c == name else c for c in table.column_names])
        elif kind == "rows":
            keep = data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="keep")
            table = table.filter(pa.array(keep))
        elif kind == "duplicate":
            rows = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5))
            table = pa.concat_tables([table, table.take(rows)])
        elif kind == "optype" and "optype" in table.column_names:
            row = data.draw(st.integers(0, n - 1), label="row")
            value = data.draw(st.text(max_size=20) | st.sampled_from(
                ["forward-compute ", "FORWARD-COMPUTE", "optimizer", "gc"]), label="optype")
            j = table.column_names.index("optype")
            table = table.set_column(j, "optype", set_value(
                cast_column(table.column(j), "string"), row, value))
    return table


@FUZZ
@given(data=st.data())
def test_damaged_parquet_trace(cli: CliWorker, base_job: dict[str, Any],
                               data: st.DataObject) -> None:
    table = mutate_table(data, pq.read_table(base_job["trace"]))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.parquet"
        pq.write_table(table, path)
        damage = data.draw(BYTE_DAMAGE, label="bytes")
        if damage != "none" and data.draw(st.booleans(), label="damage_file"):
            frac = data.draw(st.floats(0, 1), label="position")
            path.write_bytes(damage_bytes(path.read_bytes(), damage, frac))
        analyze(cli, path, base_job["meta"], Path(tmp) / "out")


@FUZZ
@given(data=st.data())
def test_damaged_jsonl_trace(cli: CliWorker, base_job: dict[str, Any],
                             data: st.DataObject) -> None:
    import json

    records = [json.loads(x) for x in base_job["jsonl"].read_text().splitlines()]
    lines = [json.dumps(r) for r in records]
    for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
        kind = data.draw(st.sampled_from(["raw", "value", "delete_key", "garbage_line",
                                          "drop_line", "blank", "duplicate_key"]), label="kind")
        if not lines:
            break
        row = data.draw(st.integers(0, len(lines) - 1), label="line")
        key = data.draw(st.sampled_from(COLUMNS), label="key")
        rec = dict(records[row % len(records)])
        if kind == "raw":
            lines[row] = json_line(rec, key, data.draw(RAW_TOKENS, label="token"))
        elif kind == "value":
            rec[key] = data.draw(JSON_VALUES, label="value")
            lines[row] = json.dumps(rec)
        elif kind == "delete_key":
            rec.pop(key)
            lines[row] = json.dumps(rec)
        elif kind == "garbage_line":
            lines.insert(row, data.draw(st.text(max_size=30), label="garbage"))
        elif kind == "drop_line":
            del lines[row]
        elif kind == "blank":
            lines.insert(row, " ")
        elif kind == "duplicate_key":
            lines[row] = lines[row][:-1] + f', "{key}": 1}}'
    text = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    damage = data.draw(BYTE_DAMAGE, label="bytes")
    if damage != "zero":
        text = damage_bytes(text, damage, data.draw(st.floats(0, 1), label="position"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        path.write_bytes(text)
        analyze(cli, path, base_job["meta"], Path(tmp) / "out")
