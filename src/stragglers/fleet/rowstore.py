"""The store of finished rows: ``OUT/rows/<key>.json``, one file per job content hash,
each written atomically (a temporary file renamed into place), so that an interrupted run
leaves only whole rows and a re-run skips every job whose key is already there."""

from __future__ import annotations

import json
import re
from pathlib import Path

from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.fleet.task import FleetRow

_KEY = re.compile(r"^[0-9a-f]{64}$")
ROWS_DIR = "rows"


class RowStore:
    """Finished rows under ``root`` (created on first use)."""

    def __init__(self, out: str | Path) -> None:
        self.root = Path(out) / ROWS_DIR

    def done(self) -> set[str]:
        """Keys of the rows stored (temporary files of an interrupted write are not)."""
        if not self.root.is_dir():
            return set()
        return {p.stem for p in self.root.glob("*.json") if _KEY.match(p.stem)}

    def put(self, key: str, row: FleetRow) -> None:
        if not _KEY.match(key):
            raise ValueError(f"RowStore.put: {key!r} is not a SHA-256 hex key")
        self.root.mkdir(parents=True, exist_ok=True)
        write_text(self.root / f"{key}.json", json.dumps(row.to_dict(), allow_nan=False))

    def get(self, key: str) -> FleetRow:
        path = self.root / f"{key}.json"
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            return FleetRow.from_dict(raw)
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{path}: a damaged fleet row ({type(exc).__name__}: {exc}); "
                             "delete it to recompute the job") from None
