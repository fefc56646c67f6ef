"""Run validation passes as real transfers, one process per rank.

Every rank joins a ``torch.distributed`` group (gloo on CPU; NCCL when every rank can have its
own GPU). Then, ``repeats`` times:

* each pass of the plan (:mod:`stragglers.validate.plan`): a barrier, then every
  transfer of the pass at once, ``transfer_bytes`` in ``chunks`` blocking sends; the sender
  times it from its first send to the receiver's acknowledgement of the last chunk (timing on
  the receiver alone would miss data the transport had already buffered, and would count
  the sender's late start after the barrier);
* the GEMM test, one rank after the other (a barrier before each, so that ranks sharing a
  machine do not compete): ``gemm_iters`` products of two ``gemm_n`` x ``gemm_n`` float32
  matrices, timed by the rank.

Injections for evaluation: ``slow_link`` caps the send rate of one rank (``(rank, MB/s)``: it
sleeps after each chunk until its bytes so far would have taken that long), as a degraded
link; ``slow_gemm`` makes one rank's GEMMs ``factor`` times as long (it spins for the extra
time), as a slow GPU.

Each rank writes ``rank-<r>.json`` (its GEMM times and the transfers it sent) into a
folder; :func:`run_validation` spawns the processes and reads them back.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.validate.plan import (
    Pass,
    parse_ranks,
    ring_edges,
    ring_passes,
    tree_edges,
    tree_passes,
)

__all__ = ["Transfer", "ValidationConfig", "ValidationRun", "checked_config", "run_validation",
           "rank_main"]


@dataclass(frozen=True)
class ValidationConfig:
    topology: str  # "ring" | "tree"
    order: tuple[int, ...]  # ranks in ring / heap order
    world: int  # processes (ranks 0..world-1; those outside ``order`` do only the GEMM test)
    transfer_bytes: int = 4 << 20
    chunks: int = 8
    repeats: int = 3
    gemm_n: int = 256
    gemm_iters: int = 8
    bidirectional: bool = False
    slow_link: tuple[int, float] | None = None  # (rank, MB/s cap of its sends)
    slow_gemm: tuple[int, float] | None = None  # (rank, factor)
    backend: str = "auto"  # "auto" | "gloo" | "nccl"
    timeout_s: float = 300.0
    threads: int = 1

    def passes(self) -> list[Pass]:
        if self.topology == "ring":
            return ring_passes(list(self.order), self.bidirectional)
        return tree_passes(list(self.order), self.bidirectional)

    def edges(self) -> list[tuple[int, int]]:
        e = ring_edges(list(self.order)) if self.topology == "ring" else tree_edges(
            list(self.order))
        return e + ([(b, a) for a, b in e] if self.bidirectional else [])


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    repeat: int
    seconds: float
    nbytes: int


@dataclass(frozen=True)
class ValidationRun:
    config: ValidationConfig
    passes: list[Pass]
    transfers: list[Transfer]
    gemm_seconds: dict[int, list[float]]  # rank -> per-repeat seconds for gemm_iters products
    gemm_flops: float  # per repeat
    backend: str
    wall_s: float


def _backend(cfg: ValidationConfig) -> str:
    import torch

    if cfg.backend != "auto":
        return cfg.backend
    if torch.cuda.is_available() and torch.cuda.device_count() >= cfg.world:
        return "nccl"
    return "gloo"


def rank_main(rank: int, cfg: ValidationConfig, init_method: str, out: str) -> None:
    """One rank: join the group, run the passes and the GEMM test, write its results."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(cfg.threads)
    backend = _backend(cfg)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=cfg.world,
                            timeout=timedelta(seconds=cfg.timeout_s))

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def barrier() -> None:
        if backend == "nccl":
            dist.barrier(device_ids=[rank])
        else:
            dist.barrier()

    try:
        chunk = max(1, cfg.transfer_bytes // cfg.chunks // 4)  # float32 elements per chunk
        buf = torch.ones(chunk, dtype=torch.float32, device=device)
        nbytes = chunk * 4 * cfg.chunks
        ack = torch.zeros(1, dtype=torch.float32, device=device)
        passes = cfg.passes()
        cap = cfg.slow_link[1] * 1e6 if cfg.slow_link and cfg.slow_link[0] == rank else None
        slow = cfg.slow_gemm[1] if cfg.slow_gemm and cfg.slow_gemm[0] == rank else None
        gen = torch.Generator(device="cpu").manual_seed(rank)
        a = torch.randn(cfg.gemm_n, cfg.gemm_n, generator=gen).to(device)
        b = torch.randn(cfg.gemm_n, cfg.gemm_n, generator=gen).to(device)
        received: list[dict[str, Any]] = []
        gemm: list[float] = []
        barrier()
        torch.mm(a, b)  # warm-up
        sync()
        for repeat in range(cfg.repeats):
            for p in passes:
                barrier()
                for src, dst in p:
                    if src == rank:
                        t0 = time.perf_counter()
                        for k in range(cfg.chunks):
                            dist.send(buf, dst)
                            if cap is not None:
                                due = t0 + (k + 1) * chunk * 4 / cap
                                pause = due - time.perf_counter()
                                if pause > 0:
                                    time.sleep(pause)
                        dist.recv(ack, dst)
                        sync()
                        received.append({"src": src, "dst": dst, "repeat": repeat,
                                         "seconds": time.perf_counter() - t0,
                                         "nbytes": nbytes})
                    elif dst == rank:
                        for _ in range(cfg.chunks):
                            dist.recv(buf, src)
                        sync()
                        dist.send(ack, src)
            for turn in range(cfg.world):
                barrier()
                if turn != rank:
                    continue
                sync()
                t0 = time.perf_counter()
                for _ in range(cfg.gemm_iters):
                    torch.mm(a, b)
                sync()
                elapsed = time.perf_counter() - t0
                if slow is not None:
                    deadline = time.perf_counter() + (slow - 1.0) * elapsed
                    while time.perf_counter() < deadline:
                        pass
                    elapsed = time.perf_counter() - t0
                gemm.append(elapsed)
        barrier()
        text = json.dumps({"rank": rank, "backend": backend, "transfers": received,
                           "gemm": gemm})
        tmp = Path(out) / f".rank-{rank}.json.tmp"
        tmp.write_text(text)
        os.replace(tmp, Path(out) / f"rank-{rank}.json")
    finally:
        dist.destroy_process_group()


def run_validation(cfg: ValidationConfig) -> ValidationRun:
    """Spawn ``cfg.world`` processes, run the passes and the GEMM test, collect the results."""
    import torch.multiprocessing as mp

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="stragglers-validate-") as tmp:
        init = f"file://{Path(tmp, 'rendezvous').resolve()}"
        mp.start_processes(rank_main, args=(cfg, init, tmp), nprocs=cfg.world, join=True,
                           start_method="spawn")
        results = [json.loads(Path(tmp, f"rank-{r}.json").read_text())
                   for r in range(cfg.world)]
    transfers = [Transfer(**t) for res in results for t in res["transfers"]]
    gemm = {res["rank"]: list(res["gemm"]) for res in results}
    return ValidationRun(cfg, cfg.passes(), transfers, gemm,
                         2.0 * cfg.gemm_n ** 3 * cfg.gemm_iters, results[0]["backend"],
                         time.perf_counter() - t0)


def checked_config(topology: str, ranks: str, *, transfer_bytes: int = 4 << 20,
                   chunks: int = 8, repeats: int = 5, gemm_n: int = 256, gemm_iters: int = 8,
                   bidirectional: bool = False, slow_link: tuple[int, float] | None = None,
                   slow_gemm: tuple[int, float] | None = None, backend: str = "auto"
                   ) -> ValidationConfig:
    """The configuration of ``stragglers validate``: ``ranks`` as ``--ranks`` gives them
    (:func:`~stragglers.validate.plan.parse_ranks`), the injected ranks among them, the sizes
    within their limits and, for ``backend="nccl"``, a GPU per rank."""
    order = parse_ranks(ranks)
    world = max(order) + 1
    for opt, inj in (("--inject-slow-link", slow_link), ("--inject-slow-gemm", slow_gemm)):
        if inj is not None and inj[0] >= world:
            raise InputError(f"{opt}: rank {inj[0]} is not one of the {world} ranks")
    if chunks > transfer_bytes // 4:
        raise InputError(f"--chunks: {chunks} chunks of a {transfer_bytes}-byte transfer are "
                         "smaller than one float32")
    check_limit("validate_bytes", transfer_bytes, "--bytes")
    check_limit("validate_bytes", 4 * gemm_n ** 2, f"--gemm-n {gemm_n}")
    if backend == "nccl":
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() < world:
            raise InputError(f"--backend nccl: needs {world} GPUs, "
                             f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} "
                             "available")
    return ValidationConfig(topology, order, world, transfer_bytes=transfer_bytes,
                            chunks=chunks, repeats=repeats, gemm_n=gemm_n,
                            gemm_iters=gemm_iters, bidirectional=bidirectional,
                            slow_link=slow_link, slow_gemm=slow_gemm, backend=backend)


def config_dict(cfg: ValidationConfig) -> dict[str, Any]:
    return asdict(cfg)
