"""The dependency rules of whatif-model.md §2-§3, one by one, on small traces checked by hand;
and the graphs of the reference traces and of every synthetic shape pinned by fingerprint.

The fingerprints were taken from the graph builder as it stood before its rewrite into one
function per rule (same dependencies, groups and no-ops), so a change of any rule shows up
here. A fingerprint is over op identities (stage, optype, seq_id), not node numbers. If a
rule is changed on purpose, print the new ones with ``python -m tests.model.test_graph_rules``
(synthetic shapes also change when the synth schedule changes).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np
import pytest

from stragglers.errors import ModelError
from stragglers.model import DependencyGraph, build_graph
from stragglers.synth import SynthSpec, generate
from stragglers.trace import build_table, schema
from stragglers.trace.io import read_meta, read_trace
from stragglers.trace.table import OpTable
from tests.analysis import handmade

SHORT = {
    schema.FORWARD_COMPUTE: "F", schema.BACKWARD_COMPUTE: "B",
    schema.FORWARD_SEND: "FS", schema.FORWARD_RECV: "FR",
    schema.BACKWARD_SEND: "BS", schema.BACKWARD_RECV: "BR",
    schema.PARAMS_ALL_GATHER: "AG", schema.GRADS_REDUCE_SCATTER: "RS",
    schema.SEPARATE_GRADS_ALL_REDUCE: "SAR", schema.LAYERNORM_ALL_REDUCE: "LN",
    schema.EMBEDDING_ALL_REDUCE: "EMB", schema.CLIP: "CLIP", schema.OPTIMIZER: "OPT",
    schema.GC: "GC",
}


def label(table: OpTable, n: int) -> str:
    """``"stage:TYPEseq"``, e.g. ``"1:FR0"`` for forward-recv seq 0 on stage 1."""
    optype = schema.OPTYPES[int(table.node_optype[n])]
    return f"{int(table.node_stage[n])}:{SHORT[optype]}{int(table.node_seq[n])}"


def dependencies(table: OpTable, g: DependencyGraph) -> dict[str, set[str]]:
    return {label(table, n): {label(table, d) for d in g.deps[n]} for n in range(g.n_nodes)}


def groups(table: OpTable, g: DependencyGraph) -> set[tuple[frozenset[str], bool]]:
    return {(frozenset(label(table, m) for m in members), bool(sync))
            for members, sync in zip(g.groups, g.group_dp_sync, strict=True)}


def labels(table: OpTable, mask: np.ndarray) -> set[str]:
    return {label(table, n) for n in np.flatnonzero(mask)}


def synth_table(**shape) -> OpTable:
    trace, meta, _ = generate(SynthSpec(steps=1, **shape))
    return build_table(trace, meta)


def test_overlapped_two_by_two():
    """dp 2 × pp 2, 2 microbatches, DP collectives overlapped: every dependency by hand.

    Stage 0 runs F0 F1 B0 B1 (warm-up of one forward), stage 1 runs F0 B0 F1 B1."""
    t = synth_table(dp=2, pp=2, microbatches=2, overlap=True)
    g = build_graph(t)
    assert dependencies(t, g) == {
        # Stage 0. Parameters before use; compute stream; compute k -> send k.
        "0:AG0": set(), "0:F0": {"0:AG0"}, "0:F1": {"0:F0"},
        "0:FS0": {"0:F0"}, "0:FS1": {"0:F1", "0:FS0"},
        # Warm-up overlap: the first backward-recv follows the forward two positions before
        # the first backward (F0); recv k -> compute k and compute k-1 -> recv k.
        "0:BR0": {"0:F0"}, "0:B0": {"0:F1", "0:BR0"},
        "0:BR1": {"0:B0", "0:BR0"}, "0:B1": {"0:B0", "0:BR1"},
        # DP stream (AG -> RS); gradients after use (after the chunk's last backward).
        "0:RS0": {"0:AG0", "0:B1"},
        # End of step, DP overlapped: gc after the last compute; {last RS, gc} -> LN -> EMB
        # -> separate-grads-AR -> clip -> optimizer.
        "0:GC0": {"0:B1"}, "0:LN0": {"0:GC0", "0:RS0"}, "0:EMB0": {"0:LN0"},
        "0:SAR0": {"0:EMB0"}, "0:CLIP0": {"0:SAR0"}, "0:OPT0": {"0:CLIP0"},
        # Stage 1: no warm-up overlap (its first backward is at position 1).
        "1:AG0": set(), "1:FR0": set(), "1:F0": {"1:FR0", "1:AG0"}, "1:B0": {"1:F0"},
        "1:FR1": {"1:F0", "1:FR0"}, "1:F1": {"1:B0", "1:FR1"},
        "1:BS0": {"1:B0"}, "1:B1": {"1:F1"}, "1:BS1": {"1:B1", "1:BS0"},
        "1:RS0": {"1:AG0", "1:B1"},
        "1:GC0": {"1:B1"}, "1:LN0": {"1:GC0", "1:RS0"}, "1:EMB0": {"1:LN0"},
        "1:SAR0": {"1:EMB0"}, "1:CLIP0": {"1:SAR0"}, "1:OPT0": {"1:CLIP0"},
    }
    assert groups(t, g) == {
        (frozenset({"0:FS0", "1:FR0"}), False), (frozenset({"0:FS1", "1:FR1"}), False),
        (frozenset({"1:BS0", "0:BR0"}), False), (frozenset({"1:BS1", "0:BR1"}), False),
        (frozenset({"0:EMB0", "1:EMB0"}), False),
        (frozenset({"0:CLIP0", "1:CLIP0"}), True),
        *((frozenset({f"{s}:{op}0"}), True) for s in (0, 1) for op in ("AG", "RS", "SAR")),
    }
    assert not g.noop_timing.any() and not g.noop_chunk.any()
    assert len(g.groups) == 12 and (g.group_of >= 0).sum() == 18  # LN, GC, OPT: local


def test_interleaved_no_ops_by_chunk_and_wrap_around():
    """dp 1 × pp 2 × vpp 2, 2 microbatches: model chunks 0/1 of stage s have gmc s and 2+s.

    A recv's peer chunk is gmc − 1 (forward) or gmc + 1 (backward), a send's the other
    way; outside [0, 4) the op is a no-op by chunk but keeps its compute dependency."""
    t = synth_table(dp=1, pp=2, vpp=2, microbatches=2)
    g = build_graph(t)
    assert labels(t, g.noop_chunk) == {"0:FR0", "0:FR1", "0:BS2", "0:BS3",
                                       "1:FS2", "1:FS3", "1:BR0", "1:BR1"}
    assert not g.noop_timing.any()
    deps = dependencies(t, g)
    assert deps["0:F0"] == {"0:FR0"}  # a no-op by chunk still feeds its compute
    assert deps["0:BS2"] == {"0:B2", "0:BS1"}
    # Warm-up overlap: stage 0 runs F0 F1 F2 F3 B0 ..., stage 1 runs F0 F1 F2 B0 ...
    assert deps["0:BS0"] == {"0:B0", "0:F2"} and deps["0:BR0"] == {"0:F2"}
    assert deps["1:BS0"] == {"1:B0", "1:F1"} and deps["1:BR0"] == {"1:F1"}
    # No DP: the end-of-step chain has no DP segment.
    assert deps["0:CLIP0"] == {"0:EMB0"} and deps["1:CLIP0"] == {"1:EMB0"}
    pairs = {members for members, _ in groups(t, g) if len(members) == 2}
    assert pairs == {
        *(frozenset({f"0:FS{k}", f"1:FR{k}"}) for k in range(4)),
        *(frozenset({f"1:BS{k}", f"0:BR{k}"}) for k in range(4)),
        # The wrap-around: stage 1's chunk-0 output goes to stage 0's chunk 1, and back.
        frozenset({"1:FS0", "0:FR2"}), frozenset({"1:FS1", "0:FR3"}),
        frozenset({"0:BS0", "1:BR2"}), frozenset({"0:BS1", "1:BR3"}),
        frozenset({"0:EMB0", "1:EMB0"}), frozenset({"0:CLIP0", "1:CLIP0"}),
    }
    lone = {next(iter(members)) for members, _ in groups(t, g) if len(members) == 1}
    assert lone == labels(t, g.noop_chunk)


def one_by_four_with(stage: int, op: handmade.Worker) -> OpTable:
    workers = handmade.one_by_four_workers()
    workers[(0, stage)] = workers[(0, stage)] + op
    return build_table(*handmade.one_by_four(workers))


def test_no_ops_by_timing():
    """A recv that starts after the last compute of its direction starts (+5e-5 s) and a
    send that ends before the first one ends (−5e-5 s) are no-ops: alone, no compute edge."""
    late_recv = one_by_four_with(0, [(handmade.FR, 1e-4 + 1e-6, 0.5)])  # F0 starts at 0
    g = build_graph(late_recv)
    assert labels(late_recv, g.noop_timing) == {"0:FR0"}
    assert dependencies(late_recv, g)["0:FR0"] == set()
    assert dependencies(late_recv, g)["0:F0"] == set()
    assert (frozenset({"0:FR0"}), False) in groups(late_recv, g)

    early_send = one_by_four_with(3, [(handmade.FS, 0.0, 4.3 - 1e-4 - 1e-6)])  # F0 ends 4.3
    g = build_graph(early_send)
    assert labels(early_send, g.noop_timing) == {"3:FS0"}
    assert dependencies(early_send, g)["3:FS0"] == set()


def test_no_op_timing_tolerance():
    """Within 5e-5 s of the last compute start a recv is live: it is matched to the compute
    (recv 0 -> compute 0) and, its peer chunk being −1, is a no-op by chunk instead."""
    t = one_by_four_with(0, [(handmade.FR, 4e-5, 0.5)])
    g = build_graph(t)
    assert not g.noop_timing.any()
    assert labels(t, g.noop_chunk) == {"0:FR0"}
    assert dependencies(t, g)["0:F0"] == {"0:FR0"}


def without(table: OpTable, stage: int, short: str, seq: int | None = None) -> OpTable:
    """``table`` without the ops of one type (and seq) on one stage."""
    optype = next(name for name, s in SHORT.items() if s == short)
    hit = (table.node_stage == stage) & (table.node_optype == schema.OPTYPE_CODE[optype])
    if seq is not None:
        hit &= table.node_seq == seq
    keep = np.flatnonzero(~hit)
    nodes = ("node_stage", "node_optype", "node_seq", "node_mc", "node_gmc", "node_mb",
             "start", "duration")
    return replace(table, **{f: getattr(table, f)[keep] for f in nodes})


@pytest.mark.parametrize(("shape", "drop", "message"), [
    (dict(pp=2, microbatches=2), (1, "F", None),
     "stage 1 has forward P2P ops but no forward-compute to pair them with "
     "(e.g. forward-recv seq 0 on stage 1)"),
    (dict(pp=4, microbatches=4), (1, "FR", 2),
     "stage 1 has 3 forward-recv ops that cannot be matched to its 4 forward-compute ops "
     "(first unpairable: forward-recv seq 3 on stage 1)"),
    (dict(pp=2, microbatches=4), (0, "FS", 3),
     "3 forward-send op(s) of stage 0 but 4 matching forward-recv op(s) of stage 1: "
     "forward-recv seq 3 on stage 1 cannot be paired"),
    (dict(pp=3, microbatches=4), (2, "BS", 1),
     "3 backward-send op(s) of stage 2 but 4 matching backward-recv op(s) of stage 1: "
     "backward-recv seq 3 on stage 1 cannot be paired"),
    (dict(pp=3, microbatches=2), (2, "EMB", None),
     "1 embedding-grads-all-reduce op(s) on stage 0 but 0 on stage 2: cannot pair them"),
    (dict(pp=3, microbatches=2), (1, "CLIP", None),
     "stages record different numbers of optimizer-clip-main-grad ops ([1, 0, 1]): "
     "cannot form its group"),
])
def test_unmodellable_trace_is_named(shape, drop, message):
    table = without(synth_table(dp=2, **shape), *drop)
    with pytest.raises(ModelError) as err:
        build_graph(table)
    assert str(err.value) == f"{table.source}: {message}"


def test_embedding_on_a_middle_stage():
    t = synth_table(dp=1, pp=3, microbatches=2)
    moved = replace(t, node_stage=t.node_stage.copy())
    moved.node_stage[(t.node_stage == 0)
                     & (t.node_optype == schema.OPTYPE_CODE[schema.EMBEDDING_ALL_REDUCE])] = 1
    moved = without(moved, 2, "EMB")
    with pytest.raises(ModelError, match="embedding-grads-all-reduce on middle stage 1: it "
                                         "belongs only to the first and last stage"):
        build_graph(moved)


# ---------------------------------------------------------------------------------------
# Fingerprints.

#: Every shape `stragglers synth` makes: 1F1B, interleaved vpp 2 and 3, overlapped DP
#: collectives, dp 1, pp 1.
SHAPES: dict[str, dict] = {
    "1f1b": dict(dp=2, pp=4, microbatches=8),
    "1f1b-pp3": dict(dp=2, pp=3, microbatches=2),
    "overlap": dict(dp=3, pp=2, microbatches=5, overlap=True),
    "dp1": dict(dp=1, pp=4, microbatches=4),
    "pp1": dict(dp=4, pp=1, microbatches=3),
    "pp1-overlap": dict(dp=4, pp=1, microbatches=3, overlap=True),
    "dp1-pp1": dict(dp=1, pp=1, microbatches=3),
    "vpp2": dict(dp=2, pp=4, vpp=2, microbatches=8),
    "vpp2-overlap": dict(dp=2, pp=4, vpp=2, microbatches=8, overlap=True),
    "vpp2-dp1": dict(dp=1, pp=3, vpp=2, microbatches=3),
    "vpp3": dict(dp=2, pp=3, vpp=3, microbatches=6),
    "vpp3-overlap": dict(dp=2, pp=2, vpp=3, microbatches=4, overlap=True),
}

FINGERPRINTS: dict[str, str] = {
    "AR": "92a7dfcb176d3b9cc2f0",
    "ST": "f07d86a91f53185450c2",
    "1f1b": "660652f80d1a1d9f7048",
    "1f1b-pp3": "72c2e6d0160617823681",
    "overlap": "685907d03a7bf743a1de",
    "dp1": "bd5ed71d9868e4aadef3",
    "pp1": "fb0dd48f22238dd2a21b",
    "pp1-overlap": "a80b05dfb8ce1c0fdd46",
    "dp1-pp1": "8e76d8c20d1d03bd7015",
    "vpp2": "536c058e8e3324e9d4ea",
    "vpp2-overlap": "f75d9fad0a16302618bf",
    "vpp2-dp1": "6d102c2b2a0784dce872",
    "vpp3": "5cc353b4f050cf873278",
    "vpp3-overlap": "09be7df21e062da05ecb",
}


def fingerprint(table: OpTable) -> str:
    """A digest of the graph's dependencies, groups (with DP sync) and no-ops, over op
    identities; independent of node numbering and group order."""
    g = build_graph(table)
    canon = {
        "deps": sorted((k, sorted(v)) for k, v in dependencies(table, g).items()),
        "groups": sorted((sorted(m), s) for m, s in groups(table, g)),
        "noop_timing": sorted(labels(table, g.noop_timing)),
        "noop_chunk": sorted(labels(table, g.noop_chunk)),
    }
    return hashlib.sha256(json.dumps(canon).encode()).hexdigest()[:20]


def reference_table(ref_dir, name: str) -> OpTable:
    return build_table(read_trace(ref_dir / f"trace-{name}.parquet"),
                       read_meta(ref_dir / f"meta-{name}.yaml"))


@pytest.mark.parametrize("name", ["AR", "ST"])
def test_reference_graph_unchanged(ref_dir, name):
    assert fingerprint(reference_table(ref_dir, name)) == FINGERPRINTS[name]


@pytest.mark.parametrize("name", list(SHAPES))
def test_synthetic_graph_unchanged(name):
    trace, meta, _ = generate(SynthSpec(steps=2, jitter=0.05, **SHAPES[name]))
    assert fingerprint(build_table(trace, meta)) == FINGERPRINTS[name]


if __name__ == "__main__":
    from tests.conftest import reference_dir

    found = {name: fingerprint(reference_table(reference_dir(), name)) for name in ("AR", "ST")}
    for name, shape in SHAPES.items():
        trace, meta, _ = generate(SynthSpec(steps=2, jitter=0.05, **shape))
        found[name] = fingerprint(build_table(trace, meta))
    print("FINGERPRINTS: dict[str, str] = {")
    for name, digest in found.items():
        print(f'    "{name}": "{digest}",')
    print("}")
