"""``report.html``: one self-contained page of an analysis, to hand to a colleague or paste
into an incident (``stragglers analyze … --out DIR`` writes it beside result.json).

It is drawn from the result document (data first) with the dashboard's own view models
(:mod:`stragglers.viz.svg`), macros (``viz/templates/analysis.html``) and stylesheet
(``viz/static/style.css``, inlined), so the two never disagree. Nothing is loaded from
anywhere: the heatmaps and bars are inline SVG, the style is inline and allowed by its hash
in a Content-Security-Policy that forbids every other source (``default-src 'none'``), and
there is no script (cells carry ``<title>`` tooltips). It opens from a file:// URL and as an
e-mail attachment alike.

Workers are keyed ``"dp_rank,stage"`` in result documents. A document's optional
``worker_names`` maps those keys to how a person finds the worker, its global rank and host
(``"rank 3 (host-a)"``, :meth:`stragglers.trace.table.OpTable.worker_names`): where present,
the page names them beside the key wherever it names a worker (the verdict, the hypotheses,
the worker heatmap's tooltips).
"""

from __future__ import annotations

import base64
import hashlib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from stragglers.analysis.heatmaps import HeatmapData
from stragglers.errors import InputError
from stragglers.viz.svg import fmt, optype_bars, pct, step_grid, worker_grid

REPORT_FILE = "report.html"

#: Output keys of the Perfetto timelines in result.json ``outputs``.
TIMELINES = (("timeline_original", "the original timeline (as recorded)"),
             ("timeline_ideal", "the ideal timeline (every op at its ideal duration)"),
             ("timeline_no-delay", "the no-delay timeline"))


@cache
def environment() -> Environment:
    """The shared templates (``viz/templates``), autoescaped."""
    env = Environment(loader=PackageLoader("stragglers.viz", "templates"),
                      autoescape=select_autoescape(["html"]), trim_blocks=True,
                      lstrip_blocks=True)
    env.globals.update(fmt=fmt, pct=pct)
    return env


def stylesheet() -> str:
    """The stylesheet the dashboard serves as /static/style.css."""
    return resources.files("stragglers.viz").joinpath("static/style.css").read_text("utf-8")


def worker_names(doc: dict[str, Any], source: str) -> dict[str, str]:
    """The document's optional ``worker_names`` (see the module docstring); empty when it
    has none. Anything but a mapping of strings to strings is an error naming the field."""
    raw = doc.get("worker_names")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InputError(f"{source}: field 'worker_names' must map 'dp_rank,stage' to names, "
                         f"got {type(raw).__name__}")
    for key, value in raw.items():
        if not isinstance(value, str):
            raise InputError(f"{source}: field 'worker_names[{key!r}]' must be a string, got "
                             f"{type(value).__name__}")
    return dict(raw)


def analysis_context(doc: dict[str, Any] | None, source: str, titles: bool = False,
                     data: HeatmapData | None = None) -> dict[str, Any]:
    """What the ``analysis`` macro draws from a result document: the document, the worker
    grid, the per-step grids, the op-type bars (or the reason the heatmaps cannot be
    drawn) and the workers' names (``names``: :func:`worker_names`). ``titles``: every cell
    of the per-step grids carries a ``<title>`` tooltip. ``data``: the heatmaps' data when
    the caller has it from the analysis itself (the document is then not read back for
    them: for 16k workers that took a second and a half)."""
    if doc is None:
        return {"doc": None}
    try:
        names = worker_names(doc, source)
        if data is None:
            data = HeatmapData.from_document(doc, source)
    except InputError as exc:
        return {"doc": doc, "heatmap_error": str(exc)}
    return {"doc": doc, "names": names, "worker_grid": worker_grid(data, names),
            "step_grids": [g for g in (step_grid(data, "dp_rank", titles),
                                       step_grid(data, "stage", titles)) if g is not None],
            "bars": optype_bars(doc)}


def _timelines(doc: dict[str, Any]) -> list[dict[str, str]]:
    outputs = doc.get("outputs") or {}
    rows = []
    for key, what in TIMELINES:
        out = outputs.get(key)
        if isinstance(out, str):
            rows.append({"file": Path(out).name, "what": what, "skipped": ""})
        elif isinstance(out, dict) and "skipped" in out:
            rows.append({"file": "", "what": what, "skipped": str(out["skipped"])})
    return rows


def render_report(doc: dict[str, Any], source: str = "result.json",
                  data: HeatmapData | None = None) -> str:
    """The report of one result document, as one HTML string (``data``: the heatmaps' data
    of the same analysis, see :func:`analysis_context`)."""
    css = stylesheet()
    digest = base64.b64encode(hashlib.sha256(css.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; style-src 'sha256-{digest}'; img-src data:; "
           "base-uri 'none'; form-action 'none'")
    context = analysis_context(doc, source, titles=True, data=data)
    return environment().get_template("report.html").render(
        css=css, csp=csp, job=doc.get("job") or {}, counts=doc.get("counts") or {},
        timelines=_timelines(doc), source_file=Path(str(doc.get("source", ""))).name,
        **context)
