"""One job of the fleet -> one typed :class:`FleetRow` (the Dask task), keyed by a content
hash of its files.

:func:`analyse_job` is a pure function of the job's files: it runs the same analysis as
``stragglers analyze`` (:func:`stragglers.analysis.runner.analyze_files`, default verdict
settings; ``exact_sw=False`` is ``analyze --no-exact``) and keeps the figures of the fleet
table. A trace the analysis refuses (:class:`~stragglers.errors.InputError`: corrupt,
inconsistent, over a limit) gives a failed row with the one-line reason; anything else is a
bug and raises.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from stragglers.analysis.result import AnalysisResult
from stragglers.analysis.runner import analyze_files
from stragglers.errors import InputError
from stragglers.fleet.discover import JobInput
from stragglers.inputs import load_json, read_text
from stragglers.trace import schema

#: Bumped whenever FleetRow or its figures change: rows stored by an older version are
#: recomputed, not reused.
ROW_VERSION = "fleet-row-1"
STATUS_ANALYSED = "analysed"
STATUS_FAILED = "failed"
#: Attribution keys of the op-type shares (send and receive grouped, as in Fig. 5).
OP_KEYS: tuple[str, ...] = tuple(dict.fromkeys(schema.ATTRIBUTION_TYPE[t]
                                               for t in schema.OPTYPES))
_CHUNK = 1 << 20


@dataclass(frozen=True)
class FleetRow:
    """The figures of one job (NaN where undefined; a failed job has only ``reason``).

    ``gpu_hours``: workers x tp x the traced steps' actual time / 3600; ``op_share``: per
    attribution key (:data:`OP_KEYS` present in the job), (S_t - 1) / (S - 1), the share of
    the waste the op type causes alone (NaN when S <= 1); ``step_slowdown``: per-step
    no-delay / ideal step time; ``fb_correlation``: Pearson correlation of forward and
    backward compute times of the same microbatch (Fig. 11, stage 1 when pp > 2, else 0);
    ``truth_primary`` / ``truth_causes``: from ``truth.json`` ("" without one).
    """

    status: str
    reason: str = ""
    dp: int = 0
    pp: int = 0
    tp: int = 0
    vpp: int = 0
    workers: int = 0
    steps: int = 0
    ops: int = 0
    slowdown: float = math.nan
    waste: float = math.nan
    discrepancy: float = math.nan
    trustworthy: bool = False
    verdict: str = ""
    verdict_workers: str = ""
    confidence: float = math.nan
    m_w: float = math.nan
    m_s: float = math.nan
    fb_correlation: float = math.nan
    ideal_step_s: float = math.nan
    actual_step_s: float = math.nan
    gpu_hours: float = math.nan
    op_share: tuple[tuple[str, float], ...] = ()
    step_slowdown: tuple[float, ...] = ()
    truth_primary: str = ""
    truth_causes: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as None)."""
        def clean(v: Any) -> Any:
            if isinstance(v, float) and math.isnan(v):
                return None
            if isinstance(v, (tuple, list)):
                return [clean(x) for x in v]
            return v
        return {k: clean(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> FleetRow:
        """The inverse of :meth:`to_dict` (a stored row)."""
        kw: dict[str, Any] = {}
        for f in fields(cls):
            v = raw[f.name]
            if f.name == "op_share":
                v = tuple((str(k), math.nan if x is None else float(x)) for k, x in v)
            elif f.name == "step_slowdown":
                v = tuple(math.nan if x is None else float(x) for x in v)
            elif v is None:
                v = math.nan
            kw[f.name] = v
        return cls(**kw)


def job_key(job: JobInput, exact_sw: bool) -> str:
    """Content hash of a job: its metadata, trace and truth bytes, the options and
    :data:`ROW_VERSION` (SHA-256, hex)."""
    h = hashlib.sha256(f"{ROW_VERSION}\0exact_sw={exact_sw}\0".encode())
    for label, path in (("meta", job.meta), ("trace", job.trace), ("truth", job.truth)):
        h.update(f"{label}\0{'' if path is None else path.name}\0".encode())
        if path is None or not path.is_file():
            h.update(b"-\0")
            continue
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def _truth(path: str | None) -> tuple[str, str]:
    if path is None:
        return "", ""
    raw = load_json(read_text(path, "truth file"), path)
    try:
        causes = [str(c["cause"]) for c in raw["expected"]["causes"]]
        primary = str(raw.get("primary", causes[0] if len(causes) == 1 else ""))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise InputError(f"{path}: not a stragglers truth file ({type(exc).__name__}: "
                         f"{exc})") from None
    return primary, ";".join(causes)


def _or_nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def row_of(result: AnalysisResult, truth: tuple[str, str] = ("", "")) -> FleetRow:
    """The fleet row of one analysis."""
    m, v, job = result.metrics, result.verdict, result.job
    s = m.slowdown
    shares = tuple((k, (x - 1.0) / (s - 1.0) if s > 1.0 else math.nan)
                   for k, x in m.s_optype.items())
    fb = (v.signals.get("fb_signal") or {}).get("correlation")
    workers = job.dp_size * job.pp_size
    actual = m.actual
    return FleetRow(
        status=STATUS_ANALYSED, dp=job.dp_size, pp=job.pp_size, tp=job.tp_size,
        vpp=job.vpp_size, workers=workers, steps=result.counts.steps, ops=result.counts.ops,
        slowdown=s, waste=m.waste, discrepancy=m.discrepancy, trustworthy=result.trustworthy,
        verdict=v.cause.value, verdict_workers=" ".join(w.key for w in v.workers),
        confidence=float(v.confidence), m_w=_or_nan(m.m_w.rem), m_s=_or_nan(m.m_s.rem),
        fb_correlation=math.nan if fb is None else float(fb),
        ideal_step_s=float(m.ideal.mean()), actual_step_s=float(actual.mean()),
        gpu_hours=workers * job.tp_size * float(actual.sum()) / 3600.0,
        op_share=shares, step_slowdown=tuple(float(x) for x in m.step_slowdown),
        truth_primary=truth[0], truth_causes=truth[1])


def analyse_job(trace: str | None, meta: str, truth: str | None, exact_sw: bool) -> FleetRow:
    """Analyse one job (the Dask task): a failed row for a user error, else its figures."""
    try:
        if trace is None:
            raise InputError(f"{Path(meta).parent}: no trace.parquet or trace.jsonl beside "
                             f"{Path(meta).name}")
        t = _truth(truth)
        result = analyze_files(trace, meta, exact_workers=exact_sw)
        return row_of(result, t)
    except InputError as exc:
        return FleetRow(status=STATUS_FAILED, reason=" ".join(str(exc).split()))
