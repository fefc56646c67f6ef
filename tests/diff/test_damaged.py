"""A damaged result.json (a field deleted, or replaced by a value of another type or out of
range) is read or refused with one line (InputError), never a traceback or a warning, and
what is read gives a diff whose JSON is strict: the fields the diff reads are damaged one
by one, in every way."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from stragglers.diff import compare, read_side, to_json
from stragglers.errors import InputError
from tests.diff.helpers import result, side

#: What a value is replaced by.
DAMAGE: tuple[Any, ...] = (None, "x", -1, 0, 1e308, True, [], {}, {"0": "a"})
#: The fields the diff reads (every other field of result.json is left alone by it).
READ = ("schema_version", "job", "steps", "step_time", "attribution", "attribution_per_step",
        "launch_attribution", "verdict", "worker_names", "slowdown_healthy", "trustworthy")


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths into the document: the fields the diff reads, two items of each level."""
    if prefix:
        yield prefix
    if isinstance(doc, dict):
        keys = READ if not prefix else list(doc)[:2]
        for k in keys:
            if k in doc:
                yield from _paths(doc[k], (*prefix, k))
    elif isinstance(doc, list):
        for i in range(min(2, len(doc))):
            yield from _paths(doc[i], (*prefix, i))


def _damage(doc: Any, path: tuple[Any, ...], how: Any) -> Any:
    """A copy of ``doc`` with the value at ``path`` deleted or replaced (copied along the
    path only)."""
    out = dict(doc) if isinstance(doc, dict) else list(doc)
    key = path[0]
    if len(path) > 1:
        out[key] = _damage(doc[key], path[1:], how)
    elif how == "delete":
        del out[key]
    else:
        out[key] = how
    return out


@pytest.mark.parametrize("cause", [{}, {"slow_loaders": [(1, 0.5, 1.0)]}])
def test_damaged_documents_are_read_or_refused_in_one_line(cause: dict) -> None:
    doc = json.loads(result(seed=2, **cause).to_json())
    other = side(seed=0)
    read = refused = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in _paths(doc):
            for how in ("delete", *DAMAGE):
                try:
                    s = read_side(_damage(doc, path, how), "r.json")
                except InputError as exc:
                    assert str(exc).startswith("r.json") and "\n" not in str(exc), (path, how)
                    refused += 1
                    continue
                json.loads(to_json(compare(other, s)))
                json.loads(to_json(compare(s, other)))
                read += 1
    assert refused > 300 and read > 20  # optional fields (names, launch, S_h) take damage
