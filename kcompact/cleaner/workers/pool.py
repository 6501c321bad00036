"""Worker processes for ``kcompact clean`` over a log dir: several partitions cleaned at once.

Processes, not threads: the codecs and the record loops hold the GIL. :func:`partition_workers` picks
how many: ``jobs`` when given (at most one per partition and per usable core), else one per usable core (at most one per partition) once the log dir
holds enough work (:data:`POOL_MIN_WORK_BYTES`), and one below that (a pool costs a fork per worker
and a pickled result per partition).

:func:`run_in_pool` runs one call per item in forked workers. The items and the call reach the
workers through fork (nothing but an index is pickled on the way in); each outcome comes back pickled,
and the parent collects outcomes in the items' order and relays the workers' progress in this process,
so a pooled run reports as a serial one does, except for timings. Where :func:`fork_available` says
no (it also guards cleaner/parallel.py's pools), :func:`partition_workers` picks one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = [
    "PARTITION_WORK_BYTES",
    "POOL_MIN_WORK_BYTES",
    "ProgressCallback",
    "clamped_jobs_note",
    "fork_available",
    "partition_workers",
    "run_in_pool",
    "usable_cpus",
]

POOL_MIN_WORK_BYTES = 20 * 1024 * 1024
"""Auto ``jobs`` uses a pool once the partitions' segment bytes, plus :data:`PARTITION_WORK_BYTES` per
partition, reach this; below it one process is as fast or faster.

Measured on a quiet 2-core machine (``clean_path`` with imports warm, best of 11): a serial clean costs
about 6 ms per partition (config, locks, fsyncs) plus 4 ms per MB, and a pool of two forked workers
breaks even at about 60 ms of serial work (6 x 1 MB: 59.7 -> 56.2 ms; 12 x 0.1 MB: 74.4 -> 73.7 ms;
2 x 8 MB: 68.3 -> 64.0 ms), loses below it (2 x 1 MB: 19.9 -> 26.8 ms; 4 x 1 MB: 38.1 -> 41.2 ms) and
wins above it (16 x 1 MB: 147 -> 115 ms; 32 x 0.25 MB: 202 -> 158 ms). On a loaded machine the pool
gains less: two workers need two idle cores."""

PARTITION_WORK_BYTES = 1536 * 1024
"""A partition's fixed cost in a clean, counted as this many bytes of segments (6 ms at 4 ms per MB)."""

ProgressCallback = Callable[[str, int, int], None]
"""Called as ``(partition name, bytes done, bytes total)``."""

ItemT = TypeVar("ItemT")
OutcomeT = TypeVar("OutcomeT")

# What each forked worker inherits from the parent: (items, work, progress queue or None).
_worker_state: tuple[Sequence[Any], Callable[[Any, ProgressCallback | None], Any], Any] | None = None


def partition_workers(jobs: int | None, sizes_in_bytes: Sequence[int]) -> int:
    """How many worker processes clean these partitions of a log dir (1: in this process).

    Args:
        jobs: the caller's choice (None = auto).
        sizes_in_bytes: each partition's segment bytes, one per partition to clean.

    Returns:
        ``min(jobs, partitions, usable cores)``: a worker more than either would have nothing to do
        (and each costs a fork; ``--jobs 100000`` must not start 100000 processes); for auto,
        ``min(usable cores, partitions)`` once their bytes plus :data:`PARTITION_WORK_BYTES` each reach
        :data:`POOL_MIN_WORK_BYTES`, else 1; always 1 where :func:`fork_available` says no.
    """
    if len(sizes_in_bytes) < 2 or not fork_available():
        return 1
    if jobs is not None:
        return max(1, min(jobs, len(sizes_in_bytes), usable_cpus()))
    if sum(sizes_in_bytes) + PARTITION_WORK_BYTES * len(sizes_in_bytes) < POOL_MIN_WORK_BYTES:
        return 1
    return max(1, min(usable_cpus(), len(sizes_in_bytes)))


def clamped_jobs_note(jobs: int | None, used: int, work: str) -> str | None:
    """The run's note when an explicit ``jobs`` asked for more processes than were used.

    Args:
        jobs: the caller's ``--jobs`` (None: auto, which needs no note).
        used: the most processes that ran at once (1: this process only; 0: no round ran, no note).
        work: what bounded them besides the cores, e.g. "the 4 partitions to clean".

    Returns:
        The note, or None when nothing was clamped.
    """
    if jobs is None or not used or used >= jobs:
        return None
    if not fork_available():
        return f"--jobs {jobs}: cleaned in this process (worker processes need fork, unavailable here)"
    count = "1 process" if used == 1 else f"{used} worker processes"
    return f"--jobs {jobs}: {count} at a time, as many as {work} and the {usable_cpus()} usable cores allow"


def fork_available() -> bool:
    """Whether this process can start forked workers (this module's and cleaner/parallel.py's pools).

    Returns:
        False where the "fork" start method is missing (Windows; macOS has it but not by default)
        or in a daemonic process (a pool's worker), which may not start processes of its own.
    """
    import multiprocessing  # here: a clean in this process never needs it (~5 ms to import)

    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    return not multiprocessing.current_process().daemon


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def run_in_pool(
    items: Sequence[ItemT],
    work: Callable[[ItemT, ProgressCallback | None], OutcomeT],
    workers: int,
    progress: ProgressCallback | None,
) -> list[OutcomeT]:
    """``work(item, report)`` for every item, in ``workers`` forked processes (see :func:`fork_available`).

    Args:
        items: what to work on (inherited through fork, never pickled).
        work: called in a worker with an item and a progress reporter (None without ``progress``);
            its outcome must pickle. It catches the errors that belong to its item.
        workers: how many processes.
        progress: called in this process with what the workers report.

    Returns:
        The outcomes, in the items' order.

    Raises:
        Exception: whatever a ``work`` call raised (a bug); the pool stops, queued items are not started.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("fork")
    queue = None if progress is None else context.Queue()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                               initargs=(items, work, queue))
    try:
        futures: list[Future[OutcomeT]] = [pool.submit(_work_in_worker, index) for index in range(len(items))]
        _relay_progress(futures, queue, progress)
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if queue is not None:
            queue.close()


def _init_worker(
    items: Sequence[Any], work: Callable[[Any, ProgressCallback | None], Any], queue: Any
) -> None:
    global _worker_state
    _worker_state = (items, work, queue)
    if queue is not None:
        queue.cancel_join_thread()  # progress is best effort: never hang a worker's exit on it


def _work_in_worker(index: int) -> Any:
    if _worker_state is None:  # pragma: no cover - only reachable if the initializer did not run
        raise RuntimeError("kcompact.cleaner.workers.pool: a worker started without its state")
    items, work, queue = _worker_state
    report: ProgressCallback | None = None
    if queue is not None:
        def report(name: str, done: int, total: int) -> None:
            queue.put((name, done, total))
    return work(items[index], report)


def _relay_progress(futures: Sequence[Future[Any]], queue: Any, progress: ProgressCallback | None) -> None:
    """Hand the workers' progress to ``progress`` in this process until every item is done."""
    from concurrent.futures import wait
    from queue import Empty

    if queue is None or progress is None:
        wait(futures)
        return
    while True:
        try:
            name, done, total = queue.get(timeout=0.05)
        except Empty:
            if all(future.done() for future in futures):
                return
            continue
        progress(name, done, total)
