"""The reader's column-by-column path for CUDA launches and compute kernels
(``_Reader.columns``, fed the categories the byte scan read) keeps what the event-by-event
path (``_Reader.event``, the truth here: the columns path turned off) keeps, in the same
order, and hands the batch back to it whenever a launch or a kernel is out of the ordinary,
so that a refusal names the same event and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stragglers.errors import InputError
from stragglers.kineto import jsonstream, load_patterns, reader
from tests.kineto.hostile import document, write


def _rt(corr: Any, ts: Any = 10.5, tid: Any = 1, cat: str = "cuda_runtime") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": "cudaLaunchKernel", "pid": 1, "tid": tid,
            "ts": ts, "dur": 1.0, "args": {"correlation": corr, "External id": 3}}


def _k(corr: Any, ts: Any = 20.25, dur: Any = 3.5, name: Any = "gemm",
       args: Any = None) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts,
            "dur": dur, "args": {"correlation": corr, "stream": 7} if args is None else args}


def _nccl(corr: int, ts: float, desc: str) -> dict[str, Any]:
    return _k(corr, ts, 2.0, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
              {"correlation": corr, "Collective name": "allreduce",
               "Process Group Description": desc, "Group size": 2})


def _rpc(ts: float, desc: str) -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
            "ts": ts, "dur": 4.0, "args": {"Collective name": "allreduce",
                                            "Process Group Description": desc,
                                            "Group size": 2, "Seq": 1}}


def _mixed(k: int = 0) -> list[Any]:
    """Launches (a driver call, one without a correlation id, int and float times), compute
    and NCCL kernels (groups numbered in file order, with the calls) interleaved with calls
    of three groups, a copy, annotations, metadata, an instant kernel event, a kernel whose
    "cat" is escaped in the bytes, and events of skipped categories."""
    o = 1000 * k
    return [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1,
         "ts": o + 90.0, "dur": 900.0, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "forward-compute mb=0", "pid": 1,
         "tid": 1, "ts": o + 95.0, "dur": 50.0, "args": {}},
        _rt(o + 1, o + 100), _k(o + 1, o + 200.125), _rpc(o + 101.0, "pg-b"),
        _nccl(o + 2, o + 210.0, "pg-a"), _rt(o + 2, o + 102.5, 2, "cuda_driver"),
        _k(o + 2, o + 211, 4), _rt(None), _k(o + 5, args={}),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned)", "pid": 0,
         "tid": 7, "ts": o + 300.0, "dur": 2.0, "args": {"correlation": 9, "stream": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": o + 99.0,
         "dur": 1.0, "args": {"Input Dims": [[2, 3]]}},
        _nccl(o + 7, o + 400.0, "pg-c"), _rpc(o + 103.0, "pg-a"), _k(o + 8, o + 401.5, 0),
        _rt(o + 8, o + 104.75, 3),
        {"ph": "i", "cat": "kernel", "name": "x", "ts": 1.0, "tid": 7, "pid": 0},
        {"ph": "X", "cat": "python_function", "name": "f", "ts": 1.0, "dur": 1.0},
        {"ph": "s", "id": o + 2, "pid": 1, "tid": 1, "ts": o + 100.0, "cat": "ac2g",
         "name": "ac2g"},
        b'{"ph": "X", "cat": "ker\\u006eel", "name": "gemm", "pid": 0, "tid": 7, '
        + f'"ts": {o + 500.5}, "dur": 2.0, "args": {{"correlation": {o + 9}}}}}'.encode(),
    ]


def _doc(evs: list[Any]) -> bytes:
    """A rank file of these events, in Kineto's layout (an event over a few lines)."""
    parts = [e if isinstance(e, bytes) else json.dumps(e, indent=2).encode() for e in evs]
    return document([b"\n  " + p.replace(b"\n", b"\n  ") for p in parts])


def _arrays(ev: reader.RankEvents) -> dict[str, Any]:
    out: dict[str, Any] = {k: (v.dtype.str, v.tobytes()) for k, v in vars(ev).items()
                           if isinstance(v, np.ndarray)}
    out |= {"groups": ev.groups, "ignored": list(ev.ignored.items()),
            "threads": ev.threads, "unmatched": list(ev.names_unmatched.items()),
            "n": ev.n_events}
    return out


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, columns: bool) -> reader.RankEvents:
    with monkeypatch.context() as m:
        used: list[bool] = []
        columns_of = reader._Reader.columns

        def spy(self: reader._Reader, batch: jsonstream.Batch) -> list[int] | None:
            out = columns_of(self, batch) if columns else None
            used.append(out is not None)
            return out

        m.setattr(reader._Reader, "columns", spy)
        ev = reader.read_rank_file(path, load_patterns(None))
    assert any(used) == columns  # the column path was taken (or not) as asked
    return ev


@pytest.mark.parametrize("parse_bytes", [1 << 20, 700, 1])
def test_same_columns_as_event_by_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        parse_bytes: int) -> None:
    """Batches of all events, of a few and of one (``PARSE_BYTES``): the same arrays,
    groups and counters as the event-by-event read."""
    monkeypatch.setattr(jsonstream, "PARSE_BYTES", parse_bytes)
    path = write(tmp_path, _doc([e for k in range(4) for e in _mixed(k)])) / "rank-0.json"
    truth = _read(path, monkeypatch, columns=False)
    got = _read(path, monkeypatch, columns=True)
    assert _arrays(got) == _arrays(truth)
    assert got.k_kind.tolist().count(-1) == 5 * 4 and len(got.groups) == 3
    assert got.rt_corr.tolist() == [c + 1000 * k for k in range(4) for c in (1, 2, 8)]
    assert got.ignored["cuda_runtime"] == 4 and got.ignored["ac2g"] == 4


BAD = [
    (_rt(True), "args.correlation"), (_rt(1.0), "args.correlation"),
    (_rt(3, tid="1"), "tid"), (_rt(3, ts=True), "ts"), (_rt(3, ts="1"), "ts"),
    (_rt(3, ts=1e17), "ts"), (_rt(2**64), "args.correlation"), (_k(True), "args.correlation"),
    (_k(3, args=[1]), "args"), (_k(3, name=5), "name"), (_k(3, dur=-1.0), "dur"),
    (_k(3, dur=None), "dur"), (_k(3, ts="1"), "ts"), (_k(2**70), "args.correlation"),
    (_k(3, dur=1e12), "dur"),
]


@pytest.mark.parametrize(("bad", "field"), BAD)
def test_a_bad_launch_or_kernel_is_refused_as_event_by_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: Any, field: str) -> None:
    """The batch goes back to the event-by-event path, which names the first bad event and
    its field: the same message either way."""
    evs = [*_mixed(), bad, *_mixed(1)]
    path = write(tmp_path, _doc(evs)) / "rank-0.json"
    messages = []
    for columns in (False, True):
        with pytest.raises(InputError, match=rf"traceEvents\[{len(_mixed())}\]") as err:
            if columns:
                reader.read_rank_file(path, load_patterns(None))
            else:
                _read(path, monkeypatch, columns=False)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and f"'{field}'" in messages[0]


@pytest.mark.parametrize("value", [2**53 + 1, 2**60])
def test_integer_times_beyond_2_52_read_event_by_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: int) -> None:
    """Integer times whose floats (or sums) could round otherwise than Python's: the batch
    is read event by event, the same arrays."""
    monkeypatch.setenv("STRAGGLERS_MAX_TIMESTAMP_SECONDS", str(10**13))
    evs = [*_mixed(), _k(3, ts=value, dur=3), _rt(3, ts=value)]
    path = write(tmp_path, _doc(evs)) / "rank-0.json"
    truth = _read(path, monkeypatch, columns=False)
    got = reader.read_rank_file(path, load_patterns(None))
    assert _arrays(got) == _arrays(truth)
    assert got.k_end[-1] == float(value + 3)
