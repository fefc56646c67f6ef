"""Synthetic jobs analysed in process, as diff sides (cached: a side is pure data)."""

from __future__ import annotations

from functools import cache
from typing import Any

from stragglers.analysis import analyze_table
from stragglers.analysis.result import AnalysisResult
from stragglers.diff import Side, side_of
from stragglers.synth import SynthSpec, generate
from stragglers.trace import build_table

#: The job of most pairs: 4 x 4 workers, 12 steps, 2% noise on every op.
BASE: dict[str, Any] = {"dp": 4, "pp": 4, "steps": 12, "jitter": 0.02, "microbatches": 8}


def _key(kw: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kw.items()))


@cache
def _analysed(key: tuple[tuple[str, Any], ...], exact: bool) -> tuple[Side, AnalysisResult]:
    kw = {k: list(v) if isinstance(v, tuple) else v for k, v in key}
    trace, meta, _ = generate(SynthSpec(**kw))
    table = build_table(trace, meta)
    result = analyze_table(table, exact_workers=exact).result
    return side_of(result, table, source=f"synth {kw}"), result


def side(exact: bool = True, **kw: Any) -> Side:
    """The side of a synthetic job: :data:`BASE` updated with ``kw``."""
    return _analysed(_key({**BASE, **kw}), exact)[0]


def result(**kw: Any) -> AnalysisResult:
    """The analysis of a synthetic job: :data:`BASE` updated with ``kw``."""
    return _analysed(_key({**BASE, **kw}), True)[1]
