"""S3 plans on small topologies with known answers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stragglers.cli import main
from stragglers.errors import InputError
from stragglers.mitigate.topology import consolidate, reassign_link
from stragglers.trace.io import JobMeta

DP4_PP4 = JobMeta.from_dict({"dp_size": 4, "pp_size": 4})  # worker = stage * 4 + dp


def _slow_stages(plan, slow_workers) -> set[int]:
    return {plan.where(w)[1] for w in slow_workers}


def test_two_stragglers_into_one_interior_stage() -> None:
    # Falcon Fig. 16: two slow workers in stages 0 and 1 of a (4 DP, 4 PP) job -> one stage
    plan = consolidate(DP4_PP4, [1, 6])
    assert _slow_stages(plan, [1, 6]) == {1}
    # worker 6 (dp 2, stage 1) stays; worker 1 swaps with the first healthy worker of stage 1
    assert plan.details.swaps == [[1, 4]]
    assert plan.where(1) == (0, 1) and plan.where(4) == (1, 0)
    assert sorted(plan.position.tolist()) == list(range(16))  # a permutation


def test_six_stragglers_need_two_stages_interior_first() -> None:
    slow = [1, 6, 11, 12, 14, 15]  # stages 0, 1, 2, 3, 3, 3
    plan = consolidate(DP4_PP4, slow)
    assert _slow_stages(plan, slow) == {1, 2}  # ceil(6/4) = 2 stages, both interior
    assert plan.details.stages_before == [0, 1, 2, 3]
    assert len(plan.details.swaps) == 4  # 6 and 11 already there
    assert plan.where(6) == (2, 1) and plan.where(11) == (3, 2)


def test_already_consolidated_and_edges() -> None:
    plan = consolidate(DP4_PP4, [4, 5, 7])  # all in interior stage 1
    assert plan.moves == [] and plan.details.stages_after == [1]
    pp2 = JobMeta.from_dict({"dp_size": 2, "pp_size": 2})  # no interior stage
    plan = consolidate(pp2, [0, 3])  # stages 0 and 1 -> stage 0 (lower index on a tie)
    assert _slow_stages(plan, [0, 3]) == {0} and plan.details.swaps == [[3, 1]]
    # both interior stages already hold the three slow workers: nothing moves
    plan = consolidate(JobMeta.from_dict({"dp_size": 2, "pp_size": 4}), [2, 4, 5])
    assert _slow_stages(plan, [2, 4, 5]) == {1, 2} and plan.moves == []


def test_rank_permutation_with_tensor_parallel() -> None:
    meta = JobMeta.from_dict({"dp_size": 2, "pp_size": 3, "tp_size": 2})  # 12 ranks
    plan = consolidate(meta, [0, 1, 10])  # rank 0, 1: worker 0 (stage 0); 10: worker 5
    # two slow workers, dp 2: one stage, the interior stage 1 (workers 2, 3)
    assert plan.details.slow_workers == [0, 5]
    assert _slow_stages(plan, [0, 5]) == {1}
    perm = plan.rank_permutation()
    assert sorted(perm.tolist()) == list(range(12))
    assert perm[0] // 2 == plan.position[0] and perm[1] == perm[0] + 1  # tp ranks together


def test_link_reassignment() -> None:
    # Falcon Fig. 10 in small: a slow link between dp 2 and dp 3 of stage 0 (DP traffic)
    plan = reassign_link(DP4_PP4, 2, 3)
    a, b = plan.where(2), plan.where(3)
    assert a == (2, 0) and b == (2, 1)  # same DP rank, adjacent stages: a PP edge
    assert plan.details.swaps == [[3, 6]]
    # in the last stage the partner goes to the previous stage
    plan = reassign_link(DP4_PP4, 12, 13)
    assert plan.where(12) == (0, 3) and plan.where(13) == (0, 2)
    # already a PP edge, or no shared group: nothing to move
    assert reassign_link(DP4_PP4, 1, 5).moves == []
    assert "no DP or PP group" in reassign_link(DP4_PP4, 1, 6).note
    with pytest.raises(InputError, match="one pipeline stage"):
        reassign_link(JobMeta.from_dict({"dp_size": 4, "pp_size": 1}), 0, 1)
    with pytest.raises(InputError, match="rank 16 is outside the job's 16 ranks"):
        reassign_link(DP4_PP4, 0, 16)


def test_topology_cli(tmp_path, capsys) -> None:
    meta = tmp_path / "meta.yaml"
    meta.write_text("dp_size: 4\npp_size: 4\n")
    assert main(["mitigate", "topology", "--meta", str(meta), "--slow-ranks", "1,6",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stages_after"] == [1] and np.array_equal(
        sorted(out["rank_permutation"]), np.arange(16))
    assert main(["mitigate", "topology", "--meta", str(meta), "--slow-link", "2,3"]) == 0
    assert "worker 3: (dp 3, stage 0) -> (dp 2, stage 1)" in capsys.readouterr().out
    for argv, needle in ((["--slow-link", "1"], "expected two ranks"),
                         (["--slow-ranks", "1,x"], "rank 2 'x' is not an integer"),
                         (["--slow-ranks", "-1"], "rank -1 is outside")):
        assert main(["mitigate", "topology", "--meta", str(meta), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err
