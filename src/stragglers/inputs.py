"""Reading user files under the error contract: small files (metadata, configuration) and
the lines of JSON-lines files.

Every failure is an :class:`~stragglers.errors.InputError` with one line naming the file:
not found, a folder, not a regular file (a named pipe, a device, a socket: refused before
anything is read, so that nothing waits for a writer or reads without end), a symbolic-link
loop, unreadable, too large, not UTF-8, not valid YAML, an alias bomb or a recursive alias,
nesting too deep or an integer too long. The limits are those of :mod:`stragglers.limits`.
JSON lines are read with :func:`iter_lines` and :func:`parse_json_line`, whose
:class:`JSONLineError` the caller turns into ``FILE:LINE: reason``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from stragglers.errors import InputError
from stragglers.limits import check_limit, limit

#: What a file that is not regular is, by the test of its mode.
_NOT_REGULAR: tuple[tuple[Any, str], ...] = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> str | None:
    """What a file of this mode is when it is neither a regular file nor a folder."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in _NOT_REGULAR:
        if test(mode):
            return kind
    return "not a regular file"


def _refuse_kind(p: Path, kind: str, what: str) -> InputError:
    return InputError(f"{p}: is {kind}, expected a regular {what} (named pipes, devices and "
                      "sockets are not read)")


def _os_error(p: Path, exc: OSError, what: str) -> InputError:
    if exc.errno == errno.ELOOP:
        return InputError(f"{p}: a loop of symbolic links, expected a {what}")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return InputError(f"{p}: {what} not found")
    return InputError(f"{p}: cannot read the {what} ({exc.strerror or exc})")


def check_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` must exist and be a regular file (not a folder, a named pipe, a device or a
    socket; symbolic links are followed)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        raise _os_error(p, exc, what) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{p}: is a folder, expected a {what}")
    kind = _not_regular(st.st_mode)
    if kind is not None:
        raise _refuse_kind(p, kind, what)
    return p


def open_regular(path: str | os.PathLike[str], what: str = "file") -> IO[bytes]:
    """Open a regular file for reading (binary), checked on the open file itself: a path
    replaced by a named pipe between the check and the open is refused too, and opening
    never waits for a pipe's writer (``O_NONBLOCK``, cleared once the file is known to be
    regular)."""
    p = check_file(path, what)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _os_error(p, exc, what) from None
    try:
        st = os.fstat(fd)
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else _not_regular(st.st_mode)
        if kind is not None:
            raise _refuse_kind(p, kind, what)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str], what: str = "file",
               limit_name: str = "text_bytes") -> bytes:
    """The bytes of a regular file, checked against limit ``limit_name`` before reading (its
    size) and while reading (a file that grows, or one whose size the system does not know,
    such as those of /proc, is read no further than the limit)."""
    p = Path(path)
    with open_regular(p, what) as fh:
        try:
            check_limit(limit_name, os.fstat(fh.fileno()).st_size, str(p))
            cap = limit(limit_name)
            data = fh.read(cap + 1)
        except OSError as exc:
            raise _os_error(p, exc, what) from None
    if len(data) > cap:
        check_limit(limit_name, len(data), f"{p} (it grew while being read)")
    return data


def read_text(path: str | os.PathLike[str], what: str = "file",
              limit_name: str = "text_bytes") -> str:
    """Read a small UTF-8 text file, checked against limit ``limit_name`` (``text_bytes``)
    first."""
    p = Path(path)
    data = read_bytes(p, what, limit_name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text (bad byte at offset {exc.start})") from None


class _YAMLLimit(yaml.YAMLError):
    """A YAML document beyond a limit, found while it is composed (one line, no mark)."""


class _CheckedLoader(yaml.SafeLoader):
    """A safe loader that refuses, while it composes the document (before any value is
    built): more than ``yaml_nodes`` nodes, nesting deeper than ``nesting``, and integers
    longer than ``int_digits`` digits. :func:`load_yaml` then refuses documents whose aliases
    expand to more than ``yaml_nodes`` values (the "billion laughs" bomb: 386 bytes that
    expand to 10^8 strings), nest deeper than ``nesting`` through aliases, or refer to
    themselves (``&a [*a]``)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.max_digits = limit("int_digits")
        self.max_nodes = limit("yaml_nodes")
        self.max_depth = limit("nesting")
        self.n_nodes = 0
        self.level = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.n_nodes += 1
        line = self.peek_event().start_mark.line + 1
        if self.n_nodes > self.max_nodes:
            raise _YAMLLimit(f"line {line}: more than {self.max_nodes:,} values (set "
                             "STRAGGLERS_MAX_YAML_NODES to raise the limit)")
        self.level += 1
        try:
            if self.level > self.max_depth + 1:  # the values of a collection at the limit
                raise _YAMLLimit(f"line {line}: nesting deeper than {self.max_depth} levels "
                                 "(set STRAGGLERS_MAX_NESTING to raise the limit)")
            return super().compose_node(parent, index)
        finally:
            self.level -= 1

    def construct_yaml_int(self, node: Any) -> Any:
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > self.max_digits:
            raise yaml.YAMLError(f"integer with {digits} digits at line "
                                 f"{node.start_mark.line + 1} (limit {self.max_digits})")
        return super().construct_yaml_int(node)


    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A key given twice in one mapping is refused (YAML loaders keep the last one
        silently); a key that a merge (``<<: *base``) brings and the mapping sets again is
        an override, not a repeat."""
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[str, str]] = set()
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    ident = (key.tag, key.value)
                    if ident in seen:
                        shown = ascii(key.value[:60])
                        raise _YAMLLimit(f"line {key.start_mark.line + 1}: key {shown} given "
                                         "twice in one mapping (which one to take is not said)")
                    seen.add(ident)
        return super().construct_mapping(node, deep)

    def construct_yaml_str(self, node: Any) -> Any:
        value = super().construct_yaml_str(node)
        if _NOT_TEXT.search(value) is not None:
            raise _YAMLLimit(f"line {node.start_mark.line + 1}: a text holding a NUL character "
                             "or a lone surrogate (\\0, \\ud800): not storable as UTF-8 text")
        return value


#: What a YAML text may not hold: a NUL (no database or C string keeps it) or a lone
#: surrogate (not Unicode text: writing it as UTF-8 fails).
_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")
_CheckedLoader.add_constructor("tag:yaml.org,2002:int", _CheckedLoader.construct_yaml_int)
_CheckedLoader.add_constructor("tag:yaml.org,2002:str", _CheckedLoader.construct_yaml_str)


def _expansion(root: yaml.Node, cap: int) -> tuple[int, int]:
    """Number of values and nesting depth of the node graph once aliases (shared nodes) are
    expanded, counted bottom-up with memoisation (the count stops growing above ``cap``);
    raises :class:`_YAMLLimit` for an alias to a collection that holds it (a value without
    end)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if not done and key in size:
            continue
        if isinstance(node, yaml.ScalarNode):
            size[key], depth[key] = 1, 0
            continue
        children: list[yaml.Node] = (
            [x for pair in node.value for x in pair] if isinstance(node, yaml.MappingNode)
            else list(node.value))
        if not done:
            if key in entered:
                raise _YAMLLimit(f"line {node.start_mark.line + 1}: an alias refers to a "
                                 "collection that holds it (a recursive value)")
            entered.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in size)
            continue
        entered.discard(key)
        size[key] = min(1 + sum(size[id(c)] for c in children), cap + 1)
        depth[key] = 1 + max((depth[id(c)] for c in children), default=-1)
    return size[id(root)], depth[id(root)]


def nesting_depth(value: Any, cap: int) -> int:
    """Nesting depth of a loaded value (dicts, lists and tuples; a scalar is 0, ``[1]`` is 1),
    stopping once it exceeds ``cap``. Iterative: any depth is measured without recursion."""
    depth, level = 0, [value]
    while level:
        nxt: list[Any] = []
        for v in level:
            if isinstance(v, dict):
                nxt.extend(v.values())
            elif isinstance(v, list | tuple):
                nxt.extend(v)
        if not nxt:
            break
        depth += 1
        if depth > cap:
            break
        level = nxt
    return depth


def graph_depth(value: Any, cap: int) -> int:
    """Nesting depth of a value whose containers may be shared or hold themselves (what a
    pickle can build): each container is measured once (memoised by identity), a container
    that holds itself counts as deeper than ``cap``, and the walk stops once the depth
    exceeds ``cap``. Dict keys count as values (a tuple key nests too)."""
    kinds = (dict, list, tuple, set, frozenset)
    depth: dict[int, int] = {}
    path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(value, False)]
    while stack:
        v, done = stack.pop()
        if not isinstance(v, kinds):
            continue
        key = id(v)
        items = [*v.keys(), *v.values()] if isinstance(v, dict) else v
        if done:
            path.discard(key)
            d = 1 + max((depth[id(c)] for c in items if isinstance(c, kinds)), default=0)
            if d > cap:
                return d
            depth[key] = d
            continue
        if key in depth:
            continue
        if key in path or len(path) > cap:
            return cap + 1  # it holds itself, or the path alone is deeper than the cap
        path.add(key)
        stack.append((v, True))
        stack.extend((c, False) for c in items
                     if isinstance(c, kinds) and id(c) not in depth)
    return depth.get(id(value), 0)


def _yaml_error(path: str | os.PathLike[str], exc: yaml.YAMLError) -> InputError:
    if isinstance(exc, _YAMLLimit):
        return InputError(f"{path}: {exc}")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return InputError(f"{path}: not valid YAML ({first})")


def load_yaml(path: str | os.PathLike[str], what: str = "YAML file") -> Any:
    """Read and parse a YAML (or JSON) file safely: plain data only, bounded size
    (``yaml_bytes``), values (``yaml_nodes``, aliases expanded), nesting and integer size,
    no recursive alias."""
    text = read_text(path, what, "yaml_bytes")
    try:
        loader = _CheckedLoader(text)  # the reader refuses control characters here
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        cap = limit("yaml_nodes")
        size, deep = _expansion(node, cap)
        if size > cap:
            raise InputError(f"{path}: its aliases expand to more than {cap:,} values (set "
                             "STRAGGLERS_MAX_YAML_NODES to raise the limit)")
        if deep > limit("nesting"):
            raise InputError(f"{path}: its aliases nest deeper than {limit('nesting')} "
                             "levels (set STRAGGLERS_MAX_NESTING to raise the limit)")
        value = loader.construct_document(node)
    except InputError:
        raise
    except yaml.YAMLError as exc:
        raise _yaml_error(path, exc) from None
    except RecursionError:
        raise InputError(f"{path}: nesting too deep to read (limit {limit('nesting')})"
                         ) from None
    finally:
        loader.dispose()
    cap = limit("nesting")
    if nesting_depth(value, cap) > cap:
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
    :func:`parse_json_line` refuses such a line. A path that is not a regular file is an
    :class:`InputError` (:func:`open_regular`).
    """
    with open_regular(path) as fh:
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
    if nesting_depth(value, cap) > cap:
        raise JSONLineError(f"nesting deeper than {cap} levels")
    if _SURROGATE_ESCAPE.search(text) is not None and _holds_lone_surrogate(value):
        raise JSONLineError("a string holds a lone surrogate (an escape \\ud800-\\udfff "
                            "without its pair): not Unicode text")
    return value


#: A JSON escape of a UTF-16 surrogate: the only way a lone one gets into a parsed string
#: (valid pairs become one character, UTF-8 bytes cannot encode a surrogate).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _holds_lone_surrogate(value: Any) -> bool:
    """Whether a string of a parsed JSON value (keys included) holds a lone surrogate."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _NOT_TEXT.search(v) is not None and re.search("[\ud800-\udfff]", v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


class DuplicateKey(ValueError):
    """A JSON object that gives one key twice (``key``: the key)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"key {ascii(key[:60])} given twice in one object")
        self.key = key


def _no_repeats(items: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(items)
    if len(out) < len(items):
        seen: set[str] = set()
        for k, _ in items:
            if k in seen:
                raise DuplicateKey(k)
            seen.add(k)
    return out


def loads_unique(data: bytes | str) -> Any:
    """``json.loads``, but a key given twice in one object raises :class:`DuplicateKey`
    (JSON readers keep the last of equal keys silently); other errors as ``json.loads``
    (ValueError, RecursionError); NaN and Infinity are refused (not JSON)."""
    return json.loads(data, object_pairs_hook=_no_repeats, parse_constant=_not_json_constant)


def _not_json_constant(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def load_json(text: str, where: str) -> Any:
    """The JSON value in ``text`` (the content of the file ``where``), its nesting bounded
    by the ``nesting`` limit; an :class:`InputError` names the line of a syntax error."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: line {exc.lineno}: not JSON ({exc.msg})") from None
    except RecursionError:
        raise InputError(f"{where}: nesting too deep to read (a value nested thousands of "
                         "levels)") from None
    cap = limit("nesting")
    if nesting_depth(raw, cap) > cap:
        raise InputError(f"{where}: nesting deeper than {cap} levels (set "
                         "STRAGGLERS_MAX_NESTING to raise the limit)")
    return raw


def json_object(text: str, where: str, expected: str = "a JSON object") -> dict[str, Any]:
    """The JSON object in ``text`` (the content of the file ``where``); an :class:`InputError`
    names the line of a syntax error, or says that the value is not ``expected``."""
    raw = load_json(text, where)
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
