"""The analysis queue: task process pools and the loop that feeds them from the store.

* :class:`UploadChecker` checks uploads in its own process pool, so that an upload waits for
  its own validation only, never behind queued analyses.
* :class:`Dispatcher` claims queued sessions from the store (the durable queue) as leases,
  analyses each in a task process and records the outcome. It wakes when an upload is
  queued and polls the store every second besides, and renews the leases of its running
  sessions every third of the lease. A graceful stop gives the running sessions back to the
  queue; after a ``kill -9`` they are queued again when the server starts (SQLite) or taken
  again when their lease expires (PostgreSQL). Neither counts as an attempt: an attempt
  counts when the analysis ends (done, failed) or its task process dies; a session whose
  worker died ``max_attempts`` times is failed with the reason.

Both run their tasks on an :class:`Executor`: a :class:`LocalPool` of this server's worker
processes, or (``serve --scheduler``) the workers of a Dask cluster
(:class:`stragglers.service.cluster.DaskExecutor`). The lease and attempt logic is the same
for both: a task process that dies is an attempt (:class:`TaskDied`), a task the
executor could not run (the scheduler went away) is not (:class:`ExecutorLost`).

The event loop only awaits futures and threads: every store call runs in a thread, every
analysis in a task process.
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
from typing import Any, Protocol, TypeVar

from sqlalchemy.exc import DBAPIError

from stragglers.errors import InputError
from stragglers.service.datadir import DataDir
from stragglers.service.rows import SessionRow
from stragglers.service.store import Store
from stragglers.service.tasks import (
    UploadCheck,
    analyse_session,
    check_upload,
    init_task_process,
    warm_up,
)

log = logging.getLogger("stragglers.service")

MAX_ATTEMPTS = 3
VALIDATE = "smon-validate"
T = TypeVar("T")


class TaskDied(Exception):
    """The process running a task died (killed, out of memory): an attempt."""


class ExecutorLost(Exception):
    """The executor cannot run the task now (the Dask scheduler went away): not an attempt;
    the session goes back to the queue."""


class Executor(Protocol):
    """Where validation and analyses run: :class:`LocalPool` (task processes of this
    server) or :class:`DaskExecutor` (the workers of a Dask cluster)."""

    where: str

    async def start(self) -> None: ...

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker; raises :class:`TaskDied` when the task process
        died, :class:`ExecutorLost` when the task could not be run, else what ``fn``
        raised."""
        ...

    def close(self) -> None: ...


def _pool(workers: int, role: str = "smon-analysis") -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, initializer=init_task_process, initargs=(role,),
                               mp_context=multiprocessing.get_context("spawn"))


class LocalPool:
    """A process pool of this server (``workers`` processes at most; ``warm`` of them started
    with the server, the others when a task finds every started one busy); a pool whose
    process died is replaced."""

    def __init__(self, workers: int, role: str = "smon-analysis",
                 warm: int | None = None) -> None:
        self.workers = workers
        self.role = role
        self.warm = workers if warm is None else min(warm, workers)
        self.where = f"local {role} processes"
        self._pool = _pool(workers, role)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._pool, warm_up)
                               for _ in range(self.warm)))

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        pool = self._pool
        try:
            return await loop.run_in_executor(pool, fn, *args)
        except BrokenProcessPool:
            if self._pool is pool:
                self._pool = _pool(self.workers, self.role)
            raise TaskDied(f"a {self.role} process died") from None

    def close(self) -> None:
        # the task processes die with this process (see init_task_process)
        self._pool.shutdown(wait=False, cancel_futures=True)


class UploadChecker:
    """Upload validation on its own executor, so that an upload waits for its own
    validation only, never behind queued analyses — nor behind another upload's: the local
    pool has up to ``workers`` validation processes (one started with the server, more
    when uploads arrive while every started one is busy, e.g. with a large metadata file
    that takes seconds to parse), so one slow upload holds one process, not the others."""

    def __init__(self, workers: int = 4, executor: Executor | None = None) -> None:
        self.workers = workers
        self.executor: Executor = executor or LocalPool(workers, VALIDATE, warm=1)
        self._own = executor is None

    async def start(self) -> None:
        if self._own:
            await self.executor.start()

    async def check(self, trace: str, meta: str, trace_name: str, meta_name: str
                    ) -> UploadCheck:
        for _ in range(2):
            try:
                return await self.executor.run(check_upload, trace, meta, trace_name,
                                               meta_name)
            except (TaskDied, ExecutorLost):
                # a validation process died (killed, out of memory): once more
                log.error("upload validation: its worker (process or Dask) was lost; trying again")
        raise InputError(f"{trace_name}: the validation process died twice (out of memory?)")

    def close(self) -> None:
        if self._own:
            self.executor.close()


class Dispatcher:
    """Feeds queued sessions to the analysis task processes."""

    def __init__(self, store: Store, data: DataDir, workers: int,
                 finished: Callable[[SessionRow], None], poll_s: float = 1.0,
                 max_attempts: int = MAX_ATTEMPTS, executor: Executor | None = None
                 ) -> None:
        self.store = store
        self.data = data
        self.workers = workers
        self.finished = finished
        self.poll_s = poll_s
        self.max_attempts = max_attempts
        self.executor: Executor = executor or LocalPool(workers)
        self._own = executor is None
        self._running: dict[str, asyncio.Task[None]] = {}
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        if self.store.dialect == "sqlite":  # one server per data folder and database
            n = await asyncio.to_thread(self.store.requeue_interrupted)
            if n:
                log.warning("queued again %d session(s) interrupted by the previous server",
                            n)
        if self._own:
            await self.executor.start()
        self._task = asyncio.create_task(self._loop_forever(), name="stragglers-dispatcher")
        self._heartbeat = asyncio.create_task(self._renew_forever(), name="stragglers-leases")

    def wake(self) -> None:
        """Tell the loop that a session was queued (callable from any thread)."""
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        """A graceful stop: claim nothing more, give the running sessions back to the queue
        (not an attempt), stop the worker processes."""
        for t in (self._task, self._heartbeat):
            if t is not None:
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await t
        running = list(self._running)
        for task in list(self._running.values()):
            task.cancel()
        try:
            n = await asyncio.to_thread(self.store.release, running)
            if n:
                log.warning("gave %d running session(s) back to the queue", n)
        except DBAPIError:
            log.exception("cannot give the running sessions back to the queue; they are "
                          "taken again when the server starts or their lease expires")
        if self._own:
            self.executor.close()

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(max(0.01, self.store.lease_s / 3))
            try:
                await asyncio.to_thread(self.store.renew, list(self._running))
            except DBAPIError:
                log.exception("cannot renew the leases of the running sessions; trying again")

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
                    if s.id in self._running:  # our own lease, expired while cut off
                        continue
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
        folder = self.data.session(s.id)
        log.info("session %s (job %s): analysis started (run %d, %s)", s.id, s.job, s.runs,
                 self.executor.where)
        row: SessionRow | None
        try:
            summary = await self.executor.run(analyse_session, str(folder), s.trace_file,
                                              s.runs, s.upload_name)
        except InputError as exc:
            row = await asyncio.to_thread(self.store.finish_failed, s.id, str(exc))
            log.warning("session %s (job %s): failed: %s", s.id, s.job, exc)
        except TaskDied as exc:
            failed = await asyncio.to_thread(self.store.task_died, s.id, self.max_attempts)
            log.error("session %s (job %s): %s; %s", s.id, s.job, exc,
                      "failed" if failed else "queued again")
            return
        except ExecutorLost as exc:
            await asyncio.to_thread(self.store.release, [s.id])
            log.error("session %s (job %s): %s; queued again (not an attempt)", s.id, s.job,
                      exc)
            return
        except Exception as exc:  # noqa: BLE001 - a bug in one analysis must not stop the
            # service: the session is failed with the error and the traceback is logged.
            log.exception("session %s (job %s): internal error", s.id, s.job)
            message = str(exc).replace(str(self.data.root), "DIR")
            row = await asyncio.to_thread(self.store.finish_failed, s.id,
                                          f"internal error: {type(exc).__name__}: {message}")
        else:
            row = await asyncio.to_thread(self.store.finish_done, s.id, summary)
            if row is not None:
                await asyncio.to_thread(_remove_other_outputs, folder, summary.result_dir)
                log.info("session %s (job %s): done in %.2f s: S = %.4f, verdict %s", s.id,
                         s.job, summary.analysis_s, summary.slowdown, summary.cause)
        if row is None:
            # another server took the session when this one's lease expired (this server
            # was cut off from the database or stalled): its outcome is the one kept
            log.warning("session %s (job %s): lease lost to another server; this run's "
                        "outcome is dropped", s.id, s.job)
            return
        await asyncio.to_thread(self.finished, row)


def _remove_other_outputs(folder: Path, keep: str) -> None:
    """Remove the outputs of earlier attempts of a session (interrupted ones)."""
    for p in folder.iterdir():
        if p.is_dir() and re.fullmatch(r"out-\d+", p.name) and p.name != keep:
            shutil.rmtree(p, ignore_errors=True)
