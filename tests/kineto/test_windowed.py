"""A rank file read in windows of whole steps (:mod:`stragglers.kineto.windowed`) gives the
ops of the one-pass read, array for array, and the same imported trace.parquet, byte for
byte: the windows are forced with a budget of 1 byte (one window per free step start) on
generated files (``bench/kineto_gen.py``) and on the real traces of ``../shared/real``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.kineto import load_patterns, windowed
from stragglers.kineto.rankops import RankOps, rank_ops
from stragglers.kineto.reader import read_rank_file

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "real"
if not REAL.is_dir():
    REAL = Path("/work/shared/real")


def _same(a: Any, b: Any) -> list[str]:
    """The fields where two ops (or any two objects of one dataclass: a partial import's
    step tables) differ (arrays: dtype and bytes)."""
    bad = []
    for k, v in vars(a).items():
        w = vars(b)[k]
        if isinstance(v, np.ndarray):
            if v.dtype != w.dtype or v.shape != w.shape or v.tobytes() != w.tobytes():
                bad.append(k)
        elif v != w:
            bad.append(k)
    return bad


def _budget(monkeypatch: pytest.MonkeyPatch, env: str | None) -> None:
    """``$STRAGGLERS_KINETO_MEMORY`` set to ``env`` (None: unset, the default budget)."""
    if env is None:
        monkeypatch.delenv(windowed.ENV, raising=False)
    else:
        monkeypatch.setenv(windowed.ENV, env)


def _passes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The window objects of each pass over a file (None: a one-pass read), then
    ``"one pass"`` when the windows were read and given up for one pass."""
    seen: list[Any] = []
    real_read = windowed._read_rank_file
    real_window = windowed._read_window
    real_windowed = windowed._windowed

    def read(path: Any, patterns: Any, keep: Any, after: Any = None, *more: Any,
             **kw: Any) -> Any:
        seen.append(after)
        return real_read(path, patterns, keep, after, *more, **kw)

    def window(*args: Any) -> Any:
        seen.append(args[-1])
        return real_window(*args)

    def in_windows(*args: Any) -> RankOps:
        try:
            return real_windowed(*args)
        except windowed._OnePass:
            seen.append("one pass")
            raise

    monkeypatch.setattr(windowed, "_read_rank_file", read)
    monkeypatch.setattr(windowed, "_read_window", window)
    monkeypatch.setattr(windowed, "_windowed", in_windows)
    return seen


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from bench_kineto_dask import generate
    finally:
        sys.path.remove(str(ROOT / "bench"))
    data = tmp_path_factory.mktemp("gen")
    generate(data, dp=2, pp=2, gb=0.006, jobs=1)
    return data


def test_windows_give_the_one_pass_ops(generated: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pat = load_patterns(None)
    for f in sorted((generated / "ranks").iterdir()):
        one = rank_ops(read_rank_file(f, pat))
        seen = _passes(monkeypatch)
        win = windowed.read_rank_ops(f, pat, budget=1)
        assert len(seen) >= 4 and all(isinstance(s, windowed._Window) for s in seen[1:]), f
        assert one.start.size > 100 and _same(one, win) == [], f
        # a budget the file fits: one pass, as before
        seen.clear()
        assert _same(one, windowed.read_rank_ops(f, pat)) == [] and seen == []


def test_windows_give_the_same_parquet(generated: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = {}
    for name, env in (("one", None), ("win", "1")):
        _budget(monkeypatch, env)
        args = ["import", "kineto", str(generated / "ranks"), "--meta",
                str(generated / "job.yaml"), "--out", str(tmp_path / name), "--jobs", "2"]
        assert main(args) == 0
        out[name] = capsys.readouterr().out.splitlines()[:-1]
    assert out["one"] == out["win"]
    for f in ("trace.parquet", "meta.yaml"):
        assert (tmp_path / "one" / f).read_bytes() == (tmp_path / "win" / f).read_bytes()


def test_bad_budget_exits_2_with_one_line(generated: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(windowed.ENV, "lots")
    assert main(["import", "kineto", str(generated / "ranks"), "--meta",
                 str(generated / "job.yaml"), "--out", str(tmp_path / "o"),
                 "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and windowed.ENV in err[0], err


#: (the MTIA trace has no GPU kernel: read in one pass, and the slowest to read twice)
REAL_FILES = sorted(f for f in REAL.glob("kineto*/**/*.json.gz")
                    if "mtia" not in f.name) if REAL.is_dir() else []


@pytest.mark.parametrize("f", REAL_FILES, ids=lambda f: f.parent.name)
def test_windows_on_real_traces(f: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each real trace with a budget of a third of its estimated footprint (and of 1 byte
    for the 2-step ones: a window per step): read in windows (all 7 here, those with
    device<->host copies and all-to-alls too: issue 32 item 2), the same ops."""
    pat = load_patterns(None)
    one = rank_ops(read_rank_file(f, pat))
    seen = _passes(monkeypatch)
    third = int(windowed.json_bytes(f) * windowed.PER_JSON_BYTE / 3)
    for budget in (third, 1) if "sampled" in f.name else (third,):
        seen.clear()
        win = windowed.read_rank_ops(f, pat, budget=budget)
        assert _same(one, win) == [], f
        assert len(seen) >= 3 and "one pass" not in seen, (f, seen)
