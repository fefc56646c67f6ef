"""Timelines of an analysis for Perfetto / chrome://tracing: the trace as recorded
(``original``) and as simulated without launch delays (``no-delay``) and without stragglers
(``ideal``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from stragglers.analysis.engine import WhatIfEngine
from stragglers.analysis.scenarios import Scenario
from stragglers.trace.schema import OPTYPES

if TYPE_CHECKING:
    import pandas as pd

# pandas and the timeline writer are imported when a timeline is written (about a second
# of start-up that `analyze` of a trace beyond the timeline limit does not need).

#: Timelines above this many ops are not written by ``analyze`` (use ``--steps``).
TIMELINE_MAX_OPS = 2_000_000
TIMELINES = ("original", "no-delay", "ideal")


def timeline_frame(engine: WhatIfEngine, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """Ops of all workers as a frame; ``start``/``end`` have shape (n_nodes, dp, n_steps)."""
    import pandas as pd

    t = engine.table
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


def simulated_times(engine: WhatIfEngine, which: str) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (n_nodes, dp, n_steps) of the original, no-delay or ideal timeline."""
    t = engine.table
    if which == "original":
        start = t.start.astype(np.float64)
        start -= start.min(axis=(0, 1), keepdims=True)
        return start, start + t.duration
    if which not in TIMELINES:
        raise ValueError(f"unknown timeline {which!r}; choose from {', '.join(TIMELINES)}")
    scenario = Scenario.original("no-delay") if which == "no-delay" else Scenario(
        "ideal", nodes=np.zeros(engine.n_nodes, dtype=bool))
    res = engine.timeline(scenario)
    assert res.start is not None and res.end is not None
    return res.start[:, 0], res.end[:, 0]


def timeline_ops(engine: WhatIfEngine) -> int:
    """Number of ops a timeline of this engine has."""
    return engine.n_nodes * engine.dp * engine.n_steps


def write_timeline(engine: WhatIfEngine, which: str, path: Path) -> Path:
    """Write one timeline as Chrome/Perfetto trace-event JSON.

    The model keeps small negative transfer durations (a collective whose recorded end is a
    little before its last member's start: whatif-model.md, clipping); a timeline cannot draw
    them, so they are drawn with zero length and counted in ``otherData.metadata``
    (``negative_durations_drawn_as_zero``)."""
    meta = engine.table.meta.to_dict()
    start, end = simulated_times(engine, which)
    negative = int(np.count_nonzero(end < start))
    if negative:
        end = np.maximum(end, start)
    from stragglers.viz.timeline import stack_steps, write_chrome_trace

    frame = stack_steps(timeline_frame(engine, start, end))
    return write_chrome_trace(frame, path, name=f"{meta['trial_name']} {which}",
                              metadata={"job": meta, "timeline": which,
                                        "negative_durations_drawn_as_zero": negative})
