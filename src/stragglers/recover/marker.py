"""The checkpoint marker: ``DIR/latest``, JSON ``{"step", "dp", "pp"}``, written atomically
by the job once every rank has saved its part of the checkpoint after ``step`` steps. A step
folder without the marker pointing to it is incomplete. The recovery driver
(:mod:`stragglers.recover.driver`) reads it to know where a restarted job resumes; the example
job (:mod:`stragglers.testbed.checkpoint`) writes it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.inputs import json_object, read_text

__all__ = ["LATEST", "Marker", "read_marker", "write_marker"]

LATEST = "latest"


@dataclass(frozen=True)
class Marker:
    """The ``latest`` marker: the step to resume at and the layout that wrote it."""

    step: int
    dp: int
    pp: int


def write_marker(ckpt_dir: Path, marker: Marker) -> None:
    """Point ``latest`` at a complete checkpoint (call after every role has saved)."""
    write_text(ckpt_dir / LATEST,
               json.dumps({"step": marker.step, "dp": marker.dp, "pp": marker.pp}) + "\n")


def read_marker(ckpt_dir: Path) -> Marker | None:
    """The ``latest`` marker, or None when no complete checkpoint exists."""
    path = ckpt_dir / LATEST
    if not path.exists():
        return None
    text = read_text(path)
    raw = json_object(text, str(path), "an object with step, dp, pp")
    values = {}
    for key in ("step", "dp", "pp"):
        value = raw.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InputError(f"{path}: field {key!r}: expected an integer >= 0, got {value!r}")
        values[key] = value
    return Marker(**values)
