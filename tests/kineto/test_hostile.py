"""Hostile profiler traces (issue 31): bounded memory and time, regular files only, and no
value of the input clipped, dropped or replaced without a count or an error.

Every input is built here, byte by byte, from the one-rank trace of
:mod:`tests.kineto.hostile` (three ops with known times). The properties are checked on
random inputs (Hypothesis): nesting at any depth and place, keys given twice, numbers at
their extremes. Inputs that could hang or take gigabytes run the CLI in a subprocess with a
timeout and a 1 GiB address space.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import stat
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.kineto import import_kineto
from stragglers.kineto.patterns import load_patterns
from stragglers.kineto.reader import read_rank_file
from stragglers.trace.io import JobMeta
from tests.kineto.hostile import CLI, OPS, document, events, run, write

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
META = JobMeta(dp_size=1, pp_size=1, world_size=1)
NEST = 64  # the default nesting limit


def imported(folder: Path) -> list[tuple[str, float, float]]:
    """The ops of an import that must succeed: (optype, start s, duration s) by start."""
    trace, _ = import_kineto(folder, META, jobs=1)
    from stragglers.trace import schema
    return sorted(((schema.OPTYPES[o], float(s), float(d)) for o, s, d in
                   zip(trace.optype, trace.start_ts, trace.duration, strict=True)),
                  key=lambda r: r[1])


def refused(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The one line of an import that must be refused (exit 2, nothing written)."""
    out = tmp_path / "out"
    code = main(["import", "kineto", str(folder), "--meta", str(folder / "job.yaml"),
                 "--out", str(out), "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()
    return err


def assert_ops(got: list[tuple[str, float, float]], want: list[tuple[str, float, float]]
               ) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]
    np.testing.assert_allclose([g[1:] for g in got], [w[1:] for w in want], rtol=0,
                               atol=1e-12)


def nested(depth: int) -> bytes:
    """A value of ``depth`` containers (``depth`` arrays around nothing)."""
    return b"[" * depth + b"]" * depth


def with_value_at(where: str, value: bytes) -> bytes:
    """The trace with ``value`` placed at ``where``; also the depth of the document above
    the value (its containers)."""
    evs: list[object] = list(events())
    if where == "header key":
        return document(evs, head=b'"x": ' + value + b", ")
    if where == "distributedInfo":
        return document(evs, info=b'{"rank": 0, "world_size": 1, "x": ' + value + b"}")
    if where == "kept event args":  # the forward's kernel
        k = json.dumps(evs[3])[:-2].encode() + b', "x": ' + value + b"}}"
        return document([*evs[:3], k, *evs[4:]])
    if where == "skipped event args":  # a CPU op (not parsed, only scanned)
        k = json.dumps(evs[10])[:-2].encode() + b', "x": ' + value + b"}}"
        return document([*evs[:10], k])
    if where == "trailer key":
        return document(evs, tail=b', "x": ' + value)
    raise AssertionError(where)


#: containers above a value placed at each place (top object, events array, event, args)
ABOVE = {"header key": 1, "distributedInfo": 2, "kept event args": 4,
         "skipped event args": 4, "trailer key": 1}


# ------------------------------------------------------------------------- nesting
@SETTINGS
@given(where=st.sampled_from(sorted(ABOVE)), depth=st.integers(1, 3 * NEST))
def test_nesting_is_refused_beyond_the_limit_anywhere(tmp_path_factory: pytest.TempPathFactory,
                                                      where: str, depth: int) -> None:
    folder = write(tmp_path_factory.mktemp("nest"), with_value_at(where, nested(depth)))
    if ABOVE[where] + depth <= NEST:
        assert_ops(imported(folder), OPS)
        return
    with pytest.raises(InputError, match=f"nesting deeper than {NEST} levels") as exc:
        imported(folder)
    msg = str(exc.value)
    assert "rank-0.json" in msg
    if "event" in where:
        assert f"traceEvents[{3 if where.startswith('kept') else 10}]" in msg
    else:
        assert ("field 'x'" if "key" in where else "field 'distributedInfo'") in msg


@pytest.mark.slow
@pytest.mark.parametrize("where", sorted(ABOVE))
@pytest.mark.parametrize("info_after", [False, True], ids=["info-first", "info-after"])
def test_deep_nesting_ends_in_one_line_within_1_gib(tmp_path: Path, where: str,
                                                    info_after: bool) -> None:
    """The 264 KB file of issue 31 (a value nested 100,000 deep took 10 GB: the header
    parser's memory grew with the square of the depth), at every place, with the rank's
    ``distributedInfo`` before the events or after them."""
    data = with_value_at(where, nested(100_000))
    if info_after:  # distributedInfo moved after the events array
        i = data.index(b'"distributedInfo": ')
        j = data.index(b', "traceEvents": [')
        info = data[i:j]
        data = data[:i] + data[j + 2:]
        data = data[: data.rindex(b"}")] + b", " + info + b"}\n"
    folder = write(tmp_path / "t", data)
    done = run(folder, folder / "job.yaml", tmp_path / "out", timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]
    assert "nesting deeper than 64 levels" in done.stderr


# ------------------------------------------------------------------------ key given twice
KEPT_KEYS = [(0, "dur"), (1, "name"), (1, "ts"), (2, "args.correlation"), (3, "dur"),
             (3, "ts"), (3, "args.correlation"), (3, "args.stream"), (3, "ph"), (3, "cat"),
             (7, "args.Collective name"), (7, "tid"), (9, "args.correlation"), (9, "name")]


@SETTINGS
@given(pick=st.sampled_from(KEPT_KEYS), first=st.booleans(), escaped=st.booleans(),
       value=st.one_of(st.integers(-5, 10**6), st.text("xyz", max_size=5), st.none()))
def test_a_key_given_twice_in_a_kept_event_is_refused(
        tmp_path_factory: pytest.TempPathFactory, pick: tuple[int, str], first: bool,
        escaped: bool, value: object) -> None:
    """orjson keeps the last of two equal keys; the importer refuses the event instead,
    whether the copy comes first or last, is written with an escape (``\\u0064ur``) or not,
    and whatever its value."""
    i, path = pick
    evs: list[object] = list(events())
    key = path.split(".")[-1]
    spelled = f"\\u{ord(key[0]):04x}{key[1:]}" if escaped else key
    extra = f'"{spelled}": {json.dumps(value)}'
    raw = json.dumps(evs[i])
    if path.startswith("args."):
        at = raw.index('"args": {') + len('"args": {')
        raw = raw[:at] + extra + ", " + raw[at:] if first else \
            raw[:raw.rindex("}", 0, -1)] + ", " + extra + raw[raw.rindex("}", 0, -1):]
    else:
        raw = "{" + extra + ", " + raw[1:] if first else raw[:-1] + ", " + extra + "}"
    evs[i] = raw.encode()
    folder = write(tmp_path_factory.mktemp("dup"), document(evs))
    with pytest.raises(InputError, match=rf"traceEvents\[{i}\].*: field '{path}' given twice"):
        imported(folder)


def test_keys_given_twice_outside_kept_events(tmp_path: Path) -> None:
    """In a skipped event (never parsed: its keys are not used) the import goes on; in the
    header, in distributedInfo, and before and after the events, it is refused."""
    evs: list[object] = list(events())
    evs[10] = json.dumps(evs[10])[:-1].encode() + b', "name": "aten::add"}'
    assert_ops(imported(write(tmp_path / "a", document(evs))), OPS)
    cases = [
        (document(head=b'"schemaVersion": 2, '), "field 'schemaVersion' given twice before"),
        (document(info=b'{"rank": 0, "world_size": 1, "rank": 0}'),
         "field 'distributedInfo.rank' given twice before the traceEvents array"),
        (document(head=b'"baseTimeNanoseconds": 5, ', tail=b', "baseTimeNanoseconds": 7'),
         "field 'baseTimeNanoseconds' given twice (before and after the traceEvents array)"),
        (document(tail=b', "traceName": "a", "traceName": "b"'),
         "field 'traceName' given twice after the traceEvents array"),
    ]
    for k, (data, message) in enumerate(cases):
        with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
            imported(write(tmp_path / f"c{k}", data))


# ------------------------------------------------------------------- numeric extremes
US_CAP = 10_000_000_000 * 1e6  # timestamp_seconds, in microseconds
DUR_CAP = 86_400 * 1e6  # op_seconds


@SETTINGS
@given(ts=st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                    st.integers(-(2**70), 2**70), st.sampled_from([1e16, -1e16, 1e300])),
       dur=st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                     st.integers(-(2**70), 2**70),
                     st.sampled_from([-5e6, -1e-9, 0.0, DUR_CAP, 1e15, 1e300])))
def test_kernel_times_are_kept_exactly_or_refused(tmp_path_factory: pytest.TempPathFactory,
                                                  ts: float, dur: float) -> None:
    """A kernel's ``ts`` and ``dur`` (the forward op's time): a negative duration (issue 31:
    -5 s was written as 0), a time beyond the plausibility bounds (1e300 was written out) is
    refused naming the event and the field; any other value is written as it is."""
    evs = events()
    evs[3]["ts"], evs[3]["dur"] = ts, dur
    folder = write(tmp_path_factory.mktemp("num"), document(evs))
    t, d = float(ts), float(dur)  # what orjson reads (integers beyond 64 bits as floats)
    if not abs(t) <= US_CAP:
        with pytest.raises(InputError, match=r"traceEvents\[3\]: field 'ts' is .* beyond "
                                             "10,000,000,000 s"):
            imported(folder)
    elif d < 0:
        with pytest.raises(InputError, match=r"traceEvents\[3\]: field 'dur' is negative"):
            imported(folder)
    elif d > DUR_CAP:
        with pytest.raises(InputError, match=r"traceEvents\[3\]: field 'dur' is .* beyond "
                                             "86,400 s"):
            imported(folder)
    else:
        got = imported(folder)
        fwd = next(g for g in got if g[0] == "forward-compute")
        assert fwd[1] == t * 1e-6
        # the end is stored as ts + dur (microseconds): exact to the spacing of the floats
        assert abs(fwd[2] - d * 1e-6) <= 2 * float(np.spacing(abs(t) + d)) * 1e-6


@pytest.mark.parametrize("event,field,value,message", [
    (2, "args.correlation", 2**64 - 1, "field 'args.correlation' is 18446744073709551615, "
     "beyond the 64-bit integer range"),
    (7, "tid", 2**63, "field 'tid' is 9223372036854775808, beyond the 64-bit integer range"),
    (3, "args.correlation", 10**30, "field 'args.correlation' must be an integer, got 1e+30"),
    (1, "name", "forward-compute mb=3000000000", "field 'name': the micro-batch number of "
     "'forward-compute mb=3000000000' is beyond 2,147,483,647"),
    (0, "ts", -1e17, "field 'ts' is -1e+17 us, beyond 10,000,000,000 s"),
    (1, "dur", -5e6, "field 'dur' is negative (-5000000.0)"),
], ids=["u64-correlation", "u63-tid", "1e30-correlation", "mb-beyond-int32", "step-ts",
        "annotation-dur"])
def test_values_beyond_their_columns_are_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 event: int, field: str, value: object,
                                                 message: str) -> None:
    """Before: OverflowError tracebacks (64-bit columns), a micro-batch number silently
    ignored (more than 9 digits) or wrapped (int32), a negative duration written as 0."""
    evs = events()
    target = evs[event]["args"] if field.startswith("args.") else evs[event]
    target[field.split(".")[-1]] = value
    err = refused(write(tmp_path / "t", document(evs)), tmp_path, capsys)
    assert f"rank-0.json: traceEvents[{event}]" in err and message in err


def test_a_group_rank_that_is_not_an_integer_is_refused(tmp_path: Path) -> None:
    """Before, ``pg_config`` ranks that were not integers were dropped from the group, and
    the rank's index in what was left taken as its position."""
    info = {"rank": 0, "world_size": 1, "pg_config": [
        {"pg_name": "1", "pg_desc": "DATA_PARALLEL_GROUP", "ranks": ["x", 0]}]}
    with pytest.raises(InputError, match=r"rank-0.json: distributedInfo.pg_config "
                                         "DATA_PARALLEL_GROUP: field 'ranks' holds 'x'"):
        imported(write(tmp_path / "t", document(info=info)))


def test_base_time_beyond_the_bounds_is_refused(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(write(tmp_path / "a", document(
        head=b'"baseTimeNanoseconds": 18000000000000000000, ')), tmp_path, capsys)
    assert "field 'baseTimeNanoseconds' is 18000000000000000000 ns, beyond" in err
    err = refused(write(tmp_path / "b", document(
        head=b'"baseTimeNanoseconds": ' + b"9" * 400 + b", ")), tmp_path, capsys)
    assert "an integer with 400 digits (limit 30" in err


def test_times_moved_beyond_the_bounds_by_the_base_are_refused(tmp_path: Path) -> None:
    """Each file's times are within the bounds, but putting rank 1 on the job's clock (its
    base 9e9 s later) moves its ops to 1.8e10 s: refused naming the file, not written."""
    meta = JobMeta(dp_size=2, pp_size=1, world_size=2)
    folder = tmp_path / "t"
    for rank, head in ((0, b""), (1, b'"baseTimeNanoseconds": 9000000000000000000, ')):
        evs = events()
        for e in evs:
            e["ts"] += 9e15
        evs[7]["args"]["Group size"] = 2
        write(folder, document(evs, head=head, info={"rank": rank, "world_size": 2}),
              name=f"rank-{rank}.json")
    with pytest.raises(InputError, match=r"rank-1.json: an op of step 1 starts at 1.8e\+10 s "
                                         "once the files are on one clock, beyond"):
        import_kineto(folder, meta, jobs=1)


# ------------------------------------------------------- bytes around the document
@pytest.mark.parametrize("make,message", [
    (lambda d: gzip.compress(d) + gzip.compress(d), "bytes after the end of the JSON document"),
    (lambda d: gzip.compress(d) + gzip.compress(b'{"traceEvents": []}'),
     "19 bytes after the end of the JSON document (a second gzip member"),
    (lambda d: d + b'{"x": 1}', "8 bytes after the end of the JSON document"),
    (lambda d: d.replace(b'\n]}', b'\n], "a": 1'), "it ends after the traceEvents array"),
], ids=["gzip-member-twice", "gzip-second-member", "second-document", "unclosed"])
def test_data_after_the_document_is_refused(tmp_path: Path, make, message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 31: a second gzip member was ignored (when the header had the base time)."""
    data = make(document(head=b'"baseTimeNanoseconds": 1000, '))
    name = "rank-0.json.gz" if data[:2] == b"\x1f\x8b" else "rank-0.json"
    err = refused(write(tmp_path / "t", data, name=name), tmp_path, capsys)
    assert name in err and message in err


def test_whitespace_after_the_document_is_fine(tmp_path: Path) -> None:
    assert_ops(imported(write(tmp_path / "t", document() + b"\n \r\n\t")), OPS)


@pytest.mark.parametrize("value,kind", [(b"5", "a number"), (b'"x"', "a string"),
                                        (b"[]", "an array"), (b"null", "null")])
def test_a_value_other_than_an_object_among_the_events_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], value: bytes, kind: str) -> None:
    """Before, a scalar between two events was dropped without a word (and the indices of
    the events after it shifted)."""
    evs: list[object] = list(events())
    err = refused(write(tmp_path / "t", document([*evs[:4], value, *evs[4:]])), tmp_path,
                  capsys)
    assert "traceEvents[4], byte" in err and f"each event must be a JSON object, got {kind}" \
        in err


# ---------------------------------------------------------------------- sizes
def test_one_event_or_the_keys_around_the_events_beyond_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRAGGLERS_MAX_KINETO_EVENT_BYTES", "4096")
    assert_ops(imported(write(tmp_path / "ok", document())), OPS)
    big = events()
    big[5]["args"]["x"] = "y" * 5000
    cases = [
        (document(big), r"traceEvents\[5\], byte .*: an event is longer than 4,096 bytes \(the "
         "kineto_event_bytes limit; set STRAGGLERS_MAX_KINETO_EVENT_BYTES to raise it"),
        (document(head=b'"x": "' + b"y" * 5000 + b'", '),
         "the keys before the traceEvents array are longer than 4,096 bytes"),
        (document(tail=b', "x": "' + b"y" * 5000 + b'"'),
         "the keys after the traceEvents array are longer than 4,096 bytes"),
    ]
    for k, (data, message) in enumerate(cases):
        with pytest.raises(InputError, match=message):
            imported(write(tmp_path / f"c{k}", data))


@pytest.mark.slow
@pytest.mark.parametrize("what", ["event", "header", "trailer"])
def test_a_huge_value_in_a_small_gzip_ends_in_one_line_within_1_gib(tmp_path: Path,
                                                                    what: str) -> None:
    """64 MB of one event (or of the keys around the events) in a small gzip file: before,
    the scanner's buffer grew to the whole event, and its index arrays to 8 bytes per byte
    (several GB)."""
    flat = b"[" + b"1," * (32 << 20) + b"1]"
    evs = events()
    data = {"event": lambda: document([*evs[:5], json.dumps(evs[5])[:-2].encode()
                                       + b', "x": ' + flat + b"}}", *evs[6:]]),
            "header": lambda: document(head=b'"x": ' + flat + b", "),
            "trailer": lambda: document(tail=b', "x": ' + flat)}[what]()
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "job.yaml").write_text("dp_size: 1\npp_size: 1\n")
    (folder / "rank-0.json.gz").write_bytes(gzip.compress(data, 1))
    done = run(folder, folder / "job.yaml", tmp_path / "out", timeout=300)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, \
        done.stderr[-2000:]
    assert "longer than 8,388,608 bytes (the kineto_event_bytes limit" in done.stderr


def test_counters_keyed_by_the_input_stay_bounded(tmp_path: Path) -> None:
    """Categories and annotation names chosen by the input are counted, all of them, under a
    bounded number of keys (before: one report line per distinct category)."""
    evs: list[object] = list(events())
    extra = [{"ph": "X", "cat": f"cat{i}", "name": f"n{i}", "ts": 1.0, "dur": 1.0, "pid": 1,
              "tid": 7} for i in range(500)]
    extra += [{"ph": "X", "cat": "user_annotation", "name": f"unknown {i}", "ts": 1.0,
               "dur": 1.0, "pid": 1, "tid": 7} for i in range(2000)]
    _, report = import_kineto(write(tmp_path / "t", document([*evs, *extra])), META, jobs=1)
    lines = report.lines()
    cats = [ln for ln in lines if "(a category the importer does not use)" in ln]
    assert len(cats) <= 64 + 2  # 64 named, the others, and the CPU ops the scanner skips
    assert sum(int(ln.split()[2].replace(",", "")) for ln in cats) == 500 + 1  # + aten::mm
    assert "not used: 2,000 annotations matching no pattern" in lines
    ev = read_rank_file(tmp_path / "t" / "rank-0.json", load_patterns(None))
    assert len(ev.names_unmatched) <= 1001 and sum(ev.names_unmatched.values()) == 2000


# -------------------------------------------------------------- not regular files
def _one_line(done) -> str:  # type: ignore[no-untyped-def]
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-2000:]
    return str(done.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fifo", "socket", "loop", "dangling", "folder"])
def test_a_rank_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    """Issue 31: a FIFO, a socket or a looping link named like a rank file in the folder was
    skipped without a count (the job imported with one file fewer). Each is refused in one
    line, whether found in the folder or given, and nothing blocks on a FIFO."""
    folder = write(tmp_path / "t", document())
    odd = folder / "rank-1.json"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(odd))
    elif kind == "loop":
        odd.symlink_to(odd.name)
    elif kind == "dangling":
        odd.symlink_to("nothing.json")
    else:
        odd.mkdir()
    expect = {"fifo": "not a regular file (a FIFO)", "socket": "not a regular file (a socket)",
              "loop": "cannot read the trace file (a broken or looping link: Too many levels",
              "dangling": "cannot read the trace file (a broken or looping link: No such file",
              "folder": "not a regular file (a folder)"}[kind]
    err = _one_line(run(folder, folder / "job.yaml", tmp_path / "out", timeout=60))
    assert f"{odd}: {expect}" in err
    if kind in ("fifo", "socket"):  # given as the trace itself
        err = _one_line(run(odd, folder / "job.yaml", tmp_path / "out", timeout=60))
        assert f"{odd}: {expect}" in err


@pytest.mark.slow
def test_a_device_given_as_the_trace_is_refused(tmp_path: Path) -> None:
    """/dev/zero used to be taken for 'no such folder or file'; a FIFO opened by the reader
    itself (not through the folder listing) is refused before any read, without blocking."""
    (tmp_path / "job.yaml").write_text("dp_size: 1\npp_size: 1\n")
    if Path("/dev/zero").exists():
        err = _one_line(run(Path("/dev/zero"), tmp_path / "job.yaml", tmp_path / "out"))
        assert "/dev/zero: not a regular file (a character device)" in err
    fifo = tmp_path / "rank.json"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    import subprocess
    done = subprocess.run([*CLI[:2], "import sys\nfrom stragglers.errors import InputError\n"
                           "from stragglers.kineto.reader import read_rank_file\n"
                           "from stragglers.kineto.patterns import load_patterns\n"
                           f"try:\n    read_rank_file({str(fifo)!r}, load_patterns(None))\n"
                           "except InputError as e:\n    print(e)\n"],
                          capture_output=True, text=True, timeout=60)
    assert f"{fifo}: not a regular file (a FIFO)" in done.stdout, done.stderr[-2000:]
