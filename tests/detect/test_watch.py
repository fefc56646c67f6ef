"""Streaming watcher: iteration and call records, bad input, discontinuities (outliers,
restarts, clock steps), rank limits, and following a file through rotation and truncation."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.detect.robust import RobustLevelDetector
from stragglers.detect.watch import Watcher
from stragglers.logs.follow import Follower

#: The default detector declares a level once it has lasted more than ``stall_iters``
#: iterations (docs/detection.md): a clean step is declared that many points after its start.
DECLARE = RobustLevelDetector().stall_iters + 1


def _iteration_recs(n_ranks: int = 2, slow_rank: int = 1, seed: int = 0, n: int = 600,
                    slow: tuple[int, int] = (300, 450)) -> list[dict]:
    """``n`` iterations per rank; ``slow_rank`` is 1.5x slower in iterations ``slow``."""
    rng = np.random.default_rng(seed)
    recs = []
    ts = dict.fromkeys(range(n_ranks), 0.0)
    for it in range(n):
        for r in range(n_ranks):
            d = 0.5 * np.exp(rng.normal(0, 0.02))
            if r == slow_rank and slow[0] <= it < slow[1]:
                d *= 1.5
            ts[r] += d
            recs.append({"rank": r, "iter": it, "ts": round(ts[r], 6)})
    return recs


def _iteration_lines(n_ranks: int = 2, slow_rank: int = 1, seed: int = 0) -> list[str]:
    return [json.dumps(d) for d in _iteration_recs(n_ranks, slow_rank, seed)]


def _events(watcher: Watcher, lines: list[str]) -> list[dict]:
    out = watcher.process_lines(list(enumerate(lines, start=1)))
    return [e.to_dict() for e in out + watcher.finish()]


def _alarms(events: list[dict]) -> list[tuple[str, int, int | None]]:
    return [(e["event"], e["rank"], e["job_iteration"]) for e in events
            if e["event"] in ("onset", "change", "recovery", "speedup")]


def test_iteration_records_onset_and_recovery() -> None:
    w = Watcher()
    ev = _events(w, _iteration_lines())
    kinds = [(e["event"], e["rank"]) for e in ev if e["event"] != "summary"]
    assert kinds == [("onset", 1), ("recovery", 1)]
    onset, rec = ev[:2]
    # durations come from ts differences: the first record has none, so iteration index 299
    # of the detector is iteration 300 of the job
    assert abs(onset["iteration"] - 299) <= 2 and onset["declared_iteration"] - 299 <= DECLARE
    assert abs(onset["job_iteration"] - 300) <= 2
    assert onset["job_iteration"] == onset["iteration"] + 1
    assert abs(onset["severity"] - 1 / 3) < 0.03
    assert onset["ts"] is not None and onset["line"] > 2 * 300
    assert abs(rec["iteration"] - 449) <= 2
    s = w.summary().to_dict()
    assert s["records"] == 1200 and s["bad"] == 0 and s["iterations"] == {"0": 599, "1": 599}
    assert s["dropped"] == {} and s["segments"] == {} and s["slow_ranks"] == []


def _call_lines() -> list[str]:
    """4 ranks, 2 data-parallel groups; from iteration 200 the links of dp1 are congested."""
    rng = np.random.default_rng(1)
    recs = []
    motif = [("reduce_scatter", 4096, 0.10), ("allgather", 2048, 0.05),
             ("allgather", 2048, 0.05), ("allreduce", 8, 0.02)]
    start = 0.0
    for it in range(400):
        slow = 200 <= it < 320
        t_iter = (1.4 if slow else 1.0) * np.exp(rng.normal(0, 0.01))
        for r in range(4):
            group = "dp0" if r < 2 else "dp1"
            for j, (kind, size, dur) in enumerate(motif):
                tr = dur * (1.6 if slow and group == "dp1" else 1.0) * rng.uniform(0.99, 1.01)
                recs.append({"rank": r, "type": kind, "size": size,
                             "ts": round(start + 0.2 * j * t_iter + 0.001 * r, 6),
                             "group": group, "duration": tr, "wait": 0.001})
        start += t_iter
    recs.sort(key=lambda d: d["ts"])
    return [json.dumps(d) for d in recs]


def test_call_records_period_onset_and_suspect_group() -> None:
    w = Watcher(tracker_kwargs={"window": 64}, warmup_iters=0)
    ev = _events(w, _call_lines())
    onsets = [e for e in ev if e["event"] == "onset"]
    assert sorted(e["rank"] for e in onsets) == [0, 1, 2, 3]
    # the tracker finds the first anchor at call 0, so detector index i is job iteration i
    assert all(e["iteration"] == 200 and e["declared_iteration"] - 200 <= DECLARE
               for e in onsets)
    assert all(e["job_iteration"] is None for e in onsets)  # calls carry no iteration number
    (sus,) = [e for e in ev if e["event"] == "suspects"]
    assert sus["onset_ranks"] == [0, 1, 2, 3] and sus["profiled_calls"] == 256
    assert [(g["group"], g["verdict"]) for g in sus["groups"]] == [("dp1", "slow_transfer")]
    # two comparable groups: the class median is their mean (1 + 1.6) / 2
    assert abs(sus["groups"][0]["transfer_ratio"] - 1.6 / 1.3) < 0.03
    recs = [e for e in ev if e["event"] == "recovery"]
    assert sorted(e["rank"] for e in recs) == [0, 1, 2, 3]
    assert w.summary().to_dict()["iterations"] == {str(r): 399 for r in range(4)}


def test_bad_and_out_of_order_records_are_counted_by_reason() -> None:
    lines = _iteration_lines(n_ranks=1, slow_rank=-1)[:50]
    lines.insert(10, "{not json")
    lines.insert(20, '{"rank": 0, "iter": 3, "ts": 1.0}')  # iteration goes backwards
    lines.insert(30, '{"rank": 0, "type": "allreduce", "ts": 1.0}')  # no size
    lines += ['{"rank": 0, "type": "allreduce", "size": 8, "ts": 5.0}',
              '{"rank": 0, "type": "allreduce", "size": 8, "ts": 4.0}',  # call goes backwards
              '{"rank": 0, "type": "allreduce", "size": 8, "ts": 6.0}',
              '{"src": 0, "dst": 1, "latency": 0.1}', "", "[]",
              '{"rank": "0", "iter": 60, "ts": 1.0}',  # a string is not converted
              '{"rank": 0, "iter": 60, "ts": 99.0, "duraton": 1}']  # misspelled field
    w = Watcher(report_limit=2)
    ev = [e.to_dict() for e in w.process_lines(list(enumerate(lines, start=1)))]
    assert [e["event"] for e in ev] == ["bad_record", "out_of_order", "bad_record",
                                        "out_of_order"]
    assert ev[0]["line"] == 11 and "not valid JSON" in ev[0]["error"]
    assert ev[1]["line"] == 21 and "iteration 3 does not follow" in ev[1]["detail"]
    assert "field 'size'" in ev[2]["error"]
    s = w.finish()[-1].to_dict()
    assert s["dropped"] == {"bad_field": 2, "not_json": 1, "not_object": 1, "out_of_order": 2}
    assert (s["bad"], s["out_of_order"]) == (4, 2)
    assert s["ignored"] == {"msg": 1} and s["unknown_fields"] == {"duraton": 1}
    assert s["lines"] == len(lines)
    # valid records, including the two out of order and the message
    assert s["records"] == 50 + 1 + 3 + 1 + 1


def test_cli_once_and_stdin(tmp_path, capsys, monkeypatch) -> None:
    p = tmp_path / "events.jsonl"
    p.write_text("\n".join(_iteration_lines()) + "\n")
    assert main(["watch", str(p), "--once"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in out] == ["onset", "recovery", "summary"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(_iteration_lines()[:20])))
    assert main(["watch", "-"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert out[-1]["event"] == "summary" and out[-1]["records"] == 20
    assert main(["watch", str(tmp_path / "nope.jsonl"), "--once"]) == 2
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["watch", str(tmp_path / "empty"), "--once"]) == 2
    assert "is a folder without files to watch" in capsys.readouterr().err
    # a folder is the files in it (one per rank; here one file): the same events
    assert main(["watch", str(tmp_path), "--once"]) == 0
    assert [json.loads(x)["event"] for x in capsys.readouterr().out.splitlines()] == [
        "onset", "recovery", "summary"]


def _with_onset(recs: list[dict]) -> list[str]:
    return [json.dumps(d) for d in recs]


def test_a_lone_record_from_the_far_future_does_not_poison_the_rank() -> None:
    recs = _iteration_recs(n_ranks=1, slow_rank=0)
    clean = _alarms(_events(Watcher(), _with_onset(recs)))
    assert [a[0] for a in clean] == ["onset", "recovery"]
    for bad in ({"rank": 0, "iter": 10**12, "ts": recs[100]["ts"] + 0.25},
                {"rank": 0, "iter": 100, "ts": 1e12},
                {"rank": 0, "iter": 100, "ts": -5.0}):
        poisoned = recs[:100] + [bad] + recs[100:]
        w = Watcher()
        ev = _events(w, _with_onset(poisoned))
        assert _alarms(ev) == clean, bad
        s = ev[-1]
        kind = "out_of_order" if bad["ts"] < 0 else "outlier"
        assert s["dropped"] == {kind: 1} and s["segments"] == {}
        (drop,) = [e for e in ev if e["event"] == kind]
        assert drop["line"] == 101 and drop["decided_by_line"] == 102


def test_clock_steps_start_a_segment_and_keep_the_onset() -> None:
    recs = _iteration_recs(n_ranks=1, slow_rank=0)
    clean = _alarms(_events(Watcher(), _with_onset(recs)))
    for shift in (1e6, -1e4):
        stepped = [dict(d, ts=d["ts"] + (shift if i >= 200 else 0.0))
                   for i, d in enumerate(recs)]
        w = Watcher()
        ev = _events(w, _with_onset(stepped))
        assert [a[0] for a in _alarms(ev)] == ["onset", "recovery"]
        assert [a[2] for a in _alarms(ev)] == [a[2] for a in clean]
        (seg,) = [e for e in ev if e["event"] == "segment"]
        assert (seg["reason"], seg["line"], seg["job_iteration"]) == ("clock_step", 201, 200)
        s = ev[-1]
        assert s["dropped"] == {} and s["segments"] == {"clock_step": 1}
        # the iteration across the step is not measured: one fewer iteration time
        assert s["iterations"] == {"0": 598}


def test_a_restart_is_a_new_segment_not_out_of_order() -> None:
    """The job runs to iteration 250, restarts from its checkpoint at 200 and runs on; the
    slow period (job iterations 300-450) comes after the restart."""
    recs = _iteration_recs(n_ranks=1, slow_rank=0, n=700, slow=(400, 550))
    before = recs[:250]
    after = [dict(d, iter=d["iter"] - 100) for d in recs[300:]]  # iterations 200.. again
    w = Watcher()
    ev = _events(w, _with_onset(before + after))
    (seg,) = [e for e in ev if e["event"] == "segment"]
    assert (seg["reason"], seg["job_iteration"], seg["previous_iteration"]) == ("restart", 200,
                                                                                249)
    alarms = _alarms(ev)
    assert [a[0] for a in alarms] == ["onset", "recovery"]
    assert abs(alarms[0][2] - 300) <= 2 and abs(alarms[1][2] - 450) <= 2
    assert ev[-1]["dropped"] == {} and ev[-1]["segments"] == {"restart": 1}


def test_an_iteration_jump_confirmed_by_the_next_records_is_a_segment() -> None:
    recs = _iteration_recs(n_ranks=1, slow_rank=-1, n=100)
    jumped = recs[:50] + [dict(d, iter=d["iter"] + 10**6) for d in recs[50:]]
    ev = _events(Watcher(), _with_onset(jumped))
    (seg,) = [e for e in ev if e["event"] == "segment"]
    assert seg["reason"] == "iteration_jump" and seg["job_iteration"] == 50 + 10**6
    assert ev[-1]["iterations"] == {"0": 98}


def test_a_held_record_at_the_end_is_counted_unconfirmed() -> None:
    recs = _iteration_recs(n_ranks=1, slow_rank=-1, n=40)
    ev = _events(Watcher(), _with_onset([*recs, {"rank": 0, "iter": 5, "ts": 0.1}]))
    assert ev[-1]["dropped"] == {"unconfirmed": 1}
    assert [e["line"] for e in ev if e["event"] == "unconfirmed"] == [41]


def test_ranks_beyond_the_limit_are_counted_not_followed() -> None:
    lines = _iteration_lines(n_ranks=3, slow_rank=-1)[:300]
    w = Watcher(max_ranks=2)
    ev = _events(w, lines)
    limit_events = [e for e in ev if e["event"] == "rank_limit"]
    assert len(limit_events) == 5 and limit_events[0]["rank"] == 2
    s = ev[-1]
    assert s["dropped"] == {"rank_limit": 100} and s["ranks"] == 2


@pytest.mark.slow
def test_many_distinct_ranks_stay_within_memory() -> None:
    """200,000 distinct ranks with one record each: most are refused; memory stays small."""
    code = (
        "import resource, sys\n"
        "from stragglers.detect.watch import Watcher\n"
        "w = Watcher(max_ranks=1000)\n"
        "lines = [(i + 1, b'{\"rank\": %d, \"iter\": 1, \"duration\": 1.0}' % i)"
        " for i in range(200_000)]\n"
        "w.process_lines(lines[:10])\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "w.process_lines(lines[10:])\n"
        "s = w.finish()[-1].to_dict()\n"
        "assert s['dropped'] == {'rank_limit': 199_000}, s['dropped']\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    # 1,000 followed ranks of one record each: a few MiB (before issue 8: 20 KB per rank id,
    # 3.7 GB for 200,000 ids)
    assert int(done.stdout) < 64 * 1024


def test_bad_bytes_and_long_lines_are_counted(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("STRAGGLERS_MAX_RECORD_BYTES", "1000")
    p = tmp_path / "e.jsonl"
    good = [line.encode() for line in _iteration_lines(n_ranks=1, slow_rank=-1)[:20]]
    data = b"\n".join([*good[:5], b'{"rank": 0, "iter": 5\xff, "ts": 3}', b"[" * 5000,
                       b'{"rank": 0, "iter": 1' + b"0" * 3000 + b"}", *good[5:]]) + b"\n"
    p.write_bytes(data)
    assert main(["watch", str(p), "--once"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    bad = [e for e in out if e["event"] == "bad_record"]
    assert [(e["line"], e["reason"]) for e in bad] == [(6, "not_utf8"), (7, "too_long"),
                                                       (8, "too_long")]
    s = out[-1]
    assert s["dropped"] == {"not_utf8": 1, "too_long": 2} and s["iterations"] == {"0": 19}


def _write_lines(path: Path, lines: list[str], mode: str = "a") -> None:
    with path.open(mode) as fh:
        for k in range(0, len(lines), 50):
            fh.write("\n".join(lines[k : k + 50]) + "\n")
            fh.flush()


def _follow(path: Path, expected: int, on_line=None) -> tuple[list[str], list[dict], Watcher]:
    """Follow ``path`` until ``expected`` lines arrived (or 60 s without data: a failure)."""
    got: list[str] = []
    notices: list[dict] = []
    w = Watcher()
    events: list = []
    for batch in Follower(str(path), poll=0.01, idle_timeout=60.0):
        if batch.notice is not None:
            notices.append(batch.notice.to_dict())
            events += w.notice(batch.notice)
            continue
        got += [b.decode() for _, b in batch.lines if b is not None]
        events += w.process_lines(batch.lines)
        if on_line is not None:
            on_line(len(got))
        if len(got) >= expected:
            break
    return got, notices, w


def test_follow_through_rotation(tmp_path) -> None:
    """A writer rotates the file twice (the old one kept as grow.jsonl.K, a new one in its
    place) while watch follows. (Two rotations between two polls would hide the middle file
    from any follower, as from ``tail -F``; real rotations are hours apart, so the writer
    waits until the new file is being read.)"""
    p = tmp_path / "grow.jsonl"
    lines = _iteration_lines()
    p.write_text("")
    parts = [lines[:500], lines[500:900], lines[900:]]
    reached = [threading.Event() for _ in parts]

    def writer() -> None:
        for k, part in enumerate(parts):
            if k:  # rotated with no moment without the path (link, then replace: a
                # rename, then a new file, leaves one, and a follower polling in it rightly
                # reports `file_missing` as well)
                fresh = tmp_path / "grow.jsonl.new"
                fresh.write_text("")
                os.link(p, tmp_path / f"grow.jsonl.{k}")
                os.replace(fresh, p)
            _write_lines(p, part[:10])
            reached[k].wait(timeout=120)  # the follower has read into this file
            _write_lines(p, part[10:])

    def on_line(n: int) -> None:
        for k, start in enumerate((0, 500, 900)):
            if n > start:
                reached[k].set()

    th = threading.Thread(target=writer)
    th.start()
    got, notices, w = _follow(p, len(lines), on_line)
    th.join()
    assert got == lines
    assert [n["event"] for n in notices] == ["rotated", "rotated"]
    ev = [e.to_dict() for e in w.finish()]
    s = ev[-1]
    assert s["dropped"] == {} and s["files"] == {"rotated": 2}
    assert s["iterations"] == {"0": 599, "1": 599}


def test_follow_through_truncation(tmp_path) -> None:
    """copytruncate: once watch has read the first 600 lines, the writer truncates the file
    and writes on from its start (longer than before, so only the changed first bytes show
    it)."""
    p = tmp_path / "grow.jsonl"
    lines = _iteration_lines()
    first, second = lines[:600], lines[600:]
    read_all_first = threading.Event()

    def writer() -> None:
        _write_lines(p, first)
        read_all_first.wait(timeout=120)
        _write_lines(p, second, mode="w")

    p.write_text("")
    th = threading.Thread(target=writer)
    th.start()
    got, notices, w = _follow(p, len(lines),
                              on_line=lambda n: n >= 600 and read_all_first.set())
    th.join()
    assert got == lines
    assert [n["event"] for n in notices] == ["truncated"]
    assert notices[0]["lines_read_before"] == 600
    s = w.finish()[-1].to_dict()
    assert s["files"] == {"truncated": 1} and s["dropped"] == {}


def test_follow_a_growing_file_with_partial_lines(tmp_path) -> None:
    p = tmp_path / "grow.jsonl"
    lines = _iteration_lines()
    p.write_text("\n".join(lines[:100]) + "\n")

    def writer() -> None:
        with p.open("a") as fh:
            for i in range(100, len(lines), 200):
                chunk = "\n".join(lines[i : i + 200]) + "\n"
                fh.write(chunk[:-7])  # a partial line first ...
                fh.flush()
                fh.write(chunk[-7:])  # ... completed later
                fh.flush()

    th = threading.Thread(target=writer)
    th.start()
    got, notices, w = _follow(p, len(lines))
    th.join()
    assert got == lines and notices == []
    assert [e.to_dict()["event"] for e in w.finish()] == ["summary"]
    assert list(Follower("-", stdin=io.BytesIO(b"a\nb"))) [0].lines == [(1, b"a")]


def _cli() -> list[str]:
    return [sys.executable, "-c", "import sys; from stragglers.cli import main; "
            "sys.exit(main())"]


@pytest.mark.slow
def test_closed_output_pipe_ends_quietly(tmp_path) -> None:
    """`stragglers watch f | head -1`: the reader goes away; no traceback, exit 0."""
    p = tmp_path / "many.jsonl"
    p.write_text("".join(f'{{"rank": {r}, "iter": 1, "duration": 1.0}}\n'
                         for r in range(20_000)))
    proc = subprocess.Popen([*_cli(), "watch", str(p), "--once", "--max-ranks", "20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.read(10)
    proc.stdout.close()  # the summary line (about 300 KB) no longer fits in the pipe
    err = proc.stderr.read()
    assert proc.wait() == 0 and first and err == b""


def test_unwritable_output_is_one_line(tmp_path) -> None:
    p = tmp_path / "e.jsonl"
    p.write_text("\n".join(_iteration_lines()[:50]) + "\n")
    with open("/dev/full", "w") as full:
        done = subprocess.run([*_cli(), "watch", str(p), "--once"], stdout=full,
                              stderr=subprocess.PIPE, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "stragglers watch: error: <stdout>: cannot write the output (No space left on device)"]


def test_call_records_survive_a_far_future_call_and_a_clock_step() -> None:
    lines = _call_lines()
    clean = _alarms(_events(Watcher(tracker_kwargs={"window": 64}, warmup_iters=0), lines))
    assert sorted(a[0] for a in clean) == ["onset"] * 4 + ["recovery"] * 4
    recs = [json.loads(x) for x in lines]
    # one call of rank 2 from the far future
    far = [*recs[:1000], dict(recs[1000], rank=2, ts=1e9), *recs[1000:]]
    ev = _events(Watcher(tracker_kwargs={"window": 64}, warmup_iters=0),
                 [json.dumps(d) for d in far])
    assert _alarms(ev) == clean
    assert ev[-1]["dropped"] == {"outlier": 1}
    # rank 1's clock steps 10^5 s ahead at its 1000th call (about iteration 250)
    seen = 0
    stepped = []
    for d in recs:
        if d["rank"] == 1:
            seen += 1
            if seen > 1000:
                d = dict(d, ts=d["ts"] + 1e5)
        stepped.append(d)
    ev = _events(Watcher(tracker_kwargs={"window": 64}, warmup_iters=0),
                 [json.dumps(d) for d in stepped])
    (seg,) = [e for e in ev if e["event"] == "segment"]
    assert (seg["reason"], seg["rank"]) == ("clock_step", 1)
    assert sorted((a[0], a[1]) for a in _alarms(ev)) == sorted((a[0], a[1]) for a in clean)
    assert ev[-1]["dropped"] == {}


def test_suspects_and_bad_records_carry_the_job_iteration() -> None:
    """A suspects event names the job iteration of the onset that started its profile (null
    for call records: they carry no iteration number); a bad record its own iteration number
    when it could be read, and the last one accepted before it."""
    w = Watcher(tracker_kwargs={"window": 64}, warmup_iters=0)
    ev = _events(w, _call_lines())
    (sus,) = [e for e in ev if e["event"] == "suspects"]
    first = min((e for e in ev if e["event"] == "onset"), key=lambda e: e["line"])
    assert sus["job_iteration"] is first["job_iteration"] is None
    assert sus["ts"] == first["ts"] and sus["line"] > first["line"]
    # iteration records: the onset's job iteration
    lines = _iteration_lines()
    calls = [json.dumps({"rank": 0, "type": "allreduce", "size": 8, "ts": 1000.0 + i,
                         "group": "dp0", "duration": 0.01}) for i in range(300)]
    w = Watcher(profile_calls=64, warmup_iters=0)
    ev = _events(w, lines[:700] + calls + lines[700:])
    onset = min((e for e in ev if e["event"] == "onset"), key=lambda e: e["line"])
    (sus,) = [e for e in ev if e["event"] == "suspects"]
    assert sus["job_iteration"] == onset["job_iteration"] and abs(onset["job_iteration"] - 300) <= 2
    bad = ['{"rank": 0, "iter": 7, "duration": "slow"}', "{not json"]
    w = Watcher()
    ev = [e.to_dict() for e in w.process_lines(
        list(enumerate(_iteration_lines(n_ranks=1)[:5] + bad, start=1)))]
    assert [(e["event"], e["job_iteration"], e["after_job_iteration"]) for e in ev] == [
        ("bad_record", 7, 4), ("bad_record", None, 4)]


def test_an_onset_soon_after_the_start_is_not_hidden_by_the_warm_up() -> None:
    """The level settles after a 20-iteration warm-up; the job slows down at iteration 130
    (inside what the former 200-iteration minimum hid): found with the default minimum."""
    rng = np.random.default_rng(8)
    level = np.concatenate([1.0 + np.exp(-np.arange(20) / 5.0), np.ones(110),
                            np.full(200, 1.3), np.ones(200)])
    x = level * np.exp(rng.normal(0, 0.01, level.size))
    lines = [json.dumps({"rank": 0, "iter": i, "duration": float(v)}) for i, v in enumerate(x)]
    ev = _events(Watcher(), lines)
    onsets = [e for e in ev if e["event"] == "onset"]
    assert len(onsets) == 1 and abs(onsets[0]["job_iteration"] - 130) <= 3
    assert [e["event"] for e in _events(Watcher(warmup_iters=200), lines)
            if e["event"] in ("onset", "change")] == []
