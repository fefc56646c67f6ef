"""The comparison of two analyses: :func:`compare` builds a :class:`Diff` from two
:class:`~stragglers.diff.side.Side` objects.

Step time is split into three parts, each tested against the steps' spread
(:mod:`stragglers.diff.stats`): the **work** (the ideal step time: every op at its typical
duration), the **straggling** (no-delay − ideal: what stragglers add) and the **host time**
(actual − no-delay: launch delays, a slow data loader). The straggling is then located by
the what-if attribution: a group's *excess* is the step time its ops alone add to the ideal
timeline, ``(S_g − 1) × mean ideal step time`` seconds per step, and its change from A to B
is the step time that group explains. Where both jobs have the same layout and exact S_w,
each worker's change is split into the part its whole stage shares (every DP rank of the
stage changed alike: the stage is named, as for a heavier last stage), the part its whole
DP rank shares, and its own part (one worker changed: the worker is named); otherwise the
stage's and DP rank's whole changes are used. Host time is located by the launch
attribution. The changes that are larger than the floor and beyond the noise are ranked by
the step time they explain, the largest first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import numpy as np

from stragglers.diff.side import Side
from stragglers.diff.stats import Shift, shift

#: A DP rank or stage is named alone when no peer's change reaches this share of its own
#: (host time; and where S_w is not compared, the worker where they meet).
PEER_SHARE = 0.5


class Level(StrEnum):
    """What a change names."""

    WORKER = "worker"
    STAGE = "stage"
    DP_RANK = "dp_rank"
    OPTYPE = "optype"
    HOST = "host"
    WORK = "work"
    JOB = "job"


class Kind(StrEnum):
    """How it changed: a straggler the verdict names in B only (``appears``), in A only
    (``goes``), in another place (``moves``), or a figure that grew or shrank."""

    APPEARS = "appears"
    GOES = "goes"
    MOVES = "moves"
    GROWS = "grows"
    SHRINKS = "shrinks"


@dataclass(frozen=True)
class DiffSettings:
    """``alpha``: the significance level of the per-step tests; ``min_change``: the smallest
    change reported, as a fraction of A's mean step time (a change must pass both)."""

    alpha: float = 0.01
    min_change: float = 0.01

    def floor(self, a: Side) -> float:
        """The smallest change reported, in seconds per step."""
        return self.min_change * float(a.actual.mean())


@dataclass(frozen=True)
class Figure:
    """A job-level figure of A and B; ``test``: its per-step test where it has one."""

    name: str
    label: str
    a: float | None
    b: float | None
    unit: str
    test: Shift | None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def significant(self) -> bool | None:
        return None if self.test is None else self.test.significant


@dataclass(frozen=True)
class GroupRow:
    """One op type, stage, DP rank or worker in both analyses.

    ``s_a``/``s_b``: its S (None where the group is absent from that side); ``excess_a``/
    ``excess_b``: the step time its ops alone add to the ideal timeline (s per step);
    ``test``: the per-step test of that excess (None for workers: result.json keeps S_w
    for the whole run only); ``explained``: the part of its change this group names once the
    shares of its stage and DP rank are split off (s per step); ``mean_op``: the mean op time
    per step (op types of two traces only)."""

    level: Level
    key: str
    s_a: float | None
    s_b: float | None
    excess_a: float
    excess_b: float
    test: Shift | None
    explained: float
    significant: bool
    named_a: bool = False
    named_b: bool = False
    mean_op: Shift | None = None

    @property
    def delta(self) -> float:
        return self.excess_b - self.excess_a


@dataclass(frozen=True)
class Straggler:
    """A worker or stage a verdict names, with its cause."""

    level: Level
    key: str
    cause: str


@dataclass(frozen=True)
class Stragglers:
    """The stragglers the verdicts of A and B name, and how they changed (``compared`` is
    false where the layouts differ: positions are not the same workers)."""

    a: tuple[Straggler, ...]
    b: tuple[Straggler, ...]
    new: tuple[Straggler, ...]
    gone: tuple[Straggler, ...]
    moved: tuple[tuple[Straggler, Straggler], ...]
    kept: tuple[Straggler, ...]
    compared: bool


@dataclass(frozen=True)
class Change:
    """One change, ranked by the step time it explains: ``explained`` (s per step, signed;
    for a move, the new place's), ``explained_gone`` (a move only: the old place's), ``a``
    and ``b`` its figure (S of the group, S^launch of the host-time location, the ideal step
    time), ``text`` one sentence."""

    level: Level
    key: str
    kind: Kind
    explained: float
    a: float | None
    b: float | None
    text: str
    explained_gone: float | None = None
    moved_from: str | None = None

    @property
    def magnitude(self) -> float:
        return max(abs(self.explained), abs(self.explained_gone or 0.0))


@dataclass(frozen=True)
class Layout:
    """What differs between the two jobs' layouts (``differences``: field, A, B), what was
    not compared and why (``not_compared``: what, why), and notes on what was compared
    differently (step counts, names)."""

    differences: tuple[tuple[str, str, str], ...]
    not_compared: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]

    @property
    def same(self) -> bool:
        return not self.differences


@dataclass(frozen=True)
class SideInfo:
    """How a side is named in the diff."""

    source: str
    kind: str
    trial_name: str
    dp: int
    pp: int
    tp: int
    vpp: int
    steps: int
    cause: str
    workers: tuple[str, ...]
    confidence: float
    trustworthy: bool
    worker_names: Mapping[str, str]

    @classmethod
    def of(cls, side: Side) -> SideInfo:
        j = side.job
        return cls(side.source, side.kind, j.trial_name, j.dp_size, j.pp_size, j.tp_size,
                   j.vpp_size, side.n_steps, side.verdict.cause,
                   tuple(w.key for w in side.verdict.workers), side.verdict.confidence,
                   side.trustworthy, side.worker_names)


@dataclass(frozen=True)
class Diff:
    """What changed from A to B (see the module docstring; its document: :mod:`.document`)."""

    a: SideInfo
    b: SideInfo
    settings: DiffSettings
    floor: float
    layout: Layout
    figures: tuple[Figure, ...]
    changes: tuple[Change, ...]
    optypes: tuple[GroupRow, ...]
    stages: tuple[GroupRow, ...]
    dp_ranks: tuple[GroupRow, ...]
    workers: tuple[GroupRow, ...]
    stragglers: Stragglers

    def figure(self, name: str) -> Figure:
        return next(f for f in self.figures if f.name == name)

    #: The figures whose change alone makes a diff "changed" (the step time, with and
    #: without launch delays); their parts are ranked changes when they pass.
    HEADLINE = ("step_time", "step_time_no_delay")

    def _moved_figures(self) -> list[Figure]:
        return [f for f in self.figures
                if f.name in self.HEADLINE and f.test is not None and f.test.significant]

    @property
    def changed(self) -> bool:
        """True when something changed beyond the noise: a ranked change, or the step time
        (with or without launch delays)."""
        return bool(self.changes) or bool(self._moved_figures())

    @staticmethod
    def _head(f: Figure) -> str:
        t = f.test
        assert t is not None
        rel = t.relative
        name = "step time" if f.name == "step_time" else "step time without launch delays"
        return (f"{name} {t.a:.4g} s -> {t.b:.4g} s"
                + (f" ({rel:+.1%})" if rel is not None else ""))

    @property
    def conclusion(self) -> str:
        """One sentence: "no change", or the step time's change and the largest change."""
        step = self.figure("step_time")
        t = step.test
        assert t is not None
        if not self.changed:
            why = ("below the floor of "
                   f"{self.settings.min_change:.0%}" if abs(t.delta) < self.floor
                   else "within the steps' spread")
            p = "" if t.p_value is None else f", p = {t.p_value:.2g}"
            return f"no change: {self._head(step)}, {why}{p}; nothing moved beyond the noise"
        if not self.changes:
            return (f"{self._head(self._moved_figures()[0])}, beyond the steps' spread, but "
                    "no part of it (the work, the straggling, the host time) and no op type, "
                    "stage or worker explains it alone beyond the floor")
        return f"{self._head(step)}; {self.changes[0].text}"


# -- the comparison -----------------------------------------------------------------------
class _Test(Protocol):
    """A per-step test with the diff's settings."""

    def __call__(self, xa: np.ndarray, xb: np.ndarray) -> Shift: ...


def compare(a: Side, b: Side, settings: DiffSettings | None = None) -> Diff:
    """What changed from ``a`` to ``b``."""
    settings = settings or DiffSettings()
    floor = settings.floor(a)
    layout = _layout(a, b)
    same_pp, same_dp = a.pp == b.pp, a.dp == b.dp

    def test(xa: np.ndarray, xb: np.ndarray) -> Shift:
        return shift(xa, xb, settings.alpha, floor)

    figures = _figures(a, b, test)
    optypes = _optypes(a, b, test)
    stragglers = _stragglers(a, b, same_dp, same_pp)
    named_a, named_b = ({(s.level, s.key) for s in x} for x in (stragglers.a, stragglers.b))
    stages: tuple[GroupRow, ...] = ()
    dp_ranks: tuple[GroupRow, ...] = ()
    workers: tuple[GroupRow, ...] = ()
    c_s = c_d = part = None
    if same_pp and same_dp and a.blame.worker is not None and b.blame.worker is not None:
        c_s, c_d, part = split(_excess(b.blame.worker, b) - _excess(a.blame.worker, a))
    # one stage (one DP rank) is the whole job: its change is the job's, not a location's
    if same_pp:
        stages = _located(Level.STAGE, a.blame.stage, b.blame.stage, a.blame.stage_steps,
                          b.blame.stage_steps, a, b, test,
                          np.zeros(1) if a.pp == 1 else c_s, floor, named_a, named_b)
    if same_dp:
        dp_ranks = _located(Level.DP_RANK, a.blame.dp_rank, b.blame.dp_rank,
                            a.blame.dp_rank_steps, b.blame.dp_rank_steps, a, b, test,
                            np.zeros(1) if a.dp == 1 else c_d, floor, named_a, named_b)
    if part is not None:
        workers = _worker_rows(a, b, part, stages, dp_ranks, floor, named_a, named_b)
    changes = _rank(a, b, figures, optypes, stages, dp_ranks, workers, stragglers)
    return Diff(a=SideInfo.of(a), b=SideInfo.of(b), settings=settings, floor=floor,
                layout=layout, figures=figures, changes=changes, optypes=optypes,
                stages=stages, dp_ranks=dp_ranks, workers=workers, stragglers=stragglers)


def shared(values: np.ndarray, axis: int) -> np.ndarray:
    """What every peer along ``axis`` shares of a change: the smallest where all grew, the
    largest (closest to 0) where all shrank, 0 where they disagree."""
    pos, neg = (values > 0).all(axis=axis), (values < 0).all(axis=axis)
    return np.where(pos, values.min(axis=axis), np.where(neg, values.max(axis=axis), 0.0))


def split(change: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split a (dp, pp) change of the workers' excess into what each stage's DP ranks share
    (pp,), what each DP rank's stages share beyond that (dp,), and each worker's own part
    (dp, pp). With one DP rank a stage is its one worker; with one stage a DP rank is."""
    dp, pp = change.shape
    c_s = change[0].copy() if dp == 1 else shared(change, axis=0)
    rest = change - c_s[None, :]
    c_d = np.zeros(dp) if pp == 1 else shared(rest, axis=1)
    return c_s, c_d, rest - c_d[:, None]


def _excess(s: np.ndarray, side: Side) -> np.ndarray:
    """Seconds per step that a group's ops alone add to the ideal timeline, from its S."""
    return (np.asarray(s, dtype=float) - 1.0) * side.ideal_mean


def _steps_excess(per_step: np.ndarray, side: Side) -> np.ndarray:
    """Per-step excess (seconds) from per-step S (each over its step's ideal time)."""
    return (np.asarray(per_step, dtype=float) - 1.0) * side.ideal


def _figures(a: Side, b: Side, test: _Test) -> tuple[Figure, ...]:
    step = test(a.actual, b.actual)
    nodelay = test(a.nodelay, b.nodelay)
    work = test(a.ideal, b.ideal)
    strag = test(a.nodelay - a.ideal, b.nodelay - b.ideal)
    host = test(a.actual - a.nodelay, b.actual - b.nodelay)

    def plain(name: str, label: str, xa: float | None, xb: float | None,
              t: Shift | None) -> Figure:
        return Figure(name, label, xa, xb, "", t)

    return (
        Figure("step_time", "step time (actual)", step.a, step.b, "s", step),
        Figure("step_time_no_delay", "step time without launch delays", nodelay.a, nodelay.b,
               "s", nodelay),
        Figure("ideal_step_time", "ideal step time (the work)", work.a, work.b, "s", work),
        Figure("straggling", "straggling (no-delay - ideal)", strag.a, strag.b, "s", strag),
        Figure("host_time", "host time (actual - no-delay)", host.a, host.b, "s", host),
        plain("slowdown", "slowdown S", a.slowdown, b.slowdown, strag),
        plain("slowdown_healthy", "S_h (against healthy peers)", a.slowdown_healthy,
              b.slowdown_healthy, None),
        plain("discrepancy", "discrepancy (actual / no-delay)", a.discrepancy, b.discrepancy,
              host),
    )


def _optypes(a: Side, b: Side, test: _Test) -> tuple[GroupRow, ...]:
    keys = list(dict.fromkeys([*a.blame.optype, *b.blame.optype]))
    rows = []
    for k in keys:
        sa, sb = a.blame.optype.get(k), b.blame.optype.get(k)
        xa = (np.zeros(a.n_steps) if sa is None or k not in a.blame.optype_steps
              else _steps_excess(a.blame.optype_steps[k], a))
        xb = (np.zeros(b.n_steps) if sb is None or k not in b.blame.optype_steps
              else _steps_excess(b.blame.optype_steps[k], b))
        t = test(xa, xb)
        mean_op = None
        if a.op_mean is not None and b.op_mean is not None:
            ma, mb = a.op_mean.get(k), b.op_mean.get(k)
            if ma is not None and mb is not None:
                mean_op = test(ma, mb)
        ea = 0.0 if sa is None else float(_excess(np.array(sa), a))
        eb = 0.0 if sb is None else float(_excess(np.array(sb), b))
        rows.append(GroupRow(Level.OPTYPE, k, sa, sb, ea, eb, t, eb - ea, t.significant,
                             mean_op=mean_op))
    return tuple(rows)


def _located(level: Level, sa: np.ndarray, sb: np.ndarray, steps_a: np.ndarray,
             steps_b: np.ndarray, a: Side, b: Side, test: _Test, part: np.ndarray | None,
             floor: float, named_a: set[tuple[Level, str]], named_b: set[tuple[Level, str]]
             ) -> tuple[GroupRow, ...]:
    """Rows of the stages or DP ranks; ``part``: the share of the workers' change each one
    names (None where workers are not compared: its whole change)."""
    ea, eb = _excess(sa, a), _excess(sb, b)
    xa, xb = _steps_excess(steps_a, a), _steps_excess(steps_b, b)
    # with one DP rank a stage is a worker; with one stage a DP rank is
    alone = (a.dp == 1) if level == Level.STAGE else (a.pp == 1)

    def named(key: str, names: set[tuple[Level, str]]) -> bool:
        worker = f"0,{key}" if level == Level.STAGE else f"{key},0"
        return (level, key) in names or (alone and (Level.WORKER, worker) in names)

    rows = []
    for i in range(sa.shape[0]):
        t = test(xa[i], xb[i])
        explained = float(eb[i] - ea[i]) if part is None else float(part[i])
        key = str(i)
        rows.append(GroupRow(level, key, float(sa[i]), float(sb[i]), float(ea[i]),
                             float(eb[i]), t, explained,
                             bool(t.significant and abs(explained) >= floor),
                             named_a=named(key, named_a), named_b=named(key, named_b)))
    return tuple(rows)


def _worker_rows(a: Side, b: Side, part: np.ndarray, stages: Sequence[GroupRow],
                 dp_ranks: Sequence[GroupRow], floor: float,
                 named_a: set[tuple[Level, str]], named_b: set[tuple[Level, str]]
                 ) -> tuple[GroupRow, ...]:
    """Rows of the workers. A worker's change is beyond the noise where its own part passes
    the floor and its DP rank's or its stage's per-step change is significant (S_w has no
    per-step values in a result.json)."""
    assert a.blame.worker is not None and b.blame.worker is not None
    ea, eb = _excess(a.blame.worker, a), _excess(b.blame.worker, b)
    dp_sig = np.array([r.test is not None and r.test.significant for r in dp_ranks], dtype=bool)
    st_sig = np.array([r.test is not None and r.test.significant for r in stages], dtype=bool)
    sig = (np.abs(part) >= floor) & (dp_sig[:, None] | st_sig[None, :])
    rows = []
    for d, s in zip(*np.nonzero(np.ones_like(part, dtype=bool)), strict=True):
        key = f"{d},{s}"
        rows.append(GroupRow(Level.WORKER, key, float(a.blame.worker[d, s]),
                             float(b.blame.worker[d, s]), float(ea[d, s]), float(eb[d, s]),
                             None, float(part[d, s]), bool(sig[d, s]),
                             named_a=(Level.WORKER, key) in named_a,
                             named_b=(Level.WORKER, key) in named_b))
    return tuple(rows)


def _named(side: Side) -> tuple[Straggler, ...]:
    """The stragglers a verdict names: the last stage for ``last_stage``, else its workers."""
    v = side.verdict
    if v.cause == "last_stage":
        return (Straggler(Level.STAGE, str(side.pp - 1), v.cause),)
    return tuple(Straggler(Level.WORKER, w.key, v.cause) for w in v.workers)


def _stragglers(a: Side, b: Side, same_dp: bool, same_pp: bool) -> Stragglers:
    na, nb = _named(a), _named(b)

    def comparable(s: Straggler) -> bool:
        return same_pp and same_dp

    ka = {(s.level, s.key): s for s in na if comparable(s)}
    kb = {(s.level, s.key): s for s in nb if comparable(s)}
    new = [s for k, s in kb.items() if k not in ka]
    gone = [s for k, s in ka.items() if k not in kb]
    kept = tuple(s for k, s in kb.items() if k in ka)
    moved = []
    for g in list(gone):
        match = next((n for n in new if n.level == g.level and n.cause == g.cause), None)
        if match is not None:
            moved.append((g, match))
            gone.remove(g)
            new.remove(match)
    return Stragglers(a=na, b=nb, new=tuple(new), gone=tuple(gone), moved=tuple(moved),
                      kept=kept, compared=same_pp and same_dp)


# -- layouts ------------------------------------------------------------------------------
def _layout(a: Side, b: Side) -> Layout:
    ja, jb = a.job, b.job
    diffs = [(f, str(x), str(y)) for f, x, y in (
        ("dp_size", ja.dp_size, jb.dp_size), ("pp_size", ja.pp_size, jb.pp_size),
        ("tp_size", ja.tp_size, jb.tp_size), ("vpp_size", ja.vpp_size, jb.vpp_size),
        ("dsp_size", ja.dsp_size, jb.dsp_size)) if x != y]
    skipped: list[tuple[str, str]] = []
    notes: list[str] = []
    if ja.pp_size != jb.pp_size:
        skipped.append(("stages", f"pp {ja.pp_size} vs {jb.pp_size}: a stage holds other "
                                  "layers in each job"))
    if ja.dp_size != jb.dp_size:
        skipped.append(("dp_ranks", f"dp {ja.dp_size} vs {jb.dp_size}: the DP ranks are "
                                    "not the same replicas"))
    if ja.pp_size != jb.pp_size or ja.dp_size != jb.dp_size:
        skipped.append(("workers", f"dp x pp {ja.dp_size} x {ja.pp_size} vs {jb.dp_size} x "
                                   f"{jb.pp_size}: a position is not the same worker in both "
                                   "(the stragglers are listed, not matched)"))
    else:
        for name, side in (("A", a), ("B", b)):
            if side.blame.worker is None:
                skipped.append(("workers", f"{name}'s S_w is the min(S_dp, S_stage) "
                                           "approximation (analysed with --no-exact)"))
    for name, side in (("A", a), ("B", b)):
        if side.op_mean is None:
            why = (f"{name} is a result.json, which holds no op durations" if
                   side.kind == "result.json" else f"{name} came without its op table")
            skipped.append(("mean_op_time", f"{why} (give the trace to compare them)"))
            break
    if a.n_steps != b.n_steps:
        notes.append(f"A has {a.n_steps} steps, B {b.n_steps}: per-step values are compared "
                     "as distributions, not step by step")
    for f, x, y in diffs:
        if f in ("tp_size", "vpp_size", "dsp_size"):
            notes.append(f"{f} {x} vs {y}: the work per op differs; figures are compared "
                         "as they are")
    if ja.trial_name != jb.trial_name:
        notes.append(f"job names differ ({ja.trial_name!r} vs {jb.trial_name!r})")
    for name, side in (("A", a), ("B", b)):
        if not side.trustworthy:
            notes.append(f"{name}'s analysis is not trustworthy (its "
                         "untrustworthy_reasons say why): its figures may be off")
    only = [(k, "B") for k in b.blame.optype if k not in a.blame.optype]
    only += [(k, "A") for k in a.blame.optype if k not in b.blame.optype]
    notes += [f"op type {k} only in {where}" for k, where in only]
    return Layout(tuple(diffs), tuple(skipped), tuple(notes))


# -- ranking ------------------------------------------------------------------------------
def _kind(delta: float, named_a: bool, named_b: bool) -> Kind:
    if named_b and not named_a:
        return Kind.APPEARS
    if named_a and not named_b:
        return Kind.GOES
    return Kind.GROWS if delta > 0 else Kind.SHRINKS


def _per_step(x: float) -> str:
    return f"{x:+.3g} s per step"


def _what(row: GroupRow, a: Side, b: Side) -> str:
    if row.level == Level.WORKER:
        return f"worker {b.worker_label(row.key)}"
    if row.level == Level.STAGE:
        where = (["the last stage"] if int(row.key) == b.pp - 1 and b.pp > 1 else []) + (
            ["every DP rank"] if b.dp > 1 else [f"worker {b.worker_label(f'0,{row.key}')}"])
        return f"stage {row.key} ({', '.join(where)})"
    if row.level == Level.DP_RANK:
        return f"DP rank {row.key} (every stage)" if b.pp > 1 else f"DP rank {row.key}"
    return f"op type {row.key}"


_SYMBOL = {Level.WORKER: "S_w", Level.STAGE: "S_stage", Level.DP_RANK: "S_dp",
           Level.OPTYPE: "S_t"}


def _group_change(row: GroupRow, a: Side, b: Side) -> Change:
    kind = _kind(row.explained, row.named_a, row.named_b)
    what = _what(row, a, b)
    verb = {Kind.APPEARS: "is a new straggler", Kind.GOES: "is no longer a straggler",
            Kind.GROWS: "got slower", Kind.SHRINKS: "got faster"}[kind]
    s = f"{_SYMBOL[row.level]} {_num(row.s_a)} -> {_num(row.s_b)}"
    op = ""
    if row.mean_op is not None:
        op = f", mean op {row.mean_op.a:.3g} s -> {row.mean_op.b:.3g} s"
    return Change(row.level, row.key, kind, row.explained, row.s_a, row.s_b,
                  f"{what} {verb}: {s}{op}, {_per_step(row.explained)}")


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _moves(rows: Sequence[GroupRow], stragglers: Stragglers, a: Side, b: Side
           ) -> tuple[list[Change], set[str]]:
    """The moves the verdicts show whose two workers both changed beyond the noise."""
    by_key = {r.key: r for r in rows if r.significant}
    out, used = [], set()
    for old, new in stragglers.moved:
        if old.level != Level.WORKER or old.key not in by_key or new.key not in by_key:
            continue
        ro, rn = by_key[old.key], by_key[new.key]
        out.append(Change(
            Level.WORKER, new.key, Kind.MOVES, rn.explained, ro.s_a, rn.s_b,
            f"the straggler ({new.cause}) moved from worker {a.worker_label(old.key)} to "
            f"worker {b.worker_label(new.key)}: S_w of {old.key} {_num(ro.s_a)} -> "
            f"{_num(ro.s_b)} ({_per_step(ro.explained)}), of {new.key} {_num(rn.s_a)} -> "
            f"{_num(rn.s_b)} ({_per_step(rn.explained)})",
            explained_gone=ro.explained, moved_from=old.key))
        used |= {old.key, new.key}
    return out, used


def _alone(rows: Sequence[GroupRow]) -> GroupRow | None:
    """The one row whose change is beyond the noise and at least :data:`PEER_SHARE` of the
    largest, where there is exactly one such row (else None)."""
    top = max((abs(r.explained) for r in rows), default=0.0)
    hit = [r for r in rows if abs(r.explained) >= PEER_SHARE * top]
    return hit[0] if top > 0 and len(hit) == 1 and hit[0].significant else None


def _meet(stages: Sequence[GroupRow], dp_ranks: Sequence[GroupRow], stragglers: Stragglers,
          b: Side) -> Change | None:
    """Where S_w is not compared: one stage and one DP rank that alone changed name the
    worker where they meet (as the published min(S_dp, S_stage) score does)."""
    st, dr = _alone(stages), _alone(dp_ranks)
    if st is None or dr is None or (st.explained > 0) != (dr.explained > 0):
        return None
    key = f"{dr.key},{st.key}"
    new = {s.key for s in stragglers.new if s.level == Level.WORKER}
    gone = {s.key for s in stragglers.gone if s.level == Level.WORKER}
    big = st if abs(st.explained) >= abs(dr.explained) else dr
    kind = _kind(big.explained, key in gone, key in new)
    verb = {Kind.APPEARS: "is a new straggler", Kind.GOES: "is no longer a straggler",
            Kind.GROWS: "got slower", Kind.SHRINKS: "got faster"}[kind]
    return Change(Level.WORKER, key, kind, big.explained, None, None,
                  f"worker {b.worker_label(key)} {verb}, where DP rank {dr.key} and stage "
                  f"{st.key} meet (S_w is not compared): S_dp {_num(dr.s_a)} -> "
                  f"{_num(dr.s_b)} ({_per_step(dr.explained)}), S_stage {_num(st.s_a)} -> "
                  f"{_num(st.s_b)} ({_per_step(st.explained)})")


def host_location(a: Side, b: Side) -> tuple[str, str, float | None, float | None]:
    """Where host time changed, by the launch attribution: ``(key, words, S^launch of A,
    of B)``, the key ``"worker d,s"``, ``"dp_rank d"``, ``"stage s"`` or ``""`` (not
    located). A DP rank (stage) is named where it alone holds at least
    :data:`PEER_SHARE` of the largest change among the DP ranks (stages); both: the
    worker where they meet."""
    if a.host is None and b.host is None:
        return "", "(not located: no launch attribution, the discrepancy is below 1.03 in " \
                   "both)", None, None

    def excess(side: Side, which: str) -> np.ndarray:
        h = side.host
        n = side.dp if which == "dp" else side.pp
        if h is None:
            return np.zeros(n)
        return ((h.dp_rank if which == "dp" else h.stage) - 1.0) * side.nodelay_mean

    def first_op(side: Side) -> float:
        h = side.host
        return 0.0 if h is None else (h.optype.get("first-op", 1.0) - 1.0) * side.nodelay_mean

    def alone(which: str) -> tuple[int | None, float]:
        n_a, n_b = (a.dp, b.dp) if which == "dp" else (a.pp, b.pp)
        if n_a != n_b or n_a < 2:
            return None, 0.0
        change = np.abs(excess(b, which) - excess(a, which))
        top = float(change.max())
        hit = np.flatnonzero(change >= PEER_SHARE * top)
        return (int(hit[0]) if top > 0 and hit.size == 1 else None), top

    d, top_d = alone("dp")
    s, top_s = alone("stage")
    if d is not None and s is not None:
        key, words = f"worker {d},{s}", f"on worker {b.worker_label(f'{d},{s}')}"
    elif d is not None:
        key, words = f"dp_rank {d}", f"on DP rank {d}"
    elif s is not None:
        key, words = f"stage {s}", f"on stage {s}"
    else:
        key, words = "", "spread over the workers"
    first = abs(first_op(b) - first_op(a))
    if first > 0 and first >= PEER_SHARE * max(top_d, top_s):
        words += " before the step's first op (data loading, the step's start)"
    return key, words, _s_launch(a, key), _s_launch(b, key)


def _s_launch(side: Side, key: str) -> float | None:
    """S^launch of a host-time location (None where not computed)."""
    h = side.host
    kind, _, rest = key.partition(" ")
    if h is None or not kind:
        return None
    if kind == "worker":
        d, s = (int(x) for x in rest.split(","))
        return next((x for w, x in h.worker.items() if (w.dp_rank, w.stage) == (d, s)), None)
    return float((h.dp_rank if kind == "dp_rank" else h.stage)[int(rest)])


def _rank(a: Side, b: Side, figures: Sequence[Figure], optypes: Sequence[GroupRow],
          stages: Sequence[GroupRow], dp_ranks: Sequence[GroupRow], workers: Sequence[GroupRow],
          stragglers: Stragglers) -> tuple[Change, ...]:
    fig = {f.name: f for f in figures}
    changes, used = _moves(workers, stragglers, a, b)
    changes += [_group_change(r, a, b) for r in workers if r.significant and r.key not in used]
    met = None if workers or a.dp < 2 or a.pp < 2 else _meet(stages, dp_ranks, stragglers, b)
    if met is not None:
        changes.append(met)
        stages = [r for r in stages if met.key.split(",")[1] != r.key]
        dp_ranks = [r for r in dp_ranks if met.key.split(",")[0] != r.key]
    for rows in (stages, dp_ranks, optypes):
        changes += [_group_change(r, a, b) for r in rows if r.significant]
    host = fig["host_time"].test
    if host is not None and host.significant:
        key, words, la, lb = host_location(a, b)
        named = {s.key for s in stragglers.new if s.cause == "host"}
        gone = {s.key for s in stragglers.gone if s.cause == "host"}
        wkey = key.partition(" ")[2] if key.startswith("worker") else ""
        kind = (Kind.APPEARS if wkey in named else Kind.GOES if wkey in gone
                else Kind.GROWS if host.delta > 0 else Kind.SHRINKS)
        verb = "grew" if host.delta > 0 else "shrank"
        s = ("" if la is None and lb is None else
             f", S^launch {_num(la)} -> {_num(lb)}" if la is not None and lb is not None else
             f", S^launch {_num(lb)} in B (not computed in A: discrepancy below 1.03)"
             if lb is not None else
             f", S^launch {_num(la)} in A (not computed in B: discrepancy below 1.03)")
        changes.append(Change(Level.HOST, key, kind, host.delta, la, lb,
                              f"host time {verb} {words}: {host.a:.3g} s -> {host.b:.3g} s "
                              f"per step (actual - no-delay){s}, {_per_step(host.delta)}"))
    work = fig["ideal_step_time"].test
    if work is not None and work.significant:
        verb = "grew" if work.delta > 0 else "shrank"
        changes.append(Change(Level.WORK, "", Kind.GROWS if work.delta > 0 else Kind.SHRINKS,
                              work.delta, work.a, work.b,
                              f"the ideal step time {verb}: {work.a:.4g} s -> {work.b:.4g} s "
                              "(the work per step, every op at its typical duration), "
                              f"{_per_step(work.delta)}"))
    strag = fig["straggling"].test
    located = any(c.level in (Level.WORKER, Level.STAGE, Level.DP_RANK, Level.OPTYPE)
                  for c in changes)
    if strag is not None and strag.significant and not located:
        verb = "grew" if strag.delta > 0 else "shrank"
        changes.append(Change(Level.JOB, "", Kind.GROWS if strag.delta > 0 else Kind.SHRINKS,
                              strag.delta, a.slowdown, b.slowdown,
                              f"the slowdown {verb}, spread over the job: S {a.slowdown:.3f} "
                              f"-> {b.slowdown:.3f}, {_per_step(strag.delta)}"))
    order = {Level.WORKER: 0, Level.STAGE: 1, Level.DP_RANK: 2, Level.HOST: 3,
             Level.OPTYPE: 4, Level.WORK: 5, Level.JOB: 6}
    changes.sort(key=lambda c: (-c.magnitude, order[c.level], c.key))
    return tuple(changes)
