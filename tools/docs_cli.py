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

    def walk(prefix: str, sub: argparse.ArgumentParser, level: int) -> None:
        lines.extend([f"{'#' * level} `{prefix}`", "", "```text", sub.format_help().rstrip(),
                      "```", ""])
        for name, child in _subcommands(sub):
            walk(f"{prefix} {name}", child, min(level + 1, 4))

    for name, sub in commands:
        walk(f"stragglers {name}", sub, 2)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown


if __name__ == "__main__":
    print(render())
