"""The heatmaps of an analysis: the DP × PP worker map (paper Fig. 14) and the per-step maps
by DP rank and by stage.

:class:`HeatmapData` holds what they show; it is made from an
:class:`~stragglers.analysis.result.AnalysisResult` or, at the edge, from a result.json
document (checked field by field, so that a broken file is a one-line user error).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.analysis.result import AnalysisResult
from stragglers.analysis.workers import Worker
from stragglers.errors import InputError
from stragglers.inputs import read_text
from stragglers.limits import check_limit
from stragglers.viz.heatmap import plot_step_heatmap, plot_worker_heatmap

#: Per-step heatmaps: by DP rank and by PP stage (file name part, axis title).
STEP_MAPS = (("dp_rank", "DP rank"), ("stage", "PP stage"))


@dataclass(frozen=True)
class HeatmapData:
    """``worker`` (pp, dp): S_w per worker; ``per_step[by]`` (n_steps, n_columns) per-step
    slowdowns by DP rank / stage; ``highlight``: the verdict's workers."""

    name: str
    dp: int
    pp: int
    worker: np.ndarray
    method: str
    slowdown: float
    cause: str
    highlight: tuple[Worker, ...]
    steps: tuple[str, ...]
    per_step: Mapping[str, np.ndarray]

    @classmethod
    def of(cls, result: AnalysisResult) -> HeatmapData:
        m = result.metrics
        return cls(
            name=result.job.trial_name, dp=m.dp, pp=m.pp, worker=m.worker_slowdown.T.copy(),
            method=m.worker_method, slowdown=m.slowdown, cause=result.verdict.cause.value,
            highlight=result.verdict.workers,
            steps=tuple(str(int(s)) for s in m.steps),
            per_step={"dp_rank": (m.attr_dp / m.ideal).T, "stage": (m.attr_stage / m.ideal).T})

    @classmethod
    def from_file(cls, path: str | Path) -> HeatmapData:
        """Read a result.json file written by ``stragglers analyze`` (:meth:`from_document`);
        a file that is not one is an InputError that suggests giving ``--meta``."""
        path = Path(path)
        try:
            doc = json.loads(read_text(path, "result.json"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not a result.json: invalid JSON at line {exc.lineno} "
                             "(give --meta to analyse a trace)") from None
        except RecursionError:
            raise InputError(f"{path}: not a result.json: nested too deeply") from None
        except ValueError as exc:  # e.g. an integer literal too long to convert
            raise InputError(f"{path}: not a result.json: {exc}") from None
        return cls.from_document(doc, str(path))

    @classmethod
    def from_document(cls, doc: Any, source: str) -> HeatmapData:
        """Read a result.json document; every problem is an InputError naming the field."""
        reader = _Reader(source)
        doc = reader.mapping(doc, "(document)")
        job = reader.mapping(reader.get(doc, "job"), "job")
        dp = reader.positive_int(reader.get(job, "dp_size"), "job.dp_size")
        pp = reader.positive_int(reader.get(job, "pp_size"), "job.pp_size")
        check_limit("workers", dp * pp, f"{source}: job.dp_size x job.pp_size")
        name = str(job.get("trial_name", "job"))
        att = reader.mapping(reader.get(doc, "attribution"), "attribution")
        workers = reader.mapping(reader.get(att, "worker"), "attribution.worker")
        grid = np.full((pp, dp), np.nan)
        for key, value in workers.items():
            w = reader.worker(key, dp, pp, f"attribution.worker[{key!r}]")
            grid[w.stage, w.dp_rank] = reader.number(value, f"attribution.worker[{key!r}]")
        verdict = reader.mapping(reader.get(doc, "verdict"), "verdict")
        cause = reader.get(verdict, "cause")
        if not isinstance(cause, str):
            raise InputError(f"{source}: field 'verdict.cause' must be a string")
        wlist = verdict.get("workers", [])
        if not isinstance(wlist, list):
            raise InputError(f"{source}: field 'verdict.workers' must be a list")
        highlight = tuple(reader.worker(k, dp, pp, "verdict.workers") for k in wlist)
        per_step_doc = reader.mapping(reader.get(doc, "attribution_per_step"),
                                      "attribution_per_step")
        steps = tuple(per_step_doc)
        check_limit("table_cells", len(steps) * max(dp, pp), f"{source}: attribution_per_step")
        per_step: dict[str, np.ndarray] = {}
        for by, size in (("dp_rank", dp), ("stage", pp)):
            arr = np.full((len(steps), size), np.nan)
            for i, st in enumerate(steps):
                row = reader.mapping(per_step_doc[st], f"attribution_per_step[{st!r}]")
                cells = reader.mapping(reader.get(row, by), f"attribution_per_step[{st!r}].{by}")
                for key, value in cells.items():
                    where = f"attribution_per_step[{st!r}].{by}[{key!r}]"
                    col = reader.index(key, size, where)
                    arr[i, col] = reader.number(value, where)
            per_step[by] = arr
        method = att.get("worker_method", "exact")
        return cls(name=name, dp=dp, pp=pp, worker=grid, method=str(method),
                   slowdown=reader.number(reader.get(doc, "slowdown"), "slowdown"),
                   cause=cause, highlight=highlight, steps=steps, per_step=per_step)


class _Reader:
    """Typed access to a JSON document with one-line errors naming the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, field: str, what: str) -> InputError:
        return InputError(f"{self.source}: field '{field}' {what}")

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"must be an object, got {type(value).__name__}")
        return value

    def get(self, obj: dict[str, Any], key: str) -> Any:
        if key not in obj:
            raise InputError(f"{self.source}: not a stragglers result: key '{key}' is missing")
        return obj[key]

    def positive_int(self, value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(field, f"must be a positive integer, got {value!r:.40}")
        return value

    def number(self, value: Any, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(field, f"must be a number, got {value!r:.40}")
        try:
            x = float(value)
        except OverflowError:
            raise self.fail(field, "is too large a number") from None
        if not math.isfinite(x):
            raise self.fail(field, f"must be finite, got {x}")
        return x

    def index(self, key: str, size: int, field: str) -> int:
        try:
            i = int(key)
        except ValueError:
            raise self.fail(field, "is not an integer key") from None
        if not 0 <= i < size:
            raise self.fail(field, f"is outside 0..{size - 1}")
        return i

    def worker(self, key: Any, dp: int, pp: int, field: str) -> Worker:
        try:
            w = Worker.parse(str(key))
        except ValueError:
            raise self.fail(field, f"has {key!r:.40} where a worker 'dp,stage' is expected"
                            ) from None
        if not (0 <= w.dp_rank < dp and 0 <= w.stage < pp):
            raise self.fail(field, f"names worker {w.key}, outside dp {dp} x pp {pp}")
        return w


def write_heatmaps(data: HeatmapData, folder: Path) -> dict[str, Path]:
    """Draw the worker heatmap and the per-step heatmaps into ``folder``."""
    paths = {"heatmap": plot_worker_heatmap(
        data.worker, folder / "heatmap.png", highlight=list(data.highlight[: data.dp * data.pp]),
        title=f"{data.name}: worker slowdown S_w ({data.method}), S = {data.slowdown:.3f}, "
              f"verdict {data.cause}")}
    if not data.steps:
        return paths
    for by, label in STEP_MAPS:
        values = data.per_step[by]
        paths[f"heatmap_steps_{by}"] = plot_step_heatmap(
            values, step_labels=list(data.steps),
            column_labels=[str(i) for i in range(values.shape[1])], column_title=label,
            path=folder / f"heatmap-steps-{by.replace('_', '-')}.png",
            title=f"{data.name}: per-step slowdown by {label}")
    return paths
