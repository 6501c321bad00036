"""Forked worker processes: a log dir's partitions cleaned (``kcompact clean``) or repaired (``kcompact repair``)
several at once, and one round's chunks. It knows nothing of Kafka.

Processes, not threads: the codecs and the record loops hold the GIL. :func:`partition_workers` picks
how many: ``jobs`` when given (at most one per partition and per usable core), else one per usable core (at most one per
partition) once the log dir holds enough work (:data:`POOL_MIN_WORK_BYTES`), and one below that (a pool costs a fork per
worker and a pickled result per partition).

:func:`run_in_pool` runs one call per item in forked workers (with ``here``, this process takes items beside
them: a log dir's ranking). The items and the call reach the
workers through fork (nothing but an index is pickled on the way in); each outcome comes back pickled,
and the parent collects outcomes in the items' order and relays the workers' progress in this process,
so a pooled run reports as a serial one does, except for timings. Where :func:`fork_available` says
no (it also guards ``cleaner.workers.parallel``'s pools), :func:`partition_workers` picks one.

**A worker that dies** (killed by a signal, the OOM killer, an ``os._exit`` in a codec) costs only the
item it was working on. Each worker has its own pipe, and the parent knows which item each worker holds,
so when a worker's process ends while it holds one, that item's outcome is the caller's ``died(item,
death)`` and a new worker takes the items still to do (a ``concurrent.futures`` pool cannot do this: a
dead worker breaks the whole pool, its other workers are terminated mid-item, and it does not say
which item the dead one held). What the dead worker left on disk is the caller's to settle in ``died``
(for a partition: the lock files it held, see ``segment.lock.clear_abandoned_locks``).

:func:`stream_in_pool` is the same machinery for one round's chunks (``cleaner.workers.parallel``): the
outcomes are yielded in order as the caller takes them, a bounded number handed out ahead, and a death
or an error is raised at its item's place (a round cannot go on without a chunk).
"""

from __future__ import annotations

import os
import signal
import traceback
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, TypeVar

from kcompact.value import frozen, mutable

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
    "stream_in_pool",
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


@frozen
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
    *,
    ahead: int = 0,
    here: Callable[[ItemT], OutcomeT] | None = None,
    taken: Callable[[OutcomeT], None] | None = None,
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
        ahead: items handed to a worker beyond the one it works on, so that it starts the next at once
            instead of waiting for this process to take its outcome and hand it another (worth it where an item
            takes a few milliseconds; at the end a worker may hold that many while another has none).
        here: this process works too, as one of the ``workers`` (``workers - 1`` are forked): between looks at
            the workers it takes the next item itself and calls ``here(item)`` (no progress; an outcome that
            need not pickle), while it does not wait on a worker. Worth it where the items are many and this
            process would otherwise wait idle on a core of its own.
        taken: called in this process with each outcome a worker gives, as it comes (once the worker has its next
            items): what this process does with it meanwhile, while the workers go on. Not called for the
            outcomes of ``here`` and ``died``.

    Returns:
        The outcomes, in the items' order.

    Raises:
        Exception: whatever a ``work`` or ``here`` call raised (a bug), once the items under way in the workers
            are done; items not yet started are not started.
    """
    import multiprocessing

    context = multiprocessing.get_context("fork")
    run: _PoolRun = _PoolRun(deque(range(len(items))), (items, work, progress is not None),
                             lambda index, death: died(items[index], death), depth=ahead + 1, taken=taken)
    forks = workers if here is None else workers - 1
    try:
        while run.to_do or run.workers:
            while run.to_do and len(run.workers) < forks and run.error is None:
                run.start(context)
            if here is not None and run.to_do and run.error is None:
                if run.workers:
                    run.serve(progress, timeout=0)  # take what is done, hand out more, wait for nothing
                if run.to_do and run.error is None:
                    index = run.to_do.popleft()
                    run.outcomes[index] = here(items[index])
            else:
                run.serve(progress)
            if run.error is not None:
                run.to_do.clear()
    finally:
        run.stop()
    if run.error is not None:
        raise run.error
    return [run.outcomes[index] for index in range(len(items))]


def stream_in_pool(
    items: Sequence[ItemT],
    work: Callable[[ItemT], OutcomeT],
    workers: int,
    died: Callable[[ItemT, WorkerDeath], BaseException],
    *,
    ahead: int,
) -> Generator[OutcomeT, None, None]:
    """``work(item)`` for every item, in ``workers`` forked processes, its outcomes yielded lazily in the
    items' order (a round's chunks, cleaner/workers/parallel.py).

    Each worker is handed up to ``ahead + 1`` items at once, and never more than that many per worker
    wait here untaken, so that outcomes do not pile up faster than they are used. An item whose
    ``work`` raised, or whose worker died (``died`` gives the error), raises at its place in the
    order, as a serial loop would; items after it not yet handed out are not started, and when the
    generator ends early (that error, or the caller's) the workers still busy are terminated: their
    items are abandoned.

    Args:
        items: what to work on (inherited through fork, never pickled).
        work: called in a worker with an item; its outcome must pickle.
        workers: how many processes at once.
        died: called in this process for an item whose worker ended before it gave the outcome; its
            return is raised in that item's place.
        ahead: items handed to a worker beyond the one it works on.

    Yields:
        The outcomes, in the items' order.
    """
    import multiprocessing

    context = multiprocessing.get_context("fork")
    depth = ahead + 1
    run: _PoolRun = _PoolRun(deque(range(len(items))), (items, lambda item, _report: work(item), False),
                             lambda index, death: died(items[index], death),
                             depth=depth, limit=workers * depth, in_order=True)
    try:
        for index in range(len(items)):
            while index not in run.outcomes and index not in run.failures:
                run.top_up(context, workers)
                run.serve(None)
            if index in run.failures:
                raise run.failures.pop(index)
            outcome = run.outcomes.pop(index)
            run.top_up(context, workers)  # the workers go on while the caller uses this outcome
            yield outcome
    finally:
        run.stop()


@mutable
class _Worker:
    """One worker process, its end of its pipe, and the items handed to it, oldest (the one it works
    on) first; ``stopping``: told to end."""

    process: ForkProcess
    conn: Connection
    held: deque[int] = field(default_factory=deque)
    stopping: bool = False
    at_eof: bool = False


_WorkerState = tuple[Sequence[Any], Callable[[Any, ProgressCallback | None], Any], bool]


@mutable
class _PoolRun:
    """The parent's side of :func:`run_in_pool` and :func:`stream_in_pool`: who holds what, and what
    came back.

    ``in_order`` (a stream): a death or an error is the outcome of its item (``failures``), items after
    it are not started, and workers busy at the end are terminated. Else (``run_in_pool``) a death's
    outcome is ``died``'s, the items a dead worker had not started go to a new one, an error stops the
    run (``error``), and workers busy at the end finish their item."""

    to_do: deque[int]
    state: _WorkerState  # what each worker gets through fork: (items, work, whether progress is wanted)
    died: Callable[[int, WorkerDeath], Any]
    depth: int = 1  # items handed to a worker at once
    limit: int | None = None  # items handed out and not yet taken (a stream's bound)
    in_order: bool = False
    taken: Callable[[Any], None] | None = None  # run_in_pool's: each outcome a worker gives, as it comes
    workers: list[_Worker] = field(default_factory=list)
    outcomes: dict[int, Any] = field(default_factory=dict)
    failures: dict[int, BaseException] = field(default_factory=dict)
    error: BaseException | None = None

    def start(self, context: Any) -> None:
        """Fork one worker and hand it the next items."""
        parent_end, child_end = context.Pipe()
        process = context.Process(target=_worker_main, args=(child_end, self.state), daemon=True)
        process.start()
        child_end.close()
        worker = _Worker(process, parent_end)
        self.workers.append(worker)
        self._hand_next(worker)

    def top_up(self, context: Any, workers: int) -> None:
        """Hand items to the workers that have room, and fork workers up to ``workers`` while items wait."""
        for worker in self.workers:
            if not worker.stopping:
                self._hand_next(worker)
        while self.to_do and self._room() and len([w for w in self.workers if not w.stopping]) < workers:
            self.start(context)

    def serve(self, progress: ProgressCallback | None, timeout: float | None = None) -> None:
        """Wait for a message or an exit (at most ``timeout`` seconds; None: until one comes), and act on it:
        relay progress, keep an outcome, replace a death."""
        from multiprocessing.connection import wait

        waitables: list[Any] = [w.conn for w in self.workers if not w.at_eof]
        waitables += [w.process.sentinel for w in self.workers]
        ready = set(wait(waitables, timeout))
        for worker in list(self.workers):
            if worker.conn in ready or worker.process.sentinel in ready:
                self._read(worker, progress)
            if worker.process.sentinel in ready:
                worker.process.join()
                self._read(worker, progress)  # what it sent just before it ended
                worker.conn.close()
                self.workers.remove(worker)
                if worker.held:
                    self._lost(worker, self.died(worker.held[0], WorkerDeath(worker.process.exitcode)))

    def _lost(self, worker: _Worker, outcome: Any) -> None:
        """The item ``worker`` worked on ended with ``outcome`` (a death's, or an error); the items it had
        not started yet are given back (or, in order, dropped with every later one)."""
        index = worker.held.popleft()
        if self.in_order:
            self.failures[index] = outcome
            self.to_do = deque(i for i in self.to_do if i < index)
        else:
            self.outcomes[index] = outcome
            self.to_do.extendleft(reversed(worker.held))
        worker.held.clear()

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
                worker.held.popleft()
                self.outcomes[message[1]] = message[2]
                if not self.in_order:
                    self._hand_next(worker)
                if self.taken is not None:
                    self.taken(message[2])
            else:  # "error": raised by ``work`` (a bug, or in order its item's error); the worker ends
                error: BaseException = message[2]
                error.__cause__ = _RemoteTraceback(message[3])
                worker.stopping = True
                if self.in_order:
                    self._lost(worker, error)
                else:
                    worker.held.clear()
                    self.error = self.error or error

    def _room(self) -> bool:
        if self.limit is None:
            return True
        handed = sum(len(w.held) for w in self.workers) + len(self.outcomes) + len(self.failures)
        return handed < self.limit

    def _hand_next(self, worker: _Worker) -> None:
        """Hand ``worker`` items up to ``depth``; tell it to end once nothing is left to do."""
        try:
            while len(worker.held) < self.depth and self.to_do and self.error is None and self._room():
                index = self.to_do.popleft()
                worker.held.append(index)
                worker.conn.send(index)
            if not worker.held and (not self.to_do or self.error is not None):
                worker.stopping = True
                worker.conn.send(None)
        except OSError:
            pass  # it died meanwhile: its sentinel says so, and ``serve`` gives the item to ``died``

    def stop(self) -> None:
        """End every worker and read and drop its messages, so that none blocks on a full pipe (reached
        with workers left only when this process raised or was interrupted, or a stream ended early).
        A busy worker finishes the item it holds; in order (a stream), it is terminated instead."""
        from multiprocessing.connection import wait

        for worker in self.workers:
            if self.in_order and worker.held:
                worker.process.terminate()  # its pipe is its own: no lock of another worker is held
            elif not worker.stopping:
                worker.stopping = True
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


def _worker_main(conn: Connection, state: _WorkerState) -> None:
    """A worker: take an item's index, send its outcome (and its progress) back, until told to stop.
    ``state`` (items, work, whether progress is wanted) came through fork, never pickled."""
    items, work, wants_progress = state
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
