"""Fault injection for the durability tests: ``STRAGGLERS_CRASH_AT=POINT:N[:stop]``
(comma-separated) makes the process kill itself with SIGKILL (as ``kill -9`` would) — or
stop itself with SIGSTOP, a hung process — the N-th time it reaches POINT, so that a test can
cut the service at an exact step. Unset (always, outside tests) it does nothing.

Points: ``records-logged`` (server: a records batch checked, fed to the detector and
written, not yet committed), ``records-stored`` (server: committed, the answer not yet
sent), ``analysis-started`` (an analysis task process, counted per process),
``check-NAME`` (a validation task process checking an upload whose trace file is named
``NAME.*``, counted per process), ``alert-posted`` (server: a firing notification POSTed and
taken by its destination, not yet recorded as sent).
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "STRAGGLERS_CRASH_AT"
_seen: dict[str, int] = {}
_guard = threading.Lock()


def crashpoint(name: str) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    with _guard:
        _seen[name] = n = _seen.get(name, 0) + 1
    for item in spec.split(","):
        point, _, rest = item.partition(":")
        count, _, action = rest.partition(":")
        if point == name and count.isdigit() and int(count) == n:
            os.kill(os.getpid(), signal.SIGSTOP if action == "stop" else signal.SIGKILL)
