"""Runs kept by an evaluation's ``--keep DIR`` (one subfolder per run holding its case
record), read back for ``--reanalyse``: shared by ``probe verdict-eval`` and
``probe recipe-eval``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from stragglers.errors import InputError

C = TypeVar("C")


def kept_runs(folder: str | Path, case_file: str, what: str,
              parse_case: Callable[[Any, str], C]
              ) -> tuple[list[tuple[C, Path, dict[str, Any]]], list[str]]:
    """The runs kept in ``folder`` (subfolders holding a ``case_file``, by name: the case
    parsed by ``parse_case(record["case"], path)``, the subfolder and the whole record) and
    the names of subfolders without one (runs that failed or did not finish). ``what``
    names the record in error messages; its integer field ``hog`` is checked."""
    from stragglers.inputs import load_yaml

    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"--reanalyse {folder}: no such folder")
    found = []
    unfinished = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        record_path = sub / case_file
        if not record_path.is_file():
            if not sub.name.startswith("."):
                unfinished.append(sub.name)
            continue
        record = load_yaml(record_path, what)  # JSON is YAML
        if not isinstance(record, dict):
            raise InputError(f"{record_path}: expected a JSON object")
        case = parse_case(record.get("case"), str(record_path))
        hog = record.get("hog")
        if not isinstance(hog, int) or isinstance(hog, bool):
            raise InputError(f"{record_path}: field 'hog' must be an integer")
        found.append((case, sub, record))
    if not found:
        raise InputError(f"--reanalyse {folder}: no kept runs in it (no */{case_file})")
    return found, unfinished


def run_figures(record: dict[str, Any]) -> tuple[int, float | None, float | None]:
    """A kept run's ``hog`` (checked by :func:`kept_runs`), ``wall_s`` and ``load_1m``
    (None where the record has no number), in the order ``score_run`` takes them."""
    wall, load = record.get("wall_s"), record.get("load_1m")
    return (int(record["hog"]), float(wall) if isinstance(wall, int | float) else None,
            float(load) if isinstance(load, int | float) else None)
