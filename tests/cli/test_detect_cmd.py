"""The `stragglers detect ...` tools end to end, and their errors."""

from __future__ import annotations

import json

import pytest

from stragglers.cli import main


def _write(path, rows) -> str:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_plan(capsys) -> None:
    assert main(["detect", "plan", "ring", "6"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "pass 1: 0->1, 2->3, 4->5", "pass 2: 1->2, 3->4, 5->0"]
    assert main(["detect", "plan", "tree", "--ranks", "8,9,10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passes"] == [[], [], [[9, 8]], [[10, 8]]]
    assert main(["detect", "plan", "ring"]) == 2
    assert "give the number of ranks" in capsys.readouterr().err
    assert main(["detect", "plan", "ring", "1"]) == 2
    assert main(["detect", "plan", "ring", "--ranks", "1,x"]) == 2
    assert "comma-separated" in capsys.readouterr().err


def test_hang(tmp_path, capsys) -> None:
    # dp 4 x pp 2; rank 5 (stage 1) hangs silently: its stage-1 peers wait in the allreduce,
    # the stage-0 ranks wait to receive from their stage-1 peer.
    rows = [{"rank": r, "op": "allreduce", "group": "dp", "seq": 3} for r in (4, 6, 7)]
    rows += [{"rank": r, "op": "recv", "group": "pp", "peer": r + 4} for r in range(4)]
    path = _write(tmp_path / "hang.jsonl", rows)
    assert main(["detect", "hang", path, "--dp", "4", "--pp", "2", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["suspect_ranks"] == [5] and res["silent"] == [5]
    assert main(["detect", "hang", path, "--dp", "4", "--pp", "2"]) == 0
    assert "suspect [5] [silent], waited on by 7 ranks" in capsys.readouterr().out
    bad = _write(tmp_path / "bad.jsonl", [{"rank": 0, "op": "allreduce", "group": "zz"}])
    assert main(["detect", "hang", bad, "--dp", "2", "--pp", "1"]) == 2
    assert "bad.jsonl:1: field 'group'" in capsys.readouterr().err
    dup = _write(tmp_path / "dup.jsonl", [{"rank": 0, "op": "a", "group": "dp"}] * 2)
    assert main(["detect", "hang", dup, "--dp", "2", "--pp", "1"]) == 2
    assert "dup.jsonl:2: field 'rank': rank 0 appears twice" in capsys.readouterr().err


def test_matrix(tmp_path, capsys) -> None:
    rows = []
    for s in range(4):
        for d in range(4):
            if s != d:
                lat = 30e-6 if d == 2 else 10e-6
                rows.append({"src": s, "dst": d, "latency": lat,
                             "wait": 0.05 if s == 1 else 0.001})
    path = _write(tmp_path / "m.jsonl", rows)
    assert main(["detect", "matrix", path, "--show"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["findings"] == [{"kind": "destination", "src": None, "dst": 2, "ratio": 3.0}]
    assert [f["sender"] for f in res["late_senders"]] == [1]
    assert res["matrix"][0][0] is None and res["matrix"][0][2] == 30e-6
    empty = _write(tmp_path / "e.jsonl", [{"rank": 0, "iter": 1, "duration": 1}])
    assert main(["detect", "matrix", empty]) == 2
    assert "no message records" in capsys.readouterr().err


def test_period(tmp_path, capsys) -> None:
    rows = []
    for it in range(40):
        for j, (kind, size) in enumerate([("allreduce", 8), ("allgather", 64), ("send", 4)]):
            for r in range(2):
                rows.append({"rank": r, "type": kind, "size": size,
                             "ts": it * (2.0 if r else 1.0) + 0.1 * j})
    path = _write(tmp_path / "calls.jsonl", rows)
    assert main(["detect", "period", path, "--window", "30"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [(o["rank"], o["iterations"], o["periods_calls"], o["median_s"]) for o in out] == [
        (0, 39, [3], 1.0), (1, 39, [3], 2.0)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"rank": 0, "type": "allreduce", "size": -8, "ts": 1}\n')
    assert main(["detect", "period", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1: field 'size': expected an integer >= 0, got -8" in err


def test_help_texts(capsys) -> None:
    for argv in (["detect", "--help"], ["watch", "--help"], ["detect-eval", "--help"],
                 ["detect", "hang", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
    assert "JSON-lines" in capsys.readouterr().out


def test_records_of_other_kinds_and_disorder_are_reported(tmp_path, capsys) -> None:
    rows = [{"rank": 0, "type": "ar", "size": 8, "ts": float(i)} for i in range(30)]
    rows[10], rows[11] = rows[11], rows[10]
    rows += [{"rank": 0, "iter": 1, "duration": 1.0}, {"src": 0, "dst": 1, "latency": 1e-5}]
    path = _write(tmp_path / "mixed.jsonl", rows)
    assert main(["detect", "period", path, "--window", "8"]) == 0
    row, skipped = (json.loads(x) for x in capsys.readouterr().out.splitlines())
    assert row["calls"] == 30 and row["calls_out_of_order"] == 1
    assert skipped == {"skipped_records": {"iter": 1, "msg": 1}}
    assert main(["detect", "matrix", path]) == 0
    assert json.loads(capsys.readouterr().out)["skipped_records"] == {"call": 30, "iter": 1}
