"""The mitigation strategies and their costs (Falcon §5.1, Table 3), with defaults and a YAML
override (``mitigate plan --costs FILE``).

Each strategy has an *overhead* (seconds of training lost to apply it, the "ski price" of the
ski-rental rule), the root causes it acts on, and an *effectiveness* (the fraction of the
current slowdown it is expected to remove, used for the expected gain of S3 and S4; S2's gain
is computed by the micro-batch solver instead). Defaults, from Falcon's measurements:

==== ============ ========= ============= =====================================================
name action       overhead  effectiveness why
==== ============ ========= ============= =====================================================
S1   ignore       0 s       0             do nothing: the fail-slow may end by itself
S2   microbatch   5 s       (solver)      solve + apply at the next step ("a few seconds")
S3   topology     60 s      0.5           pause, swap parameters in memory ("within a minute";
                                          53.7 % / 24.8 % slowdown removed, Fig. 15)
S4   restart      1800 s    1.0           checkpoint and restart on healthy nodes ("tens of
                                          minutes")
==== ============ ========= ============= =====================================================

The YAML file maps a strategy name to the fields to change, for example::

    S2: {overhead_s: 2}
    S3: {overhead_s: 45, effectiveness: 0.6}
    S4: {enabled: false}
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Any

from stragglers.errors import InputError
from stragglers.inputs import load_yaml

__all__ = ["DEFAULT_STRATEGIES", "Strategy", "load_costs"]

COMPUTE = "computation"
COMMUNICATION = "communication"


@dataclass(frozen=True)
class Strategy:
    """One mitigation strategy."""

    name: str
    action: str
    overhead_s: float
    effectiveness: float
    causes: frozenset[str]
    enabled: bool = True

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "action": self.action, "overhead_s": self.overhead_s,
                "effectiveness": self.effectiveness, "causes": sorted(self.causes),
                "enabled": self.enabled}


BOTH = frozenset({COMPUTE, COMMUNICATION})
DEFAULT_STRATEGIES: tuple[Strategy, ...] = (
    Strategy("S1", "ignore", 0.0, 0.0, BOTH),
    Strategy("S2", "microbatch", 5.0, 0.0, frozenset({COMPUTE})),
    Strategy("S3", "topology", 60.0, 0.5, BOTH),
    Strategy("S4", "restart", 1800.0, 1.0, BOTH),
)

_FIELDS = ("overhead_s", "effectiveness", "enabled")


def _number(value: Any, where: str, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: expected a number, got {value!r}"[:300])
    v = float(value)
    if not math.isfinite(v) or v < 0 or (high is not None and v > high):
        rng = f"in [0, {high:g}]" if high is not None else ">= 0"
        raise InputError(f"{where}: expected a finite number {rng}, got {value!r}")
    return v


def load_costs(path: str | os.PathLike[str] | None) -> tuple[Strategy, ...]:
    """The strategies: the defaults, changed by the YAML file ``path`` when given."""
    if path is None:
        return DEFAULT_STRATEGIES
    raw = load_yaml(path, "costs file")
    if raw is None:
        return DEFAULT_STRATEGIES
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping of strategy names (S1..S4) to settings")
    by_name = {s.name: s for s in DEFAULT_STRATEGIES}
    for name, settings in raw.items():
        if name not in by_name:
            raise InputError(f"{path}: unknown strategy {str(name)[:40]!r} (known: "
                             f"{', '.join(by_name)})")
        if not isinstance(settings, dict):
            raise InputError(f"{path}: {name}: expected a mapping of {', '.join(_FIELDS)}")
        changes: dict[str, Any] = {}
        for key, value in settings.items():
            where = f"{path}: {name}.{key}"
            if key == "overhead_s":
                changes[key] = _number(value, where)
            elif key == "effectiveness":
                changes[key] = _number(value, where, high=1.0)
            elif key == "enabled":
                if not isinstance(value, bool):
                    raise InputError(f"{where}: expected true or false, got {value!r}"[:300])
                changes[key] = value
            else:
                raise InputError(f"{path}: {name}: unknown field {str(key)[:40]!r} (known: "
                                 f"{', '.join(_FIELDS)})")
        by_name[name] = replace(by_name[name], **changes)
    return tuple(by_name.values())
