"""Reading and writing traces (parquet or JSON lines) and job metadata (YAML).

A trace is held as a :class:`TraceColumns`: one numpy array per column of
whatif-model.md §1, with the operation type as an integer code into
:data:`stragglers.trace.schema.OPTYPES`. No row is dropped or altered here; the
checks that need the whole trace live in :mod:`stragglers.trace.validate`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq
import yaml

from stragglers.errors import InputError
from stragglers.trace.schema import META_INT_KEYS, OPTYPE_CODE, OPTYPES, REQUIRED_COLUMNS


@dataclass(frozen=True)
class JobMeta:
    """Parallel layout of one job (whatif-model.md §1)."""

    dp_size: int
    pp_size: int
    tp_size: int = 1
    dsp_size: int = 1
    vpp_size: int = 1
    world_size: int = 0
    trial_name: str = "job"
    run_id: str | int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def dp_synchronised(self) -> bool:
        """True when DP collectives synchronise several ranks (dp × cp > 1)."""
        return self.dp_size * self.dsp_size > 1

    @property
    def n_workers(self) -> int:
        return self.dp_size * self.pp_size

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        return {**d, **extra}

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "<metadata>") -> JobMeta:
        if not isinstance(raw, dict):
            raise InputError(f"{source}: metadata must be a mapping of keys to values")
        vals: dict[str, Any] = {}
        for key in META_INT_KEYS:
            if key not in raw:
                if key in ("dp_size", "pp_size"):
                    raise InputError(f"{source}: missing {key} (a required key)")
                continue
            v = raw[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{source}: '{key}' must be a positive integer, got {v!r}")
            vals[key] = v
        product = (vals["dp_size"] * vals["pp_size"] * vals.get("tp_size", 1)
                   * vals.get("dsp_size", 1))
        world = vals.get("world_size", product)
        if world != product:
            raise InputError(
                f"{source}: world_size {world} != dp_size*pp_size*tp_size*dsp_size = {product}"
            )
        vals["world_size"] = world
        name = raw.get("trial_name", raw.get("name", "job"))
        run_id = raw.get("run_id", 0)
        known = set(META_INT_KEYS) | {"trial_name", "name", "run_id"}
        extra = {k: v for k, v in raw.items() if k not in known}
        return cls(trial_name=str(name), run_id=run_id, extra=extra, **vals)


def read_meta(path: str | Path) -> JobMeta:
    """Read and check job metadata from a YAML (or JSON) file."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise InputError(f"{p}: metadata file not found") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{p}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return JobMeta.from_dict(raw, source=str(p))


def write_meta(meta: JobMeta, path: str | Path) -> Path:
    p = Path(path)
    p.write_text(yaml.safe_dump(meta.to_dict(), sort_keys=False))
    return p


@dataclass
class TraceColumns:
    """A trace as numpy columns; ``optype`` holds codes into ``OPTYPES``."""

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

    def __len__(self) -> int:
        return int(self.dp_rank.shape[0])

    def take(self, index: np.ndarray) -> TraceColumns:
        """Rows selected by a boolean mask or an index array."""
        cols = {name: getattr(self, name)[index] for name in REQUIRED_COLUMNS}
        return TraceColumns(source=self.source, **cols)

    def row(self, i: int) -> dict[str, Any]:
        """One row as a dict (for error messages)."""
        out: dict[str, Any] = {}
        for name in REQUIRED_COLUMNS:
            v = getattr(self, name)[i]
            out[name] = OPTYPES[int(v)] if name == "optype" else v.item()
        return out

    def to_arrow(self) -> pa.Table:
        cols = {name: getattr(self, name) for name in REQUIRED_COLUMNS}
        opt = pa.DictionaryArray.from_arrays(
            pa.array(self.optype.astype(np.int8)), pa.array(list(OPTYPES))
        )
        arrays = [opt if name == "optype" else pa.array(v) for name, v in cols.items()]
        return pa.table(arrays, names=list(cols))


_INT_TYPES: dict[str, type[np.integer]] = {
    "dp_rank": np.int32, "stage": np.int16, "rank": np.int32, "step": np.int64,
    "seq_id": np.int32, "mc": np.int16, "mb_id": np.int32, "gmc": np.int32}


def _fmt_row(table: pa.Table, i: int) -> str:
    row = {name: table.column(name)[i].as_py() for name in table.column_names}
    return json.dumps(row, default=str)


def _column_to_numpy(table: pa.Table, name: str, kind: str, source: str) -> np.ndarray:
    col = table.column(name)
    if col.null_count:
        i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(f"{source}: column '{name}' is empty at row {i}: {_fmt_row(table, i)}")
    if kind == "str":
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            raise InputError(f"{source}: column '{name}' must hold strings, has {col.type}")
        enc = pc.dictionary_encode(col).combine_chunks()
        names = enc.dictionary.to_pylist()
        unknown = [n for n in names if n not in OPTYPE_CODE]
        if unknown:
            codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False))
            i = int(np.flatnonzero(codes == names.index(unknown[0]))[0])
            raise InputError(
                f"{source}: column 'optype' has unknown operation type {unknown[0]!r} at row {i}"
                f" (known: {', '.join(OPTYPES)})"
            )
        lut = np.array([OPTYPE_CODE[n] for n in names], dtype=np.int8)
        return lut[np.asarray(enc.indices.to_numpy(zero_copy_only=False))]
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise InputError(f"{source}: column '{name}' must be numeric, has type {t}")
    arr = np.asarray(col.to_numpy())
    if kind == "float":
        arr = arr if arr.dtype in (np.float32, np.float64) else arr.astype(np.float64)
        bad = ~np.isfinite(arr)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{source}: column '{name}' is not finite at row {i}: "
                             f"{_fmt_row(table, i)}")
        return arr
    if pa.types.is_floating(t):
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{source}: column '{name}' must hold integers, row {i} has "
                             f"{arr[i]!r}: {_fmt_row(table, i)}")
    target: type[np.integer] = _INT_TYPES[name]
    info = np.iinfo(target)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise InputError(f"{source}: column '{name}' has values outside {target.__name__}")
    return arr.astype(target, copy=False)


def trace_from_arrow(table: pa.Table, source: str) -> TraceColumns:
    """Check the columns of an Arrow table and convert them to :class:`TraceColumns`."""
    missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(f"{source}: required column(s) missing: {', '.join(missing)}")
    if table.num_rows == 0:
        raise InputError(f"{source}: the trace has no rows")
    cols = {name: _column_to_numpy(table, name, kind, source)
            for name, kind in REQUIRED_COLUMNS.items()}
    return TraceColumns(source=source, **cols)


def read_trace(path: str | Path) -> TraceColumns:
    """Read a trace from parquet (``.parquet``/``.pq``) or JSON lines (``.jsonl``/``.json``)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: trace file not found")
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        table = _read_jsonl(p)
        return trace_from_arrow(table, str(p))
    return _read_parquet(p)


def _read_parquet(p: Path) -> TraceColumns:
    """Read a parquet trace one column at a time (bounded memory for large traces)."""
    try:
        pf = pq.ParquetFile(p)
        names = pf.schema_arrow.names
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{p}: not a readable parquet file ({exc})") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in names]
    if missing:
        raise InputError(f"{p}: required column(s) missing: {', '.join(missing)}")
    if pf.metadata.num_rows == 0:
        raise InputError(f"{p}: the trace has no rows")
    cols: dict[str, np.ndarray] = {}
    for name, kind in REQUIRED_COLUMNS.items():
        try:
            table = pf.read(columns=[name])
        except (pa.ArrowInvalid, OSError) as exc:
            raise InputError(f"{p}: column '{name}' cannot be read ({exc})") from None
        try:
            cols[name] = _column_to_numpy(table, name, kind, str(p))
        except InputError as exc:
            if "row" not in str(exc):
                raise
            # Re-read the whole table once so that the message can show the full row.
            trace_from_arrow(pq.read_table(p, columns=list(REQUIRED_COLUMNS)), str(p))
            raise
        del table
    return TraceColumns(source=str(p), **cols)


def _read_jsonl(p: Path) -> pa.Table:
    try:
        return pajson.read_json(p)
    except pa.ArrowInvalid as exc:
        # Find the first offending line for a precise message (error path only).
        with p.open() as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as jexc:
                    raise InputError(f"{p}:{lineno}: not valid JSON ({jexc.msg})") from None
                if not isinstance(rec, dict):
                    raise InputError(f"{p}:{lineno}: each line must be a JSON object") from None
        raise InputError(f"{p}: cannot read JSON lines ({exc})") from None


def write_trace(trace: TraceColumns, path: str | Path) -> Path:
    """Write a trace as parquet, or JSON lines when the path ends in ``.jsonl``."""
    p = Path(path)
    table = trace.to_arrow()
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        rows = table.cast(pa.schema([
            pa.field(n, pa.string() if n == "optype" else table.schema.field(n).type)
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
