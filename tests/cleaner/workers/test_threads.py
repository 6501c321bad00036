"""The default clean of one partition on two threads gives the bytes of ``--jobs 1``.

Every scenario is built twice and cleaned once with ``jobs=1`` and once with ``jobs=None`` (the default,
forced onto the threads whatever the machine's load), and every file of the two log dirs is compared byte
for byte with the reports' counters. Chunks are forced small, so that threads start inside segments, in
open transactions and compressed runs, and work on several at once; the test checks that chunks really
ran on the round's threads (else the comparison proves nothing) and that ``jobs=1`` started none.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from array import array
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from kcompact.cleaner.round import accel
from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.round.record_filter import OutputRun
from kcompact.cleaner.round.stats import CleanStats
from kcompact.cleaner.round.steps import plan_clean
from kcompact.cleaner.workers import parallel
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.cli.main import cli
from kcompact.errors import CorruptDataError
from kcompact.records.compression import compress, decompress, zstd_one_call
from kcompact.segment.partition import iter_partition_dirs
from tests.builders import PartitionBuilder
from tests.cleaner.workers.test_parallel import (
    NOW,
    config,
    counters,
    key,
    legacy_then_v2,
    many_keys,
    transactions,
    tree,
)
from tests.conftest import copy_tree_writable, real_fixture

CODECS = {"plain": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

THREADED: list[str] = []  # the name of the thread each chunk task ran on


@pytest.fixture(autouse=True)
def threads_whatever_the_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Threads for every round of ``jobs=None``, chunks of a few hundred bytes, tasks recorded."""
    monkeypatch.setattr(parallel, "AUTO_THREADS_BYTES", 0)
    monkeypatch.setattr(parallel, "_room_for_threads", lambda: True)
    monkeypatch.setattr(parallel, "THREAD_CHUNK_BYTES", 600)
    for name in ("_keys_in_memory", "_filter_in_memory"):
        task = getattr(parallel, name)

        def recorded(*args: Any, task: Callable[..., Any] = task) -> Any:
            THREADED.append(threading.current_thread().name)
            return task(*args)

        monkeypatch.setattr(parallel, name, recorded)
    THREADED.clear()
    yield
    THREADED.clear()


def codec_log(codec: int) -> Callable[[Path], Path]:
    """Four segments of random keys (tombstones, keyless records) in batches of ``codec``."""

    def build(log_dir: Path) -> Path:
        rng = random.Random(codec)
        b = PartitionBuilder(f"codec{codec}")
        for _segment in range(4):
            for n in range(10):
                kvs = [(None if rng.random() < 0.03 else key(rng.randrange(200)),
                        None if rng.random() < 0.05 else b"value-%d-%d" % (n, rng.randrange(10**6)))
                       for _ in range(20)]
                b.batch(kvs, compression=codec)
            b.roll()
        b.batch([(key(1), b"active")], compression=codec)
        return b.write(log_dir)

    return build


def both_ways(tmp_path: Path, build: Callable[[Path], Path], rounds: list[CleanOptions]) -> None:
    """Clean round after round with ``jobs=1`` and with the default; identical trees and counters each round,
    chunks on the round's threads with the default and none with ``jobs=1``."""
    parts = {jobs: build(tmp_path / f"jobs{jobs}" / "logdir") for jobs in (1, None)}
    for options in rounds:
        THREADED.clear()
        one = clean_partition(parts[1], config(), replace(options, jobs=1))
        assert THREADED == []
        default = clean_partition(parts[None], config(), replace(options, jobs=None))
        assert THREADED, "the default never ran a chunk on the round's threads"
        assert all(name.startswith("kcompact-round") for name in THREADED)
        assert counters(one) == counters(default)
        serial, threaded = tree(parts[1].parent), tree(parts[None].parent)
        assert serial.keys() == threaded.keys()
        assert [name for name in serial if serial[name] != threaded[name]] == []


@pytest.mark.parametrize("codec", list(CODECS))
def test_each_codec_is_cleaned_identically(tmp_path: Path, codec: str) -> None:
    both_ways(tmp_path, codec_log(CODECS[codec]), [
        CleanOptions(now_ms=NOW),
        CleanOptions(now_ms=NOW + 2 * 86_400_000, from_start=True),  # tombstones past their horizon go
    ])


def test_transactions_spanning_segments_are_cleaned_identically(tmp_path: Path) -> None:
    both_ways(tmp_path, transactions, [CleanOptions(now_ms=NOW),
                                       CleanOptions(now_ms=NOW + 2 * 86_400_000, from_start=True)])


def test_a_bounded_map_fills_at_the_same_record(tmp_path: Path) -> None:
    both_ways(tmp_path, many_keys, [CleanOptions(now_ms=NOW, dedupe_buffer_size=24 * 100)] * 4)


def test_legacy_entries_and_a_dry_run_are_the_same(tmp_path: Path) -> None:
    both_ways(tmp_path / "legacy", legacy_then_v2, [CleanOptions(now_ms=NOW)])
    both_ways(tmp_path / "dry", transactions, [CleanOptions(now_ms=NOW, dry_run=True)])


@pytest.mark.parametrize("name", ["bitnami2024-rolled-logdir", "confluent512-lz4-logdir", "kraft37-cleaned-logdir"])
def test_broker_written_partitions_are_cleaned_identically(tmp_path: Path, name: str) -> None:
    dirs = {jobs: copy_tree_writable(real_fixture(name), tmp_path / f"jobs{jobs}" / name) for jobs in (1, None)}
    for jobs, log_dir in dirs.items():
        for part in iter_partition_dirs(log_dir):
            if not part.name.startswith("__cluster_metadata"):
                clean_partition(part, config(), CleanOptions(now_ms=NOW, roll=True, jobs=jobs))
    serial, threaded = tree(dirs[1]), tree(dirs[None])
    assert serial.keys() == threaded.keys()
    assert [n for n in serial if serial[n] != threaded[n]] == []


@pytest.mark.parametrize(("codec", "damage"), [("zstd", "crc"), ("lz4", "crc"), ("plain", "records"),
                                               ("gzip", "records")])
def test_a_corrupt_batch_mid_segment_fails_as_with_one_thread(tmp_path: Path, codec: str, damage: str) -> None:
    """The batch in the middle of the second segment is damaged: a chunk on a thread meets it; the error
    is ``--jobs 1``'s, word for word, and the partition is left as it was."""
    errors = {}
    for jobs in (1, None):
        part = codec_log(CODECS[codec])(tmp_path / f"jobs{jobs}" / "logdir")
        log = sorted(part.glob("*.log"))[1]
        data = bytearray(log.read_bytes())
        at, starts = 0, []
        while at < len(data):
            starts.append(at)
            at += 12 + int.from_bytes(data[at + 8 : at + 12], "big")
        middle = starts[len(starts) // 2]
        if damage == "crc":
            data[middle + 17] ^= 0xFF
        else:  # its records_count: more records than its bytes can hold
            data[middle + 57 : middle + 61] = (2**31 - 1).to_bytes(4, "big")
        log.write_bytes(bytes(data))
        before = tree(part.parent)
        THREADED.clear()
        with pytest.raises(CorruptDataError) as caught:
            clean_partition(part, config(), CleanOptions(now_ms=NOW, jobs=jobs))
        if jobs is None:
            assert THREADED
        errors[jobs] = (type(caught.value), str(caught.value).replace(f"jobs{jobs}", "jobsN"))
        assert "\n" not in errors[jobs][1]
        assert tree(part.parent) == before  # nothing changed, no .cleaned left
    assert errors[1] == errors[None]


def test_jobs_1_and_a_small_or_busy_round_stay_on_one_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    part = transactions(tmp_path / "logdir")
    plan = plan_clean(part, config(), CleanOptions(now_ms=NOW))
    assert plan is not None
    assert parallel.choose_runner(plan, CleanOptions(jobs=1)) is None
    assert parallel.choose_runner(plan, CleanOptions()) is parallel.run_two_threads
    monkeypatch.setattr(parallel, "_room_for_threads", lambda: False)  # the machine is busy
    assert parallel.choose_runner(plan, CleanOptions()) is None
    monkeypatch.setattr(parallel, "_room_for_threads", lambda: True)
    monkeypatch.setattr(parallel, "AUTO_THREADS_BYTES", 1 << 30)  # a small round
    assert parallel.choose_runner(plan, CleanOptions()) is None
    assert parallel.choose_runner(plan, CleanOptions(jobs=2)) is not None  # worker processes, as asked
    result = clean_partition(part, config(), CleanOptions(now_ms=NOW, jobs=1))
    assert result.workers == 1 and THREADED == []


def test_the_kernels_on_two_threads_at_once_give_each_thread_its_own_result(tmp_path: Path) -> None:
    """The kernels run without the GIL (taking it for a Python codec) and keep a zstd context per thread:
    two threads scanning and emitting different segments (zstd, lz4, gzip) at once get what each gets alone."""
    buffers = [p.read_bytes() for codec in ("zstd", "lz4", "gzip")
               for p in sorted(codec_log(CODECS[codec])(tmp_path / codec).glob("*.log")) if p.stat().st_size]
    assert decompress(4, compress(4, b"records")) == b"records"  # zstandard loaded: the kernels' own zstd
    zstd = accel.zstd_codec(zstd_one_call())
    assert zstd is True
    none = np.zeros(0, dtype=np.int64)

    def windows(buf: bytes) -> list[object]:
        out: list[object] = []
        position = 0
        while position < len(buf):
            run = accel.scan_window_records(buf, position, len(buf), 4, 1 << 14, 1 << 20, none, -1,
                                            decompress, zstd)
            assert run is not None and run[0] > position
            kept = (np.frombuffer(run[8], dtype=np.uint8) == 0).astype(np.uint8)  # tombstones go: rebuilt batches
            emitted = accel.emit_window(buf, run[1], (run[2], run[3], run[6], run[7]), run[8], kept, -1,
                                        run[9], compress, zstd is True)
            keys = accel.scan_window_key_digests(buf, position, len(buf), 0, 1 << 20, 0, decompress, zstd)
            assert emitted is not None and keys is not None
            out += [run[:10], emitted, keys]
            position = run[0]
        return out

    alone = [windows(buf) for buf in buffers]
    with ThreadPoolExecutor(max_workers=3) as pool:
        for _ in range(3):
            assert list(pool.map(windows, buffers)) == alone


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_process_forked_after_a_threaded_round_runs_its_own(tmp_path: Path) -> None:
    """A log dir's worker processes are forked from a process that may have run a round on threads: the
    child's round must not wait for the parent's threads, which it does not have."""
    parts = {name: codec_log(CODECS["zstd"])(tmp_path / name / "logdir") for name in ("parent", "child")}
    clean_partition(parts["parent"], config(), CleanOptions(now_ms=NOW))
    assert THREADED
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its threaded round finished
        code = 1
        try:
            signal.alarm(20)
            clean_partition(parts["child"], config(), CleanOptions(now_ms=NOW))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert tree(parts["parent"].parent) == tree(parts["child"].parent)


def test_the_cli_says_a_threads_error_in_one_line_as_with_jobs_1(tmp_path: Path) -> None:
    """``kcompact clean`` (default ``--jobs auto``, on the threads) of a partition with a bad CRC in the
    middle of a zstd segment: exit 2, one line naming the file and position, --jobs 1's words, nothing changed."""
    runner = CliRunner(catch_exceptions=False, env={"COLUMNS": "80", "KCOMPACT_SERVER_PROPERTIES": None})
    said = {}
    for jobs in ("1", "auto"):
        part = codec_log(CODECS["zstd"])(tmp_path / f"jobs-{jobs}" / "logdir")
        log = sorted(part.glob("*.log"))[2]
        data = bytearray(log.read_bytes())
        at = 0
        while at < len(data) // 2:  # the first batch starting past the middle: its CRC no longer matches
            at += 12 + int.from_bytes(data[at + 8 : at + 12], "big")
        data[at + 17] ^= 0xFF
        log.write_bytes(bytes(data))
        before = tree(part.parent)
        THREADED.clear()
        result = runner.invoke(cli, ["clean", str(part), "--now-ms", str(NOW), "--config", "cleanup.policy=compact",
                                     "--jobs", jobs])
        assert result.exit_code == 2
        assert bool(THREADED) == (jobs == "auto")
        lines = [line for line in result.stderr.splitlines() if not line.startswith("kcompact: warning: ")]
        assert len(lines) == 1 and lines[0].startswith(f"kcompact: error: {log} at position ")
        said[jobs] = lines[0].replace(f"jobs-{jobs}", "jobs-N")
        assert tree(part.parent) == before
    assert said["1"] == said["auto"]


@pytest.mark.parametrize(("cpus", "load", "room"), [
    (2, 0.0, True), (2, 1.0, True), (2, 1.5, True),  # this process's own run, and half a core of others'
    (2, 1.6, False), (2, 2.5, False), (1, 0.0, False), (8, 6.0, True), (8, 8.0, False),
])
def test_threads_need_a_core_and_a_half_left_by_the_load(
    monkeypatch: pytest.MonkeyPatch, cpus: int, load: float, room: bool
) -> None:
    monkeypatch.undo()  # the real _room_for_threads, not the fixture's
    monkeypatch.setattr(parallel, "usable_cpus", lambda: cpus)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert parallel._room_for_threads() is room


def test_the_first_chunks_output_is_taken_while_its_thread_still_works() -> None:
    """Pass 2 on the threads hands on the first chunk's output runs as its thread makes them (what waits in
    memory is about one chunk's output): a task that goes on only once its first run was taken finishes,
    and the runs come in order, then the chunk's counters; a task's error comes after the runs it made."""
    taken = threading.Event()
    runs = [OutputRun(b"first", [5], [0], [1]), OutputRun(b"second", [6], [1], [2])]
    done = parallel.ChunkOutput("", array("q"), array("q"), array("q"), 11, CleanStats(), ())

    def task(chunk: Any, put: Callable[[OutputRun], None]) -> parallel.ChunkOutput:
        put(runs[0])
        if not taken.wait(10):  # with the chunk's output handed on whole, never
            raise TimeoutError("the first run was not taken while its chunk was in work")
        put(runs[1])
        return done

    items = parallel._streamed_in_threads(task, [(0, 0, None)])
    first = next(items)
    taken.set()
    assert [first, *items] == [*runs, done]

    def failing(chunk: Any, put: Callable[[OutputRun], None]) -> parallel.ChunkOutput:
        put(runs[0])
        raise CorruptDataError("segment.log at position 7: bad", path="segment.log", position=7)

    items = parallel._streamed_in_threads(failing, [(0, 0, None), (0, 7, None)])
    assert next(items) == runs[0]
    with pytest.raises(CorruptDataError, match="position 7"):
        next(items)
