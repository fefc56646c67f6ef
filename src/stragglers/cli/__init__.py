"""The `stragglers` console script: one subcommand module per concern.

Each module listed in COMMAND_MODULES defines ``register(subparsers)``, which adds its
subcommand(s) and sets ``func`` on each parser; ``func(args)`` returns the exit code.

The error contract is enforced here, for every command: a user error
(:class:`~stragglers.errors.InputError`, a bad option, an output that cannot be written) ends
with exit 2 and one line ``stragglers COMMAND: error: MESSAGE`` on stderr; a closed stdout
pipe (``stragglers analyze ... --json | head``) ends the command quietly with exit 141, as a
process killed by SIGPIPE; Ctrl-C ends it with exit 130 and no traceback. Anything else is
a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from typing import NoReturn

from stragglers.atomic import Terminated, command
from stragglers.errors import InputError

COMMAND_MODULES: tuple[str, ...] = (
    "whatif_cmd",
    "synth_cmd",
    "detect_cmd",
    "probe_cmd",
    "service_cmd",
    "mitigate_cmd",
    "import_cmd",
    "validate_cmd",
    "run_cmd",
    "fleet_cmd",
    "diff_cmd",
)

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130

#: Operating-system errors that come from the user's environment (a full disk, a folder that
#: is not writable), not from a bug: reported in one line like bad input.
USER_OS_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM,
                            errno.EROFS, errno.ENAMETOOLONG})


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block), exit code 2."""

    def error(self, message: str) -> NoReturn:
        first = message.strip().splitlines()[0] if message.strip() else "bad arguments"
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {first} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="stragglers",
        description="Find, explain and fix stragglers in distributed training jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"stragglers.cli.{name}").register(sub)
    return parser


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so that the final flush is silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests): nothing to flush
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad option: the one-line message is already printed
        if exc.code == EXIT_BAD_INPUT:
            return EXIT_BAD_INPUT
        raise  # --help, --version
    # "stragglers probe merge": a command with subcommands stores them as COMMAND_command
    sub = getattr(args, f"{args.command}_command", None)
    prog = f"stragglers {args.command}" + (f" {sub}" if isinstance(sub, str) else "")
    try:
        with command(prog):
            code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except InputError as exc:
        print(f"{prog}: error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated as exc:
        print(f"{prog}: {exc} (outputs left as they were)", file=sys.stderr)
        return 128 + exc.signum
    except OSError as exc:
        if exc.errno not in USER_OS_ERRORS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
