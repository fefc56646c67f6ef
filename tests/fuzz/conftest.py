"""Fixtures of the fuzz tests: one CLI worker process and small valid inputs to mutate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stragglers.synth import SynthSpec, write_synth
from tests.fuzz.harness import CliWorker


@pytest.fixture(scope="session")
def cli() -> Iterator[CliWorker]:
    worker = CliWorker()
    yield worker
    worker.close()


@pytest.fixture(scope="session")
def base_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A valid dp 2 x pp 2 job (120 ops) with a slow worker: parquet, JSON lines, meta."""
    out = tmp_path_factory.mktemp("fuzz-base")
    spec = SynthSpec(dp=2, pp=2, microbatches=2, steps=2, jitter=0.02, seed=5,
                     slow_workers=[(1, 0, 1.3)])
    paths = write_synth(spec, out / "p")
    jsonl = write_synth(spec, out / "j", fmt="jsonl")
    return {"trace": Path(paths["trace"]), "meta": Path(paths["meta"]),
            "jsonl": Path(jsonl["trace"])}
