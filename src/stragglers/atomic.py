"""Atomic outputs: a file appears whole or not at all; a failed command leaves a folder as
it was.

* :func:`write_text` / :func:`write_bytes` / :func:`open_atomic`: write a temporary file
  beside the target, flush and fsync it, then ``os.replace`` it over the target.
* :func:`check_out_dir`: check an ``--out`` folder *before* the work starts: it must be a
  folder (or not exist yet, with a writable parent).
* :class:`StagedDir`: a command's files are written into a hidden staging folder inside the
  output folder and moved into place only when all of them are complete, the main result
  (``result.json``) last. On any failure the staging folder is removed and the output folder
  holds exactly what it held before. A rerun of the same command into the folder removes the
  files the earlier run wrote that this one does not (recorded in :data:`MANIFEST`), and
  nothing else.

Signals: while a command of the command line (:func:`command`) has a temporary file or a
staging folder, a signal that would end the process (SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2,
SIGALRM, ...; SIGINT already raises KeyboardInterrupt) raises :class:`Terminated` instead, so
that they are removed on the way out; the moves of a commit are not interrupted half-way
(the signal waits until they are done). A process killed outright (SIGKILL, a crash) leaves its staging folder behind: the
next :class:`StagedDir` into that folder removes the staging folders of processes that no
longer run on this machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any

from stragglers.errors import InputError

_STAGING_PREFIX = ".stragglers-staging-"
#: The record, in an output folder, of the files each command wrote there last:
#: ``{"version": 1, "owners": {COMMAND: {NAME: [size, mtime_ns]}}}``.
MANIFEST = ".stragglers-outputs.json"
#: Staging folders of an earlier version carry no process id: removed once this old.
_LEGACY_STAGING_AGE_S = 3600.0


class Terminated(BaseException):  # noqa: N818 - like KeyboardInterrupt, not an error
    """A signal that would have ended the process arrived while outputs were being written
    (raised from the signal handler so that temporary files and staging folders are
    removed); the command line ends with exit 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


#: Signals whose default action ends the process and that a handler can catch.
_ENDING: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                                       "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGXCPU", "SIGPWR")
    if hasattr(signal, name))
_guard = {"depth": 0, "pid": 0}
_saved_handlers: dict[int, Any] = {}


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _guard["pid"]:  # a forked child: end as the signal would have
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise Terminated(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _signals_end_cleanly() -> Iterator[None]:
    """While inside: the ending signals whose action is the default raise
    :class:`Terminated`, for a command of the command line (:func:`command`; a program that
    calls the library, a training job with a probe, keeps its signals as they are), in the
    main thread only, and handlers set by the program stay."""
    if not _command or not _main_thread():
        yield
        return
    if _guard["depth"] == 0:
        _guard["pid"] = os.getpid()
        for sig in _ENDING:
            with contextlib.suppress(OSError, ValueError):
                if signal.getsignal(sig) == signal.SIG_DFL:
                    _saved_handlers[sig] = signal.signal(sig, _raise_terminated)
    _guard["depth"] += 1
    try:
        yield
    finally:
        _guard["depth"] -= 1
        if _guard["depth"] == 0:
            for signum, handler in _saved_handlers.items():
                with contextlib.suppress(OSError, ValueError):
                    if signal.getsignal(signum) is _raise_terminated:
                        signal.signal(signum, handler)
            _saved_handlers.clear()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """While inside: SIGINT and the ending signals are held back (delivered on leaving), so
    that a sequence of moves or a clean-up is not cut half-way."""
    if not _main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = {signal.SIGINT, *_ENDING}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


#: The command whose outputs are being written (set by the command line, :func:`command`):
#: the owner under which :class:`StagedDir` records them.
_command: list[str] = []


@contextlib.contextmanager
def command(name: str) -> Iterator[None]:
    """Outputs written inside belong to command ``name`` (``stragglers analyze``): a rerun
    of the same command into the same folder removes those it does not write again."""
    _command.append(name)
    try:
        yield
    finally:
        _command.pop()


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", os.uname().nodename)[:64] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


def _remove_stale_staging(out: Path) -> None:
    """Remove the staging folders in ``out`` of processes that no longer run on this
    machine (killed outright), and those of an earlier version once an hour old."""
    host = _host()
    try:
        entries = list(os.scandir(out))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(_STAGING_PREFIX):
            continue
        rest = entry.name[len(_STAGING_PREFIX):]
        parts = rest.rsplit("-", 2)
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if len(parts) == 3 and parts[1].isdigit():
                stale = parts[0] == host and not _alive(int(parts[1]))
            else:
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
                stale = age > _LEGACY_STAGING_AGE_S
        except OSError:
            continue
        if stale:
            shutil.rmtree(entry.path, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _name(exc: OSError, path: Path) -> None:
    """Give an error without a file name (a write to a full disk: ``[Errno 28] No space left
    on device``) the output it happened on, so that the one-line message names it."""
    if not exc.filename:
        exc.filename = str(path)


@contextlib.contextmanager
def open_atomic(path: str | os.PathLike[str], mode: str = "w",
                encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on a clean exit it replaces ``path``.

    On an exception (a full disk, a bug, Ctrl-C) the temporary file is removed and ``path``
    is untouched.
    """
    target = Path(path)
    if mode not in ("w", "wb"):
        raise ValueError(f"open_atomic: mode must be 'w' or 'wb', got {mode!r}")
    with _signals_end_cleanly():
        yield from _write_atomic(target, mode, encoding)


def _write_atomic(target: Path, mode: str, encoding: str | None) -> Iterator[IO[Any]]:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    ok = False
    try:
        # mkstemp creates the file 0600; an output gets the mode a plain open() would give it
        os.fchmod(fd, 0o666 & ~_umask())
        if mode == "wb":
            fh: IO[Any] = os.fdopen(fd, "wb")
        else:
            fh = os.fdopen(fd, "w", encoding=encoding)
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        ok = True
    except OSError as exc:
        _name(exc, target)
        raise
    finally:
        if not ok:
            with _signals_held(), contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    _fsync_dir(target.parent)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with open_atomic(path, "w") as fh:
        fh.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with open_atomic(path, "wb") as fh:
        fh.write(data)
    return Path(path)


def check_out_dir(path: str | os.PathLike[str], option: str = "--out") -> Path:
    """Check that ``path`` can be used as an output folder, before any work is done.

    It must be an existing writable folder, or not exist yet with its nearest existing
    ancestor a writable folder. Raises :class:`~stragglers.errors.InputError` otherwise.
    Nothing is created here.
    """
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise InputError(f"{option} {p}: exists and is not a folder")
        if not os.access(p, os.W_OK | os.X_OK):
            raise InputError(f"{option} {p}: folder is not writable")
        return p
    parent = p.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{option} {p}: {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {p}: cannot create it ({parent} is not writable)")
    return p


class StagedDir:
    """Write a command's output files into ``out`` all together, or not at all.

    ::

        with StagedDir(out) as stage:
            write_png(stage.path("heatmap.png"))
            stage.commit_last("result.json")          # moved after every other file
            write_text(stage.path("result.json"), doc)

    Files are created under ``stage.path(name)`` (inside a hidden staging folder in ``out``);
    on a clean exit they are moved into ``out`` (replacing files of the same name), the
    names given to :meth:`commit_last` last, in that order. On an exception (a signal that
    would end the process included, see the module) the staging folder is deleted and
    ``out`` is as it was (a folder that did not exist is not left behind either).

    ``owner`` (default: the command being run, :func:`command`) names who writes: the files
    are recorded under it in ``out``'s :data:`MANIFEST`, and the files recorded under it
    by an earlier run that this one does not write are removed, provided they are as that
    run left them (same size and modification time). Files of other owners, the user's own
    files and folders are never touched. Without an owner nothing is recorded or removed.
    """

    def __init__(self, out: str | os.PathLike[str], owner: str | None = None) -> None:
        self.out = Path(out)
        self.owner = owner if owner is not None else (_command[-1] if _command else None)
        self._created: list[Path] = []
        self._stage: Path | None = None
        self._last: list[str] = []
        self._signals = contextlib.ExitStack()

    def __enter__(self) -> StagedDir:
        check_out_dir(self.out)
        missing = []
        p = self.out.absolute()
        while not p.exists():
            missing.append(p)
            p = p.parent
        self._signals.enter_context(_signals_end_cleanly())
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self._created = missing
            _remove_stale_staging(self.out)
            prefix = f"{_STAGING_PREFIX}{_host()}-{os.getpid()}-"
            self._stage = Path(tempfile.mkdtemp(prefix=prefix, dir=self.out))
        except BaseException:
            self._signals.close()
            raise
        return self

    @property
    def staging(self) -> Path:
        """The staging folder (files written here are moved into ``out`` on success)."""
        if self._stage is None:
            raise RuntimeError("StagedDir.staging outside its with-block")
        return self._stage

    def path(self, name: str) -> Path:
        """Where to write output file ``name`` (a plain file name, no folders)."""
        if self._stage is None:
            raise RuntimeError("StagedDir.path() outside its with-block")
        if Path(name).name != name or name in ("", ".", "..") or name == MANIFEST:
            raise ValueError(f"StagedDir: {name!r} is not a plain file name")
        return self._stage / name

    def final(self, name: str) -> Path:
        """Where output file ``name`` will be once committed."""
        return self.out / name

    def commit_last(self, *names: str) -> None:
        """Move these files after all others, in this order (the main result last)."""
        self._last.extend(names)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._signals:
            with _signals_held():
                self._finish(exc_type, exc)

    def _finish(self, exc_type: type[BaseException] | None, exc: BaseException | None
                ) -> None:
        stage = self._stage
        assert stage is not None
        try:
            if exc_type is None:
                names = sorted(x.name for x in stage.iterdir())
                order = [n for n in names if n not in self._last]
                order += [n for n in self._last if n in names]
                with _locked(self.out):
                    for fh_name in order:
                        src = stage / fh_name
                        with contextlib.suppress(OSError):
                            with open(src, "rb+") as fh:
                                os.fsync(fh.fileno())
                        os.replace(src, self.out / fh_name)
                    if self.owner is not None:
                        _record(self.out, self.owner, order)
                _fsync_dir(self.out)
        except OSError as err:
            _name(err, self.out)
            raise
        finally:
            if isinstance(exc, OSError):
                _name(exc, self.out)
            shutil.rmtree(stage, ignore_errors=True)
            if exc_type is not None:
                for p in self._created:
                    with contextlib.suppress(OSError):
                        p.rmdir()


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (two commands committing into one folder at once
    update its manifest one after the other); without locks (some network file systems)
    nothing is held."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _identity(path: Path) -> list[int] | None:
    """[size, modification time in ns] of a regular file; None for anything else."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns] if stat.S_ISREG(st.st_mode) else None


def _read_manifest(out: Path) -> dict[str, dict[str, list[int]]]:
    """The owners' files recorded in ``out`` (an unreadable or damaged record: none)."""
    try:
        raw = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    owners = raw.get("owners") if isinstance(raw, dict) else None
    if not isinstance(owners, dict):
        return {}
    out_owners: dict[str, dict[str, list[int]]] = {}
    for owner, files in owners.items():
        if not isinstance(owner, str) or not isinstance(files, dict):
            continue
        out_owners[owner] = {
            name: ident for name, ident in files.items()
            if isinstance(name, str) and Path(name).name == name and name not in ("", ".", "..")
            and isinstance(ident, list) and len(ident) == 2
            and all(type(x) is int for x in ident)}
    return out_owners


def _record(out: Path, owner: str, written: list[str]) -> None:
    """Record ``written`` (just moved into ``out``) as ``owner``'s files, and remove the
    files ``owner`` wrote there before and not now, when they are as it left them."""
    owners = _read_manifest(out)
    previous = owners.pop(owner, {})
    mine = set(written)
    for name, recorded in previous.items():
        if name in mine or name == MANIFEST:
            continue
        target = out / name
        if _identity(target) == recorded:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
    for files in owners.values():  # a file belongs to the command that wrote it last
        for name in mine:
            files.pop(name, None)
    current = {name: ident for name in written
               if (ident := _identity(out / name)) is not None}
    owners = {k: v for k, v in owners.items() if v}
    if current:
        owners[owner] = current
    doc = json.dumps({"version": 1, "owners": owners}, indent=1, sort_keys=True) + "\n"
    write_text(out / MANIFEST, doc)
