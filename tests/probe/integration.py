"""Helpers of the integration tests: run a training script as a user would (``torchrun`` or
``python``, 2 processes on CPU with gloo) and analyse its trace with the ``stragglers`` CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SNIPPETS = REPO / "docs" / "snippets"
#: A training run of these tests must end well within this (seconds, on a loaded machine).
RUN_TIMEOUT = 420


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def need(module: str, extra: str) -> None:
    """Skip when ``module`` is not installed (fail under CI=true: CI installs the extras)."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        reason = f"{module} is not installed (pip install -e '.[{extra}]')"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)


def tool(name: str) -> list[str]:
    """The command of a console script installed beside this Python (``stragglers``,
    ``torchrun``), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    if beside.exists():
        return [str(beside)]
    found = shutil.which(name)
    if found is None:
        if name == "torchrun":
            return [sys.executable, "-m", "torch.distributed.run"]
        pytest.fail(f"{name} not found beside {sys.executable} nor on PATH")
    return [found]


def run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = REPO,
        timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run a command; a non-zero exit fails the test with the end of its output."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd, env=full_env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-5000:]}")
    return proc


def torchrun(script: Path, *args: str, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node 2 SCRIPT ARGS`` (a free port per run)."""
    return run([*tool("torchrun"), "--standalone", "--nproc-per-node", "2", str(script),
                *args], env=env)


def analyze(out: Path) -> dict[str, Any]:
    """``stragglers analyze OUT/trace.parquet --meta OUT/meta.yaml --out OUT/analysis``;
    returns result.json."""
    run([*tool("stragglers"), "analyze", str(out / "trace.parquet"), "--meta",
         str(out / "meta.yaml"), "--out", str(out / "analysis")])
    doc: dict[str, Any] = json.loads((out / "analysis" / "result.json").read_text())
    return doc
