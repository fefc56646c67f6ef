"""Fuzz: ``stragglers synth`` with arbitrary option values (NaN, inf, negative, zero, huge,
text): exit 0 with the three files written, or exit 2 with one line and nothing written.
The worker's size limits are lowered (harness.WORKER_ENV), so huge shapes must be refused
before anything is allocated."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.harness import FUZZ, CliWorker, check_contract

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

TOKENS = st.sampled_from(["nan", "inf", "-inf", "-1", "0", "0.5", "1", "1.5", "2", "3",
                          "1e9", "1e308", "9" * 40, "-0", "x", "", "1,1", "0,0:2", "0,1:1.5",
                          "1,0:nan", "0,0:-1", "0.5:0.01", "0.5:-10", "2:1", "0.1:inf",
                          "nan:1", "0,0:1", "5,5:2", "0:0"])
#: Values that are valid for some options, so that runs also get through to the output.
VALID = st.sampled_from(["1", "2", "3", "0.5", "1.5", "1,1:1.5", "0,0:2", "0.3:0.01"])
NUMERIC = st.sampled_from(["--dp", "--pp", "--vpp", "--tp", "--microbatches", "--steps",
                           "--seed", "--jitter", "--heavy-last-stage", "--seq-len-sigma"])
COMPOSITE = st.sampled_from(["--slow-worker", "--slow-link", "--gc", "--launch-gaps"])


@FUZZ
@given(opts=st.lists(st.tuples(NUMERIC | COMPOSITE, VALID | TOKENS | st.text(max_size=8)),
                     min_size=1, max_size=3),
       flags=st.lists(st.sampled_from(["--overlap", "--gc-in-compute", "--gc-recorded"]),
                      max_size=3),
       fmt=st.sampled_from(["parquet", "jsonl"]))
def test_synth_options(cli: CliWorker, opts: list[tuple[str, str]], flags: list[str],
                       fmt: str) -> None:
    argv = ["synth", "--dp", "2", "--pp", "2", "--microbatches", "2", "--steps", "2"]
    for flag, value in opts:
        argv += [f"{flag}={value}"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        outcome = cli.run([*argv, *flags, "--format", fmt, "--out", str(out)])
        check_contract(outcome)
        written = sorted(p.name for p in out.iterdir()) if out.exists() else []
        if outcome.code == 0:
            assert written == sorted([".stragglers-outputs.json", "meta.yaml", "truth.json",
                                      f"trace.{fmt}"])
            # what synth writes, analyze accepts
            res = cli.run(["analyze", str(out / f"trace.{fmt}"), "--meta",
                           str(out / "meta.yaml"), "--out", str(Path(tmp) / "a"),
                           "--no-timelines"])
            check_contract(res, Path(tmp) / "a" / "result.json")
            assert res.code == 0, res.stderr
        else:
            assert written == []
