"""Helpers of the integration tests: run the commands docs/integrations.md shows, as a user
would (``torchrun``, ``python``, the ``stragglers`` CLI in subprocesses; 2 processes on CPU
with gloo), with the page's ``runs/`` folder moved into the test's temporary folder and
``../shared/real`` pointing at the real data."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "integrations.md"
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


@cache
def doc_commands() -> tuple[str, ...]:
    """The command lines of the page's ``sh`` blocks (continuation lines joined)."""
    text = DOC.read_text()
    lines: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        lines.extend(block.replace("\\\n", " ").splitlines())
    return tuple(" ".join(line.split()) for line in lines if line.strip())


def run(cmd: list[str], env: dict[str, str] | None = None,
        timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run a command in the checkout; a non-zero exit fails the test with its output."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd, env=full_env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-5000:]}")
    return proc


def doc_argv(command: str, runs: Path) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of one of the page's commands, with ``runs/`` in ``runs``
    and ``../shared/real`` the real data; fails when the page does not show the command."""
    assert command in doc_commands(), f"docs/integrations.md does not show: {command}"
    text = command.replace("runs/", f"{runs}/").replace("../shared/real", str(SHARED / "real"))
    words = shlex.split(text)
    env: dict[str, str] = {}
    while "=" in words[0]:
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    head = {"python": [sys.executable], "torchrun": tool("torchrun"),
            "stragglers": tool("stragglers")}[words[0]]
    return head + words[1:], env


def run_doc(command: str, runs: Path) -> subprocess.CompletedProcess[str]:
    """Run one of the page's commands (:func:`doc_argv`); a non-zero exit fails the test."""
    argv, env = doc_argv(command, runs)
    return run(argv, env)


def result(folder: Path) -> dict[str, Any]:
    """The result.json that ``stragglers analyze ... --out FOLDER`` wrote."""
    doc: dict[str, Any] = json.loads((folder / "result.json").read_text())
    return doc


#: The slow data loader of the snippets' runs (``SLOW_LOADER_MS``), seconds.
LOADER_DELAY_S = 0.130


def check_slow_loader(trace_file: Path, wait_span: str,
                      delay_s: float = LOADER_DELAY_S) -> list[float]:
    """Check the merged trace of a 2-rank run whose rank 1 loads each batch ``delay_s`` late
    (``SLOW_LOADER_RANK=1``) and return rank 1's first-op start minus rank 0's, per step.

    Rank 1 starts each step late on the common clock: its first op starts at least
    0.8 x ``delay_s`` after rank 0's (median over the steps; at least 0.5 x in 9 steps of 10:
    a margin for a loaded 2-core machine, where rank 0 may lose the CPU for a few tens of
    milliseconds, and once in a while for longer: a step where rank 0 started 0.59 s after
    rank 1 was seen at load 7). Rank 0 waits for it in ``wait_span`` (a DP-synchronised
    collective), not in its compute: its median ``wait_span`` lasts at least 0.6 x ``delay_s``
    longer than rank 1's, and neither rank's compute (forward + backward) holds the delay."""
    import pandas as pd

    trace = pd.read_parquet(trace_file)
    trace["optype"] = trace["optype"].astype(str)
    first = trace.groupby(["step", "dp_rank"])["start_ts"].min().unstack()
    lag = (first[1] - first[0]).to_numpy()
    assert float(pd.Series(lag).median()) >= 0.8 * delay_s, lag
    assert (lag >= 0.5 * delay_s).mean() >= 0.9, lag
    per_step = trace.groupby(["optype", "dp_rank", "step"])["duration"].sum()
    medians = per_step.groupby(["optype", "dp_rank"]).median().unstack("dp_rank")
    assert wait_span in medians.index, f"no {wait_span}; median durations:\n{medians}"
    wait = per_step[wait_span].unstack("dp_rank")
    assert float((wait[0] - wait[1]).median()) >= 0.6 * delay_s, wait
    compute = (per_step["forward-compute"] + per_step["backward-compute"]).unstack("dp_rank")
    assert abs(float((compute[0] - compute[1]).median())) < 0.3 * delay_s, compute
    return [round(float(x), 4) for x in lag]
