"""Pictures and timelines for the what-if analyzer.

* :mod:`stragglers.viz.heatmap` — DP x PP worker heatmap (paper Fig. 14) and per-step heatmap,
  written as PNG with matplotlib's Agg canvas.
* :mod:`stragglers.viz.timeline` — Chrome / Perfetto trace-event JSON of an operation trace
  (one process per DP rank, one track per worker) and its reader.
"""

from typing import Any

from stragglers.viz.heatmap import (
    grid_from_worker_keys,
    plot_step_heatmap,
    plot_worker_heatmap,
    step_heatmap_figure,
    worker_heatmap_figure,
)

#: Names of :mod:`stragglers.viz.timeline`, imported on first use (it imports pandas: about
#: a second of start-up that drawing heatmaps does not need).
_TIMELINE = ("op_category", "read_chrome_trace", "stack_steps", "write_chrome_trace")


def __getattr__(name: str) -> Any:
    if name in _TIMELINE:
        from stragglers.viz import timeline

        return getattr(timeline, name)
    raise AttributeError(f"module 'stragglers.viz' has no attribute {name!r}")


__all__ = [
    "grid_from_worker_keys",
    "op_category",
    "plot_step_heatmap",
    "plot_worker_heatmap",
    "read_chrome_trace",
    "stack_steps",
    "step_heatmap_figure",
    "worker_heatmap_figure",
    "write_chrome_trace",
]
