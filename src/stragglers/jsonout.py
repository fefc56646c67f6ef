"""Standard output of the commands that print JSON (lines) or text as they go.

:class:`Output` writes under the error contract of :mod:`stragglers.cli`: a reader that goes
away (``| head``) ends the output quietly (:meth:`Output.write` returns False and the command
stops); an output that cannot be written (a full disk, ``> /dev/full``) is a one-line
:class:`~stragglers.errors.InputError`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import IO, Any

import orjson

from stragglers.errors import InputError


class Output:
    """Standard output (or ``stream``) written and flushed piece by piece. Once the reader
    has gone away or a write failed, standard output is pointed at ``/dev/null`` so that the
    interpreter's final flush cannot print a traceback."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.closed = False

    def _fail(self, exc: OSError) -> None:
        self.closed = True
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, self.stream.fileno())
            os.close(fd)
        except (OSError, ValueError, AttributeError):  # not a real file (tests): nothing to do
            pass
        if isinstance(exc, BrokenPipeError):
            return
        raise InputError(f"<stdout>: cannot write the output ({exc.strerror or exc})") from None

    def write(self, text: str) -> bool:
        """Write and flush; False once the reader has gone away."""
        if self.closed:
            return False
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError as exc:
            self._fail(exc)
            return False
        return True

    def events(self, events: Iterable[dict[str, Any]]) -> bool:
        """One JSON object per line."""
        opt = orjson.OPT_SERIALIZE_NUMPY
        return self.write("".join(orjson.dumps(ev, option=opt).decode() + "\n" for ev in events))
