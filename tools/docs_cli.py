"""MkDocs hook: renders ``stragglers <command> --help`` for every (sub)command into the CLI
reference page at build time, from the argparse parser itself (``stragglers.cli.build_parser``).

``docs/reference/cli.md`` holds the marker ``<!-- cli-reference -->``; this hook replaces it
with one section per command, so the page can never disagree with the parser. Run as a script
(``python tools/docs_cli.py``) it prints the generated Markdown.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- cli-reference -->"
ROOT = Path(__file__).resolve().parents[1]


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    seen: set[int] = set()
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if id(sub) not in seen:
                    seen.add(id(sub))
                    out.append((name, sub))
    return out


def _aliases(parser: argparse.ArgumentParser) -> dict[int, list[str]]:
    """The other names of each subcommand (argparse ``aliases``: deprecated names)."""
    names: dict[int, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                names.setdefault(id(sub), []).append(name)
    return {key: found[1:] for key, found in names.items() if len(found) > 1}


def render() -> str:
    """The Markdown of every command's help, top-level first, nested commands after theirs."""
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: fix the width
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))
    from stragglers.cli import build_parser

    parser = build_parser()
    commands = _subcommands(parser)
    lines = ["Commands: " + ", ".join(f"[`{name}`](#stragglers-{name})" for name, _ in commands),
             "", "```text", parser.format_help().rstrip(), "```", ""]

    def walk(prefix: str, sub: argparse.ArgumentParser, level: int,
             aliases: list[str]) -> None:
        lines.extend([f"{'#' * level} `{prefix}`", ""])
        parent = prefix.rsplit(" ", 1)[0]
        lines.extend([f"Deprecated name: `{parent} {alias}` (removed in the next release)."
                      for alias in aliases] + ([""] if aliases else []))
        lines.extend(["```text", sub.format_help().rstrip(), "```", ""])
        others = _aliases(sub)
        for name, child in _subcommands(sub):
            walk(f"{prefix} {name}", child, min(level + 1, 4), others.get(id(child), []))

    top = _aliases(parser)

    for name, sub in commands:
        walk(f"stragglers {name}", sub, 2, top.get(id(sub), []))
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown


if __name__ == "__main__":
    print(render())
