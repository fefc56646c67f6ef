"""The output folder of a diff: ``diff.json`` and ``diff.html``, written together or not at
all (:class:`stragglers.atomic.StagedDir`), diff.json last."""

from __future__ import annotations

import json
from pathlib import Path

from stragglers.atomic import StagedDir, write_text
from stragglers.diff.compare import Diff
from stragglers.diff.document import to_document
from stragglers.diff.report import DIFF_HTML, render_diff_report

DIFF_JSON = "diff.json"


def write_diff(diff: Diff, out: str | Path) -> dict[str, Path]:
    """Write diff.json and diff.html into ``out``; their paths by name. On any failure
    ``out`` is left as it was."""
    doc = to_document(diff)
    with StagedDir(out) as stage:
        write_text(stage.path(DIFF_HTML), render_diff_report(doc))
        write_text(stage.path(DIFF_JSON), json.dumps(doc, indent=1, allow_nan=False))
        stage.commit_last(DIFF_JSON)
    return {"report": stage.final(DIFF_HTML), "diff": stage.final(DIFF_JSON)}
