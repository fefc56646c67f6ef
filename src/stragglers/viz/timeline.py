"""Chrome / Perfetto trace-event timelines of an operation trace.

:func:`write_chrome_trace` writes the JSON object format of the Trace Event Format, which
ui.perfetto.dev and chrome://tracing both open (a ``.gz`` suffix writes it gzip-compressed,
which both also open):

* one **process** per DP rank (the pipeline group), named ``DP rank d``, pid ``d + 1``;
* one **thread** (track) per worker within it, named ``stage s (worker d,s)``, tid
  ``stage * lane_stride + 1``. A worker's ops run on several CUDA streams and overlap
  (compute with P2P and DP communication; in real traces even consecutive compute ops
  overlap by tens of microseconds), and a trace-event thread can only draw properly nested
  slices, so ops that would overlap on the worker's track go to extra *lanes*, threads
  placed right below it: ``stage s (worker d,s) · fwd p2p`` (forward send/recv), ``· bwd
  p2p`` (backward send/recv), ``· collectives`` (DP collectives, gradient clipping, the
  embedding all-reduce), and numbered overflow lanes (``#2``, ...) for ops that still
  overlap another op of their lane. Compute and other ops (gc, layernorm all-reduce, ...)
  stay on the worker's own track unless they overlap. No two ops of one track overlap, and
  only lanes that hold ops get a thread, so a worker with only non-overlapping
  compute/other ops has exactly one track. Lane l has tid ``stage * lane_stride + l + 1``
  (``lane_stride`` is in ``otherData.layout``); lanes are assigned by vectorised passes,
  not per op;
* every op is a complete event ``{"ph": "X", "name": optype, "cat": category, "ts", "dur",
  "args": {"step", "seq_id", "mb_id"}}`` with ``ts``/``dur`` in microseconds rounded to the
  nanosecond; categories are ``compute``, ``pp-comm``, ``dp-comm`` and ``other``;
* ``process_name``/``process_sort_index``/``thread_name``/``thread_sort_index`` metadata
  events order tracks by DP rank, then stage, then lane;
* top level: ``displayTimeUnit`` ("ms") and ``otherData`` = ``{"name", "generator",
  "layout", "metadata"}``.

Times are written as given (a trace whose steps all start near 0 draws its steps on top of
each other); :func:`stack_steps` lays steps out one after another first.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.dtypes import StringDType

from stragglers import __version__

__all__ = [
    "REQUIRED_COLUMNS",
    "op_category",
    "read_chrome_trace",
    "stack_steps",
    "write_chrome_trace",
]

REQUIRED_COLUMNS: tuple[str, ...] = (
    "dp_rank",
    "stage",
    "step",
    "optype",
    "seq_id",
    "mb_id",
    "start",
    "end",
)
_INT_COLUMNS = ("dp_rank", "stage", "step", "seq_id", "mb_id")

_CATEGORIES: dict[str, str] = {
    "forward-compute": "compute",
    "backward-compute": "compute",
    "optimizer": "compute",
    "forward-send": "pp-comm",
    "forward-recv": "pp-comm",
    "backward-send": "pp-comm",
    "backward-recv": "pp-comm",
    "embedding-grads-all-reduce": "pp-comm",
    "params-all-gather": "dp-comm",
    "grads-reduce-scatter": "dp-comm",
    "separate-grads-all-reduce": "dp-comm",
    "optimizer-clip-main-grad": "dp-comm",
    "layernorm-grads-all-reduce": "other",
    "gc": "other",
}
# Base lanes (one thread each, only where used); a lane index is base + _N_BASE * level,
# where level > 0 are overflow lanes for ops that still overlap.
_N_BASE = 4
_LANE_SUFFIX = ("", " · fwd p2p", " · bwd p2p", " · collectives")
_CHUNK = 1 << 17  # events formatted and written per batch (bounds peak memory)


def op_category(optype: str) -> str:
    """Trace category of an operation type: compute, pp-comm, dp-comm or other."""
    if optype in _CATEGORIES:
        return _CATEGORIES[optype]
    if "compute" in optype:
        return "compute"
    if optype.endswith(("-send", "-recv")):
        return "pp-comm"
    if any(word in optype for word in ("all-gather", "reduce-scatter", "all-reduce")):
        return "dp-comm"
    return "other"


def _base_lane(optype: str, category: str) -> int:
    if category in ("compute", "other"):
        return 0
    if category == "pp-comm" and optype.endswith(("-send", "-recv")):
        return 2 if optype.startswith("backward") else 1
    return 3


def stack_steps(ops: pd.DataFrame, *, gap: float = 0.0) -> pd.DataFrame:
    """Return a copy of ``ops`` with each step shifted to start ``gap`` s after the previous.

    Steps are placed in increasing step order; step k keeps its internal timing and starts
    where step k-1 (its latest ``end``) finished plus ``gap``. The first step starts at its
    own earliest ``start``. Useful for traces that record each step on its own clock.
    """
    _require_columns(ops, ("step", "start", "end"))
    if gap < 0:
        raise ValueError(f"gap must be >= 0, got {gap}")
    out = ops.copy()
    if out.empty:
        return out
    spans = out.groupby("step", sort=True).agg(first=("start", "min"), last=("end", "max"))
    length = (spans["last"] - spans["first"]).to_numpy(dtype=float)
    begin = np.empty(len(spans))
    begin[0] = spans["first"].iloc[0]
    begin[1:] = begin[0] + np.cumsum(length[:-1] + gap)
    shift = pd.Series(begin - spans["first"].to_numpy(dtype=float), index=spans.index)
    delta = out["step"].map(shift).to_numpy(dtype=float)
    out["start"] = out["start"].to_numpy(dtype=float) + delta
    out["end"] = out["end"].to_numpy(dtype=float) + delta
    return out


def write_chrome_trace(
    ops: pd.DataFrame,
    path: str | Path,
    *,
    name: str,
    metadata: dict | None = None,
) -> Path:
    """Write ``ops`` as a Chrome trace-event JSON file (see the module doc) and return the path.

    ``ops`` needs the columns of :data:`REQUIRED_COLUMNS` (``start``/``end`` in seconds);
    other columns are ignored. Raises ValueError, naming the first offending row, for a
    missing column, a null or non-integer id, a non-finite time or ``end < start``.
    ``metadata`` (JSON-serialisable; numpy scalars are converted) is stored in
    ``otherData.metadata``.
    """
    cols = _validated_columns(ops)
    n = len(ops)
    start_ns = _to_ns(cols.pop("start"), ops, "start")
    dur_ns = _to_ns(cols.pop("end"), ops, "end") - start_ns  # >= 0: rint is monotone

    opt_codes, opt_names = _factorize_optype(ops)
    opt_cats = [op_category(v) for v in opt_names]
    base_lane = np.array(
        [_base_lane(v, c) for v, c in zip(opt_names, opt_cats, strict=True)] + [0],
        dtype=np.int64,
    )[opt_codes]
    dp, stage = cols.pop("dp_rank"), cols.pop("stage")
    lane = _assign_lanes(dp, stage, base_lane, start_ns, start_ns + dur_ns)
    del base_lane
    stride = int(lane.max()) + 1 if n else 1
    # Threads (dp, stage, lane) that occur, sorted: pid = dp + 1, tid = stage*stride + lane + 1.
    tid = stage * stride + lane + 1
    del lane, stage
    tid_span = int(tid.max()) + 1 if n else 1
    thread_codes, thread_keys = pd.factorize(dp * tid_span + tid, sort=True)
    del dp, tid
    t_pid = thread_keys // tid_span + 1
    t_tid = thread_keys % tid_span

    other = {
        "name": name,
        "generator": f"stragglers {__version__}",
        "layout": {
            "pid": "dp_rank + 1",
            "tid": "stage * lane_stride + lane + 1",
            "lane_stride": stride,
            "ts_unit": "us",
        },
        "metadata": metadata if metadata is not None else {},
    }
    other_json = json.dumps(other, default=_json_default, allow_nan=False)
    meta_events = _metadata_events(t_pid, t_tid, stride)

    # Every event is the concatenation of a few pieces, most of them gathered from small
    # tables by code, the rest integer-to-text casts: vectorised, no per-row Python.
    name_table = _strings(
        '{"name":' + json.dumps(v) + ',"cat":' + json.dumps(c) + ',"ph":"X","ts":'
        for v, c in zip(opt_names, opt_cats, strict=True)
    )
    thread_table = _strings(
        f',"pid":{p},"tid":{t},"args":{{"step":'
        for p, t in zip(t_pid.tolist(), t_tid.tolist(), strict=True)
    )
    ts_frac_table = _strings(_frac(f) + ',"dur":' for f in range(1000))
    dur_frac_table = _strings(_frac(f) for f in range(1000))

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".gz":
        fh_cm = gzip.open(out, "wt", encoding="utf-8", compresslevel=3)
    else:
        fh_cm = open(out, "w", encoding="utf-8")
    with fh_cm as fh:
        fh.write('{"displayTimeUnit":"ms","otherData":')
        fh.write(other_json)
        fh.write(',"traceEvents":[\n')
        fh.write(",\n".join(meta_events))
        for lo in range(0, n, _CHUNK):
            s = slice(lo, min(n, lo + _CHUNK))
            ts = start_ns[s]
            ts_abs = np.abs(ts)
            ts_int = (ts_abs // 1000).astype(StringDType())
            if (ts < 0).any():
                ts_int = np.strings.add(np.where(ts < 0, "-", "").astype(StringDType()), ts_int)
            dur = dur_ns[s]
            ev = np.strings.add(name_table[opt_codes[s]], ts_int)
            ev = np.strings.add(ev, ts_frac_table[ts_abs % 1000])
            ev = np.strings.add(ev, (dur // 1000).astype(StringDType()))
            ev = np.strings.add(ev, dur_frac_table[dur % 1000])
            ev = np.strings.add(ev, thread_table[thread_codes[s]])
            args = _args_text(cols["step"][s], cols["seq_id"][s], cols["mb_id"][s])
            ev = np.strings.add(ev, args)
            if meta_events or lo > 0:
                fh.write(",\n")
            fh.write(",\n".join(ev.tolist()))
            del ev, ts_int, args
        fh.write("\n]}\n")
    return out


def read_chrome_trace(path: str | Path) -> pd.DataFrame:
    """Load a file written by :func:`write_chrome_trace` back into an ops frame.

    Returns one row per complete (``"X"``) event, in file order, with columns ``dp_rank``,
    ``stage``, ``step``, ``optype``, ``seq_id``, ``mb_id``, ``start``, ``end`` (seconds),
    ``cat``, ``lane``, ``pid``, ``tid``. ``attrs`` holds ``name``, ``metadata``,
    ``other_data`` (the whole ``otherData``), ``process_names`` ({pid: name}),
    ``thread_names`` ({(pid, tid): name}) and ``metadata_events`` (their count).
    """
    p = Path(path)
    raw = gzip.open(p, "rb").read() if p.suffix == ".gz" else p.read_bytes()
    doc = json.load(io.BytesIO(raw))
    events = doc["traceEvents"]
    other = doc.get("otherData", {})
    stride = int(other.get("layout", {}).get("lane_stride", 1))

    slices = [e for e in events if e.get("ph") == "X"]
    meta = [e for e in events if e.get("ph") == "M"]
    frame = pd.DataFrame(
        {
            "pid": np.array([e["pid"] for e in slices], dtype=np.int64),
            "tid": np.array([e["tid"] for e in slices], dtype=np.int64),
            "optype": [e["name"] for e in slices],
            "cat": [e.get("cat", "") for e in slices],
            "ts": np.array([e["ts"] for e in slices], dtype=float),
            "dur": np.array([e["dur"] for e in slices], dtype=float),
            "step": np.array([e["args"]["step"] for e in slices], dtype=np.int64),
            "seq_id": np.array([e["args"]["seq_id"] for e in slices], dtype=np.int64),
            "mb_id": np.array([e["args"]["mb_id"] for e in slices], dtype=np.int64),
        }
    )
    result = pd.DataFrame(
        {
            "dp_rank": frame["pid"] - 1,
            "stage": (frame["tid"] - 1) // stride,
            "step": frame["step"],
            "optype": frame["optype"],
            "seq_id": frame["seq_id"],
            "mb_id": frame["mb_id"],
            "start": frame["ts"] / 1e6,
            "end": (frame["ts"] + frame["dur"]) / 1e6,
            "cat": frame["cat"],
            "lane": (frame["tid"] - 1) % stride,
            "pid": frame["pid"],
            "tid": frame["tid"],
        }
    )
    result.attrs["name"] = other.get("name")
    result.attrs["metadata"] = other.get("metadata")
    result.attrs["other_data"] = other
    result.attrs["process_names"] = {
        e["pid"]: e["args"]["name"] for e in meta if e.get("name") == "process_name"
    }
    result.attrs["thread_names"] = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in meta if e.get("name") == "thread_name"
    }
    result.attrs["metadata_events"] = len(meta)
    return result


# --------------------------------------------------------------------------------------------
# internals


def _require_columns(ops: pd.DataFrame, names: tuple[str, ...]) -> None:
    missing = [c for c in names if c not in ops.columns]
    if missing:
        have = ", ".join(map(str, ops.columns))
        raise ValueError(f"ops is missing column(s) {', '.join(missing)}; it has: {have}")


def _row_text(ops: pd.DataFrame, pos: int) -> str:
    row = ops.iloc[pos]
    fields = ", ".join(f"{c}={row[c]!r}" for c in REQUIRED_COLUMNS)
    return f"row {ops.index[pos]!r} (position {pos}: {fields})"


def _validated_columns(ops: pd.DataFrame) -> dict[str, np.ndarray]:
    _require_columns(ops, REQUIRED_COLUMNS)
    cols: dict[str, np.ndarray] = {}
    for c in _INT_COLUMNS:
        series = ops[c]
        if not (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)):
            raise ValueError(f"ops column {c!r} must be integer, got dtype {series.dtype}")
        values = series.to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(values) | (values != np.round(values))
        if c in ("dp_rank", "stage"):
            bad |= values < 0
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            what = "a non-negative integer" if c in ("dp_rank", "stage") else "an integer"
            raise ValueError(f"ops column {c!r} must be {what}; first bad {_row_text(ops, pos)}")
        cols[c] = values.astype(np.int64)
    for c in ("start", "end"):
        series = ops[c]
        if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
            raise ValueError(f"ops column {c!r} must be numeric seconds, got dtype {series.dtype}")
        values = series.to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(values)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            raise ValueError(f"ops column {c!r} must be finite; first bad {_row_text(ops, pos)}")
        cols[c] = values
    backwards = cols["end"] < cols["start"]
    if backwards.any():
        pos = int(np.flatnonzero(backwards)[0])
        raise ValueError(
            f"ops has end < start in {int(backwards.sum())} row(s); first bad {_row_text(ops, pos)}"
        )
    return cols


def _factorize_optype(ops: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    series = ops["optype"]
    if isinstance(series.dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy().astype(np.int64)
        names = [str(v) for v in series.cat.categories]
    else:
        codes_raw, uniques = pd.factorize(series, use_na_sentinel=True)
        codes = np.asarray(codes_raw, dtype=np.int64)
        names = [str(v) for v in uniques]
    if (codes < 0).any():
        pos = int(np.flatnonzero(codes < 0)[0])
        raise ValueError(f"ops column 'optype' is null; first bad {_row_text(ops, pos)}")
    return codes, names


def _assign_lanes(
    dp: np.ndarray,
    stage: np.ndarray,
    base_lane: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
) -> np.ndarray:
    """Lane per op such that ops sharing (dp, stage, lane) never overlap in time.

    Start from the category lane; then, level by level, every op that starts before some
    earlier-starting op of its lane has ended moves one overflow level up (lane + 4), and
    only the moved ops are re-checked. Each pass is a sort plus a grouped running maximum.
    The result is always valid; it can use more overflow lanes than strictly necessary for
    chains of overlaps, which do not occur for stream-ordered traces.
    """
    n = len(dp)
    lane = base_lane.copy()
    if n == 0:
        return lane
    worker = dp * (int(stage.max()) + 1) + stage
    todo = np.arange(n)
    while todo.size:
        key = worker[todo] * (int(lane.max()) + 1) + lane[todo]
        # By lane, then start; for equal starts the shorter op first.
        order = np.lexsort((end_ns[todo], start_ns[todo], key))
        idx = todo[order]
        k = key[order]
        running = pd.Series(end_ns[idx]).groupby(k, sort=False).cummax().to_numpy()
        first = np.ones(idx.size, dtype=bool)
        first[1:] = k[1:] != k[:-1]
        conflict = np.zeros(idx.size, dtype=bool)
        conflict[1:] = start_ns[idx[1:]] < running[:-1]
        conflict &= ~first
        moved = idx[conflict]
        lane[moved] += _N_BASE
        todo = moved
    return lane


def _metadata_events(t_pid: np.ndarray, t_tid: np.ndarray, stride: int) -> list[str]:
    events: list[str] = []
    for p in np.unique(t_pid).tolist():
        pname = json.dumps(f"DP rank {p - 1}")
        events.append(f'{{"name":"process_name","ph":"M","pid":{p},"args":{{"name":{pname}}}}}')
        events.append(
            f'{{"name":"process_sort_index","ph":"M","pid":{p},"args":{{"sort_index":{p - 1}}}}}'
        )
    for p, t in zip(t_pid.tolist(), t_tid.tolist(), strict=True):
        d, s, ln = p - 1, (t - 1) // stride, (t - 1) % stride
        tname = json.dumps(f"stage {s} (worker {d},{s}){_lane_label(ln)}")
        events.append(
            f'{{"name":"thread_name","ph":"M","pid":{p},"tid":{t},"args":{{"name":{tname}}}}}'
        )
        events.append(
            f'{{"name":"thread_sort_index","ph":"M","pid":{p},"tid":{t},'
            f'"args":{{"sort_index":{t}}}}}'
        )
    return events


def _lane_label(lane: int) -> str:
    return _LANE_SUFFIX[lane % _N_BASE] + (f" #{lane // _N_BASE + 1}" if lane >= _N_BASE else "")


def _to_ns(seconds: np.ndarray, ops: pd.DataFrame, column: str) -> np.ndarray:
    """Seconds -> integer nanoseconds (rounded), refusing values int64 cannot hold."""
    too_big = np.abs(seconds) >= 9.0e9
    if too_big.any():
        pos = int(np.flatnonzero(too_big)[0])
        raise ValueError(
            f"ops column {column!r} must be seconds below 9e9 in magnitude; first bad "
            f"{_row_text(ops, pos)}"
        )
    return np.rint(seconds * 1e9).astype(np.int64)


def _strings(items: Iterable[str]) -> np.ndarray:
    return np.array(list(items), dtype=StringDType())


def _frac(thousandths: int) -> str:
    """Shortest decimal fraction text for 0..999 thousandths: 0 -> '', 500 -> '.5'."""
    return f".{thousandths:03d}".rstrip("0").rstrip(".")


def _args_text(step: np.ndarray, seq: np.ndarray, mb: np.ndarray) -> np.ndarray:
    """``step,"seq_id":q,"mb_id":m}}`` per row, formatted once per distinct triple."""
    cs, us = pd.factorize(step)
    cq, uq = pd.factorize(seq)
    cm, um = pd.factorize(mb)
    # Codes are < len(chunk) <= 2**18 each, so the combined code fits in int64.
    combo, combos = pd.factorize((cs.astype(np.int64) * len(uq) + cq) * len(um) + cm)
    i_m = combos % len(um)
    i_q = (combos // len(um)) % len(uq)
    i_s = combos // (len(um) * len(uq))
    text = np.strings.add(np.asarray(us)[i_s].astype(StringDType()), ',"seq_id":')
    text = np.strings.add(text, np.asarray(uq)[i_q].astype(StringDType()))
    text = np.strings.add(text, ',"mb_id":')
    text = np.strings.add(text, np.asarray(um)[i_m].astype(StringDType()))
    text = np.strings.add(text, "}}")
    return text[combo]


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    raise TypeError(f"metadata value of type {type(obj).__name__} is not JSON-serialisable")
