"""Errors shared by every package; the CLI maps InputError to exit code 2."""

from __future__ import annotations


class InputError(Exception):
    """Bad user input: a trace, metadata or argument that cannot be analysed.

    The message is one line that names the file, the field and an example row.
    """


class ModelError(InputError):
    """The dependency model cannot be built from the trace (cycle, unpairable op)."""
