"""Evaluation on record streams through the watcher, with leave-one-family-out tuning.

Each labelled stream (:mod:`stragglers.evaluation.jobcorpus`, or a real labelled log) is fed,
record by record, to a :class:`~stragglers.detect.watch.Watcher` whose per-rank detector is
``make_detector(method, **params)``.  The job iteration of the record whose processing raised
an event is the event's *declared* iteration.

Scoring (per series)
--------------------
* *Alerts* are the watcher events ``onset``, ``flapping`` and ``change`` with ``level_s >
  previous_s`` (a change to a slower level).  ``drift`` events are counted apart (they are
  informational, never an alert).
* An alert *matches* a labelled event ``e`` when its ``job_iteration`` (the estimated first
  iteration of the slow regime; the declared iteration when the watcher could not place it)
  lies in ``[e.start_iter - tol, e.end_iter)``, ``tol = max(5, 2 x stride)``, and, for an event
  with ``ranks``, its rank is one of them.  An alert that matches no event and lies in no
  ``minor`` event (same rule) is *spurious*.
* A series is correct when every non-minor event is matched and no alert is spurious; a
  negative series (no non-minor event) is a false positive when any alert is spurious.
  ``accuracy`` = correct / series, ``fpr`` = false positives / negatives, ``fnr`` = positives
  with an event missed / positives.
* Delay of a found event = the smallest declared iteration of its matching alerts minus
  ``start_iter``, floored at 0, in iterations.
* An event that ends before the series' last iteration is *recoverable*; it is *recovered*
  when a ``recovery`` event of a matching rank has ``job_iteration`` in ``[end_iter - tol,
  next event's start - tol)``.
* Cost: ``time.process_time`` around the feed of a whole series (watcher and detector) over
  its records, in microseconds per record.

Leave-one-family-out (:func:`lofo_choices`)
--------------------------------------------
Every named setting of a grid (keyword arguments of ``make_detector``) is evaluated on every
series.  For each family ``F`` the setting that maximises accuracy on all *other* families
(ties: lower FPR, then lower mean delay, then grid order) is chosen, and ``F`` is reported
under it: ``F``'s own scores never choose its setting.  The setting that the same rule picks
on all synthetic families is the one applied to the real labelled families (``real-more``:
``../shared/real/iter-more``; ``real``: ``../shared/real/megatron-iter`` with the labelled
episodes of :data:`~stragglers.evaluation.realdata.REAL_EPISODES`), which are never tuned on.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from stragglers.detect.events import LevelEvent, WatchEvent
from stragglers.detect.watch import Watcher
from stragglers.errors import InputError
from stragglers.evaluation.bocd import make_detector
from stragglers.evaluation.detect_eval import Rates
from stragglers.evaluation.jobcorpus import (
    EVENT_LOSS,
    FAMILIES,
    HELD_OUT,
    JobEvent,
    JobSeries,
    scenario_counts,
)
from stragglers.limits import check_limit
from stragglers.logs.megatron import Gap, read_iteration_json, series_items
from stragglers.logs.records import IterationRecord, RecordError, read_records

__all__ = [
    "BASELINES",
    "FALLBACK_GRID",
    "ROBUST_GRID",
    "Alert",
    "JobOutcome",
    "JobScores",
    "RealStream",
    "Run",
    "WatchResult",
    "choose_setting",
    "default_grid",
    "evaluate_jobs",
    "evaluate_streams",
    "format_lofo",
    "format_plain",
    "format_real",
    "lofo_choices",
    "load_real_megatron",
    "load_real_more",
    "score_alerts",
    "summarize_jobs",
    "watch_stream",
]

Grid = tuple[tuple[str, dict[str, object]], ...]

#: The baselines reported beside the tuned method, at their defaults.
BASELINES: tuple[str, ...] = ("bocd_verify", "falcon", "bocd", "sliding_window")
LABEL = {"robust": "robust", "bocd_verify": "BOCD+V+rules", "falcon": "BOCD+V",
         "bocd": "BOCD", "sliding_window": "SlideWindow"}
#: Named settings of the default detector (``robust``) searched leave-one-family-out: each
#: of its main parameters one step either side of its default (docs/detection.md).
ROBUST_GRID: Grid = (
    ("default", {}),
    ("stall6", {"stall_iters": 6}),
    ("stall12", {"stall_iters": 12}),
    ("confidence2", {"confidence": 2.0}),
    ("confidence3", {"confidence": 3.0}),
    ("chance1e-5", {"spike_run_chance": 1e-5}),
    ("ramp30", {"ramp_iters": 30}),
    ("ramp120", {"ramp_iters": 120}),
    ("rise50", {"rise_iters": 50}),
    ("rise200", {"rise_iters": 200}),
)
#: The grid tuned when ``--method sliding_window`` comes first.
FALLBACK_GRID: Grid = (
    ("w10-t10", {"window": 10, "threshold": 0.10}),
    ("w10-t15", {"window": 10, "threshold": 0.15}),
    ("w20-t10", {"window": 20, "threshold": 0.10}),
    ("w20-t15", {"window": 20, "threshold": 0.15}),
)
ALERT_KINDS = frozenset({"onset", "flapping"})
MIN_TOL = 5  # iterations of tolerance before an event's start (at least 2 x stride)
SPURIOUS_SHOWN = 20  # spurious alert iterations kept per series


def default_grid() -> tuple[str, Grid]:
    """The tuned method and its grid: the default detector with :data:`ROBUST_GRID`."""
    return "robust", ROBUST_GRID


# -- streams ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RealStream:
    """A real labelled log as watcher items (records and Megatron gaps) in input order."""

    name: str
    family: str
    items: tuple[IterationRecord | Gap, ...] = field(repr=False)
    events: tuple[JobEvent, ...]
    stride: int
    scenario: str = "real"
    seed: int = -1

    @property
    def positive(self) -> bool:
        return any(e.kind != "minor" for e in self.events)

    def records(self) -> Iterator[IterationRecord | Gap]:
        return iter(self.items)


Stream = JobSeries | RealStream


@dataclass(frozen=True)
class Alert:
    """An alerting (or recovery) watcher event: its kind, rank, estimated start, the job
    iteration of the record whose processing raised it, and its note (the view that
    declared it: empty for the main view)."""

    kind: str
    rank: int | None
    job_iteration: int
    declared: int
    note: str = ""


@dataclass(frozen=True)
class WatchResult:
    """What the watcher said on one stream."""

    alerts: tuple[Alert, ...]
    recoveries: tuple[Alert, ...]
    drifts: int
    points: int
    cpu_s: float
    last_iter: int


@dataclass(frozen=True)
class Run:
    """One evaluated configuration: a label, the method and its keyword arguments."""

    label: str
    method: str
    params: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class JobOutcome:
    """Score of one run on one stream."""

    name: str
    family: str
    scenario: str
    seed: int
    run: str
    positive: bool
    events: int
    detected: int
    big_events: int  # events with loss >= EVENT_LOSS
    big_detected: int
    spurious: int
    spurious_iters: tuple[int, ...]
    correct: bool
    delays: tuple[int, ...]
    recoverable: int
    recovered: int
    drifts: int
    points: int
    cpu_s: float


@dataclass(frozen=True)
class JobScores(Rates):
    """Aggregate of outcomes on the job corpus (rates are fractions)."""

    events: int
    detected: int
    big_events: int
    big_detected: int
    spurious: int
    recovered: int
    recoverable: int
    drifts: int
    us_per_point: float


def _alert_of(ev: WatchEvent, declared: int) -> Alert | None:
    if not isinstance(ev, LevelEvent):
        return None
    kind = ev.kind
    if kind == "change":
        lv, prev = ev.level_s, ev.previous_s
        if not (lv is not None and prev is not None and lv > prev):
            return None
    elif kind not in ALERT_KINDS and kind != "recovery":
        return None
    ji = ev.job_iteration
    return Alert(kind=kind, rank=ev.rank, job_iteration=ji if ji is not None else declared,
                 declared=declared, note=ev.note)


def watch_stream(stream: Stream, method: str, params: Mapping[str, object] | None = None,
                 warmup_iters: int | None = None) -> WatchResult:
    """Feed ``stream`` record by record to a watcher running ``method`` (``params``)."""
    kw = dict(params or {})
    watcher = Watcher(detector_factory=lambda: make_detector(method, **kw),
                      warmup_iters=warmup_iters)
    items: list[IterationRecord | Gap] = list(stream.records())
    alerts: list[Alert] = []
    recoveries: list[Alert] = []
    drifts = 0
    last = 0
    process = watcher.process_items
    t0 = time.process_time()
    for pos, item in enumerate(items, start=1):
        events = process(((pos, item),))
        declared = item.iter if isinstance(item, IterationRecord) else item.last_step
        if declared > last:
            last = declared
        for ev in events:
            if ev.event == "drift":
                drifts += 1
                continue
            a = _alert_of(ev, declared)
            if a is None:
                continue
            (recoveries if a.kind == "recovery" else alerts).append(a)
    for ev in watcher.finish():
        if ev.event == "drift":
            drifts += 1
        elif (a := _alert_of(ev, last)) is not None:
            (recoveries if a.kind == "recovery" else alerts).append(a)
    cpu = time.process_time() - t0
    return WatchResult(alerts=tuple(alerts), recoveries=tuple(recoveries), drifts=drifts,
                       points=len(items), cpu_s=cpu, last_iter=last)


# -- scoring ------------------------------------------------------------------------------------
def tolerance(stride: int) -> int:
    """Iterations an alert may lie before an event's start: ``max(5, 2 x stride)``."""
    return max(MIN_TOL, 2 * int(stride))


def _inside(a: Alert, e: JobEvent, tol: int) -> bool:
    if e.ranks and a.rank not in e.ranks:
        return False
    return e.start_iter - tol <= a.job_iteration < e.end_iter


@dataclass(frozen=True)
class _Score:
    events: int
    detected: int
    big_events: int
    big_detected: int
    spurious_iters: tuple[int, ...]
    spurious: int
    delays: tuple[int, ...]
    recoverable: int
    recovered: int
    correct: bool


def score_alerts(events: Sequence[JobEvent], alerts: Sequence[Alert],
                 recoveries: Sequence[Alert] = (), *, stride: int = 1,
                 last_iter: int | None = None) -> _Score:
    """Score the alerts of one series against its labelled events (module docstring)."""
    tol = tolerance(stride)
    major = sorted((e for e in events if e.kind != "minor"), key=lambda e: e.start_iter)
    minor = [e for e in events if e.kind == "minor"]
    matched = [False] * len(alerts)
    delays: list[int] = []
    detected = big = big_found = 0
    recoverable = recovered = 0
    for k, e in enumerate(major):
        hits = [i for i, a in enumerate(alerts) if _inside(a, e, tol)]
        for i in hits:
            matched[i] = True
        if e.loss >= EVENT_LOSS:
            big += 1
        if hits:
            detected += 1
            big_found += e.loss >= EVENT_LOSS
            delays.append(max(0, min(alerts[i].declared for i in hits) - e.start_iter))
        if last_iter is not None and e.end_iter <= last_iter:
            recoverable += 1
            stop = major[k + 1].start_iter - tol if k + 1 < len(major) else math.inf
            if any(e.end_iter - tol <= r.job_iteration < stop
                   and (not e.ranks or r.rank in e.ranks) for r in recoveries):
                recovered += 1
    for i, a in enumerate(alerts):
        if not matched[i] and any(_inside(a, e, tol) for e in minor):
            matched[i] = True
    spurious = [a.job_iteration for a, m in zip(alerts, matched, strict=True) if not m]
    correct = detected == len(major) and not spurious
    return _Score(events=len(major), detected=detected, big_events=big, big_detected=big_found,
                  spurious_iters=tuple(spurious[:SPURIOUS_SHOWN]), spurious=len(spurious),
                  delays=tuple(delays), recoverable=recoverable, recovered=recovered,
                  correct=correct)


def _outcome(stream: Stream, run: Run, res: WatchResult) -> JobOutcome:
    sc = score_alerts(stream.events, res.alerts, res.recoveries, stride=stream.stride,
                      last_iter=res.last_iter)
    return JobOutcome(
        name=stream.name, family=stream.family, scenario=stream.scenario, seed=stream.seed,
        run=run.label, positive=sc.events > 0, events=sc.events, detected=sc.detected,
        big_events=sc.big_events, big_detected=sc.big_detected, spurious=sc.spurious,
        spurious_iters=sc.spurious_iters, correct=sc.correct, delays=sc.delays,
        recoverable=sc.recoverable, recovered=sc.recovered, drifts=res.drifts,
        points=res.points, cpu_s=res.cpu_s)


def summarize_jobs(outcomes: Iterable[JobOutcome]) -> JobScores:
    """Aggregate outcomes into accuracy / FPR / FNR / delay / events found / cost."""
    out = list(outcomes)
    pos = [o for o in out if o.positive]
    neg = [o for o in out if not o.positive]
    delays = [d for o in out for d in o.delays]
    points = sum(o.points for o in out)

    def ratio(a: int, b: int) -> float:
        return a / b if b else 0.0

    correct = sum(o.correct for o in out)
    fp = sum(not o.correct for o in neg)
    fn = sum(o.detected < o.events for o in pos)
    return JobScores(
        accuracy=ratio(correct, len(out)), fpr=ratio(fp, len(neg)), fnr=ratio(fn, len(pos)),
        mean_delay_iters=sum(delays) / len(delays) if delays else math.nan,
        correct=correct, total=len(out), false_positives=fp, negatives=len(neg),
        false_negatives=fn, positives=len(pos), events=sum(o.events for o in out),
        detected=sum(o.detected for o in out), big_events=sum(o.big_events for o in out),
        big_detected=sum(o.big_detected for o in out), spurious=sum(o.spurious for o in out),
        recovered=sum(o.recovered for o in out), recoverable=sum(o.recoverable for o in out),
        drifts=sum(o.drifts for o in out),
        us_per_point=1e6 * sum(o.cpu_s for o in out) / points if points else math.nan)


# -- running ------------------------------------------------------------------------------------
def _run_stream(task: tuple[Stream, tuple[Run, ...], int | None]) -> list[JobOutcome]:
    stream, runs, warmup = task
    return [_outcome(stream, r, watch_stream(stream, r.method, r.params, warmup))
            for r in runs]


def evaluate_streams(streams: Sequence[Stream], runs: Sequence[Run], *,
                     jobs: int | None = None, warmup_iters: int | None = None
                     ) -> dict[str, list[JobOutcome]]:
    """Every run on every stream; ``{run label: outcomes in stream order}``.  ``jobs`` worker
    processes (default: up to 4; 1: in this process)."""
    for r in runs:
        make_detector(r.method, **dict(r.params))  # a bad method or setting fails here, once
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"run labels must be unique, got {labels}")
    tasks = [(s, tuple(runs), warmup_iters) for s in streams]
    # long streams first, so that the workers finish together
    order = sorted(range(len(tasks)), key=lambda i: -_length(streams[i]))
    jobs = jobs if jobs is not None else min(4, os.cpu_count() or 1)
    results: list[list[JobOutcome]] = [[] for _ in tasks]
    if jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for i, res in zip(order, pool.map(_run_stream, [tasks[i] for i in order],
                                              chunksize=1), strict=True):
                results[i] = res
    else:
        for i in order:
            results[i] = _run_stream(tasks[i])
    out: dict[str, list[JobOutcome]] = {r.label: [] for r in runs}
    for res in results:
        for o in res:
            out[o.run].append(o)
    return out


def _length(s: Stream) -> int:
    return s.iter.size if isinstance(s, JobSeries) else len(s.items)


# -- leave-one-family-out -----------------------------------------------------------------------
def _key(x: JobScores, index: int) -> tuple[float, float, float, int]:
    delay = x.mean_delay_iters if x.mean_delay_iters == x.mean_delay_iters else math.inf
    return (-x.accuracy, x.fpr, delay, index)


def choose_setting(table: Mapping[str, Sequence[JobOutcome]], order: Sequence[str],
                   families: Iterable[str]) -> str:
    """The setting of ``order`` with the highest accuracy on ``families`` (ties: lower FPR,
    lower mean delay, grid order); ``table`` maps each setting to its outcomes."""
    fams = set(families)
    best = min(range(len(order)), key=lambda i: _key(
        summarize_jobs(o for o in table[order[i]] if o.family in fams), i))
    return order[best]


def lofo_choices(table: Mapping[str, Sequence[JobOutcome]], order: Sequence[str]
                 ) -> dict[str, str]:
    """``{family: the setting chosen on all the other families}``; the families of
    :data:`~stragglers.evaluation.jobcorpus.HELD_OUT` never take part in a choice (a
    held-out family is scored under the setting chosen on all the tuned ones)."""
    fams = sorted({o.family for v in table.values() for o in v})
    tuned = [f for f in fams if f not in HELD_OUT]
    return {f: choose_setting(table, order, [g for g in tuned if g != f]) for f in fams}


# -- real labelled logs -------------------------------------------------------------------------
def _stride(iters: Sequence[int]) -> int:
    d = np.diff(np.asarray(iters, dtype=np.int64))
    d = d[d > 0]
    return int(np.median(d)) if d.size else 1


def _real_event(first: int, last: int, iters: np.ndarray, vals: np.ndarray) -> JobEvent:
    inside = (iters >= first) & (iters <= last)
    base = float(np.median(vals[~inside])) if (~inside).any() else math.nan
    lvl = float(np.median(vals[inside])) if inside.any() else math.nan
    peak = float(vals[inside].max()) if inside.any() else math.nan
    return JobEvent(start_iter=first, end_iter=last + 1, loss=1.0 - base / lvl,
                    peak_loss=1.0 - base / peak, kind="real", ranks=(0,))


def load_real_more(folder: str | Path) -> list[RealStream]:
    """The ``real-more`` family: every ``NAME.jsonl`` of ``folder`` with the slow periods of
    ``labels.json`` (``{NAME: {"slow_periods": [[first, last], ...]}}``, iterations
    inclusive)."""
    d = Path(folder)
    if not d.is_dir():
        raise InputError(f"{d}: folder of labelled real series not found")
    lab_path = d / "labels.json"
    try:
        labels = orjson.loads(lab_path.read_bytes())
    except OSError as exc:
        raise InputError(f"{lab_path}: cannot read the labels ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise InputError(f"{lab_path}:{exc.lineno}: not valid JSON") from None
    if type(labels) is not dict:
        raise InputError(f"{lab_path}: expected a JSON object {{series: {{slow_periods}}}}")
    files = sorted(p.stem for p in d.glob("*.jsonl"))
    for name in files:
        if name not in labels:
            raise InputError(f"{lab_path}: no labels for {name}.jsonl")
    out = []
    for name in sorted(labels):
        path = d / f"{name}.jsonl"
        if not path.exists():
            raise InputError(f"{lab_path}: field '{name}': its series {path} not found")
        periods = labels[name].get("slow_periods") if type(labels[name]) is dict else None
        if type(periods) is not list:
            raise InputError(f"{lab_path}: field '{name}.slow_periods': expected a list of "
                             "[first, last] iterations")
        try:
            recs = [r for r in read_records(path) if isinstance(r, IterationRecord)]
        except RecordError as exc:
            raise InputError(str(exc)) from None
        if not recs:
            raise InputError(f"{path}: no iteration records")
        iters = np.asarray([r.iter for r in recs], dtype=np.int64)
        vals = np.asarray([r.duration if r.duration is not None else math.nan for r in recs])
        events = []
        for k, p in enumerate(periods):
            if not (type(p) is list and len(p) == 2 and all(type(v) is int for v in p)
                    and 0 <= p[0] <= p[1]):
                raise InputError(f"{lab_path}: field '{name}.slow_periods[{k}]': expected "
                                 f"[first, last] iterations, got {orjson.dumps(p).decode()}")
            events.append(_real_event(p[0], p[1], iters, vals))
        out.append(RealStream(name=f"real-more/{name}", family="real-more", items=tuple(recs),
                              events=tuple(events), stride=_stride(iters.tolist())))
    return out


def load_real_megatron(folder: str | Path) -> list[RealStream]:
    """The ``real`` family: the six Megatron runs of ``folder`` as ``watch --format
    megatron-json`` reads them (gaps included), their labelled episodes as events."""
    from stragglers.evaluation.realdata import REAL_EPISODES, run_files

    out = []
    for name, path in run_files(folder):
        ser = read_iteration_json(path)
        if ser.errors:
            raise InputError(str(ser.errors[0][1]))
        items = [it for _, it in series_items(ser) if not isinstance(it, RecordError)]
        steps = np.asarray(ser.steps, dtype=np.int64)
        vals = np.asarray(ser.values)
        ok = ~np.isnan(vals)
        events = tuple(_real_event(a, b, steps[ok], vals[ok])
                       for a, b in REAL_EPISODES.get(name, ()))
        out.append(RealStream(name=f"real/{name}", family="real", items=tuple(items),
                              events=events, stride=ser.step_interval or _stride(ser.steps)))
    return out


# -- reports ------------------------------------------------------------------------------------
def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}" if b else "-"


def _delay(x: JobScores) -> str:
    return "-" if math.isnan(x.mean_delay_iters) else f"{x.mean_delay_iters:.1f}"


def _delays(outcomes: Sequence[JobOutcome]) -> str:
    """Mean and median delay of the events found (iterations)."""
    d = sorted(v for o in outcomes for v in o.delays)
    if not d:
        return "-"
    mid = d[len(d) // 2] if len(d) % 2 else 0.5 * (d[len(d) // 2 - 1] + d[len(d) // 2])
    return f"{sum(d) / len(d):.1f} / {mid:g}"


def _cell(x: JobScores) -> str:
    """``accuracy / FPR / found / delay`` of one group."""
    return (f"{_pct(x.correct, x.total)} / {_pct(x.false_positives, x.negatives)} / "
            f"{x.detected}/{x.events} / {_delay(x)}")


def _label(run: str) -> str:
    return LABEL.get(run, run)


def _groups(outcomes: Sequence[JobOutcome]) -> list[tuple[str, int]]:
    return sorted({(o.family, o.seed) for o in outcomes},
                  key=lambda g: (FAMILIES.index(g[0]) if g[0] in FAMILIES else 99, g))


def format_lofo(table: Mapping[str, Sequence[JobOutcome]], order: Sequence[str],
                baselines: Mapping[str, Sequence[JobOutcome]], method: str) -> str:
    """The leave-one-family-out table (markdown): per family and seed, whether the family
    was tuned on or held out (:data:`~stragglers.evaluation.jobcorpus.HELD_OUT`), the
    setting chosen on the other tuned families, the family's scores under it, the baselines
    beside it; then the tuned families (each left out), the held-out ones and all."""
    choice = lofo_choices(table, order)
    plain = choose_setting(table, order, [f for f in choice if f not in HELD_OUT])
    head = (f"| family | role | seed | chosen on the other tuned families | its acc % on them | "
            f"{method} acc % | FPR % | "
            "FNR % | events >= 10 % found | delay mean / median (it) | recovered | "
            "drift events | "
            + " | ".join(f"{_label(b)} acc / FPR / found / delay" for b in baselines) + " |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    scored: list[JobOutcome] = []
    for fam, seed in _groups([o for v in table.values() for o in v]):
        got = [o for o in table[choice[fam]] if o.family == fam and o.seed == seed]
        scored += got
        x = summarize_jobs(got)
        fit = summarize_jobs(o for o in table[choice[fam]]
                             if o.family != fam and o.family not in HELD_OUT)
        base = [summarize_jobs(o for o in v if o.family == fam and o.seed == seed)
                for v in baselines.values()]
        role = "held out" if fam in HELD_OUT else "tuned"
        lines.append(
            f"| {fam} | {role} | {seed} | {choice[fam]} | {_pct(fit.correct, fit.total)} | "
            f"{_pct(x.correct, x.total)} | "
            f"{_pct(x.false_positives, x.negatives)} | {_pct(x.false_negatives, x.positives)} | "
            f"{x.big_detected}/{x.big_events} | {_delays(got)} | "
            f"{x.recovered}/{x.recoverable} | {x.drifts} | "
            + " | ".join(_cell(b) for b in base) + " |")
    fams = set(choice)
    for label, keep in (("tuned families, each left out", lambda f: f not in HELD_OUT),
                        ("held-out families (never tuned on)", lambda f: f in HELD_OUT),
                        ("all", lambda f: True)):
        got = [o for o in scored if keep(o.family)]
        if not got:
            continue
        x = summarize_jobs(got)
        base = [summarize_jobs(o for o in v if o.family in fams and keep(o.family))
                for v in baselines.values()]
        lines.append(
            f"| **{label}** | | all | (per family) | | {_pct(x.correct, x.total)} | "
            f"{_pct(x.false_positives, x.negatives)} | "
            f"{_pct(x.false_negatives, x.positives)} | {x.big_detected}/{x.big_events} | "
            f"{_delays(got)} | {x.recovered}/{x.recoverable} | {x.drifts} | "
            + " | ".join(_cell(b) for b in base) + " |")
    tuned = summarize_jobs(o for o in table[plain] if o.family not in HELD_OUT)
    x = summarize_jobs(o for o in scored if o.family not in HELD_OUT)
    lines.append("")
    lines.append(f"Plain tuning on all tuned families picks {plain!r}: accuracy "
                 f"{_pct(tuned.correct, tuned.total)} % on the families it was tuned on "
                 f"(vs {_pct(x.correct, x.total)} % each left out).  Settings: "
                 + ", ".join(order) + ".")
    lines.append(f"CPU per record (watcher + detector): {method} {tuned.us_per_point:.1f} us; "
                 + ", ".join(f"{_label(b)} {summarize_jobs(v).us_per_point:.1f} us"
                             for b, v in baselines.items()) + ".")
    return "\n".join(lines)


def format_plain(results: Mapping[str, Sequence[JobOutcome]]) -> str:
    """Per family and seed, every run at its defaults (markdown)."""
    runs = list(results)
    head = ("| family | seed | " + " | ".join(f"{_label(r)} acc / FPR / found / delay"
                                               for r in runs) + " |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for fam, seed in _groups([o for v in results.values() for o in v]):
        lines.append(f"| {fam} | {seed} | " + " | ".join(
            _cell(summarize_jobs(o for o in results[r] if o.family == fam and o.seed == seed))
            for r in runs) + " |")
    lines.append("| **all** | all | " + " | ".join(_cell(summarize_jobs(results[r]))
                                                    for r in runs) + " |")
    lines.append("CPU per record: " + ", ".join(
        f"{_label(r)} {summarize_jobs(results[r]).us_per_point:.1f} us" for r in runs) + ".")
    return "\n".join(lines)


def format_real(results: Mapping[str, Sequence[JobOutcome]], streams: Sequence[Stream]) -> str:
    """Per real series: events found, spurious alerts (their iterations) and delays."""
    runs = list(results)
    events = {s.name: len([e for e in s.events if e.kind != "minor"]) for s in streams}
    head = ("| series | events | " + " | ".join(
        f"{_label(r)} found / spurious (iterations) / delay" for r in runs) + " |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in streams:
        cells = []
        for r in runs:
            o = next(o for o in results[r] if o.name == s.name)
            it = ", ".join(str(i) for i in o.spurious_iters)
            more = ", ..." if o.spurious > len(o.spurious_iters) else ""
            cells.append(f"{o.detected}/{o.events} / {o.spurious}"
                         + (f" ({it}{more})" if o.spurious else "")
                         + " / " + (",".join(str(d) for d in o.delays) or "-"))
        lines.append(f"| {s.name} | {events[s.name]} | " + " | ".join(cells) + " |")
    for fam in sorted({s.family for s in streams}):
        cells = []
        for r in runs:
            x = summarize_jobs(o for o in results[r] if o.family == fam)
            neg_fp = sum(o.spurious > 0 for o in results[r] if o.family == fam and not o.positive)
            cells.append(f"{x.detected}/{x.events} / {x.spurious} / {_delay(x)} "
                         f"(false onsets in negatives: {neg_fp} series)")
        lines.append(f"| **{fam}** | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def scores_dict(x: JobScores) -> dict[str, float | int | None]:
    """A :class:`JobScores` as JSON-ready values (NaN -> None)."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(x).items()}


# -- the whole evaluation (detect-eval --corpus jobs, bench_detect_jobs) ------------------------
@dataclass(frozen=True)
class JobEvaluation:
    """Outcomes of one evaluation: the tuned method's grid (``table``: setting -> outcomes on
    the synthetic families; empty without LOFO), the other runs at their defaults (``others``),
    the LOFO and plain choices, and the real families."""

    method: str
    order: tuple[str, ...]
    table: dict[str, list[JobOutcome]]
    others: dict[str, list[JobOutcome]]
    choices: dict[str, str]
    plain: str | None
    real_streams: tuple[RealStream, ...]
    real: dict[str, list[JobOutcome]]
    seeds: tuple[int, ...]
    scale: float
    seconds: float


def _grid_label(method: str, name: str) -> str:
    return f"{method}[{name}]"


def run_evaluation(seeds: Sequence[int], scale: float, methods: Sequence[str], *,
                   grid: Grid | None = None, real: Sequence[RealStream] = (),
                   jobs: int | None = None, warmup_iters: int | None = None,
                   families: tuple[str, ...] | None = None) -> JobEvaluation:
    """Generate the job corpus for ``seeds`` at ``scale`` and evaluate.  With ``grid``,
    ``methods[0]`` is tuned leave-one-family-out over it and the others are baselines at
    their defaults; without, every method runs at its defaults.  The real families run with
    the setting chosen on all synthetic families (and the baselines).  ``families``: only
    these synthetic families."""
    from stragglers.evaluation.jobcorpus import generate_job_corpus

    t0 = time.perf_counter()
    corpus = [s for seed in seeds for s in generate_job_corpus(seed, scale, families)]
    method = methods[0]
    others = [Run(m, m) for m in (methods[1:] if grid is not None else methods)]
    tuned = [Run(_grid_label(method, n), method, p) for n, p in (grid or ())]
    res = evaluate_streams(corpus, [*tuned, *others], jobs=jobs, warmup_iters=warmup_iters)
    order = tuple(n for n, _ in (grid or ()))
    table = {n: res[_grid_label(method, n)] for n in order}
    choices = lofo_choices(table, order) if grid is not None else {}
    plain = (choose_setting(table, order, [f for f in choices if f not in HELD_OUT])
             if grid is not None else None)
    real_res: dict[str, list[JobOutcome]] = {}
    if real:
        real_runs = list(others)
        if grid is not None and plain is not None:
            real_runs.insert(0, Run(_grid_label(method, plain), method, dict(grid)[plain]))
        real_res = evaluate_streams(real, real_runs, jobs=jobs, warmup_iters=warmup_iters)
    return JobEvaluation(
        method=method, order=order, table=table, others={r.label: res[r.label] for r in others},
        choices=choices, plain=plain, real_streams=tuple(real), real=real_res,
        seeds=tuple(seeds), scale=scale, seconds=time.perf_counter() - t0)


def evaluation_text(ev: JobEvaluation) -> str:
    """The markdown report of :func:`run_evaluation`."""
    n = len(next(iter((ev.table or ev.others).values()), []))
    parts = [f"Job-record corpus: seeds {', '.join(map(str, ev.seeds))}, scale {ev.scale:g}, "
             f"{n} series; alerts are onset, flapping and change to a slower level; "
             "cells: accuracy % / FPR % / events found / mean delay (iterations)", ""]
    if ev.table:
        parts += [f"Leave-one-family-out: {ev.method} tuned on the other families, scored on "
                  "the held-out one", "", format_lofo(ev.table, ev.order, ev.others, ev.method)]
    else:
        parts += ["Every method at its defaults", "", format_plain(ev.others)]
    if ev.real_streams:
        which = (f"{ev.method} with {ev.plain!r} (chosen on all synthetic families; never "
                 "tuned on these)" if ev.plain is not None else "every method at its defaults")
        parts += ["", f"Real labelled series: {which}", "", format_real(ev.real, ev.real_streams)]
    parts += ["", f"Evaluation time: {ev.seconds:.1f} s"]
    return "\n".join(parts) + "\n"


def _per_group(outcomes: Sequence[JobOutcome]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for fam, seed in _groups(outcomes):
        out.setdefault(fam, {})[str(seed)] = scores_dict(summarize_jobs(
            o for o in outcomes if o.family == fam and o.seed == seed))
    return out


def evaluation_json(ev: JobEvaluation) -> dict[str, Any]:
    """The report of :func:`run_evaluation` as JSON-ready values."""
    doc: dict[str, Any] = {"seeds": list(ev.seeds), "scale": ev.scale, "method": ev.method,
                           "seconds": round(ev.seconds, 3)}
    if ev.table:
        held = [o for f, s in ev.choices.items() for o in ev.table[s] if o.family == f]
        doc["grid"] = list(ev.order)
        doc["lofo"] = {f: {"setting": s, "role": "held out" if f in HELD_OUT else "tuned",
                           "held_out": _per_group(
            [o for o in ev.table[s] if o.family == f]).get(f, {})}
            for f, s in ev.choices.items()}
        doc["all_held_out"] = scores_dict(summarize_jobs(held))
        doc["held_out_families"] = scores_dict(summarize_jobs(
            o for o in held if o.family in HELD_OUT))
        doc["plain_choice"] = ev.plain
        doc["settings"] = {n: scores_dict(summarize_jobs(v)) for n, v in ev.table.items()}
    doc["methods"] = {m: {"all": scores_dict(summarize_jobs(v)), "families": _per_group(v)}
                      for m, v in ev.others.items()}
    if ev.real:
        doc["real"] = {r: [{"name": o.name, "family": o.family, "events": o.events,
                            "detected": o.detected, "spurious": o.spurious,
                            "spurious_iterations": list(o.spurious_iters),
                            "delays": list(o.delays), "correct": o.correct} for o in v]
                       for r, v in ev.real.items()}
    return doc


def _methods(items: Sequence[str]) -> list[str]:
    """``--method`` given as repeated names or comma lists: each known, none twice."""
    methods: list[str] = []
    for item in items:
        for m in item.split(","):
            m = m.strip()
            try:
                make_detector(m)
            except ValueError as exc:
                raise InputError(f"--method: {exc}") from None
            if m in methods:
                raise InputError(f"--method: {m} given twice")
            methods.append(m)
    return methods


def evaluate_jobs(seeds: Sequence[int], *, scale: float = 1.0, methods: Sequence[str] = (),
                  lofo: bool = False, real_more: str | None = None, real_dir: str | None = None,
                  jobs: int | None = None, warmup: int | None = None) -> JobEvaluation:
    """``stragglers detect-eval --corpus jobs``: the seeds distinct, the corpus size within its
    limit, ``methods`` as ``--method`` gives them (names or comma lists; default: the tuned
    method and :data:`BASELINES`), the first one tuned leave-one-family-out with ``lofo``, and
    the labelled real series of ``real_more`` and ``real_dir`` scored beside."""
    if len(set(seeds)) != len(seeds):
        raise InputError(f"--seed: seed {next(s for s in seeds if seeds.count(s) > 1)} "
                         "given twice")
    check_limit("eval_series", len(seeds) * sum(c for _, _, c in scenario_counts(scale)),
                f"--scale {scale:g}")
    tuned, grid = default_grid()
    chosen = _methods(methods) or [tuned, *BASELINES]
    if lofo and chosen[0] != tuned:
        grid = FALLBACK_GRID if chosen[0] == "sliding_window" else (("default", {}),)
    real: list[RealStream] = []
    if real_more is not None:
        real += load_real_more(real_more)
    if real_dir is not None:
        real += load_real_megatron(real_dir)
    return run_evaluation(seeds, scale, chosen, grid=grid if lofo else None, real=real,
                          jobs=jobs, warmup_iters=warmup)
