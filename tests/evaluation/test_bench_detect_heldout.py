"""``bench/bench_detect_heldout.py``: the per-family table, the wrong series and the dump agree
with the outcomes scored independently here, and a family the corpus has not is a user error."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from stragglers.evaluation.detect_eval_jobs import Run, evaluate_streams
from stragglers.evaluation.jobcorpus import generate_job_corpus

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_detect_heldout.py"


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_detect_heldout", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclass looks its module up)
    spec.loader.exec_module(mod)
    return mod


def test_the_table_the_wrong_series_and_the_dump_match_the_outcomes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    families = ("ckpt_stall", "noise_regime")
    out = tmp_path / "dump.json"
    assert bench.main(["--seed", "0", "--scale", "0.25", "--family", families[0],
                       "--family", families[1], "--wrong", "--dump", str(out)]) == 0
    text = capsys.readouterr().out
    streams = generate_job_corpus(0, scale=0.25, families=families)
    truth = evaluate_streams(streams, [Run("d", "robust")], jobs=1)["d"]
    for f in families:
        mine = [o for o in truth if o.family == f]
        row = next(line for line in text.splitlines() if line.startswith(f"| {f} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "built on" and int(cells[2]) == len(mine)
        assert cells[5] == (f"{sum(o.detected for o in mine)}/"
                            f"{sum(o.events for o in mine)}")
        acc = 100 * sum(o.correct for o in mine) / len(mine)
        assert float(cells[3]) == pytest.approx(acc, abs=0.05)
    wrong = [line for line in text.splitlines() if line.startswith("wrong: ")]
    assert len(wrong) == sum(not o.correct for o in truth)
    assert f"all: {len(truth)} series, {len(wrong)} wrong" in text
    rows = json.loads(out.read_text())
    assert [(r["family"], r["name"], r["correct"]) for r in rows] == [
        (o.family, o.name, o.correct) for o in truth]


def test_a_family_the_corpus_has_not_is_one_line_and_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _bench().main(["--seed", "0", "--family", "nosuch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nosuch'" in err[0] and "--family" in err[0]
