"""The fleet report: the paper's fleet figures for this fleet as PNG (Figs. 3-7 and 11, and
the confusion matrix of verdict vs truth when truth is known) and ``report.html`` with the
headline sentences, the figures, the confusion matrix and the failed jobs' reasons.

Every figure covers the included jobs (analysed, discrepancy within 5%); Figs. 4-7 and 11
the straggling ones among them (S >= 1.1), as in the paper.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from stragglers.fleet.stats import STRAGGLING, FleetStats
from stragglers.fleet.task import OP_KEYS

#: Failed jobs listed in the HTML (all are counted, and all are in fleet.parquet).
MAX_LISTED_FAILURES = 200

FIGURES: dict[str, str] = {
    "fig3_waste_cdf.png": "Fig. 3: CDF of the share of GPU time wasted, per job",
    "fig4_step_slowdown_cdf.png": "Fig. 4: CDF of per-step slowdown normalised by the job's "
                                  "S (straggling jobs)",
    "fig5_waste_by_optype.png": "Fig. 5: share of the waste each op type causes alone "
                                "((S_t - 1)/(S - 1), straggling jobs)",
    "fig6_mw_cdf.png": "Fig. 6: CDF of M_W (straggling jobs)",
    "fig7_ms_cdf.png": "Fig. 7: CDF of M_S (straggling jobs)",
    "fig11_fb_correlation_cdf.png": "Fig. 11: CDF of the forward/backward compute "
                                    "correlation (straggling jobs)",
    "confusion.png": "Verdict vs injected cause (jobs with truth.json)",
}


def _cdf(ax: object, values: np.ndarray, label: str | None = None,
         color: object = None) -> None:
    v = np.sort(values[np.isfinite(values)])
    if len(v):
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post",  # type: ignore[attr-defined]
                label=label, color=color)


def _figure(title: str, xlabel: str, ylabel: str = "share of jobs (CDF)"
            ) -> tuple[Figure, object]:
    fig = Figure(figsize=(5.5, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path)


def write_figures(stats: FleetStats, folder: Path) -> list[str]:
    """Write every figure into ``folder``; returns their names."""
    inc, strag = stats.included, stats.straggling
    fig, ax = _figure(f"Resource waste ({len(inc)} jobs)", "GPU time wasted (%)")
    _cdf(ax, 100 * np.array([r.row.waste for r in inc]))
    _save(fig, folder / "fig3_waste_cdf.png")

    fig, ax = _figure(f"Per-step slowdown / job S ({len(strag)} straggling jobs)",
                      "step slowdown / S", "share of steps (CDF)")
    norm = [np.array(r.row.step_slowdown) / r.row.slowdown for r in strag]
    _cdf(ax, np.concatenate(norm) if norm else np.array([]))
    _save(fig, folder / "fig4_step_slowdown_cdf.png")

    fig, ax = _figure(f"Waste by op type ({len(strag)} straggling jobs)",
                      "share of the job's waste")
    palette = colormaps["tab20"]
    for i, k in enumerate(OP_KEYS):
        vals = np.array([dict(r.row.op_share).get(k, math.nan) for r in strag])
        if np.isfinite(vals).any():
            _cdf(ax, vals, k, palette(i % 20))
    if strag:
        ax.legend(fontsize=6)  # type: ignore[attr-defined]
    _save(fig, folder / "fig5_waste_by_optype.png")

    for name, attr, what in (("fig6_mw_cdf.png", "m_w", "M_W (top 3% workers)"),
                             ("fig7_ms_cdf.png", "m_s", "M_S (last stage)")):
        fig, ax = _figure(f"{what} ({len(strag)} straggling jobs)", what)
        _cdf(ax, np.array([getattr(r.row, attr) for r in strag]))
        ax.axvline(0.5, color="grey", ls="--", lw=0.8)  # type: ignore[attr-defined]
        _save(fig, folder / name)

    fig, ax = _figure(f"Forward/backward correlation ({len(strag)} straggling jobs)",
                      "Pearson correlation")
    _cdf(ax, np.array([r.row.fb_correlation for r in strag]))
    _save(fig, folder / "fig11_fb_correlation_cdf.png")

    names = [n for n in FIGURES if n != "confusion.png"]
    if stats.with_truth:
        labels, conf = stats.confusion_labels, stats.confusion
        fig = Figure(figsize=(1.2 + 0.75 * len(labels), 1.0 + 0.6 * len(labels)), dpi=100)
        FigureCanvasAgg(fig)
        ax2 = fig.add_subplot()
        ax2.imshow(conf, cmap="Blues")
        ax2.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
        ax2.set_yticks(range(len(labels)), labels, fontsize=8)
        ax2.set_xlabel("verdict")
        ax2.set_ylabel("injected (primary)")
        for (i, j), c in np.ndenumerate(conf):
            ax2.text(j, i, str(c), ha="center", va="center", fontsize=8,
                     color="white" if c > conf.max() / 2 else "black")
        acc = stats.cause_accuracy or 0.0
        ax2.set_title(f"{100 * acc:.1f}% right ({stats.with_truth} jobs)", fontsize=10)
        _save(fig, folder / "confusion.png")
        names.append("confusion.png")
    return names


def render_html(stats: FleetStats, figures: Sequence[str]) -> str:
    """The report page (figures referenced by file name, beside it)."""
    esc = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>Fleet study</title>",
             "<style>body{font-family:sans-serif;max-width:980px;margin:2em auto}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
             "table{border-collapse:collapse}img{max-width:100%}</style></head><body>",
             "<h1>Fleet study</h1><ul>"]
    parts += [f"<li>{esc(s)}</li>" for s in stats.headlines()]
    parts.append(f"</ul><p>Straggling: S &ge; {STRAGGLING:g}.</p>")
    if stats.with_truth:
        labels = stats.confusion_labels
        parts.append("<h2>Verdict vs injected cause</h2><table><tr><th>injected \\ "
                     "verdict</th>" + "".join(f"<th>{esc(c)}</th>" for c in labels) + "</tr>")
        for i, c in enumerate(labels):
            parts.append(f"<tr><th>{esc(c)}</th>"
                         + "".join(f"<td>{int(x)}</td>" for x in stats.confusion[i]) + "</tr>")
        parts.append("</table>")
    parts.append("<h2>Figures</h2>")
    for name in figures:
        parts.append(f"<figure><img src='{esc(name)}' alt='{esc(FIGURES[name])}'>"
                     f"<figcaption>{esc(FIGURES[name])}</figcaption></figure>")
    if stats.failures:
        parts.append(f"<h2>Failed jobs ({len(stats.failures)})</h2><ul>")
        for job, reason in stats.failures[:MAX_LISTED_FAILURES]:
            parts.append(f"<li><code>{esc(job)}</code>: {esc(reason)}</li>")
        more = len(stats.failures) - MAX_LISTED_FAILURES
        parts.append("</ul>" + (f"<p>... and {more} more (see fleet.parquet)</p>"
                                if more > 0 else ""))
    parts.append("</body></html>")
    return "\n".join(parts)
