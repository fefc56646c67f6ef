"""Files read in windows of whole steps (:mod:`stragglers.kineto.windowed`) with the two
rules of :func:`~stragglers.kineto.rankops.rank_ops` that look across a step's edge (issue 32
item 2): a device-to-host copy tied to the next copy of its stream launched inside a call
(:func:`~stragglers.kineto.rankops._copies_of_calls`), here in the next step; and the
all-to-all time taken out of every compute op through running sums of the cover
(:func:`~stragglers.kineto.rankops._compute_time`), carried from window to window.

Hand-built traces (the events of ``test_gloo_cuda`` and ``test_all_to_all_import``); the
one-pass ops are the truth, compared array for array (bytes), and the known times of the
tied call are checked from the hand-built numbers. Where the windows could not give the
one-pass ops (a copy tied past the window edge chosen, all-to-all kernels overlapping the
next window's compute on the GPU) the file is read in one pass: the same ops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stragglers.kineto import load_patterns, windowed
from stragglers.kineto.rankops import RankOps, _compute_time, rank_ops
from stragglers.kineto.reader import read_rank_file
from tests.kineto.test_all_to_all_import import A2A_KERNEL, AUTOGRAD, MAIN, Events
from tests.kineto.test_gloo_cuda import GLOO, copy, rank_events
from tests.kineto.test_windowed import _budget, _passes, _same

PAT = load_patterns(None)
STEP = 10_000.0
T0 = 1_000_000.0


def _write(path: Path, events: list[dict[str, Any]], rank: int = 0) -> Path:
    doc = {"schemaVersion": 1, "traceEvents": events,
           "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}
    path.write_text(json.dumps(doc))
    return path


def _both(f: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RankOps, RankOps, list[Any]]:
    """The one-pass ops, the ops read with a budget of 1 byte, and the passes of that read
    over the windows (then ``"one pass"`` if the windows were not used)."""
    one = rank_ops(read_rank_file(f, PAT))
    seen = _passes(monkeypatch)
    return one, windowed.read_rank_ops(f, PAT, budget=1), seen


def _windowed(seen: list[Any]) -> int:
    """The windows of a read (0: one pass)."""
    return 0 if "one pass" in seen else len(seen) - 1


def _forward(e: Events, o: float) -> None:
    e.cpu("user_annotation", "## forward ##", o + 1, 10)
    e.kernel("gemm", o + 2, o + 100, o + 300)


def copy_file(path: Path, crossing: bool, decoy: bool = False) -> Path:
    """Four steps of compute; a ``gloo:all_reduce`` (no NCCL kernel) on a worker thread in
    step 2 copying its result back (``HtoD``, launched inside it, stream 60). ``crossing``:
    its input is copied to the host (``DtoH``, stream 60) by a launch at the end of step 1,
    outside every call (tied to the call in the next step), running on the GPU at
    ``T0 + 2 STEP + 100``-``+ 200``, after the call opened; else that copy is launched in
    step 2. ``decoy``: a copy back (``HtoD``, stream 60) launched in step 1 by the main
    thread while a ``gloo:barrier`` runs on a second worker thread (not that call's: another
    thread), between the two on the GPU (a copy that might have been a call's, not tied)."""
    e = Events()
    for i, tid in enumerate(GLOO):
        e.events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid,
                         "args": {"name": f"pt_gloo_runloop{i}"}})
    o2 = T0 + 2 * STEP
    for step in range(4):  # (launched in time order: the correlation ids grow with it)
        o = T0 + STEP * step
        e.cpu("user_annotation", f"ProfilerStep#{step}", o, STEP - 100)
        _forward(e, o)
        if step == 1 and decoy:
            e.cpu("user_annotation", "gloo:barrier", o + 20, 20, GLOO[1])
            copy(e, "HtoD", o + 30, o2 + 210, MAIN, 60)
        if step == 1 and crossing:
            copy(e, "DtoH", o2 - 200, o2 + 100, AUTOGRAD, 60)
        if step == 2:
            if not crossing:
                copy(e, "DtoH", o2 + 20, o2 + 100, AUTOGRAD, 60)
            e.cpu("user_annotation", "gloo:all_reduce", o2 + 30, 3000, GLOO[0])
            copy(e, "HtoD", o2 + 2500, o2 + 2600, GLOO[0], 60)
    return _write(path, e.events)


@pytest.mark.parametrize("crossing", [True, False])
def test_a_copy_tied_to_a_call_in_the_next_step_reads_in_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crossing: bool) -> None:
    f = copy_file(tmp_path / "r.json", crossing)
    one, win, seen = _both(f, monkeypatch)
    assert _same(one, win) == []
    # (before: one pass, copies) a window per step, but the copy's step and the next
    # together when it is tied across their edge
    assert _windowed(seen) == (3 if crossing else 4)
    # the known answer: the call arrives when its copy to the host ends (T0 + 2 STEP + 200:
    # after it opened) and ends when its copy back ends (+ 2600 + COPY 100)
    assert one.copy_timed == 1
    call = np.flatnonzero(one.comm >= 0)
    assert call.size == 1
    o2 = T0 + 2 * STEP
    assert (one.start[call[0]], one.end[call[0]]) == (o2 + 200, o2 + 2700)


def test_a_copy_tied_past_a_window_edge_reads_in_one_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoy (launched while a call runs: it may be that call's) ends the copy's span
    the edges avoid, so the edge at step 2 is taken: the check of the windows' copies sees
    the copy and its call in two windows, and the file is read in one pass."""
    f = copy_file(tmp_path / "r.json", crossing=True, decoy=True)
    one, win, seen = _both(f, monkeypatch)
    assert _same(one, win) == [] and one.copy_timed == 1 and one.start.size == 6
    assert _windowed(seen) == 0 and len(seen) >= 3  # windows were read, then one pass
    # without the check, the windows' ops differ: the call timed by its copy back only
    monkeypatch.setattr(windowed._Copies, "check", lambda self: None)
    assert "start" in _same(one, windowed.read_rank_ops(f, PAT, budget=1))


def test_gloo_cuda_ranks_read_in_windows(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP over gloo with CUDA tensors (two streams reused every step, the loss copied to
    the host outside every call): a window per step, the one-pass ops."""
    for rank in range(2):
        f = _write(tmp_path / f"r{rank}.json", rank_events(rank, pool=2, item=True), rank)
        one, win, seen = _both(f, monkeypatch)
        assert _same(one, win) == [] and one.copy_timed == 6
        assert _windowed(seen) == 3


def a2a_file(path: Path, steps: int, long: bool = False) -> Path:
    """``steps`` steps of a forward cut by an all-to-all (as ``test_all_to_all_import``),
    with lengths in odd fractions of a microsecond. ``long``: each all-to-all kernel runs
    on into the next step's compute kernels (on the GPU)."""
    rng = np.random.default_rng(7)
    e = Events()
    for step in range(steps):
        o = T0 + STEP * step + 0.1 * step
        g = o
        a, b, c = (float(x) for x in 100 + np.cumsum(rng.uniform(100.0, 900.0, 3)) / 3)
        e.cpu("user_annotation", f"ProfilerStep#{step}", o, STEP - 100)
        e.cpu("user_annotation", "## forward ##", o + 1, 10)
        e.kernel("gemm_a", o + 2, g + 100.3, g + a)
        e.cpu("cpu_op", "record_param_comms", o + 5, 1, args={"Collective name": "all_to_all"})
        e.kernel(A2A_KERNEL, o + 5.5, g + a - 17.7, g + b + (STEP if long else 0.0),
                 stream=21)
        e.kernel("gemm_c", o + 7, g + b - 3.3, g + c)
        e.cpu("user_annotation", "## backward ##", o + 12, 5, tid=AUTOGRAD)
        e.kernel("gemm_bwd", o + 13, g + c, g + c + 1000.7, tid=AUTOGRAD)
    return _write(path, e.events)


def test_all_to_all_sums_carried_across_windows(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    f = a2a_file(tmp_path / "r.json", steps=12)
    one, win, seen = _both(f, monkeypatch)
    assert int(one.a2a_in_compute.sum()) == 12
    assert _same(one, win) == [] and _windowed(seen) == 12  # (before: one pass)


def test_compute_time_from_a_base_adds_as_one_pass() -> None:
    """The time of compute ops less a cover split in two (a window's cover after the
    earlier windows'): from the running sum of the first part (the base), bit for bit the
    time from the whole cover; from 0 (each window's sums restarted), not always (random
    covers over 4 decades: the sums rounded differently)."""
    rng = np.random.default_rng(3)
    restarted = 0
    for _ in range(200):
        cs = np.sort(rng.uniform(0, 1, 8) * 10.0 ** rng.integers(-1, 4, 8))
        ce = cs + rng.uniform(0, 1, 8) * np.r_[np.diff(cs), 1.0] * 0.9
        t = np.sort(rng.uniform(ce[3], cs[-1] + 5, 6))  # the ops of the second window
        owner = np.r_[np.arange(3), np.arange(3)]
        ks = np.r_[t[::2], t[1::2]]
        whole = _compute_time(owner, ks, ks, 3, (cs, ce))
        base = float(np.cumsum(np.r_[0.0, ce[:4] - cs[:4]])[-1])
        split = _compute_time(owner, ks, ks, 3, (cs[4:], ce[4:]), base)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(whole, split, strict=True))
        zero = _compute_time(owner, ks, ks, 3, (cs[4:], ce[4:]))
        restarted += any(a.tobytes() != b.tobytes() for a, b in zip(whole, zero, strict=True))
    assert restarted > 20


def test_all_to_all_beside_the_next_window_reads_in_one_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = a2a_file(tmp_path / "r.json", steps=6, long=True)
    one, win, seen = _both(f, monkeypatch)
    assert _same(one, win) == [] and _windowed(seen) == 0 and len(seen) >= 3


def test_a_copy_in_a_file_without_calls_is_not_used(tmp_path: Path) -> None:
    """A copy to the host (``loss.item()``) in a file without any communication call: not
    used, counted (before: IndexError in the one-pass read)."""
    e = Events()
    e.cpu("user_annotation", "ProfilerStep#0", T0, 5000)
    _forward(e, T0)
    copy(e, "DtoH", T0 + 20, T0 + 400, MAIN, 7)
    ops = rank_ops(read_rank_file(_write(tmp_path / "r.json", e.events), PAT))
    assert (ops.start.tolist(), ops.end.tolist()) == ([T0 + 100], [T0 + 300])
    assert sum(n for what, n in ops.counts.items() if "gpu_memcpy" in what) == 1


@pytest.mark.parametrize("job", ["gloo-cuda", "all-to-all"])
def test_windows_give_the_same_parquet(job: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Two-rank jobs with copies (DDP over gloo with CUDA tensors) and with all-to-alls
    inside the forward (the DLRM-like job): ``import kineto`` gives the same
    trace.parquet, byte for byte, with a budget of 1 byte (read in windows)."""
    from stragglers.cli import main
    from tests.kineto.test_all_to_all_import import rank_file

    folder = tmp_path / "ranks"
    folder.mkdir()
    if job == "gloo-cuda":
        for rank in range(2):
            _write(folder / f"r{rank}.json", rank_events(rank, pool=2, item=True), rank)
    else:
        for rank, until in ((0, 600), (1, 2000)):
            rank_file(folder, rank, slow_until=until)
    (tmp_path / "job.yaml").write_text("dp_size: 2\npp_size: 1\nworld_size: 2\n")
    seen: list[Any] = []
    real = windowed._windowed

    def spy(*args: Any) -> RankOps:
        ops = real(*args)
        seen.append(args)  # read in windows (not the one pass after them)
        return ops

    monkeypatch.setattr(windowed, "_windowed", spy)
    out = {}
    for name, env in (("one", None), ("win", "1")):
        _budget(monkeypatch, env)
        assert main(["import", "kineto", str(folder), "--meta", str(tmp_path / "job.yaml"),
                     "--out", str(tmp_path / name), "--jobs", "1"]) == 0
        out[name] = capsys.readouterr().out.splitlines()[:-1]
    assert len(seen) == 2 and out["one"] == out["win"]
    assert (tmp_path / "one" / "trace.parquet").read_bytes() == \
        (tmp_path / "win" / "trace.parquet").read_bytes()
