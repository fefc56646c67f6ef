"""Property-based tests (Hypothesis) of the detection commands' contract.

Valid record streams (iteration, call and message records) and last-op files are mutated:
field values of the wrong type or out of range, fields removed, lines cut short, bytes that
are not UTF-8, deep nesting, integers of thousands of digits, numbers that overflow,
duplicated and swapped lines.  Then:

* ``watch --once`` always exits 0, prints JSON events only, and its summary accounts for every
  line: ``lines == records + bad + blank lines``;
* ``detect period|matrix|hang`` exit 0 with JSON output, or exit 2 with exactly one line on
  stderr that names the file;
* nothing raises (an exception escaping ``main`` fails the test).

Fast in ``make test`` (a fixed number of examples, derandomized); for a long run:
``HYPOTHESIS_PROFILE=long pytest tests/detect/test_fuzz.py`` (2,000 examples per test).
Inputs are a few hundred lines, so memory stays bounded by construction; the size limits
themselves are tested in ``test_contract.py`` (with a peak-RSS check in a subprocess).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stragglers.cli import main

LONG = os.environ.get("HYPOTHESIS_PROFILE", "") == "long"
FUZZ = settings(
    max_examples=2000 if LONG else 25,
    deadline=None,
    derandomize=not LONG,
    database=None,  # nothing written into the working folder
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.text(max_size=8), st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)

RAW_VALUES = st.sampled_from([
    b"1e999", b"-1e999", b"NaN", b"Infinity", b"9" * 5000, b"-" + b"9" * 400,
    b"[" * 3000 + b"]" * 3000, b'"\xff\xfe"', b"0.0", b"-0", b"1e-400", b"true", b"{}",
])


def _iter_rows(n: int) -> list[dict]:
    return [{"rank": r, "iter": i, "ts": round(0.5 * i + 0.01 * r, 6)} for i in range(n)
            for r in range(2)]


def _call_rows(n: int) -> list[dict]:
    motif = [("allreduce", 8), ("allgather", 64), ("send", 4)]
    return [{"rank": r, "type": k, "size": s, "ts": round(it + 0.1 * j, 6), "group": f"g{r}",
             "duration": 0.01} for it in range(n) for j, (k, s) in enumerate(motif)
            for r in range(2)]


def _msg_rows(n: int) -> list[dict]:
    return [{"src": s, "dst": d, "latency": 1e-5 * (1 + (s + d) % 3), "wait": 0.001}
            for _ in range(n) for s in range(3) for d in range(3) if s != d]


def _hang_rows() -> list[dict]:
    rows = [{"rank": r, "op": "allreduce", "group": "dp", "seq": 3} for r in (4, 6, 7)]
    return rows + [{"rank": r, "op": "recv", "group": "pp", "peer": r + 4} for r in range(4)]


@st.composite
def mutated(draw, rows: list[dict]) -> bytes:
    """The rows as JSON lines, with a few mutations."""
    lines = [json.dumps(r).encode() for r in rows]
    for _ in range(draw(st.integers(0, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["value", "raw", "drop_field", "cut", "bytes", "dup",
                                     "swap", "blank", "extra_field"]))
        obj = None
        if kind in ("value", "raw", "drop_field", "extra_field"):
            try:
                obj = json.loads(lines[i])  # an earlier mutation may have broken the line
            except (ValueError, RecursionError):
                continue
            if not isinstance(obj, dict):
                continue
        if kind == "value" and obj:
            key = draw(st.sampled_from(sorted(obj)))
            obj[key] = draw(JSON_VALUES)
            lines[i] = json.dumps(obj).encode()
        elif kind == "raw" and obj:
            key = draw(st.sampled_from(sorted(obj)))
            obj[key] = "@RAW@"
            lines[i] = json.dumps(obj).encode().replace(b'"@RAW@"', draw(RAW_VALUES))
        elif kind == "drop_field" and obj:
            obj.pop(draw(st.sampled_from(sorted(obj))))
            lines[i] = json.dumps(obj).encode()
        elif kind == "extra_field" and obj is not None:
            obj[draw(st.text(min_size=1, max_size=5))] = draw(JSON_VALUES)
            lines[i] = json.dumps(obj).encode()
        elif kind == "cut":
            lines[i] = lines[i][: draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif kind == "bytes":
            pos = draw(st.integers(0, len(lines[i])))
            junk = draw(st.binary(min_size=1, max_size=4).filter(lambda b: b"\n" not in b))
            lines[i] = lines[i][:pos] + junk + lines[i][pos:]
        elif kind == "dup":
            lines.insert(i, lines[i])
        elif kind == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "blank":
            lines.insert(i, b"")
    end = b"\n" if draw(st.booleans()) else b""
    return b"\n".join(lines) + end


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def _in_file(data: bytes):
    tmp = tempfile.TemporaryDirectory(prefix="fuzz-")
    path = Path(tmp.name) / "in.jsonl"
    path.write_bytes(data)
    return tmp, str(path)


def _check_one_shot(argv: list[str], path: str) -> None:
    rc, out, err = _run(argv)
    if rc == 0:
        assert err == ""
        for line in out.splitlines():
            if line.strip().startswith(("{", "[")):
                json.loads(line) if not argv[1] == "matrix" else None
        if argv[1] == "matrix":
            json.loads(out)
    else:
        assert rc == 2
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"stragglers detect {argv[1]}: error: "), err
        assert path in lines[0]


@pytest.mark.slow
@FUZZ
@given(st.one_of(mutated(_iter_rows(40)), mutated(_call_rows(12)), mutated(_msg_rows(2))))
def test_watch_accounts_for_every_line(data: bytes) -> None:
    tmp, path = _in_file(data)
    with tmp:
        rc, out, err = _run(["watch", path, "--once", "--window", "8"])
    assert rc == 0 and err == ""
    events = [json.loads(line) for line in out.splitlines()]
    summary = events[-1]
    assert summary["event"] == "summary"
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    blank = sum(1 for line in lines if not line.strip())
    assert summary["lines"] == len(lines)
    assert summary["records"] + summary["bad"] + blank == summary["lines"]
    reported = [e for e in events if e["event"] == "bad_record"]
    assert len(reported) == min(5, summary["bad"])
    assert all(e["error"].startswith(f"{path}:{e['line']}: ") for e in reported)


@FUZZ
@given(mutated(_call_rows(15)))
def test_detect_period_contract(data: bytes) -> None:
    tmp, path = _in_file(data)
    with tmp:
        _check_one_shot(["detect", "period", path, "--window", "8"], path)


@FUZZ
@given(mutated(_msg_rows(3)))
def test_detect_matrix_contract(data: bytes) -> None:
    tmp, path = _in_file(data)
    with tmp:
        _check_one_shot(["detect", "matrix", path], path)


@FUZZ
@given(mutated(_hang_rows()))
def test_detect_hang_contract(data: bytes) -> None:
    tmp, path = _in_file(data)
    with tmp:
        _check_one_shot(["detect", "hang", path, "--dp", "4", "--pp", "2"], path)
