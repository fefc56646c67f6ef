"""``stragglers watch`` on files: which files, their format and ranks, followed batch by batch
into a :class:`~stragglers.detect.watch.Watcher`, its events written as JSON lines.

:func:`watch_files` is the whole command after its options are parsed: standard input, one
file, or several files of one format, one per rank (the rank from the file's name or its
``[rankN]:`` prefixes). Files named on the command line are read as they are; a folder's
files and a glob pattern's matches only when ``watch`` can read them
(:mod:`stragglers.logs.watch_dir`: the others are counted), and a folder or pattern with
no such file yet, or a path that does not exist yet, is waited for (``wait_timeout``); while
``watch`` follows, files that appear there join (event ``inputs``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from stragglers.detect.detector import Detector
from stragglers.detect.events import InputsEvent, SummaryEvent, WatchEvent
from stragglers.detect.watch import Watcher
from stragglers.errors import InputError
from stragglers.inputs import check_file
from stragglers.jsonout import Output
from stragglers.limits import check_limit
from stragglers.logs.follow import (
    Batch,
    Follower,
    follow_files,
    follow_round,
    peek_stdin,
)
from stragglers.logs.megatron import (
    guess_format,
    rank_from_content,
    rank_from_name,
    read_iteration_json,
    series_items,
)
from stragglers.logs.records import RecordError
from stragglers.logs.watch_dir import FileScanner, step_rank

__all__ = ["WatchInputs", "WatchSettings", "file_ranks", "guess_file_format", "watch_files",
           "watch_inputs"]


@dataclass(frozen=True)
class WatchSettings:
    """How to watch: ``input_format`` (``auto``, ``jsonl``, ``megatron-log``,
    ``megatron-json``), the period tracker's ``window``, the warm-up (None: the detector's),
    the most ranks followed, and how files are followed (``once``: read to the end and stop;
    ``poll`` seconds between reads; ``idle_timeout``: stop after so long without data;
    ``wait_timeout``: how long to wait for a first file in the folders and patterns given,
    None: as long as it takes)."""

    input_format: str
    window: int
    warmup: int | None
    max_ranks: int
    once: bool
    poll: float
    idle_timeout: float | None
    wait_timeout: float | None = None


@dataclass(frozen=True)
class WatchInputs:
    """What to watch: ``files`` named on the command line (``["-"]``: standard input) and
    ``sources``, folders and glob patterns (and paths that do not exist yet) whose files
    :class:`~stragglers.logs.watch_dir.FileScanner` finds."""

    files: list[str]
    sources: list[str] = field(default_factory=list)


def watch_files(inputs: WatchInputs | list[str], detector_factory: Callable[[], Detector],
                settings: WatchSettings, out: Output | None = None) -> int:
    """Watch ``inputs`` (from :func:`watch_inputs`; a list: files named, ``["-"]``: standard
    input) and write the events to ``out`` (standard output) until the input ends or the
    reader goes away."""
    out = out if out is not None else Output()
    if isinstance(inputs, list):
        inputs = WatchInputs(inputs)
    if inputs.sources:
        return _watch_sources(inputs, detector_factory, settings, out)
    paths = inputs.files
    fmt = settings.input_format
    stdin = None
    if paths == ["-"]:
        stdin = peek_stdin()
        if fmt == "auto":
            fmt = guess_format(stdin.head)
    elif fmt == "auto":
        fmts = {p: guess_file_format(p) for p in paths}
        fmt = fmts[paths[0]]
        for p, f in fmts.items():
            if f != fmt:
                raise InputError(f"{p}: its format is {f} but {paths[0]}'s is {fmt}; watch "
                                 "reads several files of one format (give --format)")
    if len(paths) > 1:
        return _watch_many(paths, fmt, detector_factory, settings, out)
    path = paths[0]
    source = "<stdin>" if path == "-" else path
    watcher = _watcher(detector_factory, settings, fmt, source)
    if fmt == "megatron-json":
        return _iteration_json([(0, (path, 0))], watcher, out)
    follower = Follower(path, once=settings.once, poll=settings.poll,
                        idle_timeout=settings.idle_timeout,
                        max_line_bytes=watcher.max_line_bytes, stdin=stdin)
    return _pump(((0, batch) for batch in follower), watcher, out,
                 lambda _i, lines: watcher.process_lines(lines), [source])


def _watcher(factory: Callable[[], Detector], settings: WatchSettings, fmt: str, source: str,
             sources: int = 1) -> Watcher:
    return Watcher(detector_factory=factory, tracker_kwargs={"window": settings.window},
                   source=source, max_ranks=settings.max_ranks,
                   input_format="jsonl" if fmt == "megatron-json" else fmt,
                   warmup_iters=settings.warmup, sources=sources)


def _pump(batches: Iterable[tuple[int, Batch | InputsEvent]], watcher: Watcher, out: Output,
          process: Callable[[int, list[tuple[int, bytes | None]]], list[WatchEvent]],
          names: list[str], scanner: FileScanner | None = None) -> int:
    """Feed followed batches ``(file index, batch)`` to the watcher until the input ends or
    stdout closes; ``process(i, lines)`` handles the lines of file ``i`` (``names[i]``).
    The events are printed as JSON lines (an :class:`InputsEvent` as it comes)."""
    i = 0
    try:
        for i, batch in batches:
            if isinstance(batch, InputsEvent):
                events: list[WatchEvent] = [batch]
            elif batch.notice is not None:
                events = watcher.notice(batch.notice)
            else:
                events = process(i, batch.lines)
            if events and not out.events(e.to_dict() for e in events):
                return 0
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass
    except OSError as exc:
        raise InputError(f"{names[i]}: cannot read ({exc.strerror or exc})") from None
    out.events(e.to_dict() for e in _finish(watcher, scanner))
    return 0


def _finish(watcher: Watcher, scanner: FileScanner | None) -> list[WatchEvent]:
    """The watcher's last events; the summary counts the files of folders and patterns that
    were not read (``skipped_files``)."""
    events = watcher.finish()
    if scanner is None:
        return events
    return [replace(e, skipped_files=scanner.skipped(final=True))
            if isinstance(e, SummaryEvent) else e for e in events]


_GLOB = frozenset("*?[")


def watch_inputs(args: list[str], *, once: bool = False) -> WatchInputs:
    """What to watch: the files named (each checked readable), and the folders and glob
    patterns (when the pattern is not itself a file) whose files are found as ``watch``
    runs. A path that does not exist is a folder or file to come, unless ``once`` (then it
    is an error, as there is nothing to read)."""
    paths: list[str] = []
    sources: list[str] = []
    for a in args:
        if a == "-":
            if len(args) > 1:
                raise InputError("-: standard input cannot be watched with other files")
            return WatchInputs(["-"])
        p = Path(a)
        if p.is_dir() or (not p.exists() and (_GLOB & set(a) or not once)):
            if a not in sources:
                sources.append(a)
        else:
            paths.append(a)
    check_limit("watch_ranks", len(paths), "watch: input files")
    seen: set[str] = set()
    for a in paths:
        p = Path(a)
        if not p.exists():
            raise InputError(f"{p}: no such file")
        if p.is_dir():
            raise InputError(f"{p}: is a folder, expected a JSON-lines file")
        check_file(p, "file to watch")  # a named pipe, a device or a socket: refused
        if not os.access(p, os.R_OK):
            raise InputError(f"{p}: cannot read the file (permission denied)")
        key = os.path.realpath(p)
        if key in seen:
            raise InputError(f"{p}: given twice")
        seen.add(key)
    return WatchInputs(paths, sources)


def file_ranks(paths: list[str]) -> list[int]:
    """The rank of each file: the last number of its name
    (:func:`~stragglers.logs.megatron.rank_from_name`), else the first ``torchrun`` prefix
    in its first 64 KiB (:func:`~stragglers.logs.megatron.rank_from_content`); one line
    naming the file when neither tells, or when two files name the same rank."""
    ranks: list[int] = []
    owner: dict[int, str] = {}
    for p in paths:
        r = rank_from_name(p)
        if r is None:
            try:
                with open(p, "rb") as fh:
                    r = rank_from_content(fh.read(1 << 16))
            except OSError as exc:
                raise InputError(f"{p}: cannot read the file ({exc.strerror or exc})") from None
        if r is None:
            raise InputError(f"{p}: cannot tell the rank of this log (no number in its name "
                             "and no [rankN]: prefix in its first 64 KiB); name the files of "
                             "several ranks with the rank as their last number, e.g. "
                             "train_rank3.log")
        if r in owner:
            raise InputError(f"{p}: names rank {r}, as {owner[r]} does (one file per rank)")
        owner[r] = p
        ranks.append(r)
    return ranks


def _watch_many(paths: list[str], fmt: str, factory: Callable[[], Detector],
                settings: WatchSettings, out: Output) -> int:
    """Several files, one per rank (logs, JSON lines or iteration-time JSON)."""
    ranks = file_ranks(paths) if fmt != "jsonl" else [0] * len(paths)
    watcher = _watcher(factory, settings, fmt, paths[0], sources=len(paths))
    if fmt == "jsonl":
        _expect_steps(watcher, paths)
    if fmt == "megatron-json":
        return _iteration_json(list(enumerate(zip(paths, ranks, strict=True))), watcher, out)
    followers = [Follower(p, once=settings.once, poll=settings.poll,
                          idle_timeout=settings.idle_timeout,
                          max_line_bytes=watcher.max_line_bytes, yield_when_idle=True)
                 for p in paths]
    return _pump(follow_files(followers, settings.poll), watcher, out,
                 lambda i, lines: watcher.process_lines(lines, file_index=i, source=paths[i],
                                                        rank=ranks[i]), paths)


def guess_file_format(path: str) -> str:
    """``--format auto``: the format from the first 64 KiB of a file (standard input: from
    its first block, read by :func:`~stragglers.logs.follow.peek_stdin`)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return guess_format(head)


def _iteration_json(files: list[tuple[int, tuple[str, int]]], watcher: Watcher,
                    out: Output, scanner: FileScanner | None = None) -> int:
    """``--format megatron-json``: each file's whole series at once (it is not appended
    to); ``files``: ``(file index, (path, rank))``. A file that is not an iteration-time
    document is one bad record, not fatal."""
    several = len(files) > 1
    for i, (path, rank) in files:
        if path == "-":
            raise InputError("--format megatron-json: give a file, not standard input")
        source = path if several else None
        try:
            series = read_iteration_json(path)
        except RecordError as exc:
            events = watcher.unreadable(exc, file_index=i, source=source)
        else:
            events = watcher.process_items(series_items(series, rank=rank), file_index=i,
                                           source=source)
        if events and not out.events(e.to_dict() for e in events):
            return 0
    out.events(e.to_dict() for e in _finish(watcher, scanner))
    return 0


def _expect_steps(watcher: Watcher, paths: list[str]) -> None:
    """Files of step records (one rank each, as the probes write them): the watcher joins
    the ranks' records step by step and waits for theirs (:mod:`stragglers.detect.steps`)."""
    for p in paths:
        rank = step_rank(p)
        if rank is not None:
            watcher.expect_steps(rank)


def _watch_sources(inputs: WatchInputs, factory: Callable[[], Detector],
                   settings: WatchSettings, out: Output) -> int:
    """Folders and glob patterns (with the files named beside them): the files found are
    followed together, one per rank; files that appear later join (module docstring)."""
    files = inputs.files
    fmt = settings.input_format
    if fmt == "auto" and files:
        fmt = guess_file_format(files[0])
        for p in files[1:]:
            if guess_file_format(p) != fmt:
                raise InputError(f"{p}: its format is {guess_file_format(p)} but {files[0]}'s "
                                 f"is {fmt}; watch reads several files of one format (give "
                                 "--format)")
    scanner = FileScanner(inputs.sources, fmt, taken=files)
    found = [p for p, _ in scanner.scan()]
    if not files and not found:
        found = _wait_for_files(scanner, settings)
    fmt = scanner.fmt
    paths = files + found
    check_limit("watch_ranks", len(paths), "watch: input files")
    ranks = file_ranks(paths) if fmt != "jsonl" and len(paths) > 1 else [0] * len(paths)
    watcher = _watcher(factory, settings, fmt, paths[0], sources=len(paths))
    if fmt == "megatron-json":
        return _iteration_json(list(enumerate(zip(paths, ranks, strict=True))), watcher, out,
                               scanner)
    if fmt == "jsonl" and len(paths) > 1:
        _expect_steps(watcher, paths)
    follow = _Following(paths, ranks, fmt, scanner, watcher, settings)
    return _pump(follow.batches(), watcher, out, follow.process, follow.names, scanner)


def _wait_for_files(scanner: FileScanner, settings: WatchSettings) -> list[str]:
    """Wait for the first files to read (``settings.wait_timeout``; none with ``once``)."""
    if settings.once:
        raise InputError(scanner.nothing_yet())
    deadline = (None if settings.wait_timeout is None
                else time.monotonic() + settings.wait_timeout)
    while True:
        if deadline is not None and time.monotonic() >= deadline:
            raise InputError(f"{scanner.nothing_yet()}; waited {settings.wait_timeout:g} s "
                             "(--wait-timeout)")
        time.sleep(settings.poll)
        found = [p for p, _ in scanner.scan()]
        if found:
            return found


class _Following:
    """The files of folders and patterns followed in turn (as :func:`follow_files`), the
    folders and patterns looked at again when no file had new lines: new files join."""

    def __init__(self, paths: list[str], ranks: list[int], fmt: str, scanner: FileScanner,
                 watcher: Watcher, settings: WatchSettings) -> None:
        self.names = list(paths)
        self.ranks = list(ranks)
        self.fmt = fmt
        self.scanner = scanner
        self.watcher = watcher
        self.settings = settings
        self.live: list[tuple[int, Iterator[Batch]]] = []
        for i in range(len(paths)):
            self._start(i)

    def _start(self, i: int) -> None:
        s = self.settings
        self.live.append((i, iter(Follower(self.names[i], once=s.once, poll=s.poll,
                                           idle_timeout=s.idle_timeout,
                                           max_line_bytes=self.watcher.max_line_bytes,
                                           yield_when_idle=True))))

    def process(self, i: int, lines: list[tuple[int, bytes | None]]) -> list[WatchEvent]:
        return self.watcher.process_lines(lines, file_index=i, source=self.names[i],
                                          rank=self.ranks[i])

    def _join(self) -> InputsEvent | None:
        """Files that appeared since the last look (one per rank; a log whose rank another
        file has is skipped)."""
        added: list[str] = []
        for path, _ in self.scanner.scan():
            rank = 0
            if self.fmt == "megatron-log":
                try:
                    (rank,) = file_ranks([path])
                except InputError:
                    self.scanner.skip(path, "rank_taken")
                    continue
                if rank in self.ranks:
                    self.scanner.skip(path, "rank_taken")
                    continue
            if len(self.names) >= self.watcher.max_ranks:
                self.scanner.skip(path, "rank_taken")
                continue
            self.names.append(path)
            self.ranks.append(rank)
            self._start(len(self.names) - 1)
            added.append(path)
        if not added:
            return None
        self.watcher.add_sources(len(added))
        if self.fmt == "jsonl":
            _expect_steps(self.watcher, added)
        return InputsEvent(added=tuple(added), inputs=len(self.names),
                           skipped_files=self.scanner.skipped())

    def batches(self) -> Iterator[tuple[int, Batch | InputsEvent]]:
        poll = self.settings.poll
        scanned = time.monotonic()
        while True:
            busy, _ = yield from follow_round(self.live)
            if self.settings.once:
                if not self.live:
                    return
                continue
            if not busy or time.monotonic() - scanned >= max(poll, 1.0):
                scanned = time.monotonic()
                joined = self._join()
                if joined is not None:
                    yield len(self.names) - 1, joined
                    continue
            if not busy:
                if not self.live:
                    return
                time.sleep(poll)
