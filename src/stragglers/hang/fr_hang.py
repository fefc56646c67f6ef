"""Hang localisation from flight-recorder dumps, for arbitrary process groups.

For every process group (tensor, data, pipeline, expert, combined: whatever the job created) the
members' progress is compared:

* a member's *level* in a group is the last collective sequence id it enqueued there: the
  largest ``collective_seq_id`` of its entries in the group, or its ``pg_status``
  ``last_enqueued_collective`` (not for groups that carry point-to-point calls, whose counter
  counts those);
* a member with pending collectives is blocked at the earliest of them, ``s``; it *waits for*
  every member that has not enqueued ``s`` (level below ``s``, no record of the group at all, or
  no dump: silent);
* a pending point-to-point call waits for its peer unless the peer has the matching call towards
  it pending too.

``pg_status`` is keyed by each rank's local group id (``pg_id``); entries give that id's group
name. For a rank whose dump has no entries in a group, the ids are matched to the group names
by order (both grow with creation order), accepted only when every pair known from entries
agrees.

The waits give a waits-for graph. The culprits are its *sinks* (strongly connected components
that wait for nobody) that others wait for: a silent rank, a rank that never issued the call
its peers are in (``not_joined``), or ranks that wait for each other (``circular_wait``). For
each culprit the report names the call it failed to join first (earliest creation time among
its waiters' entries): group name and description, op, sequence id, size and dtype. When nobody
waits for anybody but calls are pending, the groups whose members all joined their earliest
pending call are reported as ``stuck_collective`` (suspect the links or NCCL).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from stragglers.hang.flight_recorder import FlightRecord, FREntry, GroupInfo, GroupStatus
from stragglers.hang.last_op import Suspect, waiter_counts
from stragglers.limits import check_limit

__all__ = ["BlockedCall", "FRDiagnosis", "fr_hang_report", "localize_fr_hang"]


@dataclass(frozen=True)
class BlockedCall:
    """A call that ranks wait in, and the ranks it waits for."""

    pg: str
    desc: str
    op: str
    seq: int  # collective_seq_id (p2p: p2p_seq_id of the waiting side)
    size: str
    dtype: str
    waiting_for: tuple[int, ...]
    waiters: tuple[int, ...]
    p2p: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"pg": self.pg, "desc": self.desc, "op": self.op, "seq": self.seq,
                "size": self.size, "dtype": self.dtype, "waiting_for": list(self.waiting_for),
                "waiters": list(self.waiters)}


@dataclass(frozen=True)
class FRDiagnosis:
    suspects: tuple[Suspect, ...]
    silent: tuple[int, ...]
    groups: tuple[BlockedCall, ...]  # the first call each culprit failed to join
    blocked: tuple[BlockedCall, ...]  # every call somebody waits in for somebody
    ranks: int
    dumps: int
    ignored_files: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def suspect_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({r for s in self.suspects for r in s.ranks}))

    def to_dict(self) -> dict[str, object]:
        """``suspect_ranks`` and ``suspects`` (objects) as
        :meth:`~stragglers.hang.last_op.HangDiagnosis.to_dict` gives them, then the calls."""
        return {
            "suspect_ranks": list(self.suspect_ranks),
            "suspects": [s.to_dict() for s in self.suspects],
            "silent": list(self.silent),
            "groups": [g.to_dict() for g in self.groups],
            "blocked": [g.to_dict() for g in self.blocked],
            "ranks": self.ranks,
            "dumps": self.dumps,
            "ignored_files": list(self.ignored_files),
            "notes": list(self.notes),
        }


def _status_by_group(record: FlightRecord) -> tuple[dict[tuple[int, str], GroupStatus],
                                                      list[str]]:
    """``pg_status`` of every (rank, group name) that can be identified, and notes."""
    out: dict[tuple[int, str], GroupStatus] = {}
    notes: list[str] = []
    for rank, d in record.dumps.items():
        known: dict[int, str] = {}
        for e in d.entries:
            if e.uid is not None:
                known.setdefault(e.uid, e.group)
        mapping = dict(known)
        names = list(d.groups)
        if all(n.isdigit() for n in names) and len(names) == len(d.status):
            by_order = dict(zip(sorted(d.status), sorted(names, key=int), strict=True))
            if all(by_order.get(u) == g for u, g in known.items()):
                mapping = by_order
            else:
                notes.append(f"rank {rank}: local group ids do not follow the group names' "
                             "order; only ids seen in entries are used")
        for uid, name in mapping.items():
            s = d.status.get(uid)
            if s is not None:
                out[(rank, name)] = s
    return out, notes


def localize_fr_hang(record: FlightRecord) -> FRDiagnosis:
    """Suspects of a hang from the dumps of a job (see the module docstring)."""
    groups = record.groups
    status, notes = _status_by_group(record)
    world = record.world
    n = (max(world) + 1) if world else 0
    # the graph has a node per rank id: sized by the largest id, not by the count of ranks
    check_limit("topology_ranks", n, f"{record.source}: rank ids up to {n - 1:,}")
    # entries by (group, rank)
    by_gr: dict[tuple[str, int], list[FREntry]] = {}
    p2p_groups: set[str] = set()
    for rank, d in record.dumps.items():
        for e in d.entries:
            by_gr.setdefault((e.group, rank), []).append(e)
            if e.is_p2p:
                p2p_groups.add(e.group)
    unknown_groups = sorted({g for g, _ in by_gr} - set(groups))
    for name in unknown_groups:  # a group seen in entries only
        seen = tuple(sorted(r for gg, r in by_gr if gg == name))
        desc = by_gr[(name, seen[0])][0].desc
        if desc == "default_pg":  # gloo's pg_config names the default group "" (PyTorch 2.13)
            groups[name] = GroupInfo(name, desc, tuple(world))
            notes.append(f"group {name} (default_pg) is not in any pg_config: all "
                         f"{len(world)} ranks of the job taken as its members")
            continue
        groups[name] = GroupInfo(name, desc, seen)
        notes.append(f"group {name} ({desc}) is not in any pg_config: members taken from "
                     "entries")

    rows: list[int] = []
    cols: list[int] = []
    hubs: dict[tuple[str, int, bool, int], int] = {}  # (group, seq, p2p, target) -> node
    calls: dict[int, tuple[BlockedCall, int | None]] = {}  # hub -> (call, created_ns)
    waiters_of: dict[int, list[int]] = {}

    def hub(key: tuple[str, int, bool, int], call: BlockedCall, created: int | None) -> int:
        node = hubs.get(key)
        if node is None:
            node = hubs[key] = n + len(hubs)
            calls[node] = (call, created)
            for m in call.waiting_for:
                rows.append(node)
                cols.append(m)
        return node

    for gname in sorted(groups, key=lambda x: (len(x), x)):
        ginfo = groups[gname]
        members = ginfo.ranks
        level: dict[int, int | None] = {}
        earliest: dict[int, FREntry] = {}
        p2p_pending: dict[int, list[FREntry]] = {}
        for m in members:
            es = by_gr.get((gname, m), [])
            lv = max((e.seq for e in es), default=None)
            st = status.get((m, gname))
            if st is not None and gname not in p2p_groups:
                lv = st.enqueued if lv is None else max(lv, st.enqueued)
            level[m] = lv
            pend = [e for e in es if e.pending and not e.is_p2p]
            if pend:
                earliest[m] = min(pend, key=lambda e: e.seq)
            pp = [e for e in es if e.pending and e.is_p2p]
            if pp:
                p2p_pending[m] = pp
        # collectives: waiters at their earliest pending call
        by_seq: dict[int, list[int]] = {}
        for w, e in earliest.items():
            by_seq.setdefault(e.seq, []).append(w)
        for s, ws in sorted(by_seq.items()):
            missing = tuple(m for m in members if m not in ws and not _joined(level[m], s))
            if not missing:
                continue
            ws.sort()
            first = earliest[ws[0]]
            times = [t for t in (earliest[w].created_ns for w in ws) if t is not None]
            created = min(times) if times else None
            call = BlockedCall(gname, ginfo.desc, first.op, s, first.size, first.dtype, missing,
                               tuple(ws))
            node = hub((gname, s, False, -1), call, created)
            rows.extend(ws)
            cols.extend([node] * len(ws))
            waiters_of.setdefault(node, []).extend(ws)
        # point to point: unmatched pending calls wait for the peer
        for w, es in sorted(p2p_pending.items()):
            my_local = members.index(w)
            for e in es:
                if e.peer_local is None or not 0 <= e.peer_local < len(members):
                    continue
                peer = members[e.peer_local]
                theirs = p2p_pending.get(peer, [])
                if any(o.peer_local == my_local and o.sends != e.sends for o in theirs):
                    continue
                call = BlockedCall(gname, ginfo.desc, e.op, e.p2p_seq, e.size, e.dtype, (peer,),
                                   (w,), p2p=True)
                node = hub((gname, e.p2p_seq, True, w * (n + 1) + peer), call, e.created_ns)
                rows.append(w)
                cols.append(node)
                waiters_of.setdefault(node, []).append(w)

    total = n + len(hubs)
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(total, total))
    ncomp, label = connected_components(graph, directed=True, connection="strong")
    leaves = np.zeros(ncomp, dtype=bool)
    has_in = np.zeros(total, dtype=bool)
    if rows:
        r_a = np.asarray(rows)
        c_a = np.asarray(cols)
        cross = label[r_a] != label[c_a]
        leaves[np.unique(label[r_a[cross]])] = True
        has_in[c_a] = True
    world_arr = np.asarray(world, dtype=np.int64)
    cand_ranks = world_arr[has_in[world_arr] & ~leaves[label[world_arr]]] if n else world_arr
    comps: dict[int, list[int]] = {}
    for r in cand_ranks.tolist():
        comps.setdefault(int(label[r]), []).append(r)
    waited = waiter_counts(rows, cols, label, ncomp, n, sorted(comps))
    # the first call each culprit failed to join: earliest creation among the hubs that point
    # to it (ties: group name order)
    first_call: dict[int, tuple[int, int, int]] = {}
    culprit_set = set(cand_ranks.tolist())
    for node, (call, created) in calls.items():
        # collectives first: their sequence ids prove that the culprit has not issued the call,
        # while a point-to-point call without its counterpart may also have been completed by
        # the peer already
        key = (int(call.p2p), created if created is not None else 2**63, node)
        for m in call.waiting_for:
            if m in culprit_set and (m not in first_call or key < first_call[m]):
                first_call[m] = key
    silent = set(record.silent)
    suspects: list[Suspect] = []
    for comp, ranks in comps.items():
        ranks.sort()
        count = waited[comp]
        if len(ranks) > 1:
            suspects.append(Suspect(tuple(ranks), "circular_wait", count, (
                f"ranks {ranks} wait for each other in different calls: mismatched call "
                "order")))
            continue
        r = ranks[0]
        joined = calls[first_call[r][2]][0] if r in first_call else None
        where = "" if joined is None else (
            f"{joined.op} #{joined.seq} of group {joined.pg} ({joined.desc})")
        if r in silent:
            suspects.append(Suspect((r,), "silent", count, (
                f"rank {r} left no dump while {count} ranks wait for it, first in {where}")))
        else:
            lv_text = _level_text(record, status, p2p_groups, r, joined)
            n_wait = len(joined.waiters) if joined else 0
            suspects.append(Suspect((r,), "not_joined", count, (
                f"rank {r} never issued {where}{lv_text}, which {n_wait} "
                f"member(s) wait in; {count} ranks wait for it in all")))
    blocked = tuple(sorted((c for c, _ in calls.values()),
                           key=lambda c: (c.pg, c.seq, c.waiting_for)))
    primary: dict[int, BlockedCall] = {}
    order: list[tuple[int, int, int]] = []
    for key in first_call.values():
        if key[2] not in primary:
            primary[key[2]] = calls[key[2]][0]
            order.append(key)
    firsts = []
    for key in sorted(order):
        call = primary[key[2]]
        culprits = tuple(m for m in call.waiting_for if first_call.get(m) == key)
        firsts.append(BlockedCall(call.pg, call.desc, call.op, call.seq, call.size, call.dtype,
                                  culprits, call.waiters, call.p2p))
    if not suspects:
        suspects = _stuck_groups(groups, by_gr, status, p2p_groups)
    suspects.sort(key=lambda s: (-s.waited_on_by, s.ranks))
    return FRDiagnosis(tuple(suspects), tuple(sorted(silent)), tuple(firsts), blocked,
                       len(world), len(record.dumps), record.ignored_files, tuple(notes))


def _joined(level: int | None, seq: int) -> bool:
    return level is not None and level >= seq


def _level_text(record: FlightRecord, status: Mapping[tuple[int, str], GroupStatus],
                p2p_groups: set[str], rank: int, call: BlockedCall | None) -> str:
    if call is None or call.p2p:
        return ""
    es = [e for e in record.dumps[rank].entries if e.group == call.pg]
    if es:
        return f" (its last call there is #{max(e.seq for e in es)})"
    st = status.get((rank, call.pg))
    if st is not None and call.pg not in p2p_groups:
        return (f" (its last call there is #{st.enqueued}, completed #{st.completed}; no call "
                "of the group pending)")
    return " (its dump has no call of that group)"


def _stuck_groups(groups: Mapping[str, GroupInfo], by_gr: Mapping[tuple[str, int], list[FREntry]],
                  status: Mapping[tuple[int, str], GroupStatus],
                  p2p_groups: set[str]) -> list[Suspect]:
    """Groups whose members all joined their earliest pending collective and none completed
    it: the collective itself does not progress."""
    out = []
    for gname, g in groups.items():
        firsts = []
        for m in g.ranks:
            pend = [e for e in by_gr.get((gname, m), []) if e.pending and not e.is_p2p]
            if not pend:
                break
            firsts.append(min(pend, key=lambda e: e.seq))
        else:
            seqs = {e.seq for e in firsts}
            if len(seqs) == 1 and len(g.ranks) > 1:
                e = firsts[0]
                out.append(Suspect(g.ranks, "stuck_collective", 0, (
                    f"every member of group {gname} ({g.desc}) {list(g.ranks)} is in {e.op} "
                    f"#{e.seq}: the collective itself does not progress (suspect its links or "
                    "NCCL)")))
    return out


def fr_hang_report(record: FlightRecord, diag: FRDiagnosis) -> str:
    """The text report of ``stragglers detect hang --flight-recorder``."""
    other = diag.ignored_files
    shown = ", ".join(other[:4]) + (", ..." if len(other) > 4 else "")
    lines = [f"{record.source}: {diag.dumps} dumps of {diag.ranks} ranks, "
             f"{len(diag.silent)} silent {list(diag.silent)}"
             + (f"; {len(other)} other files not read ({shown})" if other else "")]
    if not diag.suspects:
        lines.append("no suspect: nobody waits for a silent or lagging rank")
    lines.append(f"suspects: {list(diag.suspect_ranks)}")
    if diag.groups:
        lines.append(f"{'PG':<6} | {'description':<40} | {'op':<28} | {'seq':>8} | "
                     f"{'size':<16} | {'dtype':<9} | waiting for")
        for g in diag.groups:
            lines.append(f"{g.pg:<6} | {g.desc:<40} | {g.op:<28} | {g.seq:>8} | "
                         f"{g.size:<16} | {g.dtype:<9} | {list(g.waiting_for)}")
    for sus in diag.suspects:
        lines.append(f"suspect {list(sus.ranks)} [{sus.kind}], waited on by {sus.waited_on_by} "
                     f"ranks: {sus.reason}")
    lines.extend(f"note: {n}" for n in diag.notes)
    return "\n".join(lines) + "\n"

