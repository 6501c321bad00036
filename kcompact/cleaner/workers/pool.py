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

**A worker that dies** (killed by a signal, the OOM killer, an ``os._exit`` in a codec) costs only the
item it was working on. Each worker has its own pipe, and the parent knows which item each worker holds,
so when a worker's process ends while it holds one, that item's outcome is the caller's ``died(item,
death)`` and a new worker takes the items still to do (a ``concurrent.futures`` pool cannot do this: a
dead worker breaks the whole pool, its other workers are terminated mid-item, and it does not say
which item the dead one held). What the dead worker left on disk is the caller's to settle in ``died``
(for a partition: the lock files it held, see ``segment.lock.clear_abandoned_locks``).
"""

from __future__ import annotations

import os
import signal
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkProcess

__all__ = [
    "PARTITION_WORK_BYTES",
    "POOL_MIN_WORK_BYTES",
    "ProgressCallback",
    "WorkerDeath",
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

# What each forked worker inherits from the parent: (items, work, whether progress is wanted).
_worker_state: tuple[Sequence[Any], Callable[[Any, ProgressCallback | None], Any], bool] | None = None


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


@dataclass(frozen=True, slots=True)
class WorkerDeath:
    """How a worker process ended while it held an item (``multiprocessing``'s ``exitcode``)."""

    exitcode: int | None  # negative: killed by that signal; None: not known

    def describe(self) -> str:
        """``"killed by signal 9 (SIGKILL)"``, ``"exited with status 3"``."""
        if self.exitcode is None:
            return "ended without a result"
        if self.exitcode < 0:
            number = -self.exitcode
            try:
                return f"killed by signal {number} ({signal.Signals(number).name})"
            except ValueError:
                return f"killed by signal {number}"
        return f"exited with status {self.exitcode} before it gave a result"


def run_in_pool(
    items: Sequence[ItemT],
    work: Callable[[ItemT, ProgressCallback | None], OutcomeT],
    workers: int,
    progress: ProgressCallback | None,
    died: Callable[[ItemT, WorkerDeath], OutcomeT],
) -> list[OutcomeT]:
    """``work(item, report)`` for every item, in ``workers`` forked processes (see :func:`fork_available`).

    Args:
        items: what to work on (inherited through fork, never pickled).
        work: called in a worker with an item and a progress reporter (None without ``progress``);
            its outcome must pickle. It catches the errors that belong to its item.
        workers: how many processes at once.
        progress: called in this process with what the workers report.
        died: called in this process for an item whose worker ended before it gave the item's outcome;
            its return is that item's outcome. The other items go on, in a new worker.

    Returns:
        The outcomes, in the items' order.

    Raises:
        Exception: whatever a ``work`` call raised (a bug), once the items under way are done; items not
            yet started are not started.
    """
    import multiprocessing

    global _worker_state
    context = multiprocessing.get_context("fork")
    _worker_state = (items, work, progress is not None)  # inherited by every fork below
    run: _PoolRun[OutcomeT] = _PoolRun(deque(range(len(items))))
    try:
        while run.to_do or run.workers:
            while run.to_do and len(run.workers) < workers and run.error is None:
                run.start(context)
            run.serve(progress, lambda index, death: died(items[index], death))
            if run.error is not None:
                run.to_do.clear()
    finally:
        run.stop()
        _worker_state = None
    if run.error is not None:
        raise run.error
    return [run.outcomes[index] for index in range(len(items))]


@dataclass(slots=True)
class _Worker:
    """One worker process, its end of its pipe, and the item it holds (None: idle)."""

    process: ForkProcess
    conn: Connection
    index: int | None = None
    at_eof: bool = False


@dataclass(slots=True)
class _PoolRun(Generic[OutcomeT]):
    """The parent's side of :func:`run_in_pool`: who holds what, and what came back."""

    to_do: deque[int]
    workers: list[_Worker] = field(default_factory=list)
    outcomes: dict[int, OutcomeT] = field(default_factory=dict)
    error: BaseException | None = None

    def start(self, context: Any) -> None:
        """Fork one worker and hand it the next item."""
        parent_end, child_end = context.Pipe()
        process = context.Process(target=_worker_main, args=(child_end,), daemon=True)
        process.start()
        child_end.close()
        worker = _Worker(process, parent_end)
        self.workers.append(worker)
        self._hand_next(worker)

    def serve(self, progress: ProgressCallback | None, died: Callable[[int, WorkerDeath], OutcomeT]) -> None:
        """Wait for a message or an exit, and act on it: relay progress, keep an outcome, replace a death."""
        from multiprocessing.connection import wait

        waitables: list[Any] = [w.conn for w in self.workers if not w.at_eof]
        waitables += [w.process.sentinel for w in self.workers]
        ready = set(wait(waitables))
        for worker in list(self.workers):
            if worker.conn in ready or worker.process.sentinel in ready:
                self._read(worker, progress)
            if worker.process.sentinel in ready:
                worker.process.join()
                self._read(worker, progress)  # what it sent just before it ended
                worker.conn.close()
                self.workers.remove(worker)
                if worker.index is not None:
                    self.outcomes[worker.index] = died(worker.index, WorkerDeath(worker.process.exitcode))

    def _read(self, worker: _Worker, progress: ProgressCallback | None) -> None:
        while not worker.at_eof and worker.conn.poll():
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                worker.at_eof = True
                return
            kind = message[0]
            if kind == "progress":
                if progress is not None:
                    progress(*message[1:])
            elif kind == "done":
                self.outcomes[message[1]] = message[2]
                worker.index = None
                self._hand_next(worker)
            else:  # "error": a bug in ``work``; the pool stops
                error: BaseException = message[2]
                error.__cause__ = _RemoteTraceback(message[3])
                worker.index = None
                self.error = self.error or error

    def _hand_next(self, worker: _Worker) -> None:
        index = self.to_do.popleft() if self.to_do and self.error is None else None
        worker.index = index
        try:
            worker.conn.send(index)  # None: stop
        except OSError:
            pass  # it died meanwhile: its sentinel says so, and ``serve`` gives the item to ``died``

    def stop(self) -> None:
        """Let every worker finish the item it holds and end, its messages read and dropped so that none
        blocks on a full pipe (reached with workers left only when this process raised or was interrupted)."""
        from multiprocessing.connection import wait

        for worker in self.workers:
            try:
                worker.conn.send(None)  # read once its item is done
            except OSError:
                pass
        while self.workers:
            waitables: list[Any] = [w.conn for w in self.workers if not w.at_eof]
            ready = set(wait(waitables + [w.process.sentinel for w in self.workers]))
            for worker in list(self.workers):
                if worker.conn in ready:
                    self._drop_messages(worker)
                if worker.process.sentinel in ready:
                    worker.process.join()
                    worker.conn.close()
                    self.workers.remove(worker)

    @staticmethod
    def _drop_messages(worker: _Worker) -> None:
        while not worker.at_eof and worker.conn.poll():
            try:
                worker.conn.recv()
            except (EOFError, OSError):
                worker.at_eof = True


class _RemoteTraceback(Exception):
    """The traceback of a worker's exception, as its text (the ``__cause__`` of the re-raised error)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


def _worker_main(conn: Connection) -> None:
    """A worker: take an item's index, send its outcome (and its progress) back, until told to stop."""
    if _worker_state is None:  # pragma: no cover - only reachable if it was not forked by run_in_pool
        raise RuntimeError("kcompact.cleaner.workers.pool: a worker started without its state")
    items, work, wants_progress = _worker_state
    report: ProgressCallback | None = None
    if wants_progress:
        def report(name: str, done: int, total: int) -> None:
            conn.send(("progress", name, done, total))
    while True:
        try:
            index = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if index is None:
            return
        try:
            outcome = work(items[index], report)
        except BaseException as err:  # noqa: BLE001 - handed to the parent, which re-raises it
            _send_error(conn, index, err)
            return
        conn.send(("done", index, outcome))


def _send_error(conn: Connection, index: int, err: BaseException) -> None:
    text = "".join(traceback.format_exception(err))
    try:
        conn.send(("error", index, err, text))
    except Exception:  # noqa: BLE001 - the error does not pickle: send what it said
        conn.send(("error", index, RuntimeError(f"{type(err).__name__}: {err}"), text))
