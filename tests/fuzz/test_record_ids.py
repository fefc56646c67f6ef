"""Integer fields of JSON-lines records (issue 31): rank ids are 32-bit, the other integers
64-bit. A rank id beyond 32 bits was accepted by the parser and then refused by the
service's database (PostgreSQL ``integer``), after the detector had seen it; now it is
refused where it is parsed, naming the line and the field (exit 2 / HTTP 400)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stragglers.cli import main
from stragglers.logs.records import RecordError, parse_line
from stragglers.service.datadir import DataDir
from stragglers.service.store import Store, sqlite_url
from stragglers.service.streams import RecordStreams
from tests.fuzz.harness import FUZZ

I32, I64 = 2**31 - 1, 2**63 - 1
BASE = {
    "call": {"rank": 1, "type": "allreduce", "size": 8, "ts": 1.0, "step": 3, "peer": 2},
    "iter": {"rank": 1, "iter": 4, "duration": 1.0},
    "step": {"kind": "step", "rank": 1, "step": 4, "busy": 1.0, "wait": 0.0},
    "msg": {"src": 1, "dst": 2, "latency": 0.1, "size": 8},
}
#: (kind, field, largest value): rank ids are 32-bit, the other integers 64-bit
FIELDS = [("call", "rank", I32), ("call", "peer", I32), ("call", "step", I64),
          ("call", "size", I64), ("iter", "rank", I32), ("iter", "iter", I64),
          ("step", "rank", I32), ("step", "step", I64), ("msg", "src", I32),
          ("msg", "dst", I32), ("msg", "size", I64)]


@FUZZ
@given(case=st.sampled_from(FIELDS), value=st.integers(-(2**70), 2**70), line=st.integers(1, 9))
def test_an_integer_field_is_taken_exactly_within_its_range(case: tuple[str, str, int],
                                                            value: int, line: int) -> None:
    kind, field, high = case
    low = -1 if field == "step" and kind == "call" else 0
    text = json.dumps({**BASE[kind], field: value})
    if low <= value <= high:
        rec = parse_line(text, source="r.jsonl", line=line)
        assert getattr(rec, field) == value
    else:
        with pytest.raises(RecordError) as err:
            parse_line(text, source="r.jsonl", line=line)
        msg = str(err.value)
        assert msg.startswith(f"r.jsonl:{line}: field '{field}': expected ") and "\n" not in msg


@pytest.mark.parametrize("ranks, ok", [([0, I32], True), ([0, I32 + 1], False),
                                       ([3_000_000_000], False), ([-1], False)])
def test_the_ranks_of_a_group_are_rank_ids(ranks: list[int], ok: bool) -> None:
    text = json.dumps({**BASE["call"], "group": ranks})
    if ok:
        assert parse_line(text) is not None
    else:
        with pytest.raises(RecordError, match=r"<input>:0: field 'group': expected .*"
                                              r"rank ids 0\.\.2147483647"):
            parse_line(text)


def _iterations(rank: int) -> str:
    return "".join(json.dumps({"rank": r, "iter": i, "duration": 1.0}) + "\n"
                   for i in range(3) for r in (0, rank))


def test_the_service_refuses_a_rank_beyond_32_bits_before_anything_is_stored(
        tmp_path: Path) -> None:
    """Before: accepted on SQLite (an onset of rank 3,000,000,000 stored), a DataError after
    the detector had seen the batch on PostgreSQL."""
    store = Store.open(sqlite_url(tmp_path))
    try:
        streams = RecordStreams(store, DataDir(tmp_path).create())
        with pytest.raises(RecordError, match=r"^records of job j:2: field 'rank': expected "
                                              r"a rank id <= 2147483647 \(32 bits\), got "
                                              r"3000000000$"):
            streams.ingest("j", _iterations(3_000_000_000))
        assert store.job("j") is None  # nothing stored, not even the job
        assert streams.ingest("j", _iterations(I32)).records == 6
    finally:
        store.close()


def test_watch_refuses_a_rank_beyond_32_bits_in_one_line(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(_iterations(2**40))
    code = main(["detect", "period", str(path)])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0 and "r.jsonl:2: field 'rank'" in err, err
