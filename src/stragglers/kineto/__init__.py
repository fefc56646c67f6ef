"""Import PyTorch profiler (Kineto) traces, one Chrome-trace JSON per rank, into the schema.

``import_kineto(DIR, meta)`` streams every rank file (:mod:`.reader`), turns each into
operations (:mod:`.rankops`, ranks in parallel processes), and combines them job-wide
(:mod:`.assemble`): the result is a :class:`~stragglers.trace.io.TraceColumns` for
``stragglers analyze`` and an :class:`~.assemble.ImportReport` that counts everything not
used. The mapping table is in docs/guides/kineto.md.

The rank files are parsed in local processes (``jobs``) or, with ``scheduler``, as tasks on
an existing Dask cluster (:func:`_map_dask`): one task per rank file, read by the worker at
its absolute path (a file system shared by the workers and this process is assumed, as for
``fleet`` and ``serve --scheduler``); a task returns the rank's operations and counts
(:class:`~.rankops.RankOps`), never its events, so the importing process holds ops only.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from stragglers.errors import InputError
from stragglers.kineto.assemble import ImportReport, assemble
from stragglers.kineto.patterns import Patterns, load_patterns
from stragglers.kineto.rankops import RankOps
from stragglers.kineto.reader import not_regular
from stragglers.kineto.windowed import read_rank_ops
from stragglers.limits import check_limit
from stragglers.trace.io import JobMeta, TraceColumns

T = TypeVar("T")

__all__ = ["ImportReport", "find_rank_files", "import_kineto", "import_partial", "import_to_folder",
           "load_patterns"]

SUFFIXES = (".json", ".json.gz")


def find_rank_files(path: str | Path) -> list[Path]:
    """The trace files of a folder (``*.json``, ``*.json.gz``), or the one file given.

    Regular files only (or links to them): a FIFO, a device or a socket, given or named
    like a rank file in the folder, would block the import or never end, and a broken or
    looping link cannot be read; each is refused in one line before anything is read."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{p}: no such folder or file") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return [p]
    if not stat.S_ISDIR(mode):
        raise not_regular(p, mode)
    try:
        names = sorted(f.name for f in p.iterdir()
                       if f.name.endswith(SUFFIXES) and not f.name.startswith("."))
    except OSError as exc:
        raise InputError(f"{p}: cannot list the folder ({exc.strerror or exc})") from None
    if not names:
        raise InputError(f"{p}: no profiler trace files (*.json, *.json.gz) in the folder")
    check_limit("kineto_files", len(names), str(p))
    files = [p / name for name in names]
    for f in files:
        try:
            mode = f.stat().st_mode
        except OSError as exc:
            link = "a broken or looping link: " if f.is_symlink() else ""
            raise InputError(f"{f}: cannot read the trace file ({link}"
                             f"{exc.strerror or exc})") from None
        if not stat.S_ISREG(mode):
            raise not_regular(f, mode)
    return files


def _one(path: Path, patterns: Patterns, meta: JobMeta) -> RankOps:
    from stragglers.kineto.layout import position

    def keep(info_rank: int, info: dict[str, object]) -> bool:
        pg = info.get("pg_config")
        return position(info_rank, pg if isinstance(pg, list) else [], meta,
                        str(path)).inner == 0

    # in windows of whole steps when the file's events would take more than BUDGET
    return read_rank_ops(path, patterns,
                         keep if meta.tp_size * meta.dsp_size > 1 else None)


#: Tasks in flight per Dask worker thread (submitted as earlier ones finish).
WINDOW_PER_THREAD = 2


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def _map_dask(work: Callable[[Path], T], files: list[Path], scheduler: str) -> list[T]:
    """``work`` of every rank file as tasks on the Dask cluster at ``scheduler``, at most
    :data:`WINDOW_PER_THREAD` x its worker threads in flight (so that finished results,
    not queued ones, are what this process holds). The workers read the files at their
    absolute paths. A user error in a task (an :class:`InputError` naming the file) is
    raised here; the tasks not yet finished are cancelled."""
    try:
        from distributed import KilledWorker, as_completed
    except ImportError:
        raise InputError("--scheduler needs dask[distributed]: pip install "
                         "'stragglers[fleet]'") from None
    from stragglers.fleet.execute import open_client

    paths = [f.resolve() for f in files]
    with contextlib.ExitStack() as stack:
        try:
            client: Any = stack.enter_context(open_client(scheduler))
        except InputError as exc:
            raise InputError(_one_line(str(exc))) from None
        threads = sum(w.get("nthreads", 1)
                      for w in client.scheduler_info().get("workers", {}).values())
        window = WINDOW_PER_THREAD * max(1, threads)
        out: list[Any] = [None] * len(paths)
        index: dict[str, int] = {}
        pending = iter(enumerate(paths))
        ac = as_completed()
        running: dict[str, Any] = {}

        def submit_next() -> None:
            item = next(pending, None)
            if item is not None:
                i, path = item
                fut = client.submit(work, path, key=f"kineto-{uuid.uuid4().hex}-{i}",
                                    pure=False)
                index[fut.key] = i
                running[fut.key] = fut
                ac.add(fut)

        for _ in range(window):
            submit_next()
        try:
            for fut in ac:
                i = index.pop(fut.key)
                try:
                    out[i] = fut.result()
                except KilledWorker as exc:
                    raise InputError(f"{paths[i]}: the Dask workers reading it died "
                                     f"({_one_line(str(exc))}; above the workers' memory "
                                     "limit?)") from None
                del running[fut.key]
                fut.release()
                submit_next()
        except BaseException:
            client.cancel(list(running.values()))
            raise
        return out


def _map_files(work: Callable[[Path], T], files: list[Path], jobs: int | None,
               scheduler: str | None = None) -> list[T]:
    """``work`` of every rank file, in parallel processes (``jobs``, default one per core),
    or as tasks on the Dask cluster at ``scheduler`` (:func:`_map_dask`)."""
    if scheduler is not None:
        return _map_dask(work, files, scheduler)
    n_jobs = max(1, min(jobs or (os.cpu_count() or 1), len(files)))
    if n_jobs == 1:
        return [work(f) for f in files]
    with ProcessPoolExecutor(max_workers=n_jobs) as pool:
        return list(pool.map(work, files))


def import_kineto(path: str | Path, meta: JobMeta, *, annotations: str | Path | None = None,
                  steps: tuple[int, int] | None = None, jobs: int | None = None,
                  scheduler: str | None = None) -> tuple[TraceColumns, ImportReport]:
    """Read a job's per-rank profiler traces into one trace (see the module docstring);
    the files are parsed in ``jobs`` local processes, or on the Dask cluster at
    ``scheduler``."""
    if meta.vpp_size > 1:
        raise InputError("metadata: vpp_size > 1 (interleaved pipeline) is not supported by "
                         "the profiler importer: model chunks are not recorded in the trace")
    files = find_rank_files(path)
    patterns = load_patterns(annotations)
    all_ops = _map_files(functools.partial(_one, patterns=patterns, meta=meta), files, jobs,
                         scheduler)
    return assemble(all_ops, meta, str(path), steps)


def import_partial(path: str | Path, meta: JobMeta, *, annotations: str | Path | None = None,
                   steps: tuple[int, int] | None = None, jobs: int | None = None,
                   scheduler: str | None = None) -> dict[str, object]:
    """The per-rank report of a partial job (``--partial``, :mod:`.partial`)."""
    from stragglers.kineto.partial import partial_report, read_partial_rank

    files = find_rank_files(path)
    patterns = load_patterns(annotations)
    ranks = _map_files(functools.partial(read_partial_rank, patterns=patterns), files, jobs,
                       scheduler)
    return partial_report(ranks, meta, str(path), steps)


def import_to_folder(path: str | Path, meta_path: str | Path, out: str | Path, *,
                     annotations: str | Path | None = None, steps: str | None = None,
                     jobs: int | None = None, partial: bool = False,
                     scheduler: str | None = None) -> tuple[list[str], list[Path]]:
    """``stragglers import kineto``: read the metadata YAML and the steps ``A-B``, import the
    traces of ``path`` and write ``OUT/trace.parquet`` and ``OUT/meta.yaml`` (with
    ``partial``: ``OUT/partial-report.json``, :func:`import_partial`) atomically. Returns the
    report's lines and the files written. ``scheduler``: parse the rank files on that Dask
    cluster (:func:`_map_dask`)."""
    import json

    from stragglers.atomic import StagedDir, check_out_dir, write_text
    from stragglers.kineto.partial import REPORT_NAME, report_lines
    from stragglers.trace.io import parse_steps, read_meta, write_meta, write_trace

    check_out_dir(out)
    span = parse_steps(steps)
    meta = read_meta(meta_path)
    if partial:
        doc = import_partial(path, meta, annotations=annotations, steps=span, jobs=jobs,
                             scheduler=scheduler)
        with StagedDir(out) as stage:
            write_text(stage.path(REPORT_NAME), json.dumps(doc, indent=1) + "\n")
        return report_lines(doc), [stage.final(REPORT_NAME)]
    trace, report = import_kineto(path, meta, annotations=annotations, steps=span, jobs=jobs,
                                  scheduler=scheduler)
    with StagedDir(out) as stage:
        write_meta(meta, stage.path("meta.yaml"))
        write_trace(trace, stage.path("trace.parquet"))
        stage.commit_last("trace.parquet")
    return report.lines(), [stage.final("trace.parquet"), stage.final("meta.yaml")]
