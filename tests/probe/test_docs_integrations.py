"""docs/integrations.md shows the snippets the tests run, word for word, and its commands
are well formed (the tests run them through :func:`tests.probe.integration.run_doc`, which
refuses a command the page does not show)."""

from __future__ import annotations

import re
import shlex

from .integration import DOC, REPO, doc_commands


def test_every_snippet_is_shown_as_the_file_holds_it() -> None:
    text = DOC.read_text()
    shown = re.findall(r"<!-- snippet: (\S+) -->\n```python\n(.*?)^```", text, re.S | re.M)
    assert {path for path, _ in shown} == {f"docs/snippets/{p.name}" for p in
                                            (REPO / "docs" / "snippets").glob("*.py")}
    for path, code in shown:
        assert code == (REPO / path).read_text(), f"{path} differs from the page"


def test_commands_parse_and_use_the_documented_tools() -> None:
    commands = doc_commands()
    assert len(commands) >= 20
    for command in commands:
        words = [w for w in shlex.split(command) if "=" not in w or w.startswith("-")]
        assert words[0] in {"stragglers", "torchrun", "python"}, command
