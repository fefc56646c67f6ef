"""Pictures and timelines for the what-if analyzer.

* :mod:`stragglers.viz.heatmap` — DP x PP worker heatmap (paper Fig. 14) and per-step heatmap,
  written as PNG with matplotlib's Agg canvas.
* :mod:`stragglers.viz.timeline` — Chrome / Perfetto trace-event JSON of an operation trace
  (one process per DP rank, one track per worker) and its reader.
"""

from stragglers.viz.heatmap import (
    grid_from_worker_keys,
    plot_step_heatmap,
    plot_worker_heatmap,
    step_heatmap_figure,
    worker_heatmap_figure,
)
from stragglers.viz.timeline import (
    op_category,
    read_chrome_trace,
    stack_steps,
    write_chrome_trace,
)

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
