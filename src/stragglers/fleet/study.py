"""The fleet study from inputs to outputs: discover the jobs, run the missing tasks (Dask
or sequential), gather every job's row from the store, write ``fleet.parquet``,
``report.html``, the figures and ``summary.json`` into the output folder together
(:class:`~stragglers.atomic.StagedDir`; the row store ``rows/`` stays for the next run)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stragglers.atomic import StagedDir
from stragglers.errors import InputError
from stragglers.fleet.discover import JobInput, discover
from stragglers.fleet.execute import Progress, RunStats, open_client, run_dask, run_sequential
from stragglers.fleet.figures import render_html, write_figures
from stragglers.fleet.parquet import NamedRow, write_table
from stragglers.fleet.rowstore import RowStore
from stragglers.fleet.stats import FleetStats, fleet_stats


@dataclass(frozen=True)
class StudyOutputs:
    stats: FleetStats
    rows: tuple[NamedRow, ...]
    files: tuple[Path, ...]


@dataclass(frozen=True)
class Study:
    """What :func:`run_study` wrote, what the run did and the row store's folder."""

    outputs: StudyOutputs
    run: RunStats
    store: Path


def gather(jobs: Sequence[JobInput], keys: Sequence[str], store: RowStore
           ) -> tuple[NamedRow, ...]:
    """Every job's row, from the store, in ``jobs`` order."""
    return tuple(NamedRow(j.name, k, store.get(k)) for j, k in zip(jobs, keys, strict=True))


def write_study(rows: Sequence[NamedRow], out: str | Path,
                run: RunStats | None = None) -> StudyOutputs:
    """Write the table, the report and the summary of ``rows`` into ``out``."""
    stats = fleet_stats(rows)
    summary: dict[str, object] = dict(stats.summary())
    summary["headlines"] = stats.headlines()
    if run is not None:
        summary["run"] = {"computed": run.computed, "reused": run.reused,
                          "wall_s": round(run.wall_s, 3)}
    with StagedDir(out) as stage:
        write_table(rows, stage.path("fleet.parquet"))
        figures = write_figures(stats, stage.staging)
        stage.path("report.html").write_text(render_html(stats, figures), encoding="utf-8")
        stage.path("summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
        stage.commit_last("summary.json")
        names = ["fleet.parquet", *figures, "report.html", "summary.json"]
    return StudyOutputs(stats, tuple(rows), tuple(stage.final(n) for n in names))


def run_study(inputs: list[str], out: str | Path, scheduler: str | None = None,
              workers: int = 2, sequential: bool = False, exact_sw: bool = False,
              progress: Progress | None = None) -> Study:
    """The study: discover the jobs of ``inputs``, analyse those not in ``out``'s row store
    (in this process with ``sequential``, else on the Dask cluster at ``scheduler`` or on an
    embedded one of ``workers`` workers), then :func:`write_study` every job's row."""
    if scheduler is not None and not scheduler.strip():
        raise InputError("--scheduler: empty address")
    jobs = discover(inputs)
    store = RowStore(out)
    if sequential:
        keys, run = run_sequential(jobs, store, exact_sw, progress)
    else:
        with open_client(scheduler, workers) as client:
            keys, run = run_dask(jobs, store, client, exact_sw, progress)
    return Study(write_study(gather(jobs, keys, store), out, run), run, store.root)
