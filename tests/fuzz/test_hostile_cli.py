"""Hostile inputs through the command line (issue 31), each in a fresh process with a time
limit and 1 GiB of memory (:mod:`tests.fuzz.hostile`): exit 2 and one line naming the
input, never a hang, a traceback or a crash. Every input is built at test time.

Named pipes, devices, sockets and symbolic-link loops in every role of an input file; tiny
files that stood for gigabytes (rank ids, a parquet dictionary value) or crashed the
interpreter (a tuple key 200,000 deep); values that were lost unsaid (a misspelt column, a
Megatron log with a long start-up read as JSON lines).
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stragglers.synth import SynthSpec, write_synth
from tests.fuzz.hostile import assert_refused, run_cli

pytestmark = pytest.mark.slow  # one fresh process per case


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("job")
    paths = write_synth(SynthSpec(dp=2, pp=2, microbatches=2, steps=2, seed=3,
                                  slow_workers=[(1, 0, 1.5)]), out / "job")
    return {"trace": Path(paths["trace"]), "meta": Path(paths["meta"]), "root": out}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path (a socket's path is limited to about 100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="h31-", dir="/tmp") as tmp:
        yield Path(tmp)


def _special(kind: str, folder: Path, name: str) -> Path:
    """A file of ``kind`` named ``name`` in ``folder``."""
    path = folder / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")  # the name carries the suffix the command looks at
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))  # left bound until the process ends: a socket file
        _SOCKETS.append(sock)
    elif kind == "loop":
        (folder / f"{name}.other").symlink_to(path)
        path.symlink_to(folder / f"{name}.other")
    return path


_SOCKETS: list[socket.socket] = []
_WHAT = {"fifo": "is a named pipe (FIFO)", "device": "is a character device",
         "socket": "is a socket", "loop": "a loop of symbolic links"}


def _argv(role: str, path: Path, job: dict[str, Path]) -> list[str]:
    if role == "meta":
        return ["analyze", str(job["trace"]), "--meta", str(path)]
    if role in ("trace.parquet", "trace.jsonl"):
        return ["analyze", str(path), "--meta", str(job["meta"])]
    if role == "fr-dump":
        return ["detect", "hang", "--flight-recorder", str(path)]
    if role == "times":
        return ["mitigate", "microbatch", "--times", f"@{path}", "--microbatches", "4"]
    if role == "megatron-json":
        return ["watch", str(path), "--format", "megatron-json", "--once"]
    raise AssertionError(role)


_NAMES = {"meta": "meta.yaml", "trace.parquet": "trace.parquet", "trace.jsonl": "trace.jsonl",
          "fr-dump": "_dump_0", "times": "times.txt", "megatron-json": "iter.json"}
CASES = ([("fifo", role) for role in _NAMES]
         + [(kind, role) for kind in ("device", "socket", "loop")
            for role in ("meta", "trace.jsonl", "fr-dump", "times")])


@pytest.mark.parametrize("kind, role", CASES)
def test_an_input_that_is_not_a_regular_file_is_refused(kind: str, role: str, job: dict[str, Path],
                                                        short_dir: Path) -> None:
    """Before: a named pipe hung every reader (waiting for a writer), /dev/zero read until
    memory ran out."""
    path = _special(kind, short_dir, _NAMES[role])
    run = run_cli(_argv(role, path, job), timeout=60)
    assert_refused(run, str(path), _WHAT[kind])


# -- tiny inputs that stood for gigabytes or crashed -------------------------------------------
def _dump(ranks: Any, entries: list[Any] | None = None) -> dict[str, Any]:
    return {"version": "2.9",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
            "pg_status": {}, "entries": entries or []}


def _entry() -> dict[str, Any]:
    return {"pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 1,
            "p2p_seq_id": 0, "profiling_name": "nccl:all_reduce", "state": "scheduled"}


def _deep_entry_dump() -> bytes:
    """A dump whose entries[0] is a list nested 200,000 deep (printing it in the error
    message ended in a RecursionError traceback)."""
    marker = pickle.dumps("MARK", protocol=2)[2:-3]
    blob = pickle.dumps(_dump("[0]", ["MARK"]), protocol=2)  # type: ignore[list-item]
    assert marker in blob
    return blob.replace(marker, b"(" * 200_000 + b"l" * 200_000)


def _holds_itself() -> bytes:
    entries: list[Any] = []
    entries.append(entries)
    return pickle.dumps({"pg_config": {}, "entries": entries}, protocol=2)


FR_CASES = {
    # 450 bytes that took 3.1 GB, then a traceback
    "ids-2e8": (lambda: pickle.dumps(_dump("[0, 200000000]"), protocol=2),
                "rank id 200,000,000 is beyond the limit of 16,384 ranks"),
    "ids-1e30": (lambda: pickle.dumps(_dump([0, 10**30]), protocol=2),
                 "rank id 1,000,000,000,000,000,000,000,000,000,000 is beyond"),
    "ids-3e9": (lambda: pickle.dumps(_dump([0, 3 * 10**9], [_entry()]), protocol=4),
                "rank id 3,000,000,000 is beyond"),
    "deep-entry": (_deep_entry_dump, "a value nested deeper than 64 levels"),
    # a dict key that is a tuple nested 200,000 deep: hashing it crashed the interpreter
    "deep-tuple-key": (lambda: b"\x80\x02}K\x01" + b"\x85" * 200_000 + b"K\x02s.",
                       "byte 69: a value nested deeper than 64 levels"),
    # 60 tuples, each of two copies of the one before: hashing the key visits 2^60 values
    "shared-tuple-key": (
        lambda: b"\x80\x02}K\x01K\x01\x86q\x00" + b"".join(
            b"h" + bytes([k - 1]) + b"h" + bytes([k - 1]) + b"\x86q" + bytes([k])
            for k in range(1, 60)) + b"K\x02s.",
        "stands for more than 100,000 values"),
    "holds-itself": (_holds_itself, "a container that holds itself"),
}


@pytest.mark.parametrize("case", list(FR_CASES))
def test_hostile_flight_recorder_dumps(case: str, tmp_path: Path) -> None:
    make, message = FR_CASES[case]
    folder = tmp_path / "fr"
    folder.mkdir()
    (folder / "_dump_0").write_bytes(make())
    run = run_cli(["detect", "hang", "--flight-recorder", str(folder)], timeout=120)
    assert_refused(run, "_dump_0", message)


def test_a_parquet_dictionary_value_is_bounded_before_it_is_read(job: dict[str, Path],
                                                                 tmp_path: Path) -> None:
    """A few-KB file holding one 20 MB optype value used by every row: it was cast row by
    row (rows x 20 MB), now the footer's uncompressed size is checked first."""
    table = pq.read_table(job["trace"])
    i = table.column_names.index("optype")
    big = "forward-compute" + "x" * (20 << 20)
    opt = pa.DictionaryArray.from_arrays(pa.array([0] * table.num_rows, pa.int32()),
                                         pa.array([big]))
    path = tmp_path / "t.parquet"
    pq.write_table(table.set_column(i, "optype", opt), path, compression="zstd")
    assert path.stat().st_size < 100_000
    run = run_cli(["analyze", str(path), "--meta", str(job["meta"])])
    assert_refused(run, "t.parquet: column 'optype' takes 20,971,", "STRAGGLERS_MAX_TRACE_STRING")


@pytest.mark.parametrize("text", ["labels: {x: &a [*a ]}\n", "labels: &a {x: *a}\n"])
def test_a_recursive_yaml_alias_is_refused(job: dict[str, Path], tmp_path: Path,
                                           text: str) -> None:
    """Before: counting the values of ``&a [*a]`` never ended (a hang)."""
    path = tmp_path / "meta.yaml"
    path.write_text("dp_size: 2\npp_size: 2\n" + text)
    run = run_cli(["analyze", str(job["trace"]), "--meta", str(path)], timeout=60)
    assert_refused(run, "meta.yaml: line 3: an alias refers to a collection that holds it")


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_misspelt_column_is_refused_not_ignored(job: dict[str, Path], tmp_path: Path,
                                                  fmt: str) -> None:
    table = pq.read_table(job["trace"])
    table = table.append_column("gc_S", pa.array([0.001] * table.num_rows))
    path = tmp_path / f"t.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    else:
        rows = table.cast(pa.schema([pa.field(n, pa.string() if n == "optype" else t)
                                     for n, t in zip(table.column_names, table.schema.types,
                                                     strict=True)])).to_pylist()
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = run_cli(["analyze", str(path), "--meta", str(job["meta"])])
    where = "t.parquet: unknown column" if fmt == "parquet" else "t.jsonl:1: unknown field"
    assert_refused(run, where, "'gc_S' (did you mean 'gc_s'?)")


def test_a_deep_iteration_time_document_is_a_counted_bad_record(tmp_path: Path) -> None:
    """Before: a value nested 300 deep ended in a TypeError traceback (orjson's recursion
    limit while printing it)."""
    path = tmp_path / "iter.json"
    path.write_text('{"values": {"1": 2.0, "2": ' + "[" * 300 + "]" * 300 + "}}")
    run = run_cli(["watch", str(path), "--format", "megatron-json", "--once"])
    assert run.code == 0 and "Traceback" not in run.stderr, run.explain()
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["event"] == "summary" and summary["records"] == 0
    assert summary["dropped"] == {"not_json": 1}


def test_a_megatron_log_with_a_long_start_up_is_read_as_a_log(tmp_path: Path) -> None:
    """Its first 64 KiB hold no iteration line: it was read as JSON lines (every line
    `not_json`, no onset); now as a Megatron log, with the slowdown from iteration 800."""
    lines = [f"[2025-01-10 07:00:00] building GPT model: layer {i} of the network"
             for i in range(1200)]
    for it in range(1, 1601):
        ms = 1000.0 if it < 800 else 1500.0
        lines.append(f" [2025-01-10 07:{(it // 60) % 60:02d}:{it % 60:02d}] iteration "
                     f"{it:8d}/  500000 | consumed samples: {it * 512} | elapsed time per "
                     f"iteration (ms): {ms:.1f} | learning rate: 1.0E-04 | lm loss: 2.0 |")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    assert b"iteration " not in path.read_bytes()[: 1 << 16]
    run = run_cli(["watch", str(path), "--once"])
    assert run.code == 0, run.explain()
    events = [json.loads(line) for line in run.stdout.splitlines()]
    summary = events[-1]
    assert summary["records"] == 1600 and summary["ignored"] == {"text": 1200}
    assert summary["dropped"] == {}
    onsets = [e for e in events if e["event"] == "onset"]
    assert onsets and 800 <= onsets[0]["job_iteration"] <= 820
