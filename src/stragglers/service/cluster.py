"""``stragglers serve --scheduler tcp://HOST:PORT``: upload validation and analyses run as
tasks on an existing Dask cluster (the fleet study's engine) instead of this server's
process pools.

The tasks get paths, not bytes: the Dask workers must see the server's data folder at the
same path (a shared file system, as in docs/guides/service.md, "Past one machine"). A task
whose Dask worker died is retried by Dask on another worker (the scheduler's
``distributed.scheduler.allowed-failures``); when Dask gives up (``KilledWorker``) the
analysis counts one attempt, as a dead local task process does. A task that could not
run because the scheduler went away is no attempt: the session goes back to the queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from stragglers.errors import InputError
from stragglers.service.dispatcher import ExecutorLost, TaskDied, log

T = TypeVar("T")
#: How long ``serve --scheduler`` waits for its first worker.  The wait for the scheduler
#: itself is Dask's ``distributed.comm.timeouts.connect`` (30 s unless configured, e.g. by
#: ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=5s``).
WORKER_WAIT_S = 60.0


def on_worker(fn: Callable[..., T], *args: Any) -> tuple[T, str]:
    """Run ``fn(*args)`` in a Dask worker; returns its result and where it ran."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    from distributed import get_worker

    try:
        address = get_worker().address
    except ValueError:  # not in a worker (a test calling it directly)
        address = "-"
    return fn(*args), f"dask worker {address} (host {socket.gethostname()}, pid {os.getpid()})"


class DaskExecutor:
    """Tasks on a Dask cluster through one ``distributed.Client`` (its own IO thread). A
    task's completion is awaited through a done-callback, not a thread per task, and the
    short blocking calls (submit, fetching a result) run in threads, never on the server's
    event loop. ``priority``: Dask runs queued tasks of a higher priority first (upload
    validation goes before queued analyses, see :meth:`for_upload_checks`)."""

    def __init__(self, scheduler: str, client: Any = None, priority: int = 0) -> None:
        self.scheduler = scheduler
        self.where = f"Dask cluster {scheduler}"
        self.client = client if client is not None else connect(scheduler)
        self.priority = priority
        self._owner = client is None

    def for_upload_checks(self) -> DaskExecutor:
        """The same cluster and client, its tasks ahead of queued analyses."""
        return DaskExecutor(self.scheduler, self.client, priority=10)

    async def start(self) -> None:
        pass

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        from distributed import KilledWorker

        name = getattr(fn, "__name__", "task")
        key = f"smon-{name}-{uuid.uuid4().hex}"
        try:
            fut = await asyncio.to_thread(self.client.submit, on_worker, fn, *args, key=key,
                                          pure=False, priority=self.priority)
        except Exception as exc:  # noqa: BLE001 - the client is closed or cut off
            raise ExecutorLost(f"cannot submit to the Dask scheduler {self.scheduler} "
                               f"({type(exc).__name__}: {exc})") from None
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not finished.done():
                finished.set_result(None)

        def wake(_: Any) -> None:  # in the client's thread
            loop.call_soon_threadsafe(settle)

        try:
            fut.add_done_callback(wake)
            await finished
            result, where = await asyncio.to_thread(fut.result)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except KilledWorker as exc:
            raise TaskDied(f"the Dask workers running it died ({exc})") from None
        except (OSError, TimeoutError) as exc:
            raise ExecutorLost(f"the Dask scheduler {self.scheduler} went away "
                               f"({type(exc).__name__}: {exc})") from None
        except concurrent.futures.CancelledError:  # distributed's FutureCancelledError
            raise ExecutorLost(f"the Dask scheduler {self.scheduler} cancelled the task (it "
                               "restarted or the connection to it was lost)") from None
        finally:
            fut.release()
        first = Path(str(args[0])) if args else Path("-")
        log.info("%s %s ran on %s", name,  # a session's folder, or an upload's file
                 f"{first.parent.name}/{first.name}" if first.suffix else first.name, where)
        return result

    def close(self) -> None:
        if not self._owner:
            return
        try:
            self.client.close(timeout=10)
        except Exception:  # noqa: BLE001 - closing at a stop: nothing left to do
            log.exception("closing the Dask client")


def connect(scheduler: str) -> Any:
    """A client of ``scheduler`` with at least one worker; one-line :class:`InputError`s
    when the address is wrong, the scheduler cannot be reached or has no worker."""
    try:
        from distributed import Client

        from stragglers.fleet.execute import check_scheduler_address
    except ImportError:
        raise InputError("--scheduler needs dask[distributed]: pip install "
                         "'stragglers[fleet]'") from None
    check_scheduler_address(scheduler)
    try:
        client = Client(scheduler, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise InputError(f"--scheduler {scheduler}: cannot connect "
                         f"({' '.join(str(exc).split())[:200]})") from None
    try:
        client.wait_for_workers(1, timeout=WORKER_WAIT_S)
    except TimeoutError:
        client.close()
        raise InputError(f"--scheduler {scheduler}: no worker connected within "
                         f"{WORKER_WAIT_S:g} s (start `dask worker {scheduler}`)") from None
    return client
