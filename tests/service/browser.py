"""Headless Chromium for the dashboard tests and the benchmark: Playwright driving Debian's
``chromium`` (never a downloaded browser), with a fresh profile and no network besides the
pages it is sent to."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        "--disable-dev-shm-usage"]


def chromium_path() -> str | None:
    found = os.environ.get("STRAGGLERS_CHROMIUM") or shutil.which("chromium")
    if found:
        return found
    return CHROMIUM if os.path.exists(CHROMIUM) else None


@contextmanager
def browser_page(width: int = 1000, height: int = 800,
                 http_credentials: dict[str, str] | None = None) -> Iterator[Any]:
    """A Playwright page in a fresh headless Chromium (persistent context in a new temporary
    profile folder, removed afterwards); ``http_credentials`` ({"username", "password"}):
    what the browser answers an HTTP basic auth challenge with, as a user would in its
    dialog."""
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        raise FileNotFoundError("chromium not found (Debian package chromium)")
    profile = tempfile.mkdtemp(prefix="stragglers-chromium-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=exe, headless=True, args=ARGS,
                viewport={"width": width, "height": height},
                **({"http_credentials": http_credentials} if http_credentials else {}))
            try:
                page = context.pages[0] if context.pages else context.new_page()
                yield page
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
