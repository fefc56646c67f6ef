"""The end of a profiling session pushed to a ``stragglers serve`` server.

When :class:`~stragglers.probe.ProbeConfig` names a ``push_server``, every rank's
:meth:`Probe.close <stragglers.probe.Probe.close>` writes its rank file, waits for the others
(a barrier on the probes' gloo group) and rank 0 calls :func:`merge_and_push`: the rank files
are merged into ``OUT_DIR/session/`` (``trace.parquet`` + ``meta.yaml``) and uploaded with
:func:`stragglers.service.client.push_session`. The outcome is written to
``OUT_DIR/session/push.json`` (``{"session": ID}`` or ``{"error": "..."}``).

A training job must not die because a monitoring server is down or a trace is odd: every
failure of the merge or the push is logged as one line (logger ``stragglers.probe``) and
recorded in ``push.json``; the job goes on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from stragglers.atomic import write_text
from stragglers.errors import InputError
from stragglers.probe.settings import ProbeConfig

log = logging.getLogger("stragglers.probe")

#: Sub-folder of the probe's output folder that receives the merged session.
SESSION_DIR = "session"


@dataclass(frozen=True)
class PushOutcome:
    """What :func:`merge_and_push` did: the server's session id, or the one-line error."""

    session: str | None
    error: str | None
    folder: Path


def merge_and_push(probe_dir: str | Path, config: ProbeConfig) -> PushOutcome:
    """Merge the rank files of ``probe_dir`` and push them to ``config.push_server``."""
    if config.push_server is None:
        raise ValueError("merge_and_push needs ProbeConfig.push_server")
    src = Path(probe_dir)
    dest = src / SESSION_DIR
    session: str | None = None
    error: str | None = None
    try:
        # Imported here: the service client needs httpx, which only pushing sessions use.
        from stragglers.probe.merge import merge_dir
        from stragglers.service.auth import load_token
        from stragglers.service.client import push_session

        token = load_token(config.push_token_file, "ProbeConfig.push_token_file")
        merge_dir(src, None, dest)
        session = push_session(dest / "trace.parquet", dest / "meta.yaml", config.push_server,
                               token, job=config.push_job)
    except (InputError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}" if isinstance(exc, OSError) else str(exc)
    dest.mkdir(parents=True, exist_ok=True)
    body = {"session": session} if error is None else {"error": error}
    write_text(dest / "push.json", json.dumps(body) + "\n")
    if error is None:
        log.info("probe session pushed to %s as session %s", config.push_server, session)
    else:
        log.warning("probe session not pushed to %s: %s", config.push_server, error)
    return PushOutcome(session=session, error=error, folder=dest)
