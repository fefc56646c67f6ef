"""Reading and writing traces (parquet or JSON lines) and job metadata (YAML).

A trace is held as a :class:`TraceColumns`: one numpy array per column of
whatif-model.md §1, with the operation type as an integer code into
:data:`stragglers.trace.schema.OPTYPES`. No row is dropped or altered here; the
checks that need the whole trace live in :mod:`stragglers.trace.checks`.

Error contract: every problem with a file is an :class:`~stragglers.errors.InputError` with
one line naming the file, the field and the row (parquet: 0-based row; JSON lines: the line
number): not found or a folder, not parquet / not JSON, bytes that are not UTF-8, a value of
the wrong type (``"step": "3"``), nesting or integers beyond the limits, numbers that
overflow or are not finite, a column of the wrong Arrow type, a truncated file. Row counts
are checked against the ``trace_rows`` limit before the columns are read.
"""

from __future__ import annotations

import difflib
import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq
import yaml

from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.inputs import (
    MAX_LINE_BYTES,
    JSONLineError,
    check_file,
    iter_lines,
    load_yaml,
    open_regular,
    parse_json_line,
)
from stragglers.limits import LimitError, check_limit, limit
from stragglers.trace.schema import (
    META_INT_KEYS,
    OPTIONAL_COLUMNS,
    OPTYPE_CODE,
    OPTYPES,
    REQUIRED_COLUMNS,
)

#: Metadata keys besides the integer degrees. ``name`` is an alias of ``trial_name``;
#: free-form keys go under ``labels`` (a mapping), which is copied into the result as is.
META_OTHER_KEYS: tuple[str, ...] = ("trial_name", "name", "run_id", "labels")
META_KEYS: tuple[str, ...] = META_INT_KEYS + META_OTHER_KEYS

#: Ranks are 32-bit integers in traces: a larger world cannot be recorded.
MAX_WORLD_SIZE = 2**31 - 1


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _check_plain(value: Any, where: str, depth: int = 0) -> None:
    """``value`` must be JSON data (str, finite number, bool, null, lists, str-keyed maps)."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{where}: {value!r} is not a finite number")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InputError(f"{where}: key {_short(k)} is not a string")
            _check_plain(v, f"{where}.{k}", depth + 1)
        return
    raise InputError(f"{where}: {type(value).__name__} value {_short(value)} is not plain "
                     "data (use a quoted string)")


@dataclass(frozen=True)
class JobMeta:
    """Parallel layout of one job (whatif-model.md §1).

    ``labels`` holds the free-form ``labels:`` mapping of the metadata file (plain data),
    copied into results as is.
    """

    dp_size: int
    pp_size: int
    tp_size: int = 1
    dsp_size: int = 1
    vpp_size: int = 1
    world_size: int = 0
    trial_name: str = "job"
    run_id: str | int = 0
    labels: dict[str, Any] = field(default_factory=dict)

    @property
    def dp_synchronised(self) -> bool:
        """True when DP collectives synchronise several ranks (dp × cp > 1)."""
        return self.dp_size * self.dsp_size > 1

    @property
    def n_workers(self) -> int:
        return self.dp_size * self.pp_size

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        labels = d.pop("labels")
        return {**d, "labels": labels} if labels else d

    @classmethod
    def from_dict(cls, raw: Any, source: str = "<metadata>") -> JobMeta:
        if not isinstance(raw, dict):
            raise InputError(f"{source}: metadata must be a mapping of keys to values, got "
                             f"{type(raw).__name__}")
        for key in raw:
            if key in META_KEYS:
                continue
            close = difflib.get_close_matches(str(key).replace("-", "_"), META_KEYS, n=1,
                                              cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise InputError(
                f"{source}: unknown key {_short(key)}{hint}; known keys: "
                f"{', '.join(META_KEYS)} (free-form keys go under 'labels:')")
        vals: dict[str, Any] = {}
        for key in META_INT_KEYS:
            if key not in raw:
                if key in ("dp_size", "pp_size"):
                    raise InputError(f"{source}: missing {key} (a required key)")
                continue
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{source}: '{key}' must be a positive integer, got "
                                 f"{_short(v)}")
            if v > MAX_WORLD_SIZE:
                raise InputError(f"{source}: '{key}' {v:,} exceeds {MAX_WORLD_SIZE:,} (ranks "
                                 "are 32-bit integers)")
            vals[key] = v
        check_limit("workers", vals["dp_size"] * vals["pp_size"],
                    f"{source}: dp_size x pp_size")
        product = (vals["dp_size"] * vals["pp_size"] * vals.get("tp_size", 1)
                   * vals.get("dsp_size", 1))
        if product > MAX_WORLD_SIZE:
            raise InputError(f"{source}: dp_size*pp_size*tp_size*dsp_size = {product:,} "
                             f"exceeds {MAX_WORLD_SIZE:,} ranks")
        world = vals.get("world_size", product)
        if world != product:
            raise InputError(
                f"{source}: world_size {world} != dp_size*pp_size*tp_size*dsp_size = {product}"
            )
        vals["world_size"] = world
        if "trial_name" in raw and "name" in raw:
            raise InputError(f"{source}: both 'trial_name' and its alias 'name' are given")
        name = raw.get("trial_name", raw.get("name", "job"))
        if isinstance(name, bool) or not isinstance(name, (str, int)):
            raise InputError(f"{source}: 'trial_name' must be a string, got {_short(name)}")
        run_id = raw.get("run_id", 0)
        if isinstance(run_id, bool) or not isinstance(run_id, (str, int)):
            raise InputError(f"{source}: 'run_id' must be a string or an integer, got "
                             f"{_short(run_id)}")
        labels = raw.get("labels") or {}
        if not isinstance(labels, dict):
            raise InputError(f"{source}: 'labels' must be a mapping of free-form keys to "
                             f"values, got {_short(labels)}")
        _check_plain(labels, f"{source}: labels")
        return cls(trial_name=str(name), run_id=run_id, labels=dict(labels), **vals)


def read_meta(path: str | Path) -> JobMeta:
    """Read and check job metadata from a YAML (or JSON) file."""
    raw = load_yaml(path, "metadata file")
    if raw is None:
        raise InputError(f"{path}: the metadata file is empty (need dp_size and pp_size)")
    return JobMeta.from_dict(raw, source=str(path))


def write_meta(meta: JobMeta, path: str | Path) -> Path:
    return write_text(path, yaml.safe_dump(meta.to_dict(), sort_keys=False))


@dataclass
class TraceColumns:
    """A trace as numpy columns; ``optype`` holds codes into ``OPTYPES``.

    ``fmt`` is the file format the rows came from (``"parquet"`` or ``"jsonl"``) and
    ``row_index`` the index of each row in that file when rows were selected, so that
    messages can name the file's own row or line (:meth:`where`). ``start_resolution`` is
    the resolution of ``start_ts`` known from the file's column type (1 s when it stored
    integers; 0 when only the float type limits it). ``gc_s`` is the optional column of
    GC seconds inside each op (None when the file has none). ``host`` the optional column of
    host names, as codes (int32) into ``host_names`` (None when the file has none).
    """

    dp_rank: np.ndarray
    stage: np.ndarray
    rank: np.ndarray
    step: np.ndarray
    optype: np.ndarray
    start_ts: np.ndarray
    duration: np.ndarray
    seq_id: np.ndarray
    mc: np.ndarray
    mb_id: np.ndarray
    gmc: np.ndarray
    source: str = "<trace>"
    fmt: str = "parquet"
    row_index: np.ndarray | None = None
    start_resolution: float = 0.0
    gc_s: np.ndarray | None = None
    host: np.ndarray | None = None
    host_names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.dp_rank.shape[0])

    def take(self, index: np.ndarray) -> TraceColumns:
        """Rows selected by a boolean mask or an index array."""
        cols = {name: getattr(self, name)[index] for name in REQUIRED_COLUMNS}
        base = np.arange(len(self)) if self.row_index is None else self.row_index
        return TraceColumns(source=self.source, fmt=self.fmt, row_index=base[index],
                            start_resolution=self.start_resolution,
                            gc_s=None if self.gc_s is None else self.gc_s[index],
                            host=None if self.host is None else self.host[index],
                            host_names=self.host_names, **cols)

    def file_row(self, i: int) -> int:
        """Index, in the file, of row ``i``."""
        return int(i if self.row_index is None else self.row_index[i])

    def where(self, i: int) -> str:
        """``row N`` (parquet, 0-based) or ``line N`` (JSON lines) of row ``i``."""
        r = self.file_row(i)
        if self.fmt == "jsonl":
            line = jsonl_line_of_row(Path(self.source), r)
            if line is not None:
                return f"line {line}"
        return f"row {r}"

    def row(self, i: int) -> dict[str, Any]:
        """One row as a dict (for error messages)."""
        out: dict[str, Any] = {}
        for name in REQUIRED_COLUMNS:
            v = getattr(self, name)[i]
            out[name] = OPTYPES[int(v)] if name == "optype" else v.item()
        if self.gc_s is not None:
            out["gc_s"] = self.gc_s[i].item()
        if self.host is not None:
            out["host"] = self.host_names[int(self.host[i])]
        return out

    def to_arrow(self) -> pa.Table:
        cols = {name: getattr(self, name) for name in REQUIRED_COLUMNS}
        opt = pa.DictionaryArray.from_arrays(_numeric_array(self.optype.astype(np.int8)),
                                             _string_array(OPTYPES))
        if self.gc_s is not None:
            cols["gc_s"] = self.gc_s
        arrays = [opt if name == "optype" else _numeric_array(v) for name, v in cols.items()]
        names = list(cols)
        if self.host is not None:
            arrays.append(pa.DictionaryArray.from_arrays(_numeric_array(self.host),
                                                         _string_array(self.host_names)))
            names.append("host")
        return pa.Table.from_arrays(arrays, names=names)


# pa.array() and pa.table() import pandas (about 0.25 s) to check their argument: the
# columns are built from their buffers instead (start-up of `import kineto`).
def _numeric_array(v: np.ndarray) -> pa.Array:
    """A numpy column (integers or floats) as an Arrow array sharing its buffer."""
    a = np.ascontiguousarray(v)
    if a.dtype.kind not in "iuf":
        return pa.array(a)
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [None, pa.py_buffer(a)])


def _string_array(values: tuple[str, ...] | list[str]) -> pa.Array:
    data = [x.encode() for x in values]
    offsets = np.r_[0, np.cumsum([len(b) for b in data])].astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(data),
                                 [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


_INT_TYPES: dict[str, type[np.integer]] = {
    "dp_rank": np.int32, "stage": np.int16, "rank": np.int32, "step": np.int64,
    "seq_id": np.int32, "mc": np.int16, "mb_id": np.int32, "gmc": np.int32}


def _int_dtype(name: str, t: pa.DataType) -> np.dtype:
    """The dtype of integer column ``name`` read from Arrow type ``t``: its type in
    :data:`_INT_TYPES`, or the column's own signed type where that is narrower (every value
    fits it; a 16k-worker trace then takes 0.8 GB less, e.g. int8 stages and microbatches).
    The code that computes with these columns widens them first."""
    canonical = np.dtype(_INT_TYPES[name])
    if pa.types.is_signed_integer(t) and t.bit_width // 8 < canonical.itemsize:
        return np.dtype(f"i{t.bit_width // 8}")
    return canonical


def _fmt_row(table: pa.Table, i: int) -> str:
    row = {name: table.column(name)[i].as_py() for name in table.column_names}
    return json.dumps(row, default=str)


def _where(fmt: str, source: str, i: int) -> str:
    if fmt == "jsonl":
        line = jsonl_line_of_row(Path(source), i)
        if line is not None:
            return f"line {line}"
    return f"row {i}"


_KIND_WORDS = {"int": "integers", "float": "numbers", "str": "strings"}


def _column_to_numpy(table: pa.Table, name: str, kind: str, source: str,
                     fmt: str = "parquet") -> np.ndarray:
    col = table.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if col.null_count:
        i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(f"{source}: column '{name}' is empty at {_where(fmt, source, i)}: "
                         f"{_fmt_row(table, i)}")
    t = col.type
    wrong = (not (pa.types.is_string(t) or pa.types.is_large_string(t)) if kind == "str"
             else not (pa.types.is_integer(t) or pa.types.is_floating(t)))
    if wrong:
        example = _short(col[0].as_py()) if len(col) else "-"
        raise InputError(f"{source}: column '{name}' must hold {_KIND_WORDS[kind]} but has "
                         f"Arrow type {t} (e.g. row 0: {example})")
    if kind == "str":
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            raise InputError(f"{source}: column '{name}' holds bytes that are not UTF-8 text"
                             ) from None
        enc = pc.dictionary_encode(col).combine_chunks()
        names = enc.dictionary.to_pylist()
        unknown = [n for n in names if n not in OPTYPE_CODE]
        if unknown:
            codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False))
            i = int(np.flatnonzero(codes == names.index(unknown[0]))[0])
            raise InputError(
                f"{source}: column 'optype' has unknown operation type {_short(unknown[0])} at "
                f"{_where(fmt, source, i)} (known: {', '.join(OPTYPES)})"
            )
        lut = np.array([OPTYPE_CODE[n] for n in names], dtype=np.int8)
        return lut[np.asarray(enc.indices.to_numpy(zero_copy_only=False))]
    arr = np.asarray(col.to_numpy())
    if kind == "float":
        arr = arr if arr.dtype in (np.float32, np.float64) else arr.astype(np.float64)
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{source}: column '{name}' is not finite ({arr[i]}) at "
                             f"{_where(fmt, source, i)}: {_fmt_row(table, i)}")
        return arr
    if pa.types.is_floating(t):
        arr = arr.astype(np.float64, copy=False)  # float16: compare with int32 bounds exactly
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{source}: column '{name}' must hold integers, "
                             f"{_where(fmt, source, i)} has {arr[i]}: {_fmt_row(table, i)}")
    target = _int_dtype(name, t)
    info = np.iinfo(target)
    if arr.size:
        bad = (arr < info.min) | (arr > info.max)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{source}: column '{name}' has a value outside "
                             f"{target.name} at {_where(fmt, source, i)}: "
                             f"{_fmt_row(table, i)}")
    return arr.astype(target, copy=False)


def _check_names(names: list[str], source: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise InputError(f"{source}: required column(s) missing: {', '.join(missing)}")
    twice = [c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS) if names.count(c) > 1]
    if twice:
        raise InputError(f"{source}: column '{twice[0]}' appears {names.count(twice[0])} "
                         "times")


#: Every column a trace file may hold.
KNOWN_COLUMNS: tuple[str, ...] = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)


def _unknown_name(name: str, source: str, what: str = "column") -> InputError:
    """The error for a column (or JSON field) that is not a trace column, with the closest
    known name (a misspelt ``gc_S``: nothing is read from it, so it is refused rather than
    dropped)."""
    folded = {c.lower(): c for c in KNOWN_COLUMNS}
    close = ([folded[name.lower()]] if name.lower() in folded else
             difflib.get_close_matches(name.replace("-", "_"), KNOWN_COLUMNS, n=1, cutoff=0.6))
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return InputError(f"{source}: unknown {what} {_short(name)}{hint}; a trace has the "
                      f"columns {', '.join(KNOWN_COLUMNS)} (remove the others)")


def _check_unknown(names: list[str], source: str, ignore: tuple[str, ...] = ()) -> None:
    """Refuse a column that is not a trace column (``ignore``: the index columns pandas
    stores with a data frame, which hold no trace data)."""
    for name in names:
        if name not in KNOWN_COLUMNS and name not in ignore:
            raise _unknown_name(name, source)


def _pandas_index(schema: pa.Schema) -> tuple[str, ...]:
    """The index columns pandas wrote into a parquet file (``__index_level_0__``)."""
    try:
        meta = schema.pandas_metadata
    except (ValueError, TypeError):  # damaged JSON in the schema's metadata
        return ()
    cols = meta.get("index_columns", []) if isinstance(meta, dict) else []
    return tuple(c for c in cols if isinstance(c, str))


def trace_from_arrow(table: pa.Table, source: str, fmt: str = "parquet") -> TraceColumns:
    """Check the columns of an Arrow table and convert them to :class:`TraceColumns`."""
    _check_names(table.column_names, source)
    if table.num_rows == 0:
        raise InputError(f"{source}: the trace has no rows")
    check_limit("trace_rows", table.num_rows, source)
    for name in ("optype", "host"):
        if name in table.column_names:
            _check_string_lengths(table.column(name), name, source)
    cols = {name: _column_to_numpy(table, name, kind, source, fmt)
            for name, kind in REQUIRED_COLUMNS.items()}
    gc_s = None
    if "gc_s" in table.column_names and table.column("gc_s").null_count < table.num_rows:
        gc_s = _column_to_numpy(table, "gc_s", "float", source, fmt)  # all null: absent (JSON)
    host: np.ndarray | None = None
    host_names: tuple[str, ...] = ()
    if "host" in table.column_names and table.column("host").null_count < table.num_rows:
        host, host_names = _host_column(table, source, fmt)  # all null: absent (JSON)
    return TraceColumns(source=source, fmt=fmt, start_resolution=_resolution(table.schema),
                        gc_s=gc_s, host=host, host_names=host_names, **cols)


def _host_column(table: pa.Table, source: str, fmt: str = "parquet"
                 ) -> tuple[np.ndarray, tuple[str, ...]]:
    """The ``host`` column as codes (int32) into its distinct names: strings (plain or
    dictionary-encoded), none empty; an error names the file, the field and the row."""
    col = table.column("host")
    t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if not _is_string(t):
        example = _short(col[0].as_py()) if len(col) else "-"
        raise InputError(f"{source}: column 'host' must hold strings but has Arrow type "
                         f"{col.type} (e.g. row 0: {example})")
    if pa.types.is_dictionary(col.type):
        col = col.cast(t)
    if col.null_count:
        i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(f"{source}: column 'host' is empty at {_where(fmt, source, i)}: "
                         f"{_fmt_row(table, i)}")
    try:
        col.validate(full=True)
    except pa.ArrowInvalid:
        raise InputError(f"{source}: column 'host' holds bytes that are not UTF-8 text"
                         ) from None
    enc = pc.dictionary_encode(col).combine_chunks()
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False)).astype(np.int32)
    return codes, tuple(enc.dictionary.to_pylist())


def _resolution(schema: pa.Schema) -> float:
    """1 s when ``start_ts`` is stored as integers, else 0 (see TraceColumns)."""
    t = schema.field("start_ts").type
    if pa.types.is_dictionary(t):
        t = t.value_type
    return 1.0 if pa.types.is_integer(t) else 0.0


JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")


def read_trace(path: str | Path) -> TraceColumns:
    """Read a trace from parquet (``.parquet``/``.pq``) or JSON lines (``.jsonl``/``.json``)."""
    p = check_file(path, "trace file")
    if p.suffix.lower() in JSONL_SUFFIXES:
        table = _read_jsonl(p)
        return trace_from_arrow(table, str(p), "jsonl")
    with open_regular(p, "trace file") as fh:
        return _read_parquet(p, fh)


#: What the parquet reader raises on damaged bytes: Arrow's errors, and from its Python
#: layer a UnicodeDecodeError (ValueError) for a column name that is not UTF-8 or an
#: IndexError for a schema that does not fit the data.
_ARROW_READ_ERRORS = (pa.ArrowException, OSError, ValueError, IndexError)


def _read_parquet(p: Path, fh: IO[bytes]) -> TraceColumns:
    """Read a parquet trace one column at a time (bounded memory for large traces).

    Each column is converted into its final numpy dtype, its Arrow buffers are dropped and
    Arrow's memory pool is asked to hand freed memory back (its default pool otherwise keeps
    it for reuse: about a third of the trace's size on AR×64, at the cost of 0.08 s there).
    """
    try:
        pf = pq.ParquetFile(fh)
        schema = pf.schema_arrow
        num_rows = pf.metadata.num_rows
    except _ARROW_READ_ERRORS as exc:
        raise InputError(f"{p}: not a readable parquet file ({_first_line(exc)})") from None
    _check_names(schema.names, str(p))
    _check_unknown(schema.names, str(p), _pandas_index(schema))
    if num_rows == 0:
        raise InputError(f"{p}: the trace has no rows")
    check_limit("trace_rows", num_rows, str(p))
    _check_sizes(pf, p, num_rows)
    present = {name: kind for name, kind in OPTIONAL_COLUMNS.items()
               if name in schema.names and name != "host"}
    kinds = REQUIRED_COLUMNS | present
    done = _read_row_groups(pf, kinds, num_rows)
    pa.default_memory_pool().release_unused()
    cols = {name: done[name] if name in done else _read_column(pf, p, name, kind, num_rows)
            for name, kind in kinds.items()}
    gc_s = cols.pop("gc_s", None)
    host, host_names = _read_host(pf, p, num_rows) if "host" in schema.names else (None, ())
    return TraceColumns(source=str(p), fmt="parquet", row_index=None,
                        start_resolution=_resolution(schema), gc_s=gc_s, host=host,
                        host_names=host_names, **cols)


#: Bytes a row of a parquet column takes at most, uncompressed, by column kind: a number is
#: 8 bytes, or 8 in a dictionary and an index of up to 4 (a dictionary of all distinct
#: values), with its validity bits; a text value adds its length to the 8
#: (:func:`_check_sizes`). Plus :data:`_PAGE_SLACK` per row group for page headers.
_VALUE_BYTES = {"int": 16, "float": 16}
_TEXT_OVERHEAD = 8
_PAGE_SLACK = 1 << 20


def _check_sizes(pf: pq.ParquetFile, p: Path, num_rows: int) -> None:
    """Refuse, from the file's footer and before any column is read, a column whose
    uncompressed size exceeds what its rows can hold (:data:`_VALUE_BYTES`; a text value
    ``trace_string_bytes`` more). An 11 KB file whose one dictionary value is 200 MB of one
    repeated byte is refused here instead of being decompressed."""
    md = pf.metadata
    kinds = REQUIRED_COLUMNS | OPTIONAL_COLUMNS
    text = _TEXT_OVERHEAD + limit("trace_string_bytes")
    totals: dict[str, int] = {}
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            name = col.path_in_schema
            if name in kinds:
                totals[name] = totals.get(name, 0) + max(int(col.total_uncompressed_size), 0)
    slack = _PAGE_SLACK * max(md.num_row_groups, 1)
    for name, total in totals.items():
        per_row = _VALUE_BYTES.get(kinds[name], text)
        if total > num_rows * per_row + slack:
            raise LimitError(
                f"{p}: column '{name}' takes {total:,} bytes uncompressed for {num_rows:,} "
                f"rows, more than {per_row:,} bytes a row (a text value is limited to "
                f"{text - _TEXT_OVERHEAD:,} bytes; set STRAGGLERS_MAX_TRACE_STRING_BYTES to "
                "raise it)")


def _check_string_lengths(col: pa.ChunkedArray, name: str, source: str) -> None:
    """Refuse a text column (plain or dictionary-encoded) with a value longer than the
    ``trace_string_bytes`` limit, before its values are converted or expanded; the error
    names the first row that holds such a value."""
    cap = limit("trace_string_bytes")
    at = 0
    for chunk in col.chunks:
        values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
        if not _is_string(values.type) or len(values) == 0:
            at += len(chunk)
            continue
        lengths = pc.binary_length(values)
        longest = pc.max(lengths).as_py()
        if longest is not None and longest > cap:
            first = int(np.flatnonzero(np.asarray(
                pc.fill_null(pc.greater(lengths, cap), False)))[0])
            row = at + first
            if pa.types.is_dictionary(chunk.type):
                idx = np.asarray(pc.fill_null(pc.equal(chunk.indices, first), False))
                hits = np.flatnonzero(idx)
                row = at + int(hits[0]) if len(hits) else -1
            where = (f"at row {row}" if row >= 0
                     else "in its dictionary (a value no row uses)")
            raise LimitError(f"{source}: column '{name}' has a value of {longest:,} bytes "
                             f"{where} (the limit is {cap:,} bytes; set "
                             "STRAGGLERS_MAX_TRACE_STRING_BYTES to raise it)")
        at += len(chunk)


def _read_host(pf: pq.ParquetFile, p: Path, num_rows: int
               ) -> tuple[np.ndarray, tuple[str, ...]]:
    """The ``host`` column of a parquet trace (:func:`_host_column`); an error that names a
    row shows the whole row."""
    try:
        table = pf.read(columns=["host"])
    except _ARROW_READ_ERRORS as exc:
        raise InputError(f"{p}: column 'host' cannot be read ({_first_line(exc)})") from None
    if table.num_rows != num_rows:
        raise InputError(f"{p}: column 'host' has {table.num_rows} rows, the file "
                         f"declares {num_rows} (a damaged file)")
    _check_string_lengths(table.column("host"), "host", str(p))
    try:
        return _host_column(table, str(p))
    except InputError as exc:
        if "row" not in str(exc) or "Arrow type" in str(exc):
            raise
        try:
            whole = pf.read(columns=[*REQUIRED_COLUMNS, "host"])
        except _ARROW_READ_ERRORS:
            raise exc from None
        _host_column(whole, str(p))
        raise


def _read_column(pf: pq.ParquetFile, p: Path, name: str, kind: str,
                 num_rows: int) -> np.ndarray:
    """Column ``name`` of a parquet trace as a checked numpy array (see
    :func:`_column_to_numpy`; an optional column is read the same way), read whole: the
    path of a column that :func:`_read_row_groups` could not convert as it stands."""
    try:
        table = pf.read(columns=[name])
    except _ARROW_READ_ERRORS as exc:
        raise InputError(f"{p}: column '{name}' cannot be read ({_first_line(exc)})"
                         ) from None
    if table.num_rows != num_rows:
        raise InputError(f"{p}: column '{name}' has {table.num_rows} rows, the file "
                         f"declares {num_rows} (a damaged file)")
    if kind == "str":
        _check_string_lengths(table.column(name), name, str(p))
    arr = _valid_column_to_numpy(table.column(name), name, kind)
    if arr is not None:
        del table
        pa.default_memory_pool().release_unused()
        return arr
    try:
        return _column_to_numpy(table, name, kind, str(p))
    except InputError as exc:
        if "row" not in str(exc):
            raise
        # Re-read the whole table once so that the message can show the full row.
        del table
        try:
            whole = pf.read(columns=list(dict.fromkeys([*REQUIRED_COLUMNS, name])))
        except _ARROW_READ_ERRORS:
            raise exc from None
        _column_to_numpy(whole, name, kind, str(p))
        raise


def _read_row_groups(pf: pq.ParquetFile, kinds: dict[str, str], num_rows: int
                     ) -> dict[str, np.ndarray]:
    """The columns ``kinds`` (name: kind) that are valid as they stand, read a row group at
    a time (Arrow decodes the columns of a group on its threads, and the next group is read
    while one is converted), each converted into its part of the final array: no copy of a
    whole column in Arrow's memory, and no unification of the row groups' dictionaries. A
    column that is not valid as it stands (see :func:`_valid_column_to_numpy`), or whose
    text value is longer than the limit, is left out (the caller reads it whole and names
    the problem); none is returned when a row group cannot be read."""
    schema = pf.schema_arrow
    outs: dict[str, np.ndarray] = {}
    types: dict[str, pa.DataType] = {}
    for name, kind in kinds.items():
        if name not in schema.names:
            continue
        t = schema.field(name).type
        out = _empty_for(t, name, kind, num_rows)
        if out is not None:
            outs[name], types[name] = out, t
    groups = pf.num_row_groups
    if not outs or groups == 0:
        return {}
    cap = limit("trace_string_bytes")

    def read(i: int) -> pa.Table:
        return pf.read_row_group(i, columns=list(outs), use_threads=True)

    at = 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(read, 0)
        for i in range(groups):
            try:
                table = ahead.result()
            except _ARROW_READ_ERRORS:
                return {}
            if i + 1 < groups:
                ahead = pool.submit(read, i + 1)
            n = table.num_rows
            if at + n > num_rows:
                return {}
            for name in list(outs):
                col = table.column(name)
                ok = col.type == types[name] and not col.null_count
                if ok and kinds[name] == "str":
                    ok = _longest_text(col) <= cap
                if not ok or not _fill(outs[name], at, col, kinds[name]):
                    del outs[name]
            if not outs:
                return {}
            at += n
    return outs if at == num_rows else {}


def _longest_text(col: pa.ChunkedArray) -> int:
    """Bytes of the longest value in the dictionaries of a dictionary-encoded text column."""
    longest = 0
    for chunk in col.chunks:
        if len(chunk.dictionary):
            longest = max(longest, pc.max(pc.binary_length(chunk.dictionary)).as_py() or 0)
    return longest


def _empty_for(t: pa.DataType, name: str, kind: str, n: int) -> np.ndarray | None:
    """The final array of a column of Arrow type ``t`` that converts without a check naming
    a row, or None: text as codes of a dictionary of strings (int8), floats in their own
    precision, integers in the dtype of :func:`_int_dtype`."""
    if kind == "str":
        if not (pa.types.is_dictionary(t) and _is_string(t.value_type)):
            return None
        return np.empty(n, dtype=np.int8)
    if kind == "float":
        if not (pa.types.is_float32(t) or pa.types.is_float64(t)):
            return None
        return np.empty(n, dtype=np.float32 if pa.types.is_float32(t) else np.float64)
    if not pa.types.is_integer(t):
        return None
    return np.empty(n, dtype=_int_dtype(name, t))


def _valid_column_to_numpy(col: pa.ChunkedArray, name: str, kind: str) -> np.ndarray | None:
    """The array :func:`_column_to_numpy` returns, converted chunk by chunk into the final
    dtype (no full-size intermediate), when the column is valid as it stands: no empty
    value, a numeric type that holds the kind (integers in range of their dtype, finite
    floats) or string codes of known operation types. None otherwise: the checked
    conversion then names the problem."""
    if col.null_count:
        return None
    out = _empty_for(col.type, name, kind, len(col))
    if out is None or not _fill(out, 0, col, kind):
        return None
    return out


def _fill(out: np.ndarray, at: int, col: pa.ChunkedArray, kind: str) -> bool:
    """Convert the chunks of ``col`` (no nulls, of the type ``out`` was made for) into
    ``out[at:]``; False when a value does not convert (see :func:`_valid_column_to_numpy`)."""
    for chunk in col.chunks:
        n = len(chunk)
        part = out[at:at + n]
        if kind == "str":
            values = chunk.dictionary
            try:
                values.validate(full=True)
            except pa.ArrowInvalid:
                return False
            # A dictionary may hold values no row uses (pandas categories): only the values
            # used must be known operation types.
            lut = np.array([OPTYPE_CODE.get(v, -1) for v in values.to_pylist()] or [-1],
                           dtype=np.int8)
            codes = _values(chunk.indices)
            if n and (codes.min() < 0 or codes.max() >= len(values)):
                return False
            np.take(lut, codes, out=part)
            if n and part.min() < 0:
                return False
        else:
            values = _values(chunk)
            if kind == "float":
                if not np.isfinite(values).all():
                    return False
            elif n:
                info = np.iinfo(out.dtype)
                if values.min() < info.min or values.max() > info.max:
                    return False
            part[:] = values
        at += n
    return True


def _values(arr: pa.Array) -> np.ndarray:
    """The values of an integer or float Arrow array without nulls, as a zero-copy numpy
    view of its buffer (``Array.to_numpy`` imports pandas, which loading does not need)."""
    t = arr.type
    code = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
    dtype = np.dtype(f"{code}{t.bit_width // 8}")
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr),
                         offset=arr.offset * dtype.itemsize)


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split())[:200] if text else type(exc).__name__


#: Arrow types of the columns when JSON lines are parsed (a value of another JSON type is
#: an error, found line by line by :func:`_scan_jsonl`).
_JSON_TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
_JSON_SCHEMA = pa.schema([(name, _JSON_TYPES[kind])
                          for name, kind in (REQUIRED_COLUMNS | OPTIONAL_COLUMNS).items()])
#: Longest line (bytes) of a JSON-lines trace; a trace row takes about 250 bytes.
JSONL_MAX_LINE = MAX_LINE_BYTES
_CHUNK = 1 << 22


def _count_lines(fh: IO[bytes]) -> int:
    n, last = 0, b"\n"
    while chunk := fh.read(_CHUNK):
        n += chunk.count(b"\n")
        last = chunk[-1:]
    return n + (last != b"\n")


def _read_jsonl(p: Path) -> pa.Table:
    """The rows of a JSON-lines trace, from one opening of the file (a regular file: its
    lines are counted against ``trace_rows``, then it is read from the start). A field that
    is not a trace column is refused (:func:`_scan_jsonl` names its line)."""
    try:
        with open_regular(p, "trace file") as fh:
            check_limit("trace_rows", _count_lines(fh), f"{p} (lines)")
            fh.seek(0)
            table = pajson.read_json(
                fh, read_options=pajson.ReadOptions(block_size=JSONL_MAX_LINE),
                parse_options=pajson.ParseOptions(explicit_schema=_JSON_SCHEMA,
                                                  unexpected_field_behavior="error"))
    except OSError as exc:
        raise InputError(f"{p}: cannot read the trace file ({exc.strerror or exc})") from None
    except pa.ArrowException as exc:
        if "Empty JSON file" in str(exc):
            raise InputError(f"{p}: the trace has no rows") from None
        # Find the first offending line for a precise message (error path only).
        _scan_jsonl(p)
        raise InputError(f"{p}: cannot read JSON lines ({_first_line(exc)})") from None
    try:
        table.column("optype").validate(full=True)
    except pa.ArrowInvalid:
        _scan_jsonl(p)  # names the line with bytes that are not UTF-8
        raise InputError(f"{p}: column 'optype' holds bytes that are not UTF-8 text") from None
    return table


_JSON_WORDS = {"int": "an integer", "float": "a number", "str": "a string"}


def _json_kind_ok(value: Any, kind: str) -> bool:
    if value is None:
        return True  # an empty value: reported with its row after parsing
    if kind == "str":
        return isinstance(value, str)
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int) and -(2**63) <= value < 2**63
    return isinstance(value, int | float)


def _scan_jsonl(p: Path) -> None:
    """Raise an :class:`InputError` naming the first line of ``p`` that is not a trace row."""
    for lineno, raw in iter_lines(p, JSONL_MAX_LINE):
        where = f"{p}:{lineno}"
        try:
            rec = parse_json_line(raw, JSONL_MAX_LINE)
        except JSONLineError as exc:
            raise InputError(f"{where}: {exc}") from None
        if rec is None:
            continue
        if not isinstance(rec, dict):
            raise InputError(f"{where}: each line must be a JSON object, got "
                             f"{type(rec).__name__}")
        for key in rec:
            if key not in KNOWN_COLUMNS:
                raise _unknown_name(key, where, "field")
        for name, kind in (REQUIRED_COLUMNS | OPTIONAL_COLUMNS).items():
            if name in rec and not _json_kind_ok(rec[name], kind):
                raise InputError(f"{where}: field '{name}' must be {_JSON_WORDS[kind]}"
                                 f"{' (64-bit)' if kind == 'int' else ''}, got "
                                 f"{_short(rec[name])}")


def jsonl_line_of_row(p: Path, row: int) -> int | None:
    """Line number (1-based) of the ``row``-th record (0-based) of a JSON-lines file,
    skipping blank lines as the reader does; None when the file cannot be read."""
    seen = -1
    try:
        for lineno, raw in iter_lines(p, JSONL_MAX_LINE):
            if raw.strip():
                seen += 1
                if seen == row:
                    return lineno
    except (OSError, InputError):
        return None
    return None


def write_trace(trace: TraceColumns, path: str | Path) -> Path:
    """Write a trace as parquet, or JSON lines when the path ends in ``.jsonl``."""
    p = Path(path)
    table = trace.to_arrow()
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        rows = table.cast(pa.schema([
            pa.field(n, pa.string() if n in ("optype", "host") else table.schema.field(n).type)
            for n in table.column_names])).to_pylist()
        with p.open("w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    else:
        pq.write_table(table, p)
    return p


def parse_steps(spec: str | None) -> tuple[int, int] | None:
    """Parse ``--steps`` as ``A-B`` (inclusive) or a single step ``A``."""
    if spec is None:
        return None
    try:
        if "-" in spec.strip()[1:]:
            a, b = spec.split("-", 1) if not spec.startswith("-") else (spec, "")
            lo, hi = int(a), int(b)
        else:
            lo = hi = int(spec)
    except ValueError:
        raise InputError(f"--steps: expected A-B or A, got {spec!r}") from None
    if hi < lo:
        raise InputError(f"--steps: empty range {spec!r}")
    return lo, hi


def select_steps(trace: TraceColumns, steps: tuple[int, int] | None) -> TraceColumns:
    """Keep the rows of steps in the inclusive range; an empty selection is an error."""
    if steps is None:
        return trace
    lo, hi = steps
    keep = (trace.step >= lo) & (trace.step <= hi)
    if not keep.any():
        have = np.unique(trace.step)
        raise InputError(f"{trace.source}: no step in {lo}-{hi} (trace has steps "
                         f"{have.min()}..{have.max()})")
    return trace.take(keep)
