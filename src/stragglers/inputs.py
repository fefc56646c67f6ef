"""Reading user files under the error contract: small files (metadata, configuration) and
the lines of JSON-lines files.

Every failure is an :class:`~stragglers.errors.InputError` with one line naming the file:
not found, a folder, unreadable, too large, not UTF-8, not valid YAML, an alias bomb, nesting
too deep or an integer too long. The limits are those of :mod:`stragglers.limits`. JSON
lines are read with :func:`iter_lines` and :func:`parse_json_line`, whose
:class:`JSONLineError` the caller turns into ``FILE:LINE: reason``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from stragglers.errors import InputError
from stragglers.limits import check_limit, limit


def check_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` must exist and be a regular file (not a folder)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: {what} not found")
    if p.is_dir():
        raise InputError(f"{p}: is a folder, expected a {what}")
    return p


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """Read a small UTF-8 text file, checked against the ``text_bytes`` limit first."""
    p = check_file(path, what)
    try:
        size = p.stat().st_size
        check_limit("text_bytes", size, str(p))
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text (bad byte at offset {exc.start})") from None


class _CheckedLoader(yaml.SafeLoader):
    """A safe loader that refuses documents whose aliases expand to more than ``yaml_nodes``
    values (the "billion laughs" bomb: 386 bytes that expand to 10^8 strings) and integers
    longer than ``int_digits`` digits."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.max_digits = limit("int_digits")

    def construct_yaml_int(self, node: Any) -> Any:
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > self.max_digits:
            raise yaml.YAMLError(f"integer with {digits} digits at line "
                                 f"{node.start_mark.line + 1} (limit {self.max_digits})")
        return super().construct_yaml_int(node)


_CheckedLoader.add_constructor("tag:yaml.org,2002:int", _CheckedLoader.construct_yaml_int)


def _expanded_size(root: yaml.Node, cap: int) -> int:
    """Number of values the node graph stands for once aliases (shared nodes) are expanded,
    counted bottom-up with memoisation; stops early above ``cap``."""
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in size:
            continue
        if isinstance(node, yaml.ScalarNode):
            size[id(node)] = 1
            continue
        children: list[yaml.Node] = (
            [x for pair in node.value for x in pair] if isinstance(node, yaml.MappingNode)
            else list(node.value))
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
            continue
        total = 1 + sum(size.get(id(c), 1) for c in children)
        size[id(node)] = min(total, cap + 1)
    return size[id(root)]


def _depth(value: Any, cap: int) -> int:
    """Nesting depth of a loaded value, stopping once it exceeds ``cap``."""
    depth, level = 0, [value]
    while level:
        nxt: list[Any] = []
        for v in level:
            if isinstance(v, dict):
                nxt.extend(v.values())
            elif isinstance(v, list):
                nxt.extend(v)
        if not nxt:
            break
        depth += 1
        if depth > cap:
            break
        level = nxt
    return depth


def load_yaml(path: str | os.PathLike[str], what: str = "YAML file") -> Any:
    """Read and parse a YAML (or JSON) file safely: plain data only, bounded aliases,
    nesting and integer size."""
    text = read_text(path, what)
    try:
        loader = _CheckedLoader(text)  # the reader refuses control characters here
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: not valid YAML ({first})") from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        cap = limit("yaml_nodes")
        if _expanded_size(node, cap) > cap:
            raise InputError(f"{path}: its aliases expand to more than {cap:,} values (set "
                             "STRAGGLERS_MAX_YAML_NODES to raise the limit)")
        value = loader.construct_document(node)
    except InputError:
        raise
    except yaml.YAMLError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path}: not valid YAML ({first})") from None
    except RecursionError:
        raise InputError(f"{path}: nesting too deep to read (limit {limit('nesting')})"
                         ) from None
    finally:
        loader.dispose()
    cap = limit("nesting")
    if _depth(value, cap) > cap:
        raise InputError(f"{path}: nesting deeper than {cap} levels (set "
                         "STRAGGLERS_MAX_NESTING to raise the limit)")
    return value


#: Longest line (bytes) of a JSON-lines input (trace rows, probe records).
MAX_LINE_BYTES = 1 << 20


def iter_lines(path: str | os.PathLike[str], max_line: int = MAX_LINE_BYTES
               ) -> Iterator[tuple[int, bytes]]:
    """Numbered (1-based) lines of a file, as bytes with their newline.

    A line longer than ``max_line`` comes back cut at ``max_line + 1`` bytes and the rest
    of it is skipped, so memory stays bounded on a file without newlines;
    :func:`parse_json_line` refuses such a line.
    """
    with Path(path).open("rb") as fh:
        lineno = 0
        while raw := fh.readline(max_line + 1):
            lineno += 1
            yield lineno, raw
            if len(raw) > max_line and not raw.endswith(b"\n"):
                while (rest := fh.readline(max_line)) and not rest.endswith(b"\n"):
                    pass


class JSONLineError(ValueError):
    """One line of a JSON-lines file that cannot be read; the message names no file."""


def _json_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    cap = limit("int_digits")
    if digits > cap:
        raise JSONLineError(f"an integer with {digits} digits (limit {cap})")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONLineError(f"number {text[:30]!r} overflows a 64-bit float")
    return value


def _json_constant(text: str) -> float:
    raise JSONLineError(f"{text} is not a finite number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise JSONLineError(f"key {k[:40]!r} appears twice")
        out[k] = v
    return out


def parse_json_line(raw: bytes, max_line: int = MAX_LINE_BYTES) -> Any:
    """Parse one JSON line under the error contract.

    Raises :class:`JSONLineError` (a one-line reason) for: a line longer than ``max_line``
    bytes, bytes that are not UTF-8, invalid JSON, NaN/Infinity, a number that overflows a
    float, an integer longer than the ``int_digits`` limit, a key given twice, nesting deeper
    than the ``nesting`` limit. Returns None for a blank line.
    """
    if len(raw) > max_line:
        raise JSONLineError(f"line longer than {max_line:,} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONLineError(f"not UTF-8 text (bad byte at column {exc.start + 1})") from None
    if not text.strip():
        return None
    try:
        value = json.loads(text, parse_int=_json_int, parse_float=_json_float,
                           parse_constant=_json_constant, object_pairs_hook=_unique_keys)
    except JSONLineError:
        raise
    except RecursionError:
        raise JSONLineError("nesting too deep to read (a value nested thousands of levels)"
                            ) from None
    except ValueError as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc).split("\n")[0]
        raise JSONLineError(f"not valid JSON ({msg})") from None
    cap = limit("nesting")
    if _depth(value, cap) > cap:
        raise JSONLineError(f"nesting deeper than {cap} levels")
    return value


def json_object(text: str, where: str, expected: str = "a JSON object") -> dict[str, Any]:
    """The JSON object in ``text`` (the content of the file ``where``); an :class:`InputError`
    names the line of a syntax error, or says that the value is not ``expected``."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: line {exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise InputError(f"{where}: line 1: expected {expected}, got {type(raw).__name__}")
    return raw


def int_field(obj: dict[str, Any], key: str, where: str, low: int = 0) -> int:
    """``obj[key]`` as an integer >= ``low`` (a bool is not one); an :class:`InputError` names
    ``where`` and the field."""
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where}: field {key!r}: expected an integer, got {value!r}"[:300])
    if value < low:
        raise InputError(f"{where}: field {key!r}: expected an integer >= {low}, got {value}")
    return value
