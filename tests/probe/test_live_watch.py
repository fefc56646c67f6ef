"""``stragglers watch`` on a live job's probe folder (issue 29), as docs/integrations.md shows
it: ``watch`` started before the job (the folder does not exist yet), a real 2-process DDP run
on CPU (gloo) of each framework snippet with rank 1 slowed in steps 40-79 only (``STEPS=120
SLOW_RANK=1 SLOW_FROM=40 SLOW_TO=80``: 0.3 s more per step); ``watch`` must name rank 1 (not
rank 0, which waits for it) within 20 steps of the slowdown and report its recovery.

The runs behind the guide's table (5 slowed and 5 healthy runs of each snippet):
``bench/bench_live_watch.py``. Each test skips when its library is missing (fails under
CI=true)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .integration import RUN_TIMEOUT, doc_argv, need, run_doc

pytestmark = pytest.mark.slow  # real processes

pytest.importorskip("torch")

SLOW_FROM, SLOW_TO = 40, 80
CASES = {
    "ddp": ("stragglers watch runs/ddp-live/probe --threshold 0.5 --idle-timeout 20",
            "STEPS=120 SLOW_RANK=1 SLOW_FROM=40 SLOW_TO=80 torchrun --standalone "
            "--nproc-per-node 2 docs/snippets/ddp_loop.py runs/ddp-live", None),
    "lightning": ("stragglers watch runs/pl-live/probe --threshold 0.5 --idle-timeout 20",
                  "STEPS=120 SLOW_RANK=1 SLOW_FROM=40 SLOW_TO=80 python "
                  "docs/snippets/lightning_ddp.py runs/pl-live", ("lightning", "lightning")),
    "hf": ("stragglers watch runs/hf-live/stragglers/probe --threshold 0.5 --idle-timeout 20",
           "STEPS=120 SLOW_RANK=1 SLOW_FROM=40 SLOW_TO=80 torchrun --standalone "
           "--nproc-per-node 2 docs/snippets/hf_trainer.py runs/hf-live", ("transformers", "hf")),
}


def _watch_the_run(watch_cmd: str, job_cmd: str, runs: Path) -> list[dict]:
    """Start ``watch`` (the page's command), then the job; the events ``watch`` printed."""
    argv, env = doc_argv(watch_cmd, runs)
    out = runs / "events.jsonl"
    with out.open("w") as fh:
        watch = subprocess.Popen(argv, stdout=fh, stderr=subprocess.PIPE, text=True)
        try:
            run_doc(job_cmd, runs)
            _, err = watch.communicate(timeout=RUN_TIMEOUT)
        finally:
            if watch.poll() is None:
                watch.kill()
    assert watch.returncode == 0, err
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("framework", sorted(CASES))
def test_watch_names_the_slowed_rank_and_its_recovery(framework: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    watch_cmd, job_cmd, extra = CASES[framework]
    if extra is not None:
        need(*extra)
    if framework == "hf":
        need("accelerate", "hf")
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing may be downloaded
    events = _watch_the_run(watch_cmd, job_cmd, tmp_path)
    summary = events[-1]
    assert summary["event"] == "summary" and summary["iterations"] == {"0": 120, "1": 120}
    assert summary["bad"] == 0 and summary["dropped"] == {}
    assert summary["skipped_files"].get("binary") == 2  # the ranks' parquet files
    onsets = [e for e in events if e["event"] == "onset"]
    assert onsets and onsets[0]["rank"] == 1, onsets
    first = onsets[0]
    assert abs(first["job_iteration"] - SLOW_FROM) <= 2, first
    assert first["declared_job_iteration"] - SLOW_FROM <= 20, first
    assert not [e for e in onsets if e["rank"] == 0], onsets  # the rank that waited
    recovery = next(e for e in events if e["event"] == "recovery" and e["rank"] == 1)
    assert abs(recovery["job_iteration"] - SLOW_TO) <= 2, recovery
    assert recovery["declared_job_iteration"] - SLOW_TO <= 20, recovery
