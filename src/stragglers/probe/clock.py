"""Clock alignment across ranks.

Every rank stamps its spans with its own monotonic clock. To put all ranks on one time line,
each rank measures the offset of its clock against rank 0 with an NTP-style ping-pong over
``torch.distributed`` (point-to-point with rank 0, bracketed by barriers so that no training
traffic is in flight), at the start of a session and at each flush point. Ranks that share
rank 0's clock (same machine, same monotonic clock: :func:`clock_domain`) skip the exchange,
since their offset is exactly 0 and a measured one would only add the exchange's error
(up to half the round trip: milliseconds on a loaded machine). Merging adds the
offset, linearly interpolated between measurements (which also corrects a slow drift), to every
local timestamp: ``aligned = local + offset(local)``.

One exchange: rank ``r`` reads ``t1`` and sends it; rank 0 receives it, reads ``t2``, then
``t3`` and replies with both; rank ``r`` reads ``t4`` on receipt. Then
``offset = ((t2 - t1) + (t3 - t4)) / 2`` and ``rtt = (t4 - t1) - (t3 - t2)``. The error of the
offset is at most ``rtt / 2``; of several rounds the one with the smallest ``rtt`` is kept.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ClockSample:
    """One offset measurement of a rank's clock against rank 0's.

    ``local`` is the rank's clock when the sample was taken, ``offset`` the value to add to a
    local timestamp to express it on rank 0's clock, ``rtt`` the round trip of the exchange
    (an upper bound on twice the error; 0 for rank 0 itself).
    """

    local: float
    offset: float
    rtt: float


def clock_domain(clock: Callable[[], float]) -> str | None:
    """An id shared by all processes whose ``clock`` readings are directly comparable.

    ``time.perf_counter`` and ``time.monotonic`` read the system's monotonic clock, which all
    processes of one machine share until it reboots: the id is the clock implementation plus
    the kernel's boot id (or the host name where there is none). Any other clock function
    gets ``None``: its offsets are always measured.
    """
    import socket
    import time

    if clock not in (time.perf_counter, time.monotonic):
        return None
    impl = (time.get_clock_info("perf_counter") if clock is time.perf_counter
            else time.get_clock_info("monotonic")).implementation
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        boot = socket.gethostname()
    return f"{impl}@{boot}"


def _distributed() -> Any:
    """``torch.distributed`` when a process group is initialised, else ``None``."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist


def gather_domains(domain: str | None, group: Any = None) -> list[str | None]:
    """Clock domains of all ranks of ``group`` (collective; ``[domain]`` without a group)."""
    dist = _distributed()
    if dist is None:
        return [domain]
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, domain, group=group)
    return out


def measure_offset(
    clock: Callable[[], float],
    group: Any = None,
    rounds: int = 8,
    domains: Sequence[str | None] | None = None,
) -> ClockSample:
    """Measure this rank's clock offset against rank 0 of ``group`` (collective call).

    Every rank of ``group`` must call it at the same point. Rank 0 serves the other ranks one
    after the other (``rounds`` round trips each), so the cost grows linearly with the group
    size: a few hundred microseconds per rank on a quiet local network. ``domains`` (the
    :func:`gather_domains` result, identical on every rank) lets ranks that share rank 0's
    clock domain skip the exchange: their offset is exactly 0. ``group`` must be a
    CPU-capable (gloo) process group; ``None`` means the default group, which then must be
    gloo. Without an initialised process group the offset is 0.
    """
    dist = _distributed()
    if dist is None:
        return ClockSample(clock(), 0.0, 0.0)
    import torch

    world = dist.get_world_size(group)
    me = dist.get_rank(group)
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(world))
    root = ranks[0]

    def needs_exchange(i: int) -> bool:
        return domains is None or domains[i] is None or domains[i] != domains[0]

    dist.barrier(group=group)
    best = ClockSample(clock(), 0.0, 0.0)
    stamp = torch.zeros(1, dtype=torch.float64)
    reply = torch.zeros(2, dtype=torch.float64)
    if me == 0:
        for i, peer in enumerate(ranks[1:], start=1):
            if not needs_exchange(i):
                continue
            for _ in range(rounds):
                dist.recv(stamp, src=peer, group=group)
                reply[0] = clock()
                reply[1] = clock()
                dist.send(reply, dst=peer, group=group)
    elif needs_exchange(me):
        best_rtt = float("inf")
        for _ in range(rounds):
            t1 = clock()
            stamp[0] = t1
            dist.send(stamp, dst=root, group=group)
            dist.recv(reply, src=root, group=group)
            t4 = clock()
            t2, t3 = float(reply[0]), float(reply[1])
            rtt = (t4 - t1) - (t3 - t2)
            if rtt < best_rtt:
                best_rtt = rtt
                best = ClockSample((t1 + t4) / 2, ((t2 - t1) + (t3 - t4)) / 2, rtt)
    dist.barrier(group=group)
    return best


class OffsetTrack:
    """Offsets of one rank over time; maps local timestamps to rank 0's clock.

    Between two samples the offset is interpolated linearly in local time; before the first
    and after the last sample the nearest sample's offset is used. With no sample the offset
    is 0 (a single-process job, or a rank whose clock is the reference).
    """

    def __init__(self, samples: Sequence[ClockSample] = ()) -> None:
        ordered = sorted(samples, key=lambda s: s.local)
        self._local = [s.local for s in ordered]
        self._offset = [s.offset for s in ordered]
        self.samples: tuple[ClockSample, ...] = tuple(ordered)

    def offset_at(self, local: float) -> float:
        """The offset to add to local time ``local``."""
        xs, ys = self._local, self._offset
        if not xs:
            return 0.0
        i = bisect.bisect_right(xs, local)
        if i == 0:
            return ys[0]
        if i == len(xs):
            return ys[-1]
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        if x1 == x0:
            return y1
        return y0 + (y1 - y0) * (local - x0) / (x1 - x0)

    def align(self, local: float) -> float:
        """Express local time ``local`` on rank 0's clock."""
        return local + self.offset_at(local)
