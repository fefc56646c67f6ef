"""The `stragglers` console script: one subcommand module per concern.

Each module listed in COMMAND_MODULES defines ``register(subparsers)``, which adds its
subcommand(s) and sets ``func`` on each parser; ``func(args)`` returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from stragglers.errors import InputError

COMMAND_MODULES: tuple[str, ...] = (
    "whatif_cmd",
    "synth_cmd",
    "detect_cmd",
    "probe_cmd",
    "service_cmd",
)

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stragglers",
        description="Find, explain and fix stragglers in distributed training jobs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"stragglers.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"stragglers {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
