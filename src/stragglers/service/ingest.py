"""Session uploads: stage the files, check them in a task process, then queue the
session durably — or refuse the upload with the checker's one-line message and leave
nothing behind.

Order of the steps (what a ``kill -9`` at any point leaves):

1. the files are written under ``DIR/uploads/ID/`` (removed when the server starts again);
2. validation in a worker process (``stragglers.analysis.load_table``);
3. the folder is renamed to ``DIR/sessions/ID/`` and fsynced;
4. the session row is committed as ``queued`` — from here on the session exists;
5. ``202 {"session": ID}``.

A folder under ``sessions/`` without a row (killed between 3 and 4) is removed when the
server starts; when step 4 fails (the database refuses a value of the upload, or is gone)
the folder is removed at once unless the row turns out to be there. A client that retries
with the same ``key`` gets the first session back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from stragglers.errors import InputError
from stragglers.limits import check_limit
from stragglers.service.datadir import DataDir, check_job_name
from stragglers.service.dispatcher import UploadChecker
from stragglers.service.rows import NewSession
from stragglers.service.store import Store
from stragglers.service.tasks import META_FILE

TRACE_SUFFIXES = {".parquet": ".parquet", ".pq": ".parquet", ".jsonl": ".jsonl",
                  ".ndjson": ".jsonl", ".json": ".jsonl"}
KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_LABELS = 32


@dataclass(frozen=True)
class Upload:
    """An upload as received (the trace still in the request's temporary file)."""

    trace: IO[bytes]
    trace_name: str
    meta: bytes
    meta_name: str
    job: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    key: str | None = None


def trace_suffix(name: str) -> str:
    suffix = TRACE_SUFFIXES.get(Path(name).suffix.lower())
    if suffix is None:
        raise InputError(f"{name[:80]}: the trace must be a .parquet or .jsonl file")
    return suffix


def parse_labels(text: str | None) -> dict[str, str]:
    """Labels: a JSON object of short strings."""
    if text is None or not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"field 'labels': not valid JSON ({exc.msg})") from None
    if not isinstance(raw, dict) or len(raw) > MAX_LABELS or not all(
            isinstance(k, str) and isinstance(v, str) and 0 < len(k) <= 64 and len(v) <= 256
            for k, v in raw.items()):
        raise InputError(f"field 'labels': expected a JSON object of at most {MAX_LABELS} "
                         "string labels (keys 1-64, values up to 256 characters)")
    return raw


def check_key(key: str | None, source: str = "field 'key'") -> str | None:
    if key is None or key == "":
        return None
    if not KEY.match(key):
        raise InputError(f"{source}: 1-64 letters, digits, '.', '_' or '-'")
    return key


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Ingest:
    def __init__(self, store: Store, data: DataDir, checker: UploadChecker) -> None:
        self.store = store
        self.data = data
        self.checker = checker

    def stage(self, session_id: str, up: Upload) -> tuple[Path, str, int]:
        """Write the upload into its staging folder; returns (folder, trace file, bytes)."""
        trace_file = "trace" + trace_suffix(up.trace_name)
        folder = self.data.upload(session_id)
        folder.mkdir()
        with open(folder / trace_file, "wb") as fh:
            up.trace.seek(0)
            shutil.copyfileobj(up.trace, fh, 1 << 20)
            fh.flush()
            os.fsync(fh.fileno())
        with open(folder / META_FILE, "wb") as fh:
            fh.write(up.meta)
            fh.flush()
            os.fsync(fh.fileno())
        size = (folder / trace_file).stat().st_size + len(up.meta)
        return folder, trace_file, size

    def discard(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)

    def commit(self, folder: Path, new: NewSession) -> tuple[str, bool]:
        """Move the staged folder into place and queue the session (see the module doc)."""
        final = self.data.session(new.id)
        os.rename(folder, final)
        _fsync_dir(final.parent)
        try:
            session_id, created = self.store.add_session(new)
        except BaseException:
            # not queued (a value the database refuses, the database gone): the folder goes
            # too, unless the row is there after all (a commit whose answer was lost); when
            # the database cannot tell, the next start removes it (remove_orphans)
            try:
                stored = self.store.session(new.id) is not None
            except Exception:  # noqa: BLE001 - the database is still away
                stored = True
            if not stored:
                shutil.rmtree(final, ignore_errors=True)
            raise
        if not created:
            shutil.rmtree(final, ignore_errors=True)
        return session_id, created

    async def receive(self, up: Upload) -> tuple[str, bool]:
        """Stage, validate and queue an upload; returns (session id, created)."""
        check_limit("yaml_bytes", len(up.meta), up.meta_name)
        job = check_job_name(up.job, "field 'job'") if up.job is not None else None
        if job is not None and up.key is not None:
            found = await asyncio.to_thread(self.store.session_id_for_key, job, up.key)
            if found is not None:
                return found, False
        session_id = uuid.uuid4().hex
        folder, trace_file, size = await asyncio.to_thread(self.stage, session_id, up)
        try:
            check = await self.checker.check(str(folder / trace_file),
                                               str(folder / META_FILE), up.trace_name,
                                               up.meta_name)
            if job is None:
                job = check_job_name(check.trial_name,
                                     f"{up.meta_name}: trial_name (or give field 'job')")
        except BaseException:
            await asyncio.to_thread(self.discard, folder)
            raise
        new = NewSession(id=session_id, job=job, trace_file=trace_file,
                         upload_name=up.trace_name[:255], upload_bytes=size,
                         labels=up.labels, client_key=up.key)
        return await asyncio.to_thread(self.commit, folder, new)


def remove_orphans(store: Store, data: DataDir) -> int:
    """Remove session folders without a row (a server killed between steps 3 and 4)."""
    known = set(store.session_ids())
    n = 0
    for p in (data.root / "sessions").iterdir():
        if p.name not in known:
            shutil.rmtree(p, ignore_errors=True)
            n += 1
    return n
