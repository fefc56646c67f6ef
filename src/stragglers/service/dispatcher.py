"""The analysis queue: worker process pools and the loop that feeds them from the store.

* :class:`Validator` checks uploads in its own process pool, so that an upload waits for
  its own validation only, never behind queued analyses.
* :class:`Dispatcher` claims queued sessions from the store (the durable queue), analyses
  each in a worker process and records the outcome. It wakes when an upload is queued and
  polls the store every second besides. Sessions that were running when the server stopped
  are queued again when it starts; a worker process that dies takes its session back to the
  queue (at most ``max_attempts`` times).

The event loop only awaits futures and threads: every store call runs in a thread, every
analysis in a process.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import multiprocessing
import re
import shutil
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from stragglers.errors import InputError
from stragglers.service.datadir import DataDir
from stragglers.service.records import SessionRow
from stragglers.service.store import Store
from stragglers.service.worker import (
    UploadCheck,
    analyse_session,
    init_worker,
    validate_upload,
    warm_up,
)

log = logging.getLogger("stragglers.service")

MAX_ATTEMPTS = 3
VALIDATE = "smon-validate"


def _pool(workers: int, role: str = "smon-analysis") -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, initializer=init_worker, initargs=(role,),
                               mp_context=multiprocessing.get_context("spawn"))


async def _start(pool: ProcessPoolExecutor, workers: int) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(pool, warm_up) for _ in range(workers)))


class Validator:
    """Upload validation in its own worker processes."""

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers
        self._pool = _pool(workers, VALIDATE)

    async def start(self) -> None:
        await _start(self._pool, self.workers)

    async def check(self, trace: str, meta: str, trace_name: str, meta_name: str
                    ) -> UploadCheck:
        loop = asyncio.get_running_loop()
        for _ in range(2):
            pool = self._pool
            try:
                return await loop.run_in_executor(pool, validate_upload, trace, meta,
                                                  trace_name, meta_name)
            except BrokenProcessPool:
                # a validation process died (killed, out of memory): a new pool, once more
                log.error("upload validation: the worker process died; trying again")
                if self._pool is pool:
                    self._pool = _pool(self.workers, VALIDATE)
        raise InputError(f"{trace_name}: the validation process died twice (out of memory?)")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Dispatcher:
    """Feeds queued sessions to the analysis worker processes."""

    def __init__(self, store: Store, data: DataDir, workers: int,
                 finished: Callable[[SessionRow], None], poll_s: float = 1.0,
                 max_attempts: int = MAX_ATTEMPTS) -> None:
        self.store = store
        self.data = data
        self.workers = workers
        self.finished = finished
        self.poll_s = poll_s
        self.max_attempts = max_attempts
        self._pool = _pool(workers)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        n = await asyncio.to_thread(self.store.requeue_interrupted)
        if n:
            log.warning("queued again %d session(s) interrupted by the previous server", n)
        await _start(self._pool, self.workers)
        self._task = asyncio.create_task(self._loop_forever(), name="stragglers-dispatcher")

    def wake(self) -> None:
        """Tell the loop that a session was queued (callable from any thread)."""
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._running.values()):
            task.cancel()
        # Sessions still running stay 'running' in the store and are queued again at the
        # next start; the worker processes die with this process (see init_worker).
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _loop_forever(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            free = self.workers - len(self._running)
            claimed: list[SessionRow] = []
            if free > 0:
                try:
                    claimed = await asyncio.to_thread(self.store.claim, free,
                                                      self.max_attempts)
                except DBAPIError:
                    # the database is unreachable for now (PostgreSQL restarting, say):
                    # keep the loop alive and try again at the next poll
                    log.exception("cannot claim queued sessions; trying again")
                for s in claimed:
                    task = asyncio.create_task(self._analyse(s), name=f"session-{s.id}")
                    self._running[s.id] = task
                    task.add_done_callback(functools.partial(self._done, s.id))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_s)

    def _done(self, session_id: str, _task: asyncio.Task[None]) -> None:
        self._running.pop(session_id, None)
        if self._wake is not None:
            self._wake.set()

    async def _analyse(self, s: SessionRow) -> None:
        loop = asyncio.get_running_loop()
        folder = self.data.session(s.id)
        pool = self._pool
        log.info("session %s (job %s): analysis started (attempt %d)", s.id, s.job, s.attempts)
        try:
            summary = await loop.run_in_executor(pool, analyse_session, str(folder),
                                                 s.trace_file, s.attempts)
        except InputError as exc:
            row = await asyncio.to_thread(self.store.finish_failed, s.id, str(exc))
            log.warning("session %s (job %s): failed: %s", s.id, s.job, exc)
        except BrokenProcessPool:
            log.error("session %s (job %s): the worker process died; queued again", s.id,
                      s.job)
            if self._pool is pool:
                self._pool = _pool(self.workers)
            await asyncio.to_thread(self.store.requeue, s.id)
            return
        except Exception as exc:  # noqa: BLE001 - a bug in one analysis must not stop the
            # service: the session is failed with the error and the traceback is logged.
            log.exception("session %s (job %s): internal error", s.id, s.job)
            row = await asyncio.to_thread(self.store.finish_failed, s.id,
                                          f"internal error: {type(exc).__name__}: {exc}")
        else:
            row = await asyncio.to_thread(self.store.finish_done, s.id, summary)
            await asyncio.to_thread(_remove_other_outputs, folder, summary.result_dir)
            log.info("session %s (job %s): done in %.2f s: S = %.4f, verdict %s", s.id, s.job,
                     summary.analysis_s, summary.slowdown, summary.cause)
        await asyncio.to_thread(self.finished, row)


def _remove_other_outputs(folder: Path, keep: str) -> None:
    """Remove the outputs of earlier attempts of a session (interrupted ones)."""
    for p in folder.iterdir():
        if p.is_dir() and re.fullmatch(r"out-\d+", p.name) and p.name != keep:
            shutil.rmtree(p, ignore_errors=True)
