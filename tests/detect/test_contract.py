"""The error contract of the detection commands: every user error is exit 2 with one line
naming the file, line and field (or the option); sizes are checked before allocating."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from stragglers.cli import main

ITER = [{"rank": r, "iter": i, "ts": 0.5 * i + 0.001 * r} for i in range(20) for r in range(2)]
CALLS = [{"rank": 0, "type": "allreduce", "size": 8, "ts": float(i)} for i in range(40)]
MSGS = [{"src": 0, "dst": 1, "latency": 0.1}, {"src": 1, "dst": 0, "latency": 0.1}]
HANG = [{"rank": 0, "op": "allreduce", "group": "dp"}]


def _file(tmp_path, name: str, rows: list, extra: bytes = b"") -> str:
    p = tmp_path / name
    p.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + extra)
    return str(p)


def _one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    # the prefix names the command as typed: "stragglers detect period: error: ..."
    assert re.match(rf"stragglers {command}( [a-z-]+)?: error: ", lines[0]), lines[0]
    return lines[0]


BAD_LINES = [
    (b'{"rank": 0, "type": "all\xffreduce", "size": 8, "ts": 99}', "not UTF-8 text"),
    (b'{"rank": "3", "type": "ar", "size": 8, "ts": 99}', "field 'rank'"),
    (b'{"rank": 0, "type": "ar", "size": 8, "ts": true}', "field 'ts'"),
    (b'{"rank": 0, "type": "ar", "size": [], "ts": 99}', "field 'size'"),
    (b'{"rank": 0, "type": "ar", "size": 8, "ts": 99, "x": ' + b"[" * 100_000
     + b"]" * 100_000 + b"}", "not valid JSON (depth limit exceeded"),
    (b'{"rank": 0, "type": "ar", "size": ' + b"7" * 5000 + b', "ts": 99}', "not valid JSON"),
    (b'{"rank": 0, "type": "ar", "size": 8, "ts": 1e999}', "not valid JSON (number out of range"),
    (b'{"rank": 0, "type": "ar", "size": 8.0, "ts": 99}', "field 'size'"),
    (b'{"rank": 0, "type": 7, "size": 8, "ts": 99}', "field 'type'"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_period_bad_lines(tmp_path, capsys, line: bytes, message: str) -> None:
    path = _file(tmp_path, "calls.jsonl", CALLS[:5], line + b"\n")
    assert main(["detect", "period", path]) == 2
    err = _one_line_error(capsys, "detect")
    assert f"calls.jsonl:6: {message}" in err or ("calls.jsonl:6: " in err and message in err)


@pytest.mark.parametrize(("line", "message"), [
    (b'{"src": 0, "dst": "1", "latency": 0.1}', "field 'dst'"),
    (b'{"src": 0, "dst": 1.0, "latency": 0.1}', "field 'dst'"),
    (b'{"src": 0, "dst": 1, "latency": -1}', "field 'latency': expected a number >= 0"),
    (b'{"src": 0, "dst": 1, "latency": 0.1, "wait": null, "size": {}}', "field 'size'"),
    (b'{"src": 1e300, "dst": 1, "latency": 0.1}', "field 'src'"),
    (b'\xfe\xff', "not UTF-8 text"),
])
def test_matrix_bad_lines(tmp_path, capsys, line: bytes, message: str) -> None:
    path = _file(tmp_path, "m.jsonl", MSGS, line + b"\n")
    assert main(["detect", "matrix", path]) == 2
    err = _one_line_error(capsys, "detect")
    assert "m.jsonl:3: " in err and message in err


@pytest.mark.parametrize(("line", "message"), [
    (b'{"rank": true, "op": "a", "group": "dp"}', "field 'rank': expected an integer 0..1"),
    (b'{"rank": 1, "op": [], "group": "dp"}', "field 'op': expected a non-empty string"),
    (b'{"rank": 1, "op": "a", "group": "dp", "seq": {}}', "field 'seq'"),
    (b'{"rank": 1, "op": "a", "group": "dp", "peer": 1.0}', "field 'peer'"),
    (b'{"rank": 1, "op": "a", "group": "dp", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "not valid JSON"),
    (b'{"rank": 1, "op": "a\xff", "group": "dp"}', "not UTF-8 text"),
    (b'{"rank": ' + b"1" * 5000 + b', "op": "a", "group": "dp"}', "number out of range"),
])
def test_hang_bad_lines(tmp_path, capsys, line: bytes, message: str) -> None:
    path = _file(tmp_path, "h.jsonl", HANG, line + b"\n")
    assert main(["detect", "hang", path, "--dp", "2", "--pp", "1"]) == 2
    err = _one_line_error(capsys, "detect")
    assert "h.jsonl:2: " in err and message in err


@pytest.mark.parametrize("argv", [
    ["detect", "period", "{dir}"], ["detect", "matrix", "{dir}"],
    ["detect", "hang", "{dir}", "--dp", "2", "--pp", "1"], ["watch", "{dir}", "--once"],
])
def test_a_folder_where_a_file_is_expected(tmp_path, capsys, argv: list[str]) -> None:
    assert main([a.replace("{dir}", str(tmp_path)) for a in argv]) == 2
    assert f"{tmp_path}: is a folder" in _one_line_error(capsys, argv[0])


@pytest.mark.parametrize(("argv", "message"), [
    (["detect", "matrix", "{m}", "--factor", "nan"], "--factor: expected a finite number >= 1"),
    (["detect", "matrix", "{m}", "--factor", "-1"], "--factor: expected a finite number >= 1"),
    (["detect", "matrix", "{m}", "--ranks", "-1"], "--ranks: expected an integer >= 1"),
    (["detect", "matrix", "{m}", "--ranks", "100000"], "--ranks: 100,000 ranks of a delay "
     "matrix (8 bytes x ranks^2 each) exceed the limit of 8,192 (set "
     "STRAGGLERS_MAX_MATRIX_RANKS to raise it)"),
    (["detect", "matrix", "{m}", "--ranks", "1"], "field 'dst': rank 1 is outside --ranks 1"),
    (["detect", "matrix", "{big}"], "largest rank 60000: 60,001 ranks of a delay matrix"),
    (["detect", "hang", "{h}", "--dp", "100000", "--pp", "1000"], "--dp 100000 x --pp 1000 x "
     "--tp 1: 100,000,000 ranks of a hang topology or a validation plan exceed the limit"),
    (["detect", "hang", "{h}", "--dp", "0", "--pp", "1"], "--dp: expected an integer >= 1"),
    (["detect", "plan", "ring", "1000000000"], "size 1000000000: 1,000,000,000 ranks"),
    (["detect", "plan", "ring", "-5"], "size: expected an integer >= 2, got -5"),
    (["detect", "plan", "tree", "--ranks", "1,-2"], "--ranks: ranks must be >= 0"),
    (["detect", "period", "{c}", "--window", "1000000000"], "--window: 1,000,000,000 calls in "
     "one period-estimation window exceed the limit of 16,384"),
    (["detect", "period", "{c}", "--threshold", "nan"], "--threshold: expected a finite number"),
    (["watch", "{c}", "--poll", "nan"], "--poll: expected a finite number > 0"),
    (["watch", "{c}", "--poll", "-1"], "--poll: expected a finite number > 0"),
    (["watch", "{c}", "--idle-timeout", "nan"], "--idle-timeout: expected a finite number >= 0"),
    (["watch", "{c}", "--wait-timeout", "-1"], "--wait-timeout: expected a finite number >= 0"),
    (["watch", "{c}", "--window", "2"], "--window: expected an integer >= 4"),
    (["watch", "{c}", "--max-ranks", "0"], "--max-ranks: expected an integer >= 1"),
    (["detect-eval", "--scale", "nan"], "--scale: expected a finite number > 0"),
    (["detect-eval", "--scale", "1e9"], "series of a detect-eval corpus"),
    (["detect-eval", "--seed", "-1"], "--seed: expected an integer >= 0"),
    (["detect-eval", "--jobs", "100000"], "--jobs: expected an integer >= 1 and <= 256"),
])
def test_bad_options_and_limits(tmp_path, capsys, argv: list[str], message: str) -> None:
    files = {"{m}": _file(tmp_path, "m.jsonl", MSGS), "{h}": _file(tmp_path, "h.jsonl", HANG),
             "{c}": _file(tmp_path, "c.jsonl", CALLS),
             "{big}": _file(tmp_path, "big.jsonl", [{"src": 60000, "dst": 0, "latency": 0.1}])}
    assert main([files.get(a, a) for a in argv]) == 2
    assert message in _one_line_error(capsys, argv[0])


def test_limits_are_checked_before_allocating(tmp_path) -> None:
    """One message record with src 60000 once allocated 27 GiB; now it is refused at once."""
    big = _file(tmp_path, "big.jsonl", [{"src": 60000, "dst": 0, "latency": 0.1}])
    code = ("import resource, sys\nfrom stragglers.cli import build_parser, main\n"
            "import stragglers.detect.matrix, stragglers.logs.records\n"
            "build_parser()\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            f"rc = main(['detect', 'matrix', {big!r}])\n"
            "after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "print(rc, after - before)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    rc, grown_kib = done.stdout.split()
    assert rc == "2" and int(grown_kib) < 64 * 1024  # peak RSS grew by less than 64 MiB


def test_limits_can_be_raised(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("STRAGGLERS_MAX_MATRIX_RANKS", "2")
    path = _file(tmp_path, "m.jsonl", [{"src": 0, "dst": 2, "latency": 0.1}])
    assert main(["detect", "matrix", path]) == 2
    assert "exceed the limit of 2 (set STRAGGLERS_MAX_MATRIX_RANKS" in capsys.readouterr().err
    monkeypatch.setenv("STRAGGLERS_MAX_MATRIX_RANKS", "3")
    assert main(["detect", "matrix", path]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"] == 3


def test_period_with_many_distinct_calls_is_bounded(tmp_path, capsys) -> None:
    """A window of 16,384 distinct calls once needed a 16,384^2 one-hot matrix (2 GiB); the
    ACF now counts matches directly."""
    rows = [{"rank": 0, "type": "t", "size": i, "ts": float(i)} for i in range(16_384)]
    path = _file(tmp_path, "sym.jsonl", rows)
    assert main(["detect", "period", path, "--window", "16384"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iterations"] == 0 and out["periods_calls"] == []


def _cli() -> list[str]:
    return [sys.executable, "-c", "import sys; from stragglers.cli import main; "
            "sys.exit(main())"]


@pytest.mark.slow
def test_one_shot_output_errors(tmp_path) -> None:
    calls = [{"rank": r, "type": "ar", "size": 8, "ts": i * 1.0 + r} for i in range(4000)
             for r in range(3)]
    path = _file(tmp_path, "calls.jsonl", calls)
    proc = subprocess.Popen([*_cli(), "detect", "period", path, "--all"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    assert proc.stderr.read() == b"" and proc.wait() == 0
    with open("/dev/full", "w") as full:
        done = subprocess.run([*_cli(), "detect", "period", path], stdout=full,
                              stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "stragglers detect period: error: <stdout>: cannot write the output (No space left on "
        "device)"]
