"""Both passes of a round on several cores: one byte range of one segment per task, on threads of this
process (``jobs=None``) or in worker processes (an explicit ``jobs`` above 1).

Threads (:func:`run_two_threads`, the default where it pays: :func:`choose_runner`): the windows' kernels
(``round/_windows.c``: framing, CRC-32C, the record walks, zstd both ways, the output's copy) run without
the GIL, and lz4/gzip release it inside their libraries, so :data:`THREADS` threads read, decide and filter
chunks of :data:`THREAD_CHUNK_BYTES` while this thread puts the map's entries and appends the output, in
order; results stay in memory (no fork, no spill files). Pass 1 keeps :data:`THREADS` chunks in work beyond
the one being put; pass 2 keeps :data:`THREADS` in work and appends the first one's output runs as its thread
makes them (:func:`_streamed_in_threads`), so what waits here is about one chunk's output, not three. A chunk
starts at a batch (``chunks.batch_cuts``), so no range walks the segment from its start.

Processes: the pool
is forked (``pool.stream_in_pool``) after the plan, and for pass 2 after the map, so workers inherit both
without copying; where fork is unavailable everything runs in this process. A worker that dies (SIGKILL,
the OOM killer) fails the round at its chunk (:class:`WorkerDiedError`, naming the segment range and how
it died): the round has then written nothing but ``.cleaned`` files, which are removed.

Work is cut into *chunks*: byte ranges of one source segment, about a quarter of an even share each (at
least :data:`CHUNK_MIN_BYTES`), so that two cores stay busy even when a partition has one large segment or
segments of unequal size. A chunk owns the batches that *start* in it, so any cut is valid
(``chunks.py`` says how a worker finds its first batch and the transaction state there).

* Pass 1: a worker returns the chunk's map entries (``mapping.SegmentKeys``); this process inserts them
  in segment order, so a bounded map fills at exactly the serial point (``mapping.fill_offset_map``).
* Pass 2: a worker filters its chunk and returns the output batches (bytes, and per batch its size, last
  offset and max timestamp), the counters and the ABORT markers' index entries it retained; this process
  appends them, in order, to the group's one ``CleanedSegmentWriter``, which builds the indexes. The
  output is therefore the same bytes whatever the number of workers.

Bulk results (entries, output bytes) travel through temporary files (``spill.py``): the pool's pipe
costs several times more. At most :data:`AHEAD` chunks per worker are in flight beyond the one being
consumed, and chunks are at most :data:`CHUNK_MAX_BYTES`, so what waits here stays bounded.

An explicit ``jobs`` is capped at the usable CPUs and at the ranges pass 2 is cut into: a process more
would have nothing to do, and each costs a fork (``jobs=100000`` must not start 100000 processes).
``jobs=None`` runs the round on threads when it reads more than :data:`AUTO_THREADS_BYTES` and the machine
has room (:func:`_room_for_threads`: two usable CPUs, the 1-minute load average leaving this round one and a
half of them; on a busy machine a second core's work only adds its overhead), else in this thread.
:func:`resolve_jobs` still answers ``None`` for processes as before (:data:`AUTO_PARALLEL_BYTES`; plain
bench shape at load 5 on 2 cores: 2.7 s with two workers, 2.3 s without) where a caller asks it.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import sys
import threading
from array import array
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import field
from functools import partial
from pathlib import Path
from queue import SimpleQueue
from typing import TypeVar

import numpy as np

from kcompact.cleaner.disk.swap import CleanedSegmentWriter
from kcompact.cleaner.round.chunks import Chunk, batch_cuts
from kcompact.cleaner.round.chunks import chunks_of as cut_chunks
from kcompact.cleaner.round.filtering import iter_segment_output
from kcompact.cleaner.round.mapping import (
    SegmentKeys,
    fill_offset_map,
    iter_dirty_keys,
    new_offset_map,
)
from kcompact.cleaner.round.options import CleanOptions, Progress
from kcompact.cleaner.round.plan import CleanPlan, SegmentPlan
from kcompact.cleaner.round.record_filter import RUN_BYTES, FilterContext, OutputRun
from kcompact.cleaner.round.stats import CleanStats
from kcompact.cleaner.round.steps import (
    GroupOutput,
    RoundOutput,
    RoundRunner,
    finish_group,
    remove_outputs,
    run_passes,
    write_group,
)
from kcompact.cleaner.round.steps import build_offset_map as serial_offset_map
from kcompact.cleaner.workers.spill import (
    Spilled,
    SpillWriter,
    load_arrays,
    read_spilled,
    spill_arrays,
    spool,
)
from kcompact.errors import ConfigError, KcompactError
from kcompact.fork_pool import WorkerDeath, fork_available, stream_in_pool, usable_cpus
from kcompact.log.offset_map import OffsetMap
from kcompact.log.offset_map.oracle import OffsetMapOracle, RetentionOracle
from kcompact.segment.log_file import LogFile
from kcompact.segment.txn_index import AbortedTxn
from kcompact.value import frozen, mutable

AUTO_PARALLEL_BYTES = 64 * 1024 * 1024
"""Above this many bytes read by pass 2, ``jobs=None`` uses two workers (measured: see the report)."""
CHUNK_MIN_BYTES = 16 * 1024 * 1024
CHUNK_MAX_BYTES = 64 * 1024 * 1024  # bounds a worker's result (entries, output batches) in memory
AHEAD = 2  # chunks submitted per worker beyond the one being consumed: bounds results waiting here
AUTO_MAX_JOBS = 2
AUTO_THREADS_BYTES = 16 * 1024 * 1024
"""Above this many bytes read, ``jobs=None`` runs the round on :data:`THREADS` threads (two chunks and more)."""
THREADS = 2
THREADS_IDLE_CPUS = 1.5  # this thread's core and at least half another's (_room_for_threads)
THREAD_CHUNK_BYTES = 8 * 1024 * 1024
"""The ranges the threads take: small, since a chunk's output waits in memory until it is appended."""
THREAD_WINDOW_BYTES = RUN_BYTES // THREADS
"""Pass 2's C windows on the threads (``FilterContext.window_bytes``): each thread holds one, so the two
together hold what one thread's window of :data:`~kcompact.cleaner.round.record_filter.RUN_BYTES` does (zstd
bench: peak RSS 75-85 -> 70-74 MiB; wall and CPU the same)."""


T = TypeVar("T")

_POOL_LOCK = threading.Lock()
_worker_state: tuple[CleanPlan, RetentionOracle | None, Path] | None = None  # inherited through fork


def choose_runner(plan: CleanPlan, options: CleanOptions) -> RoundRunner | None:
    """Who runs passes 1 and 2 of ``plan`` (a ``RunnerChoice``): ``options.jobs`` worker processes; for
    ``jobs=None`` and a round that reads more than :data:`AUTO_THREADS_BYTES` on a machine with two usable
    CPUs, this process on two threads (:func:`run_two_threads`); else None for the round's own passes in
    this process on one (``steps.run_passes``). Every round with passes to run asks here first, so this is
    where a process readies its heap for the windows, once (:func:`_windows_from_the_heap`).

    Raises:
        ConfigError: ``options.jobs`` below 1.
    """
    _windows_from_the_heap()
    if options.jobs is None:
        return run_two_threads if _auto_threads(plan) else None
    jobs = resolve_jobs(options.jobs, plan)
    return None if jobs == 1 else partial(run_round, jobs=jobs)


def run_two_threads(plan: CleanPlan, options: CleanOptions, progress: Progress | None) -> RoundOutput:
    """Passes 1 and 2 of a round (a ``RoundRunner``) on :data:`THREADS` threads of this process: chunks of
    :data:`THREAD_CHUNK_BYTES` read, decided and filtered on them while this thread puts the map's entries
    and appends the output, in order (the same bytes as one thread's; see the module docstring)."""
    map_stats = CleanStats()
    cuts: dict[int, list[int]] = {}  # pass 1's cuts of a segment serve pass 2 (the plan's segments stay put)
    offset_map = _threads_offset_map(plan, options.dedupe_buffer_size, map_stats, progress, cuts)
    _release_free_heap()
    if offset_map.latest_offset != plan.map_latest_offset:
        plan = plan.bounded(offset_map.latest_offset)
    oracle = OffsetMapOracle(offset_map, plan.first_dirty_offset)
    outputs: list[GroupOutput] = []
    try:
        if plan.groups:
            segments = [plan.segment(base) for group in plan.groups for base in group]
            chunks = _thread_chunks(plan, segments, cuts)
            results = _streamed_in_threads(partial(_filter_in_memory, plan, oracle), chunks)
            try:
                _assemble_groups(plan, chunks, results, outputs, options.dry_run, progress)
            finally:
                results.close()  # on a failure: the chunks in work waited for, before the round's clean-up
    except BaseException:
        remove_outputs(plan, outputs)
        raise
    return RoundOutput(plan, outputs, map_stats, THREADS)


def _auto_threads(plan: CleanPlan) -> bool:
    """Whether ``jobs=None`` runs the round on :data:`THREADS` threads: one that reads more than
    :data:`AUTO_THREADS_BYTES`, with room for them (:func:`_room_for_threads`)."""
    read = sum(s.size_in_bytes for s in plan.segments if s.base_offset < plan.end_offset)
    return read > AUTO_THREADS_BYTES and _room_for_threads()


def _room_for_threads() -> bool:
    """:data:`THREADS` usable CPUs, of which the machine's other work (the 1-minute load average, less one
    for this process's own share) leaves at least :data:`THREADS_IDLE_CPUS`: on a busy machine the second
    thread only adds its cost. Not :func:`_spare_cpus`'s whole CPUs: a clean run after a clean (a log dir's,
    a benchmark's) carries a load near one of its own, which would flip the choice from run to run."""
    cpus = usable_cpus()
    if cpus < THREADS:
        return False
    try:
        busy = os.getloadavg()[0]
    except OSError:  # no load average here
        return True
    return cpus - max(0.0, busy - 1) >= THREADS_IDLE_CPUS


def run_round(
    plan: CleanPlan, options: CleanOptions, progress: Progress | None, *, jobs: int | None = None
) -> RoundOutput:
    """Passes 1 and 2 of a round (a ``RoundRunner``) in ``jobs`` worker processes, or in this process for
    one (the same bytes either way).

    Args:
        plan: the round.
        options: ``jobs`` (when ``jobs`` is None), ``dedupe_buffer_size`` and ``dry_run`` matter here.
        progress: called with byte counts as segments are read.
        jobs: from :func:`resolve_jobs`; None resolves ``options.jobs``.

    Returns:
        The round as run (bounded where a bounded map filled early), its outputs and pass 1's counters.
    """
    if jobs is None:
        jobs = resolve_jobs(options.jobs, plan)
    if jobs <= 1:
        return run_passes(plan, options, progress)
    map_stats = CleanStats()
    offset_map = build_offset_map(plan, options.dedupe_buffer_size, map_stats, progress, jobs=jobs)
    if offset_map.latest_offset != plan.map_latest_offset:
        plan = plan.bounded(offset_map.latest_offset)
    oracle = OffsetMapOracle(offset_map, plan.first_dirty_offset)
    outputs = write_groups(plan, oracle, dry_run=options.dry_run, progress=progress, jobs=jobs)
    return RoundOutput(plan, outputs, map_stats, jobs)


def resolve_jobs(jobs: int | None, plan: CleanPlan) -> int:
    """The number of processes a round uses (see the module docstring).

    Args:
        jobs: ``CleanOptions.jobs``: None for automatic, else at least 1.
        plan: the round.

    Returns:
        1 (in this process) or more (worker processes): never more than the usable CPUs, nor than
        the ranges pass 2 is cut into for that many.

    Raises:
        ConfigError: ``jobs`` below 1.
    """
    if jobs is not None and jobs < 1:
        raise ConfigError(f"jobs; expected at least 1, found {jobs}")
    if jobs == 1:
        return 1
    if jobs is None:
        read = sum(s.size_in_bytes for s in plan.segments if s.base_offset < plan.end_offset)
        if read <= AUTO_PARALLEL_BYTES:
            return 1
    if not fork_available():
        return 1
    if jobs is None:
        jobs = AUTO_MAX_JOBS
        cpus = _spare_cpus()
    else:
        cpus = usable_cpus()
    jobs = max(1, min(jobs, cpus))
    written = [plan.segment(base) for group in plan.groups for base in group]
    return max(1, min(jobs, len(chunks_of(plan, written, jobs))))


def _spare_cpus() -> int:
    """Usable CPUs not already busy (by the 1-minute load average, this process's own share aside):
    on a loaded machine more processes only add their cost (measured: see the report)."""
    cpus = usable_cpus()
    try:
        busy = os.getloadavg()[0]
    except OSError:  # no load average here
        return cpus
    return max(1, min(cpus, int(cpus - busy + 1)))


def chunks_of(plan: CleanPlan, segments: list[SegmentPlan], jobs: int) -> list[Chunk]:
    """Cut ``segments`` for ``jobs`` workers: ranges of about a quarter of an even share, at least
    :data:`CHUNK_MIN_BYTES` and at most :data:`CHUNK_MAX_BYTES` (so that a late large range does not
    leave a worker idle, and no result is large)."""
    total = sum(s.size_in_bytes for s in segments)
    parts = max(4 * jobs, -(-total // CHUNK_MAX_BYTES))
    return cut_chunks(plan, segments, parts, CHUNK_MIN_BYTES)


@mutable
class _Pool:
    """Worker processes for a pass: how many, and the streams of results started (closed with the pool)."""

    jobs: int
    plan: CleanPlan
    streams: list[Generator[object, None, None]] = field(default_factory=list)


def _in_order(pool: _Pool, task: Callable[[Chunk], T], chunks: list[Chunk], jobs: int) -> Iterator[T]:
    """``task(chunk)`` for every chunk in ``jobs`` worker processes, the results in order, at most
    ``AHEAD`` chunks per worker handed out beyond the one consumed, so that results never pile up here
    faster than they are used. A worker that dies (SIGKILL, the OOM killer) fails the round at its
    chunk: :class:`WorkerDiedError`."""
    passes = {_map_chunk.__name__: 1, _filter_chunk.__name__: 2}
    which = passes.get(getattr(task, "__name__", ""), 0)

    def died(chunk: Chunk, death: WorkerDeath) -> BaseException:
        return WorkerDiedError.of(pool.plan, chunk, which, death)

    stream = stream_in_pool(chunks, task, min(jobs, pool.jobs), died, ahead=AHEAD)
    pool.streams.append(stream)
    return stream


class WorkerDiedError(KcompactError):
    """A worker process of a round ended before it gave its chunk's result (killed by a signal, the OOM
    killer): the round fails, having changed nothing in place."""

    @classmethod
    def of(cls, plan: CleanPlan, chunk: Chunk, which: int, death: WorkerDeath) -> WorkerDiedError:
        index, start, _end = chunk
        name = Path(plan.segments[index].log_path).name
        doing = {1: "reading the keys of", 2: "filtering"}.get(which, "working on")
        return cls(f"{plan.partition_dir}: the worker process {doing} {name} from byte {start} (pass "
                   f"{which} of the round) was {death.describe()}; the round changed nothing: clean it "
                   "again", path=plan.partition_dir)


@contextmanager
def _pool(jobs: int, plan: CleanPlan, oracle: RetentionOracle | None) -> Iterator[_Pool]:
    """Worker processes that see ``plan`` and ``oracle``; one pool at a time per process, since the
    workers read them from a module global (inherited when each is forked).

    Each worker has a pipe of its own (``pool.stream_in_pool``), so a worker that dies, however it
    dies, is noticed and holds no lock another needs (a ``multiprocessing.Pool`` waited for ever for
    the chunk of a killed worker, and its ``terminate`` could hang on a lock a killed worker held).
    At the end, the streams are closed (workers still busy, after a failure, are terminated) before
    the result files go."""
    global _worker_state
    with _POOL_LOCK, spool() as directory:
        _worker_state = (plan, oracle, directory)
        pool = _Pool(jobs, plan)
        try:
            yield pool
        finally:
            for stream in pool.streams:
                stream.close()
            _worker_state = None


def _state() -> tuple[CleanPlan, RetentionOracle | None, Path]:
    if _worker_state is None:  # a task outside a pool started by this module
        raise RuntimeError("kcompact.cleaner.workers.parallel: worker state missing (not forked from _pool)")
    return _worker_state


# --- pass 1 -------------------------------------------------------------------------------------


def build_offset_map(
    plan: CleanPlan,
    dedupe_buffer_size: int | None,
    stats: CleanStats,
    progress: Progress | None = None,
    *,
    jobs: int = 1,
) -> OffsetMap:
    """Pass 1: the frozen offset map of the round, serial or with ``jobs`` workers (same map).

    Args:
        plan: the round.
        dedupe_buffer_size: emulate a broker's bounded map; None for an unbounded one.
        stats: ``records_scanned``, ``map_entries`` and ``map_memory_bytes`` are set.
        progress: called with each dirty segment's size once it is in the map.
        jobs: from :func:`resolve_jobs`.

    Returns:
        The map; its ``latest_offset`` is where the round ends (minus one).
    """
    dirty = [plan.segment(base) for base in plan.dirty_segments]
    if jobs <= 1 or not dirty:
        return serial_offset_map(plan, dedupe_buffer_size, stats, progress)
    offset_map = new_offset_map(plan, dedupe_buffer_size)
    chunks = chunks_of(plan, dirty, jobs)
    jobs = min(jobs, len(chunks))  # fewer dirty segments than pass 2 reads: fewer ranges
    with _pool(jobs, plan, None) as pool:
        results = _in_order(pool, _map_chunk, chunks, jobs)
        sources = _per_segment(plan, dirty, chunks, results)
        stats.records_scanned += fill_offset_map(plan, offset_map, sources, progress)
    stats.map_entries = offset_map.size
    stats.map_memory_bytes = offset_map.memory_bytes()
    return offset_map


def _map_chunk(chunk: Chunk) -> Spilled:
    plan, _oracle, directory = _state()
    index, start, end = chunk
    slices = list(iter_dirty_keys(plan, plan.segments[index], start, end))
    put_ends, offset = [], 0
    for s in slices:
        put_ends.append(s.batch_put_ends + offset)
        offset += len(s.offsets)
    return spill_arrays(directory, [
        np.concatenate([s.hi for s in slices]), np.concatenate([s.lo for s in slices]),
        np.concatenate([s.offsets for s in slices]), np.concatenate(put_ends),
        np.concatenate([s.batch_last_offsets for s in slices]),
        np.concatenate([s.batch_scanned for s in slices]),
    ])


def _keys(spilled: Spilled) -> SegmentKeys:
    """The columns :func:`_map_chunk` spilled, typed again (``asarray`` of an array of its own dtype is that
    array: nothing is copied)."""
    hi, lo, *int64_columns = load_arrays(spilled)
    offsets, put_ends, last_offsets, scanned = (np.asarray(c, dtype=np.int64) for c in int64_columns)
    return SegmentKeys(np.asarray(hi, dtype=np.uint64), np.asarray(lo, dtype=np.uint64), offsets, put_ends,
                       last_offsets, scanned)


def _per_segment(
    plan: CleanPlan, segments: list[SegmentPlan], chunks: list[Chunk], results: Iterable[Spilled]
) -> Iterator[tuple[SegmentPlan, Iterator[SegmentKeys]]]:
    """Regroup the chunk results (in chunk order) per segment, lazily."""
    it = iter(results)
    per_segment = Counter(index for index, _start, _end in chunks)
    index = {s.base_offset: i for i, s in enumerate(plan.segments)}
    for seg in segments:
        yield seg, (_keys(next(it)) for _ in range(per_segment[index[seg.base_offset]]))


# --- pass 2 -------------------------------------------------------------------------------------


@frozen
class ChunkOutput:
    """What a worker sends back for one chunk of pass 2."""

    path: str  # the output batches, back to back (spill.SpillWriter), or "" (threads: streamed before it)
    sizes: array[int]  # per output batch: its size, last offset and max timestamp
    last_offsets: array[int]
    max_timestamps: array[int]
    bytes_in: int  # source bytes the chunk covers (progress)
    stats: CleanStats
    retained: tuple[AbortedTxn, ...]  # index entries of the ABORT markers kept, in order


class _Collector:
    def __init__(self, directory: Path) -> None:
        self.out = SpillWriter(directory)
        self.sizes, self.last_offsets, self.max_timestamps = array("q"), array("q"), array("q")

    def append_run(self, data: bytes | memoryview, sizes: Sequence[int], last_offsets: Sequence[int],
                   max_timestamps: Sequence[int]) -> None:
        self.out.write(data)
        self.sizes.extend(sizes)
        self.last_offsets.extend(last_offsets)
        self.max_timestamps.extend(max_timestamps)


def write_groups(
    plan: CleanPlan,
    oracle: RetentionOracle,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    jobs: int = 1,
) -> list[GroupOutput]:
    """Pass 2: every group of the plan into its ``.cleaned`` segment, serial or with workers.

    Returns:
        One output per group, in order.

    Raises:
        CorruptDataError, KcompactError: as ``steps.write_group``; every ``.cleaned`` file written
            so far is removed first.
    """
    outputs: list[GroupOutput] = []
    try:
        if jobs <= 1 or not plan.groups:
            for index in range(len(plan.groups)):
                outputs.append(write_group(plan, index, oracle, dry_run=dry_run, progress=progress))
            return outputs
        segments = [plan.segment(base) for group in plan.groups for base in group]
        chunks = chunks_of(plan, segments, jobs)
        jobs = min(jobs, len(chunks))
        with _pool(jobs, plan, oracle) as pool:
            _assemble_groups(plan, chunks, _in_order(pool, _filter_chunk, chunks, jobs), outputs, dry_run, progress)
        return outputs
    except BaseException:
        remove_outputs(plan, outputs)
        raise


def _filter_chunk(chunk: Chunk) -> ChunkOutput:
    plan, oracle, directory = _state()
    if oracle is None:
        raise RuntimeError("kcompact.cleaner.workers.parallel: pass 2 without an oracle")
    index, start, end = chunk
    seg = plan.segments[index]
    stats = CleanStats()
    ctx = FilterContext.at(plan, seg, oracle, stats)
    out = _Collector(directory)
    for run in iter_segment_output(plan, seg, ctx, start, end):
        out.append_run(*run)
    stop = seg.size_in_bytes if end is None else min(end, seg.size_in_bytes)
    return ChunkOutput(out.out.close(), out.sizes, out.last_offsets, out.max_timestamps,
                       max(0, stop - start), stats, tuple(ctx.txn.take_retained_aborted()))


def _assemble(
    plan: CleanPlan,
    index: int,
    parts: Iterable[OutputRun | ChunkOutput],
    dry_run: bool,
    progress: Progress | None,
) -> GroupOutput:
    """Append a group's chunk outputs (and the runs a thread streamed ahead of its chunk's), in order, to
    its writer and finish it."""
    writer = CleanedSegmentWriter(Path(plan.partition_dir), plan.groups[index][0],
                                  plan.config.index_interval_bytes, dry_run=dry_run)
    stats = CleanStats()
    retained: list[AbortedTxn] = []
    try:
        for part in parts:
            if isinstance(part, OutputRun):
                writer.append_run(*part)
                continue
            if part.path:
                with read_spilled(part.path) as view:
                    writer.append_run(view, part.sizes, part.last_offsets, part.max_timestamps)
            stats.add(part.stats)
            retained += part.retained
            if progress is not None:
                progress(part.bytes_in)
        writer.aborted = retained
        return finish_group(plan, index, writer, stats)
    except BaseException:
        writer.abort()
        raise


# --- threads: the same chunks, results in memory ----------------------------------------------------


_thread_pool: ThreadPoolExecutor | None = None
_thread_pool_lock = threading.Lock()


def _threads() -> ThreadPoolExecutor:
    """The process's :data:`THREADS` threads, made once (the kernels keep a zstd context per thread:
    ``_windows_zstd.c``, so threads made per round would each leave theirs behind), on the main thread's
    malloc arena (:func:`_share_malloc_arena`)."""
    global _thread_pool
    with _thread_pool_lock:
        if _thread_pool is None:
            _share_malloc_arena()
            _thread_pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="kcompact-round")
        return _thread_pool


_M_ARENA_MAX = -8  # <malloc.h>: mallopt's parameter, the most malloc arenas glibc makes


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """This process's C library where it is glibc's (``mallopt``, ``malloc_trim``, ``malloc`` and ``free``), else
    None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    libc.mallopt.restype = libc.malloc_trim.restype = ctypes.c_int
    libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = [ctypes.c_void_p], None
    return libc


def _share_malloc_arena() -> None:
    """Before the threads' first allocation: glibc makes no malloc arena beyond the main thread's (``mallopt
    M_ARENA_MAX``, as ``MALLOC_ARENA_MAX=1`` would), so the threads allocate where this thread frees. With an
    arena each, what a thread's arena freed (pass 1's slices, which the map holds until its flush; pass 2's
    windows) stayed resident there and served no other thread: on the bench shapes the default's peak RSS
    was 116-119 MiB and is 95-105 (plain; zstd 81-83 and 77-81), wall and CPU the same. glibc fixes its
    arena limit when a thread first needs an arena (``arena_get2``), so this holds for the process's life,
    as the threads do; a thread's allocations still take its own cache first (tcache). Elsewhere (not
    glibc) nothing changes."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_ARENA_MAX, 1)


_WINDOW_BLOCK_BYTES = RUN_BYTES + (64 << 10)  # a window's largest block (RUN_BYTES and a bytes object's header)


@functools.cache
def _windows_from_the_heap() -> None:
    """Once a process, before its first round's passes: glibc serves a block of a pass 2 window's size
    (:data:`~kcompact.cleaner.round.record_filter.RUN_BYTES`: the decompressed records of a window's batches, its
    output) from its heap, where the window before freed one, not from a fresh memory map of zeroed pages.

    glibc maps every block above its threshold (128 KiB at start) and raises that threshold to the size of a
    mapped block once one is freed (``malloc.c``'s dynamic threshold). A window's block is freed after it was
    trimmed to the bytes the window used, so the threshold stayed below the next window's request and each
    window's pages were faulted in and zeroed anew: 250,000 page faults and about 0.8 s of system CPU in a
    ``--jobs 1`` clean of the 240 small partitions of ``bench.py codecs240`` (8.4 s of CPU), against 35,000 once
    one block of that size has been freed. Freeing one here is what a large partition's first big window
    does of itself; the heap then keeps up to twice the block free at its top (the trim threshold follows).
    Peak RSS measured the same within noise on the bench's large plain and zstd partitions, 1-2 MiB higher on
    codecs240. Elsewhere (not glibc) nothing happens. A forked worker inherits it."""
    libc = _glibc()
    if libc is not None:
        libc.free(libc.malloc(_WINDOW_BLOCK_BYTES))


def _release_free_heap() -> None:
    """Between the passes: give the heap's free pages back (glibc's ``malloc_trim``). The map's build
    leaves its temporaries (the pending slices, the flush's columns: ~60 MiB on the plain bench) free in the
    heap, which glibc keeps when its trim threshold has followed a large block it unmapped; pass 2 on three
    threads then allocates around them and grows the heap past pass 1's peak (plain bench: 99-106 MiB, and
    96-101 with this; one call of 1-5 ms). Elsewhere (not glibc) nothing happens."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _forget_threads() -> None:
    """In a forked child (``fork_pool``'s workers for a log dir's partitions): the parent's threads are not
    there, and an executor that counts them would never start its own; the child makes its own."""
    global _thread_pool, _thread_pool_lock
    _thread_pool, _thread_pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)


def _thread_chunks(
    plan: CleanPlan, segments: list[SegmentPlan], known: dict[int, list[int]] | None = None
) -> list[Chunk]:
    """``segments`` cut into ranges of about :data:`THREAD_CHUNK_BYTES` that start at a batch each
    (``chunks.batch_cuts``: one walk of each segment's framing here, none per range; ``known``: the cuts of
    a pass before, by segment index, read and kept)."""
    total = sum(s.size_in_bytes for s in segments)
    rough = cut_chunks(plan, segments, -(-total // THREAD_CHUNK_BYTES), THREAD_CHUNK_BYTES // 2)
    per_segment: dict[int, list[int]] = {}
    for index, start, _end in rough:
        per_segment.setdefault(index, []).append(start)
    chunks: list[Chunk] = []
    for index, starts in per_segment.items():
        cuts = [0]
        if known is not None and index in known:
            cuts = known[index]
        elif len(starts) > 1:
            with LogFile(plan.segments[index].log_path) as log:
                cuts += [cut for cut in batch_cuts(log.buffer, starts[1:], log.forget_before) if cut > 0]
        if known is not None:
            known[index] = cuts
        ends: list[int | None] = [*cuts[1:], None]
        chunks += [(index, start, end) for start, end in zip(cuts, ends, strict=True)]
    return chunks


def _in_threads(task: Callable[[Chunk], T], chunks: list[Chunk]) -> Generator[T, None, None]:
    """``task(chunk)`` for every chunk on the threads, the results in order; :data:`THREADS` chunks in
    work while this thread takes the one before, so that what waits here stays bounded. On an error
    (the task's, raised at its chunk, or the caller's) the chunks not started are dropped and those in
    work waited for: none reads a segment after the round ends."""
    executor = _threads()
    todo = iter(chunks)
    queue: deque[Future[T]] = deque(executor.submit(task, c) for c in itertools.islice(todo, THREADS))
    try:
        while queue:
            result = queue.popleft().result()
            chunk = next(todo, None)
            if chunk is not None:
                queue.append(executor.submit(task, chunk))
            yield result
    finally:
        for future in queue:
            future.cancel()
        wait(queue)


@frozen
class _Failed:
    """What a streamed chunk's task raised, put where its output goes (the consumer raises it there)."""

    error: BaseException


def _stream_chunk(task: Callable[[Chunk, Callable[[OutputRun], None]], ChunkOutput], chunk: Chunk,
                  sink: SimpleQueue[OutputRun | ChunkOutput | _Failed]) -> None:
    """Run ``task`` on a thread, its output runs put into ``sink`` as they come, then its ``ChunkOutput``
    (or what it raised): the consumer waits on ``sink`` only, so it must always get a last item."""
    try:
        done = task(chunk, sink.put)
    except BaseException as err:
        sink.put(_Failed(err))
        raise
    sink.put(done)


def _streamed_in_threads(
    task: Callable[[Chunk, Callable[[OutputRun], None]], ChunkOutput], chunks: list[Chunk],
) -> Generator[OutputRun | ChunkOutput, None, None]:
    """Pass 2's :func:`_in_threads`: ``task(chunk, put)`` for every chunk on the threads, :data:`THREADS`
    in work; each output run of the first chunk in order is yielded as soon as its thread puts it (then that
    chunk's ``ChunkOutput``, its last item), the next chunk's runs wait in its queue meanwhile. So the output
    waiting here is about one chunk's, not the :data:`THREADS` finished chunks' plus the one being appended
    that :func:`_in_threads` holds. On an error the chunks not started are dropped and those in work waited
    for."""
    executor = _threads()
    todo = iter(chunks)

    def start(chunk: Chunk) -> tuple[Future[None], SimpleQueue[OutputRun | ChunkOutput | _Failed]]:
        sink: SimpleQueue[OutputRun | ChunkOutput | _Failed] = SimpleQueue()
        return executor.submit(_stream_chunk, task, chunk, sink), sink

    work = deque(start(c) for c in itertools.islice(todo, THREADS))
    try:
        while work:
            sink = work[0][1]
            while not isinstance(item := sink.get(), ChunkOutput):
                if isinstance(item, _Failed):
                    raise item.error
                yield item
            work.popleft()
            chunk = next(todo, None)
            if chunk is not None:
                work.append(start(chunk))
            yield item
    finally:
        for future, _sink in work:
            future.cancel()
        wait([future for future, _sink in work])


def _threads_offset_map(
    plan: CleanPlan, dedupe_buffer_size: int | None, stats: CleanStats, progress: Progress | None,
    cuts: dict[int, list[int]],
) -> OffsetMap:
    """Pass 1 with the threads reading the chunks' keys (:func:`build_offset_map`'s map)."""
    dirty = [plan.segment(base) for base in plan.dirty_segments]
    if not dirty:
        return serial_offset_map(plan, dedupe_buffer_size, stats, progress)
    offset_map = new_offset_map(plan, dedupe_buffer_size)
    offset_map.run_parts = _parts_on_threads  # its flushes sort the two halves of the keys at once
    chunks = _thread_chunks(plan, dirty, cuts)
    results = _in_threads(partial(_keys_in_memory, plan), chunks)
    try:
        sources = _per_segment_lists(plan, dirty, chunks, results)
        stats.records_scanned += fill_offset_map(plan, offset_map, sources, progress)
    finally:
        results.close()  # a map that filled early stops here: the chunks in work are waited for
    stats.map_entries = offset_map.size
    stats.map_memory_bytes = offset_map.memory_bytes()
    return offset_map


def _parts_on_threads(tasks: list[Callable[[], T]]) -> list[T]:
    """Run the first task here and the others on the threads, at once (a flush's parts: ``OffsetMap.run_parts``;
    a thread still reading a chunk's keys takes its part when it is done); their results in order."""
    executor = _threads()
    others = [executor.submit(task) for task in tasks[1:]]
    try:
        first = tasks[0]()
    finally:
        wait(others)  # none outlives the flush that holds its puts
    return [first, *(future.result() for future in others)]


def _keys_in_memory(plan: CleanPlan, chunk: Chunk) -> list[SegmentKeys]:
    index, start, end = chunk
    return list(iter_dirty_keys(plan, plan.segments[index], start, end, at_batch=True))


def _per_segment_lists(
    plan: CleanPlan, segments: list[SegmentPlan], chunks: list[Chunk], results: Iterator[list[SegmentKeys]],
) -> Iterator[tuple[SegmentPlan, Iterator[SegmentKeys]]]:
    """:func:`_per_segment` for chunk results that are lists of slices."""
    per_segment = Counter(index for index, _start, _end in chunks)
    index = {s.base_offset: i for i, s in enumerate(plan.segments)}
    for seg in segments:
        count = per_segment[index[seg.base_offset]]
        yield seg, (keys for _ in range(count) for keys in next(results))


def _filter_in_memory(
    plan: CleanPlan, oracle: RetentionOracle, chunk: Chunk, put: Callable[[OutputRun], None]
) -> ChunkOutput:
    """:func:`_filter_chunk` on a thread: each output run handed to ``put`` as it comes (the windows'
    output is bytes of its own; a view of the segment's map, from the per-batch walk, is copied before the
    map closes); returns the chunk's counters and retained markers, its runs already put."""
    index, start, end = chunk
    seg = plan.segments[index]
    stats = CleanStats()
    ctx = FilterContext.at(plan, seg, oracle, stats)
    ctx.window_bytes = THREAD_WINDOW_BYTES
    for run in iter_segment_output(plan, seg, ctx, start, end, at_batch=True):
        put(run if isinstance(run.data, bytes) else run._replace(data=bytes(run.data)))
    stop = seg.size_in_bytes if end is None else min(end, seg.size_in_bytes)
    return ChunkOutput("", array("q"), array("q"), array("q"), max(0, stop - start), stats,
                       tuple(ctx.txn.take_retained_aborted()))


def _assemble_groups(
    plan: CleanPlan, chunks: list[Chunk], results: Iterator[OutputRun | ChunkOutput], outputs: list[GroupOutput],
    dry_run: bool, progress: Progress | None,
) -> None:
    """Every group's chunk outputs, in order, into its writer; each finished group appended to ``outputs``.
    ``results``: per chunk, the output runs streamed ahead of it (threads), then its ``ChunkOutput``."""
    per_segment = Counter(index for index, _start, _end in chunks)
    where = {s.base_offset: i for i, s in enumerate(plan.segments)}
    for index, group in enumerate(plan.groups):
        count = sum(per_segment[where[base]] for base in group)
        outputs.append(_assemble(plan, index, _chunks_taken(results, count), dry_run, progress))


def _chunks_taken(results: Iterator[OutputRun | ChunkOutput], count: int) -> Iterator[OutputRun | ChunkOutput]:
    """The items of the next ``count`` chunks of ``results`` (each chunk's ``ChunkOutput`` is its last)."""
    for _ in range(count):
        while not isinstance(item := next(results), ChunkOutput):
            yield item
        yield item
