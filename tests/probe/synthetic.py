"""Hand-written probe rank files of a tiny 1F1B job (dp 1 or 2, pp 2, 2 microbatches).

The events are placed on one global timeline, so every dependency of the what-if model
holds; ``skew`` shifts a worker's local clock and records the matching clock offset, as a
rank on another machine would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# (stage, start, duration, optypes, mb_id, mc) of one step, times relative to the step start.
STEP_EVENTS: list[tuple[int, float, float, tuple[str, ...], int, int]] = [
    (0, 0.000, 0.002, ("params-all-gather",), -1, 0),
    (1, 0.000, 0.002, ("params-all-gather",), -1, 0),
    (0, 0.003, 0.010, ("forward-compute",), 0, 0),
    (1, 0.003, 0.011, ("forward-recv",), -1, -1),
    (0, 0.013, 0.001, ("forward-send",), -1, -1),
    (1, 0.015, 0.012, ("forward-compute",), 0, 0),
    (0, 0.015, 0.010, ("forward-compute",), 1, 0),
    (0, 0.026, 0.016, ("forward-send", "backward-recv"), -1, -1),
    (1, 0.028, 0.013, ("backward-compute",), 0, 0),
    (1, 0.041, 0.001, ("backward-send", "forward-recv"), -1, -1),
    (0, 0.043, 0.020, ("backward-compute",), 0, 0),
    (1, 0.043, 0.012, ("forward-compute",), 1, 0),
    (1, 0.056, 0.022, ("backward-compute",), 1, 0),
    (0, 0.064, 0.015, ("backward-recv",), -1, -1),
    (1, 0.078, 0.001, ("backward-send",), -1, -1),
    (1, 0.0795, 0.0, ("gc",), -1, -1),
    (0, 0.080, 0.020, ("backward-compute",), 1, 0),
    (0, 0.100, 0.0, ("gc",), -1, -1),
    (1, 0.0796, 0.0, ("layernorm-grads-all-reduce",), -1, -1),
    (0, 0.1001, 0.0, ("layernorm-grads-all-reduce",), -1, -1),
    (1, 0.0797, 0.021, ("embedding-grads-all-reduce",), -1, -1),
    (0, 0.1002, 0.0006, ("embedding-grads-all-reduce",), -1, -1),
    (0, 0.101, 0.003, ("grads-reduce-scatter",), -1, 0),
    (1, 0.101, 0.003, ("grads-reduce-scatter",), -1, 0),
    (0, 0.104, 0.001, ("optimizer-clip-main-grad",), -1, -1),
    (1, 0.104, 0.001, ("optimizer-clip-main-grad",), -1, -1),
    (0, 0.105, 0.002, ("optimizer",), -1, -1),
    (1, 0.105, 0.002, ("optimizer",), -1, -1),
]
STEP_PERIOD = 0.2


def write_job(out: Path, dp: int = 1, steps: int = 3, skew: dict[int, float] | None = None,
              unfinished: dict[int, int] | None = None, record_offsets: bool = True,
              first_step: int = 5, hosts: dict[int, str] | None = None) -> dict[str, Any]:
    """Write ``rank-*.jsonl`` files of a dp x 2 job; returns the metadata mapping.

    ``skew[rank]`` adds seconds to that rank's local clock; with ``record_offsets`` the files
    carry the matching offsets (``-skew``). ``unfinished[rank] = step`` leaves out that
    step's ``step_end`` record on that rank (a step interrupted by a crash). ``hosts[rank]``
    is the host name of that rank's header (none by default).
    """
    out.mkdir(parents=True, exist_ok=True)
    skew = skew or {}
    unfinished = unfinished or {}
    base = 1000.0
    for stage in range(2):
        for d in range(dp):
            rank = stage * dp + d
            shift = skew.get(rank, 0.0)
            lines: list[dict[str, Any]] = [{
                "kind": "header", "version": 1, "rank": rank, "world_size": 2 * dp,
                "dp_rank": d, "stage": stage, "tp_rank": 0, "cp_rank": 0, "timer": "monotonic",
            }]
            if hosts is not None and rank in hosts:
                lines[0]["host"] = hosts[rank]
            offset = -shift if record_offsets else 0.0
            lines.append({"kind": "clock", "local": base + shift, "offset": offset, "rtt": 0.0})
            for i in range(steps):
                step = first_step + i
                t0 = base + i * STEP_PERIOD + shift + 0.0003 * d
                for st, start, dur, ops, mb, mc in STEP_EVENTS:
                    if st != stage:
                        continue
                    lines.append({"kind": "span", "step": step, "optypes": list(ops),
                                  "start": t0 + start, "end": t0 + start + dur,
                                  "mb_id": mb, "mc": mc})
                if unfinished.get(rank) != step:
                    lines.append({"kind": "step_end", "step": step, "time": t0 + 0.11})
            end = base + steps * STEP_PERIOD + shift
            lines.append({"kind": "clock", "local": end, "offset": offset, "rtt": 0.0})
            text = "\n".join(json.dumps(x) for x in lines) + "\n"
            (out / f"rank-{rank:05d}.jsonl").write_text(text)
    return {"trial_name": "synthetic", "run_id": 1, "dp_size": dp, "pp_size": 2}
