"""Fuzz: damaged inputs of ``stragglers mitigate`` (watch events, costs YAML, times files):
exit 0 or exit 2 with one line, never a traceback."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.harness import FUZZ, CliWorker, check_contract
from tests.fuzz.mutations import (
    BYTE_DAMAGE,
    JSON_VALUES,
    RAW_TOKENS,
    SCALARS,
    damage_bytes,
    json_line,
)

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

EVENTS = [
    {"event": "onset", "rank": 5, "iteration": 10, "declared_iteration": 12,
     "job_iteration": 10, "ts": None, "line": 40, "level_s": 1.5, "previous_s": 1.0,
     "healthy_s": 1.0, "severity": 0.33},
    {"event": "suspects", "onset_ranks": [5], "profiled_calls": 9,
     "groups": [{"verdict": "waiting_for_peer"}]},
    {"event": "change", "rank": 5, "iteration": 40, "declared_iteration": 43, "level_s": 2.0,
     "previous_s": 1.5, "healthy_s": 1.0, "severity": 0.5},
    {"event": "recovery", "rank": 5, "iteration": 90, "declared_iteration": 93,
     "level_s": 1.0, "previous_s": 2.0, "healthy_s": 1.0, "severity": 0.0},
    {"event": "summary", "iterations": {"0": 120, "5": 120}, "slow_ranks": []},
]
FIELDS = ["event", "rank", "iteration", "declared_iteration", "level_s", "healthy_s",
          "groups", "iterations"]


@FUZZ
@given(data=st.data())
def test_damaged_events(cli: CliWorker, data: st.DataObject) -> None:
    lines = []
    for ev in EVENTS:
        record = dict(ev)
        key, raw = None, None
        kind = data.draw(st.sampled_from(["keep", "keep", "set", "delete", "raw"]))
        field = data.draw(st.sampled_from(FIELDS))
        if kind == "set":
            record[field] = data.draw(SCALARS | JSON_VALUES)
        elif kind == "delete":
            record.pop(field, None)
        elif kind == "raw":
            key, raw = field, data.draw(RAW_TOKENS)
        try:
            lines.append(json_line(record, key, raw))
        except (TypeError, ValueError):
            lines.append(json.dumps(ev))
    raw_bytes = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    raw_bytes = damage_bytes(raw_bytes, data.draw(BYTE_DAMAGE), data.draw(st.floats(0, 1)))
    costs = {"S2": {"overhead_s": data.draw(SCALARS)}} if data.draw(st.booleans()) else None
    with tempfile.TemporaryDirectory() as tmp:
        events = Path(tmp) / "events.jsonl"
        events.write_bytes(raw_bytes)
        meta = Path(tmp) / "meta.yaml"
        meta.write_text("dp_size: 4\npp_size: 2\n")
        argv = ["mitigate", "plan", str(events), "--meta", str(meta), "--json"]
        if costs is not None:
            path = Path(tmp) / "costs.yaml"
            try:
                path.write_text(yaml.safe_dump(costs))
            except (yaml.YAMLError, ValueError, UnicodeEncodeError):
                path.write_text("S2: {overhead_s: 1}\n")
            argv += ["--costs", str(path)]
        check_contract(cli.run(argv))


@FUZZ
@given(tokens=st.lists(st.one_of(SCALARS.map(str), RAW_TOKENS), min_size=0, max_size=6),
       microbatches=st.integers(-3, 2**62), damage=BYTE_DAMAGE, pos=st.floats(0, 1))
def test_damaged_times(cli: CliWorker, tokens: list[str], microbatches: int, damage: str,
                       pos: float) -> None:
    raw = damage_bytes(",".join(tokens).encode("utf-8", "surrogatepass"), damage, pos)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "times.txt"
        path.write_bytes(raw)
        check_contract(cli.run(["mitigate", "microbatch", "--times", f"@{path}",
                                "--microbatches", str(microbatches), "--json"]))
