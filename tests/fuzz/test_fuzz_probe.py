"""Fuzz: damaged probe rank files through ``stragglers probe merge``.

The rank files of a tiny dp 2 x pp 2 job (tests/probe/synthetic.py) get record fields set to
random values or raw tokens, lines deleted, inserted or cut, bytes damaged; ``probe merge``
must end with exit 0 (the trace and metadata written) or exit 2 with one line.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.harness import FUZZ, CliWorker, check_contract
from tests.fuzz.mutations import BYTE_DAMAGE, JSON_VALUES, RAW_TOKENS, damage_bytes, json_line
from tests.probe.synthetic import write_job

pytestmark = pytest.mark.slow  # real processes or long runs (`pytest -m "not slow"` skips them)

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)
FIELDS = ["kind", "step", "optypes", "start", "end", "mb_id", "mc", "rank", "dp_rank", "stage",
          "tp_rank", "local", "offset", "rtt"]


@FUZZ
@given(data=st.data())
def test_damaged_rank_files(cli: CliWorker, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe"
        meta: dict[str, Any] = write_job(src, dp=2, steps=2)
        files = sorted(src.glob("rank-*.jsonl"))
        for _ in range(data.draw(st.integers(1, 3), label="n_mutations")):
            path = data.draw(st.sampled_from(files), label="file")
            lines = path.read_bytes().decode("utf-8", "surrogateescape").splitlines() or [""]
            row = data.draw(st.integers(0, len(lines) - 1), label="line")
            kind = data.draw(st.sampled_from(["raw", "value", "delete_key", "drop_line",
                                              "cut_line", "garbage", "bytes"]), label="kind")
            try:
                rec = json.loads(lines[row])
            except (ValueError, RecursionError):
                rec = {}
            if not isinstance(rec, dict):
                rec = {}
            key = data.draw(st.sampled_from(FIELDS), label="key")
            if kind == "raw":
                lines[row] = json_line(rec, key, data.draw(RAW_TOKENS, label="token"))
            elif kind == "value":
                rec[key] = data.draw(JSON_VALUES, label="value")
                lines[row] = json.dumps(rec)
            elif kind == "delete_key":
                rec.pop(key, None)
                lines[row] = json.dumps(rec)
            elif kind == "drop_line":
                del lines[row]
            elif kind == "cut_line":
                lines[row] = lines[row][: data.draw(st.integers(0, len(lines[row])))]
            elif kind == "garbage":
                lines.insert(row, data.draw(TEXT, label="garbage"))
            text = ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")
            if kind == "bytes":
                text = damage_bytes(text, data.draw(BYTE_DAMAGE, label="damage"),
                                    data.draw(st.floats(0, 1), label="position"))
            path.write_bytes(text)
        meta_path = Path(tmp) / "meta.yaml"
        meta_path.write_text(yaml.safe_dump(meta))
        out = Path(tmp) / "out"
        outcome = cli.run(["probe", "merge", str(src), "--meta", str(meta_path), "--out",
                           str(out)])
        check_contract(outcome)
        if outcome.code == 0:
            assert (out / "trace.parquet").is_file() and (out / "meta.yaml").is_file()
        else:  # nothing half-written
            assert not out.exists() or not any(out.iterdir())
