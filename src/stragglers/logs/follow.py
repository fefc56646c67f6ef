"""Following a growing JSON-lines file like ``tail -F``: lines in large blocks, through
truncation and rotation.

:class:`Follower` yields :class:`Batch` es: the complete lines read so far, in order, with
their line numbers (counted from 1 in each file, restarted when a truncated or rotated file
is read from its start again), or one *notice* about the
file:

``rotated``
    the path now names another file (its inode changed, as with ``logrotate`` or
    ``mv f f.1``): the old file was read to its end first, then the new file is read from
    its start;
``truncated``
    the file shrank below the position already read (``copytruncate``), or its first bytes
    changed (it was truncated and rewritten past that position between two polls): it is read
    again from its start; ``partial_bytes`` of an incomplete last line read before are lost;
``file_missing``
    the path disappeared (the old file was read to its end); following resumes when it
    reappears;
``line_too_long``
    a line longer than ``max_line_bytes`` was skipped without being held in memory (the
    line is also given as ``(lineno, None)`` so that the watcher counts it).

Lines written to a file after it was rotated away and after it was read to its end, and
lines written and truncated away between two polls, cannot be seen by any follower; the
notices say when this may have happened.  With ``once`` the file is read to its current end
and no rotation is looked for.  Standard input (``-``) is read until its end.
:func:`follow_files` follows several files in turn (``watch`` on one log per rank).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, fields
from typing import IO, Any, ClassVar

__all__ = ["Batch", "FileMissingEvent", "FileNotice", "Follower", "RotatedEvent",
           "TruncatedEvent", "follow_files"]

BLOCK = 1 << 20
HEAD_BYTES = 256


class _Notice:
    """A notice about a followed file; its JSON object (``watch``'s event) is ``event`` and
    then its fields."""

    event: ClassVar[str]

    def to_dict(self) -> dict[str, object]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        return {"event": self.event, **values}


@dataclass(frozen=True)
class RotatedEvent(_Notice):
    """The followed path names another file now (:class:`~stragglers.logs.follow.Follower`)."""

    event: ClassVar[str] = "rotated"
    file: str
    lines_read_before: int


@dataclass(frozen=True)
class TruncatedEvent(_Notice):
    """The followed file shrank or was rewritten: read again from its start."""

    event: ClassVar[str] = "truncated"
    file: str
    bytes_read_before: int
    lines_read_before: int
    partial_bytes: int


@dataclass(frozen=True)
class FileMissingEvent(_Notice):
    """The followed path disappeared."""

    event: ClassVar[str] = "file_missing"
    file: str


FileNotice = RotatedEvent | TruncatedEvent | FileMissingEvent


@dataclass
class Batch:
    """Complete lines ``(lineno, bytes or None for a skipped over-long line)`` or a notice."""

    lines: list[tuple[int, bytes | None]] = field(default_factory=list)
    notice: FileNotice | None = None


class _Splitter:
    """Cuts a byte stream into lines; skips (and reports) lines longer than ``cap``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.rest = b""
        self.skipping = False
        self.lineno = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes | None]]:
        out: list[tuple[int, bytes | None]] = []
        buf = self.rest + data if self.rest else data
        start = 0
        if self.skipping:
            nl = buf.find(b"\n")
            if nl < 0:
                self.rest = b""
                return out
            self.skipping = False
            self.lineno += 1
            out.append((self.lineno, None))
            start = nl + 1
        parts = buf[start:].split(b"\n")
        self.rest = parts.pop()
        n = self.lineno
        cap = self.cap
        for p in parts:
            n += 1
            out.append((n, p if len(p) <= cap else None))
        self.lineno = n
        if len(self.rest) > cap:
            self.rest = b""
            self.skipping = True
        return out

    def flush(self) -> list[tuple[int, bytes | None]]:
        """The last line when the input ends without a newline."""
        if self.skipping:
            self.skipping = False
            self.lineno += 1
            return [(self.lineno, None)]
        if self.rest:
            self.lineno += 1
            last, self.rest = self.rest, b""
            return [(self.lineno, last)]
        return []

    def reset(self) -> int:
        """Start a new file; returns the bytes of an incomplete line that are dropped."""
        lost = len(self.rest)
        self.rest = b""
        self.skipping = False
        self.lineno = 0
        return lost


class PrefixedStream:
    """A stream whose first bytes were already read (to tell its format): they come back
    first, then the rest of the stream."""

    def __init__(self, head: bytes, stream: IO[Any]) -> None:
        self.head = head
        self.stream = stream

    def read1(self, size: int = -1) -> bytes:
        if self.head:
            head, self.head = self.head, b""
            return head
        read = getattr(self.stream, "read1", self.stream.read)
        data = read(size)
        return data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data

    read = read1


def peek_stdin(size: int = 1 << 16) -> PrefixedStream:
    """Standard input with its first block (what is there, up to ``size`` bytes; waits for
    the first bytes) read and kept in front."""
    stream = getattr(sys.stdin, "buffer", sys.stdin)
    read = getattr(stream, "read1", stream.read)
    head = read(size)
    if isinstance(head, str):  # a text stream (tests, embedding)
        head = head.encode("utf-8", "surrogateescape")
    return PrefixedStream(head, stream)


class Follower:
    """Lines of ``path`` (``-``: standard input) as they are written; see the module doc."""

    def __init__(self, path: str, *, once: bool = False, poll: float = 0.5,
                 idle_timeout: float | None = None, max_line_bytes: int = 1 << 20,
                 stdin: IO[Any] | PrefixedStream | None = None,
                 yield_when_idle: bool = False) -> None:
        self.path = path
        # Instead of sleeping at the end of the file, yield an empty Batch (the caller
        # follows several files in turn and sleeps when none of them has new lines).
        self.yield_when_idle = yield_when_idle
        self.once = once
        self.poll = poll
        self.idle_timeout = idle_timeout
        self.stdin = stdin
        self.split = _Splitter(max_line_bytes)
        self.rotations = 0
        self.truncations = 0

    def __iter__(self) -> Iterator[Batch]:
        if self.path == "-":
            stream = self.stdin if self.stdin is not None else getattr(sys.stdin, "buffer",
                                                                        sys.stdin)
            yield from self._stream(stream)
        else:
            yield from self._file()

    def _lines(self, data: bytes) -> Iterator[Batch]:
        got = self.split.feed(data)
        if got:
            yield Batch(lines=got)

    def _stream(self, stream: IO[Any] | PrefixedStream) -> Iterator[Batch]:
        read = getattr(stream, "read1", stream.read)
        while True:
            data = read(BLOCK)
            if not data:
                break
            if isinstance(data, str):  # a text stream (tests, embedding)
                data = data.encode("utf-8", "surrogateescape")
            yield from self._lines(data)
        last = self.split.flush()
        if last:
            yield Batch(lines=last)

    def _truncated(self, fh: IO[bytes], pos: int, head: bytes) -> Batch:
        read_lines = self.split.lineno
        lost = self.split.reset()
        fh.seek(0)
        self.truncations += 1
        return Batch(notice=TruncatedEvent(file=self.path, bytes_read_before=pos,
                                           lines_read_before=read_lines, partial_bytes=lost))

    def _file(self) -> Iterator[Batch]:
        fh = open(self.path, "rb", buffering=0)  # noqa: SIM115 - closed in the finally below
        try:
            ident = os.fstat(fh.fileno())
            pos = 0
            head = b""
            missing = False
            drained = False  # the old file read to its end after a rotation was seen
            idle_since = time.monotonic()
            while True:
                if not self.once and head and os.pread(fh.fileno(), len(head), 0) != head:
                    # Truncated and rewritten: its first bytes changed.
                    yield self._truncated(fh, pos, head)
                    pos, head = 0, b""
                    idle_since = time.monotonic()
                    continue
                data = fh.read(BLOCK)
                if (data and not self.once and head
                        and os.pread(fh.fileno(), len(head), 0) != head):
                    # Truncated and rewritten between the check above and this read: what
                    # was read continues the new content, not this file's; it is read again
                    # from the start (a rewrite is sequential, so a new file as long as the
                    # position already read has its new first bytes written).
                    yield self._truncated(fh, pos, head)
                    pos, head = 0, b""
                    idle_since = time.monotonic()
                    continue
                if data:
                    if len(head) < HEAD_BYTES:
                        head += data[: HEAD_BYTES - len(head)]
                    pos += len(data)
                    idle_since = time.monotonic()
                    yield from self._lines(data)
                    continue
                if self.once:
                    break
                # At the end of the file: look for truncation and rotation.
                try:
                    st: os.stat_result | None = os.stat(self.path)
                except OSError:
                    st = None
                if st is None:
                    if not missing:
                        missing = True
                        yield Batch(notice=FileMissingEvent(file=self.path))
                elif (st.st_ino, st.st_dev) != (ident.st_ino, ident.st_dev):
                    if not drained:
                        # Rotated. What the writer appended to the old file between the read
                        # that found its end and the rotation is read first (as ``tail -F``
                        # does): the old file to its end once more, then the new one.
                        drained = True
                        continue
                    drained = False
                    missing = False
                    last = self.split.flush()
                    if last:
                        yield Batch(lines=last)
                    try:
                        new = open(self.path, "rb", buffering=0)  # noqa: SIM115
                    except OSError:
                        new = None
                    if new is not None:
                        fh.close()
                        fh = new
                        ident = os.fstat(fh.fileno())
                        self.rotations += 1
                        read_lines = self.split.lineno
                        self.split.reset()
                        pos, head = 0, b""
                        idle_since = time.monotonic()
                        yield Batch(notice=RotatedEvent(file=self.path,
                                                        lines_read_before=read_lines))
                        continue
                elif st.st_size < pos:
                    missing = False
                    yield self._truncated(fh, pos, head)
                    pos, head = 0, b""
                    idle_since = time.monotonic()
                    continue
                else:
                    missing = False
                if (self.idle_timeout is not None
                        and time.monotonic() - idle_since >= self.idle_timeout):
                    break
                if self.yield_when_idle:
                    yield Batch()
                else:
                    time.sleep(self.poll)
            last = self.split.flush()
            if last:
                yield Batch(lines=last)
        finally:
            fh.close()


def follow_files(followers: list[Follower], poll: float = 0.5
                 ) -> Iterator[tuple[int, Batch]]:
    """Follow several files in turn: ``(index of the follower, batch)``, one block of each
    file that has new lines per round, a sleep of ``poll`` seconds when none has.  The
    followers must be made with ``yield_when_idle=True``; each ends on its own (``once``, or
    its idle timeout), and this ends when all have."""
    live = [(i, iter(f)) for i, f in enumerate(followers)]
    while live:
        busy, ended = yield from follow_round(live)
        if live and not busy and not ended:
            time.sleep(poll)


def follow_round(live: list[tuple[int, Iterator[Batch]]]
                 ) -> Generator[tuple[int, Batch], None, tuple[bool, bool]]:
    """One round over the ``live`` followers ``(index, iterator)``: yields each one's next
    batch that holds lines or a notice, removes the ones that ended from ``live``, and
    returns (a batch was yielded, a follower ended)."""
    busy = False
    ended = []
    for k, (i, it) in enumerate(live):
        try:
            batch = next(it)
        except StopIteration:
            ended.append(k)
            continue
        if batch.lines or batch.notice is not None:
            busy = True
            yield i, batch
    for k in reversed(ended):
        del live[k]
    return busy, bool(ended)
