"""Per-link bandwidth and per-rank GEMM throughput against the group median.

A link's bandwidth is its bytes over the *shortest* of its transfer times (over the repeats); a
rank's GEMM throughput is the FLOPs of one repeat over its shortest repeat: noise (a process
descheduled on a loaded machine, a late start) only ever adds time, while a slow link or GPU is
slow on every repeat, so the best of the repeats measures the capability. Each is compared
with the median over all links (ranks); one below ``median / factor`` is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stragglers.validate.executed import ValidationRun

__all__ = ["GemmResult", "LinkResult", "ValidationReport", "evaluate_run"]


@dataclass(frozen=True)
class LinkResult:
    src: int
    dst: int
    seconds: float  # shortest over repeats
    bandwidth: float  # bytes/s
    ratio: float  # bandwidth / median bandwidth of the links
    slow: bool

    def to_dict(self) -> dict[str, object]:
        return {"src": self.src, "dst": self.dst, "seconds": self.seconds,
                "gbytes_per_s": self.bandwidth / 1e9, "ratio": self.ratio, "slow": self.slow}


@dataclass(frozen=True)
class GemmResult:
    rank: int
    seconds: float  # shortest over repeats
    flops: float  # FLOP/s
    ratio: float
    slow: bool

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "seconds": self.seconds, "gflops": self.flops / 1e9,
                "ratio": self.ratio, "slow": self.slow}


@dataclass(frozen=True)
class ValidationReport:
    topology: str
    order: tuple[int, ...]
    backend: str
    passes: list[list[tuple[int, int]]]
    links: tuple[LinkResult, ...]
    gemm: tuple[GemmResult, ...]
    factor: float
    wall_s: float

    @property
    def slow_links(self) -> list[tuple[int, int]]:
        return [(x.src, x.dst) for x in self.links if x.slow]

    @property
    def slow_gemm_ranks(self) -> list[int]:
        return [g.rank for g in self.gemm if g.slow]

    @property
    def slow_senders(self) -> list[int]:
        """Ranks all of whose (at least one) outgoing links are slow while others' are not."""
        out = []
        for r in sorted({x.src for x in self.links}):
            mine = [x for x in self.links if x.src == r]
            if mine and all(x.slow for x in mine):
                out.append(r)
        return out if len(out) < len({x.src for x in self.links}) else []

    def to_dict(self) -> dict[str, object]:
        return {"topology": self.topology, "ranks": list(self.order), "backend": self.backend,
                "passes": [[list(e) for e in p] for p in self.passes],
                "factor": self.factor,
                "links": [x.to_dict() for x in self.links],
                "gemm": [g.to_dict() for g in self.gemm],
                "slow_links": [list(e) for e in self.slow_links],
                "slow_senders": self.slow_senders,
                "slow_gemm_ranks": self.slow_gemm_ranks,
                "wall_s": self.wall_s}


def evaluate_run(run: ValidationRun, factor: float = 2.0) -> ValidationReport:
    """Flag links and ranks more than ``factor`` times slower than their group's median."""
    edges = run.config.edges()
    index = {e: i for i, e in enumerate(edges)}
    n_rep = run.config.repeats
    secs = np.full((len(edges), n_rep), np.nan)
    nbytes = np.zeros(len(edges))
    for t in run.transfers:
        i = index[(t.src, t.dst)]
        secs[i, t.repeat] = t.seconds
        nbytes[i] = t.nbytes
    if np.isnan(secs).any():
        missing = [edges[i] for i in np.flatnonzero(np.isnan(secs).any(axis=1))]
        raise RuntimeError(f"transfers missing for links {missing}")
    med = secs.min(axis=1)
    bw = nbytes / np.maximum(med, 1e-12)
    bw_med = float(np.median(bw))
    links = tuple(LinkResult(s, d, float(med[i]), float(bw[i]), float(bw[i] / bw_med),
                             bool(bw[i] < bw_med / factor))
                  for i, (s, d) in enumerate(edges))
    ranks = sorted(run.gemm_seconds)
    g_med = np.array([min(run.gemm_seconds[r]) for r in ranks])
    flops = run.gemm_flops / np.maximum(g_med, 1e-12)
    f_med = float(np.median(flops))
    gemm = tuple(GemmResult(r, float(g_med[i]), float(flops[i]), float(flops[i] / f_med),
                            bool(flops[i] < f_med / factor)) for i, r in enumerate(ranks))
    return ValidationReport(run.config.topology, run.config.order, run.backend, run.passes,
                            links, gemm, factor, run.wall_s)


def format_report(rep: ValidationReport) -> str:
    lines = [f"{rep.topology} over ranks {list(rep.order)} ({rep.backend}, "
             f"{len(rep.passes)} passes, {rep.wall_s:.1f} s): outliers below median / "
             f"{rep.factor:g}"]
    lines.append("link       GB/s   x median")
    for x in rep.links:
        lines.append(f"{x.src:>4}->{x.dst:<4} {x.bandwidth / 1e9:6.3f}   {x.ratio:6.2f}"
                     f"{'   SLOW' if x.slow else ''}")
    lines.append("rank   GFLOP/s   x median")
    for g in rep.gemm:
        lines.append(f"{g.rank:>4}   {g.flops / 1e9:7.2f}   {g.ratio:6.2f}"
                     f"{'   SLOW' if g.slow else ''}")
    lines.append(f"slow links: {[f'{a}->{b}' for a, b in rep.slow_links] or 'none'}; "
                 f"slow senders: {rep.slow_senders or 'none'}; "
                 f"slow GEMM ranks: {rep.slow_gemm_ranks or 'none'}")
    return "\n".join(lines)
