"""A file truncated and rewritten (``copytruncate``, longer than before) between the
follower's check of its first bytes and its next read: what that read returns continues the
new content, not the file already followed. It must not be emitted as lines (it was: a
partial line such as ``ts": 296.1}`` and then the new file's lines again, a race that made
``test_follow_through_truncation`` fail at load): the follower reports the truncation and
reads the new content from its start."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from stragglers.logs import follow
from tests.logs.test_follow_rotate import follow_lines


def test_a_rewrite_between_check_and_read_is_read_from_the_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "log.jsonl"
    old = [f'{{"rank": 0, "iter": {i}, "ts": {i}.5}}' for i in range(20)]
    new = [f'{{"rank": 0, "iter": {i}, "ts": {i}.25}}' for i in range(100, 160)]
    p.write_text("\n".join(old) + "\n")
    real_open = open
    state = {"reads_at_end": 0}

    class RewrittenOnRead(io.FileIO):
        """The writer's truncate-and-rewrite lands just before the follower's second read at
        the end of the old content (after its first-bytes check passed)."""

        def read(self, size: int = -1) -> bytes:  # type: ignore[override]
            if self.tell() > 0 and p.stat().st_size == self.tell():
                state["reads_at_end"] += 1
                if state["reads_at_end"] == 2:
                    with real_open(p, "w") as fh:  # truncate, rewrite past the position
                        fh.write("\n".join(new) + "\n")
            return super().read(size)

    def fake_open(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(file) == str(p) and mode == "rb":
            return RewrittenOnRead(str(file), "r")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(follow, "open", fake_open, raising=False)
    got, notices = follow_lines(p, len(old) + len(new))
    assert notices == ["truncated"]
    assert got == old + new
