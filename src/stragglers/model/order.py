"""Evaluation order of a dependency graph: units (local ops and whole communication
groups) sorted topologically and grouped into levels that can be evaluated together.

A unit's level is one more than the highest level among the units it depends on, so the
units of one level never depend on each other. A cycle (including an op of a group that
depends on another member of its own group) is a modelling error and names its ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglers.errors import ModelError
from stragglers.model.graph import DependencyGraph


@dataclass
class Level:
    """Units of one level, as padded index arrays.

    ``local``: local op nodes; ``local_deps``: (k, width) dependency node indices padded
    with ``pad`` (the -inf row) or ``zero`` (the step-start row, for ops with no deps).
    ``members``: nodes of the level's groups, contiguous per group; ``member_deps`` as
    above; ``group_start``: offset of each group in ``members``; ``group_sync``: the group
    also synchronises across DP ranks; ``member_group``: position of each member's group;
    ``group_members``: (groups, width) positions in ``members`` of each group's members,
    padded by repeating its first member (a maximum over a row is the group's maximum).
    """

    local: np.ndarray
    local_deps: np.ndarray
    members: np.ndarray
    member_deps: np.ndarray
    group_start: np.ndarray
    group_sync: np.ndarray
    member_group: np.ndarray
    group_members: np.ndarray


@dataclass
class EvaluationOrder:
    levels: list[Level]
    pad: int
    zero: int
    n_nodes: int


def _padded(nodes: list[int], deps: list[list[int]], pad: int, zero: int) -> np.ndarray:
    width = max([len(deps[x]) for x in nodes] + [1])
    out = np.full((len(nodes), width), pad, dtype=np.int64)
    for i, x in enumerate(nodes):
        d = deps[x]
        if d:
            out[i, : len(d)] = d
        else:
            out[i, 0] = zero
    return out


def _group_members(sizes: list[int]) -> np.ndarray:
    """Positions of each group's members in the concatenated member list, one row per group,
    padded with the group's first member."""
    if not sizes:
        return np.zeros((0, 1), dtype=np.int64)
    size = np.array(sizes, dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(size)[:-1]])
    offset = np.arange(int(size.max()), dtype=np.int64)[None, :]
    return first[:, None] + np.where(offset < size[:, None], offset, 0)


def _describe_cycle(graph: DependencyGraph, unit_nodes: list[list[int]],
                    unit_deps: list[set[int]], indeg: np.ndarray, unit_of: np.ndarray) -> str:
    """Walk dependencies among the units left unsorted until one repeats: a cycle."""
    stuck = {u for u in range(len(unit_nodes)) if indeg[u] > 0}
    # Every unit left has a dependency inside the leftover set, so the walk closes.
    path: list[int] = []
    seen: dict[int, int] = {}
    u = min(stuck)
    while u not in seen:
        seen[u] = len(path)
        path.append(u)
        u = min(d for d in unit_deps[u] if d in stuck or indeg[d] > 0)
    cycle = path[seen[u]:][::-1]

    def name(unit: int, nxt: int) -> str:
        # The member of a group that waits for the next unit names the edge best.
        for x in unit_nodes[unit]:
            if any(unit_of[d] == nxt for d in graph.deps[x]):
                return graph.node_names[x]
        return graph.node_names[unit_nodes[unit][0]]

    names = [name(cycle[(i + 1) % len(cycle)], cycle[i]) for i in range(len(cycle))]
    names = names[-1:] + names[:-1]
    return ("dependency cycle (each op waits for the one before it): "
            + " -> ".join(names + names[:1]) + f" ({len(stuck)} op group(s) deadlocked)")


@dataclass
class _Units:
    """The units of a graph: groups first (unit g is group g), then one per local node.

    ``nodes[u]``: the nodes of unit u; ``deps[u]``: the units it depends on; ``unit_of``:
    each node's unit."""

    nodes: list[list[int]]
    deps: list[set[int]]
    unit_of: np.ndarray
    n_groups: int


def _units(graph: DependencyGraph) -> _Units:
    """Collapse each communication group into one unit; a member that waits for another
    member of its own group is a cycle."""
    n_groups = len(graph.groups)
    in_group = graph.group_of >= 0
    local_nodes = np.flatnonzero(~in_group)
    unit_of = np.empty(graph.n_nodes, dtype=np.int64)
    unit_of[in_group] = graph.group_of[in_group]
    unit_of[local_nodes] = n_groups + np.arange(len(local_nodes))
    unit_nodes = [g.tolist() for g in graph.groups] + [[x] for x in local_nodes.tolist()]
    unit_deps: list[set[int]] = []
    for u, nodes in enumerate(unit_nodes):
        ds = {int(unit_of[d]) for x in nodes for d in graph.deps[x]}
        if u in ds:
            inner = [x for x in nodes if any(unit_of[d] == u for d in graph.deps[x])]
            raise ModelError(
                f"dependency cycle: {graph.node_names[inner[0]]} waits for a member of its own "
                f"communication group ({', '.join(graph.node_names[x] for x in nodes)})"
            )
        unit_deps.append(ds)
    return _Units(nodes=unit_nodes, deps=unit_deps, unit_of=unit_of, n_groups=n_groups)


def _levels(graph: DependencyGraph, units: _Units) -> np.ndarray:
    """Each unit's level (Kahn's algorithm, one frontier per level); raise on a cycle."""
    n_units = len(units.nodes)
    indeg = np.array([len(d) for d in units.deps], dtype=np.int64)
    users: list[list[int]] = [[] for _ in range(n_units)]
    for u, ds in enumerate(units.deps):
        for d in ds:
            users[d].append(u)
    level = np.zeros(n_units, dtype=np.int64)
    frontier = [u for u in range(n_units) if indeg[u] == 0]
    done = 0
    while frontier:
        nxt = []
        for u in frontier:
            done += 1
            for w in users[u]:
                level[w] = max(level[w], level[u] + 1)
                indeg[w] -= 1
                if indeg[w] == 0:
                    nxt.append(w)
        frontier = nxt
    if done < n_units:
        raise ModelError(_describe_cycle(graph, units.nodes, units.deps, indeg, units.unit_of))
    return level


def _level(graph: DependencyGraph, units: _Units, members_of: np.ndarray, pad: int,
           zero: int) -> Level:
    """The padded index arrays of the units ``members_of`` (one level)."""
    local = [units.nodes[u][0] for u in members_of if u >= units.n_groups]
    grp = [u for u in members_of if u < units.n_groups]
    members = [x for g in grp for x in units.nodes[g]]
    sizes = [len(units.nodes[g]) for g in grp]
    return Level(
        local=np.array(local, dtype=np.int64),
        local_deps=_padded(local, graph.deps, pad, zero),
        members=np.array(members, dtype=np.int64),
        member_deps=_padded(members, graph.deps, pad, zero),
        group_start=np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        if sizes else np.zeros(0, dtype=np.int64),
        group_sync=graph.group_dp_sync[grp] if grp else np.zeros(0, dtype=bool),
        member_group=np.repeat(np.arange(len(grp)), sizes).astype(np.int64),
        group_members=_group_members(sizes),
    )


def evaluation_order(graph: DependencyGraph) -> EvaluationOrder:
    """Sort the graph's units topologically into levels; raise on a cycle."""
    units = _units(graph)
    level = _levels(graph, units)
    pad, zero = graph.n_nodes, graph.n_nodes + 1
    n_levels = int(level.max()) + 1 if len(level) else 0
    levels = [_level(graph, units, np.flatnonzero(level == lv), pad, zero)
              for lv in range(n_levels)]
    return EvaluationOrder(levels=levels, pad=pad, zero=zero, n_nodes=graph.n_nodes)
