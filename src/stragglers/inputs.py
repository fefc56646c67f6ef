"""Reading small user files (metadata, configuration) under the error contract.

Every failure is an :class:`~stragglers.errors.InputError` with one line naming the file:
not found, a folder, unreadable, too large, not UTF-8, not valid YAML, an alias bomb, nesting
too deep or an integer too long. The limits are those of :mod:`stragglers.limits`.
"""

from __future__ import annotations

import os
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
    loader = _CheckedLoader(text)
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
