"""Evaluation of the root-cause verdict on real runs of the example job (issue 7, §3-4).

A fixed matrix of :class:`EvalCase` configurations of ``stragglers probe example`` — data
and pipeline parallel sizes, one injected straggler each (a slow rank by CPU burn or sleep,
a heavier last stage, long-tailed sequence lengths, uncoordinated GC pauses) or none (healthy
runs with different seeds) — is run, every trace is analysed, and each verdict is scored
against the cause that was injected. Every case is marked ``tune`` or ``eval`` in the matrix:
thresholds of :class:`~stragglers.analysis.verdict.VerdictConfig` may only be chosen looking
at tune runs; eval runs only score.

Outputs (:func:`format_report`): a confusion matrix (expected cause × verdict), per-worker
accuracy (the blamed worker where one was injected), a calibration table (confidence bins →
share right) and the targets of the issue. Runs kept with ``keep`` can be re-scored later
(:func:`reanalyse`) without running them again, so threshold work is cheap.

A CPU hog (:class:`CpuHog`: real busy-loop processes) can run beside each job; under it a
verdict may become ``pauses`` or lose confidence, but should never be a confident wrong cause.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from stragglers.analysis.verdict import Cause, VerdictConfig
from stragglers.analysis.workers import Worker
from stragglers.atomic import check_out_dir, write_text
from stragglers.errors import InputError
from stragglers.evaluation.kept import run_figures
from stragglers.limits import check_limit
from stragglers.probe.outdir import claim_out_dir
from stragglers.testbed.job import JobConfig, run_job

#: Splits of the matrix: thresholds are chosen on ``tune`` runs only.
SPLITS = ("tune", "eval")
#: The record each kept run folder holds (its case, the hog, the wall time).
CASE_FILE = "verdict-eval-case.json"
#: The rows of the last run, in a kept folder.
ROWS_FILE = "verdict-eval.json"
#: Confidence bins of the calibration table (lower edges; the last bin includes 1).
CONFIDENCE_BINS = (0.0, 0.2, 0.5, 0.8, 0.95)
#: A verdict at least this confident must be right (issue 7, §4).
CONFIDENT = 0.8
#: On healthy runs no cause may reach this confidence (issue 7, §3).
HEALTHY_LIMIT = 0.5


@dataclass(frozen=True)
class EvalCase:
    """One configuration of the matrix: the job's layout and seed and one injection.

    ``kind``: ``healthy``, ``worker`` (``slow_rank`` × ``slow_factor`` by ``slow_mode``),
    ``last_stage`` (``extra_layers`` more blocks on the last stage), ``sequence``
    (long-tailed sequence lengths) or ``gc`` (a full collection with ``gc_prob`` per forward
    compute, at moments that differ between ranks).
    """

    name: str
    split: str
    kind: str
    dp: int
    pp: int
    seed: int = 1234
    slow_rank: int = -1
    slow_factor: float = 1.0
    slow_mode: str = "sleep"
    extra_layers: int = 0
    gc_prob: float = 0.0

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"case {self.name}: split must be tune or eval")
        if self.kind not in ("healthy", "worker", "last_stage", "sequence", "gc"):
            raise ValueError(f"case {self.name}: unknown kind {self.kind!r}")

    @property
    def slow_worker(self) -> Worker | None:
        """The injected worker (Megatron's rank order: rank = stage * dp + dp_rank)."""
        if self.kind != "worker":
            return None
        return Worker(self.slow_rank % self.dp, self.slow_rank // self.dp)

    def injected(self) -> str:
        """The injection in words."""
        if self.kind == "worker":
            w = self.slow_worker
            assert w is not None
            where = ("first" if w.stage == 0 else "last" if w.stage == self.pp - 1
                     else "middle")
            return f"worker {w.key} ({where} stage) x{self.slow_factor:g} {self.slow_mode}"
        if self.kind == "last_stage":
            return f"last stage +{self.extra_layers} layers"
        if self.kind == "sequence":
            return "long-tailed sequence lengths"
        if self.kind == "gc":
            return f"GC pauses p={self.gc_prob:g}"
        return f"healthy (seed {self.seed})"

    def expected(self, gc_recorded: bool) -> Cause:
        """The cause a right verdict names. GC pauses are ``gc`` only when the trace records
        GC time (otherwise nothing tells them from other stalls: ``pauses``)."""
        return {"healthy": Cause.NONE, "worker": Cause.WORKER, "last_stage": Cause.LAST_STAGE,
                "sequence": Cause.SEQUENCE_LENGTH,
                "gc": Cause.GC if gc_recorded else Cause.PAUSES}[self.kind]

    def job_config(self, base: JobConfig, out_dir: Path) -> JobConfig:
        """The example job's configuration of this case (``base`` sets steps and model)."""
        return replace(
            base, out_dir=str(out_dir), dp=self.dp, pp=self.pp, seed=self.seed,
            slow_rank=self.slow_rank, slow_factor=self.slow_factor, slow_mode=self.slow_mode,
            last_stage_extra_layers=self.extra_layers,
            seq_len_dist="longtail" if self.kind == "sequence" else "fixed",
            gc_pause_prob=self.gc_prob, inject_period=0,
            **(GC_JOB if self.kind == "gc" else {}))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any, source: str) -> EvalCase:
        """The case of a kept run's record; a damaged record is a user error."""
        if not isinstance(raw, dict):
            raise InputError(f"{source}: 'case' must be a mapping")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise InputError(f"{source}: unknown case field {unknown[0]!r}")
        missing = sorted(k for k in ("name", "split", "kind", "dp", "pp") if k not in raw)
        if missing:
            raise InputError(f"{source}: case field {missing[0]!r} missing")
        for key, value in raw.items():
            want = known[key].type
            ok = (isinstance(value, str) if want == "str" else
                  isinstance(value, int) and not isinstance(value, bool) if want == "int" else
                  isinstance(value, int | float) and not isinstance(value, bool))
            if not ok:
                raise InputError(f"{source}: case field {key!r} has the wrong type: {value!r}")
        try:
            return cls(**raw)
        except ValueError as exc:
            raise InputError(f"{source}: {exc}") from None


#: Job settings of the GC cases: a live heap of 1.5 M objects makes a full collection take
#: about 0.1 s (a few % of a step per pause: a problem worth finding), and no planned GC,
#: whose synchronised collections of that heap would be a second, coordinated GC effect.
GC_JOB: dict[str, Any] = {"gc_heap_objects": 1_500_000, "gc_interval": 0}


def _slow(name: str, split: str, dp: int, pp: int, rank: int, factor: float, mode: str,
          seed: int) -> EvalCase:
    return EvalCase(name, split, "worker", dp, pp, seed=seed, slow_rank=rank,
                    slow_factor=factor, slow_mode=mode)


#: The matrix. Names say the layout and injection; the split says what they may be used for.
MATRIX: tuple[EvalCase, ...] = (
    # -- tune: thresholds may be chosen looking at these -----------------------------------
    EvalCase("healthy-d2p2-s11", "tune", "healthy", 2, 2, seed=11),
    EvalCase("healthy-d1p4-s12", "tune", "healthy", 1, 4, seed=12),
    _slow("slow-d2p2-r2-spin-x2", "tune", 2, 2, 2, 2.0, "spin", 13),
    _slow("slow-d1p3-r1-sleep-x1.5", "tune", 1, 3, 1, 1.5, "sleep", 14),
    _slow("slow-d4p1-r2-sleep-x1.3", "tune", 4, 1, 2, 1.3, "sleep", 15),
    _slow("slow-d1p4-r0-spin-x3", "tune", 1, 4, 0, 3.0, "spin", 16),
    EvalCase("last-d2p3-x3", "tune", "last_stage", 2, 3, seed=17, extra_layers=3),
    EvalCase("last-d1p3-x2", "tune", "last_stage", 1, 3, seed=18, extra_layers=2),
    EvalCase("seq-d2p2", "tune", "sequence", 2, 2, seed=19),
    EvalCase("seq-d1p4", "tune", "sequence", 1, 4, seed=20),
    EvalCase("gc-d2p2-p0.1", "tune", "gc", 2, 2, seed=21, gc_prob=0.1),
    EvalCase("gc-d1p3-p0.05", "tune", "gc", 1, 3, seed=22, gc_prob=0.05),
    # -- eval: scored only ----------------------------------------------------------------
    EvalCase("healthy-d4p1-s31", "eval", "healthy", 4, 1, seed=31),
    EvalCase("healthy-d2p3-s32", "eval", "healthy", 2, 3, seed=32),
    EvalCase("healthy-d4p2-s33", "eval", "healthy", 4, 2, seed=33),
    EvalCase("healthy-d1p2-s34", "eval", "healthy", 1, 2, seed=34),
    _slow("slow-d2p2-r3-sleep-x1.5", "eval", 2, 2, 3, 1.5, "sleep", 35),
    _slow("slow-d4p2-r1-sleep-x1.5", "eval", 4, 2, 1, 1.5, "sleep", 36),
    _slow("slow-d1p4-r2-spin-x2", "eval", 1, 4, 2, 2.0, "spin", 37),
    _slow("slow-d2p3-r3-sleep-x2.5", "eval", 2, 3, 3, 2.5, "sleep", 38),
    _slow("slow-d1p2-r0-sleep-x3", "eval", 1, 2, 0, 3.0, "sleep", 39),
    _slow("slow-d2p1-r1-spin-x1.5", "eval", 2, 1, 1, 1.5, "spin", 40),
    _slow("slow-d4p2-r7-spin-x2", "eval", 4, 2, 7, 2.0, "spin", 41),
    EvalCase("last-d1p4-x3", "eval", "last_stage", 1, 4, seed=42, extra_layers=3),
    EvalCase("last-d2p2-x2", "eval", "last_stage", 2, 2, seed=43, extra_layers=2),
    EvalCase("last-d4p2-x3", "eval", "last_stage", 4, 2, seed=44, extra_layers=3),
    EvalCase("seq-d1p3", "eval", "sequence", 1, 3, seed=45),
    EvalCase("seq-d4p1", "eval", "sequence", 4, 1, seed=46),
    EvalCase("gc-d1p4-p0.05", "eval", "gc", 1, 4, seed=47, gc_prob=0.05),
    EvalCase("gc-d4p1-p0.1", "eval", "gc", 4, 1, seed=48, gc_prob=0.1),
    EvalCase("gc-d2p3-p0.1", "eval", "gc", 2, 3, seed=49, gc_prob=0.1),
)

#: The job settings every case starts from: the example job's model, 14 steps of which the
#: first 2 are warm-up (not recorded), the injections on in every recorded step.
BASE_JOB = JobConfig(steps=14, warmup_steps=2)


def select(cases: Sequence[EvalCase], split: str = "all",
           only: Sequence[str] | None = None) -> list[EvalCase]:
    """The cases of ``split`` (``tune``, ``eval`` or ``all``), restricted to ``only`` names."""
    if split not in (*SPLITS, "all"):
        raise InputError(f"--split: expected tune, eval or all, got {split!r}")
    names = {c.name for c in cases}
    for name in only or ():
        if name not in names:
            raise InputError(f"--only: no case named {name!r} in the matrix (see --list)")
    return [c for c in cases if (split == "all" or c.split == split)
            and (not only or c.name in only)]


def _only(names: str | None) -> list[str] | None:
    """The case names of a comma-separated ``--only`` (None: every case)."""
    if names is None:
        return None
    only = [n.strip() for n in names.split(",") if n.strip()]
    if not only:
        raise InputError("--only: no case name given")
    return only


def list_cases(split: str = "all", only: str | None = None) -> list[EvalCase]:
    """The cases of :data:`MATRIX` in ``split``, restricted to the comma-separated ``only``."""
    return select(MATRIX, split, _only(only))


class CpuHog:
    """``n`` real busy-loop processes (``while True: pass``) for the duration of a with-block;
    they are killed, by their own process ids, when it ends."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> CpuHog:
        for _ in range(self.n):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


@dataclass(frozen=True)
class EvalRow:
    """The score of one run: what was injected, what the verdict said, whether it is right.

    ``right_worker`` is None where no worker was injected, else whether the verdict's first
    blamed worker is the injected one; ``right``: right cause and (where injected) right
    worker; ``top_sw``: the worker with the largest exact S_w.

    ``leading`` / ``leading_workers``: for a ``none`` verdict, the cause the verdict names as
    the largest part of a slowdown below its threshold (see
    :class:`~stragglers.analysis.verdict.Verdict`). ``right_named`` scores the cause the
    verdict *names*: the same as ``right``, except that an injection whose effect stayed
    below the threshold (verdict ``none``) counts as right when ``leading`` names it (and the
    injected worker). ``right`` is the strict score: only the verdict's cause counts.
    """

    name: str
    split: str
    kind: str
    dp: int
    pp: int
    injected: str
    expected: str
    expected_worker: str | None
    cause: str
    workers: tuple[str, ...]
    confidence: float
    slowdown: float
    discrepancy: float
    trustworthy: bool
    top_sw: str
    gc_recorded: bool
    hog: int
    wall_s: float | None
    load_1m: float | None
    run_dir: str
    leading: str | None = None
    leading_workers: tuple[str, ...] = ()

    @property
    def right_cause(self) -> bool:
        return self.cause == self.expected

    @property
    def right_worker(self) -> bool | None:
        if self.expected_worker is None:
            return None
        return bool(self.workers) and self.workers[0] == self.expected_worker

    @property
    def right(self) -> bool:
        return self.right_cause and self.right_worker is not False

    @property
    def right_named(self) -> bool:
        if self.right or self.cause != Cause.NONE.value or self.expected == Cause.NONE.value:
            return self.right
        if self.leading != self.expected:
            return False
        return self.expected_worker is None or (
            bool(self.leading_workers) and self.leading_workers[0] == self.expected_worker)

    @property
    def confident_wrong(self) -> bool:
        """Wrong with confidence ≥ 0.8 (``pauses`` under a CPU hog is not wrong: the hog
        does stall the job)."""
        if self.right or self.confidence < CONFIDENT:
            return False
        return not (self.hog > 0 and self.cause == Cause.PAUSES.value)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["workers"] = list(self.workers)
        out["leading_workers"] = list(self.leading_workers)
        out.update(right=self.right, right_cause=self.right_cause,
                   right_worker=self.right_worker, right_named=self.right_named)
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EvalRow:
        """A row from :meth:`to_dict` (derived keys ignored)."""
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in raw.items() if k in names}
        data["workers"] = tuple(data.get("workers", ()))
        data["leading_workers"] = tuple(data.get("leading_workers", ()))
        return cls(**data)


def records_gc_time(trace_path: Path) -> bool:
    """Whether the trace records GC time inside ops (the probes' ``gc_s`` column)."""
    import pyarrow.parquet as pq

    return "gc_s" in pq.read_schema(trace_path).names


def score_run(case: EvalCase, run_dir: Path, config: VerdictConfig, hog: int,
              wall_s: float | None, load_1m: float | None) -> EvalRow:
    """Analyse one kept run with ``config`` and score its verdict."""
    import numpy as np

    from stragglers.analysis.runner import analyze_files

    trace, meta = run_dir / "trace.parquet", run_dir / "meta.yaml"
    for path in (trace, meta):
        if not path.is_file():
            raise InputError(f"{path}: missing (the run of case {case.name} is incomplete)")
    result = analyze_files(trace, meta, exact_workers=True, config=config)
    verdict = result.verdict
    sw = result.metrics.worker_slowdown
    top = np.unravel_index(int(np.argmax(sw)), sw.shape)
    gc_recorded = records_gc_time(trace)
    w = case.slow_worker
    return EvalRow(
        name=case.name, split=case.split, kind=case.kind, dp=case.dp, pp=case.pp,
        injected=case.injected(), expected=case.expected(gc_recorded).value,
        expected_worker=None if w is None else w.key, cause=verdict.cause.value,
        workers=tuple(x.key for x in verdict.workers), confidence=float(verdict.confidence),
        slowdown=float(result.slowdown), discrepancy=float(result.discrepancy),
        trustworthy=result.trustworthy, top_sw=Worker(int(top[0]), int(top[1])).key,
        gc_recorded=gc_recorded, hog=hog, wall_s=wall_s, load_1m=load_1m, run_dir=str(run_dir),
        leading=None if verdict.leading is None else verdict.leading.cause.value,
        leading_workers=() if verdict.leading is None else tuple(
            x.key for x in verdict.leading.workers))


def run_matrix(cases: Sequence[EvalCase], base: JobConfig, config: VerdictConfig,
               hog: int = 0, keep: str | None = None, force: bool = False,
               progress: Any = None) -> list[EvalRow]:
    """Run every case (with ``hog`` busy processes beside each job), analyse and score it.

    With ``keep`` the runs stay in ``keep/<case>/`` (each with its :data:`CASE_FILE`) and the
    rows are written to ``keep/verdict-eval.json``; otherwise they go to a temporary folder
    that is deleted at the end.
    """
    import shutil

    if keep is not None:
        out = claim_out_dir(keep, force, option="--keep", outputs=(ROWS_FILE,))
    else:
        out = Path(tempfile.mkdtemp(prefix="stragglers-verdict-eval-"))
    rows: list[EvalRow] = []
    try:
        for case in cases:
            run_dir = out / case.name
            (run_dir / CASE_FILE).unlink(missing_ok=True)  # a record only once it is complete
            cfg = case.job_config(base, run_dir)
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            with CpuHog(hog):
                run_job(cfg)
            wall = time.perf_counter() - t0
            write_text(run_dir / CASE_FILE, json.dumps(
                {"case": case.to_dict(), "hog": hog, "wall_s": wall, "load_1m": load},
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
    return rows


def kept_runs(folder: str | Path) -> tuple[list[tuple[EvalCase, Path, dict[str, Any]]],
                                          list[str]]:
    """The runs kept in ``folder`` (:func:`stragglers.evaluation.kept.kept_runs`)."""
    from stragglers.evaluation.kept import kept_runs as read_kept

    return read_kept(folder, CASE_FILE, "verdict-eval case record", EvalCase.from_dict)


def reanalyse(folder: str | Path, config: VerdictConfig, split: str = "all",
              only: Sequence[str] | None = None) -> tuple[list[EvalRow], list[str]]:
    """Re-score the runs kept in ``folder`` with ``config`` (no job is run); also returns
    the subfolders that hold no finished run (reported, not scored)."""
    runs, unfinished = kept_runs(folder)
    cases = select([c for c, _, _ in runs], split, only)
    chosen = {c.name for c in cases}
    rows = []
    for case, sub, record in runs:
        if case.name not in chosen:
            continue
        rows.append(score_run(case, sub, config, *run_figures(record)))
    return rows, unfinished


@dataclass(frozen=True)
class EvalOutcome:
    """The scored runs, and the kept folders that hold no finished run (re-scoring only)."""

    rows: tuple[EvalRow, ...]
    unfinished: tuple[str, ...] = ()


def evaluate(split: str = "all", only: str | None = None, *, hog: int = 0,
             keep: str | None = None, force: bool = False, reanalyse_dir: str | None = None,
             steps: int | None = None, warmup_steps: int | None = None,
             verdict_config: str | None = None, verdict: Sequence[str] = (),
             progress: Callable[[EvalRow], None] | None = None) -> EvalOutcome:
    """``probe verdict-eval``: check the options (as one-line
    :class:`~stragglers.errors.InputError`), then run the cases of ``split`` and ``only``
    (comma-separated) on :data:`BASE_JOB` with ``steps``/``warmup_steps`` and score them
    (:func:`run_matrix`), or re-score the runs kept in ``reanalyse_dir`` (:func:`reanalyse`),
    with the verdict settings of the ``verdict_config`` file and ``verdict`` KEY=VALUEs."""
    names = _only(only)
    check_limit("hog_processes", hog, "--hog")
    if reanalyse_dir is not None:
        for option, value in (("keep", keep), ("steps", steps),
                              ("warmup-steps", warmup_steps)):
            if value is not None:
                raise InputError(f"--{option}: not with --reanalyse (the kept runs are "
                                 "re-scored as they are)")
        if hog:
            raise InputError("--hog: not with --reanalyse (no job is run)")
    config = VerdictConfig.from_options(verdict_config, list(verdict))
    if reanalyse_dir is not None:
        rows, unfinished = reanalyse(reanalyse_dir, config, split, names)
        return EvalOutcome(tuple(rows), tuple(unfinished))
    base = replace(BASE_JOB, steps=BASE_JOB.steps if steps is None else steps,
                   warmup_steps=BASE_JOB.warmup_steps if warmup_steps is None else warmup_steps,
                   force=force)
    if base.steps <= base.warmup_steps:
        raise InputError(f"--steps ({base.steps}) must exceed --warmup-steps "
                         f"({base.warmup_steps})")
    if keep is not None:
        check_out_dir(keep, "--keep")
    cases = select(MATRIX, split, names)
    return EvalOutcome(tuple(run_matrix(cases, base, config, hog, keep, force, progress)))


# -- scoring ----------------------------------------------------------------------------------
EXPECTED_ORDER = (Cause.WORKER, Cause.LAST_STAGE, Cause.SEQUENCE_LENGTH, Cause.GC,
                  Cause.PAUSES, Cause.NONE)


@dataclass(frozen=True)
class CalibrationBin:
    """Verdicts whose confidence lies in [low, high): how many, how many right."""

    low: float
    high: float
    count: int
    right: int

    @property
    def share(self) -> float | None:
        return self.right / self.count if self.count else None


@dataclass(frozen=True)
class Scores:
    """The evaluation's figures over a set of rows."""

    n: int
    right: int
    right_named: int
    right_cause: int
    worker_runs: int
    worker_right: int
    confusion: dict[str, dict[str, int]]
    calibration: tuple[CalibrationBin, ...]
    healthy_confident: int
    confident: int
    confident_right: int
    confident_wrong: int

    @property
    def accuracy(self) -> float | None:
        return self.right / self.n if self.n else None

    @property
    def named_accuracy(self) -> float | None:
        return self.right_named / self.n if self.n else None

    @property
    def confident_accuracy(self) -> float | None:
        return self.confident_right / self.confident if self.confident else None

    def targets(self) -> list[tuple[str, bool]]:
        """The issue's targets, each with whether it holds."""
        acc, conf = self.accuracy, self.confident_accuracy
        named = self.named_accuracy
        return [
            ("right cause (and worker) in >= 95% of runs, strict: the verdict's cause",
             acc is not None and acc >= 0.95),
            ("right cause (and worker) in >= 95% of runs, counting the cause named below the "
             "threshold", named is not None and named >= 0.95),
            (f"healthy runs: no cause with confidence >= {HEALTHY_LIMIT} (pauses under a hog "
             "allowed)",
             self.healthy_confident == 0),
            (f"confidence >= {CONFIDENT}: right in >= 95%", conf is None or conf >= 0.95),
            (f"no confident (>= {CONFIDENT}) wrong cause (pauses under a hog allowed)",
             self.confident_wrong == 0),
        ]


def score(rows: Iterable[EvalRow]) -> Scores:
    """Confusion matrix, worker accuracy, calibration and the targets' counts of ``rows``."""
    rows = list(rows)
    verdicts = [c.value for c in Cause]
    confusion: dict[str, dict[str, int]] = {}
    for r in rows:
        line = confusion.setdefault(r.expected, dict.fromkeys(verdicts, 0))
        line[r.cause] = line.get(r.cause, 0) + 1
    edges = (*CONFIDENCE_BINS, 1.0)
    bins = []
    for i, (low, high) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        last = i == len(edges) - 2
        inside = [r for r in rows
                  if low <= r.confidence < high or (last and r.confidence == high)]
        bins.append(CalibrationBin(low, high, len(inside), sum(r.right for r in inside)))
    workers = [r for r in rows if r.right_worker is not None]
    confident = [r for r in rows if r.confidence >= CONFIDENT]
    return Scores(
        n=len(rows), right=sum(r.right for r in rows),
        right_named=sum(r.right_named for r in rows),
        right_cause=sum(r.right_cause for r in rows), worker_runs=len(workers),
        worker_right=sum(bool(r.right_worker) for r in workers), confusion=confusion,
        calibration=tuple(bins),
        healthy_confident=sum(1 for r in rows if r.kind == "healthy"
                              and r.cause != Cause.NONE.value
                              and r.confidence >= HEALTHY_LIMIT
                              and not (r.hog > 0 and r.cause == Cause.PAUSES.value)),
        confident=len(confident), confident_right=sum(r.right for r in confident),
        confident_wrong=sum(r.confident_wrong for r in rows))


def _pct(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def format_report(rows: Sequence[EvalRow]) -> str:
    """Runs, confusion matrix, per-worker accuracy, calibration and targets, as markdown."""
    s = score(rows)
    out = ["| case | split | injected | expected | verdict | conf | S | right |",
           "|" + " --- |" * 8]
    for r in rows:
        verdict = r.cause + (f" [{' '.join(r.workers[:3])}]" if r.workers else "")
        if r.leading is not None:
            verdict += f" (leading: {r.leading}" + (
                f" [{' '.join(r.leading_workers[:3])}]" if r.leading_workers else "") + ")"
        expected = r.expected + (f" [{r.expected_worker}]" if r.expected_worker else "")
        right = "yes" if r.right else "named" if r.right_named else "NO"
        out.append(f"| {r.name} | {r.split} | {r.injected} | {expected} | {verdict} | "
                   f"{r.confidence:.2f} | {r.slowdown:.3f} | {right} |")
    used = [c.value for c in Cause if any(line.get(c.value) for line in s.confusion.values())]
    out += ["", "Confusion matrix (rows: expected cause; columns: verdict):", "",
            "| expected \\ verdict | " + " | ".join(used) + " | right |",
            "|" + " --- |" * (len(used) + 2)]
    for cause in [c.value for c in EXPECTED_ORDER if c.value in s.confusion]:
        line = s.confusion[cause]
        total = sum(line.values())
        out.append(f"| {cause} | " + " | ".join(str(line.get(c, 0)) for c in used)
                   + f" | {_pct(line.get(cause, 0), total)} |")
    out += ["", "Per-worker accuracy (runs with an injected slow worker):", "",
            "| case | injected | verdict blames | top exact S_w | right worker |",
            "|" + " --- |" * 5]
    for r in rows:
        if r.expected_worker is not None:
            out.append(f"| {r.name} | {r.expected_worker} | {' '.join(r.workers) or '-'} | "
                       f"{r.top_sw} | {'yes' if r.right_worker else 'NO'} |")
    out.append(f"\nright worker: {_pct(s.worker_right, s.worker_runs)}")
    out += ["", "Calibration (confidence bin -> share of verdicts right):", "",
            "| confidence | verdicts | right | share right |", "|" + " --- |" * 4]
    for b in s.calibration:
        hi = "]" if b.high == 1.0 else ")"
        share = "-" if b.share is None else f"{100 * b.share:.0f}%"
        out.append(f"| [{b.low:.2f}, {b.high:.2f}{hi} | {b.count} | {b.right} | {share} |")
    out += ["", f"right: {_pct(s.right, s.n)}; right counting the cause named below the "
            f"threshold: {_pct(s.right_named, s.n)}; right cause: {_pct(s.right_cause, s.n)}; "
            f"confidence >= {CONFIDENT}: right {_pct(s.confident_right, s.confident)}"]
    for split in SPLITS:
        part = [r for r in rows if r.split == split]
        if part:
            out.append(f"{split} runs: right {_pct(sum(r.right for r in part), len(part))}; "
                       "counting the cause named below the threshold "
                       f"{_pct(sum(r.right_named for r in part), len(part))}")
    out.append("")
    out += [f"- [{'x' if ok else ' '}] {text}" for text, ok in s.targets()]
    return "\n".join(out)
