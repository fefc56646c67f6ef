"""Who caused a crash: the rank that failed first, not the order in which its failure was
noticed.

When a rank dies, its peers die soon after: their next call to it fails (gloo: "connection
reset by peer") and their processes end too, often within a fraction of a second, sometimes
before the watcher polled once. :func:`crash_culprits` names the culprit from what each dead
rank left behind (:class:`Exit`):

1. **victims**: a rank whose last heartbeat status is ``comm_error`` (a call of its failed:
   a peer went away; the heartbeat writes it when an exception leaves a communication call or
   comes out of ``torch.distributed``) is a victim, not a culprit;
2. **first to fail**: among the others, the one that exited first (exit times measured when
   each process ended, not when the watcher noticed: ``pidfd`` on Linux);
3. **distinct exit code**: ranks that exited within ``tie_s`` of the first are tied; among
   them, one whose exit status no other dead rank shares while other ranks share theirs
   (a segfault, a kill, an ``exit(3)`` among ``exit(1)``s of peers) is the culprit; otherwise
   all the tied ranks are;
4. **stale heartbeat**: when every dead rank is a victim (the peers of a frozen rank ended on
   their collective timeout), the live ranks whose heartbeats went stale are the culprits;
5. otherwise the first victims to exit.

Each answer comes with the rule that gave it (``reason``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Blame", "Exit", "crash_culprits"]


@dataclass(frozen=True)
class Exit:
    """How one rank's process ended."""

    rank: int
    code: int  # exit status (negative: killed by that signal)
    t: float  # when it ended (seconds, any clock shared by the exits compared)
    status: str | None = None  # its last heartbeat status


@dataclass(frozen=True)
class Blame:
    culprits: tuple[int, ...]
    reason: str  # first_exit | distinct_exit_code | tied_exits | stale_heartbeat | victims_only
    victims: tuple[int, ...]  # dead ranks that reported comm_error


def crash_culprits(exits: Sequence[Exit], stale_live: Iterable[int] = (),
                   tie_s: float = 0.001) -> Blame:
    """The culprits of a crash (see the module docstring); ``stale_live``: ranks still alive
    whose heartbeats went stale."""
    if not exits:
        stale = tuple(sorted(set(stale_live)))
        return Blame(stale, "stale_heartbeat" if stale else "none", ())
    victims = tuple(sorted(e.rank for e in exits if e.status == "comm_error"))
    candidates = [e for e in exits if e.status != "comm_error"]
    if not candidates:
        stale = tuple(sorted(set(stale_live) - {e.rank for e in exits}))
        if stale:
            return Blame(stale, "stale_heartbeat", victims)
        first = min(e.t for e in exits)
        return Blame(tuple(sorted(e.rank for e in exits if e.t - first <= tie_s)),
                     "victims_only", victims)
    first = min(e.t for e in candidates)
    tied = sorted((e for e in candidates if e.t - first <= tie_s), key=lambda e: e.rank)
    if len(tied) == 1:
        return Blame((tied[0].rank,), "first_exit", victims)
    counts = Counter(e.code for e in exits)
    shared = any(n >= 2 for n in counts.values())
    distinct = [e.rank for e in tied if counts[e.code] == 1]
    if shared and len(distinct) == 1:
        return Blame((distinct[0],), "distinct_exit_code", victims)
    return Blame(tuple(e.rank for e in tied), "tied_exits", victims)
