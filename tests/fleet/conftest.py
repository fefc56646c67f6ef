"""A small synthetic fleet (12 jobs of 8-16 workers) shared by the fleet tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from stragglers.synth.fleet import FleetShape, write_fleet

#: Tuning of the synthetic strengths was done on seed 1; the tests use other seeds.
SMALL_SEED = 5
SMALL = FleetShape(min_workers=8, max_workers=16, min_steps=4, max_steps=6)
MIX = {"none": 0.2, "worker": 0.15, "last_stage": 0.15, "sequence_length": 0.1, "gc": 0.1,
       "communication": 0.1, "combination": 0.2}


@pytest.fixture(scope="module")
def small_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    write_fleet(12, root, SMALL_SEED, SMALL, MIX)
    return root
