"""Fuzz: damaged metadata YAML (values, types, keys, aliases, nesting, bytes) with a valid
trace through ``stragglers analyze``: exit 0 with a sane result or exit 2 with one line."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.harness import FUZZ, CliWorker, check_contract
from tests.fuzz.mutations import BYTE_DAMAGE, JSON_VALUES, SCALARS, damage_bytes

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

KEYS = ["dp_size", "pp_size", "tp_size", "dsp_size", "vpp_size", "world_size", "trial_name",
        "run_id", "labels", "name"]
#: Raw YAML fragments beyond what safe_dump writes.
RAW_YAML = st.sampled_from([
    "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
    "x: " + "[" * 5000 + "]" * 5000 + "\n", "dp_size: " + "9" * 5000 + "\n",
    "dp_size: 0x10\n", "dp_size: 1_0\n", "dp_size: 2.0\n", "dp_size: !!python/int 2\n",
    "labels: {when: 2024-01-01}\n", "labels: !!set {a, b}\n", "labels: {x: .nan}\n",
    "vpp-size: 1\n", "pp-size: 2\n", "---\ndp_size: 2\n---\n", "\t\n", "%YAML 1.1\n---\n",
    "? [a, b]\n: 1\n", "labels: !!binary aGVsbG8=\n", "dp_size: &x 2\npp_size: *x\n",
])


@FUZZ
@given(data=st.data())
def test_damaged_metadata(cli: CliWorker, base_job: dict[str, Any], data: st.DataObject
                          ) -> None:
    meta = yaml.safe_load(base_job["meta"].read_text())
    for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
        kind = data.draw(st.sampled_from(["set", "set", "delete", "add", "raw"]), label="kind")
        key = data.draw(st.sampled_from(KEYS), label="key")
        if kind == "set":
            meta[key] = data.draw(SCALARS | JSON_VALUES, label="value")
        elif kind == "delete":
            meta.pop(key, None)
        elif kind == "add":
            meta[data.draw(st.text(max_size=12), label="new_key")] = data.draw(SCALARS)
    try:
        text = yaml.safe_dump(meta, sort_keys=False)
    except (yaml.YAMLError, ValueError):
        text = "dp_size: 2\npp_size: 2\n"
    if kind == "raw":
        text += data.draw(RAW_YAML, label="raw")
    raw = text.encode("utf-8", "surrogatepass")
    raw = damage_bytes(raw, data.draw(BYTE_DAMAGE, label="bytes"),
                       data.draw(st.floats(0, 1), label="position"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "meta.yaml"
        path.write_bytes(raw)
        out = Path(tmp) / "out"
        outcome = cli.run(["analyze", str(base_job["trace"]), "--meta", str(path), "--out",
                           str(out), "--no-timelines"])
        check_contract(outcome, out / "result.json" if outcome.code == 0 else None)
