"""bench/bench_mitigate_live.py's windows: an action right after the onset must not leave an
empty window to predict from (it crashed with "no step in 47-46")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_mitigate_live.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_mitigate_live", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod



def _summary_line(out: list[str]) -> str:
    """The summary table's x2 row: its second cell is the load range, a per-round row's the
    round number (a load average below 1 starts "| x2 | 0." like round 0's row)."""
    return next(x for x in out if x.startswith("| x2 |")
                and not x.split("|")[2].strip().isdigit())

@pytest.mark.parametrize("at", [45, 46, 47, 48])
def test_action_within_three_steps_of_the_onset_gives_no_before_window(at: int) -> None:
    before, after = _bench().windows(onset=45, at=at, recovery=75)
    assert before is None  # the fail-slow run's slow steps are predicted from instead
    assert after == (at + 1, 75)


def test_before_window_when_there_are_slow_steps() -> None:
    before, after = _bench().windows(onset=45, at=54, recovery=75)
    assert before == (47, 54) and after == (55, 75)


def test_optimum_removed() -> None:
    bench = _bench()
    assert bench.optimum_removed(2.0) == ([8, 16], pytest.approx(2 / 3))
    assert bench.optimum_removed(1.5) == ([10, 14], pytest.approx(0.5))


def test_giveback_counts_only_a_return_that_lasts() -> None:
    """Even again 4 steps after the recovery, then off again: not given back (the bench
    counted the first return, 4); even before the recovery and not left: 0."""
    g = _bench().giveback
    even = [12, 12]
    acts = [{"step": 30, "assignment": [9, 15]}, {"step": 49, "assignment": even},
            {"step": 54, "assignment": [7, 17]}]
    assert g(acts, 45, even) is None
    assert g(acts[:2], 45, even) == 4
    assert g([{"step": 30, "assignment": [9, 15]}, {"step": 40, "assignment": even}],
             45, even) == 0
    assert g([], 45, even) is None


def test_a_return_to_even_left_again_is_shown_with_the_split_that_left_it() -> None:
    """The lasting give-back stays the figure; a return to even after the recovery (or the
    even split in force at it) that was left again is shown beside it, with the split that
    left it (here replica 1 cut: a new episode on the other replica); a return inside the
    slow phase, left while the straggler was still slow, is not one."""
    bench = _bench()
    even = [12, 12]
    acts = [{"step": 38, "assignment": [9, 15]}, {"step": 50, "assignment": even},
            {"step": 53, "assignment": [9, 15]}, {"step": 71, "assignment": even},
            {"step": 80, "assignment": [14, 10]}, {"step": 93, "assignment": even}]
    assert bench.giveback(acts, 65, even) == 28
    assert bench.first_even(acts, 65, even) == (6, [14, 10], 80)
    row = {"giveback_steps": 28, "giveback_first": bench.first_even(acts, 65, even)}
    assert bench.gb_text(row) == "28 (even +6, then [14, 10] at 80)"
    # even in force at the recovery, left later for the other replica: never kept, +0
    acts2 = [*acts[:2], {"step": 87, "assignment": [13, 11]}]
    assert bench.giveback(acts2, 65, even) is None
    assert bench.first_even(acts2, 65, even) == (0, [13, 11], 87)
    # the first return after the recovery lasted: nothing beside the figure
    assert bench.first_even(acts[:4], 65, even) is None
    assert bench.gb_text({"giveback_steps": 6, "giveback_first": None}) == "6"


def test_a_round_without_an_action_is_a_row_of_the_table(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """A round whose loop applied no action (the detector reported a drift, not an onset)
    stopped the whole benchmark ("the controller applied no action"); it is now a row with
    nothing removed by an action and no prediction, and the table says "no action"."""
    import argparse

    bench = _bench()
    slow_n = {s: (2.0 if 47 <= s < 75 else 1.0) for s in range(5, 105)}
    row = bench.no_action_row(1.0, 1.0, 1.0, slow_n, slow_n, slow_n, slow_n, 45, 75, 2.0, [])
    assert row["no_action"] and row["actions"] == 0 and row["slow_n"] == 2.0
    assert row["mitigated_n"] == 2.0 and row["giveback_steps"] is None
    assert bench.gb_text(row) == "no action"
    done = dict(row, no_action=False, mitigated_n=1.5, before_own_s=2.0, mitigated_s=1.5,
                prediction_error=0.04, prediction_error_split_steps=0.04, split_steps=10,
                prediction_error_optimum=0.04, giveback_steps=6, assignment=[8, 16],
                splits=[[8, 16], [12, 12]], ratio_before=1.44, ratio_after=0.78)
    args = argparse.Namespace(mode="sleep", k=30, repeats=2, load=0)
    bench._print(args, [(2.0, [row, done])], 0.0)
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("| x2 |"))
    cells = [c.strip() for c in line.split("|")]
    assert "(0, 50)" in cells[4]  # removed, normalised: 0 % without the action, 50 % with
    assert "+4.0%" in line and "no action, 6" in line
    # per round: the machine's own imbalance before the onset and after the recovery
    header = next(x for x in out if x.startswith("| straggler | round |"))
    col = [c.strip() for c in header.split("|")].index(
        "replica 0 / 1, nothing injected: before -> after")
    rounds = [x for x in out if x.startswith("| x2 | ")][1:]
    assert [c.strip() for c in rounds[1].split("|")][col] == "x1.44 -> x0.78"
    assert [c.strip() for c in rounds[0].split("|")][col] == "xnan -> xnan"


def test_split_account_on_hand_built_probe_files(tmp_path: Path) -> None:
    """Steps 0-9 even, 10-19 the split (10, 14); replica 1 0.01 s per micro-batch, replica
    0 x1.6 before and x1.4 on the split's steps (the straggler as it ran); every step 0.02 s
    outside compute. On the split's steps: the factor 1.4 (before 1.6), the split's removal
    at x1.4 (16.8 - 14) / 4.8, no jitter where one replica's compute is the step every time;
    with the two replicas' compute alternating above each other (+-5%), the median critical
    compute is above the larger median."""
    import json

    meta = {"trial_name": "t", "run_id": 0, "dp_size": 2, "dsp_size": 1, "pp_size": 1,
            "tp_size": 1, "vpp_size": 1, "world_size": 2}

    def job(root: Path, wobble: float) -> dict:
        (root / "probe").mkdir(parents=True)
        times = []
        lines: list[list[str]] = [[], []]
        for r in range(2):
            lines[r].append(json.dumps({"kind": "header", "rank": r, "dp_rank": r,
                                        "stage": 0, "meta": meta}))
        for step in range(20):
            split = (12, 12) if step < 10 else (10, 14)
            t = [0.01 * (1.6 if step < 10 else 1.4), 0.01]
            w = 1 + wobble * (1 if step % 2 else -1)
            t = [t[0] * w, t[1] / w]
            for r in range(2):
                clock = 0.0
                for mb in range(split[r]):
                    for optype in ("forward-compute", "backward-compute"):
                        lines[r].append(json.dumps({
                            "kind": "span", "step": step, "optypes": [optype],
                            "start": clock, "end": clock + t[r] / 2, "mb_id": mb}))
                        clock += t[r] / 2
                lines[r].append(json.dumps({"kind": "step_end", "step": step}))
            times.append(max(m * x for m, x in zip(split, t, strict=True)) + 0.02)
        for r in range(2):
            (root / "probe" / f"rank-{r:05d}.jsonl").write_text("\n".join(lines[r]) + "\n")
        return {"first_step": 0, "step_times": times}

    bench = _bench()
    out = bench.split_account(tmp_path / "a", job(tmp_path / "a", 0.0), 10, 20, [10, 14],
                              (0, 10))
    assert out["factor_split"] == pytest.approx(1.4)
    assert out["factor_before"] == pytest.approx(1.6)
    assert out["split_removal_at_factor"] == pytest.approx((16.8 - 14) / 4.8)
    assert out["jitter"] == pytest.approx(0.0, abs=1e-9)
    assert out["outside_compute_s"] == pytest.approx(0.02)
    # the machine's own ratio of a window, open-ended as the bench asks for the steps after
    # the recovery (replica 0 over replica 1 per micro-batch)
    assert bench._factor(tmp_path / "a", 0, 10) == pytest.approx(1.6)
    assert bench._factor(tmp_path / "a", 12, 12 + 10 ** 6) == pytest.approx(1.4)
    wobbly = bench.split_account(tmp_path / "b", job(tmp_path / "b", 0.05), 10, 20,
                                 [10, 14], (0, 10))
    # odd steps: replica 0 14 x 1.05 = 14.7 units; even: replica 1 14 / 0.95 = 14.74; the
    # replicas' medians give max(14 x 1.0, 14 x 1.0): jitter ~ +5%
    assert 0.04 < wobbly["jitter"] < 0.06


def test_the_optimum_at_the_replicas_measured_speeds() -> None:
    """Equal replicas, replica 0 x1.5 in the slow steps: the nominal optimum ((10, 14),
    50%). Replica 0 1.2x slower with nothing injected and 1.8x in the slow steps (the
    machine's own imbalance under the injection): the healthy even step 1.2, the slow one
    1.8, the exact split (8, 16) at 16 / 12: (1.8 - 4/3) / (1.8 - 1.2) = 7/9 removed. No
    slowdown over the healthy step (replica 1 1.5x slower before, replica 0 x1.5 after):
    NaN."""
    bench = _bench()
    steps = np.arange(5, 65)
    slow = (steps >= 35)

    def run(h0: float, h1: float, s0: float, s1: float) -> dict:
        t = np.vstack([np.where(slow, s0, h0), np.where(slow, s1, h1)]) * 0.01
        t *= np.exp(np.sin(steps))[None, :]  # machine-wide load: cancels
        return bench.measured_optimum(steps, t, 35, 65)

    nominal = run(1.0, 1.0, 1.5, 1.0)
    assert nominal["split"] == [10, 14] and nominal["share"] == pytest.approx(0.5)
    machine = run(1.2, 1.0, 1.8, 1.0)
    assert machine["split"] == [8, 16] and machine["share"] == pytest.approx(7 / 9)
    assert machine["healthy"] == [1.2, 1.0] and machine["slow"] == [1.8, 1.0]
    assert np.isnan(run(1.0, 1.5, 1.5, 1.0)["share"])


def test_departures_after_the_recovery_are_the_machines_or_the_loops() -> None:
    """After the recovery (step 65) the job ran even; a departure to (14, 10) at step 75
    after replica 1 measured 1.4x at even (nothing injected): the machine's; one to
    (11, 13) at 85 after steps where the replicas measured alike: the loop's; a departure
    after fewer than 3 steps at even: the loop's (nothing shows an imbalance). The
    give-back with the machine's departures set aside is the first return to even (4)
    only when no departure was the loop's."""
    bench = _bench()
    even = [12, 12]
    steps = np.arange(60, 95)
    t = np.ones((2, steps.size)) * 0.01
    t[1, (steps >= 65) & (steps < 75)] = 0.014
    acts = [{"step": 40, "assignment": [9, 15]}, {"step": 69, "assignment": even},
            {"step": 75, "assignment": [14, 10]}, {"step": 80, "assignment": even}]
    ran = np.full((2, steps.size), 12)
    for a, b_ in zip(acts, [*acts[1:], {"step": 10 ** 6}], strict=True):
        k = (steps >= a["step"]) & (steps < b_["step"])
        ran[:, k] = np.asarray(a["assignment"])[:, None]
    left = bench.departures(acts, steps, t, ran, 65, even)
    assert [(d["step"], d["whose"]) for d in left] == [(75, "machine")]
    assert left[0]["at_even"] == [1.0, 1.4]
    assert bench.giveback_loop(acts, 65, even, left) == 4
    assert bench.giveback(acts, 65, even) == 15
    more = [*acts, {"step": 85, "assignment": [11, 13]}, {"step": 90, "assignment": even},
            {"step": 91, "assignment": [13, 11]}]
    ran[:, steps >= 85] = 12
    left = bench.departures(more, steps, t, ran, 65, even)
    assert [(d["step"], d["whose"]) for d in left] == [(75, "machine"), (85, "loop"),
                                                      (91, "loop")]
    assert bench.giveback_loop(more, 65, even, left) is None
    row = {"giveback_loop": 4, "departures": left[:1]}
    assert bench.gb_split_text(row) == "4; machine's 1, loop's 0"


def test_the_tables_show_the_measured_optimum_and_whose_departures(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The per-round table gives the removed share over the measured optimum beside the
    nominal one, and the give-back with the machine's departures set aside; the summary
    its median over rounds."""
    import argparse

    bench = _bench()
    slow_n = {s: (2.0 if 47 <= s < 75 else 1.0) for s in range(5, 105)}
    row = bench.no_action_row(1.0, 1.0, 1.0, slow_n, slow_n, slow_n, slow_n, 45, 75, 2.0, [])
    done = dict(row, no_action=False, mitigated_n=1.5, before_own_s=2.0, mitigated_s=1.5,
                prediction_error=0.04, prediction_error_split_steps=0.04, split_steps=10,
                prediction_error_optimum=0.04, giveback_steps=None, assignment=[8, 16],
                splits=[[8, 16], [12, 12], [13, 11]], ratio_before=1.2, ratio_after=0.8,
                giveback_first=[4, [13, 11], 80], giveback_loop=4,
                departures=[{"step": 80, "split": [13, 11], "whose": "machine"}],
                measured_optimum={"split": [7, 17], "share": 0.625})
    bench._print(argparse.Namespace(mode="sleep", k=30, repeats=1, load=0),
                 [(2.0, [done])], 0.0)
    out = capsys.readouterr().out.splitlines()
    line = next(x for x in out if x.startswith("| x2 | 0 |"))
    assert "4; machine's 1, loop's 0" in line
    assert "62.5% [7, 17] / 80%" in line  # 50 % removed of 62.5 %
    assert "never (even +4, then [13, 11] at 80)" in line
    summary = _summary_line(out)
    assert "| 80% (80) |" in summary


def _paired_run(split_from: int, split: tuple[int, int], load: np.ndarray,
                factor_on_split: float = 1.5) -> tuple[np.ndarray, ...]:
    """Steps 5-64: replicas equal (10 ms per micro-batch) before step 35, replica 0 x1.5
    from 35 (x``factor_on_split`` once ``split`` runs, from ``split_from``); 20 ms outside
    compute; every second of the step stretched by the machine's load of that step."""
    steps = np.arange(5, 65)
    t = np.full((2, steps.size), 0.01)
    t[0, steps >= 35] = 0.015
    t[0, steps >= split_from] = 0.01 * factor_on_split
    ran = np.full((2, steps.size), 12)
    ran[:, steps >= split_from] = np.asarray(split)[:, None]
    t = t * load[None, :]
    step_s = 0.02 * load + np.max(ran * t, axis=0)
    return steps, t, ran, step_s


def test_the_removal_paired_on_the_same_steps() -> None:
    """Replica 0 x1.5, 20 ms outside compute, the split (10, 14) from step 45: on each step
    the even split would run (0.02 + 12 x 0.015) / 0.12 = 1.667 references, (10, 14) runs
    (0.02 + 0.15) / 0.12 = 1.417, the healthy even step 1.167: half the slowdown removed,
    all of the optimum ((10, 14)); (8, 16) runs 1.5: a third, two thirds of it. The
    machine's load, different on every step, cancels; no fail-slow run is needed."""
    bench = _bench()
    load = 1 + 0.8 * np.random.default_rng(3).random(60)
    out = bench.paired_removal(*_paired_run(45, (10, 14), load), (5, 35), (46, 65), (37, 45))
    assert out["removed"] == pytest.approx(0.5)
    assert out["optimum"] == pytest.approx(0.5) and out["split"] == [10, 14]
    assert out["of_optimum"] == pytest.approx(1.0) and out["steps"] == 19
    assert out["removed_before_speeds"] == pytest.approx(0.5)  # the speeds did not move
    worse = bench.paired_removal(*_paired_run(45, (8, 16), load), (5, 35), (46, 65))
    assert worse["removed"] == pytest.approx(1 / 3)
    assert worse["of_optimum"] == pytest.approx(2 / 3)
    assert np.isnan(worse["removed_before_speeds"])  # no window before the action given
    # the straggler x1.65 on the split's steps (x1.5 at even before it): paired, the even
    # split at x1.65 ((0.02 + 0.198) / 0.12 = 1.817, (10, 14) 1.542: 42.3 %); at the
    # relative speeds before the action the even step is 1.667 again (25 %)
    moved = bench.paired_removal(*_paired_run(45, (10, 14), load, 1.65), (5, 35), (46, 65),
                                 (37, 45))
    assert moved["removed"] == pytest.approx((1.81667 - 1.54167) / 0.65, rel=1e-4)
    assert moved["removed_before_speeds"] == pytest.approx(0.125 / 0.5, rel=1e-4)
    # fewer than 3 steps in the window: no figure
    assert np.isnan(bench.paired_removal(*_paired_run(45, (10, 14), load), (5, 35),
                                         (63, 65))["removed"])


def test_the_reference_spread_of_the_cross_run_figure() -> None:
    """Three fail-slow runs, healthy 1.0, slow 1.5, 1.5, 1.3 on the rounds' windows: the
    cross-run figure with one in the mitigated run's place, nothing removed: 0 between the
    first two, (1.5 - 1.3) / 0.5 = +40 points against the third, (1.3 - 1.5) / 0.3 = -67
    points with the third as the reference."""
    def run(slow: float) -> dict[int, float]:
        return {s: (slow if 37 <= s < 65 else 1.0) for s in range(5, 95)}

    refs = [(run(1.5), 1.0, (46, 65)), (run(1.5), 1.0, (46, 65)), (run(1.3), 1.0, (45, 65))]
    got = _bench().reference_spread(refs)
    assert got == pytest.approx([0, 0.4, 0, 0.4, -2 / 3, -2 / 3])
    assert np.isnan(_bench().reference_spread([(run(1.5), 1.0, (46, 65)),
                                               (run(1.5), 1.0, (70, 72))])[0])


def test_the_figures_are_of_the_first_action_in_the_slow_phase() -> None:
    """A split before the onset answered the machine's own imbalance (nothing injected):
    the removed share and the prediction are of the first action in the slow phase, its
    split's own steps up to the next action; the one before the onset is judged on the
    steps that ran it up to the onset."""
    bench = _bench()
    acts = [{"step": 28, "assignment": [11, 13]}, {"step": 39, "assignment": [7, 17]},
            {"step": 50, "assignment": [8, 16]}, {"step": 69, "assignment": [12, 12]}]
    assert bench.injection_action(acts, 35, 65) == 1
    assert bench.split_steps(acts, 1, 65) == (40, 50)
    assert bench.split_steps(acts, 0, 35) == (29, 35)
    assert bench.split_steps(acts, 2, 65) == (51, 65)
    assert bench.injection_action(acts[:1] + acts[3:], 35, 65) is None
    assert bench.injection_action([{"step": 35, "assignment": [8, 16]}], 35, 65) == 0


def test_the_prediction_is_made_from_steps_at_the_even_split() -> None:
    """The what-if scales a trace that ran the even split: the mitigated run's slow steps
    before the action when at least 3 ran even, else the fail-slow run's (here the split
    made before the onset still ran on 37-39)."""
    src = _bench().prediction_source
    all_even = set(range(5, 95))
    assert src(35, 45, 65, all_even) == ("mitigated run", (37, 45))
    assert src(35, 40, 65, set(range(5, 29))) == ("fail-slow run", (37, 47))
    assert src(35, 39, 65, all_even) == ("fail-slow run", (37, 47))  # 2 steps only
    assert src(35, 45, 40, all_even)[0] == "mitigated run"
    assert src(35, 38, 40, all_even) == ("fail-slow run", (37, 40))


def test_the_tables_show_the_paired_removal_and_the_reference_spread(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The summary gives the paired removal and its share of the optimum per run, and the
    cross-run figure's reference spread per factor; the per-round table the paired figures
    and the action before the onset with its own prediction error."""
    import argparse

    bench = _bench()
    slow_n = {s: (2.0 if 47 <= s < 75 else 1.0) for s in range(5, 105)}
    base = bench.no_action_row(1.0, 1.0, 1.0, slow_n, slow_n, slow_n, slow_n, 45, 75, 2.0, [])
    rows = []
    for i, (slow, paired) in enumerate(((2.0, 0.6), (1.8, 0.64))):
        ref = {s: (slow if 47 <= s < 75 else 1.0) for s in range(5, 105)}
        rows.append(dict(base, no_action=False, mitigated_n=1.5, before_own_s=2.0,
                         mitigated_s=1.5, prediction_error=0.02, split_steps=10,
                         prediction_error_optimum=0.04, giveback_steps=6,
                         assignment=[8, 16], splits=[[8, 16], [12, 12]],
                         pre_onset={"step": 28, "split": [11, 13], "steps": 6,
                                    "prediction_error": -0.012} if i else None,
                         paired={"removed": paired, "optimum": 0.64, "split": [8, 16],
                                 "of_optimum": paired / 0.64, "steps": 20,
                                 "removed_before_speeds": 0.58},
                         _ref=(ref, 1.0, (50, 75))))
    bench._print(argparse.Namespace(mode="sleep", k=30, repeats=2, load=0),
                 [(2.0, rows)], 0.0)
    out = capsys.readouterr().out.splitlines()
    summary = _summary_line(out)
    assert "| 62.0% (60, 64) | 97% (94, 100) |" in summary
    spread = next(x for x in out if x.startswith("- x2:"))
    assert spread.startswith("- x2: +20, -25;")  # (2 - 1.8) / 1, (1.8 - 2) / 0.8
    line = next(x for x in out if x.startswith("| x2 | 1 |"))
    assert "64.0% / 64.0% [8, 16] / 100% (at the speeds before: 58.0%)" in line
    assert "[11, 13] at 28: -1.2% (6 steps)" in line
    assert "| none |" in next(x for x in out if x.startswith("| x2 | 0 |"))
