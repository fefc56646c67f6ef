"""The output folder of an analysis: result.json, heatmaps, timelines and report.html (one
self-contained page, :mod:`stragglers.viz.report`), written all together or not at all
(:class:`stragglers.atomic.StagedDir`), result.json last; and the folders of heatmaps or
timelines alone (``stragglers heatmap``, ``stragglers timeline``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from stragglers.analysis.engine import WhatIfEngine, prepare
from stragglers.analysis.heatmaps import HeatmapData, write_heatmaps
from stragglers.analysis.result import AnalysisResult, Skipped
from stragglers.analysis.runner import analyze_files, load_table
from stragglers.analysis.timelines import TIMELINE_MAX_OPS, timeline_ops, write_timeline
from stragglers.atomic import StagedDir, write_text
from stragglers.phases import phase
from stragglers.viz.report import REPORT_FILE, render_report

RESULT_FILE = "result.json"


def write_outputs(engine: WhatIfEngine, result: AnalysisResult, out: str | Path,
                  timelines: tuple[str, ...] = ("original", "ideal"),
                  max_timeline_ops: int | None = TIMELINE_MAX_OPS) -> AnalysisResult:
    """Write result.json, the heatmaps, ``timelines`` and report.html into ``out``; returns
    the result with its ``outputs`` (file paths, or the reason an output was skipped).

    On any failure ``out`` is left as it was (files of an earlier analysis stay whole and
    are not mixed with new ones).
    """
    folder = Path(out)
    files: dict[str, str | Skipped] = {}
    with StagedDir(folder) as stage:
        data = HeatmapData.of(result)
        with phase("heatmaps"):
            staged = write_heatmaps(data, stage.staging)
        for name, path in staged.items():
            files[name] = str(stage.final(path.name))
        n_ops = timeline_ops(engine)
        for which in timelines:
            key = f"timeline_{which}"
            if max_timeline_ops is not None and n_ops > max_timeline_ops:
                files[key] = Skipped(f"{n_ops:,} ops exceed the timeline limit of "
                                     f"{max_timeline_ops:,}; use `stragglers timeline "
                                     "--steps A-B` for a window")
                continue
            name = f"timeline-{which}.json"
            with phase("timelines"):
                write_timeline(engine, which, stage.path(name))
            files[key] = str(stage.final(name))
        files["report"] = str(stage.final(REPORT_FILE))
        files["result"] = str(stage.final(RESULT_FILE))
        done = dataclasses.replace(result, outputs=files)
        with phase("document"):
            doc = done.to_document()
        with phase("report.html"):
            write_text(stage.path(REPORT_FILE), render_report(doc, data=data))
        with phase("result.json"):
            write_text(stage.path(RESULT_FILE), json.dumps(doc, indent=1, allow_nan=False))
        with phase("commit"):
            stage.commit_last(RESULT_FILE)
    return done


def write_timeline_files(trace_path: str | Path, meta_path: str | Path, out: str | Path,
                         which: Sequence[str] = ("original", "ideal"),
                         steps: str | tuple[int, int] | None = None) -> list[tuple[str, Path]]:
    """Write the ``which`` timelines of a trace into ``out`` (together or not at all); their
    output keys (``timeline_original``, ...) and paths, in ``which`` order."""
    engine = prepare(load_table(trace_path, meta_path, steps))
    with StagedDir(out) as stage:
        for name in which:
            write_timeline(engine, name, stage.path(f"timeline-{name}.json"))
    return [(f"timeline_{name}", stage.final(f"timeline-{name}.json")) for name in which]


def write_heatmap_files(source: str | Path, out: str | Path, meta_path: str | Path | None = None,
                        steps: str | tuple[int, int] | None = None) -> dict[str, Path]:
    """Draw the heatmaps of a result.json ``source``, or of the analysis of the trace
    ``source`` with its ``meta_path``, into ``out`` (together or not at all); their paths by
    output key."""
    if meta_path is None:
        data = HeatmapData.from_file(source)
    else:
        data = HeatmapData.of(analyze_files(source, meta_path, steps))
    with StagedDir(out) as stage:
        files = write_heatmaps(data, stage.staging)
    return {name: stage.final(path.name) for name, path in files.items()}
