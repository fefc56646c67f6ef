"""Structure checks of a merged trace against the what-if model's assumptions.

The analyzer builds one dependency graph from the op identities ``(optype, seq_id, stage)`` of
DP rank 0 in the first step, and pairs P2P ops with compute ops and with their peers by count
and order (``whatif-model.md`` §1-§3). These checks make sure a probed job yields a trace that
this construction fits:

1. the analyzer builds its op table and dependency graph from the trace (every DP rank and
   step has the same op identities per stage, P2P ops pair up): checked by running the
   analyzer's own :func:`~stragglers.trace.build_table` and
   :func:`~stragglers.model.build_graph`;
2. ``gc``, ``layernorm-grads-all-reduce``, ``optimizer-clip-main-grad`` and ``optimizer`` occur
   once per worker and step (``optimizer-clip-main-grad`` may also be absent from the whole
   trace: the loop probes of :mod:`stragglers.probe.loop` record no clip collective);
   ``embedding-grads-all-reduce`` once on the first and last stage and nowhere else;
3. forward and backward computes come in equal numbers, the same on every stage;
4. without interleaving, the first stage has no ``forward-recv``/``backward-send`` and the last
   no ``forward-send``/``backward-recv``; sends and receives pair up between neighbouring
   stages (same count);
5. P2P ops that are not no-ops by timing (§2.4) number as many as the computes of their
   direction (a receive may be one short, or absent, on the first/last stage), the k-th receive
   ends before the k-th compute starts and the k-th send starts after the k-th compute ends;
6. across workers (clock alignment): the k-th receive of a pair does not end before the k-th
   matching send starts, within ``clock_tolerance`` seconds.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from stragglers.errors import InputError
from stragglers.model import build_graph
from stragglers.trace import build_table
from stragglers.trace.io import JobMeta, trace_from_arrow

NOOP_EPS = 5e-5


def _direction_ops(ops: Any, direction: str) -> tuple[Any, Any, Any]:
    comp = ops[ops["optype"] == f"{direction}-compute"].sort_values(["start_ts", "seq_id"])
    recv = ops[ops["optype"] == f"{direction}-recv"].sort_values(["start_ts", "seq_id"])
    send = ops[ops["optype"] == f"{direction}-send"].sort_values(["start_ts", "seq_id"])
    if len(comp):
        last_start = comp["start_ts"].max()
        first_end = (comp["start_ts"] + comp["duration"]).min()
        recv = recv[recv["start_ts"] <= last_start + NOOP_EPS]
        send = send[send["start_ts"] + send["duration"] >= first_end - NOOP_EPS]
    return comp, recv, send


def check_trace(trace: Any, meta: JobMeta, clock_tolerance: float = 1e-3,
                max_problems: int = 20) -> list[str]:
    """Return human-readable problems (empty when the trace fits the model)."""
    problems: list[str] = []
    pp, vpp = meta.pp_size, meta.vpp_size

    def add(msg: str) -> bool:
        problems.append(msg)
        return len(problems) >= max_problems

    frame = trace.copy()
    frame["optype"] = frame["optype"].astype(str)
    # 1. the analyzer's own table and graph accept the trace
    try:
        columns = trace_from_arrow(pa.Table.from_pandas(frame, preserve_index=False),
                                   "<merged trace>")
        build_graph(build_table(columns, meta))
    except InputError as exc:
        if add(f"the analyzer refuses the merged trace: {exc}"):
            return problems
    per_worker = frame.groupby(["dp_rank", "stage", "step"])
    n_compute: dict[int, int] = {}
    once = ["gc", "layernorm-grads-all-reduce", "optimizer"]
    if (frame["optype"] == "optimizer-clip-main-grad").any():
        once.insert(2, "optimizer-clip-main-grad")
    for (dp, stage, step), ops in per_worker:
        counts = ops["optype"].value_counts().to_dict()
        where = f"dp_rank={dp} stage={stage} step={step}"
        # 2. once per step
        for name in once:
            if counts.get(name, 0) != 1:
                if add(f"{where}: {counts.get(name, 0)} x {name}, expected 1"):
                    return problems
        boundary = stage in (0, pp - 1)
        expect_emb = 1 if boundary else 0
        if counts.get("embedding-grads-all-reduce", 0) != expect_emb:
            if add(f"{where}: {counts.get('embedding-grads-all-reduce', 0)} x "
                   f"embedding-grads-all-reduce, expected {expect_emb}"):
                return problems
        # 3. compute counts
        nf, nb = counts.get("forward-compute", 0), counts.get("backward-compute", 0)
        if nf != nb or nf == 0:
            if add(f"{where}: {nf} forward vs {nb} backward computes"):
                return problems
        if n_compute.setdefault(int(stage), nf) != nf:
            if add(f"{where}: {nf} forward computes, other steps/ranks of the stage have "
                   f"{n_compute[int(stage)]}"):
                return problems
        # 4. boundary stages (non-interleaved)
        if vpp == 1:
            banned = []
            if stage == 0:
                banned += ["forward-recv", "backward-send"]
            if stage == pp - 1:
                banned += ["forward-send", "backward-recv"]
            for name in banned:
                if counts.get(name, 0):
                    if add(f"{where}: {counts[name]} x {name} on a boundary stage"):
                        return problems
        # 5. P2P against compute
        for direction in ("forward", "backward"):
            comp, recv, send = _direction_ops(ops, direction)
            nc = len(comp)
            allowed_recv = {nc} | ({nc - 1, 0} if boundary else set())
            allowed_send = {nc} | ({0} if boundary else set())
            if len(recv) not in allowed_recv:
                if add(f"{where}: {len(recv)} {direction}-recv for {nc} computes"):
                    return problems
                continue
            if len(send) not in allowed_send:
                if add(f"{where}: {len(send)} {direction}-send for {nc} computes"):
                    return problems
                continue
            c_start = comp["start_ts"].to_numpy()
            c_end = c_start + comp["duration"].to_numpy()
            skip = nc - len(recv)
            r_end = (recv["start_ts"] + recv["duration"]).to_numpy()
            for k, end in enumerate(r_end):
                if end > c_start[k + skip] + 1e-6:
                    if add(f"{where}: {direction}-recv {k} ends after compute {k + skip} "
                           f"starts"):
                        return problems
                    break
            s_start = send["start_ts"].to_numpy()
            for k, start in enumerate(s_start):
                if start < c_end[k] - 1e-6:
                    if add(f"{where}: {direction}-send {k} starts before compute {k} ends"):
                        return problems
                    break
    # 4b/6. pairing between neighbouring stages, and clock alignment
    if vpp == 1:
        for (dp, step), ops in frame.groupby(["dp_rank", "step"]):
            for stage in range(pp - 1):
                lo = ops[ops["stage"] == stage]
                hi = ops[ops["stage"] == stage + 1]
                for send_t, recv_t, snd, rcv in (("forward-send", "forward-recv", lo, hi),
                                                  ("backward-send", "backward-recv", hi, lo)):
                    s = snd[snd["optype"] == send_t].sort_values("seq_id")
                    r = rcv[rcv["optype"] == recv_t].sort_values("seq_id")
                    if len(s) != len(r):
                        if add(f"dp_rank={dp} step={step}: {len(s)} {send_t} vs {len(r)} "
                               f"{recv_t} between stages {stage} and {stage + 1}"):
                            return problems
                        continue
                    r_end = (r["start_ts"] + r["duration"]).to_numpy()
                    s_start = s["start_ts"].to_numpy()
                    late = s_start - r_end
                    if len(late) and late.max() > clock_tolerance:
                        k = int(late.argmax())
                        if add(f"dp_rank={dp} step={step}: {recv_t} {k} ends "
                               f"{late.max() * 1e3:.3f} ms before its {send_t} starts "
                               f"(clocks misaligned?)"):
                            return problems
    return problems
