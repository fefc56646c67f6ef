"""``stragglers watch`` on files: which files, their format and ranks, followed batch by batch
into a :class:`~stragglers.detect.watch.Watcher`, its events written as JSON lines.

:func:`watch_files` is the whole command after its options are parsed: standard input, one
file, or several files of one format (a folder's files or a glob's matches), one per rank
(the rank from the file's name or its ``[rankN]:`` prefixes).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from stragglers.detect.bocd import Detector
from stragglers.detect.events import WatchEvent
from stragglers.detect.follow import Batch, Follower, follow_files, peek_stdin
from stragglers.detect.megatron import (
    guess_format,
    rank_from_content,
    rank_from_name,
    read_iteration_json,
    series_items,
)
from stragglers.detect.records import RecordError
from stragglers.detect.watch import Watcher
from stragglers.errors import InputError
from stragglers.jsonout import Output
from stragglers.limits import check_limit

__all__ = ["WatchSettings", "file_ranks", "guess_file_format", "watch_files", "watch_inputs"]


@dataclass(frozen=True)
class WatchSettings:
    """How to watch: ``input_format`` (``auto``, ``jsonl``, ``megatron-log``,
    ``megatron-json``), the period tracker's ``window``, the warm-up (None: the detector's),
    the most ranks followed, and how files are followed (``once``: read to the end and stop;
    ``poll`` seconds between reads; ``idle_timeout``: stop after so long without data)."""

    input_format: str
    window: int
    warmup: int | None
    max_ranks: int
    once: bool
    poll: float
    idle_timeout: float | None


def watch_files(paths: list[str], detector_factory: Callable[[], Detector],
                settings: WatchSettings, out: Output | None = None) -> int:
    """Watch ``paths`` (from :func:`watch_inputs`; ``["-"]``: standard input) and write the
    events to ``out`` (standard output) until the input ends or the reader goes away."""
    out = out if out is not None else Output()
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


def _pump(batches: Iterable[tuple[int, Batch]], watcher: Watcher, out: Output,
          process: Callable[[int, list[tuple[int, bytes | None]]], list[WatchEvent]],
          names: list[str]) -> int:
    """Feed followed batches ``(file index, batch)`` to the watcher until the input ends or
    stdout closes; ``process(i, lines)`` handles the lines of file ``i`` (``names[i]``).
    The events are printed as JSON lines."""
    i = 0
    try:
        for i, batch in batches:
            if batch.notice is not None:
                events = watcher.notice(batch.notice)
            else:
                events = process(i, batch.lines)
            if events and not out.events(e.to_dict() for e in events):
                return 0
    except KeyboardInterrupt:  # pragma: no cover - interactive
        pass
    except OSError as exc:
        raise InputError(f"{names[i]}: cannot read ({exc.strerror or exc})") from None
    out.events(e.to_dict() for e in watcher.finish())
    return 0


_GLOB = frozenset("*?[")


def watch_inputs(args: list[str]) -> list[str]:
    """The files to watch: the arguments, a folder's files (sorted; hidden files skipped) or a
    glob pattern's matches (when the pattern is not itself a file); each checked readable."""
    paths: list[str] = []
    for a in args:
        if a == "-":
            if len(args) > 1:
                raise InputError("-: standard input cannot be watched with other files")
            return ["-"]
        p = Path(a)
        if p.is_dir():
            found = sorted(str(q) for q in p.iterdir()
                           if not q.name.startswith(".") and q.is_file())
            if not found:
                raise InputError(f"{p}: is a folder without files to watch")
            paths += found
        elif not p.exists() and _GLOB & set(a):
            found = sorted(q for q in glob.glob(a) if Path(q).is_file())
            if not found:
                raise InputError(f"{a}: no file matches the pattern")
            paths += found
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
        if not os.access(p, os.R_OK):
            raise InputError(f"{p}: cannot read the file (permission denied)")
        key = os.path.realpath(p)
        if key in seen:
            raise InputError(f"{p}: given twice")
        seen.add(key)
    return paths


def file_ranks(paths: list[str]) -> list[int]:
    """The rank of each file: the last number of its name
    (:func:`~stragglers.detect.megatron.rank_from_name`), else the first ``torchrun`` prefix
    in its first 64 KiB (:func:`~stragglers.detect.megatron.rank_from_content`); one line
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
    its first block, read by :func:`~stragglers.detect.follow.peek_stdin`)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    return guess_format(head)


def _iteration_json(files: list[tuple[int, tuple[str, int]]], watcher: Watcher,
                    out: Output) -> int:
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
    out.events(e.to_dict() for e in watcher.finish())
    return 0
