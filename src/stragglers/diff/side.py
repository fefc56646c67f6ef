"""One side of a diff: what an analysis found, as the comparison needs it.

A :class:`Side` is made from an :class:`~stragglers.analysis.result.AnalysisResult` (and,
when the input was a trace, its :class:`~stragglers.trace.table.OpTable`, for the mean op
time per op type) with :func:`side_of`, or at the edge from a result.json document with
:func:`read_side` (checked field by field: a broken file is one line naming the file and
the field). :func:`load_side` takes what a user gives on the command line: a result folder,
a result.json, a folder with a trace and its ``meta.yaml``, or a trace with ``meta``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from stragglers.analysis.result import AnalysisResult
from stragglers.analysis.workers import Worker
from stragglers.errors import InputError
from stragglers.inputs import check_file, read_text
from stragglers.limits import check_limit, limit
from stragglers.trace import schema
from stragglers.trace.io import JobMeta
from stragglers.trace.table import OpTable

#: The result.json schema major version this module reads (1.0 to 1.4 and later 1.x).
RESULT_MAJOR = 1
RESULT_FILE = "result.json"
#: The largest slowdown (S, S_w, S_t, S^launch, ...) a result.json may hold: beyond it the
#: document is broken (and its products with step times would overflow).
MAX_SLOWDOWN = 1e6
#: The trace file names looked for in a folder, in this order, and its metadata beside it.
TRACE_FILES = ("trace.parquet", "trace.jsonl")
META_FILE = "meta.yaml"


@dataclass(frozen=True)
class Blame:
    """S of each group (attribution, whatif-model.md §5) overall and per step.

    ``dp_rank`` (dp,), ``stage`` (pp,), ``optype`` ``{key: S_t}``; per step: ``dp_rank_steps``
    (dp, n_steps), ``stage_steps`` (pp, n_steps), ``optype_steps`` ``{key: (n_steps,)}``, each
    step's value over that step's ideal time; ``worker`` (dp, pp) exact S_w, None where the
    analysis approximated it (``--no-exact``).
    """

    dp_rank: np.ndarray
    stage: np.ndarray
    optype: Mapping[str, float]
    dp_rank_steps: np.ndarray
    stage_steps: np.ndarray
    optype_steps: Mapping[str, np.ndarray]
    worker: np.ndarray | None


@dataclass(frozen=True)
class HostBlame:
    """The launch attribution (host time): S^launch by DP rank (dp,), stage (pp,), op type
    (``first-op`` included) and candidate worker."""

    dp_rank: np.ndarray
    stage: np.ndarray
    optype: Mapping[str, float]
    worker: Mapping[Worker, float]


@dataclass(frozen=True)
class Named:
    """The verdict: its cause, the workers it names and its confidence."""

    cause: str
    workers: tuple[Worker, ...]
    confidence: float


@dataclass(frozen=True)
class Side:
    """One analysis as the diff reads it. Step-time arrays are (n_steps,) in seconds, in the
    order of ``steps``; ``op_mean`` ``{optype: (n_steps,)}`` the mean duration of the ops of
    each op type per step, known only when the input was a trace (a result.json holds no
    op durations)."""

    source: str
    kind: str  # "result.json" or "trace"
    job: JobMeta
    steps: np.ndarray
    actual: np.ndarray
    nodelay: np.ndarray
    ideal: np.ndarray
    slowdown: float
    slowdown_healthy: float | None
    discrepancy: float
    trustworthy: bool
    blame: Blame
    host: HostBlame | None
    verdict: Named
    worker_names: Mapping[str, str] = field(default_factory=dict)
    op_mean: Mapping[str, np.ndarray] | None = None

    @property
    def dp(self) -> int:
        return self.job.dp_size

    @property
    def pp(self) -> int:
        return self.job.pp_size

    @property
    def n_steps(self) -> int:
        return int(self.steps.shape[0])

    @property
    def ideal_mean(self) -> float:
        return float(self.ideal.mean())

    @property
    def nodelay_mean(self) -> float:
        return float(self.nodelay.mean())

    def worker_label(self, key: str) -> str:
        """``"1,2 (rank 9 (host-a))"`` where the analysis names the worker, else ``"1,2"``."""
        name = self.worker_names.get(key)
        return f"{key} ({name})" if name else key


def _frozen(a: np.ndarray) -> np.ndarray:
    v = np.array(a, dtype=float)
    v.setflags(write=False)
    return v


# -- from an analysis ---------------------------------------------------------------------
def op_mean_times(table: OpTable) -> dict[str, np.ndarray]:
    """Mean op duration per attribution key (``forward-pp-comm`` gathers the forward sends
    and receives, as S_t does) and per step: ``{key: (n_steps,)}``."""
    keys = np.array([schema.ATTRIBUTION_TYPE[t] for t in schema.OPTYPES])
    node_key = keys[table.node_optype]
    per_node = table.duration.sum(axis=1, dtype=np.float64)  # (n_nodes, n_steps)
    dp = table.duration.shape[1]
    out: dict[str, np.ndarray] = {}
    for key in dict.fromkeys(node_key.tolist()):  # op types present, in schema order
        sel = node_key == key
        out[str(key)] = per_node[sel].sum(axis=0) / (int(sel.sum()) * dp)
    return out


def side_of(result: AnalysisResult, table: OpTable | None = None, source: str | None = None
            ) -> Side:
    """The side of an analysis (``table``: the op table it ran on, for the mean op times)."""
    m, v = result.metrics, result.verdict
    ideal = m.ideal
    la = m.launch
    host = None if la is None else HostBlame(
        dp_rank=_frozen(la.s_dp), stage=_frozen(la.s_stage),
        optype=MappingProxyType(dict(la.s_optype)),
        worker=MappingProxyType({w: float(x) for w, x in la.s_worker.items()}))
    blame = Blame(
        dp_rank=_frozen(m.s_dp), stage=_frozen(m.s_stage),
        optype=MappingProxyType(dict(m.s_optype)),
        dp_rank_steps=_frozen(m.attr_dp / ideal), stage_steps=_frozen(m.attr_stage / ideal),
        optype_steps=MappingProxyType({k: _frozen(t / ideal) for k, t in m.attr_optype.items()}),
        worker=None if m.worker_exact is None else _frozen(m.worker_slowdown))
    return Side(
        source=source or result.source, kind="trace" if table is not None else "analysis",
        job=result.job, steps=np.asarray(m.steps).copy(), actual=_frozen(m.actual),
        nodelay=_frozen(m.nodelay), ideal=_frozen(ideal), slowdown=m.slowdown,
        slowdown_healthy=m.slowdown_healthy, discrepancy=m.discrepancy,
        trustworthy=result.trustworthy, blame=blame, host=host,
        verdict=Named(v.cause.value, tuple(v.workers), float(v.confidence)),
        worker_names=MappingProxyType(dict(result.worker_names)),
        op_mean=None if table is None else MappingProxyType(
            {k: _frozen(x) for k, x in op_mean_times(table).items()}))


# -- from a result.json document ----------------------------------------------------------
class _Reader:
    """Typed access to a result document; every problem is one line naming the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, what: str) -> InputError:
        return InputError(f"{self.source}: field '{where}' {what}")

    def get(self, obj: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in obj:
            raise InputError(f"{self.source}: not a stragglers result.json: field "
                             f"'{where}' is missing")
        return obj[key]

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"must be an object, got {type(value).__name__}")
        return value

    def number(self, value: Any, where: str, hi: float = MAX_SLOWDOWN) -> float:
        """A finite number in [0, ``hi``] (every number the diff reads is a slowdown, a
        step time or a confidence: none is negative)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, f"must be a number, got {value!r:.40}")
        try:
            x = float(value)
        except OverflowError:
            raise self.fail(where, "is too large a number") from None
        if not math.isfinite(x):
            raise self.fail(where, f"must be finite, got {x}")
        if not 0.0 <= x <= hi:
            raise self.fail(where, f"must be between 0 and {hi:g}, got {x:g}")
        return x

    def numbers(self, obj: Any, keys: list[str], where: str, hi: float = MAX_SLOWDOWN
                ) -> np.ndarray:
        """``obj[k]`` for every ``k`` of ``keys``, as an array (each :meth:`number`)."""
        obj = self.mapping(obj, where)
        missing = [k for k in keys if k not in obj]
        if missing:
            raise self.fail(f"{where}[{missing[0]!r}]", "is missing")
        return np.array([self.number(obj[k], f"{where}[{k!r}]", hi) for k in keys],
                        dtype=float)

    def scores(self, obj: Any, where: str) -> dict[str, float]:
        obj = self.mapping(obj, where)
        return {str(k): self.number(x, f"{where}[{k!r}]") for k, x in obj.items()}

    def worker(self, key: Any, dp: int, pp: int, where: str) -> Worker:
        try:
            w = Worker.parse(str(key))
        except ValueError:
            raise self.fail(where, f"has {key!r:.40} where a worker 'dp,stage' is expected"
                            ) from None
        if not (0 <= w.dp_rank < dp and 0 <= w.stage < pp):
            raise self.fail(where, f"names worker {w.key}, outside dp {dp} x pp {pp}")
        return w


def _schema(reader: _Reader, doc: dict[str, Any]) -> None:
    version = reader.get(doc, "schema_version", "schema_version")
    major = str(version).split(".")[0]
    if not isinstance(version, str) or major != str(RESULT_MAJOR):
        raise reader.fail("schema_version", f"is {version!r:.20}: this version reads "
                          f"result.json schema {RESULT_MAJOR}.x (written by `stragglers "
                          "analyze`)")


def read_side(doc: Any, source: str) -> Side:
    """The side of a result.json document (schema 1.x; the fields added after 1.0, S_h and
    the launch attribution, are read where present)."""
    r = _Reader(source)
    doc = r.mapping(doc, "(document)")
    _schema(r, doc)
    job = JobMeta.from_dict(r.mapping(r.get(doc, "job", "job"), "job"),
                            source=f"{source}: field 'job'")
    dp, pp = job.dp_size, job.pp_size
    check_limit("workers", dp * pp, f"{source}: job.dp_size x job.pp_size")
    raw_steps = r.get(doc, "steps", "steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise r.fail("steps", "must be a non-empty list of step ids")
    if any(isinstance(s, bool) or not isinstance(s, int) for s in raw_steps):
        raise r.fail("steps", "must hold integer step ids")
    check_limit("table_cells", len(raw_steps) * (dp + pp), f"{source}: steps x (dp + pp)")
    keys = [str(s) for s in raw_steps]
    st = r.mapping(r.get(doc, "step_time", "step_time"), "step_time")
    longest = float(limit("timestamp_seconds"))
    actual, nodelay, ideal = (r.numbers(r.get(st, k, f"step_time.{k}"), keys, f"step_time.{k}",
                                        longest) for k in ("actual", "no_delay", "ideal"))
    for name, times in (("actual", actual), ("no_delay", nodelay), ("ideal", ideal)):
        if not (times > 0).all():
            raise r.fail(f"step_time.{name}", "must be positive in every step")
    att = r.mapping(r.get(doc, "attribution", "attribution"), "attribution")
    blame = _blame(r, doc, att, dp, pp, keys)
    names = doc.get("worker_names") or {}
    if not isinstance(names, dict) or not all(isinstance(x, str) for x in names.values()):
        raise r.fail("worker_names", "must map 'dp_rank,stage' to names (strings)")
    verdict = r.mapping(r.get(doc, "verdict", "verdict"), "verdict")
    cause = r.get(verdict, "cause", "verdict.cause")
    if not isinstance(cause, str):
        raise r.fail("verdict.cause", "must be a string")
    wlist = verdict.get("workers", [])
    if not isinstance(wlist, list):
        raise r.fail("verdict.workers", "must be a list of workers 'dp,stage'")
    confidence = r.number(verdict.get("confidence", 0.0), "verdict.confidence", 1.0)
    healthy = doc.get("slowdown_healthy")
    trust = doc.get("trustworthy", True)
    if not isinstance(trust, bool):
        raise r.fail("trustworthy", "must be true or false")
    return Side(
        source=source, kind=RESULT_FILE, job=job, steps=np.array(raw_steps, dtype=np.int64),
        actual=_frozen(actual), nodelay=_frozen(nodelay), ideal=_frozen(ideal),
        slowdown=float(nodelay.mean() / ideal.mean()),
        slowdown_healthy=None if healthy is None else r.number(healthy, "slowdown_healthy"),
        discrepancy=float(actual.mean() / nodelay.mean()), trustworthy=trust, blame=blame,
        host=_host(r, doc.get("launch_attribution"), dp, pp),
        verdict=Named(cause, tuple(r.worker(k, dp, pp, "verdict.workers") for k in wlist),
                      confidence),
        worker_names=MappingProxyType(dict(names)))


def _blame(r: _Reader, doc: dict[str, Any], att: dict[str, Any], dp: int, pp: int,
           steps: list[str]) -> Blame:
    dps, stages = [str(d) for d in range(dp)], [str(s) for s in range(pp)]
    optype = r.scores(r.get(att, "optype", "attribution.optype"), "attribution.optype")
    per_step = r.mapping(r.get(doc, "attribution_per_step", "attribution_per_step"),
                         "attribution_per_step")
    rows = []
    for st in steps:
        row = r.mapping(r.get(per_step, st, f"attribution_per_step[{st!r}]"),
                        f"attribution_per_step[{st!r}]")
        where = f"attribution_per_step[{st!r}]"
        rows.append((r.numbers(r.get(row, "dp_rank", f"{where}.dp_rank"), dps,
                               f"{where}.dp_rank"),
                     r.numbers(r.get(row, "stage", f"{where}.stage"), stages, f"{where}.stage"),
                     r.numbers(r.get(row, "optype", f"{where}.optype"), list(optype),
                               f"{where}.optype")))
    dp_steps = np.stack([x[0] for x in rows], axis=1)
    stage_steps = np.stack([x[1] for x in rows], axis=1)
    opt_steps = np.stack([x[2] for x in rows], axis=1)
    worker = None
    if att.get("worker_method", "exact") == "exact":
        cells = r.mapping(r.get(att, "worker", "attribution.worker"), "attribution.worker")
        grid = np.full((dp, pp), np.nan)
        for key, value in cells.items():
            w = r.worker(key, dp, pp, f"attribution.worker[{key!r}]")
            grid[w.dp_rank, w.stage] = r.number(value, f"attribution.worker[{key!r}]")
        if np.isnan(grid).any():
            d, s = (int(x[0]) for x in np.nonzero(np.isnan(grid)))
            raise r.fail(f"attribution.worker['{d},{s}']", "is missing")
        worker = _frozen(grid)

    return Blame(
        dp_rank=_frozen(r.numbers(r.get(att, "dp_rank", "attribution.dp_rank"), dps,
                                  "attribution.dp_rank")),
        stage=_frozen(r.numbers(r.get(att, "stage", "attribution.stage"), stages,
                                "attribution.stage")),
        optype=MappingProxyType(optype),
        dp_rank_steps=_frozen(dp_steps), stage_steps=_frozen(stage_steps),
        optype_steps=MappingProxyType({k: _frozen(opt_steps[i]) for i, k in enumerate(optype)}),
        worker=worker)


def _host(r: _Reader, raw: Any, dp: int, pp: int) -> HostBlame | None:
    if raw is None:
        return None
    la = r.mapping(raw, "launch_attribution")
    workers = r.mapping(la.get("worker", {}), "launch_attribution.worker")
    return HostBlame(
        dp_rank=_frozen(r.numbers(r.get(la, "dp_rank", "launch_attribution.dp_rank"),
                                  [str(d) for d in range(dp)], "launch_attribution.dp_rank")),
        stage=_frozen(r.numbers(r.get(la, "stage", "launch_attribution.stage"),
                                [str(s) for s in range(pp)], "launch_attribution.stage")),
        optype=MappingProxyType(r.scores(r.get(la, "optype", "launch_attribution.optype"),
                                         "launch_attribution.optype")),
        worker=MappingProxyType({
            r.worker(k, dp, pp, f"launch_attribution.worker[{k!r}]"):
                r.number(x, f"launch_attribution.worker[{k!r}]") for k, x in workers.items()}))


def read_result_file(path: str | Path, label: str | None = None) -> Side:
    """The side of a result.json file (``label``: how to name it, default its path)."""
    path = Path(path)
    try:
        doc = json.loads(read_text(path, RESULT_FILE))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not a result.json: invalid JSON at line {exc.lineno}"
                         ) from None
    except RecursionError:
        raise InputError(f"{path}: not a result.json: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal too long to convert
        raise InputError(f"{path}: not a result.json: {exc}") from None
    side = read_side(doc, str(path))  # errors name the file
    return side if label is None else dataclasses.replace(side, source=label)


def analyse_trace(trace: str | Path, meta: str | Path, label: str | None = None) -> Side:
    """Analyse a trace (exact S_w, the default verdict) and take its side, with the mean op
    time per op type."""
    from stragglers.analysis import analyze_table, load_table

    table = load_table(trace, meta)
    return side_of(analyze_table(table).result, table, source=label or str(trace))


def takes_meta(path: str | Path) -> bool:
    """Whether ``path`` is a trace that needs its metadata given: a trace file, or a folder
    with a trace, no result.json and no meta.yaml."""
    p = Path(path)
    if p.is_dir():
        return (not (p / RESULT_FILE).is_file() and not (p / META_FILE).is_file()
                and any((p / name).is_file() for name in TRACE_FILES))
    return p.is_file() and p.suffix != ".json"


def load_side(path: str | Path, meta: str | Path | None = None, option: str = "--meta"
              ) -> Side:
    """What a user names: a result folder (``result.json`` inside), a result.json file, a
    folder with a trace (``trace.parquet`` or ``trace.jsonl``) and ``meta.yaml``, or a trace
    file with ``meta`` (``option`` names where it came from in messages). A folder with both
    a result.json and a trace is read as the result (it is the analysis already made)."""
    p = Path(path)
    if p.is_dir():
        if (p / RESULT_FILE).is_file():
            if meta is not None:
                raise InputError(f"{option} {meta}: {p} holds a {RESULT_FILE}, which needs no "
                                 "metadata (give the trace itself to analyse it again)")
            return read_result_file(p / RESULT_FILE, str(p))
        for name in TRACE_FILES:
            if (p / name).is_file():
                beside = p / META_FILE
                if meta is None and not beside.is_file():
                    raise InputError(f"{p}: has {name} but no {META_FILE} beside it (give "
                                     f"{option} META.yaml)")
                return analyse_trace(p / name, meta or beside, str(p))
        raise InputError(f"{p}: folder holds neither {RESULT_FILE} nor "
                         f"{' or '.join(TRACE_FILES)}")
    if not p.exists():
        raise InputError(f"{p}: not found")
    # a named pipe, a device or a socket: refused before anything waits on it or reads it
    check_file(p, "result.json or trace")
    if p.suffix == ".json":
        if meta is not None:
            raise InputError(f"{option} {meta}: {p} is a result.json, which needs no metadata")
        return read_result_file(p)
    if meta is None:
        raise InputError(f"{p}: a trace needs its job metadata: give {option} META.yaml")
    return analyse_trace(p, meta)
