"""Output folders a run claims: created and marked by stragglers, or the user's.

A folder holding :data:`OUT_MARKER` was created by stragglers and its previous run's outputs
may be deleted; a non-empty folder without it is the user's and is refused unless forced. The
probes (:mod:`stragglers.probe.loop`), the example job and the evaluation harnesses share it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from stragglers.atomic import check_out_dir, write_text
from stragglers.errors import InputError

__all__ = ["OUT_MARKER", "check_unclaimed", "claim_out_dir"]

#: Written into every output folder a run creates or claims: a
#: folder holding it is ours to clean; a non-empty folder without it is the user's.
OUT_MARKER = ".stragglers-probe-out"


def claim_out_dir(out_dir: str | os.PathLike[str], force: bool, option: str,
                  outputs: tuple[str, ...]) -> Path:
    """Make ``out_dir`` the job's output folder, or refuse with an InputError.

    A folder that does not exist or is empty is created and marked (:data:`OUT_MARKER`); a
    marked one is ours: the previous run's ``outputs`` are deleted. A non-empty folder
    without the marker is refused unless ``force`` (then it is marked and the same names are
    deleted; nothing else in it is touched).
    """
    out = check_unclaimed(out_dir, force, option,
                          f"pass --force to reuse it (its {', '.join(outputs)} are then "
                          "replaced)")
    for name in outputs:
        target = out / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if not (out / OUT_MARKER).is_file():
        write_text(out / OUT_MARKER, json.dumps({"created_by": "stragglers.probe"}) + "\n")
    return out


def check_unclaimed(out_dir: str | os.PathLike[str], force: bool, option: str,
                    hint: str = "pass force=True") -> Path:
    """Refuse (:class:`~stragglers.errors.InputError`, ending with ``hint``) an output folder
    that is not new, empty, or one stragglers created (it holds the marker), unless
    ``force``. Reads only, so every rank of a job can run it before rank 0 changes
    anything."""
    out = check_out_dir(out_dir, option)
    if (out.exists() and not force and not (out / OUT_MARKER).is_file()
            and any(out.iterdir())):
        raise InputError(f"{option} {out}: the folder is not empty and was not created by "
                         f"stragglers (no {OUT_MARKER} in it); choose a new or empty folder, "
                         f"or {hint}")
    return out

