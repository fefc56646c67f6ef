"""Files written by an analysis: result JSON, heatmaps, original and ideal timelines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from stragglers.analysis.model import WhatIfModel
from stragglers.analysis.result import write_result
from stragglers.trace.schema import OPTYPES
from stragglers.viz.heatmap import plot_step_heatmap, plot_worker_heatmap
from stragglers.viz.timeline import stack_steps, write_chrome_trace

#: Timelines above this many ops are not written by ``analyze`` (use ``--steps``).
TIMELINE_MAX_OPS = 2_000_000
TIMELINES = ("original", "no-delay", "ideal")


def timeline_frame(model: WhatIfModel, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """Ops of all workers as a frame; ``start``/``end`` have shape (n_nodes, dp, S)."""
    t = model.table
    n, dp, s = start.shape
    node = np.repeat(np.arange(n), dp * s)
    d = np.tile(np.repeat(np.arange(dp), s), n)
    step = np.tile(t.steps, n * dp)
    codes = t.node_optype[node]
    return pd.DataFrame({
        "dp_rank": d, "stage": t.node_stage[node], "step": step,
        "optype": pd.Categorical.from_codes(codes, categories=list(OPTYPES)),
        "seq_id": t.node_seq[node], "mb_id": t.node_mb[node],
        "start": start.ravel().astype(np.float64), "end": end.ravel().astype(np.float64),
    })


def simulated_times(model: WhatIfModel, which: str) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (n_nodes, dp, S) of the original, no-delay or ideal timeline."""
    t = model.table
    if which == "original":
        start = t.start.astype(np.float64)
        start -= start.min(axis=(0, 1), keepdims=True)
        return start, start + t.duration
    if which not in TIMELINES:
        raise ValueError(f"unknown timeline {which!r}; choose from {', '.join(TIMELINES)}")
    dp = model.dp
    mask = None if which == "no-delay" else np.zeros((t.n_nodes, 1), dtype=bool)
    res = model.timeline(model.mixed(np.arange(dp)[None], node_mask=mask))
    assert res.start is not None and res.end is not None
    return res.start[:, 0], res.end[:, 0]


def write_timelines(model: WhatIfModel, out: Path, which: tuple[str, ...] = ("original",
                    "ideal"), max_ops: int | None = TIMELINE_MAX_OPS) -> dict[str, Any]:
    """Write Perfetto timelines; returns {name: path} and skipped entries with reasons."""
    n_ops = model.table.n_nodes * model.dp * model.n_steps
    written: dict[str, Any] = {}
    if max_ops is not None and n_ops > max_ops:
        for w in which:
            written[f"timeline_{w}"] = {
                "skipped": f"{n_ops:,} ops exceed the timeline limit of {max_ops:,}; "
                           "use `stragglers timeline --steps A-B` for a window"}
        return written
    meta = model.table.meta.to_dict()
    for w in which:
        start, end = simulated_times(model, w)
        frame = stack_steps(timeline_frame(model, start, end))
        path = out / f"timeline-{w}.json"
        write_chrome_trace(frame, path, name=f"{meta['trial_name']} {w}",
                           metadata={"job": meta, "timeline": w})
        written[f"timeline_{w}"] = str(path)
    return written


def write_heatmaps(result: dict[str, Any], out: Path) -> dict[str, str]:
    """Worker heatmap (DP × PP, like the paper's Fig. 14) and per-step heatmaps."""
    job = result["job"]
    dp, pp = job["dp_size"], job["pp_size"]
    grid = np.full((pp, dp), np.nan)
    for key, v in result["attribution"]["worker"].items():
        d, s = (int(x) for x in key.split(","))
        grid[s, d] = v
    highlight = [(int(w.split(",")[0]), int(w.split(",")[1])) for w in result["verdict"]["workers"]]
    method = result["attribution"]["worker_method"]
    paths = {"heatmap": str(plot_worker_heatmap(
        grid, out / "heatmap.png", highlight=highlight[: dp * pp],
        title=f"{job['trial_name']}: worker slowdown S_w ({method}), S = "
              f"{result['slowdown']:.3f}, verdict {result['verdict']['cause']}"))}
    steps = list(result["attribution_per_step"])
    for by, label in (("dp_rank", "DP rank"), ("stage", "PP stage")):
        keys = list(result["attribution_per_step"][steps[0]][by])
        vals = np.array([[result["attribution_per_step"][st][by][k] for k in keys]
                         for st in steps])
        paths[f"heatmap_steps_{by}"] = str(plot_step_heatmap(
            vals, step_labels=steps, column_labels=keys, column_title=label,
            path=out / f"heatmap-steps-{by.replace('_', '-')}.png",
            title=f"{job['trial_name']}: per-step slowdown by {label}"))
    return paths


def write_outputs(model: WhatIfModel, result: dict[str, Any], out: str | Path,
                  timelines: bool = True, max_timeline_ops: int | None = TIMELINE_MAX_OPS
                  ) -> dict[str, Any]:
    """Write result.json, heatmaps and timelines into ``out``; returns the file map,
    which is also stored in ``result["outputs"]``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {"result": str(out / "result.json")}
    files.update(write_heatmaps(result, out))
    if timelines:
        files.update(write_timelines(model, out, max_ops=max_timeline_ops))
    result["outputs"] = files
    write_result(result, out / "result.json")
    return files
