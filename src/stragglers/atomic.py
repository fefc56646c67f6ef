"""Atomic outputs: a file appears whole or not at all; a failed command leaves a folder as
it was.

* :func:`write_text` / :func:`write_bytes` / :func:`open_atomic`: write a temporary file
  beside the target, flush and fsync it, then ``os.replace`` it over the target.
* :func:`check_out_dir`: check an ``--out`` folder *before* the work starts: it must be a
  folder (or not exist yet, with a writable parent).
* :class:`StagedDir`: a command's files are written into a hidden staging folder inside the
  output folder and moved into place only when all of them are complete, the main result
  (``result.json``) last. On any failure the staging folder is removed and the output folder
  holds exactly what it held before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from stragglers.errors import InputError

_STAGING_PREFIX = ".stragglers-staging-"


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
            with contextlib.suppress(FileNotFoundError):
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
    names given to :meth:`commit_last` last, in that order. On an exception the staging
    folder is deleted and ``out`` is as it was (a folder that did not exist is not left
    behind either).
    """

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.out = Path(out)
        self._created: list[Path] = []
        self._stage: Path | None = None
        self._last: list[str] = []

    def __enter__(self) -> StagedDir:
        check_out_dir(self.out)
        missing = []
        p = self.out.absolute()
        while not p.exists():
            missing.append(p)
            p = p.parent
        self.out.mkdir(parents=True, exist_ok=True)
        self._created = missing
        self._stage = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self.out))
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
        if Path(name).name != name or name in ("", ".", ".."):
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
        stage = self._stage
        assert stage is not None
        try:
            if exc_type is None:
                names = sorted(x.name for x in stage.iterdir())
                order = [n for n in names if n not in self._last]
                order += [n for n in self._last if n in names]
                for fh_name in order:
                    src = stage / fh_name
                    with contextlib.suppress(OSError):
                        with open(src, "rb+") as fh:
                            os.fsync(fh.fileno())
                    os.replace(src, self.out / fh_name)
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
