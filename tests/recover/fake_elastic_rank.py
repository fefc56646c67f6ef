"""A worker of a fake elastic job for the guard's tests under a real ``torchrun``: heartbeats,
checkpoints and a barrier per step, without torch (a worker starts in a fraction of a second).

``python fake_elastic_rank.py STEPS KILL_NODE KILL_STEP``: every step ends in a barrier of
the rendezvous round's ranks (files in ``RUN/barrier/<MASTER_PORT>/``, the port torchrun
chose for the round); a rank waiting in it sees a dead peer (its heartbeat's process is gone)
and fails as a collective would (``RuntimeError`` inside the call: ``comm_error``). Rank 0
checkpoints every 2 steps (``CKPT/ckpt-<step>.pt``, what :func:`resume_step` reads) and
appends ``{step, world}`` to ``RUN/steps.jsonl``; a restarted round resumes after the latest
checkpoint. The first worker of node ``KILL_NODE`` (``STRAGGLERS_NODE``, set by the guard) is
killed (``SIGKILL``) as it begins ``KILL_STEP``, once per job
(:func:`stragglers.testbed.faults.claim`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from stragglers.recover.heartbeat import Heartbeat
from stragglers.testbed.faults import claim


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main() -> int:
    steps, kill_node, kill_step = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    run, ckpt = Path(os.environ["STRAGGLERS_RUN_DIR"]), Path(os.environ["STRAGGLERS_CKPT_DIR"])
    hb = Heartbeat.from_env()
    assert hb is not None
    barrier = run / "barrier" / os.environ["MASTER_PORT"]
    barrier.mkdir(parents=True, exist_ok=True)
    (barrier / f"pid-{rank}").write_text(str(os.getpid()))
    done = sorted(int(p.stem.split("-")[1]) for p in ckpt.glob("ckpt-*.pt"))
    start = done[-1] + 1 if done else 0
    for step in range(start, steps):
        hb.step(step)
        if (os.environ.get("STRAGGLERS_NODE") == kill_node and os.environ["LOCAL_RANK"] == "0"
                and step == kill_step and claim("kill")):
            hb.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)
        hb.enter("barrier", "world", seq=step)
        (barrier / f"{step}-{rank}").write_text("")
        while len(list(barrier.glob(f"{step}-*"))) < world:
            peers = [int(p.read_text() or 0) for p in barrier.glob("pid-*")]
            if not all(_alive(pid) for pid in peers if pid):
                raise RuntimeError("a peer went away")
            time.sleep(0.01)
        hb.leave()
        if rank == 0:
            with open(run / "steps.jsonl", "a") as fh:
                fh.write(json.dumps({"step": step, "world": world}) + "\n")
            if step % 2 == 1:
                (ckpt / f"ckpt-{step}.pt").write_text("")
    hb.step(steps)
    hb.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
