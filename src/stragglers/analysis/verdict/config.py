"""The verdict's thresholds, in one object (defaults documented here and
in docs/concepts/verdict.md).

Set them from the command line (``stragglers analyze --verdict-config FILE.yaml`` and/or
``--verdict KEY=VALUE``, repeatable) or in Python (``VerdictConfig(pause_factor=2.0)``). The
whole configuration is written into ``result.json`` (``verdict_config``) so that a verdict
can always be traced back to the thresholds that made it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from stragglers.errors import InputError
from stragglers.inputs import load_yaml


@dataclass(frozen=True)
class VerdictConfig:
    """Thresholds of the root-cause verdict.

    Slowdown and shares:

    * ``threshold`` (1.1): below this problem size — the slowdown S, or the exact S_w of the
      workers the ``worker`` hypothesis blames when larger — the verdict is ``none``.
    * ``explain`` (0.5): a hypothesis explains the slowdown when its share (its removal
      what-if rem, Eq. 5, bounded to [0, 1]: the share of the slowdown that disappears when
      only its ops are fixed, as the study's M_W and M_S) reaches this; a verdict whose best
      share is lower is weak.
    * ``contribute`` (0.2): other applicable hypotheses with at least this share are listed
      as contributing.
    * ``tie_margin`` (0.05): hypotheses whose shares are within this of the largest are
      tied, and of those the one whose ops cause the most slowdown alone (add) is chosen.

    Workers (``worker``):

    * ``suspect_share`` (0.25): a worker is a suspect when its exact S_w − 1 is at least this
      share of S − 1 ...
    * ``stand_out`` (0.5): ... and it stands out from its stage's other DP ranks (from the
      job's median when dp = 1): S_w − reference ≥ this share of S_w − 1.
    * ``max_suspect_fraction`` (0.25): more suspects than this share of all workers are not
      individual stragglers.
    * ``sporadic_limit`` (0.5): a suspect whose excess time comes more than this share from
      pauses (see below) is a worker with pauses, not a slow worker.

    Stages (``last_stage``):

    * ``last_stage_ratio`` (1.2): the last stage's compute per step, on *every* DP rank
      (the smallest over DP ranks), is at least this times the median of the other stages'.

    Sequence lengths (``sequence_length``):

    * ``seq_correlation`` (0.5): log forward and log backward compute times of the same
      microbatch correlate at least this much within worker-steps, pooled over every stage
      ...
    * ``seq_spread`` (0.05): ... and forward times spread at least this much (relative).

    Pauses (``pauses`` and ``gc``):

    * ``pause_factor`` (2.5): a compute op is a pause candidate when it takes at least this
      times its *own worker's* typical time for that op (median over steps) ...
    * ``pause_min_excess`` (0.002): ... and at least this share of the mean ideal step time
      longer ...
    * ``pause_max_fraction`` (0.3): ... on a worker where at most this share of compute ops
      are candidates (a worker whose ops are mostly long is slow, not paused); an op whose
      forward/backward partner of the same microbatch is long too is a long sequence, not a
      pause.
    * ``gc_evidence`` (0.5): pauses are ``gc`` when recorded garbage collection (gc ops or GC
      time measured inside ops) covers at least this share of their excess time; otherwise
      they are ``pauses``.

    Confidence:

    * ``bootstrap`` (400): resamples of the steps used to estimate the confidence.
    * ``seed`` (0): seed of the resampling (results are reproducible).
    * ``untrustworthy_factor`` (0.5): the confidence of a result with discrepancy above 5% (or
      other caveats) is multiplied by this.
    """

    threshold: float = 1.1
    explain: float = 0.5
    contribute: float = 0.2
    tie_margin: float = 0.05
    suspect_share: float = 0.25
    stand_out: float = 0.5
    max_suspect_fraction: float = 0.25
    sporadic_limit: float = 0.5
    last_stage_ratio: float = 1.2
    seq_correlation: float = 0.5
    seq_spread: float = 0.05
    pause_factor: float = 2.5
    pause_min_excess: float = 0.002
    pause_max_fraction: float = 0.3
    gc_evidence: float = 0.5
    bootstrap: int = 400
    seed: int = 0
    untrustworthy_factor: float = 0.5

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", int):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InputError(f"verdict setting '{f.name}' must be an integer, got {v!r}")
                if f.name == "bootstrap" and not 0 <= v <= 100_000:
                    raise InputError(f"verdict setting 'bootstrap' must be in 0..100000, got {v}")
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise InputError(f"verdict setting '{f.name}' must be a finite number, got {v!r}")
            if v < 0:
                raise InputError(f"verdict setting '{f.name}' must not be negative, got {v}")
        if self.threshold < 1.0:
            raise InputError(f"verdict setting 'threshold' must be at least 1, got "
                             f"{self.threshold}")
        for name in ("explain", "contribute", "tie_margin", "suspect_share", "stand_out",
                     "max_suspect_fraction", "sporadic_limit", "pause_max_fraction",
                     "gc_evidence", "untrustworthy_factor", "seq_spread"):
            if getattr(self, name) > 1.0:
                raise InputError(f"verdict setting '{name}' is a share and must be at most 1, "
                                 f"got {getattr(self, name)}")
        if self.seq_correlation > 1.0:
            raise InputError("verdict setting 'seq_correlation' is a correlation and must be "
                             f"at most 1, got {self.seq_correlation}")
        if self.pause_factor <= 1.0 or self.last_stage_ratio < 1.0:
            raise InputError("verdict settings 'pause_factor' must exceed 1 and "
                             "'last_stage_ratio' must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def updated(self, changes: dict[str, Any], source: str) -> VerdictConfig:
        """A copy with ``changes`` applied; unknown keys and wrong types are user errors."""
        known = {f.name: f for f in fields(self)}
        clean: dict[str, Any] = {}
        for key, value in changes.items():
            if key not in known:
                import difflib

                close = difflib.get_close_matches(str(key), list(known), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise InputError(f"{source}: unknown verdict setting '{key}'{hint}; known: "
                                 + ", ".join(known))
            want_int = known[key].type in ("int", int)
            if isinstance(value, str):
                value = _parse_number(value, key, source, want_int)
            if want_int and isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(f"{source}: verdict setting '{key}' must be a number, got "
                                 f"{value!r}")
            clean[key] = value
        try:
            return replace(self, **clean)
        except InputError as exc:
            raise InputError(f"{source}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | Path, base: VerdictConfig | None = None) -> VerdictConfig:
        """Read settings from a YAML mapping (keys as in this class); others keep ``base``'s
        values (the defaults when None)."""
        raw = load_yaml(path, "verdict configuration")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise InputError(f"{path}: a verdict configuration must be a mapping of settings "
                             "to values")
        return (base or cls()).updated(raw, str(path))

    @classmethod
    def from_assignments(cls, items: list[str], base: VerdictConfig | None = None
                         ) -> VerdictConfig:
        """Apply ``KEY=VALUE`` strings (the ``--verdict`` option)."""
        changes: dict[str, Any] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise InputError(f"--verdict: expected KEY=VALUE, got {item!r}")
            changes[key.strip()] = value.strip()
        return (base or cls()).updated(changes, "--verdict")

    @classmethod
    def from_options(cls, file: str | None = None, assignments: list[str] | None = None,
                     threshold: float | None = None) -> VerdictConfig:
        """The defaults, then the YAML ``file`` (``--verdict-config``), the ``KEY=VALUE``
        ``assignments`` (``--verdict``) and the ``threshold`` (``--threshold``), in that
        order."""
        cfg = cls()
        if file:
            cfg = cls.from_file(file, cfg)
        if assignments:
            cfg = cls.from_assignments(assignments, cfg)
        if threshold is not None:
            cfg = cfg.updated({"threshold": threshold}, "--threshold")
        return cfg


def _parse_number(text: str, key: str, source: str, want_int: bool) -> int | float:
    try:
        return int(text) if want_int else float(text)
    except ValueError:
        kind = "an integer" if want_int else "a number"
        raise InputError(f"{source}: verdict setting '{key}' must be {kind}, got {text!r}"
                         ) from None
