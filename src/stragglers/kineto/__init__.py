"""Import PyTorch profiler (Kineto) traces, one Chrome-trace JSON per rank, into the schema.

``import_kineto(DIR, meta)`` streams every rank file (:mod:`.reader`), turns each into
operations (:mod:`.rankops`, ranks in parallel processes), and combines them job-wide
(:mod:`.assemble`): the result is a :class:`~stragglers.trace.io.TraceColumns` for
``stragglers analyze`` and an :class:`~.assemble.ImportReport` that counts everything not
used. The mapping table is in docs/guides/kineto.md.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TypeVar

from stragglers.errors import InputError
from stragglers.kineto.assemble import ImportReport, assemble
from stragglers.kineto.patterns import Patterns, load_patterns
from stragglers.kineto.rankops import RankOps, rank_ops
from stragglers.kineto.reader import not_regular, read_rank_file
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

    ev = read_rank_file(path, patterns, keep if meta.tp_size * meta.dsp_size > 1 else None)
    if ev.skipped:
        return RankOps.skipped_rank(ev)
    return rank_ops(ev)


def _map_files(work: Callable[[Path], T], files: list[Path], jobs: int | None) -> list[T]:
    """``work`` of every rank file, in parallel processes (``jobs``, default one per core)."""
    n_jobs = max(1, min(jobs or (os.cpu_count() or 1), len(files)))
    if n_jobs == 1:
        return [work(f) for f in files]
    with ProcessPoolExecutor(max_workers=n_jobs) as pool:
        return list(pool.map(work, files))


def import_kineto(path: str | Path, meta: JobMeta, *, annotations: str | Path | None = None,
                  steps: tuple[int, int] | None = None,
                  jobs: int | None = None) -> tuple[TraceColumns, ImportReport]:
    """Read a job's per-rank profiler traces into one trace (see the module docstring)."""
    if meta.vpp_size > 1:
        raise InputError("metadata: vpp_size > 1 (interleaved pipeline) is not supported by "
                         "the profiler importer: model chunks are not recorded in the trace")
    files = find_rank_files(path)
    patterns = load_patterns(annotations)
    all_ops = _map_files(functools.partial(_one, patterns=patterns, meta=meta), files, jobs)
    return assemble(all_ops, meta, str(path), steps)


def import_partial(path: str | Path, meta: JobMeta, *, annotations: str | Path | None = None,
                   steps: tuple[int, int] | None = None,
                   jobs: int | None = None) -> dict[str, object]:
    """The per-rank report of a partial job (``--partial``, :mod:`.partial`)."""
    from stragglers.kineto.partial import partial_report, read_partial_rank

    files = find_rank_files(path)
    patterns = load_patterns(annotations)
    ranks = _map_files(functools.partial(read_partial_rank, patterns=patterns), files, jobs)
    return partial_report(ranks, meta, str(path), steps)


def import_to_folder(path: str | Path, meta_path: str | Path, out: str | Path, *,
                     annotations: str | Path | None = None, steps: str | None = None,
                     jobs: int | None = None, partial: bool = False
                     ) -> tuple[list[str], list[Path]]:
    """``stragglers import kineto``: read the metadata YAML and the steps ``A-B``, import the
    traces of ``path`` and write ``OUT/trace.parquet`` and ``OUT/meta.yaml`` (with
    ``partial``: ``OUT/partial-report.json``, :func:`import_partial`) atomically. Returns the
    report's lines and the files written."""
    import json

    from stragglers.atomic import StagedDir, check_out_dir, write_text
    from stragglers.kineto.partial import REPORT_NAME, report_lines
    from stragglers.trace.io import parse_steps, read_meta, write_meta, write_trace

    check_out_dir(out)
    span = parse_steps(steps)
    meta = read_meta(meta_path)
    if partial:
        doc = import_partial(path, meta, annotations=annotations, steps=span, jobs=jobs)
        with StagedDir(out) as stage:
            write_text(stage.path(REPORT_NAME), json.dumps(doc, indent=1) + "\n")
        return report_lines(doc), [stage.final(REPORT_NAME)]
    trace, report = import_kineto(path, meta, annotations=annotations, steps=span, jobs=jobs)
    with StagedDir(out) as stage:
        write_meta(meta, stage.path("meta.yaml"))
        write_trace(trace, stage.path("trace.parquet"))
        stage.commit_last("trace.parquet")
    return report.lines(), [stage.final("trace.parquet"), stage.final("meta.yaml")]
