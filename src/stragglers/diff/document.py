"""The diff as a versioned JSON document (``diff.json``, ``stragglers diff --json``).

Schema ``1.0`` (keys marked * are fixed for other tools to rely on). Times are seconds
(per step where they say ``_s``); S values are slowdowns (1 = no slowdown); ``null`` where a
figure does not exist on that side.

* ``schema_version``\\*: ``"1.0"``; ``kind``\\*: ``"stragglers.diff"``.
* ``conclusion``\\*: one sentence: ``"no change: ..."``, or the step time's change and
  the largest change; ``changed``\\*: false exactly when the conclusion is "no change".
* ``a``\\*, ``b``\\*: each input: ``source`` (as given), ``kind`` (``result.json``, ``trace``,
  or ``analysis`` for an analysis passed in process without its op table), ``job``
  (``trial_name``, ``dp_size``, ``pp_size``, ``tp_size``, ``vpp_size``), ``steps`` (count),
  ``verdict`` (``cause``, ``workers``, ``confidence``), ``trustworthy``, ``worker_names``
  (``{"dp,stage": "rank R (host)"}``).
* ``settings``: ``alpha`` (the per-step tests' significance level), ``min_change`` (the
  smallest change reported, a fraction of A's mean step time) and ``floor_s`` (it in
  seconds).
* ``layout``\\*: ``same``, ``differences`` (``[{field, a, b}]``), ``not_compared``
  (``[{what, why}]``: ``stages``, ``dp_ranks``, ``workers``, ``mean_op_time``) and
  ``notes`` (step counts, names, trust, op types in one side only).
* ``figures``\\*: ``step_time``, ``step_time_no_delay``, ``ideal_step_time`` (the work),
  ``straggling`` (no-delay − ideal), ``host_time`` (actual − no-delay), ``slowdown`` (S),
  ``slowdown_healthy`` (S_h), ``discrepancy``; each ``{label, unit, a, b, delta,
  relative, p_value, significant}`` (``p_value``: Welch's two-sided test on the per-step
  values, null with one step on a side; ``significant``: ``p_value < alpha`` and ``|delta|``
  at least the floor; S borrows the test of the straggling and the discrepancy that of the
  host time; S_h has none: null).
* ``changes``\\*: what changed beyond the noise, the largest first by the step time it
  explains: ``[{rank, level, key, kind, explained_s, explained_gone_s, moved_from, a, b,
  text}]``. ``level``: ``worker`` (key ``"d,s"``), ``stage``, ``dp_rank``, ``optype``,
  ``host`` (key ``"worker d,s"``, ``"dp_rank d"``, ``"stage s"`` or ``""``: where the launch
  attribution locates it), ``work`` (the ideal step time) or ``job`` (a slowdown no group
  explains alone); ``kind``: ``appears``, ``goes``, ``moves``, ``grows``, ``shrinks``;
  ``explained_s``: the change of the step time the group's ops alone add to the ideal
  timeline (``(S_g − 1) × mean ideal step time``), signed; a move's ``explained_s`` is its
  new place's, ``explained_gone_s`` its old place's (``moved_from``); ``a``/``b``: the
  group's S (S_w, S_stage, S_dp, S_t), the location's S^launch, or the ideal step time (a
  move: S_w of its old place in A, of its new place in B).
* ``optypes``\\*, ``stages``\\*, ``dp_ranks``\\*, ``workers``\\*: one row per group
  (empty where not compared): ``{key, s_a, s_b, excess_a_s, excess_b_s, delta_s,
  explained_s, p_value, significant, named_a, named_b}``, ``p_value`` null for workers (S_w
  has no per-step values in result.json: a worker's change is significant where its own
  part passes the floor and its DP rank's or stage's per-step change is significant);
  ``explained_s`` is the part of ``delta_s`` the group names once what its stage's DP ranks
  (its DP rank's stages) share is split off; op types add ``mean_op_a_s``,
  ``mean_op_b_s``, ``mean_op_p_value`` (both inputs traces; else null).
* ``stragglers``\\*: the verdicts' stragglers (``{level, key, cause}``; ``level``
  ``worker``, or ``stage`` for ``last_stage``) of ``a`` and ``b``, and ``new``, ``gone``,
  ``moved`` (``[{from, to}]``), ``kept``; ``compared`` is false where the layouts differ
  (then only ``a`` and ``b`` are filled).
"""

from __future__ import annotations

import json
import math
from typing import Any

from stragglers.diff.compare import Diff, GroupRow, SideInfo, Straggler
from stragglers.diff.stats import Shift

DIFF_SCHEMA_VERSION = "1.0"
DIFF_KIND = "stragglers.diff"


def _f(x: float | None) -> float | None:
    """A finite float, or None (JSON has no NaN)."""
    return None if x is None or not math.isfinite(x) else float(x)


def _side(s: SideInfo) -> dict[str, Any]:
    return {"source": s.source, "kind": s.kind,
            "job": {"trial_name": s.trial_name, "dp_size": s.dp, "pp_size": s.pp,
                    "tp_size": s.tp, "vpp_size": s.vpp},
            "steps": s.steps,
            "verdict": {"cause": s.cause, "workers": list(s.workers),
                        "confidence": round(s.confidence, 4)},
            "trustworthy": s.trustworthy, "worker_names": dict(s.worker_names)}


def _p(t: Shift | None) -> float | None:
    return None if t is None else _f(t.p_value)


def _row(r: GroupRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "key": r.key, "s_a": _f(r.s_a), "s_b": _f(r.s_b), "excess_a_s": _f(r.excess_a),
        "excess_b_s": _f(r.excess_b), "delta_s": _f(r.delta), "explained_s": _f(r.explained),
        "p_value": _p(r.test), "significant": r.significant, "named_a": r.named_a,
        "named_b": r.named_b}
    return out


def _optype(r: GroupRow) -> dict[str, Any]:
    m = r.mean_op
    return {**_row(r), "mean_op_a_s": None if m is None else _f(m.a),
            "mean_op_b_s": None if m is None else _f(m.b), "mean_op_p_value": _p(m)}


def _straggler(s: Straggler) -> dict[str, Any]:
    return {"level": s.level.value, "key": s.key, "cause": s.cause}


def to_document(diff: Diff) -> dict[str, Any]:
    """The diff.json document (schema :data:`DIFF_SCHEMA_VERSION`)."""
    st = diff.stragglers
    return {
        "schema_version": DIFF_SCHEMA_VERSION,
        "kind": DIFF_KIND,
        "conclusion": diff.conclusion,
        "changed": diff.changed,
        "a": _side(diff.a),
        "b": _side(diff.b),
        "settings": {"alpha": diff.settings.alpha, "min_change": diff.settings.min_change,
                     "floor_s": _f(diff.floor)},
        "layout": {"same": diff.layout.same,
                   "differences": [{"field": f, "a": x, "b": y}
                                   for f, x, y in diff.layout.differences],
                   "not_compared": [{"what": w, "why": why}
                                    for w, why in diff.layout.not_compared],
                   "notes": list(diff.layout.notes)},
        "figures": {f.name: {"label": f.label, "unit": f.unit, "a": _f(f.a), "b": _f(f.b),
                             "delta": _f(f.delta),
                             "relative": None if f.test is None else _f(f.test.relative),
                             "p_value": _p(f.test), "significant": f.significant}
                    for f in diff.figures},
        "changes": [{"rank": i + 1, "level": c.level.value, "key": c.key, "kind": c.kind.value,
                     "explained_s": _f(c.explained), "explained_gone_s": _f(c.explained_gone),
                     "moved_from": c.moved_from, "a": _f(c.a), "b": _f(c.b), "text": c.text}
                    for i, c in enumerate(diff.changes)],
        "optypes": [_optype(r) for r in diff.optypes],
        "stages": [_row(r) for r in diff.stages],
        "dp_ranks": [_row(r) for r in diff.dp_ranks],
        "workers": [_row(r) for r in diff.workers],
        "stragglers": {"compared": st.compared, "a": [_straggler(s) for s in st.a],
                       "b": [_straggler(s) for s in st.b],
                       "new": [_straggler(s) for s in st.new],
                       "gone": [_straggler(s) for s in st.gone],
                       "moved": [{"from": _straggler(x), "to": _straggler(y)}
                                 for x, y in st.moved],
                       "kept": [_straggler(s) for s in st.kept]},
    }


def to_json(diff: Diff) -> str:
    """The document as JSON text (strict: no NaN or infinity)."""
    return json.dumps(to_document(diff), indent=1, allow_nan=False)
