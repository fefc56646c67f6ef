"""A rank of a fake job for the driver's tests: heartbeats without torch, so that a test
starts in a fraction of a second. ``python fake_rank.py SCENARIO``:

* ``crash-together``: every rank steps; at step 3 rank 2 exits with status 3 (``os._exit``,
  nothing reported, as a segfault or a kill); the others notice (a marker it leaves, as a
  call to it would fail) and exit with status 1 some 30 ms later, reporting nothing either (a
  job that does not report ``comm_error``); ``crash-same-code``: the same, every rank exiting
  with status 1 (only the exit times tell them apart); ``crash-reported``: the others report
  ``comm_error`` before they exit;
* ``frozen-timeout``: at step 3 rank 1 freezes (``SIGSTOP``); the others wait for it in a
  call, time out after 3 s and exit with status 1 reporting ``comm_error`` (a collective
  timeout): only its stale heartbeat names it;
* ``frozen-computing``: at step 3 rank 1 freezes (``SIGSTOP``); the others wait for it
  outside any call (no communication call reported), so nothing but its stale heartbeat
  names it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from stragglers.hang.heartbeats import read_beats
from stragglers.recover.heartbeat import Heartbeat


def main() -> int:
    scenario = sys.argv[1]
    hb = Heartbeat.from_env()
    assert hb is not None
    rank = hb.rank
    folder = Path(os.environ["STRAGGLERS_HEARTBEAT_DIR"])
    marker = folder / "culprit-gone"
    for step in range(6):
        hb.step(step)
        time.sleep(0.05)
        if step < 3:
            continue
        if scenario.startswith("crash-"):
            if rank == 2:
                marker.write_text("")
                os._exit(1 if scenario == "crash-same-code" else 3)
            while not marker.exists():
                time.sleep(0.002)
            time.sleep(0.03)  # the peer's failure surfaces a little later
            if scenario == "crash-reported":
                hb.status("comm_error")
            os._exit(1)
        if scenario == "frozen-timeout":
            if rank == 1:
                getattr(hb, "flush", lambda: None)()
                os.kill(os.getpid(), signal.SIGSTOP)
            hb.enter("all_reduce", "dp", seq=step)
            time.sleep(3.0)  # the collective's timeout
            hb.status("comm_error")
            os._exit(1)
        if scenario == "frozen-computing":
            if rank == 1:
                getattr(hb, "flush", lambda: None)()  # the step written before freezing
                os.kill(os.getpid(), signal.SIGSTOP)
            while True:  # waits for rank 1 outside any call
                beats = read_beats(folder)
                if 1 in beats and beats[1].step > 3:
                    break
                time.sleep(0.05)
    hb.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
