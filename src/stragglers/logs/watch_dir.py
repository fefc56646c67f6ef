"""Which files ``stragglers watch`` reads from a folder or a glob pattern, and waiting for them.

A folder (``watch runs/ddp/probe``) or a quoted glob pattern (``watch 'logs/rank*.log'``) may
hold files that ``watch`` cannot read: a probe folder holds the ranks' step records
(``steps-rank-NNNNN.jsonl``) and call records (``calls-rank-NNNNN.jsonl``) beside the trace
(``rank-NNNNN.jsonl`` in the probe's own format, ``rank-NNNNN.parquet``, ``job.yaml``). A file
found there is looked at once it has content (its first 64 KiB) and read only when it is

* JSON lines whose first record (of its first 8 complete lines) is one of ``watch``'s
  (:mod:`stragglers.logs.records`),
* a Megatron-LM training log (a line ``iteration N/ M |``), or
* Megatron's iteration-time JSON,

and of the format being watched (``--format``, else the format of the first files found).
Every other file is counted by reason (the summary's ``skipped_files``, see :data:`REASONS`).
A file that is empty, whose first line is not complete yet, or (``--format auto``) text of
less than 64 KiB without an iteration line yet (a log whose iterations have not begun) is
looked at again whenever its size or time changes; at the end it is counted by what it was
then (``empty``, ``not_records``, ``text``).

:class:`FileScanner` lists the files of the folders and patterns (a path that does not exist
yet is a folder or a file to come: it is looked for at every scan) and returns each new file
to read once, with its format.
"""

from __future__ import annotations

import glob
import os
import stat
from collections import Counter
from pathlib import Path

import orjson

from stragglers.errors import InputError
from stragglers.logs.megatron import decide_format, guess_format
from stragglers.logs.records import RecordError, StepRecord, parse_line, record_kind

__all__ = ["FORMATS", "REASONS", "FileScanner", "classify", "step_rank"]

#: The formats ``watch`` reads from files.
FORMATS = ("jsonl", "megatron-log", "megatron-json")
#: Why a file of a folder or pattern is not read (the summary's ``skipped_files``).
REASONS = {
    "binary": "NUL bytes or bytes that are not UTF-8 in its first 64 KiB (parquet, images)",
    "not_records": "JSON whose first lines are no watch records (the probe's trace files, "
                   "reports), or whose first line never ended",
    "text": "text without an iteration line in its first 64 KiB",
    "other_format": "a format other than the one being watched",
    "empty": "still empty when watch ended",
    "folder": "a folder (folders are not entered)",
    "special": "not a regular file (a socket, a pipe)",
    "hidden": "a name that starts with '.'",
    "unreadable": "cannot be read (permission denied)",
    "rank_taken": "a log whose rank another file has, or whose rank cannot be told",
}
HEAD_BYTES = 1 << 16
#: Complete lines of a JSON-lines file looked at for a record.
PROBE_LINES = 8
_GLOB = frozenset("*?[")


def _is_glob(arg: str) -> bool:
    return not Path(arg).exists() and bool(_GLOB & set(arg))


def classify(path: str | os.PathLike[str]) -> str:
    """What a file of a folder or pattern is: one of :data:`FORMATS`, a reason of
    :data:`REASONS`, or ``wait:empty`` / ``wait:partial`` / ``wait:text`` (to be looked at
    again: empty, its first line not complete, or text under 64 KiB without an iteration
    line yet)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return "wait:empty"  # gone (or a dangling link): nothing to read now
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    if not stat.S_ISREG(st.st_mode):
        return "special"
    if not os.access(p, os.R_OK):
        return "unreadable"
    if st.st_size == 0:
        return "wait:empty"
    try:
        with open(p, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return "unreadable"
    if b"\0" in head:
        return "binary"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not only a character cut by the 64 KiB boundary
            return "binary"
    text = head.lstrip()
    if text.startswith(b"{"):
        fmt = guess_format(head)
        if fmt == "megatron-json":  # a JSON document: only Megatron's iteration times
            return fmt if b'"values"' in head or b'"iteration-time"' in head else "not_records"
        parts = text.split(b"\n")
        lines = [ln for ln in parts[:-1] if ln.strip()][:PROBE_LINES]  # complete lines
        if not lines:
            lines = [parts[0]]  # one line without its end: read when it is a whole record
        for ln in lines:
            try:
                obj = orjson.loads(ln)
            except orjson.JSONDecodeError:
                continue
            if type(obj) is dict and record_kind(obj) is not None:
                return "jsonl"
        return "wait:partial" if len(parts) == 1 else "not_records"
    if decide_format(head, at_end=True) == "megatron-log":  # an iteration line in the head
        return "megatron-log"
    return "wait:text" if len(head) < HEAD_BYTES else "text"


def step_rank(path: str | os.PathLike[str]) -> int | None:
    """The rank of a JSON-lines file's first record when it is a step record (a probe's
    ``steps-rank-NNNNN.jsonl``), else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    for ln in head.split(b"\n")[:PROBE_LINES]:
        if ln.strip():
            try:
                rec = parse_line(ln)
            except RecordError:
                return None
            return rec.rank if isinstance(rec, StepRecord) else None
    return None


class FileScanner:
    """The files to read of folders and glob patterns (``sources``), each returned once by
    :meth:`scan`; ``fmt`` the format to read (``auto``: the first files found decide);
    ``taken``: files read already (named on the command line)."""

    def __init__(self, sources: list[str], fmt: str = "auto",
                 taken: list[str] | None = None) -> None:
        self.sources = list(sources)
        self.fmt = fmt
        self._taken = {os.path.realpath(p) for p in taken or ()}
        self._decided: dict[str, str] = {}  # path -> reason it is not read
        self._waiting: dict[str, tuple[str, int, float]] = {}  # path -> (kind, size, mtime)

    def candidates(self) -> list[str]:
        """The paths of the sources now: a folder's entries, a pattern's matches, a path
        that does not exist yet (nothing until it does: then itself, or its entries)."""
        found: list[str] = []
        for src in self.sources:
            p = Path(src)
            if p.is_dir():
                try:
                    found += sorted(str(q) for q in p.iterdir())
                except OSError as exc:
                    raise InputError(f"{p}: cannot list the folder "
                                     f"({exc.strerror or exc})") from None
            elif _is_glob(src):
                found += sorted(glob.glob(src))
            elif p.exists():
                found.append(src)
        return found

    def scan(self) -> list[tuple[str, str]]:
        """The files to read that were not returned before, ``(path, format)`` in the order
        of the sources. With ``auto``, a first scan that finds several formats is an error
        (one line naming two files); later, files of another format are skipped."""
        new: list[tuple[str, str]] = []
        for path in self.candidates():
            key = os.path.realpath(path)
            if key in self._taken or path in self._decided:
                continue
            if Path(path).name.startswith("."):
                self._decided[path] = "hidden"
                continue
            try:
                st = os.stat(path)
                sig = (st.st_size, st.st_mtime)
            except OSError:
                continue
            was = self._waiting.get(path)
            if was is not None and was[1:] == sig:
                continue
            kind = classify(path)
            if kind == "wait:text" and self.fmt == "megatron-log":
                kind = "megatron-log"  # a log whose iterations have not begun
            if kind.startswith("wait:"):
                self._waiting[path] = (kind, *sig)
                continue
            self._waiting.pop(path, None)
            if kind not in FORMATS:
                self._decided[path] = kind
            elif self.fmt not in ("auto", kind):
                self._decided[path] = "other_format"
            else:
                new.append((path, kind))
                self._taken.add(key)
        if self.fmt == "auto" and new:
            first_path, first = new[0]
            for path, kind in new[1:]:
                if kind != first:
                    raise InputError(f"{path}: its format is {kind} but {first_path}'s is "
                                     f"{first}; watch reads several files of one format "
                                     "(give --format)")
            self.fmt = first
        return new

    def skip(self, path: str, reason: str) -> None:
        """Count a file returned by :meth:`scan` as not read after all (``rank_taken``)."""
        self._decided[path] = reason

    def skipped(self, final: bool = False) -> dict[str, int]:
        """Files not read, by reason (sorted); ``final``: with the files still waited for,
        by what they are now."""
        counts = Counter(self._decided.values())
        if final:
            counts.update({"wait:empty": "empty", "wait:partial": "not_records",
                           "wait:text": "text"}[kind] for kind, _, _ in self._waiting.values())
        return dict(sorted(counts.items()))

    def nothing_yet(self) -> str:
        """The line that says no file to read was found (what was skipped, if anything)."""
        names = ", ".join(self.sources)
        skipped = self.skipped(final=True)
        if skipped:
            return (f"{names}: no file watch can read (skipped: "
                    + ", ".join(f"{n} {r}" for r, n in skipped.items()) + ")")
        if len(self.sources) == 1:
            src = self.sources[0]
            if Path(src).is_dir():
                return f"{src}: is a folder without files to watch"
            if _is_glob(src):
                return f"{src}: no file matches the pattern"
            return f"{src}: no such file or folder"
        return f"{names}: no file to watch"
