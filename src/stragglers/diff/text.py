"""The diff as text for the terminal: the conclusion, the figures of A and B, the ranked
changes and the groups that moved most."""

from __future__ import annotations

from collections.abc import Sequence

from stragglers.diff.compare import Diff, Figure, GroupRow, Level, SideInfo, Straggler

#: Rows of each group table shown (the JSON holds them all).
TOP = 5
#: Figures whose change is also shown relative to A (step times).
RELATIVE = frozenset({"step_time", "step_time_no_delay", "ideal_step_time"})


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]
           ) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  " + "  ".join(c.rjust(w) if r else c.ljust(w)
                                for c, w, r in zip(cells, widths, right, strict=True)).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _p(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _v(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    return f"{x:.4f} s" if unit == "s" else f"{x:.4f}"


def _side(name: str, s: SideInfo) -> str:
    v = s.cause + (f" {', '.join(s.workers[:6])}" if s.workers else "")
    return (f"{name}: {s.source} ({s.kind}): job {s.trial_name}, dp {s.dp} x pp {s.pp} x tp "
            f"{s.tp}, vpp {s.vpp}, {s.steps} steps; verdict {v}"
            + ("" if s.trustworthy else " [UNTRUSTWORTHY]"))


def _figure(f: Figure) -> list[str]:
    t = f.test
    delta = f.delta
    change = "-" if delta is None else (f"{delta:+.4f}" + (" s" if f.unit == "s" else ""))
    rel = ("" if t is None or t.relative is None or f.name not in RELATIVE
           else f"{t.relative:+.1%}")
    mark = "" if f.significant is None else ("changed" if f.significant else "")
    return [f.label, _v(f.a, f.unit), _v(f.b, f.unit), change, rel, _p(None if t is None
                                                                      else t.p_value), mark]


def _group_rows(rows: Sequence[GroupRow], symbol: str, top: int, mean_op: bool = False
                ) -> list[str]:
    moved = sorted(rows, key=lambda r: -abs(r.delta))[:top]
    header = ["", f"{symbol} A", f"{symbol} B", "excess change", "explained", "p", ""]
    right = [False, True, True, True, True, True, False]
    if mean_op:
        header[-1:-1] = ["mean op A", "mean op B"]
        right[-1:-1] = [True, True]
    out = []
    for r in moved:
        named = ("new straggler" if r.named_b and not r.named_a else
                 "straggler gone" if r.named_a and not r.named_b else
                 "straggler" if r.named_a else "")
        cells = [r.key, "-" if r.s_a is None else f"{r.s_a:.4f}",
                 "-" if r.s_b is None else f"{r.s_b:.4f}", f"{r.delta:+.4f} s",
                 f"{r.explained:+.4f} s", _p(None if r.test is None else r.test.p_value),
                 ("changed" if r.significant else "") + (f" {named}" if named else "")]
        if mean_op:
            m = r.mean_op
            cells[-1:-1] = (["-", "-"] if m is None else [f"{m.a:.4g} s", f"{m.b:.4g} s"])
        out.append(cells)
    return _table(header, out, right)


def _stragglers(items: Sequence[Straggler]) -> str:
    return ", ".join(f"{'stage ' if s.level == Level.STAGE else ''}{s.key} ({s.cause})"
                     for s in items) or "-"


def render_text(diff: Diff, top: int = TOP) -> str:
    """The terminal summary of a diff (``top`` rows per group table)."""
    lines = ["stragglers diff", "  " + _side("A", diff.a), "  " + _side("B", diff.b)]
    lay = diff.layout
    lines.append("  layout: " + ("the same" if lay.same else "differs: " + ", ".join(
        f"{f} {x} -> {y}" for f, x, y in lay.differences)))
    lines += [f"  not compared: {what}: {why}" for what, why in lay.not_compared]
    lines += [f"  note: {n}" for n in lay.notes]
    lines += ["", diff.conclusion, ""]
    lines += _table(["figure", "A", "B", "change", "", "p", ""],
                    [_figure(f) for f in diff.figures],
                    [False, True, True, True, True, True, False])
    lines.append("")
    if diff.changes:
        lines.append(f"what changed, the largest first (step time explained; floor "
                     f"{diff.floor:.3g} s = {diff.settings.min_change:.0%} of A's step time, "
                     f"alpha {diff.settings.alpha:g}):")
        lines += [f"  {i + 1}. {c.text}" for i, c in enumerate(diff.changes)]
    else:
        lines.append(f"nothing changed beyond the noise (floor {diff.floor:.3g} s = "
                     f"{diff.settings.min_change:.0%} of A's step time, alpha "
                     f"{diff.settings.alpha:g})")
    for title, rows, symbol in (("op types", diff.optypes, "S_t"),
                                ("stages", diff.stages, "S_stage"),
                                ("DP ranks", diff.dp_ranks, "S_dp"),
                                ("workers", diff.workers, "S_w")):
        if rows:
            lines += ["", f"{title} that moved most (excess: step time their ops alone add to "
                          "the ideal timeline, per step):"]
            lines += _group_rows(rows, symbol, top, mean_op=rows is diff.optypes)
    st = diff.stragglers
    lines += ["", f"stragglers named by the verdicts: A {_stragglers(st.a)}; B "
                  f"{_stragglers(st.b)}"]
    if st.compared:
        lines.append(f"  new: {_stragglers(st.new)}; gone: {_stragglers(st.gone)}; moved: "
                     + (", ".join(f"{x.key} -> {y.key} ({y.cause})" for x, y in st.moved)
                        or "-"))
    else:
        lines.append("  not matched: the layouts differ, a position is not the same worker")
    return "\n".join(lines)
