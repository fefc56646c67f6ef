"""The rank-file reader parses a dict per event; while it reads, the garbage collector's
young generation is collected less often (``reader.GC_THRESHOLD``), and the threshold the
process had is restored afterwards: after a good file, after a refused one, and when
threads read files side by side (a Dask worker's threads)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stragglers.errors import InputError
from stragglers.kineto import load_patterns, reader
from tests.kineto.hostile import document, write

SET = (555, 7, 9)  # the process's own thresholds (not the default: restored exactly)


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*SET)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _seen(monkeypatch: pytest.MonkeyPatch, barrier: threading.Barrier | None = None
          ) -> list[tuple[int, ...]]:
    """The thresholds in force while events are read (recorded by each event read)."""
    seen: list[tuple[int, ...]] = []
    event = reader._Reader.event

    def spy(self: Any, ev: Any, i: int) -> None:
        seen.append(gc.get_threshold())
        if barrier is not None and i == 0:
            barrier.wait(timeout=30)  # both threads inside a read at once
        event(self, ev, i)

    monkeypatch.setattr(reader._Reader, "event", spy)
    return seen


def test_fewer_collections_while_reading_and_restored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thresholds: None) -> None:
    seen = _seen(monkeypatch)
    rank = write(tmp_path / "a", document()) / "rank-0.json"
    ev = reader.read_rank_file(rank, load_patterns(None))
    assert ev.n_events > 0 and seen
    assert {t[0] for t in seen} == {reader.GC_THRESHOLD}
    assert {t[1:] for t in seen} == {SET[1:]}
    assert gc.get_threshold() == SET


def test_restored_after_a_refused_file(tmp_path: Path, thresholds: None) -> None:
    bad = write(tmp_path / "b", document(tail=b', "x": 1, "x": 2')) / "rank-0.json"
    with pytest.raises(InputError, match="given twice"):
        reader.read_rank_file(bad, load_patterns(None))
    assert gc.get_threshold() == SET


def test_restored_when_threads_read_side_by_side(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thresholds: None) -> None:
    barrier = threading.Barrier(2)
    seen = _seen(monkeypatch, barrier)
    files = [write(tmp_path / f"t{k}", document()) / "rank-0.json" for k in range(2)]
    errors: list[BaseException] = []

    def run(path: Path) -> None:
        try:
            reader.read_rank_file(path, load_patterns(None))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f,)) for f in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert {t[0] for t in seen} == {reader.GC_THRESHOLD}
    assert gc.get_threshold() == SET
