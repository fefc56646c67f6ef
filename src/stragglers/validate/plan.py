"""Validation passes for ring and tree communicators (Falcon-Detect §4.3, Fig. 9).

A suspicious group is validated by splitting its collective topology into peer-to-peer
transfers that run in parallel *passes*: within one pass no rank takes part in two transfers, so
every transfer gets its link to itself and all transfers have the same size; a slow link shows up
as a slow transfer.

Ring of ``n`` ranks (``order[0] -> order[1] -> ... -> order[n-1] -> order[0]``): the links to
check are the ``n`` directed ring edges.

* ``n`` even: pass 1 sends from even positions to the next odd one (0->1, 2->3, ...), pass 2 from
  odd positions to the next even one (1->2, 3->4, ..., (n-1)->0): 2 passes.
* ``n`` odd: the same two passes without the wrap-around edge (n-1)->0, which cannot join either
  (its ends are already busy), then pass 3 with that edge alone: 3 passes.
* ``n = 2``: the ring edges are 0->1 and 1->0, in passes 1 and 2.

Binary tree over ``order`` in heap layout (``order[0]`` is the root, the children of position
``i`` are ``2i+1`` (left) and ``2i+2`` (right); depth of the root is 0): the links are the
child->parent edges.  Pass 1: left children at even depth send to their parents; pass 2: right
children at even depth; pass 3 and 4: the same from odd depths.  Every parent receives from at
most one child per pass and every pass has senders at one depth parity and receivers at the other,
so no rank is in two transfers: 4 passes (some may be empty in trees with fewer than 5 ranks).

``bidirectional=True`` also checks the reverse direction of every edge with the mirrored passes
(twice as many passes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from stragglers.errors import InputError
from stragglers.limits import check_limit

__all__ = [
    "Pass",
    "check_plan",
    "parse_ranks",
    "plan_passes",
    "ring_edges",
    "ring_passes",
    "tree_edges",
    "tree_passes",
]

Pass = list[tuple[int, int]]


def _order(n_or_order: int | Sequence[int]) -> list[int]:
    order = list(range(n_or_order)) if isinstance(n_or_order, int) else list(n_or_order)
    if len(order) < 2:
        raise ValueError(f"a communicator needs at least 2 ranks, got {len(order)}")
    if len(set(order)) != len(order):
        raise ValueError("ranks in the communicator must be distinct")
    return order


def ring_edges(n_or_order: int | Sequence[int]) -> list[tuple[int, int]]:
    """Directed ring edges ``order[i] -> order[i+1 mod n]``."""
    o = _order(n_or_order)
    n = len(o)
    return [(o[i], o[(i + 1) % n]) for i in range(n)]


def ring_passes(n_or_order: int | Sequence[int], bidirectional: bool = False) -> list[Pass]:
    """Passes covering every ring edge once: 2 for even ``n``, 3 for odd ``n``."""
    o = _order(n_or_order)
    n = len(o)
    p1 = [(o[i], o[i + 1]) for i in range(0, n - 1, 2)]
    p2 = [(o[i], o[(i + 1) % n]) for i in range(1, n, 2)]
    passes = [p1, p2]
    if n % 2 == 1:
        passes.append([(o[n - 1], o[0])])
    if bidirectional:
        passes += [[(b, a) for a, b in p] for p in passes]
    return passes


def _depth(i: int) -> int:
    return (i + 1).bit_length() - 1


def tree_edges(n_or_order: int | Sequence[int]) -> list[tuple[int, int]]:
    """Child->parent edges of the binary tree in heap layout."""
    o = _order(n_or_order)
    return [(o[i], o[(i - 1) // 2]) for i in range(1, len(o))]


def tree_passes(n_or_order: int | Sequence[int], bidirectional: bool = False) -> list[Pass]:
    """The 4 passes of Falcon Fig. 9 (right) covering every child->parent edge once."""
    o = _order(n_or_order)
    passes: list[Pass] = [[], [], [], []]
    for i in range(1, len(o)):
        left = i % 2 == 1
        odd_depth = _depth(i) % 2 == 1
        passes[2 * int(odd_depth) + (0 if left else 1)].append((o[i], o[(i - 1) // 2]))
    if bidirectional:
        passes += [[(b, a) for a, b in p] for p in passes]
    return passes


def check_plan(passes: Iterable[Pass], required: Iterable[tuple[int, int]]) -> list[str]:
    """Problems with a plan: a rank in two transfers of one pass, a required edge not covered
    exactly once, or an edge that is not required.  Empty list = valid."""
    problems: list[str] = []
    seen: Counter[tuple[int, int]] = Counter()
    for k, p in enumerate(passes, start=1):
        ranks = Counter(r for edge in p for r in edge)
        busy = sorted(r for r, c in ranks.items() if c > 1)
        if busy:
            problems.append(f"pass {k}: ranks {busy} are in more than one transfer")
        seen.update(p)
    req = Counter(required)
    for edge in sorted(set(req) | set(seen)):
        if seen[edge] != req[edge]:
            problems.append(
                f"edge {edge[0]}->{edge[1]}: covered {seen[edge]} times, required {req[edge]}"
            )
    return problems


def plan_passes(topology: str, size: int | None = None, ranks: str | None = None,
                bidirectional: bool = False) -> list[Pass]:
    """The checked passes of ``stragglers detect plan``: a ``"ring"`` or ``"tree"`` of
    ``size`` ranks, or over ``ranks`` (their comma-separated order; ``size``, when also
    given, must be their number)."""
    if ranks is not None:
        items = [x for x in ranks.split(",") if x.strip()]
        check_limit("topology_ranks", len(items), "--ranks")
        try:
            listed = [int(x) for x in items]
        except ValueError:
            raise InputError(
                f"--ranks: expected comma-separated integers, got {ranks[:60]!r}") from None
        if any(r < 0 for r in listed):
            raise InputError(f"--ranks: ranks must be >= 0, got {min(listed)}")
        if size is not None and size != len(listed):
            raise InputError(f"size {size} does not match --ranks ({len(listed)} ranks)")
        order: list[int] | int = listed
    elif size is None:
        raise InputError("give the number of ranks or --ranks")
    else:
        if size < 2:
            raise InputError(f"size: expected an integer >= 2, got {size}")
        check_limit("topology_ranks", size, f"size {size}")
        order = size
    try:
        if topology == "ring":
            passes = ring_passes(order, bidirectional)
            edges = ring_edges(order)
        else:
            passes = tree_passes(order, bidirectional)
            edges = tree_edges(order)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    required = edges + ([(b, a) for a, b in edges] if bidirectional else [])
    problems = check_plan(passes, required)
    if problems:  # pragma: no cover - the planner is verified by the tests
        raise AssertionError("invalid plan: " + "; ".join(problems))
    return passes


def parse_ranks(text: str) -> tuple[int, ...]:
    """``stragglers validate --ranks``: a number of ranks (``0..n-1``, at least 2) or their
    comma-separated ring / heap order (distinct ranks >= 0), each checked against its limit."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise InputError("--ranks: expected a number of ranks or a comma-separated order")
    check_limit("validate_ranks", len(items) if len(items) > 1 else 1, "--ranks")
    try:
        values = [int(x) for x in items]
    except ValueError:
        raise InputError(f"--ranks: expected integers, got {text[:60]!r}") from None
    if len(values) == 1:
        n = values[0]
        if n < 2:
            raise InputError(f"--ranks: a communicator needs at least 2 ranks, got {n}")
        check_limit("validate_ranks", n, "--ranks")
        return tuple(range(n))
    if min(values) < 0:
        raise InputError(f"--ranks: ranks must be >= 0, got {min(values)}")
    if len(set(values)) != len(values):
        raise InputError("--ranks: a rank appears twice")
    check_limit("validate_ranks", max(values) + 1, f"--ranks (largest rank {max(values)})")
    return tuple(values)
