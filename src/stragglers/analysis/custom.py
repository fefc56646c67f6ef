"""Custom what-if questions, on the same machinery as the analyses.

Example::

    from stragglers.analysis.custom import WhatIf

    wi = WhatIf.from_files("trace.parquet", "meta.yaml")
    # What if worker (dp 0, stage 0) had run every op at its ideal time?
    out = wi.simulate(wi.ops(dp_rank=0, stage=0).ideal())
    print(out.mean, out.speedup)            # mean step time, vs the no-delay timeline
    # What if the last stage's forward compute were 20% faster and step 25's optimizer
    # took 50 ms?
    out = wi.simulate(wi.ops(stage=3, optype="forward-compute").scale(0.8),
                      wi.ops(step=25, optype="optimizer").set(0.05))
    print(out.step_time)                    # {step: seconds}

Selections combine with AND; each argument takes a value or a list of values. ``optype``
also accepts the attribution keys ``forward-pp-comm`` and ``backward-pp-comm``;
``microbatch`` selects compute ops by ``mb_id``. Changes apply in order to the original
values (durations of local ops, transfer durations of communication ops), without launch
delays, i.e. on the no-delay timeline; ``base="ideal"`` starts from the ideal timeline.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stragglers.analysis.engine import WhatIfEngine, prepare
from stragglers.analysis.runner import load_table
from stragglers.errors import InputError
from stragglers.sim import simulate
from stragglers.trace import schema
from stragglers.trace.table import OpTable


def _values(x: object) -> list:
    if x is None:
        return []
    if isinstance(x, (str, int, np.integer)):
        return [x]
    if isinstance(x, Iterable):
        return list(x)
    return [x]


@dataclass(frozen=True)
class Change:
    """One change: ``kind`` is ideal / set / scale, applied where ``mask`` is True."""

    mask: np.ndarray  # (n_nodes, dp, S)
    kind: str
    value: float = 0.0


@dataclass(frozen=True)
class OpSelection:
    """A set of ops (a boolean mask over nodes, DP ranks and steps)."""

    mask: np.ndarray

    @property
    def count(self) -> int:
        return int(self.mask.sum())

    def ideal(self) -> Change:
        """These ops take the ideal value of their op type."""
        return Change(self.mask, "ideal")

    def set(self, seconds: float) -> Change:
        """These ops take ``seconds`` each."""
        if seconds < 0:
            raise InputError(f"set(): duration must be non-negative, got {seconds}")
        return Change(self.mask, "set", float(seconds))

    def scale(self, factor: float) -> Change:
        """These ops take ``factor`` times as long."""
        if factor < 0:
            raise InputError(f"scale(): factor must be non-negative, got {factor}")
        return Change(self.mask, "scale", float(factor))

    def __and__(self, other: OpSelection) -> OpSelection:
        return OpSelection(self.mask & other.mask)

    def __or__(self, other: OpSelection) -> OpSelection:
        return OpSelection(self.mask | other.mask)

    def __invert__(self) -> OpSelection:
        return OpSelection(~self.mask)


@dataclass
class Outcome:
    """Step times of a what-if, with the no-delay and ideal references."""

    step_time: dict[int, float]
    mean: float
    no_delay_mean: float
    ideal_mean: float

    @property
    def speedup(self) -> float:
        """No-delay mean step time / this mean step time."""
        return self.no_delay_mean / self.mean

    @property
    def slowdown(self) -> float:
        """This mean step time / the ideal mean step time (S of this scenario)."""
        return self.mean / self.ideal_mean


class WhatIf:
    """Ask what-if questions of one trace."""

    def __init__(self, engine: WhatIfEngine) -> None:
        self.engine = engine
        self._no_delay = self._run(engine.derived.value)
        ideal_full = np.broadcast_to(engine.ideal_value[:, None, None], engine.derived.value.shape)
        self._ideal = self._run(ideal_full)

    @classmethod
    def from_table(cls, table: OpTable) -> WhatIf:
        return cls(prepare(table))

    @classmethod
    def from_files(cls, trace: str | Path, meta: str | Path,
                   steps: str | tuple[int, int] | None = None) -> WhatIf:
        return cls.from_table(load_table(trace, meta, steps))

    def ops(self, dp_rank: object = None, stage: object = None, step: object = None,
            optype: object = None, microbatch: object = None) -> OpSelection:
        """Select ops; arguments left as None select everything."""
        t = self.engine.table
        n, dp, ns = t.duration.shape
        node = np.ones(n, dtype=bool)
        if stage is not None:
            node &= np.isin(t.node_stage, _values(stage))
        if optype is not None:
            names = _values(optype)
            unknown = [x for x in names if x not in schema.OPTYPE_CODE
                       and x not in schema.ATTRIBUTION_TYPE.values()]
            if unknown:
                raise InputError(f"ops(optype=...): unknown operation type {unknown[0]!r}")
            keys = np.array([schema.ATTRIBUTION_TYPE[schema.OPTYPES[c]] for c in t.node_optype])
            codes = [schema.OPTYPE_CODE[x] for x in names if x in schema.OPTYPE_CODE]
            node &= np.isin(t.node_optype, codes) | np.isin(keys, names)
        if microbatch is not None:
            compute = np.isin(t.node_optype, [schema.OPTYPE_CODE[x] for x in schema.COMPUTE_TYPES])
            node &= compute & np.isin(t.node_mb, _values(microbatch))
        ranks = np.ones(dp, dtype=bool)
        if dp_rank is not None:
            ranks = np.isin(np.arange(dp), _values(dp_rank))
        steps = np.ones(ns, dtype=bool)
        if step is not None:
            wanted = _values(step)
            missing = sorted(set(wanted) - set(t.steps.tolist()))
            if missing:
                raise InputError(f"ops(step=...): step {missing[0]} is not in the trace")
            steps = np.isin(t.steps, wanted)
        return OpSelection(node[:, None, None] & ranks[None, :, None] & steps[None, None, :])

    def simulate(self, *changes: Change, base: str = "no_delay") -> Outcome:
        """Step times after applying ``changes`` in order to the base values."""
        e = self.engine
        if base == "no_delay":
            values = e.derived.value.astype(np.float64)
        elif base == "ideal":
            values = np.broadcast_to(e.ideal_value[:, None, None], e.derived.value.shape).copy()
        else:
            raise InputError(f"simulate(base=...): 'no_delay' or 'ideal', got {base!r}")
        ideal = np.broadcast_to(e.ideal_value[:, None, None], values.shape)
        for ch in changes:
            if ch.kind == "ideal":
                values = np.where(ch.mask, ideal, values)
            elif ch.kind == "set":
                values = np.where(ch.mask, ch.value, values)
            elif ch.kind == "scale":
                values = np.where(ch.mask, values * ch.value, values)
        times = self._run(values)
        return Outcome(
            step_time={int(s): float(v) for s, v in zip(e.table.steps, times, strict=True)},
            mean=float(times.mean()), no_delay_mean=float(self._no_delay.mean()),
            ideal_mean=float(self._ideal.mean()))

    def _run(self, values: np.ndarray) -> np.ndarray:
        e = self.engine
        res = simulate(e.order, lambda idx: values[idx][:, None], (1, e.dp, e.n_steps))
        return res.step_time[0]
