"""The live S2 loop on the real example job: removed share against the optimum, prediction
error, give-back time, escalations (issue 30; docs/benchmarks/mitigate.md).

Each round runs the example job (dp 2 x pp 1, gloo, 12 micro-batches per replica, each rank
pinned to its own core) twice, with rank 0 (DP replica 0) slowed xFACTOR (``--slow-mode
sleep``) in steps WARMUP + K .. WARMUP + 2K - 1 (``--inject-period K``):

* **fail-slow**: without mitigation (WARMUP + 2K steps);
* **mitigated**: with ``stragglers mitigate run`` beside it (in this process; S2's overhead
  set to 0.5 s of accumulated slowdown, a short job's scale), WARMUP + 3K steps: the
  straggler recovers at WARMUP + 2K and the loop must give the micro-batches back.

The figures are of the loop's first action in the slow phase (:func:`injection_action`);
an action before the onset answered the machine's own imbalance (nothing injected yet) and
is reported apart, its prediction judged on the steps that ran it before the onset
(:func:`pre_onset_prediction`).

Figures per round: *removed* = (fail-slow - mitigated) / (fail-slow - healthy) over the slow
steps after the loop's first action (healthy = the steps before the onset, both runs), from
step times in units of the same step's *reference* (``M`` times the faster replica's compute
per micro-batch, measured by the probes: the machine's other load stretches every rank at
once and cancels) and raw; the *optimum* is the exact split's (``[8, 16]`` for x2: 66.7%;
``[10, 14]`` for x1.5: 50%), the nominal one (equal replicas), and beside it the *measured
optimum* at the replicas' own speeds in the fail-slow run (:func:`measured_optimum`: a
machine whose replicas differ with nothing injected); *prediction error*:
``predict_microbatch`` (the what-if simulator) for the split the loop applied first (and,
beside it, for the split the simulator finds optimal) on slow steps before the action (the
mitigated run's own when there are 3 or more and all ran the even split, else the fail-slow
run's: :func:`prediction_source`), against the step measured on the steps that ran that
split (up to the next action: what the prediction was for; the after window, later splits
included, beside it), brought to the load of the steps predicted from; *removed, paired*
(:func:`paired_removal`): the mitigated run's own steps after the action, each against
itself at the even split with the replicas' speeds measured in it, and the best single split
at those speeds (no fail-slow run enters: at load 6-8 two fail-slow runs of x1.5 differ by
as much as the effect; :func:`reference_spread` prints that spread for the rounds run);
*give-back*: steps from the recovery to the step from which the job ran the even split to
its end ("never": it ended on another split), with the first return to even after the
recovery where it was left again and the split that left it (a new episode: the replica it
cuts says whose), and each departure from even after the recovery classed as the machine's
(a replica measured slower at even with nothing injected, the split right for it) or the
loop's (:func:`departures`), with the give-back counted to the first return to even when
every later departure was the machine's; *escalations*: S3 / S4 decisions of the loop.
``--log DIR`` writes each round's per-step decision log (JSON lines).

    python bench/bench_mitigate_live.py                     # x1.5 and x2, 3 rounds each
    python bench/bench_mitigate_live.py --factors 2 --repeats 1 --k 20 --hidden 64
    python bench/bench_mitigate_live.py --load 5   # 5 busy loops (not pinned) beside it

``--load N`` starts N busy-loop processes (not pinned: the scheduler spreads them over the
cores) before the rounds and stops them after, so that the load regime is the benchmark's,
not the machine's; each round prints the 1-minute load average at its start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from stragglers.mitigate.costs import load_costs
from stragglers.mitigate.follow_job import JobFollower
from stragglers.mitigate.live import LiveConfig, LiveController
from stragglers.mitigate.microbatch import solve_microbatches

WARMUP = 5
PIN_CPUS = True  # --pin-cpus: rank r on CPU r, so a sleeping rank lends no core to the other
HIDDEN = 256  # --hidden
MODEL = ["--dp", "2", "--pp", "1", "--heads", "2", "--seq-len", "64",
         "--vocab-size", "128", "--microbatches", "12", "--micro-batch-size", "4",
         "--gc-interval", "0", "--warmup-steps", str(WARMUP)]


def start_load(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` busy-loop processes, not pinned; stop them with :func:`stop_load`."""
    code = "x = 0\nwhile True:\n    x = (x * 1103515245 + 12345) & 0xFFFFFFFF\n"
    return [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) for _ in range(n)]


def stop_load(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _job(out: Path, k: int, factor: float, action: Path | None, mode: str, blocks: int = 2
         ) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "stragglers.testbed.job", "--out-dir", str(out),
            "--steps", str(WARMUP + blocks * k), "--inject-period", str(k), "--slow-rank", "0",
            "--slow-factor", str(factor), "--slow-mode", mode, *MODEL, "--hidden", str(HIDDEN)]
    if PIN_CPUS:
        argv.append("--pin-cpus")
    if action is not None:
        argv += ["--action-file", str(action)]
    log = (out.parent / f"{out.name}.log").open("w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def _wait(job: subprocess.Popen[bytes], out: Path) -> dict[str, Any]:
    if job.wait(timeout=900) != 0:
        raise SystemExit((out.parent / f"{out.name}.log").read_text()[-3000:])
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def _times(summary: dict[str, Any]) -> dict[int, float]:
    first = summary["first_step"]
    return {first + i: t for i, t in enumerate(summary["step_times"])}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _phases(run: Path, summary: dict[str, Any]) -> tuple[dict[int, float], dict[int, float]]:
    """Raw step times, and step times in units of the same step's *reference*: M times the
    fastest replica's compute per micro-batch (what the other load of the machine does to
    every rank at once cancels in the ratio)."""
    raw = _times(summary)
    follower = JobFollower(run)
    follower.poll()
    table = follower.table()
    m = int(table.microbatches[:, 0].sum()) // table.microbatches.shape[0]
    ref = m * np.nanmin(table.per_microbatch(), axis=0)
    norm = {int(s): raw[int(s)] / float(r) for s, r in zip(table.steps, ref, strict=True)
            if int(s) in raw}
    return raw, norm


def _factor(run: Path, lo: int, hi: int) -> float:
    """Replica 0's compute per micro-batch over replica 1's, median over steps lo..hi-1: the
    straggler as it ran (a sleeping rank wakes late on a loaded machine: above nominal)."""
    follower = JobFollower(run)
    follower.poll()
    table = follower.table(after=lo - 1)
    per_mb = table.per_microbatch()[:, table.steps < hi]
    return float(np.nanmedian(per_mb[0] / per_mb[1]))


def split_account(run: Path, summary: dict[str, Any], lo: int, hi: int, split: list[int],
                  before: tuple[int, int] | None) -> dict[str, float]:
    """Where the removed share of the steps ``lo..hi-1`` that ran ``split`` goes (the
    mitigated run's probes and step times): the straggler's effective factor on those steps
    (replica 0's compute per micro-batch over replica 1's) and on the slow steps before the
    action (``before``), the removal the split gives at the factor it met
    (``(12 f - max(m_0 f, m_1)) / (12 f - 12)``, compute only), the step's critical compute
    (``max_i m_i t_i`` per step, median) above the larger of the replicas' median compute
    (``max_i m_i median(t_i)``: the steps' jitter where the split balances the replicas),
    and the seconds of each step outside compute (step - critical compute)."""
    nan = float("nan")
    raw = _times(summary)
    follower = JobFollower(run)
    follower.poll()
    table = follower.table()
    per_mb, ran = table.per_microbatch(), table.microbatches.astype(np.float64)
    steps = table.steps

    def fac(a: int, b: int) -> float:
        k = (steps >= a) & (steps < b)
        return float(np.nanmedian(per_mb[0, k] / per_mb[1, k])) if k.any() else nan

    k = (steps >= lo) & (steps < hi)
    if k.sum() < 3:
        return {"factor_split": nan, "factor_before": nan, "split_removal_at_factor": nan,
                "jitter": nan, "outside_compute_s": nan}
    f = fac(lo, hi)
    m0, m1 = split
    crit = np.nanmax(per_mb[:, k] * ran[:, k], axis=0)
    medcrit = float(np.nanmax(np.asarray(split, dtype=np.float64)
                              * np.nanmedian(per_mb[:, k], axis=1)))
    step = np.asarray([raw.get(int(x), nan) for x in steps[k]])
    return {"factor_split": f, "factor_before": fac(*before) if before is not None else nan,
            "split_removal_at_factor": (12 * f - max(m0 * f, m1)) / (12 * f - 12),
            "jitter": float(np.median(crit)) / medcrit - 1,
            "outside_compute_s": float(np.nanmedian(step - crit))}


def _window(times: dict[int, float], lo: int, hi: int) -> float:
    return _median([times[s] for s in range(lo, hi) if s in times])


def windows(onset: int, at: int, recovery: int, min_before: int = 3
            ) -> tuple[tuple[int, int] | None, tuple[int, int]]:
    """Step windows ``[lo, hi)``: the mitigated run's slow steps before its first action
    (from two steps after the onset, the detector's transition left out; None when fewer
    than ``min_before``: the action came within ``min_before + 1`` steps of the onset), and
    the slow steps after the action (up to the recovery)."""
    lo = onset + 2
    before = (lo, at) if at - lo >= min_before else None
    return before, (at + 1, recovery)


def giveback(applied: list[dict[str, Any]], recovery: int, even: list[int]) -> int | None:
    """Steps from the recovery to the step from which the job ran the even split to its
    end (0 when it was even already; None when it ended on another split): a return to even
    followed by a new departure does not count."""
    if not applied or applied[-1]["assignment"] != even:
        return None
    since = applied[-1]["step"]  # the last change: to even
    return max(since - recovery, 0)


def first_even(applied: list[dict[str, Any]], recovery: int, even: list[int]
               ) -> tuple[int, list[int], int] | None:
    """The first return to even after the recovery that did not last: (steps from the
    recovery to it, the split that left it, the step it was left), or None when the first
    return lasted or none came.  The split that left even says whose episode came next: the
    replica it cuts (the same straggler slow again, or another one the machine slowed)."""
    back = [i for i, a in enumerate(applied) if a["assignment"] == even]
    # the split in force at the recovery counts: even already then is a return at 0
    last = max((i for i, a in enumerate(applied) if a["step"] <= recovery), default=None)
    for i in back:
        if i + 1 < len(applied) and (applied[i]["step"] > recovery or i == last):
            return (max(applied[i]["step"] - recovery, 0), applied[i + 1]["assignment"],
                    applied[i + 1]["step"])
    return None


def gb_text(row: dict[str, Any]) -> str:
    """A round's give-back as the table prints it: the steps to the even split the job kept
    to its end, and, where an earlier return to even was left again, that return and the
    split that left it ("never (even +4, then [13, 11] at 87)")."""
    if row.get("no_action"):
        return "no action"
    g = row["giveback_steps"]
    text = "never" if g is None else str(g)
    first = row.get("giveback_first")
    if first is not None:
        text += f" (even +{first[0]}, then {first[1]} at {first[2]})"
    return text


def gb_split_text(row: dict[str, Any]) -> str:
    """The give-back with the machine's departures set aside, and the departures from even
    after the recovery by whose they were ("4; machine's 1, loop's 0")."""
    if row.get("no_action"):
        return "no action"
    g = row.get("giveback_loop")
    left = row.get("departures") or []
    mach = sum(d["whose"] == "machine" for d in left)
    return (f"{'never' if g is None else g}; machine's {mach}, "
            f"loop's {len(left) - mach}")


def measured_optimum(steps: np.ndarray, per_mb: np.ndarray, onset: int, recovery: int,
                     m: int = 12) -> dict[str, Any]:
    """The optimum against the replicas' measured speeds (a machine whose replicas differ
    with nothing injected): from a run at the even split throughout (the fail-slow run),
    each replica's compute per micro-batch relative to the step's faster replica (the unit
    of the removed share: machine-wide load cancels), median over the steps before the
    onset (``h``, from WARMUP) and over the slow steps (``s``, onset + 2 .. recovery - 1).
    The healthy even step ``H = max h``, the slow even step ``S = max s``, the exact split
    for ``s`` and its step ``O = min max_i m_i s_i / m``; the share it removes ``(S - O) /
    (S - H)`` (NaN when the injection added nothing over the healthy step, ``S <= H``).
    With equal replicas (``h = 1``) and replica 0 x f (``s = (f, 1)``) it is the nominal
    :func:`optimum_removed`."""
    steps = np.asarray(steps)
    t = np.asarray(per_mb, dtype=np.float64)
    rel = t / np.nanmin(t, axis=0)
    healthy = (steps >= WARMUP) & (steps < onset)
    slow = (steps >= onset + 2) & (steps < recovery)
    nan = float("nan")
    if healthy.sum() < 3 or slow.sum() < 3:
        return {"split": None, "share": nan, "healthy": [], "slow": []}
    h = np.nanmedian(rel[:, healthy], axis=1)
    sl = np.nanmedian(rel[:, slow], axis=1)
    res = solve_microbatches(sl, m * sl.size)
    big_h, big_s, opt = float(h.max()), float(sl.max()), float(res.makespan) / m
    return {"split": res.assignment.tolist(),
            "share": (big_s - opt) / (big_s - big_h) if big_s - big_h > 1e-9 else nan,
            "healthy": [round(float(v), 4) for v in h], "slow": [round(float(v), 4) for v in sl]}


def departures(applied: list[dict[str, Any]], steps: np.ndarray, per_mb: np.ndarray,
               ran: np.ndarray, recovery: int, even: list[int]) -> list[dict[str, Any]]:
    """Each change of split away from even applied after the recovery (nothing injected
    then), and whose it was: the replicas' compute per micro-batch relative to the step's
    faster replica, median over the last 10 steps that ran even before it (from the
    recovery; at least 3); the machine's (``machine``) when the split it moved to is
    faster than even at those medians (a replica slower with nothing injected, and the
    split right for it), else the loop's (``loop``: no such imbalance, or fewer than 3
    steps at even to show one)."""
    steps = np.asarray(steps)
    t = np.asarray(per_mb, dtype=np.float64)
    at_even = np.all(np.asarray(ran) == np.asarray(even)[:, None], axis=0)
    out = []
    for i, a in enumerate(applied):
        prev = applied[i - 1]["assignment"] if i else even
        if a["step"] <= recovery or a["assignment"] == even or prev != even:
            continue
        k = at_even & (steps >= recovery) & (steps < a["step"])
        idx = np.flatnonzero(k)[-10:]
        rel = (np.nanmedian(t[:, idx] / np.nanmin(t[:, idx], axis=0), axis=1)
               if idx.size >= 3 else None)
        split = np.asarray(a["assignment"], dtype=np.float64)
        machine = rel is not None and float(np.max(split * rel)) < float(
            np.max(np.asarray(even) * rel))
        out.append({"step": a["step"], "split": a["assignment"],
                    "at_even": [round(float(v), 3) for v in rel] if rel is not None else None,
                    "whose": "machine" if machine else "loop"})
    return out


def giveback_loop(applied: list[dict[str, Any]], recovery: int, even: list[int],
                  left: list[dict[str, Any]]) -> int | None:
    """The give-back with the machine's departures set aside: steps from the recovery to
    the first return to even after it (the even split in force at it: 0) when every later
    departure from even (``left``, :func:`departures`) was the machine's; else
    :func:`giveback` (the even split kept to the end)."""
    if any(d["whose"] == "loop" for d in left):
        return giveback(applied, recovery, even)
    last = max((i for i, a in enumerate(applied) if a["step"] <= recovery), default=None)
    for i, a in enumerate(applied):
        if a["assignment"] == even and (a["step"] > recovery or i == last):
            return max(a["step"] - recovery, 0)
    return giveback(applied, recovery, even)


def injection_action(applied: list[dict[str, Any]], onset: int, recovery: int) -> int | None:
    """The index of the loop's first action in the slow phase (``onset <= step <
    recovery``): the one that answers the injected straggler, whose split the removed share
    and the prediction error are of. An action before the onset answered the machine's own
    imbalance (nothing injected yet: the loop cannot know of the injection), and one after
    the recovery is no mitigation of it; None when no action fell in the slow phase."""
    return next((i for i, a in enumerate(applied) if onset <= a["step"] < recovery), None)


def prediction_source(onset: int, at: int, recovery: int, even_steps: set[int],
                      min_steps: int = 3) -> tuple[str, tuple[int, int]]:
    """Which run's steps the prediction of the split applied at ``at`` is made from: the
    conditions the loop decided under. The mitigated run's own slow steps before the action
    (from ``onset + 2``, the detector's transition left out) when there are ``min_steps``
    or more and all ran the even split (the what-if scales a trace that ran ``m`` micro-
    batches per replica); else the fail-slow run's slow steps (the same injection at the
    even split, ``onset + 2`` up to 10 steps)."""
    lo = onset + 2
    steps = range(lo, at)
    if len(steps) >= min_steps and all(s in even_steps for s in steps):
        return "mitigated run", (lo, at)
    return "fail-slow run", (lo, min(lo + 10, recovery))


def split_steps(applied: list[dict[str, Any]], i: int, end: int) -> tuple[int, int]:
    """The steps ``[lo, hi)`` that ran action ``i``'s split: from the step after it up to
    the next action or ``end`` (the onset for an action before it, the recovery for one in
    the slow phase)."""
    nxt = applied[i + 1]["step"] if i + 1 < len(applied) else end
    return applied[i]["step"] + 1, min(nxt, end)


def paired_removal(steps: np.ndarray, per_mb: np.ndarray, ran: np.ndarray,
                   step_s: np.ndarray, healthy: tuple[int, int], window: tuple[int, int],
                   before: tuple[int, int] | None = None) -> dict[str, Any]:
    """The removal measured on the mitigated run's own steps, each against itself at the
    even split: a step of ``window`` ran ``max_i m_i t_i`` of critical compute (``t_i``
    the replica's measured compute per micro-batch in that step, ``m_i`` what it ran) and
    ``step - max_i m_i t_i`` outside it; at the even split the same step would have run
    ``M max_i t_i`` (``M`` micro-batches per replica) and the same outside. In units of the
    step's reference ``M min_i t_i`` (the machine's load on every rank cancels, as in the
    normalised figures), medians over the steps: the even step ``E`` of the window, the
    step run ``A``, the healthy even step ``H`` (``healthy``, the run's steps before the
    onset, at the even split by the same counterfactual), and the best single split for the
    window at those same speeds ``O`` (every split of two replicas; for more, the exact
    split at the window's median speeds). The removed share ``(E - A) / (E - H)``, the
    optimum's ``(E - O) / (E - H)``, and the share of it the loop reached. No fail-slow run
    enters: the straggler's strength, which differs between two runs of one injection by as
    much as the effect at load 6-8, is the same on both sides. Assumes a replica's speed in
    a step does not depend on the split it ran (the per-round table's *factor before ->
    on the split's steps* shows whether it held); ``before`` (the slow steps at the even
    split before the action) gives the other extreme beside it, ``removed_before_speeds``:
    the even step with each replica's speed relative to the fastest as measured there (as
    if the split alone had caused every change of the replicas' relative speeds since;
    NaN with fewer than 3 such steps)."""
    steps = np.asarray(steps)
    t = np.asarray(per_mb, dtype=np.float64)
    m = np.asarray(ran, dtype=np.float64)
    st = np.asarray(step_s, dtype=np.float64)
    big_m = float(np.nansum(m[:, 0])) / m.shape[0]
    unit = big_m * np.nanmin(t, axis=0)
    outside = st - np.nanmax(m * t, axis=0)
    even = (outside + big_m * np.nanmax(t, axis=0)) / unit
    nan = float("nan")
    h = (steps >= healthy[0]) & (steps < healthy[1]) & np.isfinite(even)
    w = (steps >= window[0]) & (steps < window[1]) & np.isfinite(even) & np.isfinite(st)
    if h.sum() < 3 or w.sum() < 3:
        return {"removed": nan, "optimum": nan, "of_optimum": nan, "split": None,
                "steps": int(w.sum())}
    big_h = float(np.median(even[h]))
    big_e = float(np.median(even[w]))
    big_a = float(np.median(st[w] / unit[w]))
    tw, ow, uw = t[:, w], outside[w], unit[w]
    total = int(round(big_m * t.shape[0]))
    if t.shape[0] == 2:
        cands = np.stack([np.arange(1, total), total - np.arange(1, total)], axis=1)
    else:
        rel = np.median(tw / tw.min(axis=0), axis=1)
        cands = solve_microbatches(rel, total).assignment[None, :]
    # each candidate split's median step over the window, at the speeds measured
    runs = np.median((ow[None, :] + np.max(cands[:, :, None] * tw[None, :, :], axis=1))
                     / uw[None, :], axis=1)
    best = int(np.argmin(runs))
    big_o = float(runs[best])
    gap = big_e - big_h
    removed = (big_e - big_a) / gap if gap > 1e-9 else nan
    optimum = (big_e - big_o) / gap if gap > 1e-9 else nan
    alt = nan
    b = (np.zeros_like(w) if before is None
         else (steps >= before[0]) & (steps < before[1]) & np.isfinite(even))
    if b.sum() >= 3:
        rel_b = np.median(t[:, b] / t[:, b].min(axis=0), axis=1)
        rel_w = np.median(tw / tw.min(axis=0), axis=1)
        t_alt = tw * (rel_b / rel_w)[:, None]
        big_e2 = float(np.median((ow + big_m * t_alt.max(axis=0)) / uw))
        alt = (big_e2 - big_a) / (big_e2 - big_h) if big_e2 - big_h > 1e-9 else nan
    return {"removed": removed, "optimum": optimum,
            "of_optimum": removed / optimum if optimum > 1e-9 else nan,
            "split": cands[best].tolist(), "steps": int(w.sum()),
            "removed_before_speeds": alt}


def reference_spread(refs: list[tuple[dict[int, float], float, tuple[int, int]]]
                     ) -> list[float]:
    """The cross-run figure's own noise: the removed share it gives between two fail-slow
    runs of one factor (nothing removed in either: the truth is 0). ``refs`` per round: the
    fail-slow run's normalised step times, its healthy median, and the round's after
    window. For each ordered pair of rounds (a as the reference, b in the mitigated run's
    place, b's window; ``H`` the mean of the two runs' healthy medians): ``(S_a - S_b) /
    (S_a - H)``; NaN where a window holds fewer than 3 steps."""
    out = []
    for ia, (a, ha, _) in enumerate(refs):
        for ib, (b, hb, win) in enumerate(refs):
            if ia == ib:
                continue
            sa = [a[s] for s in range(*win) if s in a]
            sb = [b[s] for s in range(*win) if s in b]
            if len(sa) < 3 or len(sb) < 3:
                out.append(float("nan"))
                continue
            big_sa, big_sb = statistics.median(sa), statistics.median(sb)
            big_h = (ha + hb) / 2
            out.append((big_sa - big_sb) / (big_sa - big_h) if big_sa - big_h > 1e-9
                       else float("nan"))
    return out


def optimum_removed(factor: float, m: int = 12) -> tuple[list[int], float]:
    """The exact split for replica 0 x``factor`` of two, and the share of the slowdown it
    removes: (m f - makespan) / (m f - m)."""
    res = solve_microbatches([factor, 1.0], 2 * m)
    return res.assignment.tolist(), (m * factor - res.makespan) / (m * factor - m)


def running_cpu() -> int:
    """The CPU this process last ran on (field 39 of ``/proc/self/stat``; -1 elsewhere)."""
    try:
        stat = Path("/proc/self/stat").read_text()
    except OSError:
        return -1
    return int(stat.rsplit(")", 1)[1].split()[36])


def step_table(run: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """A run's per-step record for the log: step, each replica's compute seconds per
    micro-batch and micro-batches run, the step's wall time (the job's summary)."""
    follower = JobFollower(run)
    follower.poll()
    table = follower.table()
    raw = _times(summary)
    per_mb = table.per_microbatch()
    return {"steps": table.steps.tolist(),
            "per_mb_s": [[round(float(x), 6) for x in row] for row in per_mb],
            "ran": table.microbatches.tolist(),
            "step_s": [raw.get(int(s)) for s in table.steps]}


def logged_advance(ctl: LiveController, log: Any) -> None:
    """Wrap ``ctl.advance`` so that each call that fed new steps writes one JSON line to
    ``log``: the steps fed, each replica's seconds per micro-batch and the micro-batches it
    ran in the last of them, whether S2 is engaged and the episode open, the split in
    effect, and the rebalancer's last decision with its reason, estimate and noise."""
    advance = ctl.advance

    def wrapped() -> None:
        before = ctl.state.fed_until
        cpu0 = time.process_time()
        advance()
        if ctl.state.fed_until == before:
            return
        cpu_ms = (time.process_time() - cpu0) * 1e3
        rb = ctl.rebalancer
        row = rb._times[-1] if rb._times.shape[0] else np.zeros(0)
        ran = rb._ran[-1] if rb._ran.shape[0] else np.zeros(0)
        note = getattr(rb, "last_plan", None)  # (absent in older versions)
        log.write(json.dumps({
            "steps": [before + 1, ctl.state.fed_until],
            "per_mb_s": [round(float(x), 6) for x in row],
            "ran": [None if not np.isfinite(x) else int(x) for x in ran],
            "engaged": ctl.state.engaged, "episode_open": ctl.state.episode_open,
            "counts": list(ctl.state.counts),
            "plan": note.to_dict() if note is not None and note.step == ctl.state.fed_until
            else None,
            "changes": rb.changes, "reverted": rb.reverted, "held_back": rb.held_back,
            "advance_cpu_ms": round(cpu_ms, 3), "on_cpu": running_cpu(),
            "load": round(os.getloadavg()[0], 2)}) + "\n")
        log.flush()

    ctl.advance = wrapped  # type: ignore[method-assign]


def one_round(tmp: Path, r: int, k: int, factor: float, costs: Path, mode: str,
              log_dir: Path | None = None) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    onset, recovery = WARMUP + k, WARMUP + 2 * k
    slow_run = tmp / f"slow{r}"
    slow = _wait(_job(slow_run, k, factor, None, mode), slow_run)
    action = tmp / f"action{r}.json"
    out = tmp / f"mitigated{r}"
    job = _job(out, k, factor, action, mode, blocks=3)
    records: list[dict[str, Any]] = []
    log = None
    if log_dir is not None:
        log = (log_dir / f"x{factor:g}-round{r}.jsonl").open("w")

    def emit(rec: dict[str, Any]) -> None:
        records.append(rec)
        if log is not None:  # the loop's own records, between the steps' lines
            log.write(json.dumps({"record_of_loop": rec}, default=str) + "\n")

    try:
        ctl = LiveController(LiveConfig(job_dir=out, action_path=action,
                                        strategies=load_costs(costs), idle_timeout_s=300),
                             emit)
        if log is not None:
            logged_advance(ctl, log)
        end = ctl.run()
    finally:
        mitigated = _wait(job, out)
        if log is not None:
            log.close()
    if log_dir is not None:
        (log_dir / f"x{factor:g}-round{r}.steps.json").write_text(json.dumps(
            {"fail_slow": step_table(slow_run, slow), "mitigated": step_table(out, mitigated),
             "onset": onset, "recovery": recovery}) + "\n")
    cpu = end.get("controller_cpu") or {}
    applied = end["job"]["applied"] if end["job"] else []
    s_raw, s_norm = _phases(slow_run, slow)
    m_raw, m_norm = _phases(out, mitigated)
    healthy_n = _median([t for run in (s_norm, m_norm) for s, t in run.items()
                         if WARMUP <= s < onset])
    healthy_s = _median([t for run in (s_raw, m_raw) for s, t in run.items()
                         if WARMUP <= s < onset])
    slow_tab, mit_tab = step_table(slow_run, slow), step_table(out, mitigated)
    slow_healthy_n = _window(s_norm, WARMUP, onset)
    i0 = injection_action(applied, onset, recovery)
    if i0 is None:  # a round in the table (nothing removed by an action), not an abort
        decisions = [x for x in records if x["record"] != "watch"]
        print(f"round {r}: the controller applied no action in the slow phase (actions "
              f"{[(a['step'], a['assignment']) for a in applied]}); its decisions: "
              f"{decisions}", file=sys.stderr, flush=True)
        return {**no_action_row(load0, healthy_s, healthy_n, s_raw, s_norm, m_raw, m_norm,
                                onset, recovery, _factor(slow_run, onset + 2, recovery),
                                [x["strategy"] for x in records if x["record"] == "decision"
                                 and x["strategy"] not in ("S1", "S2")]),
                "splits": [a["assignment"] for a in applied], "actions": len(applied),
                "measured_optimum": measured_optimum(np.asarray(slow_tab["steps"]),
                                                     np.asarray(slow_tab["per_mb_s"]),
                                                     onset, recovery),
                "_ref": (s_norm, slow_healthy_n, (onset + 2, recovery)),
                "paired": paired_removal(
                    np.asarray(mit_tab["steps"]),
                    np.asarray(mit_tab["per_mb_s"], dtype=np.float64),
                    np.asarray(mit_tab["ran"]),
                    np.asarray([np.nan if x is None else x for x in mit_tab["step_s"]],
                               dtype=np.float64), (WARMUP, onset), (onset + 2, recovery))}
    at = applied[i0]["step"]
    even = [12, 12]
    mit_steps = np.asarray(mit_tab["steps"])
    mit_ran = np.asarray(mit_tab["ran"])
    even_steps = {int(s) for s, ok in zip(mit_steps, np.all(mit_ran == 12, axis=0),
                                          strict=True) if ok}
    back = giveback(applied, recovery, even)
    left_after = departures(applied, np.asarray(mit_tab["steps"]),
                            np.asarray(mit_tab["per_mb_s"], dtype=np.float64),
                            np.asarray(mit_tab["ran"]), recovery, even)
    left = first_even(applied, recovery, even)
    before, after = windows(onset, at, recovery)
    # the prediction for the split the loop applied against the injection, from the steps
    # it decided on (the mitigated run's slow steps at even, else the fail-slow run's)
    src, src_win = prediction_source(onset, at, recovery, even_steps)
    src_run, src_raw, src_norm = ((out, m_raw, m_norm) if src == "mitigated run"
                                  else (slow_run, s_raw, s_norm))
    pred, pred_opt = _predict(src_run, src_win[0], src_win[1] - 1, applied[i0]["assignment"])
    mitigated_n = _window(m_norm, *after)
    at_load = _window(src_raw, *src_win) * mitigated_n / _window(src_norm, *src_win)
    # the steps that ran the applied split (the after window may hold later splits too):
    # what the prediction was for
    first = split_steps(applied, i0, recovery)
    first_n = sum(1 for s in range(*first) if s in m_norm)
    at_load_first = (_window(src_raw, *src_win) * _window(m_norm, *first)
                     / _window(src_norm, *src_win)) if first_n >= 3 else float("nan")
    err_first = pred["after_s"] / at_load_first - 1
    err_window = pred["after_s"] / at_load - 1
    pre_onset = pre_onset_prediction(out, applied, onset, even_steps, m_raw, m_norm)
    paired = paired_removal(mit_steps, np.asarray(mit_tab["per_mb_s"], dtype=np.float64),
                            mit_ran, np.asarray([np.nan if x is None else x
                                                 for x in mit_tab["step_s"]], dtype=np.float64),
                            (WARMUP, onset), after,
                            src_win if src == "mitigated run" else None)
    escalations = [x["strategy"] for x in records if x["record"] == "decision"
                   and x["strategy"] not in ("S1", "S2")]
    # the removal on the steps that ran the first split only (against the fail-slow run's
    # same steps), and where it goes
    removed_split = ((_window(s_norm, *first) - _window(m_norm, *first))
                     / (_window(s_norm, *first) - healthy_n)) if first_n >= 3 else float("nan")
    return {
        "load_start": load0, "load_end": os.getloadavg()[0],
        "applied_step": at, "assignment": applied[i0]["assignment"], "actions": len(applied),
        "splits": [a["assignment"] for a in applied],
        "giveback_steps": back, "giveback_first": left,
        "final_split": applied[-1]["assignment"],
        "escalations": escalations,
        "healthy_s": healthy_s, "slow_s": _window(s_raw, *after),
        # within the mitigated run (adjacent windows: the least load drift on a shared machine)
        "healthy_own_s": _window(m_raw, WARMUP, onset),
        "before_own_s": _window(m_raw, *before) if before is not None else float("nan"),
        "mitigated_s": _window(m_raw, *after), "healthy_n": healthy_n,
        "slow_n": _window(s_norm, *after), "mitigated_n": mitigated_n,
        "effective_factor": _factor(slow_run, onset + 2, recovery),
        "prediction_source": src, "predicted_after_s": pred["after_s"],
        "measured_after_at_load_s": at_load,
        # on the steps that ran the split (what it was for); the after window when fewer
        # than 3 ran it
        "prediction_error": err_first if first_n >= 3 else err_window,
        "prediction_error_window": err_window,
        "prediction_error_split_steps": err_first,
        "pre_onset": pre_onset, "paired": paired,
        "_ref": (s_norm, slow_healthy_n, after),
        "split_steps": first_n,
        "predicted_optimum_split": pred_opt["assignment"],
        "predicted_optimum_after_s": pred_opt["after_s"],
        "prediction_error_optimum": pred_opt["after_s"] / at_load - 1,
        "removed_split_steps": removed_split,
        **split_account(out, mitigated, *first, applied[i0]["assignment"], before),
        # the machine's own imbalance, nothing injected: replica 0 over replica 1 per
        # micro-batch before the onset and after the recovery (what a give-back meets)
        "ratio_before": _factor(out, WARMUP, onset),
        "ratio_after": _factor(out, recovery + 2, recovery + 10 ** 6),
        # the optimum at the replicas' measured speeds (the fail-slow run: even throughout)
        "measured_optimum": measured_optimum(np.asarray(slow_tab["steps"]),
                                             np.asarray(slow_tab["per_mb_s"]), onset,
                                             recovery),
        # departures from even after the recovery: the machine's imbalance or the loop's
        "departures": left_after,
        "giveback_loop": giveback_loop(applied, recovery, even, left_after),
        "controller_cpu_ms_per_step": cpu.get("per_step_ms"),
        "controller_placement": next((x for x in records if x["record"] == "controller"),
                                     None),
        "controller_cpu_by_phase": cpu.get("per_step_ms_by_phase"),
    }


def pre_onset_prediction(run: Path, applied: list[dict[str, Any]], onset: int,
                         even_steps: set[int], raw: dict[int, float], norm: dict[int, float]
                         ) -> dict[str, Any] | None:
    """The loop's first action before the onset (the machine's own imbalance, nothing
    injected) judged under its own conditions: predicted from the up to 10 steps before it
    (from WARMUP, at the even split, at least 3), measured on the steps that ran it before
    the onset (at least 3), brought to the load of the steps predicted from. None without
    such an action; the error NaN where either side has fewer than 3 steps."""
    i = next((j for j, a in enumerate(applied) if a["step"] < onset), None)
    if i is None:
        return None
    at = applied[i]["step"]
    src = (max(WARMUP, at - 10), at)
    ran = split_steps(applied, i, onset)
    row: dict[str, Any] = {"step": at, "split": applied[i]["assignment"],
                           "steps": sum(1 for s in range(*ran) if s in norm),
                           "prediction_error": float("nan")}
    if (src[1] - src[0] < 3 or any(s not in even_steps for s in range(*src))
            or row["steps"] < 3):
        return row
    pred, _ = _predict(run, src[0], src[1] - 1, applied[i]["assignment"])
    at_load = _window(raw, *src) * _window(norm, *ran) / _window(norm, *src)
    row["prediction_error"] = pred["after_s"] / at_load - 1
    return row


def no_action_row(load0: float, healthy_s: float, healthy_n: float,
                  s_raw: dict[int, float], s_norm: dict[int, float],
                  m_raw: dict[int, float], m_norm: dict[int, float], onset: int,
                  recovery: int, effective_factor: float, escalations: list[str]
                  ) -> dict[str, Any]:
    """The row of a round whose loop applied no action (e.g. the detector reported a drift,
    not an onset): the mitigated run's slow steps measured as they ran (from two steps after
    the onset), no prediction (NaN), no split, ``no_action`` set."""
    after = (onset + 2, recovery)
    nan = float("nan")
    return {
        "load_start": load0, "load_end": os.getloadavg()[0], "no_action": True,
        "applied_step": None, "assignment": None, "actions": 0, "splits": [],
        "giveback_steps": None, "final_split": None, "escalations": escalations,
        "healthy_s": healthy_s, "slow_s": _window(s_raw, *after),
        "healthy_own_s": _window(m_raw, WARMUP, onset), "before_own_s": nan,
        "mitigated_s": _window(m_raw, *after), "healthy_n": healthy_n,
        "slow_n": _window(s_norm, *after), "mitigated_n": _window(m_norm, *after),
        "effective_factor": effective_factor, "prediction_source": None,
        "predicted_after_s": nan, "measured_after_at_load_s": nan, "prediction_error": nan,
        "prediction_error_window": nan, "pre_onset": None,
        "prediction_error_split_steps": nan, "split_steps": 0,
        "predicted_optimum_split": None, "predicted_optimum_after_s": nan,
        "prediction_error_optimum": nan,
    }


def _measured_text(row: dict[str, Any], removed: float) -> str:
    """A round's measured optimum as the table prints it: its share and split, and the
    removed share over it ("55.0% [9, 15] / 94%")."""
    mo = row.get("measured_optimum") or {}
    share = mo.get("share", float("nan"))
    return f"{share * 100:.1f}% {mo.get('split')} / {removed / share * 100:.0f}%"


def _paired_text(row: dict[str, Any]) -> str:
    """The paired removal as the per-round table prints it ("52.0% / 58.3% [10, 14] /
    89%")."""
    p = row.get("paired") or {}
    if p.get("split") is None:
        return "n/a"
    return (f"{p['removed'] * 100:.1f}% / {p['optimum'] * 100:.1f}% {p['split']} / "
            f"{p['of_optimum'] * 100:.0f}% (at the speeds before: "
            f"{p.get('removed_before_speeds', float('nan')) * 100:.1f}%)")


def _pre_text(row: dict[str, Any]) -> str:
    """The action before the onset, if any ("[11, 13] at 28: -1.2% (6 steps)")."""
    p = row.get("pre_onset")
    if not p:
        return "none"
    return (f"{p['split']} at {p['step']}: {p['prediction_error'] * 100:+.1f}% "
            f"({p['steps']} steps)")


def _finite_median(values: list[float]) -> float:
    """The median of the finite values (NaN when none): rounds without an action have no
    prediction."""
    return _median([v for v in values if np.isfinite(v)])


def _predict(run: Path, lo: int, hi: int, split: list[int]
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """S2 predicted by the what-if simulator from the run's own trace, steps lo..hi (the
    slow steps before the action: one micro-batch count, a consistent schedule): for
    ``split`` (the one applied), and for the split the simulator finds optimal."""
    from stragglers.analysis.engine import prepare
    from stragglers.analysis.runner import load_table
    from stragglers.mitigate.predict import predict_microbatch

    engine = prepare(load_table(run / "trace.parquet", run / "meta.yaml", (lo, hi)))
    return predict_microbatch(engine, split).to_dict(), predict_microbatch(engine).to_dict()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=30, help="healthy, slow, healthy steps")
    ap.add_argument("--factors", default="1.5,2", help="straggler factors, comma-separated")
    ap.add_argument("--mode", choices=("spin", "sleep"), default="sleep",
                    help="how the slow rank is slowed (the job's --slow-mode)")
    ap.add_argument("--pin-cpus", action=argparse.BooleanOptionalAction, default=True,
                    help="run the job with --pin-cpus (rank r on CPU r: as with one device "
                         "per rank, a rank that waits or sleeps lends no core to the other)")
    ap.add_argument("--hidden", type=int, default=256, help="the job's --hidden (model width)")
    ap.add_argument("--log", type=Path, default=None, metavar="DIR",
                    help="write a per-step decision log per round (JSON lines, "
                         "DIR/xFACTOR-roundR.jsonl): the split, each replica's time per "
                         "micro-batch, the rebalancer's estimate, noise, decision and reason, "
                         "and the loop's own records")
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="N busy-loop processes (not pinned) beside the rounds, started "
                         "before the first and stopped after the last")
    args = ap.parse_args()
    global PIN_CPUS, HIDDEN
    PIN_CPUS, HIDDEN = args.pin_cpus, args.hidden
    factors = [float(x) for x in args.factors.split(",")]
    if args.log is not None:
        args.log.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    load = start_load(args.load)
    try:
        table = _rounds(args, factors)
    finally:
        stop_load(load)
    _print(args, table, start)


def _rounds(args: argparse.Namespace, factors: list[float]
            ) -> list[tuple[float, list[dict[str, Any]]]]:
    table = []
    with tempfile.TemporaryDirectory(prefix="bench-live-") as d:
        tmp = Path(d)
        costs = tmp / "costs.yaml"
        costs.write_text("S2: {overhead_s: 0.5}\n")
        for factor in factors:
            rows = []
            (tmp / f"x{factor:g}").mkdir()
            for r in range(args.repeats):
                row = one_round(tmp / f"x{factor:g}", r, args.k, factor, costs, args.mode,
                                args.log)
                rows.append(row)
                print(f"x{factor:g} round {r}: " + json.dumps(
                    {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()
                     if not k.startswith("_")}, default=str), flush=True)
            table.append((factor, rows))
    return table


def _print(args: argparse.Namespace, table: list[tuple[float, list[dict[str, Any]]]],
           start: float) -> None:
    print()
    print(f"example job dp 2 x pp 1, hidden {HIDDEN}, 12 micro-batches per replica, rank 0 "
          f"slowed ({args.mode}) in steps {WARMUP + args.k}-{WARMUP + 2 * args.k - 1} of "
          f"{WARMUP + 3 * args.k}, {'pinned' if PIN_CPUS else 'not pinned'}; "
          f"{args.load} busy loops beside it; "
          f"{args.repeats} rounds per factor; medians over rounds (of each run's median "
          "step in each window)")
    print()
    print("| straggler | load average | optimum (split) | removed, normalised (runs) | "
          "share of optimum | share of the measured optimum (runs) | "
          "removed, paired on the same steps (runs) | of the optimum at their speeds (runs) | "
          "effective factor: optimum, share | removed, raw | "
          "removed, raw, within the mitigated run | "
          "prediction error, applied split, on the steps that ran it (runs) | the same on "
          "the after window, later splits included (runs: error/steps that ran the split) | "
          "prediction error, optimum split (runs) | "
          "give-back, steps after recovery (runs) | S3/S4 decided "
          "| first splits |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | ---: | --- |")
    for factor, rows in table:
        split, opt = optimum_removed(factor)

        def rem(row: dict[str, Any], kind: str) -> float:
            return (row[f"slow_{kind}"] - row[f"mitigated_{kind}"]) / (
                row[f"slow_{kind}"] - row[f"healthy_{kind}"])

        norm = [rem(x, "n") for x in rows]
        of_measured = [v / (x.get("measured_optimum") or {}).get("share", float("nan"))
                       for v, x in zip(norm, rows, strict=True)]
        raw = [rem(x, "s") for x in rows]
        pr = [(x.get("paired") or {}).get("removed", float("nan")) for x in rows]
        po = [(x.get("paired") or {}).get("of_optimum", float("nan")) for x in rows]
        own = [(x["before_own_s"] - x["mitigated_s"]) / (x["before_own_s"] - x["healthy_own_s"])
               for x in rows]
        err = [x["prediction_error"] for x in rows]
        err_opt = [x["prediction_error_optimum"] for x in rows]
        own_err = ", ".join(
            f"{x.get('prediction_error_window', float('nan')) * 100:+.0f}/{x['split_steps']}"
            for x in rows)
        loads = [x[key] for x in rows for key in ("load_start", "load_end")]
        esc = sum(len(x["escalations"]) for x in rows)
        eff = statistics.median(x["effective_factor"] for x in rows)
        _, eff_opt = optimum_removed(eff)
        print(f"| x{factor:g} | {min(loads):.1f}-{max(loads):.1f} | {opt * 100:.1f}% "
              f"{split} | {statistics.median(norm) * 100:.1f}% "
              f"({', '.join(f'{v * 100:.0f}' for v in norm)}) | "
              f"{statistics.median(norm) / opt * 100:.0f}% | "
              f"{_finite_median(of_measured) * 100:.0f}% "
              f"({', '.join(f'{v * 100:.0f}' for v in of_measured)}) | "
              f"{_finite_median(pr) * 100:.1f}% ({', '.join(f'{v * 100:.0f}' for v in pr)}) | "
              f"{_finite_median(po) * 100:.0f}% ({', '.join(f'{v * 100:.0f}' for v in po)}) | "
              f"x{eff:.2f}: {eff_opt * 100:.1f}%, "
              f"{statistics.median(norm) / eff_opt * 100:.0f}% | "
              f"{statistics.median(raw) * 100:.1f}% | "
              f"{_finite_median(own) * 100:.1f}% | "
              f"{_finite_median(err) * 100:+.1f}% "
              f"({', '.join(f'{v * 100:+.0f}' for v in err)}) | "
              f"{own_err} | "
              f"{_finite_median(err_opt) * 100:+.1f}% "
              f"({', '.join(f'{v * 100:+.0f}' for v in err_opt)}) | "
              f"{', '.join(gb_text(x) for x in rows)} | {esc} | "
              f"{[x['assignment'] for x in rows]} |")
    print()
    print("The cross-run figure's own noise (removed, normalised): the share it gives between "
          "two fail-slow runs of one factor, nothing removed in either (truth 0), each round's "
          "window (:func:`reference_spread`); points of removed share, all ordered pairs:")
    for factor, rows in table:
        _, opt = optimum_removed(factor)
        spread = [v for v in reference_spread([x["_ref"] for x in rows if "_ref" in x])
                  if np.isfinite(v)]
        if spread:
            mid = statistics.median(abs(v) for v in spread)
            print(f"- x{factor:g}: {', '.join(f'{v * 100:+.0f}' for v in spread)}; median "
                  f"|.| {mid * 100:.0f} points = {mid / opt * 100:.0f}% of the nominal "
                  f"optimum, max {max(abs(v) for v in spread) * 100:.0f}")
        else:
            print(f"- x{factor:g}: fewer than 2 rounds")
    print()
    print("Per round: removed (normalised, the after window) / share of the nominal optimum; "
          "on the steps that ran the first split only; the straggler's effective factor "
          "before the action and on those steps; the removal that split gives at that "
          "factor (compute only); the steps' jitter above the replicas' median compute; "
          "replica 0 over replica 1 per micro-batch with nothing injected, before the onset "
          "and after the recovery (the machine's own imbalance, what a give-back meets); the "
          "removal paired on the mitigated run's own steps (each against itself at the even "
          "split, :func:`paired_removal`): removed, the optimum at those speeds and its split, "
          "the share of it; the prediction error of an action before the onset on its own "
          "steps (the machine's imbalance, not part of the figures above); the "
          "controller's own CPU per job step (its thread).")
    print()
    print("| straggler | round | load average | removed / of optimum | on the split's steps "
          "| factor before -> on them | split's removal at that factor | jitter | "
          "prediction | give-back | give-back, the machine's departures set aside; "
          "departures after the recovery | replica 0 / 1, nothing injected: before -> after | "
          "measured optimum (split): removed / of it | paired: removed / optimum (split) / "
          "of it | action before the onset: split, prediction | splits | "
          "controller CPU ms/step |")
    print("| --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- "
          "| --- | --- | --- | --- | ---: |")
    for factor, rows in table:
        _, opt = optimum_removed(factor)
        for r, x in enumerate(rows):
            rem = (x["slow_n"] - x["mitigated_n"]) / (x["slow_n"] - x["healthy_n"])
            print(f"| x{factor:g} | {r} | {x['load_start']:.1f}-{x['load_end']:.1f} | "
                  f"{rem * 100:.1f}% / {rem / opt * 100:.0f}% | "
                  f"{x.get('removed_split_steps', float('nan')) * 100:.1f}% "
                  f"({x.get('split_steps', 0)} steps) | "
                  f"x{x.get('factor_before', float('nan')):.2f} -> "
                  f"x{x.get('factor_split', float('nan')):.2f} | "
                  f"{x.get('split_removal_at_factor', float('nan')) * 100:.1f}% | "
                  f"{x.get('jitter', float('nan')) * 100:+.1f}% | "
                  f"{x['prediction_error'] * 100:+.1f}% | {gb_text(x)} | "
                  f"{gb_split_text(x)} | "
                  f"x{x.get('ratio_before', float('nan')):.2f} -> "
                  f"x{x.get('ratio_after', float('nan')):.2f} | "
                  f"{_measured_text(x, rem)} | {_paired_text(x)} | {_pre_text(x)} | "
                  f"{' -> '.join(str(c) for c in x['splits'])} | "
                  f"{x.get('controller_cpu_ms_per_step')} |")
    print()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"wall {time.perf_counter() - start:.0f} s; peak RSS of this process (controller, "
          f"what-if) {peak:.0f} MiB")


if __name__ == "__main__":
    main()
