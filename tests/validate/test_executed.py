"""Executed validation passes: real processes, real gloo transfers and GEMMs on CPU.

The injected faults are far beyond the noise of a loaded 2-core machine: a link capped at
10 MB/s (a 2 MB transfer takes >= 200 ms; healthy ones take 0.3 to 15 ms on loopback) and a
GEMM made 6 times as long; links and ranks are judged on their best of several repeats (noise
only adds time). No assertion on a duration.

Healthy loopback "links" between processes that share 2 busy cores differ up to 30-fold (by
how the scheduler places the pair), so a healthy link can also fall below median / factor
there: the tests require the injected link to be flagged and to be the slowest, and do not
require the other links to pass. GEMM turns are serial and stable: there the flagged set must
be exactly the injected rank.
"""

from __future__ import annotations

import json

import pytest

from stragglers.cli import main
from stragglers.validate.compare import evaluate_run
from stragglers.validate.executed import ValidationConfig, run_validation
from stragglers.validate.plan import tree_edges

pytest.importorskip("torch")


@pytest.mark.slow
def test_ring_names_the_slow_link_and_the_slow_gemm_rank(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    code = main(["validate", "ring", "--ranks", "0,2,1,3", "--bytes", "2000000",
                 "--repeats", "4", "--gemm-n", "128", "--factor", "3",
                 "--inject-slow-link", "2:10", "--inject-slow-gemm", "3:6", "--json"])
    assert code == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["backend"] == "gloo" and rep["ranks"] == [0, 2, 1, 3]
    # ring 0 -> 2 -> 1 -> 3 -> 0: rank 2 sends on 2 -> 1 only
    assert [(x["src"], x["dst"]) for x in rep["links"]] == [(0, 2), (2, 1), (1, 3), (3, 0)]
    assert [2, 1] in rep["slow_links"]
    slowest = min(rep["links"], key=lambda x: x["gbytes_per_s"])
    assert (slowest["src"], slowest["dst"]) == (2, 1)
    assert slowest["gbytes_per_s"] < 0.01 * 1.05  # never faster than its cap (10 MB/s)
    assert rep["slow_gemm_ranks"] == [3]
    assert len(rep["passes"]) == 2


@pytest.mark.slow
def test_tree_both_directions_names_a_leaf_sender() -> None:
    """Heap tree over 5 ranks: 1->0, 2->0, 3->1, 4->1 and back; rank 4's sends are capped:
    4->1 is slow, 1->4 is not."""
    cfg = ValidationConfig("tree", (0, 1, 2, 3, 4), 5, transfer_bytes=2_000_000, repeats=4,
                           gemm_n=128, bidirectional=True, slow_link=(4, 10.0),
                           slow_gemm=(0, 6.0))
    run = run_validation(cfg)
    assert {(t.src, t.dst) for t in run.transfers} == set(
        tree_edges(5) + [(b, a) for a, b in tree_edges(5)])
    assert len(run.transfers) == 8 * 4
    rep = evaluate_run(run, factor=3.0)
    assert (4, 1) in rep.slow_links
    assert min(rep.links, key=lambda x: x.bandwidth).src == 4
    assert rep.slow_gemm_ranks == [0]


@pytest.mark.slow
def test_no_fault_no_gemm_outlier() -> None:
    """Without injection the GEMM test (serial turns, best repeat) flags nobody."""
    cfg = ValidationConfig("ring", (0, 1, 2), 3, transfer_bytes=1_000_000, repeats=4,
                           gemm_n=128)
    rep = evaluate_run(run_validation(cfg), factor=3.0)
    assert rep.slow_gemm_ranks == []
    assert len(rep.passes) == 3  # odd ring: 3 passes


@pytest.mark.parametrize("argv, message", [
    (["--ranks", "1"], "at least 2 ranks"),
    (["--ranks", "0,1,1"], "appears twice"),
    (["--ranks", "4", "--inject-slow-link", "7:10"], "rank 7 is not one of the 4 ranks"),
    (["--ranks", "a,b"], "expected integers"),
    (["--ranks", "100000"], "exceed the limit"),
    (["--ranks", "4", "--inject-slow-gemm", "1:0.5"], "factor >= 1"),
])
def test_bad_options_are_one_line_errors(argv: list[str], message: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "ring", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
