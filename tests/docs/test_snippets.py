"""Every command the documentation marks runnable is run here, so that the docs cannot rot.

A fenced ``bash`` (or ``python``) block in ``docs/**/*.md`` directly preceded by an HTML
comment ``<!-- run -->`` is runnable; ``<!-- run: needs shared/PATH -->`` also needs
``$STRAGGLERS_SHARED/PATH`` (the shared data beside the checkout): without it that block is
not run and the page's test ends skipped with the reason outside CI (its other blocks run);
under ``CI=true`` it fails. The runnable blocks of one
page run in order in one fresh temporary folder (a later block may use what an earlier one
wrote), each with ``bash -euo pipefail`` (or the test's Python), the ``stragglers`` of this
environment first on ``PATH`` and ``STRAGGLERS_SHARED`` set; a block must exit 0 (a block
that shows a failure checks the exit code itself, e.g. ``cmd || test $? -eq 2``).

``<!-- run: needs postgresql -->`` gets a throw-away PostgreSQL server, its URL in
``$DATABASE_URL``. Blocks that are not run carry ``<!-- not run: ... -->`` with the reason
(in the guides: only commands for machines of their own, each after a block that runs the
same commands on loopback).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SHARED = Path(os.environ.get("STRAGGLERS_SHARED") or REPO.parent / "shared")
BLOCK_TIMEOUT_S = 300

_MARKER = re.compile(r"^<!--\s*run(?::\s*needs\s+(?P<needs>[^>]*?))?\s*-->\s*$")
_FENCE = re.compile(r"^(?P<fence>```+)\s*(?P<lang>[\w-]*)")


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    needs: tuple[str, ...]


def extract(text: str, page: str) -> list[Snippet]:
    """The runnable blocks of one Markdown page, in order."""
    lines = text.splitlines()
    out: list[Snippet] = []
    i = 0
    while i < len(lines):
        m = _MARKER.match(lines[i].strip())
        if m is None:
            i += 1
            continue
        fence = _FENCE.match(lines[i + 1].strip()) if i + 1 < len(lines) else None
        if fence is None:
            raise AssertionError(f"{page}:{i + 1}: a run marker must precede a fenced block")
        lang = fence["lang"] or "bash"
        if lang not in ("bash", "sh", "python"):
            raise AssertionError(f"{page}:{i + 2}: cannot run a {lang!r} block")
        end = i + 2
        while end < len(lines) and lines[end].strip() != fence["fence"]:
            end += 1
        if end == len(lines):
            raise AssertionError(f"{page}:{i + 2}: unclosed fenced block")
        needs = tuple(n.strip() for n in (m["needs"] or "").split(",") if n.strip())
        out.append(Snippet(page, i + 2, lang, "\n".join(lines[i + 2:end]) + "\n", needs))
        i = end + 1
    return out


def _pages() -> dict[str, list[Snippet]]:
    pages = {}
    for path in sorted(DOCS.rglob("*.md")):
        page = path.relative_to(DOCS).as_posix()
        snippets = extract(path.read_text(encoding="utf-8"), page)
        if snippets:
            pages[page] = snippets
    return pages


PAGES = _pages()


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)  # the venv's stragglers and python
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["STRAGGLERS_SHARED"] = str(SHARED)
    env["MPLBACKEND"] = "Agg"
    env["HOME"] = env.get("HOME", str(tmp))
    return env


#: ``<!-- run: needs postgresql -->``: the test starts a throw-away PostgreSQL server
#: (``tests/service/postgres.py``) and gives its URL to the page's blocks as
#: ``$DATABASE_URL`` (a database the reader created, in the guide).
SERVICES = frozenset({"postgresql"})


def _missing(snippets: list[Snippet]) -> list[str]:
    return sorted({n for s in snippets for n in s.needs if n not in SERVICES
                   and not (SHARED / n.removeprefix("shared/")).exists()})


@contextmanager
def _services(snippets: list[Snippet], env: dict[str, str]) -> Iterator[None]:
    """Start what the page's blocks need (PostgreSQL), its URL in ``env``."""
    if not any("postgresql" in s.needs for s in snippets):
        yield
        return
    from tests.service.postgres import PostgresServer, find_bin

    if find_bin("initdb") is None:
        reason = "PostgreSQL's initdb not found (Debian package postgresql: make system-deps)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    server = PostgresServer()
    try:
        env["DATABASE_URL"] = server.start()
        yield
    finally:
        server.stop()


def test_markers_are_well_formed() -> None:
    """At least the guides' blocks are found, and every marker precedes a block."""
    assert sum(len(v) for v in PAGES.values()) >= 20
    assert "getting-started.md" in PAGES


def test_every_shell_or_python_block_of_the_guides_is_run_or_says_why_not() -> None:
    """A ``bash``/``python`` block in a guide, Getting started or a concept page is either run
    (``<!-- run -->``) or marked ``<!-- not run: REASON -->``; unlabelled fences are usage
    synopses with placeholders (``TRACE``, ``META.yaml``) and outputs."""
    unmarked = []
    for path in [DOCS / "getting-started.md", *sorted((DOCS / "guides").glob("*.md")),
                 *sorted((DOCS / "concepts").glob("*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if re.match(r"^```+\s*(bash|sh|python)\b", line.strip()):
                before = lines[i - 1].strip() if i else ""
                if not (_MARKER.match(before) or before.startswith("<!-- not run:")):
                    unmarked.append(f"{path.relative_to(DOCS)}:{i + 1}")
    assert not unmarked, f"blocks neither run nor marked 'not run': {unmarked}"


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_snippets_run(page: str, tmp_path: Path) -> None:
    snippets = PAGES[page]
    missing = _missing(snippets)
    reason = f"{page}: needs {', '.join(missing)} under {SHARED} (the shared data)"
    if missing and os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    env = _env(tmp_path)
    skipped = 0
    with _services(snippets, env):
        for s in snippets:
            if _missing([s]):  # outside CI: run the page's other blocks, skip this one
                skipped += 1
                continue
            cmd = ([sys.executable, "-c", s.code] if s.lang == "python"
                   else ["bash", "-euo", "pipefail", "-c", s.code])
            proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=BLOCK_TIMEOUT_S)
            assert proc.returncode == 0, (
                f"docs/{s.page}:{s.line}: block exited {proc.returncode}\n--- block\n"
                f"{s.code}--- stdout (tail)\n{proc.stdout[-3000:]}\n--- stderr (tail)\n"
                f"{proc.stderr[-3000:]}")
    if skipped:
        pytest.skip(f"{reason}: {skipped} of {len(snippets)} blocks not run")
