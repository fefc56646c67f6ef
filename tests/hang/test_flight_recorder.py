"""Flight-recorder dumps: the restricted reader, and hang localisation on real and hand-built
dumps.

Real data: ``../shared/real/flight-recorder/`` - NVIDIA/nvidia-resiliency-ext @ d8686d9,
``tests/attribution/unit/fr_traces/`` and ``tests/attribution/unit/reference_outputs/``
(Apache-2.0): two hung 16-rank Megatron MoE jobs, the faulted ranks (``fault_injection.log``)
and the publishing project's answer (``expected.txt``).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.hang.flight_recorder import read_flight_recorder
from stragglers.hang.fr_hang import localize_fr_hang
from tests.conftest import SHARED

FR = SHARED / "real" / "flight-recorder"


def _real(case: str) -> Path:
    folder = FR / case
    if (folder / "_dump_0").exists():
        return folder
    reason = (f"real flight-recorder dumps not found at {folder} (they live in ../shared beside "
              "the checkout, which CI provides)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _expected(folder: Path) -> list[dict[str, Any]]:
    """Rows of the publishing project's answer: PGID | desc | op | size | dtype | missing."""
    rows = []
    for line in (folder / "expected.txt").read_text().splitlines()[1:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 6:
            continue
        rows.append({"pg": cells[0], "desc": cells[1].split(",")[0], "op": cells[2],
                     "size": cells[3], "dtype": cells[4],
                     "missing": sorted(int(x) for x in re.findall(r"\d+", cells[5]))})
    return rows


def _faulted(folder: Path) -> set[int]:
    text = (folder / "fault_injection.log").read_text()
    m = re.search(r"Fault ranks: \[([\d, ]+)\]", text)
    assert m is not None
    return {int(x) for x in m.group(1).split(",")}


@pytest.mark.parametrize("case", ["gpu_error_1st", "lock_gil_2nd"])
def test_real_dumps_match_the_reference_answer(case: str) -> None:
    folder = _real(case)
    diag = localize_fr_hang(read_flight_recorder(folder))
    expected = _expected(folder)
    assert expected
    want = sorted({r for row in expected for r in row["missing"]})
    assert list(diag.suspect_ranks) == want
    assert set(want) <= _faulted(folder)  # the culprits are injected faults
    got = [{"pg": g.pg, "desc": g.desc, "op": g.op, "size": g.size, "dtype": g.dtype,
            "missing": list(g.waiting_for)} for g in diag.groups]
    assert sorted(got, key=lambda r: r["pg"]) == sorted(expected, key=lambda r: r["pg"])
    assert diag.silent == ()
    assert diag.ranks == 16 and diag.dumps == 16
    assert set(diag.ignored_files) == {"expected.txt", "fault_injection.log"}


def test_real_dumps_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    folder = _real("lock_gil_2nd")
    assert main(["detect", "hang", "--flight-recorder", str(folder), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["suspect_ranks"] == [10, 15] and out["silent"] == []
    assert [(g["pg"], g["op"], g["waiting_for"]) for g in out["groups"]] == [
        ("73", "nccl:all_to_all", [10]), ("74", "nccl:all_to_all", [15])]
    assert main(["detect", "hang", "--flight-recorder", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "suspects: [10, 15]" in text and "EXPERT_MODEL_PARALLEL_GROUP" in text


# -- hand-built dumps -------------------------------------------------------------------------
def _entry(group: str, desc: str, seq: int, op: str = "nccl:all_reduce", *, p2p: int = 0,
           state: str = "scheduled", created: int = 0, uid: int = 0) -> dict[str, Any]:
    return {"record_id": created, "pg_id": uid, "process_group": (group, desc),
            "collective_seq_id": seq, "p2p_seq_id": p2p, "op_id": seq,
            "profiling_name": op, "time_created_ns": created, "input_sizes": [[8, 4]],
            "input_dtypes": ["Float"], "state": state, "is_p2p": "send" in op or "recv" in op,
            "retired": False, "timeout_ms": 600000}


def _dump(groups: dict[str, tuple[str, list[int]]], rank: int, entries: list[dict[str, Any]],
          status: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    return {"version": "2.9", "nccl_version": "2.27.3",
            "pg_config": {name: {"name": name, "desc": desc, "ranks": str(ranks)}
                          for name, (desc, ranks) in groups.items() if rank in ranks},
            "pg_status": status or {}, "entries": entries}


def _write(folder: Path, dumps: dict[int, dict[str, Any]], json_form: bool = False,
           prefix: str = "_dump_") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r, d in dumps.items():
        if json_form:
            (folder / f"{prefix}{r}.json").write_text(json.dumps(d))
        else:
            (folder / f"{prefix}{r}").write_bytes(pickle.dumps(d, protocol=2))
    return folder


# 8 ranks: "tp" pairs (names 10-13), two 4-rank "expert" groups (20, 21), the world (0)
GROUPS = {"0": ("default_pg", list(range(8))), "10": ("TP", [0, 1]), "11": ("TP", [2, 3]),
          "12": ("TP", [4, 5]), "13": ("TP", [6, 7]), "20": ("EXPERT", [0, 1, 2, 3]),
          "21": ("EXPERT", [4, 5, 6, 7])}


def _job(culprit: int | None, silent: bool = False) -> dict[int, dict[str, Any]]:
    """Each rank issued tp all-gathers 5..7 and expert all_to_all 40..41 (several pending ops
    per rank); ``culprit`` stopped after tp #5 (``silent``: left no dump)."""
    dumps = {}
    for r in range(8):
        if r == culprit and silent:
            continue
        tp = next(n for n in ("10", "11", "12", "13") if r in GROUPS[n][1])
        ex = "20" if r < 4 else "21"
        if r == culprit:
            es = [_entry(tp, "TP", 5, "nccl:_all_gather_base", created=100)]
        else:
            es = [_entry(tp, "TP", 5, "nccl:_all_gather_base", created=100),
                  _entry(ex, "EXPERT", 40, "nccl:all_to_all", created=110),
                  _entry(tp, "TP", 6, "nccl:_all_gather_base", created=120),
                  _entry(ex, "EXPERT", 41, "nccl:all_to_all", created=130),
                  _entry(tp, "TP", 7, "nccl:_reduce_scatter_base", created=140)]
        dumps[r] = _dump(GROUPS, r, es)
    return dumps


def test_a_rank_that_never_issued_the_call_is_named(tmp_path: Path) -> None:
    diag = localize_fr_hang(read_flight_recorder(_write(tmp_path / "d", _job(6))))
    assert diag.suspect_ranks == (6,)
    assert diag.suspects[0].kind == "not_joined"
    # its first missing call: the expert all_to_all #40 (created before tp #6), in group 21
    assert [(g.pg, g.op, g.seq, g.waiting_for, g.waiters) for g in diag.groups] == [
        ("21", "nccl:all_to_all", 40, (6,), (4, 5, 7))]
    # its tp peer 7 is blocked at tp #5, which rank 6 joined: no wait there
    assert [(b.pg, b.seq, b.waiting_for) for b in diag.blocked] == [("21", 40, (6,))]


def test_a_silent_rank_and_the_json_form(tmp_path: Path) -> None:
    folder = _write(tmp_path / "d", _job(2, silent=True), json_form=True, prefix="trace_rank")
    (folder / "README").write_text("not a dump")
    record = read_flight_recorder(folder)
    assert record.silent == (2,) and record.ignored_files == ("README",)
    diag = localize_fr_hang(record)
    assert diag.suspect_ranks == (2,) and diag.suspects[0].kind == "silent"
    # rank 2's tp peer (3) and expert peers (0, 1, 3) wait for it; the first call is tp #5
    assert [(g.pg, g.seq, g.waiting_for) for g in diag.groups] == [("11", 5, (2,))]


def test_no_culprit_when_all_joined_and_a_stuck_collective(tmp_path: Path) -> None:
    groups = {"0": ("default_pg", [0, 1, 2]), "5": ("DP", [0, 1, 2])}
    dumps = {r: _dump(groups, r, [_entry("5", "DP", 9, created=r)]) for r in range(3)}
    diag = localize_fr_hang(read_flight_recorder(_write(tmp_path / "d", dumps)))
    assert [(s.kind, s.ranks) for s in diag.suspects] == [("stuck_collective", (0, 1, 2))]
    assert diag.groups == ()


def test_matched_p2p_does_not_wait_and_unmatched_waits_for_the_peer(tmp_path: Path) -> None:
    groups = {"0": ("default_pg", [0, 1, 2]), "7": ("PP", [0, 1, 2])}
    dumps = {
        0: _dump(groups, 0, [_entry("7", "PP", 3, "nccl:send 0->1", p2p=11, created=1)]),
        1: _dump(groups, 1, [_entry("7", "PP", 3, "nccl:recv 1<-0", p2p=11, created=2),
                             _entry("7", "PP", 3, "nccl:send 1->2", p2p=12, created=3)]),
        2: _dump(groups, 2, []),  # it never posted the receive
    }
    diag = localize_fr_hang(read_flight_recorder(_write(tmp_path / "d", dumps)))
    assert diag.suspect_ranks == (2,)
    assert [(g.op, g.waiting_for, g.waiters) for g in diag.groups] == [
        ("nccl:send 1->2", (2,), (1,))]


@pytest.mark.parametrize("json_form", [False, True])
def test_pg_status_identifies_a_rank_without_entries(tmp_path: Path, json_form: bool) -> None:
    """Rank 3 has no entries; its pg_status (local ids 0, 1 in the order of the names 0, 20)
    says it completed expert #39: it has not issued #40, which ranks 0-2 wait in. The JSON form
    writes the counters as text, as PyTorch 2.11's ``_dump_nccl_trace_json`` does (seen in a
    dump of a real NCCL job on an H100)."""
    groups = {"0": ("default_pg", [0, 1, 2, 3]), "20": ("EXPERT", [0, 1, 2, 3])}
    conv: Any = str if json_form else int
    st = {"0": {"last_enqueued_collective": conv(2), "last_started_collective": conv(-1),
                "last_completed_collective": conv(2)},
          "1": {"last_enqueued_collective": conv(39), "last_started_collective": conv(-1),
                "last_completed_collective": conv(39)}}
    dumps = {r: _dump(groups, r, [_entry("20", "EXPERT", 40, "nccl:all_to_all", uid=1)], st)
             for r in range(3)}
    dumps[3] = _dump(groups, 3, [], st)
    folder = _write(tmp_path / "d", dumps, json_form=json_form)
    diag = localize_fr_hang(read_flight_recorder(folder))
    assert diag.suspect_ranks == (3,)
    assert "completed #39" in diag.suspects[0].reason


def test_gloo_dumps_of_pytorch_2_13(tmp_path: Path) -> None:
    """As PyTorch 2.13's gloo flight recorder writes them (seen in real dumps): pg_config names
    the default group "" with desc "", entries call it ("0", "default_pg"), completed calls are
    ``retired`` with state "scheduled". Rank 2 has retired all-reduces 1-3 and issued no more;
    ranks 0, 1 and 3 wait in #4; rank 1 left no dump."""
    groups = {"": ("", [0, 1, 2, 3])}

    def calls(n: int, pending: int | None) -> list[dict[str, Any]]:
        out = []
        for seq in range(1, n + 1):
            e = _entry("0", "default_pg", seq, "gloo:all_reduce", created=seq)
            e["retired"] = seq != pending
            out.append(e)
        return out

    dumps = {0: _dump(groups, 0, calls(4, 4)), 2: _dump(groups, 2, calls(3, None)),
             3: _dump(groups, 3, calls(4, 4))}
    diag = localize_fr_hang(read_flight_recorder(_write(tmp_path / "d", dumps)))
    assert diag.silent == (1,)
    assert diag.suspect_ranks == (1, 2)
    assert {s.ranks: s.kind for s in diag.suspects} == {(1,): "silent", (2,): "not_joined"}
    assert [(g.pg, g.op, g.seq, g.waiting_for, g.waiters) for g in diag.groups] == [
        ("0", "gloo:all_reduce", 4, (1, 2), (0, 3))]
    assert any("default_pg" in n for n in diag.notes)


# -- refusing what is not plain data ----------------------------------------------------------
class _Forged:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_forged_global_is_refused_and_nothing_runs(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    dumps = _job(None)
    dumps[1]["entries"][0]["input_sizes"] = [_Forged(marker)]
    folder = _write(tmp_path / "d", dumps)
    with pytest.raises(InputError, match=r"_dump_1: the pickle references the global "
                                         r"(posix|os)\.system.*nothing was executed"):
        read_flight_recorder(folder)
    assert main(["detect", "hang", "--flight-recorder", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused" in err and "Traceback" not in err
    assert not marker.exists()
    # the control: plain pickle.load would have run it
    pickle.loads((folder / "_dump_1").read_bytes())
    assert marker.exists()


def test_refused_in_a_fresh_process(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    dumps = _job(None)
    dumps[0]["pg_status"] = {"0": _Forged(marker)}
    folder = _write(tmp_path / "d", dumps)
    code = "import sys; from stragglers.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "detect", "hang",
                           "--flight-recorder", str(folder)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "_dump_0" in proc.stderr and not marker.exists()


@pytest.mark.parametrize("damage, message", [
    (lambda f: f.write_bytes(f.read_bytes()[:200]), "damaged pickle"),
    (lambda f: f.write_bytes(pickle.dumps({"version": "2.9"})), "field 'pg_config': missing"),
    (lambda f: f.write_bytes(b"hello"), "neither a pickle nor JSON"),
    (lambda f: f.write_text('{"pg_config": {}, "entries": [{"process_group": 3}]}'),
     r"entries\[0\]: field 'collective_seq_id': missing"),
    (lambda f: f.write_bytes(pickle.dumps({"pg_config": {"0": {"ranks": "[0, x]"}},
                                           "entries": []})), "field 'ranks'"),
])
def test_damaged_dumps_are_one_line_errors(tmp_path: Path, damage: Any, message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(tmp_path / "d", _job(None))
    damage(folder / "_dump_3")
    assert main(["detect", "hang", "--flight-recorder", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "_dump_3" in err
    assert re.search(message, err), err


def test_folder_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["detect", "hang", "--flight-recorder", str(tmp_path / "empty")]) == 2
    assert "no dump files" in capsys.readouterr().err
    folder = _write(tmp_path / "d", _job(None))
    (folder / "_dump_01").write_bytes((folder / "_dump_1").read_bytes())
    assert main(["detect", "hang", "--flight-recorder", str(folder)]) == 2
    assert "rank 1 already has a dump" in capsys.readouterr().err
    assert main(["detect", "hang", "x.jsonl", "--flight-recorder", str(folder)]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["detect", "hang", "--flight-recorder", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err
    dumps = _job(None)
    dumps[5]["pg_config"]["21"]["ranks"] = "[4, 5, 6]"  # disagrees with ranks 4, 6, 7
    folder = _write(tmp_path / "e", dumps)
    assert main(["detect", "hang", "--flight-recorder", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "pg_config['21']: ranks" in err and "_dump_4 says [4, 5, 6, 7]" in err, err
