"""Hostile inputs of issue 31 beyond the cases the issue lists: other entry points and other
formats, table-driven, every input built at test time.

Each case runs in the fuzz worker process (:mod:`tests.fuzz.worker`: ``stragglers`` called
in-process, its address space capped, a hung call killed after ``HANG_S``) and must keep the
contract: exit 2 with one line ``stragglers ...: error: ...`` naming the input (and the field
or line where there is one), no traceback, bounded memory, no hang.

Classes: non-regular files (named pipe, /dev/zero, /dev/urandom, socket, broken symbolic
link, folder) for every file argument of ``detect``, ``mitigate``, ``diff``, ``timeline``,
``watch``; damaged or hostile values (deep nesting, duplicate keys, NaN and infinities,
byte-order marks, NUL and lone surrogates, overlong UTF-8) in the JSON-lines records, the
metadata YAML and the ``--lengths`` / ``--times`` files.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stragglers.synth import SynthSpec, write_synth
from tests.fuzz.harness import CliWorker, Outcome

pytestmark = pytest.mark.slow  # one worker process for the module, ~0.1-1 s a case

#: Seconds before a call is taken as hung (a blocked open of a named pipe never returns).
HANG_S = 30.0


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("job")
    paths = write_synth(SynthSpec(dp=2, pp=2, microbatches=2, steps=2, seed=3,
                                  slow_workers=[(1, 0, 1.5)]), out / "job")
    return {"trace": Path(paths["trace"]), "meta": Path(paths["meta"]), "root": out}


@pytest.fixture(scope="module")
def short_dir() -> Iterator[Path]:
    """A folder with a short path (a socket's path is limited to about 100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="h31e-", dir="/tmp") as tmp:
        yield Path(tmp)


_SOCKETS: list[socket.socket] = []


def _special(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind in ("zero", "urandom"):
        path.symlink_to(f"/dev/{kind}")
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        _SOCKETS.append(sock)
    elif kind == "broken-link":
        path.symlink_to(path.parent / f"{path.name}.missing")
    elif kind == "folder":
        path.mkdir()
    else:
        raise AssertionError(kind)


#: What the one line must say of each kind of file.
_SAYS = {"fifo": "named pipe", "zero": "character device", "urandom": "character device",
         "socket": "socket", "broken-link": "not found", "folder": "folder"}

#: role -> (file name, argv of the command given the hostile path and the job)
ROLES: dict[str, tuple[str, Callable[[Path, dict[str, Path]], list[str]]]] = {
    "detect-period": ("calls.jsonl", lambda p, j: ["detect", "period", str(p)]),
    "detect-matrix": ("msgs.jsonl", lambda p, j: ["detect", "matrix", str(p)]),
    "mitigate-plan-events": ("events.jsonl", lambda p, j: [
        "mitigate", "plan", "--meta", str(j["meta"]), str(p)]),
    "mitigate-plan-meta": ("meta.yaml", lambda p, j: [
        "mitigate", "plan", "--meta", str(p), str(j["root"] / "events.jsonl")]),
    "fit-cost-lengths": ("lengths.jsonl", lambda p, j: [
        "mitigate", "fit-cost", "--lengths", str(p), str(j["trace"])]),
    "rebalance-lengths": ("lengths.txt", lambda p, j: [
        "mitigate", "rebalance", "--lengths", f"@{p}", "--model", "1,1,0", "--dp", "2",
        "--microbatches", "2"]),
    "predict-trace": ("trace.parquet", lambda p, j: [
        "mitigate", "predict", str(p), "--meta", str(j["meta"])]),
    "topology-meta": ("meta.yaml", lambda p, j: [
        "mitigate", "topology", "--meta", str(p), "--slow-ranks", "1"]),
    "timeline-trace": ("trace.jsonl", lambda p, j: [
        "timeline", str(p), "--meta", str(j["meta"]), "--out", str(j["root"] / "tl")]),
    "diff-a": ("trace.parquet", lambda p, j: [
        "diff", str(p), str(j["trace"]), "--meta", str(j["meta"])]),
    "watch-jsonl": ("records.jsonl", lambda p, j: ["watch", str(p), "--format", "jsonl",
                                                   "--once"]),
    "watch-log": ("train.log", lambda p, j: ["watch", str(p), "--format", "megatron-log",
                                             "--once"]),
}
KINDS = ["fifo", "zero", "urandom", "socket", "broken-link"]


def check_refused(out: Outcome, *needles: str) -> str:
    what = " ".join(out.argv)
    assert out.crashed is None, f"{what}: {out.crashed}"
    assert out.traceback is None, f"{what}: traceback\n{out.traceback}"
    assert out.code == 2, f"{what}: exit {out.code}\n{out.stderr}\n{out.stdout[-500:]}"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, f"{what}: {len(lines)} lines on stderr:\n{out.stderr}"
    assert lines[0].startswith("stragglers ") and ": error: " in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], f"{what}: {needle!r} not in: {lines[0]}"
    if out.peak_mib is not None:
        assert out.peak_mib < 1024, f"{what}: peak {out.peak_mib:.0f} MiB"
    return lines[0]


@pytest.fixture(scope="module")
def events_file(job: dict[str, Path]) -> Path:
    path = job["root"] / "events.jsonl"
    path.write_text(json.dumps({"event": "summary"}) + "\n")
    return path


@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.parametrize("kind", KINDS)
def test_a_file_argument_that_is_not_a_regular_file(cli: CliWorker, job: dict[str, Path],
                                                    events_file: Path, short_dir: Path,
                                                    role: str, kind: str) -> None:
    name, argv = ROLES[role]
    folder = short_dir / f"{role}-{kind}"
    folder.mkdir()
    path = folder / name
    _special(kind, path)
    out = cli.run(argv(path, job), timeout=HANG_S)
    says = "no such file" if kind == "broken-link" and role.startswith("watch") else _SAYS[kind]
    check_refused(out, str(path), says)


# -- hostile values in the records of detect and watch ----------------------------------------
def _calls(extra: str = "", line: int = 3) -> str:
    rows = [json.dumps({"rank": r, "type": "allreduce", "size": 8, "ts": i * 1.0 + r * 0.01,
                        "duration": 0.1}) for i in range(20) for r in range(2)]
    if extra:
        rows.insert(line - 1, extra)
    return "\n".join(rows) + "\n"


CALL = '{"rank": 0, "type": "allreduce", "size": 8, "ts": 9.5, "duration": 0.1'
RECORD_CASES: dict[str, tuple[bytes, tuple[str, ...]]] = {
    # a key given twice: the last one was taken silently
    "duplicate-key": (_calls(CALL + ', "rank": 1}').encode(), ("calls.jsonl:3", "'rank'",
                                                                 "twice")),
    "nan": (_calls(CALL.replace("9.5", "NaN") + "}").encode(), ("calls.jsonl:3",)),
    "infinity": (_calls(CALL.replace("9.5", "1e400") + "}").encode(), ("calls.jsonl:3",)),
    "negative-duration": (_calls(CALL.replace("0.1", "-0.1") + "}").encode(),
                          ("calls.jsonl:3", "'duration'")),
    "deep": (_calls('{"rank": 0, "x": ' + "[" * 5000 + "]" * 5000 + "}").encode(),
             ("calls.jsonl:3",)),
    "lone-surrogate": (_calls(CALL + ', "group": "\\ud800"}').encode(), ("calls.jsonl:3",)),
    "nul-type": (_calls(CALL.replace('"allreduce"', '"all\\u0000reduce"') + "}").encode(),
                 ("calls.jsonl:3", "'type'")),
    "overlong-utf8": (_calls(CALL.replace('"allreduce"', '"all\xc0\xafreduce"') + "}"
                             ).encode("latin-1"), ("calls.jsonl:3", "UTF-8")),
    "bom": (b"\xef\xbb\xbf" + _calls().encode(), ("calls.jsonl:1",)),
    "rank-2^40": (_calls(CALL.replace('"rank": 0', '"rank": 1099511627776') + "}").encode(),
                  ("calls.jsonl:3", "'rank'")),
}


@pytest.mark.parametrize("case", list(RECORD_CASES))
def test_hostile_call_records(cli: CliWorker, tmp_path: Path, case: str) -> None:
    data, needles = RECORD_CASES[case]
    path = tmp_path / "calls.jsonl"
    path.write_bytes(data)
    check_refused(cli.run(["detect", "period", str(path)], timeout=HANG_S), *needles)


# -- hostile metadata -----------------------------------------------------------------------
META_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    # YAML takes the last of two equal keys: a silent change
    "duplicate-key": ("dp_size: 2\npp_size: 2\ndp_size: 4\n", ("meta.yaml", "dp_size",
                                                               "twice")),
    "nan-size": ("dp_size: .nan\npp_size: 2\n", ("meta.yaml", "dp_size")),
    "inf-size": ("dp_size: .inf\npp_size: 2\n", ("meta.yaml", "dp_size")),
    "negative-size": ("dp_size: -2\npp_size: 2\n", ("meta.yaml", "dp_size")),
    "huge-size": ("dp_size: 100000000000\npp_size: 2\n", ("meta.yaml",)),
    "nul": ("dp_size: 2\npp_size: 2\nlabels: {a: \"x\\0y\"}\n", ("meta.yaml",)),
    "lone-surrogate": ("dp_size: 2\npp_size: 2\nlabels: {a: \"\\ud800\"}\n", ("meta.yaml",)),
}


@pytest.mark.parametrize("case", list(META_CASES))
def test_hostile_metadata(cli: CliWorker, job: dict[str, Path], tmp_path: Path,
                          case: str) -> None:
    text, needles = META_CASES[case]
    meta = tmp_path / "meta.yaml"
    base = job["meta"].read_text()
    keep = "".join(ln + "\n" for ln in base.splitlines()
                   if not ln.startswith(("dp_size", "pp_size", "labels")))
    meta.write_text(keep + text)
    check_refused(cli.run(["analyze", str(job["trace"]), "--meta", str(meta), "--out",
                           str(tmp_path / "o"), "--no-timelines"], timeout=HANG_S), *needles)


# -- hostile lists of numbers ---------------------------------------------------------------
LIST_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "nan": ("100\nnan\n200\n", ("lengths.txt",)),
    "inf": ("100\ninf\n200\n", ("lengths.txt",)),
    "negative": ("100\n-5\n200\n", ("lengths.txt",)),
    "nul": ("100\n2\x0000\n", ("lengths.txt",)),
    "bom": ("\ufeff100\n200\n300\n400\n", ("lengths.txt",)),
    "huge": ("1" + "0" * 400 + "\n200\n", ("lengths.txt",)),
}


@pytest.mark.parametrize("case", list(LIST_CASES))
def test_hostile_lengths_files(cli: CliWorker, tmp_path: Path, case: str) -> None:
    text, needles = LIST_CASES[case]
    path = tmp_path / "lengths.txt"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    out = cli.run(["mitigate", "rebalance", "--lengths", f"@{path}", "--model", "1,1,0",
                   "--dp", "2", "--microbatches", "2"], timeout=HANG_S)
    if case == "bom" and out.code == 0:
        return  # a byte-order mark read as such: the four lengths are there
    check_refused(out, *needles)


@pytest.mark.parametrize("case", list(LIST_CASES))
def test_hostile_times_files(cli: CliWorker, tmp_path: Path, case: str) -> None:
    text, needles = LIST_CASES[case]
    path = tmp_path / "lengths.txt"
    path.write_text(text.replace("100\n", "1.0\n").replace("200\n", "1.2\n"),
                    encoding="utf-8", errors="surrogatepass")
    out = cli.run(["mitigate", "microbatch", "--times", f"@{path}", "--microbatches", "4"],
                  timeout=HANG_S)
    if case == "bom" and out.code == 0:
        return
    check_refused(out, *needles)


# -- hostile lines of a JSON-lines trace -----------------------------------------------------
def _trace_line(job: dict[str, Path]) -> dict[str, object]:
    import pyarrow.parquet as pq

    row: dict[str, object] = pq.read_table(job["trace"]).slice(3, 1).to_pylist()[0]
    return row


TRACE_CASES: dict[str, Callable[[str], bytes]] = {
    # the JSON text of line 4 -> the bytes of the damaged line 4
    "duplicate-key": lambda t: (t[:-1] + ', "duration": 5.0}').encode(),
    "lone-surrogate": lambda t: t.replace('"optype": "', '"optype": "\\udc80').encode(),
    "nul": lambda t: t.replace('"optype": "', '"optype": "\\u0000').encode(),
    "overlong-utf8": lambda t: t.replace('"optype": "', '"optype": "\xc0\xaf').encode("latin-1"),
    "bom-mid-file": lambda t: b"\xef\xbb\xbf" + t.encode(),
    "deep": lambda t: (t[:-1] + ', "x": ' + "[" * 3000 + "]" * 3000 + "}").encode(),
    "nan": lambda t: t.replace('"duration": ', '"duration": NaN, "_": ').encode(),
}


@pytest.mark.parametrize("case", list(TRACE_CASES))
def test_hostile_jsonl_trace_lines(cli: CliWorker, job: dict[str, Path], tmp_path: Path,
                                   case: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(job["trace"])
    table = table.cast(pa.schema([pa.field(n, pa.string() if n == "optype" else t)
                                  for n, t in zip(table.column_names, table.schema.types,
                                                  strict=True)]))
    lines = [json.dumps(r) for r in table.to_pylist()]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join((TRACE_CASES[case](ln) if i == 3 else ln.encode()) + b"\n"
                              for i, ln in enumerate(lines)))
    out = cli.run(["analyze", str(path), "--meta", str(job["meta"]), "--out",
                   str(tmp_path / "o"), "--no-timelines"], timeout=HANG_S)
    line = check_refused(out, "t.jsonl")
    assert "t.jsonl:4" in line or "line 4" in line, line


def test_a_json_flight_recorder_dump_with_a_key_twice(cli: CliWorker, tmp_path: Path) -> None:
    """JSON keeps the last of two equal keys: the second ``entries`` hid the first."""
    folder = tmp_path / "fr"
    folder.mkdir()
    (folder / "_dump_0.json").write_text(
        '{"pg_config": {}, "entries": [{"pg_id": 0}], "entries": []}')
    out = cli.run(["detect", "hang", "--flight-recorder", str(folder)], timeout=HANG_S)
    check_refused(out, "_dump_0.json", "entries")
