"""The three Megatron-LM paths that need no change to Megatron, run as docs/integrations.md
shows them (the ``stragglers`` CLI in a subprocess), each on a real excerpt read at test time
from ``../shared/real`` (never copied into the repository; skipped outside CI when absent,
failing under CI=true):

* iteration times into ``stragglers watch``: ``megatron-iter/`` (Megatron's iteration-time
  JSON, its functional tests' golden values) and ``iter-more/`` (real iteration times as
  watch records, with slow periods a person labelled);
* a ``torch.profiler`` trace into ``stragglers import kineto`` (``kineto-more/``, ``kineto/``);
* NCCL flight-recorder dumps into ``stragglers detect hang --flight-recorder``
  (``flight-recorder/``, a hung 16-rank Megatron MoE job).

Sources and licences (``../shared/real/README.md``): NVIDIA/Megatron-LM @ d98e8a6
(``tests/functional_tests/test_cases/...``, NVIDIA Megatron-LM licence, BSD-3-Clause style);
facebookresearch/HolisticTraceAnalysis @ f4d0062 (``tests/data/...``, MIT);
NVIDIA/nvidia-resiliency-ext @ d8686d9 (``tests/attribution/unit/fr_traces/``, Apache-2.0).
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED, require_shared
from tests.probe.integration import doc_argv, result, run_doc

REAL = SHARED / "real"
GPT3_GB200 = REAL / "megatron-iter" / (
    "gpt_gpt3_weekly_mcore_tp2_pp2_current_scaling_native_fp8_tp_pp_sp_tp_overlap__dev_dgx_"
    "gb200.json")
GPT3_15B = REAL / "iter-more" / "mlm_gpt3_15b_8t_release_h100.jsonl"
DDP_W1 = REAL / "kineto-more" / "B_hta_ns_resolution_w1"
DDP_RANK0_OF_2 = REAL / "kineto" / "hta-ddp-rank0-of-2.json.gz"
FLIGHT_RECORDER = REAL / "flight-recorder"


def real(path: Path) -> Path:
    """A real excerpt of ../shared; skip outside CI when it is absent, fail inside CI."""
    return require_shared(path, "real data")


def events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


# -- (a) iteration times into watch -------------------------------------------------------------
def test_watch_reads_megatrons_iteration_time_json(tmp_path: Path) -> None:
    path = real(GPT3_GB200)
    values = json.loads(path.read_text())["iteration-time"]["values"]
    numbers = [v for v in values.values() if v != "nan" and not math.isnan(float(v))]
    out = events(run_doc(f"stragglers watch ../shared/real/megatron-iter/{path.name}",
                         tmp_path).stdout)
    summary = out[-1]
    assert summary["event"] == "summary"
    assert summary["records"] == len(numbers) and summary["bad"] == 0
    # among its slow periods one is 2.5 times the healthy iteration time; the job recovers
    onsets = [e for e in out if e["event"] == "onset"]
    worst = max(onsets, key=lambda e: e["level_s"] / e["healthy_s"])
    assert worst["level_s"] > 2 * worst["healthy_s"]
    assert any(e["event"] == "recovery" and e["iteration"] > worst["iteration"] for e in out)


def test_watch_finds_the_labelled_slow_period_of_a_real_run(tmp_path: Path) -> None:
    path = real(GPT3_15B)
    labels = json.loads((path.parent / "labels.json").read_text())[path.stem]
    (first, last), = labels["slow_periods"]  # 2001-2300: iterations 4.2x as long
    out = events(run_doc(f"stragglers watch ../shared/real/iter-more/{path.name} --once",
                         tmp_path).stdout)
    onsets = [e for e in out if e["event"] == "onset"]
    assert len(onsets) == 1, onsets
    assert first <= onsets[0]["job_iteration"] <= last
    recovery = [e for e in out if e["event"] == "recovery"]
    assert recovery and recovery[0]["job_iteration"] > last


# -- (b) a torch.profiler trace into import kineto ----------------------------------------------
@pytest.mark.slow
def test_import_kineto_then_analyze(tmp_path: Path) -> None:
    real(DDP_W1)
    printed = run_doc(
        "stragglers import kineto ../shared/real/kineto-more/B_hta_ns_resolution_w1 --meta "
        "../shared/real/kineto-more/B_hta_ns_resolution_w1/meta.yaml --out runs/prof",
        tmp_path).stdout
    out = tmp_path / "prof"
    assert f"wrote {out / 'trace.parquet'} and {out / 'meta.yaml'}" in printed
    summary = run_doc("stragglers analyze runs/prof/trace.parquet --meta runs/prof/meta.yaml "
                      "--out runs/prof/analysis", tmp_path).stdout
    res = result(out / "analysis")
    assert res["steps"] == [101, 102, 103, 104, 105]  # ProfilerStep#101-105
    assert "verdict: none" in summary and res["trustworthy"] is True


@pytest.mark.slow
def test_import_kineto_of_one_rank_of_two_needs_partial(tmp_path: Path) -> None:
    real(DDP_RANK0_OF_2)
    (tmp_path / "ddp2.yaml").write_text("dp_size: 2\npp_size: 1\n")
    command = ("stragglers import kineto ../shared/real/kineto/hta-ddp-rank0-of-2.json.gz "
               "--meta runs/ddp2.yaml --out runs/prof-rank0")
    argv, _ = doc_argv(command, tmp_path)
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "incomplete job" in refused.stderr
    assert "--partial" in refused.stderr
    run_doc(command + " --partial", tmp_path)
    report = json.loads((tmp_path / "prof-rank0" / "partial-report.json").read_text())
    assert report["schema"] == "stragglers.partial-report"
    assert (report["world_size"], report["traced_ranks"]) == (2, [0])


# -- (c) NCCL flight-recorder dumps into detect hang --------------------------------------------
def _expected_missing(folder: Path) -> set[int]:
    """The publishing project's answer: the 'Missing Ranks' column of expected.txt."""
    rows = (folder / "expected.txt").read_text().splitlines()[1:]
    return {int(r) for row in rows if row.strip()
            for r in row.rsplit("|", 1)[1].replace(",", " ").split()}


def test_detect_hang_prints_the_suspects(tmp_path: Path) -> None:
    folder = real(FLIGHT_RECORDER / "lock_gil_2nd")
    human = run_doc("stragglers detect hang --flight-recorder "
                    "../shared/real/flight-recorder/lock_gil_2nd", tmp_path).stdout
    assert "suspects: [10, 15]" in human.splitlines()
    assert _expected_missing(folder) == {10, 15}


@pytest.mark.parametrize("dumps", ["gpu_error_1st", "lock_gil_2nd"])
def test_detect_hang_names_the_ranks_megatron_waited_for(dumps: str, tmp_path: Path) -> None:
    folder = real(FLIGHT_RECORDER / dumps)
    doc = json.loads(run_doc("stragglers detect hang --flight-recorder "
                             f"../shared/real/flight-recorder/{dumps} --json", tmp_path).stdout)
    assert set(doc["suspect_ranks"]) == _expected_missing(folder)
    assert {g["desc"] for g in doc["groups"]} == {"EXPERT_MODEL_PARALLEL_GROUP"}
