"""A file appended to and then rotated away between the follower's read that found its end
and its look for a rotation (``stat`` of the path): the appended lines are in the old file,
which the follower must read to its end before it turns to the new one, as ``tail -F`` does.
(It turned at once and lost them: ``test_follow_through_rotation`` failed at load with lines
10-499 of the first file missing.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from stragglers.logs import follow
from stragglers.logs.follow import Follower


def _lines(a: int, b: int) -> list[str]:
    return [f'{{"rank": 0, "iter": {i}, "ts": {i}.5}}' for i in range(a, b)]


def follow_lines(p: Path, expected: int) -> tuple[list[str], list[str]]:
    """The lines read following ``p`` until ``expected`` of them, and the notices' events."""
    got: list[str] = []
    notices: list[str] = []
    for batch in Follower(str(p), poll=0.001, idle_timeout=5.0):
        if batch.notice is not None:
            notices.append(batch.notice.to_dict()["event"])
            continue
        got += [b.decode() for _, b in batch.lines if b is not None]
        if len(got) >= expected:
            break
    return got, notices


@pytest.mark.parametrize("appended", [1, 490, 20_000])
def test_lines_appended_just_before_a_rotation_are_read_from_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, appended: int) -> None:
    p = tmp_path / "log.jsonl"
    first, late, second = _lines(0, 10), _lines(10, 10 + appended), _lines(10_000_000,
                                                                              10_000_050)
    p.write_text("\n".join(first) + "\n")
    done = {"rotated": False}

    class _Os:
        """``os`` for the follower, whose ``stat`` of the path lets the writer append to the
        file and rotate it first (once): the race between the read at the end and the look."""

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if str(path) == str(p) and not done["rotated"]:
                done["rotated"] = True
                with open(p, "a") as fh:
                    fh.write("\n".join(late) + "\n")
                fresh = tmp_path / "log.jsonl.new"
                fresh.write_text("\n".join(second) + "\n")
                os.link(p, tmp_path / "log.jsonl.1")
                os.replace(fresh, p)
            return os.stat(path, *args, **kwargs)

    monkeypatch.setattr(follow, "os", _Os())
    got, notices = follow_lines(p, len(first) + len(late) + len(second))
    assert done["rotated"]
    assert notices == ["rotated"]
    assert got == first + late + second


def test_a_rotation_with_nothing_appended_turns_to_the_new_file(tmp_path: Path) -> None:
    """The usual case, unchanged: the old file read to its end, then the new one."""
    p = tmp_path / "log.jsonl"
    first, second = _lines(0, 30), _lines(100, 140)
    p.write_text("\n".join(first) + "\n")
    follower = iter(Follower(str(p), poll=0.001, idle_timeout=5.0, yield_when_idle=True))
    got: list[str] = []
    notices: list[str] = []
    rotated = False
    for batch in follower:
        if batch.notice is not None:
            notices.append(batch.notice.to_dict()["event"])
            continue
        got += [b.decode() for _, b in batch.lines if b is not None]
        if not batch.lines and not rotated:  # idle at the end of the first file
            rotated = True
            fresh = tmp_path / "log.jsonl.new"
            fresh.write_text("\n".join(second) + "\n")
            os.replace(fresh, p)
        if len(got) >= len(first) + len(second):
            break
    assert notices == ["rotated"]
    assert got == first + second
