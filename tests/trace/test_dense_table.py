"""The lean paths of reading and of the dense table give what the checked paths give.

* Parquet columns are converted chunk by chunk into their final dtype when valid; the result
  must equal the checked whole-table conversion (``trace_from_arrow``) for every encoding the
  reader accepts, and a bad value in a later row group must be named exactly as that
  conversion names it.
* The dense table keeps no per-cell count: with as many rows as cells, an empty cell left
  after placing the start times proves a duplicate. A duplicate that replaces a row (so the
  totals agree) must still be named with both rows, and a worker absent from a step must
  still be named first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from stragglers.errors import InputError
from stragglers.synth import SynthSpec, write_synth
from stragglers.trace import build_table, read_meta, read_trace, write_trace
from stragglers.trace.io import _valid_column_to_numpy, trace_from_arrow
from stragglers.trace.schema import REQUIRED_COLUMNS


@pytest.fixture()
def job(tmp_path: Path) -> dict[str, Path]:
    return write_synth(SynthSpec(dp=2, pp=4, microbatches=4, steps=3), tmp_path / "job")


def _recode(table: pa.Table, name: str, arr: pa.Array | pa.ChunkedArray) -> pa.Table:
    return table.set_column(table.column_names.index(name), name, arr)


def _with_unused(col: pa.ChunkedArray) -> pa.Array:
    """The optype column as a dictionary that also holds a value no row uses (the reference
    traces, written from pandas categories, hold 'first-op')."""
    enc = col.cast(pa.string()).combine_chunks().dictionary_encode()
    values = pa.array(["first-op", *enc.dictionary.to_pylist()])
    return pa.DictionaryArray.from_arrays(pc.add(enc.indices, 1), values)


ENCODINGS = {
    "as written": lambda t: t,
    "narrow and unsigned ints": lambda t: _recode(_recode(_recode(
        t, "stage", t.column("stage").cast(pa.uint8())), "mb_id",
        t.column("mb_id").cast(pa.int64())), "step", t.column("step").cast(pa.uint64())),
    "float64 times": lambda t: _recode(_recode(
        t, "start_ts", t.column("start_ts").cast(pa.float64())), "duration",
        t.column("duration").cast(pa.float64())),
    "float16 and int times (checked path)": lambda t: _recode(_recode(
        t, "duration", t.column("duration").cast(pa.float16())), "start_ts",
        pa.array(np.round(t.column("start_ts").to_numpy() * 1e3).astype(np.int64))),
    "plain string optype": lambda t: _recode(
        t, "optype", t.column("optype").cast(pa.string())),
    "large string dictionary": lambda t: _recode(
        t, "optype", t.column("optype").cast(pa.dictionary(pa.int32(), pa.large_string()))),
    "dictionary with an unused category": lambda t: _recode(t, "optype", _with_unused(
        t.column("optype"))),
    "integers stored as floats": lambda t: _recode(
        t, "seq_id", t.column("seq_id").cast(pa.float64())),
}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_parquet_reader_equals_the_checked_conversion(job, tmp_path, encoding):
    table = ENCODINGS[encoding](pq.read_table(job["trace"]))
    path = tmp_path / "t.parquet"
    # Small row groups: many chunks, each dictionary column with its own dictionary.
    pq.write_table(table, path, row_group_size=97)
    assert pq.ParquetFile(path).metadata.num_row_groups > 3
    got = read_trace(path)
    want = trace_from_arrow(pq.read_table(path), str(path))
    assert got.start_resolution == want.start_resolution
    for name in REQUIRED_COLUMNS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_unused_dictionary_values_keep_the_column_on_the_lean_path(job):
    """The reference traces' optype dictionaries hold an unused 'first-op': the lean
    conversion must accept them (the checked one decodes every row to strings)."""
    col = pa.chunked_array([_with_unused(pq.read_table(job["trace"]).column("optype"))])
    codes = _valid_column_to_numpy(col, "optype", "str")
    assert codes is not None
    np.testing.assert_array_equal(codes, read_trace(job["trace"]).optype)


@pytest.mark.parametrize("name,value,needle", [
    ("stage", 2**20, "column 'stage' has a value outside int16 at row 500"),
    ("duration", np.inf, "column 'duration' is not finite (inf) at row 500"),
    ("step", None, "column 'step' is empty at row 500"),
])
def test_a_bad_value_in_a_later_row_group_is_named_as_before(job, tmp_path, name, value,
                                                              needle):
    table = pq.read_table(job["trace"])
    values = table.column(name).to_pylist()
    values[500] = value
    typ = pa.int64() if name != "duration" else pa.float64()
    path = tmp_path / "bad.parquet"
    pq.write_table(_recode(table, name, pa.array(values, typ)), path, row_group_size=97)
    with pytest.raises(InputError) as got:
        read_trace(path)
    with pytest.raises(InputError) as want:
        trace_from_arrow(pq.read_table(path), str(path))
    assert needle in str(got.value) and str(got.value) == str(want.value)


def test_dictionary_value_of_an_unknown_type_is_refused(job, tmp_path):
    table = pq.read_table(job["trace"])
    names = table.column("optype").to_pylist()
    names[300] = "forward-computer"
    path = tmp_path / "bad.parquet"
    pq.write_table(_recode(table, "optype", pa.array(names).dictionary_encode()), path,
                   row_group_size=97)
    with pytest.raises(InputError, match="unknown operation type 'forward-computer' at row 300"):
        read_trace(path)


def _rows_as_file(job, tmp_path, index: np.ndarray) -> Path:
    trace = read_trace(job["trace"])
    return write_trace(trace.take(index), tmp_path / "bad.parquet")


def test_a_duplicate_replacing_a_row_is_named_with_both_rows(job, tmp_path):
    """As many rows as cells, one cell twice and one empty: the pigeonhole check."""
    trace = read_trace(job["trace"])
    n = len(trace)
    index = np.arange(n)
    index[n - 3] = 11  # row n-3 becomes a second copy of row 11
    path = _rows_as_file(job, tmp_path, index)
    with pytest.raises(InputError) as exc:
        build_table(read_trace(path), read_meta(job["meta"]))
    msg = str(exc.value)
    assert "duplicate op" in msg and f"row 11 and row {n - 3}" in msg, msg
    assert len(msg.splitlines()) == 1


def test_a_worker_absent_from_a_step_is_named_first_even_when_the_totals_agree(job, tmp_path):
    trace = read_trace(job["trace"])
    gone = (trace.dp_rank == 1) & (trace.stage == 2) & (trace.step == 1)
    keep = np.flatnonzero(~gone)
    # Make up the count with copies of other rows: duplicates and a missing worker-step.
    index = np.concatenate([keep, keep[: int(gone.sum())]])
    path = _rows_as_file(job, tmp_path, index)
    assert len(read_trace(path)) == len(trace)
    with pytest.raises(InputError, match="worker dp_rank 1 stage 2 has no ops in step 1"):
        build_table(read_trace(path), read_meta(job["meta"]))


@pytest.mark.parametrize("name", ["start_ts", "duration"])
def test_non_finite_times_of_an_in_memory_trace_are_refused(job, name):
    """Files are checked when read; a trace built in memory is checked by validation (a NaN
    start would otherwise read as an empty cell of the dense table)."""
    trace = read_trace(job["trace"])
    values = getattr(trace, name).copy()
    values[42] = np.nan
    setattr(trace, name, values)
    with pytest.raises(InputError, match=f"field '{name}' is not a finite number in 1 row"):
        build_table(trace, read_meta(job["meta"]))


def test_table_places_every_row_in_its_cell(job):
    """Independent truth: each row's start and duration at (node, dp_rank, step)."""
    trace = read_trace(job["trace"])
    table = build_table(trace, read_meta(job["meta"]))
    node = {(int(s), int(o), int(q)): n for n, (s, o, q) in enumerate(
        zip(table.node_stage, table.node_optype, table.node_seq, strict=True))}
    step = {int(s): t for t, s in enumerate(table.steps)}
    for i in range(0, len(trace), 7):
        n = node[(int(trace.stage[i]), int(trace.optype[i]), int(trace.seq_id[i]))]
        d, t = int(trace.dp_rank[i]), step[int(trace.step[i])]
        assert table.start[n, d, t] == trace.start_ts[i]
        assert table.duration[n, d, t] == trace.duration[i]
    assert table.start.size == len(trace)


def test_table_cells_limit_refuses_a_valid_trace_beyond_it(job, monkeypatch):
    trace = read_trace(job["trace"])
    monkeypatch.setenv("STRAGGLERS_MAX_TABLE_CELLS", str(len(trace) - 1))
    with pytest.raises(InputError, match=f"{len(trace):,} cells .* exceed the limit of "
                                         f"{len(trace) - 1:,}"):
        build_table(trace, read_meta(job["meta"]))
    monkeypatch.setenv("STRAGGLERS_MAX_TABLE_CELLS", str(len(trace)))
    assert build_table(trace, read_meta(job["meta"])).start.size == len(trace)


def _same_tables(a, b) -> None:
    for name in ("steps", "node_stage", "node_optype", "node_seq", "node_mc", "node_gmc",
                 "node_mb", "start", "duration", "ranks", "gc_seconds"):
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
            continue
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert a.caveats == b.caveats


def test_row_order_sampling_and_layout_do_not_change_the_table(tmp_path, monkeypatch):
    """The table is built from a sample of the rows' step ids and op identities, in the
    layout the first rows suggest; rows in any order, samples that miss some (then counted
    on every row) and either layout give the same table."""
    from stragglers.trace import table as tbl

    files = write_synth(SynthSpec(dp=3, pp=4, microbatches=4, steps=5, gc_prob=0.3,
                                  gc_in_compute=True, gc_recorded=True, seed=3),
                        tmp_path / "gc")
    meta = read_meta(files["meta"])
    trace = read_trace(files["trace"])
    assert trace.gc_s is not None
    want = build_table(trace, meta)
    shuffled = trace.take(np.random.default_rng(1).permutation(len(trace)))
    _same_tables(build_table(shuffled, meta), want)
    # Tiny blocks and samples: most rows are looked up among identities the sample lacks.
    monkeypatch.setattr(tbl, "BLOCK_ROWS", 64)
    monkeypatch.setattr(tbl, "SAMPLE_ROWS", 8)
    monkeypatch.setattr(tbl, "LAYOUT_ROWS", 16)
    _same_tables(build_table(trace, meta), want)
    _same_tables(build_table(shuffled, meta), want)
    for transposed in (False, True):
        monkeypatch.setattr(tbl._Layout, "__init__", _layout_init(transposed))
        _same_tables(build_table(trace, meta), want)


def _layout_init(transposed: bool):
    def init(self, index, dp_rank, dp):
        self.n_nodes, self.dp, self.n_steps = len(index.node_key), dp, len(index.steps)
        self.transposed = transposed
    return init


def test_row_checks_shortcuts_agree_with_the_checks_row_by_row(job, monkeypatch):
    """Minima and maxima instead of a mask per range check, and a sample of workers proved
    on every row instead of counting them: the same caveats and ranks; and a rank that
    differs within a worker in a row the sample lacks is named as the row-by-row check
    names it."""
    from stragglers.trace import checks

    meta = read_meta(job["meta"])
    trace = read_trace(job["trace"])
    fast = checks.checked_rows(trace, meta)
    with monkeypatch.context() as m:
        m.setattr(checks, "_plainly_in_range", lambda *a: False)
        m.setattr(checks, "_workers_from_sample", lambda *a: None)
        slow = checks.checked_rows(trace, meta)
    assert fast.caveats == slow.caveats
    np.testing.assert_array_equal(fast.ranks, slow.ranks)
    rank = trace.rank.copy()
    rank[len(trace) - 5] += 1
    trace.rank = rank
    with pytest.raises(InputError) as got:
        checks.checked_rows(trace, meta)
    monkeypatch.setattr(checks, "_workers_from_sample", lambda *a: None)
    with pytest.raises(InputError) as want:
        checks.checked_rows(trace, meta)
    assert "field 'rank' differs within one worker" in str(got.value)
    assert str(got.value) == str(want.value)


def test_narrow_integer_columns_are_kept_narrow_and_give_the_same_table(job, tmp_path):
    """Integer columns stored narrower than their usual dtype (int8 stages, model chunks and
    microbatches, as the reference traces store them) are read in the file's type: the same
    values and table, less memory."""
    table = pq.read_table(job["trace"])
    for name in ("stage", "mc", "mb_id"):
        table = _recode(table, name, table.column(name).cast(pa.int8()))
    path = tmp_path / "narrow.parquet"
    pq.write_table(table, path)
    narrow, wide = read_trace(path), read_trace(job["trace"])
    for name in REQUIRED_COLUMNS:
        np.testing.assert_array_equal(getattr(narrow, name), getattr(wide, name))
    assert narrow.stage.dtype == narrow.mc.dtype == narrow.mb_id.dtype == np.int8
    assert wide.stage.dtype == np.int16 and wide.mb_id.dtype == np.int32
    meta = read_meta(job["meta"])
    _same_tables(build_table(narrow, meta), build_table(wide, meta))
