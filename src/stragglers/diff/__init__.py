"""Compare two analyses of a job: what changed (``stragglers diff A B``).

* :mod:`.side`: the inputs (result folders, result.json files, traces) as typed
  :class:`~stragglers.diff.side.Side` objects;
* :mod:`.compare`: :func:`compare` → :class:`~stragglers.diff.compare.Diff` (how changes are
  tested, located and ranked);
* :mod:`.document`: the versioned ``diff.json`` document (its schema is documented there);
* :mod:`.text`, :mod:`.report`, :mod:`.outputs`: the terminal table, ``diff.html`` and the
  output folder.
"""

from stragglers.diff.compare import Change, Diff, DiffSettings, Kind, Level, compare
from stragglers.diff.document import DIFF_SCHEMA_VERSION, to_document, to_json
from stragglers.diff.side import Side, load_side, read_side, side_of

__all__ = ["DIFF_SCHEMA_VERSION", "Change", "Diff", "DiffSettings", "Kind", "Level", "Side",
           "compare", "load_side", "read_side", "side_of", "to_document", "to_json"]
