"""LoopProbe in one process (no process group): which hooks make which spans, gradient
accumulation, steps left out, the output folder rule."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.probe import ProbeConfig, attach
from stragglers.probe.merge import load_meta

torch = pytest.importorskip("torch")
nn = torch.nn


def _setup() -> tuple[object, object]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _train_step(model, opt, micro: int = 1) -> None:  # type: ignore[no-untyped-def]
    for _ in range(micro):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
    opt.step()
    opt.zero_grad()


def _ops(out: Path) -> pd.DataFrame:
    trace = pd.read_parquet(out / "trace.parquet")
    return trace.assign(optype=trace["optype"].astype(str))


@pytest.mark.slow
def test_spans_in_step_order(tmp_path: Path) -> None:
    model, opt = _setup()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=1))
    for _ in range(3):
        with probe.step():
            _train_step(model, opt)
    probe.close()
    assert probe.merge_error is None and probe.steps_recorded == 2
    trace = _ops(tmp_path / "run")
    assert sorted(trace["step"].unique()) == [1, 2]
    one = trace[trace["step"] == 1].sort_values(["start_ts", "optype"])
    fwd, bwd, grads, opt_row = (one[one["optype"] == t].iloc[0] for t in (
        "forward-compute", "backward-compute", "grads-reduce-scatter", "optimizer"))
    assert fwd["start_ts"] + fwd["duration"] <= bwd["start_ts"]
    assert bwd["start_ts"] + bwd["duration"] == pytest.approx(grads["start_ts"])
    assert grads["start_ts"] + grads["duration"] == pytest.approx(opt_row["start_ts"])
    markers = one[one["optype"].isin(["gc", "layernorm-grads-all-reduce",
                                       "embedding-grads-all-reduce"])]
    assert len(markers) == 3 and (markers["duration"] == 0).all()
    assert (markers["start_ts"] == grads["start_ts"]).all()


def test_gradient_accumulation_gives_one_microbatch_per_forward(tmp_path: Path) -> None:
    model, opt = _setup()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
    for _ in range(2):
        with probe.step():
            _train_step(model, opt, micro=3)
            with torch.no_grad():
                model(torch.randn(4, 8))  # an evaluation forward: not recorded
    probe.close()
    trace = _ops(tmp_path / "run")
    fwd = trace[trace["optype"] == "forward-compute"]
    assert sorted(fwd[fwd["step"] == 0]["mb_id"]) == [0, 1, 2]
    bwd = trace[trace["optype"] == "backward-compute"].sort_values(["step", "start_ts"])
    fwd = fwd.sort_values(["step", "start_ts"])
    # each backward starts after its forward ended
    assert (bwd["start_ts"].to_numpy() >= (fwd["start_ts"] + fwd["duration"]).to_numpy()
            ).all()


def test_incomplete_steps_are_left_out(tmp_path: Path) -> None:
    model, opt = _setup()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
    with probe.step():  # 0: complete
        _train_step(model, opt)
    with probe.step():  # 1: no optimizer step
        model(torch.randn(4, 8)).sum().backward()
    with pytest.raises(RuntimeError), probe.step():  # 2: raises inside
        raise RuntimeError("boom")
    with probe.step():  # 3: complete
        _train_step(model, opt)
    probe.close()
    assert (probe.steps_recorded, probe.steps_discarded) == (2, 1)
    assert sorted(_ops(tmp_path / "run")["step"].unique()) == [0, 3]


def test_without_merge_the_cli_merge_reads_the_files(tmp_path: Path) -> None:
    model, opt = _setup()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0), merge=False,
                   trial_name="mine")
    for _ in range(2):
        with probe.step():
            _train_step(model, opt)
    probe.close()
    run = tmp_path / "run"
    assert not (run / "trace.parquet").exists()
    # docs/integrations.md: stragglers probe merge runs/ddp/probe --out runs/ddp
    assert main(["probe", "merge", str(run / "probe"), "--out", str(run)]) == 0
    meta = load_meta(run / "meta.yaml")
    assert (meta.trial_name, meta.dp_size, meta.pp_size) == ("mine", 1, 1)
    assert sorted(_ops(run)["step"].unique()) == [0, 1]


def test_a_foreign_folder_is_refused_and_a_previous_run_replaced(tmp_path: Path) -> None:
    model, opt = _setup()
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("keep")
    with pytest.raises(InputError, match="not created by stragglers"):
        attach(model, tmp_path / "theirs")
    for steps in (3, 2):  # the second run replaces the first one's files
        probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
        for _ in range(steps):
            with probe.step():
                _train_step(model, opt)
        probe.close()
    assert sorted(_ops(tmp_path / "run")["step"].unique()) == [0, 1]


def test_check_accepts_no_clip_at_all_but_not_a_missing_one(tmp_path: Path) -> None:
    from stragglers.probe.check import check_trace

    model, opt = _setup()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=0))
    for _ in range(2):
        with probe.step():
            _train_step(model, opt)
    probe.close()
    trace = pd.read_parquet(tmp_path / "run" / "trace.parquet")
    meta = load_meta(tmp_path / "run" / "meta.yaml")
    assert "optimizer-clip-main-grad" not in set(trace["optype"].astype(str))
    assert check_trace(trace, meta) == []
    # a clip in one step makes every other step's missing clip a problem
    row = trace[trace["optype"] == "optimizer"].iloc[[0]].copy()
    row["optype"] = "optimizer-clip-main-grad"
    both = pd.concat([trace.assign(optype=trace["optype"].astype(str)),
                      row.assign(optype=row["optype"].astype(str))], ignore_index=True)
    problems = check_trace(both, meta)
    assert "dp_rank=0 stage=0 step=1: 0 x optimizer-clip-main-grad, expected 1" in problems


def test_a_failed_merge_is_kept_not_raised(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """No step recorded (the probe starts at step 5 of 2): the merge at close fails; the
    error is kept in ``merge_error`` and logged, the training job goes on, no trace written."""
    model, opt = _setup()
    probe = attach(model, tmp_path / "run", config=ProbeConfig(first_step=5))
    for _ in range(2):
        with probe.step():
            _train_step(model, opt)
    with caplog.at_level("WARNING", logger="stragglers.probe"):
        probe.close()
    assert probe.steps_recorded == 0
    assert probe.merge_error is not None and probe.merge_error in caplog.text
    assert not (tmp_path / "run" / "trace.parquet").exists()
