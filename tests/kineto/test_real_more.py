"""The importer and the analysis on more real PyTorch profiler traces (read from
../shared/real/kineto-more; issue 23).

Sources (licence MIT): facebookresearch/HolisticTraceAnalysis @
f4d0062c382f42bd8a74838bcdad1916c7d5d2da: ``B_hta_ns_resolution_w1`` is
``tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz``,
``C_hta_mtia_w1`` is ``tests/data/mtia_trace_single_rank/mtia_rank_0.json.gz``,
``E_hta_tracediff_rank3of8`` is ``tests/data/trace_diff/control/control.json.gz``.

B and C are complete world-size-1 jobs: nothing waits for anyone, so the simulated step must
equal the recorded one (discrepancy within 5% of 1; it was 1.53 on C while the end of the
step hung off a ``gc`` op that profiler traces do not have). E is rank 3 of an 8-rank
data-parallel TorchRec job (all-to-all and all-reduce, no process-group information): a
pipeline or tensor-parallel layout contradicts it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stragglers.analysis import analyze_table
from stragglers.errors import InputError
from stragglers.kineto import import_kineto
from stragglers.trace import build_table
from stragglers.trace.io import JobMeta, read_meta
from tests.conftest import SHARED, require_shared

MORE = SHARED / "real" / "kineto-more"
COMPLETE = ("B_hta_ns_resolution_w1", "C_hta_mtia_w1")
TORCHREC = "E_hta_tracediff_rank3of8"


@pytest.fixture(scope="module")
def more() -> Path:
    return require_shared(MORE, "real profiler traces", probe=MORE / TORCHREC / "meta.yaml")


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPLETE)
def test_complete_world_size_1_jobs_simulate_their_own_step(more: Path, name: str) -> None:
    folder = more / name
    meta = read_meta(folder / "meta.yaml")
    trace, _ = import_kineto(folder, meta, jobs=1)
    result = analyze_table(build_table(trace, meta)).result
    assert abs(result.metrics.discrepancy - 1.0) < 0.05
    assert result.trustworthy


@pytest.mark.slow
def test_dp_only_torchrec_rank_with_pp_size_2_is_refused(more: Path) -> None:
    with pytest.raises(InputError, match=r"control.json.gz: metadata field 'pp_size' is 2, "
                                         r"but rank 3 \(dp rank 3, stage 0\) records no "
                                         r"send/recv"):
        import_kineto(more / TORCHREC, JobMeta(dp_size=4, pp_size=2, world_size=8), jobs=1)


def test_dp_only_torchrec_rank_with_tp_size_2_is_not_dropped(more: Path) -> None:
    with pytest.raises(InputError, match=r"control.json.gz: metadata field 'tp_size' is 2: "
                                         r"rank 3 would be collapsed into rank 2's worker"):
        import_kineto(more / TORCHREC, JobMeta(dp_size=4, pp_size=1, tp_size=2, world_size=8),
                      jobs=1)
