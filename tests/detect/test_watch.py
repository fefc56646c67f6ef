"""Streaming watcher: iteration and call records, bad input, following a growing file."""

from __future__ import annotations

import io
import json
import threading
import time

import numpy as np

from stragglers.cli import main
from stragglers.detect.watch import Watcher, follow_lines


def _iteration_lines(n_ranks: int = 2, slow_rank: int = 1, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    lines = []
    ts = dict.fromkeys(range(n_ranks), 0.0)
    for it in range(600):
        for r in range(n_ranks):
            d = 0.5 * np.exp(rng.normal(0, 0.02))
            if r == slow_rank and 300 <= it < 450:
                d *= 1.5
            ts[r] += d
            lines.append(json.dumps({"rank": r, "iter": it, "ts": round(ts[r], 6)}))
    return lines


def _events(watcher: Watcher, lines: list[str]) -> list[dict]:
    out = []
    for i, text in enumerate(lines, start=1):
        out += watcher.process_line(text, i)
    return out


def test_iteration_records_onset_and_recovery() -> None:
    w = Watcher()
    ev = _events(w, _iteration_lines())
    kinds = [(e["event"], e["rank"]) for e in ev]
    assert kinds == [("onset", 1), ("recovery", 1)]
    onset, rec = ev
    # durations come from ts differences: the first record has none, so iteration index 299
    # of the detector is iteration 300 of the job
    assert abs(onset["iteration"] - 299) <= 2 and onset["declared_iteration"] - 299 <= 10
    assert abs(onset["severity"] - 1 / 3) < 0.03
    assert onset["ts"] is not None
    assert abs(rec["iteration"] - 449) <= 2
    s = w.summary()
    assert s["records"] == 1200 and s["bad"] == 0 and s["iterations"] == {"0": 599, "1": 599}
    assert s["slow_ranks"] == []


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
    w = Watcher(tracker_kwargs={"window": 64})
    ev = _events(w, _call_lines())
    onsets = [e for e in ev if e["event"] == "onset"]
    assert sorted(e["rank"] for e in onsets) == [0, 1, 2, 3]
    # the tracker finds the first anchor at call 0, so detector index i is job iteration i
    assert all(e["iteration"] == 200 and e["declared_iteration"] - 200 <= 10 for e in onsets)
    (sus,) = [e for e in ev if e["event"] == "suspects"]
    assert sus["onset_ranks"] == [0, 1, 2, 3] and sus["profiled_calls"] == 256
    assert [(g["group"], g["verdict"]) for g in sus["groups"]] == [("dp1", "slow_transfer")]
    # two comparable groups: the class median is their mean (1 + 1.6) / 2
    assert abs(sus["groups"][0]["transfer_ratio"] - 1.6 / 1.3) < 0.03
    recs = [e for e in ev if e["event"] == "recovery"]
    assert sorted(e["rank"] for e in recs) == [0, 1, 2, 3]
    assert w.summary()["iterations"] == {str(r): 399 for r in range(4)}


def test_bad_and_out_of_order_records_are_counted() -> None:
    lines = _iteration_lines(n_ranks=1, slow_rank=-1)[:50]
    lines.insert(10, "{not json")
    lines.insert(20, '{"rank": 0, "iter": 3, "ts": 1.0}')  # iteration goes backwards
    lines.insert(30, '{"rank": 0, "type": "allreduce", "ts": 1.0}')  # no size
    lines += ['{"rank": 0, "type": "allreduce", "size": 8, "ts": 5.0}',
              '{"rank": 0, "type": "allreduce", "size": 8, "ts": 4.0}',  # call goes backwards
              '{"src": 0, "dst": 1, "latency": 0.1}', "", "[]"]
    w = Watcher(report_limit=2)
    ev = _events(w, lines)
    assert [e["event"] for e in ev] == ["bad_record", "out_of_order", "bad_record",
                                        "out_of_order"]
    assert ev[0]["line"] == 11 and "not valid JSON" in ev[0]["error"]
    assert "field 'size'" in ev[2]["error"]
    s = w.summary()
    assert (s["bad"], s["out_of_order"], s["ignored"]) == (3, 2, 1)
    assert s["records"] == 50 + 1 + 2 + 1  # valid records, including the out-of-order ones


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


def test_follow_a_growing_file(tmp_path) -> None:
    p = tmp_path / "grow.jsonl"
    lines = _iteration_lines()
    p.write_text("\n".join(lines[:100]) + "\n")

    def writer() -> None:
        with p.open("a") as fh:
            for i in range(100, len(lines), 200):
                time.sleep(0.05)
                chunk = "\n".join(lines[i : i + 200]) + "\n"
                fh.write(chunk[:-7])  # a partial line first ...
                fh.flush()
                time.sleep(0.02)
                fh.write(chunk[-7:])  # ... completed later
                fh.flush()

    th = threading.Thread(target=writer)
    th.start()
    w = Watcher()
    events = []
    got = 0
    for lineno, text in follow_lines(str(p), once=False, poll=0.01, idle_timeout=0.5):
        got += 1
        events += w.process_line(text, lineno)
    th.join()
    assert got == len(lines)
    assert w.bad == 0
    assert [e["event"] for e in events] == ["onset", "recovery"]
    assert list(follow_lines("-", once=True, stdin=io.StringIO("a\nb\n"))) == [(1, "a\n"),
                                                                                 (2, "b\n")]
