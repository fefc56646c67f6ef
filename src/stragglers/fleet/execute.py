"""Running the fleet's tasks: on a Dask cluster (an embedded ``LocalCluster`` or a scheduler
address) or in a plain sequential loop, in a bounded window, storing each row as it
finishes.

Only jobs whose key is not in the store are run. At most ``window`` tasks are in flight at
once (submitted as earlier ones complete, :func:`distributed.as_completed`), so that a
worker holds at most a few traces whatever the fleet's size. A task that raises (a bug: user
errors come back as failed rows) stops the run with its traceback; the rows stored until
then stay, and a re-run resumes from them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from stragglers.errors import InputError
from stragglers.fleet.discover import JobInput
from stragglers.fleet.rowstore import RowStore
from stragglers.fleet.task import STATUS_FAILED, FleetRow, analyse_job, job_key

#: Tasks in flight per worker thread.
WINDOW_PER_WORKER = 2
#: Dask's nannies start workers with MALLOC_TRIM_THRESHOLD_=65536, which also turns off
#: glibc's dynamic mmap threshold: every array of the analysis above 128 KiB is then mapped
#: and unmapped afresh, and the page faults cost about 6x the system time of a plain
#: process (measured: 3.5 s of 10 s CPU per worker on 100 jobs, 0.4 s without). The
#: embedded cluster unsets it; workers of an external cluster take the same setting from
#: their Dask configuration (docs/guides/fleet.md).
TRIM_KEY = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
#: How long a run on --scheduler waits for its first worker.
WORKER_WAIT_S = 120.0
Progress = Callable[[int, int, int], None]


@dataclass(frozen=True)
class RunStats:
    """What one run did: ``computed`` tasks run now, ``reused`` rows found in the store."""

    jobs: int
    computed: int
    reused: int
    failed_now: int
    wall_s: float


def check_scheduler_address(scheduler: str) -> None:
    """A one-line :class:`InputError` unless ``scheduler`` is a Dask scheduler address
    (``tcp://host:port``) with a port in 1..65535."""
    from distributed.comm import get_address_host_port

    try:
        _, port = get_address_host_port(scheduler)
    except ValueError as exc:
        raise InputError(f"--scheduler {scheduler!r}: not a Dask scheduler address, e.g. "
                         f"tcp://host:8786 ({exc})") from None
    if not 0 < port < 65536:
        raise InputError(f"--scheduler {scheduler!r}: port {port} outside 1..65535")


@contextlib.contextmanager
def open_client(scheduler: str | None = None, workers: int = 2,
                processes: bool = True) -> Iterator[object]:
    """A ``distributed.Client``: connected to ``scheduler`` (``tcp://host:port``), or to an
    embedded ``LocalCluster`` of ``workers`` single-threaded workers (processes, or
    threads of this process with ``processes=False``)."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        check_scheduler_address(scheduler)
        try:
            client = Client(scheduler)
        except (OSError, TimeoutError) as exc:
            raise InputError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
        try:
            try:
                client.wait_for_workers(1, timeout=WORKER_WAIT_S)
            except TimeoutError:
                raise InputError(f"--scheduler {scheduler}: no worker connected within "
                                 f"{WORKER_WAIT_S:g} s (start `dask worker {scheduler}`)"
                                 ) from None
            yield client
        finally:
            client.close()
        return
    import dask

    with dask.config.set({TRIM_KEY: None}), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes,
                         dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def _todo(jobs: Sequence[JobInput], store: RowStore, exact_sw: bool
          ) -> tuple[list[str], list[tuple[str, JobInput]]]:
    keys = [job_key(j, exact_sw) for j in jobs]
    done = store.done()
    todo: dict[str, JobInput] = {}
    for k, j in zip(keys, jobs, strict=True):
        if k not in done and k not in todo:
            todo[k] = j
    return keys, list(todo.items())


def _args(job: JobInput, exact_sw: bool) -> tuple[str | None, str, str | None, bool]:
    return (None if job.trace is None else str(job.trace), str(job.meta),
            None if job.truth is None else str(job.truth), exact_sw)


def run_sequential(jobs: Sequence[JobInput], store: RowStore, exact_sw: bool = False,
                   progress: Progress | None = None) -> tuple[list[str], RunStats]:
    """Run the missing tasks one after the other in this process; returns every job's key
    (in ``jobs`` order) and the stats."""
    t0 = time.perf_counter()
    keys, todo = _todo(jobs, store, exact_sw)
    failed = 0
    for i, (key, job) in enumerate(todo):
        row = analyse_job(*_args(job, exact_sw))
        store.put(key, row)
        failed += row.status == STATUS_FAILED
        if progress:
            progress(i + 1, len(todo), failed)
    return keys, RunStats(len(jobs), len(todo), len(jobs) - len(todo), failed,
                          time.perf_counter() - t0)


def run_dask(jobs: Sequence[JobInput], store: RowStore, client: object,
             exact_sw: bool = False, progress: Progress | None = None,
             window: int | None = None) -> tuple[list[str], RunStats]:
    """Run the missing tasks on ``client``'s cluster, at most ``window`` in flight (default
    :data:`WINDOW_PER_WORKER` x the cluster's worker threads); rows are stored as they
    complete."""
    from distributed import Client, as_completed

    assert isinstance(client, Client)
    t0 = time.perf_counter()
    keys, todo = _todo(jobs, store, exact_sw)
    if window is None:
        threads = sum(w.get("nthreads", 1)
                      for w in client.scheduler_info().get("workers", {}).values())
        window = WINDOW_PER_WORKER * max(1, threads)
    pending = iter(todo)
    by_future: dict[object, str] = {}
    ac = as_completed()

    def submit_next() -> None:
        item = next(pending, None)
        if item is not None:
            key, job = item
            fut = client.submit(analyse_job, *_args(job, exact_sw), key=f"fleet-{key}",
                                pure=False)
            by_future[fut.key] = key
            ac.add(fut)

    for _ in range(window):
        submit_next()
    done = failed = 0
    for fut in ac:
        row: FleetRow = fut.result()  # a bug in the task re-raises here, with its traceback
        store.put(by_future.pop(fut.key), row)
        fut.release()
        done += 1
        failed += row.status == STATUS_FAILED
        if progress:
            progress(done, len(todo), failed)
        submit_next()
    return keys, RunStats(len(jobs), len(todo), len(jobs) - len(todo), failed,
                          time.perf_counter() - t0)
