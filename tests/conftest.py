"""Shared fixtures: the reference traces in ../shared (never copied into the repo)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: ``../shared`` beside the checkout; STRAGGLERS_SHARED points elsewhere (a git worktree
#: whose parent folder has no ``shared``).
SHARED = Path(os.environ.get("STRAGGLERS_SHARED") or REPO.parent / "shared")
REFERENCE = SHARED / "reference" / "traces"


def require_shared(path: Path, what: str, *, probe: Path | None = None) -> Path:
    """``path`` under ``../shared`` when it (or ``probe``, a file that must be in it) exists;
    otherwise skip outside CI and fail inside CI, naming ``what`` and where it was looked
    for."""
    if (probe or path).exists():
        return path
    reason = f"{what} not found at {path} (../shared beside the checkout, which CI provides)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def reference_dir() -> Path:
    """The reference folder; skip outside CI when it is absent, fail inside CI."""
    return require_shared(REFERENCE, "reference traces", probe=REFERENCE / "trace-AR.parquet")


@pytest.fixture(scope="session")
def ref_dir() -> Path:
    return reference_dir()


@pytest.fixture
def page():
    """A headless Chromium page (1000 x 900); skip outside CI when chromium is missing, fail
    inside CI."""
    from tests.service.browser import browser_page, chromium_path
    from tests.service.helpers import in_ci

    if chromium_path() is None:
        reason = "chromium not found (install Debian's chromium: `make system-deps`)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    with browser_page(1000, 900) as p:
        yield p
