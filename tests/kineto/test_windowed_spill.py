"""A rank file read in windows (:mod:`stragglers.kineto.windowed`) is parsed once: its launches
and kernels go to a spill of typed records with a per-batch index, and each window reads back
only the batches whose CPU-time or correlation-id ranges meet its own (issue 32 item 2).

Truth: the one-pass ops (array for array, bytes). Hand-built files of ``STEPS`` steps, written
in Kineto's order (the CPU events in time order, then the GPU kernels) or shuffled (the events
of a step spread over the file), read with a budget of 1 byte (a window per free step start)
and batches of a few events (``PARSE_BYTES`` and the reader's chunk made small, so that
events are cut across the chunk boundaries too)."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.kineto import jsonstream, load_patterns, reader, windowed
from stragglers.kineto.rankops import rank_ops
from stragglers.kineto.reader import read_rank_file
from tests.kineto.test_all_to_all_import import Events
from tests.kineto.test_windowed import _passes, _same

PAT = load_patterns(None)
STEPS = 12
STEP = 10_000.0
T0 = 1_000_000.0


def _events() -> list[dict[str, Any]]:
    """``STEPS`` steps of a forward (3 kernels) and a backward (2 kernels), launched in time
    order (the correlation ids grow with the launch time)."""
    e = Events()
    for step in range(STEPS):
        o = T0 + STEP * step
        e.cpu("user_annotation", f"ProfilerStep#{step}", o, STEP - 100)
        e.cpu("user_annotation", "## forward ##", o + 1, 40)
        for k in range(3):
            e.kernel(f"gemm_{k}", o + 2 + k, o + 100 + 500 * k, o + 500 + 500 * k)
        e.cpu("user_annotation", "## backward ##", o + 50, 40)
        for k in range(2):
            e.kernel(f"gemm_bwd_{k}", o + 51 + k, o + 2000 + 500 * k, o + 2400 + 500 * k)
    return e.events


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    doc = {"schemaVersion": 1, "traceEvents": events,
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}}
    path.write_text(json.dumps(doc, indent=1))
    return path


def kineto_order(path: Path) -> Path:
    """The CPU events in time order, then the GPU kernels in time order (Kineto's layout)."""
    ev = _events()
    meta = [x for x in ev if x["ph"] == "M"]
    gpu = sorted((x for x in ev if x.get("cat") == "kernel"), key=lambda x: x["ts"])
    cpu = sorted((x for x in ev if x["ph"] == "X" and x.get("cat") != "kernel"),
                 key=lambda x: x["ts"])
    return _write(path, meta + cpu + gpu)


def shuffled(path: Path) -> Path:
    ev = _events()
    random.Random(7).shuffle(ev)
    return _write(path, ev)


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of a few events, chunks of 997 bytes (events cut across the boundaries)."""
    monkeypatch.setattr(jsonstream, "PARSE_BYTES", 600)
    monkeypatch.setattr(jsonstream, "CHUNK", 997)


def _read_back(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The records each window reads back from the spill (launches and kernels)."""
    counts: list[int] = []
    real_rows, real_records = windowed._Spill.rows, windowed._records

    def rows(self: Any, *args: Any) -> Any:
        counts.append(0)
        return real_rows(self, *args)

    def records(fh: Any, dtype: Any, lo: Any, hi: Any, keep: Any) -> Any:
        def counted(block: Any) -> Any:
            counts[-1] += block.size  # (read)
            return keep(block)
        return real_records(fh, dtype, lo, hi, counted)

    monkeypatch.setattr(windowed._Spill, "rows", rows)
    monkeypatch.setattr(windowed, "_records", records)
    return counts


def _opens(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files the reader opens (each a pass over the JSON)."""
    seen: list[Path] = []
    real = reader._open

    def opened(path: Path) -> Any:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(reader, "_open", opened)
    return seen


@pytest.mark.usefixtures("small_batches")
def test_windows_read_the_json_once_and_each_record_about_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = kineto_order(tmp_path / "r.json")
    one = rank_ops(read_rank_file(f, PAT))
    seen = _passes(monkeypatch)
    opens = _opens(monkeypatch)
    counts = _read_back(monkeypatch)
    spills: list[windowed._Spill] = []
    real_done = windowed._Spill.done

    def done(self: windowed._Spill) -> None:
        real_done(self)
        spills.append(self)

    monkeypatch.setattr(windowed._Spill, "done", done)
    win = windowed.read_rank_ops(f, PAT, budget=1)
    assert _same(one, win) == []
    windows = len(seen) - 1
    assert windows >= STEPS - 2 and "one pass" not in seen, seen
    assert opens == [f]  # one pass over the JSON (before: one more per window)
    (spill,) = spills
    n_records = spill.n_rt + spill.n_k
    assert n_records == 2 * 5 * STEPS and spill.table.shape[0] > 2 * STEPS
    # each window reads its own batches and at most one more per edge and file
    biggest = int(np.max(np.r_[spill.table[:, 1] - spill.table[:, 0],
                               spill.table[:, 3] - spill.table[:, 2]]))
    assert len(counts) == windows
    assert n_records <= sum(counts) <= n_records + 4 * windows * biggest, counts


@pytest.mark.usefixtures("small_batches")
def test_a_step_spread_over_the_file_reads_the_same_ops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = shuffled(tmp_path / "r.json")
    one = rank_ops(read_rank_file(f, PAT))
    seen = _passes(monkeypatch)
    counts = _read_back(monkeypatch)
    win = windowed.read_rank_ops(f, PAT, budget=1)
    assert _same(one, win) == []
    assert len(seen) - 1 >= STEPS - 2 and "one pass" not in seen, seen
    # most batches hold launches or kernels of most steps: the windows read them again,
    # a block at a time (a window holds its own records and one block)
    assert sum(counts) > 3 * 2 * 5 * STEPS


@pytest.mark.usefixtures("small_batches")
def test_blocks_smaller_than_a_window_read_the_same_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = shuffled(tmp_path / "r.json")
    one = rank_ops(read_rank_file(f, PAT))
    monkeypatch.setattr(windowed, "BLOCK_ROWS", 3)
    assert _same(one, windowed.read_rank_ops(f, PAT, budget=1)) == []


@pytest.mark.usefixtures("small_batches")
def test_a_bad_kernel_is_the_one_pass_error(tmp_path: Path) -> None:
    ev = _events()
    bad = [i for i, x in enumerate(ev) if x.get("cat") == "kernel"][7]
    ev[bad]["dur"] = "long"
    f = _write(tmp_path / "r.json", ev)
    with pytest.raises(InputError) as one:
        read_rank_file(f, PAT)
    with pytest.raises(InputError) as win:
        windowed.read_rank_ops(f, PAT, budget=1)
    assert str(win.value) == str(one.value) and f"traceEvents[{bad}]" in str(one.value)


@pytest.mark.parametrize("why", ["no folder", "disk full"])
def test_no_room_for_the_spill_exits_2_with_one_line(
        why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ranks"
    folder.mkdir()
    kineto_order(folder / "rank-0.json")
    (tmp_path / "job.yaml").write_text("dp_size: 1\npp_size: 1\nworld_size: 1\n")
    monkeypatch.setenv(windowed.ENV, "1")
    if why == "no folder":
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    else:
        def full(*args: Any) -> None:
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(windowed._Spill, "add", full)
    code = main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                 "--out", str(tmp_path / "out"), "--jobs", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "rank-0.json" in err[0] and "TMPDIR" in err[0], err
    assert "cannot read the trace" not in err[0], err


@pytest.mark.parametrize("case", ["copy tied past an edge", "all-to-all into the next step"])
def test_the_one_pass_fallback_reads_the_spill_not_the_json(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.kineto.test_windowed_links import a2a_file, copy_file

    f = (copy_file(tmp_path / "r.json", crossing=True, decoy=True) if case.startswith("copy")
         else a2a_file(tmp_path / "r.json", steps=6, long=True))
    one = rank_ops(read_rank_file(f, PAT))
    seen = _passes(monkeypatch)
    opens = _opens(monkeypatch)
    assert _same(one, windowed.read_rank_ops(f, PAT, budget=1)) == []
    assert "one pass" in seen and opens == [f]  # (before: parsed again)


def test_copies_launches_are_exact_past_the_sample(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP over gloo with CUDA tensors (the copies tied across steps decide the edges): with
    a sample of 2 launches the copies' own launches still come from the spill, exact: the
    same windows (a window per step) and the one-pass ops (before: the sample's bounds made
    every edge unsafe, and the file was read in one pass)."""
    from tests.kineto.test_gloo_cuda import rank_events
    from tests.kineto.test_windowed_links import _write as write_links

    monkeypatch.setattr(windowed, "SAMPLE", 2)
    f = write_links(tmp_path / "r1.json", rank_events(1, pool=2, item=True), 1)
    one = rank_ops(read_rank_file(f, PAT))
    seen = _passes(monkeypatch)
    assert _same(one, windowed.read_rank_ops(f, PAT, budget=1)) == []
    assert "one pass" not in seen and len(seen) - 1 == 3, seen


@pytest.mark.parametrize("case", ["cpu only", "real mtia"])
def test_a_file_without_kernels_is_parsed_as_in_one_pass(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """A file without GPU kernels cannot be read in windows: its events are the pass's,
    read back from the spill, its CPU ops (compute timed by CPU ranges with calls inside
    them) read by the same second pass as in one pass: the JSON opened as often as by one
    pass (before: once more, the whole file parsed again)."""
    if case == "cpu only":
        from tests.kineto.test_comm_in_compute import cpu_rank_events, write_job

        request.getfixturevalue("small_batches")
        folder = tmp_path / "job"
        write_job(folder, lambda rank: cpu_rank_events(rank, "gloo"))
        f = folder / "rank-0.json"
    else:
        from tests.kineto.test_windowed import REAL

        f = REAL / "kineto-more" / "C_hta_mtia_w1" / "mtia_rank_0.json.gz"
        if not f.is_file():
            pytest.skip(f"{f}: the real traces are not here")
    opens = _opens(monkeypatch)
    one = rank_ops(read_rank_file(f, PAT))
    one_pass = list(opens)
    assert one_pass == [f] * (2 if case == "cpu only" else 1)
    opens.clear()
    seen = _passes(monkeypatch)
    assert _same(one, windowed.read_rank_ops(f, PAT, budget=1)) == []
    assert "one pass" in seen and opens == one_pass, (seen, opens)
