"""Evaluation of the verdict on the documented user recipes (issue 28, item 4).

The three recipes of ``docs/integrations.md`` — a plain DDP loop recorded by ``attach()``
(``docs/snippets/ddp_loop.py`` under ``torchrun``), PyTorch Lightning
(``docs/snippets/lightning_ddp.py``, Lightning starts its 2 processes) and the Hugging Face
``Trainer`` (``docs/snippets/hf_trainer.py`` under ``torchrun``) — are run as a user runs them,
2 ranks over gloo on CPU, under three conditions:

* ``healthy``: nothing injected;
* ``slow-forward``: rank 1's forward takes 3× its own time (``SLOW_RANK=1 SLOW_FACTOR=3``);
* ``slow-loader``: rank 1's data loader sleeps 130 ms per batch (``SLOW_LOADER_RANK=1
  SLOW_LOADER_MS=130``), outside the recorded spans.

Each run is analysed as ``stragglers analyze`` does (exact S_w) and scored against the issue's
targets: in a slowed run the late rank's worker (``1,0``) is the first the verdict names, with
confidence ≥ 0.8, and the rank that only waits (``0,0``) is never among the verdict's workers;
a healthy run names no worker with confidence ≥ 0.5.

The snippets are read from ``docs/snippets/`` of the current folder: run it from the
repository root. Runs kept with ``keep`` can be re-scored later (:func:`reanalyse`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stragglers.analysis.verdict import Cause, VerdictConfig
from stragglers.atomic import check_out_dir, write_text
from stragglers.errors import InputError
from stragglers.evaluation.kept import run_figures
from stragglers.evaluation.verdict_eval import CpuHog
from stragglers.limits import check_limit
from stragglers.probe.outdir import OUT_MARKER, claim_out_dir

if TYPE_CHECKING:
    from stragglers.analysis.result import AnalysisResult

#: The record each kept run folder holds (its case, the command, the hog, wall time, load).
CASE_FILE = "recipe-eval-case.json"
#: The rows of the last run, in a kept folder.
ROWS_FILE = "recipe-eval.json"
#: The output of a run's processes, in its folder.
LOG_FILE = "run.log"
#: The late rank's worker (dp_rank, stage) and the rank that only waits for it.
LATE = "1,0"
WAITER = "0,0"
#: A slowed run's verdict must name the late rank first with at least this confidence.
CONFIDENT = 0.8
#: A healthy run may name no worker with this confidence or more.
HEALTHY_LIMIT = 0.5
#: The longest one training run may take (seconds) before it is killed and reported.
RUN_TIMEOUT = 900
#: Each run's run-queue waits per rank (:class:`SchedSampler`), beside its log.
SCHED_FILE = "run-queue.json"
#: A rank whose training thread waited on the run queue this share of the recorded steps'
#: time more than every other rank's was slowed by the machine: a straggler of its own
#: (by the verdict's threshold, 1.1: at least 10% slower), whatever was injected.
CONTENTION = 0.10
#: The folder the snippets are read from, relative to the current folder.
SNIPPETS = Path("docs") / "snippets"
#: The environment variables of the snippets' injections: never inherited by a run.
KNOBS = ("SLOW_RANK", "SLOW_FACTOR", "SLOW_LOADER_RANK", "SLOW_LOADER_MS")


@dataclass(frozen=True)
class Recipe:
    """One documented recipe: its snippet, how it starts (``torchrun`` with 2 processes, or
    ``python``: the framework starts them) and where its trace lands under the run folder."""

    name: str
    snippet: str
    launcher: str
    trace_dir: str = ""

    def argv(self, out: Path) -> list[str]:
        """The command that runs the snippet with ``out`` as its output folder."""
        script = str(SNIPPETS / self.snippet)
        if self.launcher == "torchrun":
            return [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node", "2", script, str(out)]
        return [sys.executable, script, str(out)]

    def shown(self, out: str) -> str:
        """The command as the docs write it."""
        head = ("torchrun --standalone --nproc-per-node 2" if self.launcher == "torchrun"
                else "python")
        return f"{head} {SNIPPETS / self.snippet} {out}"

    def trace_folder(self, run_dir: Path) -> Path:
        return run_dir / self.trace_dir if self.trace_dir else run_dir


@dataclass(frozen=True)
class Condition:
    """One condition: the snippet's environment knobs and the cause a right verdict names
    (None: healthy, no worker may be named)."""

    name: str
    env: tuple[tuple[str, str], ...]
    expected: Cause | None

    @property
    def slowed(self) -> bool:
        return self.expected is not None

    def shown(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.env)


RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("loop", "ddp_loop.py", "torchrun"),
    Recipe("lightning", "lightning_ddp.py", "python"),
    Recipe("hf", "hf_trainer.py", "torchrun", "stragglers"),
)}
CONDITIONS: dict[str, Condition] = {c.name: c for c in (
    Condition("healthy", (), None),
    Condition("slow-forward", (("SLOW_RANK", "1"), ("SLOW_FACTOR", "3")), Cause.WORKER),
    Condition("slow-loader", (("SLOW_LOADER_RANK", "1"), ("SLOW_LOADER_MS", "130")),
              Cause.HOST),
)}


@dataclass(frozen=True)
class RunCase:
    """One run: a recipe under a condition, the ``index``-th repeat."""

    recipe: str
    condition: str
    index: int

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise ValueError(f"unknown recipe {self.recipe!r}")
        if self.condition not in CONDITIONS:
            raise ValueError(f"unknown condition {self.condition!r}")
        if self.index < 0:
            raise ValueError(f"index must be >= 0, got {self.index}")

    @property
    def name(self) -> str:
        return f"{self.recipe}-{self.condition}-{self.index:02d}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any, source: str) -> RunCase:
        """The case of a kept run's record; a damaged record is a user error."""
        if not isinstance(raw, dict):
            raise InputError(f"{source}: 'case' must be a mapping")
        want = {"recipe": str, "condition": str, "index": int}
        for key in sorted(set(raw) | set(want)):
            if key not in want:
                raise InputError(f"{source}: unknown case field {key!r}")
            if key not in raw:
                raise InputError(f"{source}: case field {key!r} missing")
            value = raw[key]
            if not isinstance(value, want[key]) or isinstance(value, bool):
                raise InputError(f"{source}: case field {key!r} has the wrong type: {value!r}")
        try:
            return cls(**raw)
        except ValueError as exc:
            raise InputError(f"{source}: {exc}") from None


def _names(option: str, value: str | None, known: Sequence[str]) -> list[str]:
    """The comma-separated names of ``value`` (None: all of ``known``), each checked."""
    if value is None:
        return list(known)
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise InputError(f"{option}: no name given (one of {', '.join(known)})")
    for n in names:
        if n not in known:
            raise InputError(f"{option}: unknown name {n!r} (one of {', '.join(known)})")
    return list(dict.fromkeys(names))


def plan(recipes: Sequence[str], conditions: Sequence[str], repeat: int) -> list[RunCase]:
    """The runs, repeat by repeat (each repeat runs every recipe under every condition, so
    that a change of the machine's load falls on all of them alike)."""
    return [RunCase(r, c, i) for i in range(repeat) for r in recipes for c in conditions]


# -- scoring ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecipeRow:
    """The score of one run: what the verdict said and the figures behind it.

    ``summary``: what ``stragglers analyze`` prints of the run (its verdict's evidence
    included), for a run that misses a target.
    """

    name: str
    recipe: str
    condition: str
    index: int
    cause: str
    workers: tuple[str, ...]
    confidence: float
    slowdown: float
    slowdown_healthy: float
    discrepancy: float
    trustworthy: bool
    hog: int
    wall_s: float | None
    load_1m: float | None
    run_dir: str
    evidence: tuple[str, ...] = ()
    leading: str | None = None
    leading_workers: tuple[str, ...] = ()
    summary: str = ""
    #: The worker of the rank the machine slowed (its training thread waited on the run
    #: queue :data:`CONTENTION` of the recorded steps' time more than the other's), or None;
    #: ``run_queue``: each rank's share of that time spent waiting (None: not measured).
    contended: str | None = None
    run_queue: dict[str, float] | None = None

    @property
    def slowed(self) -> bool:
        return CONDITIONS[self.condition].slowed

    @property
    def expected(self) -> str:
        """The cause a right verdict names (``none`` for a healthy run)."""
        cause = CONDITIONS[self.condition].expected
        return Cause.NONE.value if cause is None else cause.value

    @property
    def right_cause(self) -> bool:
        return self.cause == self.expected

    @property
    def late_first(self) -> bool | None:
        """Slowed runs: the late rank's worker is the first the verdict names."""
        if not self.slowed:
            return None
        return bool(self.workers) and self.workers[0] == LATE

    @property
    def late_first_confident(self) -> bool | None:
        """Slowed runs: named first with confidence ≥ :data:`CONFIDENT` (the target)."""
        if not self.slowed:
            return None
        return bool(self.late_first) and self.confidence >= CONFIDENT

    @property
    def waiter_blamed(self) -> bool | None:
        """Slowed runs: the rank that only waits is among the verdict's workers."""
        if not self.slowed:
            return None
        return WAITER in self.workers

    @property
    def names_worker(self) -> bool:
        return bool(self.workers)

    @property
    def healthy_blame(self) -> bool | None:
        """Healthy runs: a worker named with confidence ≥ :data:`HEALTHY_LIMIT`, other than
        the one the machine slowed (naming that one first is right: it was a straggler)."""
        if self.slowed:
            return None
        if self.contended is not None and self.workers[:1] == (self.contended,):
            return False
        return self.names_worker and self.confidence >= HEALTHY_LIMIT

    @property
    def machine_slowed_waiter(self) -> bool:
        """A slowed run in which the machine slowed the rank that was meant only to wait
        (its training thread waited on the run queue :data:`CONTENTION` of the steps' time
        more than the late rank's): both ranks were stragglers, the truth is not the
        injection alone. Such runs are listed, not scored by the slowed-run targets."""
        return self.slowed and self.contended == WAITER

    @property
    def misses(self) -> bool:
        """The run misses one of the targets."""
        if self.machine_slowed_waiter:
            return False
        if self.slowed:
            return not self.late_first_confident or bool(self.waiter_blamed)
        return bool(self.healthy_blame)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("workers", "evidence", "leading_workers"):
            out[key] = list(out[key])
        out.update(expected=self.expected, right_cause=self.right_cause,
                   late_first=self.late_first, late_first_confident=self.late_first_confident,
                   waiter_blamed=self.waiter_blamed, healthy_blame=self.healthy_blame,
                   machine_slowed_waiter=self.machine_slowed_waiter, misses=self.misses)
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RecipeRow:
        """A row from :meth:`to_dict` (derived keys ignored)."""
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in raw.items() if k in names}
        for key in ("workers", "evidence", "leading_workers"):
            data[key] = tuple(data.get(key, ()))
        return cls(**data)


def row_of(case: RunCase, result: AnalysisResult, hog: int, wall_s: float | None,
           load_1m: float | None, run_dir: str) -> RecipeRow:
    """The row of one analysed run."""
    from stragglers.analysis.result import summary

    v = result.verdict
    cont = contention(Path(run_dir))
    return RecipeRow(
        name=case.name, recipe=case.recipe, condition=case.condition, index=case.index,
        cause=v.cause.value, workers=tuple(w.key for w in v.workers),
        confidence=float(v.confidence), slowdown=float(result.slowdown),
        slowdown_healthy=float(result.metrics.slowdown_healthy),
        discrepancy=float(result.discrepancy), trustworthy=result.trustworthy, hog=hog,
        wall_s=wall_s, load_1m=load_1m, run_dir=run_dir, evidence=tuple(v.evidence),
        leading=None if v.leading is None else v.leading.cause.value,
        leading_workers=() if v.leading is None else tuple(w.key for w in v.leading.workers),
        summary=summary(result),
        contended=None if cont is None or cont["rank"] is None else f"{cont['rank']},0",
        run_queue=None if cont is None else {k: round(x, 4) for k, x in cont["share"].items()})


def score_run(case: RunCase, run_dir: Path, config: VerdictConfig, hog: int,
              wall_s: float | None, load_1m: float | None) -> RecipeRow:
    """Analyse one kept run (exact S_w, as ``stragglers analyze``) and score its verdict."""
    from stragglers.analysis.runner import analyze_files

    folder = RECIPES[case.recipe].trace_folder(run_dir)
    trace, meta = folder / "trace.parquet", folder / "meta.yaml"
    for path in (trace, meta):
        if not path.is_file():
            raise InputError(f"{path}: missing (the run {case.name} is incomplete)")
    result = analyze_files(trace, meta, exact_workers=True, config=config)
    return row_of(case, result, hog, wall_s, load_1m, str(run_dir))


@dataclass(frozen=True)
class GroupScore:
    """The figures of one recipe × condition."""

    recipe: str
    condition: str
    runs: int
    causes: dict[str, int]
    right_cause: int
    late_first: int
    late_first_confident: int
    waiter_blamed: int
    named_worker: int
    named_worker_confident: int
    confidence_min: float
    confidence_median: float
    slowdown_median: float
    slowdown_healthy_median: float

    @property
    def slowed(self) -> bool:
        return CONDITIONS[self.condition].slowed


def _median(values: Sequence[float]) -> float:
    import numpy as np

    return float(np.median(np.asarray(values, dtype=float)))


def group_scores(rows: Iterable[RecipeRow]) -> list[GroupScore]:
    """One :class:`GroupScore` per recipe × condition present in ``rows`` (in the order of
    :data:`RECIPES` and :data:`CONDITIONS`)."""
    rows = list(rows)
    out = []
    for recipe in RECIPES:
        for condition in CONDITIONS:
            part = [r for r in rows if r.recipe == recipe and r.condition == condition]
            if not part:
                continue
            conf = [r.confidence for r in part]
            out.append(GroupScore(
                recipe=recipe, condition=condition, runs=len(part),
                causes=dict(Counter(r.cause for r in part).most_common()),
                right_cause=sum(r.right_cause for r in part),
                late_first=sum(bool(r.late_first) for r in part),
                late_first_confident=sum(bool(r.late_first_confident) for r in part),
                waiter_blamed=sum(bool(r.waiter_blamed) for r in part),
                named_worker=sum(r.names_worker for r in part),
                named_worker_confident=sum(
                    r.names_worker and r.confidence >= HEALTHY_LIMIT for r in part),
                confidence_min=min(conf), confidence_median=_median(conf),
                slowdown_median=_median([r.slowdown for r in part]),
                slowdown_healthy_median=_median([r.slowdown_healthy for r in part])))
    return out


@dataclass(frozen=True)
class Target:
    """One target of the issue over the rows: the runs it applies to and those that meet it."""

    text: str
    runs: int
    met: int

    @property
    def holds(self) -> bool:
        return self.met == self.runs


def targets(rows: Iterable[RecipeRow]) -> list[Target]:
    """The issue's three targets over ``rows``."""
    rows = list(rows)
    slowed = [r for r in rows if r.slowed and not r.machine_slowed_waiter]
    healthy = [r for r in rows if not r.slowed]
    return [
        Target(f"slowed runs: the late rank ({LATE}) named first with confidence >= "
               f"{CONFIDENT}", len(slowed), sum(bool(r.late_first_confident) for r in slowed)),
        Target(f"slowed runs: the rank that only waits ({WAITER}) never blamed", len(slowed),
               sum(not r.waiter_blamed for r in slowed)),
        Target(f"healthy runs: no worker named with confidence >= {HEALTHY_LIMIT} (but the "
               "rank the machine slowed)", len(healthy),
               sum(not r.healthy_blame for r in healthy)),
    ]


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def format_table(rows: Sequence[RecipeRow]) -> str:
    """The table per recipe × condition, as markdown."""
    out = ["| recipe | condition | runs | verdicts | right cause | late rank 1,0 named first "
           "| confidence min / median | named first at >= 0.8 | waiter 0,0 blamed "
           "| worker named (at >= 0.5) | S / S_h median |",
           "|" + " --- |" * 11]
    for g in group_scores(rows):
        causes = ", ".join(f"{c} {n}" for c, n in g.causes.items())
        slowed = g.slowed
        out.append(
            f"| {g.recipe} | {g.condition} | {g.runs} | {causes} | "
            f"{g.right_cause}/{g.runs} | "
            + (f"{g.late_first}/{g.runs} | " if slowed else "- | ")
            + f"{g.confidence_min:.2f} / {g.confidence_median:.2f} | "
            + (f"{g.late_first_confident}/{g.runs} | " if slowed else "- | ")
            + (f"{g.waiter_blamed}/{g.runs} | " if slowed else "- | ")
            + f"{g.named_worker}/{g.runs} ({g.named_worker_confident}) | "
            f"{g.slowdown_median:.3f} / {g.slowdown_healthy_median:.3f} |")
    return "\n".join(out)


def format_report(rows: Sequence[RecipeRow], with_misses: bool = True) -> str:
    """The table, every run, the targets and (``with_misses``) the summary of each run that
    misses a target, as markdown."""
    out = [format_table(rows), "",
           "| run | verdict | conf | S | S_h | discrepancy | trustworthy | run queue 0 / 1 "
           "| load | wall s |",
           "|" + " --- |" * 10]
    for r in rows:
        verdict = r.cause + (f" [{' '.join(r.workers[:3])}]" if r.workers else "")
        if r.leading is not None:
            verdict += f" (leading: {r.leading}" + (
                f" [{' '.join(r.leading_workers[:3])}]" if r.leading_workers else "") + ")"
        load = "-" if r.load_1m is None else f"{r.load_1m:.1f}"
        wall = "-" if r.wall_s is None else f"{r.wall_s:.0f}"
        rq = "-" if r.run_queue is None else " / ".join(
            f"{100 * r.run_queue.get(k, float('nan')):.0f}%" for k in ("0", "1"))
        if r.contended is not None:
            rq += f" (machine slowed {r.contended})"
        out.append(f"| {r.name}{' (MISS)' if r.misses else ''} | {verdict} | "
                   f"{r.confidence:.2f} | {r.slowdown:.3f} | {r.slowdown_healthy:.3f} | "
                   f"{r.discrepancy:.3f} | {'yes' if r.trustworthy else 'no'} | {rq} | "
                   f"{load} | {wall} |")
    loads = [r.load_1m for r in rows if r.load_1m is not None]
    hogs = sorted({r.hog for r in rows})
    out += ["", f"runs: {len(rows)}; 1-minute load average at the runs' start: "
            + (f"{min(loads):.1f}-{max(loads):.1f} (median {_median(loads):.1f})"
               if loads else "-")
            + f"; CPU hog processes: {', '.join(map(str, hogs)) or '-'}", ""]
    out += [f"- [{'x' if t.holds else ' '}] {t.text}: {_pct(t.met, t.runs)}"
            for t in targets(rows)]
    ambiguous = [r for r in rows if r.machine_slowed_waiter]
    if ambiguous:
        out.append(f"- slowed runs in which the machine slowed the waiting rank {WAITER} more "
                   f"than the injection slowed {LATE} (run queue; left out of the slowed-run "
                   f"targets): {len(ambiguous)}: " + ", ".join(
                       f"{r.name} ({r.cause} [{' '.join(r.workers[:2])}] {r.confidence:.2f})"
                       for r in ambiguous))
    slowed_by_machine = [r for r in rows if not r.slowed and r.contended is not None]
    if slowed_by_machine:
        named = sum(r.workers[:1] == (r.contended,) for r in slowed_by_machine)
        out.append(f"- healthy runs in which the machine slowed a rank (its training thread "
                   f"waited on the run queue >= {CONTENTION:.0%} of the steps' time more than "
                   f"the other's): {len(slowed_by_machine)}; that rank named first: {named} "
                   "(counted as right)")
    missed = [r for r in rows if r.misses]
    if with_misses and missed:
        out += ["", f"Runs that miss a target ({len(missed)}), as `stragglers analyze` "
                "summarises them:"]
        for r in missed:
            out += ["", f"{r.name} ({r.run_dir}):", "```", r.summary or "(no summary)", "```"]
    return "\n".join(out)


# -- running ----------------------------------------------------------------------------------
def check_repository_root(root: Path | None = None) -> Path:
    """The snippets' folder under ``root`` (default: the current folder), or an InputError
    saying to run from the repository root."""
    base = Path.cwd() if root is None else root
    for recipe in RECIPES.values():
        path = base / SNIPPETS / recipe.snippet
        if not path.is_file():
            raise InputError(f"{path}: no such file; run `stragglers probe recipe-eval` from "
                             "the repository root (the snippets live in docs/snippets/)")
    return base / SNIPPETS


def run_env(condition: Condition) -> dict[str, str]:
    """The environment of a run: this one without any injection knob, the condition's knobs,
    one thread per process, nothing downloaded, and this ``stragglers`` first on the path
    (the runs record with the code that analyses them)."""
    import stragglers

    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    src = str(Path(stragglers.__file__).resolve().parents[1])
    path = env.get("PYTHONPATH")
    env.update(dict(condition.env), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=src if not path else f"{src}{os.pathsep}{path}")
    return env


@dataclass(frozen=True)
class RunFailure:
    """A run whose processes failed or ran past the time limit (its output is in its
    :data:`LOG_FILE`)."""

    name: str
    returncode: int | None
    tail: str
    run_dir: str


def _fresh(run_dir: Path) -> None:
    """Empty a run's folder for a new run: one of ours (a probe's, a kept run's) is
    removed; a non-empty folder of anyone else's is refused."""
    if not run_dir.exists():
        return
    ours = any((run_dir / n).exists() for n in (OUT_MARKER, CASE_FILE, LOG_FILE))
    if not ours and any(run_dir.iterdir()):
        raise InputError(f"{run_dir}: a non-empty folder that no run of recipe-eval made; "
                         "move it away or choose another --keep folder")
    shutil.rmtree(run_dir)


class SchedSampler:
    """Independent truth about CPU contention: how long each rank's training thread (its
    process's main thread) waited on a run queue — runnable, not running
    (``/proc/PID/schedstat``, second field) — sampled every ``period`` s over the processes
    of one run (its first process and every descendant). A process's rank is its
    environment's ``RANK``, else ``LOCAL_RANK`` (one node); the run's first process is rank 0
    for a recipe started with ``python`` (Lightning's), the launcher for torchrun.
    ``series``: ``(CLOCK_MONOTONIC seconds, {rank: waited seconds})`` per sample, on the
    clock the probes stamp their spans with. Linux only; without ``/proc`` it is empty."""

    def __init__(self, root: int, root_rank: int | None, period: float = 0.2) -> None:
        self.root, self.root_rank, self.period = root, root_rank, period
        self._rank: dict[int, int | None] = {}
        self.series: list[tuple[float, dict[int, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SchedSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _rank_of(self, pid: int) -> int | None:
        if pid not in self._rank:
            rank = self.root_rank if pid == self.root else None
            try:
                env = dict(item.split(b"=", 1) for item in
                           Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                           if b"=" in item)
                for key in (b"LOCAL_RANK", b"RANK"):  # RANK wins where both are set
                    if key in env:
                        rank = int(env[key])
            except (OSError, ValueError):
                pass
            self._rank[pid] = rank
        return self._rank[pid]

    def _processes(self) -> list[int]:
        """The run's first process and every process descended from it."""
        parent: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    stat = Path(f"/proc/{entry.name}/stat").read_text()
                    parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
        out, frontier = [self.root], [self.root]
        while frontier:
            frontier = [p for p, pp in parent.items() if pp in frontier]
            out += frontier
        return out

    def _sample(self) -> None:
        now = time.monotonic()
        waited: dict[int, float] = {}
        for pid in self._processes():
            rank = self._rank_of(pid)
            if rank is None:
                continue
            try:
                waited[rank] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
            except (OSError, ValueError, IndexError):
                continue
        if waited:
            self.series.append((now, waited))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period)


def _spans_window(run_dir: Path) -> tuple[float, float] | None:
    """The recorded steps' first span start and last span end (CLOCK_MONOTONIC seconds) from
    the probe's rank files under ``run_dir``, or None without them."""
    lo, hi = float("inf"), float("-inf")
    for f in run_dir.rglob("rank-*.jsonl"):
        with open(f) as fh:
            for line in fh:
                if '"kind": "span"' not in line:
                    continue
                try:
                    rec = json.loads(line)
                    lo, hi = min(lo, float(rec["start"])), max(hi, float(rec["end"]))
                except (ValueError, KeyError, TypeError):
                    continue
    return (lo, hi) if lo < hi else None


def contention(run_dir: Path) -> dict[str, Any] | None:
    """From a run's :data:`SCHED_FILE` and its probe files: over the recorded steps, each
    rank's training thread's run-queue wait as a share of the window (``share``), and the
    rank that waited more than every other by :data:`CONTENTION` of the window or more
    (``rank``, else None). None when either file is missing."""
    path = run_dir / SCHED_FILE
    window = _spans_window(run_dir)
    if not path.is_file() or window is None:
        return None
    series = json.loads(path.read_text()).get("series", [])
    lo, hi = window

    if not series:
        return None
    # The samples around the window: the latest at or before its start, the earliest at or
    # after its end (a sampling period of extra time at most on each side).
    start = next((w for ts, w in reversed(series) if ts <= lo), series[0][1])
    end = next((w for ts, w in series if ts >= hi), series[-1][1])
    share = {r: (end[r] - start.get(r, 0.0)) / (hi - lo) for r in end}
    rank = None
    if len(share) > 1:
        top = max(share, key=lambda r: share[r])
        others = max(v for r, v in share.items() if r != top)
        if share[top] - others >= CONTENTION:
            rank = top
    return {"window_s": hi - lo, "share": share, "rank": rank}


def run_one(case: RunCase, run_dir: Path, hog: int,
            timeout: float = RUN_TIMEOUT) -> tuple[int | None, float, float, str]:
    """Run one case into ``run_dir`` (``hog`` busy loops beside it); returns the exit code
    (None: killed after ``timeout`` s), the wall time, the 1-minute load average at the start
    and the run's output (also written to :data:`LOG_FILE` once it ended)."""
    recipe, condition = RECIPES[case.recipe], CONDITIONS[case.condition]
    _fresh(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    code: int | None
    with CpuHog(hog):
        proc = subprocess.Popen(recipe.argv(run_dir), env=run_env(condition),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        with SchedSampler(proc.pid, 0 if recipe.launcher == "python" else None) as sched:
            try:
                output, _ = proc.communicate(timeout=timeout)
                code = proc.returncode
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # the run's own session: its workers too
                output, _ = proc.communicate()
                code = None
    wall = time.perf_counter() - t0
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(run_dir / LOG_FILE, f"$ {condition.shown()} {recipe.shown(str(run_dir))}\n"
               f"# exit {code}, {wall:.1f} s, load {load:.2f}\n{output}")
    waited = {"clock": "CLOCK_MONOTONIC",
              "series": [[round(t, 4), {str(r): round(x, 5) for r, x in sorted(w.items())}]
                         for t, w in sched.series]}
    write_text(run_dir / SCHED_FILE, json.dumps(waited) + "\n")
    return code, wall, load, output


def run_all(cases: Sequence[RunCase], config: VerdictConfig, hog: int = 0,
            keep: str | None = None, force: bool = False, timeout: float = RUN_TIMEOUT,
            progress: Callable[[RecipeRow | RunFailure], None] | None = None
            ) -> tuple[list[RecipeRow], list[RunFailure]]:
    """Run every case, analyse and score it; the runs that failed are returned beside the
    rows (never scored, never dropped silently).

    With ``keep`` the runs stay in ``keep/<run>/`` (each with its :data:`CASE_FILE` once it
    finished) and the rows are written to ``keep/recipe-eval.json``; otherwise they go to a
    temporary folder that is deleted at the end.
    """
    if keep is not None:
        out = claim_out_dir(keep, force, option="--keep", outputs=(ROWS_FILE,))
    else:
        out = Path(tempfile.mkdtemp(prefix="stragglers-recipe-eval-"))
    rows: list[RecipeRow] = []
    failures: list[RunFailure] = []
    try:
        for case in cases:
            run_dir = out / case.name
            code, wall, load, output = run_one(case, run_dir, hog, timeout)
            if code != 0:
                fail = RunFailure(case.name, code, "\n".join(output.splitlines()[-5:]),
                                  str(run_dir))
                failures.append(fail)
                if progress is not None:
                    progress(fail)
                continue
            recipe, condition = RECIPES[case.recipe], CONDITIONS[case.condition]
            write_text(run_dir / CASE_FILE, json.dumps(
                {"case": case.to_dict(), "hog": hog, "wall_s": wall, "load_1m": load,
                 "command": f"{condition.shown()} {recipe.shown(str(run_dir))}".strip()},
                indent=1) + "\n")
            row = score_run(case, run_dir, config, hog, wall, load)
            rows.append(row)
            if progress is not None:
                progress(row)
        if keep is not None:
            write_text(out / ROWS_FILE, json.dumps([r.to_dict() for r in rows], indent=1))
    finally:
        if keep is None:
            shutil.rmtree(out, ignore_errors=True)
    return rows, failures


def kept_runs(folder: str | Path) -> tuple[list[tuple[RunCase, Path, dict[str, Any]]],
                                          list[str]]:
    """The runs kept in ``folder`` (:func:`stragglers.evaluation.kept.kept_runs`)."""
    from stragglers.evaluation.kept import kept_runs as read_kept

    return read_kept(folder, CASE_FILE, "recipe-eval case record", RunCase.from_dict)


def reanalyse(folder: str | Path, config: VerdictConfig, recipes: Sequence[str],
              conditions: Sequence[str]) -> tuple[list[RecipeRow], list[str]]:
    """Re-score the runs kept in ``folder`` (of ``recipes`` × ``conditions``) with the
    current code and ``config``, in the order :func:`plan` runs them; no job is run. Also
    returns the subfolders holding no
    finished run (reported, not scored)."""
    runs, unfinished = kept_runs(folder)
    order = {name: i for i, name in enumerate((*RECIPES, *CONDITIONS))}
    runs.sort(key=lambda run: (run[0].index, order[run[0].recipe], order[run[0].condition]))
    rows = []
    for case, sub, record in runs:  # in the order they ran (see plan)
        if case.recipe not in recipes or case.condition not in conditions:
            continue
        rows.append(score_run(case, sub, config, *run_figures(record)))
    return rows, unfinished


@dataclass(frozen=True)
class RecipeOutcome:
    """The scored runs; the runs that failed; the kept folders with no finished run."""

    rows: tuple[RecipeRow, ...]
    failures: tuple[RunFailure, ...] = ()
    unfinished: tuple[str, ...] = ()


def evaluate(recipes: str | None = None, conditions: str | None = None, *,
             repeat: int | None = None,
             hog: int = 0, keep: str | None = None, force: bool = False,
             reanalyse_dir: str | None = None, verdict_config: str | None = None,
             verdict: Sequence[str] = (), timeout: float = RUN_TIMEOUT,
             progress: Callable[[RecipeRow | RunFailure], None] | None = None
             ) -> RecipeOutcome:
    """``probe recipe-eval``: check the options (as one-line
    :class:`~stragglers.errors.InputError`), then run ``repeat`` times each of the
    comma-separated ``recipes`` under each of the ``conditions`` and score them
    (:func:`run_all`), or re-score the runs kept in ``reanalyse_dir`` (:func:`reanalyse`)."""
    names = _names("--recipes", recipes, list(RECIPES))
    conds = _names("--conditions", conditions, list(CONDITIONS))
    check_limit("hog_processes", hog, "--hog")
    if repeat is not None and repeat < 1:
        raise InputError(f"--repeat: must be at least 1, got {repeat}")
    if reanalyse_dir is not None:
        for option, value in (("keep", keep), ("repeat", repeat)):
            if value is not None:
                raise InputError(f"--{option}: not with --reanalyse (the kept runs are "
                                 "re-scored as they are)")
        if hog:
            raise InputError("--hog: not with --reanalyse (no job is run)")
    config = VerdictConfig.from_options(verdict_config, list(verdict))
    if reanalyse_dir is not None:
        rows, unfinished = reanalyse(reanalyse_dir, config, names, conds)
        return RecipeOutcome(tuple(rows), (), tuple(unfinished))
    check_repository_root()
    if keep is not None:
        check_out_dir(keep, "--keep")
    rows, failures = run_all(plan(names, conds, repeat or 1), config, hog, keep, force, timeout,
                             progress)
    return RecipeOutcome(tuple(rows), tuple(failures))
