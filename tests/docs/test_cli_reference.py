"""The CLI reference page is generated at build time by the MkDocs hook tools/docs_cli.py:
check that it renders every (sub)command of the parser, with its options."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from stragglers.cli import build_parser

HOOK = Path(__file__).resolve().parents[2] / "tools" / "docs_cli.py"


def _hook():
    spec = importlib.util.spec_from_file_location("docs_cli", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(parser: argparse.ArgumentParser, prefix: str) -> list[tuple[str, str]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((f"{prefix} {name}", sub.format_usage()))
                out.extend(_commands(sub, f"{prefix} {name}"))
    return out


def test_every_command_has_its_section_and_help() -> None:
    text = _hook().render()
    commands = _commands(build_parser(), "stragglers")
    assert len(commands) > 20
    for name, _ in commands:
        assert f"`{name}`" in text, name
    assert "--verdict-config" in text and "--flight-recorder" in text
    # options added when the command is used (probe example / validate) are there too
    assert "--slow-rank" in text and "--dp" in text


def test_the_hook_replaces_the_marker_only() -> None:
    hook = _hook()
    page = "# Command line\n\n" + hook.MARKER + "\n"
    out = hook.on_page_markdown(page, page=None)
    assert hook.MARKER not in out and "## `stragglers analyze`" in out
    assert hook.on_page_markdown("no marker", page=None) == "no marker"
