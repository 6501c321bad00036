"""Cleaning with worker processes gives the same bytes as cleaning in one process.

Every scenario is built twice, cleaned once with ``jobs=1`` and once with ``jobs=2``, and every file of
the two log dirs (segments, indexes, ``.txnindex``, checkpoints) is compared byte for byte, together with
the reports' counters. Chunks are forced small (``CHUNK_MIN_BYTES``) so that workers start inside
segments — in the middle of open transactions, after retained ABORT markers — and a bounded map fills
in a chunk other than the first.
"""

from __future__ import annotations

import itertools
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kcompact.cleaner.round.options import CleanOptions, CleanResult
from kcompact.cleaner.workers import parallel
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig, defaults_with_overrides
from kcompact.errors import ConfigError, CorruptDataError, KcompactError
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.record import Record
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import iter_partition_dirs
from tests.builders import BASE_TS, PartitionBuilder
from tests.conftest import copy_tree_writable, real_fixture
from tests.encoders import encode_legacy_message, encode_legacy_wrapper
from tests.segment_writer import write_segment

if TYPE_CHECKING:
    from kcompact.segment.log_file import AnyBatch

NOW = BASE_TS + 10_000_000
DAY = 86_400_000
NEVER_EXPIRE = {"producer.id.expiration.ms": str(2**31 - 1)}


def config(overrides: dict[str, str] | None = None) -> TopicConfig:
    cfg = defaults_with_overrides({"cleanup.policy": "compact", **NEVER_EXPIRE, **(overrides or {})})
    return cfg


def key(i: int) -> bytes:
    return b"key-%04d" % i


def transactions(log_dir: Path) -> Path:
    """Transactions spanning segments (committed and aborted), idempotent producers, tombstones,
    keyless records, a compressed batch and an active segment with data."""
    return transactions_builder().write(log_dir)


def transactions_builder() -> PartitionBuilder:
    """The appends of :func:`transactions` (aborted: producers 2 and 3)."""
    b = PartitionBuilder("txn")
    b.batch([(key(i), b"v0") for i in range(20)])
    b.batch([(key(i), b"t1") for i in range(5)], producer_id=1, transactional=True)
    b.batch([(key(i), b"idem") for i in range(5, 10)], producer_id=7)
    b.roll()
    b.batch([(key(i), b"t1b") for i in range(3)], producer_id=1, transactional=True)
    b.batch([(key(i), b"t2") for i in range(10, 15)], producer_id=2, transactional=True)
    b.marker(2, commit=False)
    b.batch([(key(i), None) for i in range(15, 18)])
    b.roll()
    b.marker(1, commit=True)
    b.batch([(key(i), b"t3") for i in range(4)], producer_id=3, transactional=True)
    b.batch([(key(i), b"v1") for i in range(18, 20)])
    b.roll()
    b.batch([(key(i), b"t3b") for i in range(4, 8)], producer_id=3, transactional=True)
    b.marker(3, commit=False)
    b.batch([(None, b"keyless"), (key(3), b"after")])
    b.batch([(key(i), b"late") for i in range(0, 20, 2)], compression=1)
    b.batch([(key(i), b"t4") for i in range(2)], producer_id=4, transactional=True)
    b.marker(4, commit=True)
    b.roll()
    b.batch([(key(1), b"active")])
    return b


def many_keys(log_dir: Path) -> Path:
    """Four segments of random keys, several codecs: what a bounded map fills up on."""
    rng = random.Random(7)
    b = PartitionBuilder("keys")
    for segment in range(4):
        for n in range(12):
            kvs = [(key(rng.randrange(300)), None if rng.random() < 0.05 else b"v%d" % n)
                   for _ in range(15)]
            b.batch(kvs, compression=(segment + n) % 5)
        b.roll()
    return b.write(log_dir)


def legacy_then_v2(log_dir: Path) -> Path:
    """A legacy (v0/v1, plain and compressed) segment followed by v2 segments."""
    part = log_dir / "legacy-0"
    entries = [
        encode_legacy_message(offset=0, magic=0, key=b"k0", value=b"a"),
        encode_legacy_message(offset=1, magic=1, key=b"k1", value=None, timestamp=BASE_TS + 1),
        encode_legacy_wrapper([Record(2, BASE_TS + 2, b"k2", b"b"), Record(3, BASE_TS + 3, b"k0", b"c")],
                              magic=1, compression=1),
        encode_legacy_message(offset=4, magic=1, key=None, value=b"nokey", timestamp=BASE_TS + 4),
    ]
    write_segment(part, 0, entries)
    write_segment(part, 5, [encode_batch([Record(5 + i, BASE_TS + 5 + i, b"k%d" % (i % 3), b"x")
                                          for i in range(6)], base_offset=5)])
    write_segment(part, 11, [encode_batch([Record(11, BASE_TS + 11, b"k9", b"y")], base_offset=11)])
    write_segment(part, 12, [])
    write_offset_checkpoint(log_dir / "replication-offset-checkpoint", {("legacy", 0): 12})
    return part


def tree(log_dir: Path) -> dict[str, bytes]:
    """Every file under ``log_dir`` (but lock files), by relative path."""
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in sorted(log_dir.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}


def counters(result: CleanResult) -> dict[str, object]:
    stats = result.stats.as_dict()
    stats.pop("elapsed_s")
    return {**stats, "end_offset": result.end_offset, "skipped": result.skipped_reason}


def both_ways(
    tmp_path: Path,
    build: Callable[[Path], Path],
    rounds: list[tuple[TopicConfig, CleanOptions]],
) -> None:
    """Build, clean round after round with 1 and with 2 processes; assert identical trees each round,
    and that the second clean really ran chunks in worker processes (else the comparison proves nothing)."""
    parts = {jobs: build(tmp_path / f"jobs{jobs}" / "logdir") for jobs in (1, 2)}
    pooled = {1: 0, 2: 0}
    for cfg, options in rounds:
        results = {}
        for jobs, part in parts.items():
            POOLED_TASKS.clear()
            results[jobs] = clean_partition(part, cfg, replace(options, jobs=jobs))
            pooled[jobs] += len(POOLED_TASKS)
        assert counters(results[1]) == counters(results[2])
        serial, forked = tree(parts[1].parent), tree(parts[2].parent)
        assert serial.keys() == forked.keys()
        assert [name for name in serial if serial[name] != forked[name]] == []
    assert pooled[1] == 0
    assert pooled[2] > 0, "jobs=2 never ran a chunk in a worker process"


POOLED_TASKS: list[str] = []  # the chunk tasks whose results came back from a worker pool


@pytest.fixture(autouse=True)
def count_pooled_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Record every result a worker process returns (``_in_order`` runs in this process)."""
    in_order = parallel._in_order

    def counting(pool: Any, task: Callable[[Any], Any], chunks: list[Any], jobs: int) -> Iterator[Any]:
        for result in in_order(pool, task, chunks, jobs):
            POOLED_TASKS.append(task.__name__)
            yield result

    monkeypatch.setattr(parallel, "_in_order", counting)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut segments into many chunks, so workers start mid-segment."""
    monkeypatch.setattr(parallel, "CHUNK_MIN_BYTES", 200)


@pytest.fixture(autouse=True)
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers whatever the machine: ``jobs`` is capped at the usable cores."""
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 4)


@pytest.fixture(autouse=True)
def spool_left_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Workers' result files go to the temporary directory; none may stay there, even on failure."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    yield
    assert list(spool.iterdir()) == []


def test_transactions_spanning_segments_are_cleaned_identically(tmp_path: Path) -> None:
    both_ways(tmp_path, transactions, [
        (config(), CleanOptions(now_ms=NOW)),
        # two days later: horizons have passed, tombstones and markers go
        (config(), CleanOptions(now_ms=NOW + 2 * DAY, from_start=True)),
    ])


def test_several_groups_are_cleaned_identically(tmp_path: Path) -> None:
    small = replace(config(), segment_bytes=2000)  # below Kafka's minimum: tests only
    both_ways(tmp_path, transactions, [(small, CleanOptions(now_ms=NOW))])
    both_ways(tmp_path / "keys", many_keys, [(small, CleanOptions(now_ms=NOW))])


def test_a_bounded_map_fills_at_the_same_record(tmp_path: Path) -> None:
    bounded = CleanOptions(now_ms=NOW, dedupe_buffer_size=24 * 100)  # 90 keys of 300
    both_ways(tmp_path, many_keys, [(config(), bounded)] * 4)


def test_legacy_entries_are_cleaned_identically(tmp_path: Path) -> None:
    both_ways(tmp_path, legacy_then_v2, [(config(), CleanOptions(now_ms=NOW))])


def test_a_dry_run_reports_the_same(tmp_path: Path) -> None:
    both_ways(tmp_path, transactions, [(config(), CleanOptions(now_ms=NOW, dry_run=True))])


@pytest.mark.parametrize("name", [
    "bitnami2024-rolled-logdir", "confluent512-lz4-logdir", "kraft37-cleaned-logdir",
    "kraft37-consumer-offsets",
])
def test_broker_written_partitions_are_cleaned_identically(tmp_path: Path, name: str) -> None:
    source = real_fixture(name)
    dirs = {jobs: copy_tree_writable(source, tmp_path / f"jobs{jobs}" / name) for jobs in (1, 2)}
    cfg = config()
    for jobs, log_dir in dirs.items():
        for part in iter_partition_dirs(log_dir):
            if part.name.startswith("__cluster_metadata"):
                continue
            clean_partition(part, cfg, CleanOptions(now_ms=NOW, roll=True, jobs=jobs))
    serial, forked = tree(dirs[1]), tree(dirs[2])
    assert serial.keys() == forked.keys()
    assert [n for n in serial if serial[n] != forked[n]] == []


@pytest.mark.parametrize(("build", "segment", "damage"), [
    (transactions, 2, "records"),  # a segment with transactions: workers replay its headers
    (many_keys, 1, "records"),
    (many_keys, 1, "size"),  # framing broken: a later chunk cannot skip to its start by sizes
])
def test_corrupt_data_fails_in_a_worker_as_in_one_process(
    tmp_path: Path, build: Callable[[Path], Path], segment: int, damage: str
) -> None:
    errors = {}
    for jobs in (1, 2):
        part = build(tmp_path / f"jobs{jobs}" / "logdir")
        log = sorted(part.glob("*.log"))[segment]
        data = bytearray(log.read_bytes())
        last = 0  # where the segment's last batch starts (plain data in both builds)
        while last + 12 + int.from_bytes(data[last + 8 : last + 12], "big") < len(data):
            last += 12 + int.from_bytes(data[last + 8 : last + 12], "big")
        if damage == "records":  # its records_count field: more records than its bytes can hold
            data[last + 57 : last + 61] = (2**31 - 1).to_bytes(4, "big")
        else:
            data[last + 8 : last + 12] = (len(data)).to_bytes(4, "big")  # runs past the end
        log.write_bytes(bytes(data))
        before = tree(part.parent)
        with pytest.raises(CorruptDataError) as caught:
            clean_partition(part, config(), CleanOptions(now_ms=NOW, jobs=jobs))
        errors[jobs] = (type(caught.value), str(caught.value).replace(f"jobs{jobs}", "jobsN"))
        assert tree(part.parent) == before  # nothing changed, no .cleaned left
    assert errors[1] == errors[2]


def test_jobs_default_to_one_for_a_small_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kcompact.cleaner.round.steps import plan_clean

    plan = plan_clean(transactions(tmp_path / "logdir"), config(), CleanOptions(now_ms=NOW))
    assert plan is not None
    assert parallel.resolve_jobs(None, plan) == 1
    assert parallel.resolve_jobs(3, plan) == 3
    monkeypatch.setattr(parallel, "AUTO_PARALLEL_BYTES", 100)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.7, 0.0, 0.0))
    assert parallel.resolve_jobs(None, plan) == 2
    monkeypatch.setattr(os, "getloadavg", lambda: (3.2, 0.0, 0.0))  # under one spare core
    assert parallel.resolve_jobs(None, plan) == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 0.0, 0.0))
    assert parallel.resolve_jobs(None, plan) == 1
    assert parallel.resolve_jobs(2, plan) == 2  # an explicit number is taken as given (within the cores)
    monkeypatch.setattr(parallel, "fork_available", lambda: False)
    assert parallel.resolve_jobs(2, plan) == 1
    with pytest.raises(ConfigError, match="jobs; expected at least 1, found 0"):
        parallel.resolve_jobs(0, plan)


def test_jobs_are_capped_at_the_usable_cores_and_the_segment_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kcompact.cleaner.round.steps import plan_clean

    plan = plan_clean(transactions(tmp_path / "logdir"), config(), CleanOptions(now_ms=NOW))
    assert plan is not None
    written = [plan.segment(base) for group in plan.groups for base in group]
    assert parallel.resolve_jobs(100_000, plan) == 4  # the cores (many 200-byte ranges)
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 1)
    assert parallel.resolve_jobs(100_000, plan) == 1
    monkeypatch.setattr(parallel, "usable_cpus", lambda: 64)
    monkeypatch.setattr(parallel, "CHUNK_MIN_BYTES", 1 << 30)  # every segment one range
    assert 1 < len(written) < 64
    assert parallel.resolve_jobs(100_000, plan) == len(written)


def test_a_huge_jobs_starts_no_more_processes_than_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``jobs=100000`` once started 100000 processes: now a pool of the cores at most, same bytes."""
    sizes: list[int] = []
    original = parallel._pool

    @contextmanager
    def guarded(jobs: int, plan: object, oracle: object) -> Iterator[object]:
        sizes.append(jobs)
        if jobs > 2:  # refuse before forking, so the unfixed code fails here instead of exhausting memory
            raise AssertionError(f"a pool of {jobs} processes")
        with original(jobs, plan, oracle) as pool:  # type: ignore[arg-type]
            yield pool

    monkeypatch.setattr(parallel, "usable_cpus", lambda: 2)
    monkeypatch.setattr(parallel, "_pool", guarded)
    parts = {jobs: transactions(tmp_path / f"jobs{jobs}" / "logdir") for jobs in (1, 100_000)}
    results = {jobs: clean_partition(part, config(), CleanOptions(now_ms=NOW, jobs=jobs))
               for jobs, part in parts.items()}
    assert sizes == [2, 2]  # pass 1 and pass 2
    assert (results[1].workers, results[100_000].workers) == (1, 2)
    assert counters(results[1]) == counters(results[100_000])
    assert tree(parts[1].parent) == tree(parts[100_000].parent)


def test_chunks_cover_every_byte_once(tmp_path: Path) -> None:
    from kcompact.cleaner.round.steps import plan_clean

    plan = plan_clean(many_keys(tmp_path / "logdir"), config(), CleanOptions(now_ms=NOW))
    assert plan is not None
    segments = list(plan.segments)
    chunks = parallel.chunks_of(plan, segments, 2)
    assert len(chunks) > len(segments)
    for index in range(len(segments)):
        own = [(start, end) for i, start, end in chunks if i == index]
        assert own[0][0] == 0 and own[-1][1] is None
        assert all(a[1] == b[0] for a, b in itertools.pairwise(own))


def test_a_worker_starting_anywhere_has_the_serial_transaction_state(tmp_path: Path) -> None:
    from kcompact.cleaner.round.chunks import batches_from
    from kcompact.cleaner.round.steps import plan_clean
    from kcompact.log.rules.transactions import CleanedTransactionMetadata
    from kcompact.log.state.log_state import read_control
    from kcompact.segment.log_file import LogFile
    from kcompact.segment.txn_index import AbortedTxn

    plan = plan_clean(transactions(tmp_path / "logdir"), config(), CleanOptions(now_ms=NOW))
    assert plan is not None and sum(s.txn_batches > 0 for s in plan.segments) >= 3

    def read(txn: CleanedTransactionMetadata[AbortedTxn], batch: AnyBatch, path: Path) -> None:
        if batch.is_control:
            txn.on_control_batch_read(batch, read_control(batch, path)[0])
        else:
            txn.on_batch_read(batch)

    for seg in plan.segments:
        with LogFile(seg.log_path) as log:
            for start in range(1, seg.size_in_bytes + 1, 23):
                serial = CleanedTransactionMetadata.from_seed(seg.clean_seed)
                first = None
                for batch in log.iter_batches():
                    if batch.position >= start:
                        first = batch
                        break
                    read(serial, batch, log.path)
                worker = CleanedTransactionMetadata.from_seed(seg.clean_seed)
                found = next(batches_from(log, seg, start, worker), None)
                assert (found and found.position) == (first and first.position)
                if first is not None and found is not None:  # else the range holds no batch
                    read(serial, first, log.path)
                    read(worker, found, log.path)
                    assert worker.seed() == serial.seed(), (seg.base_offset, start)
                del first, found


def test_a_failing_round_leaves_no_worker_process(tmp_path: Path) -> None:
    """A round that fails in a worker raises there and ends every worker (a ``multiprocessing.Pool``
    once hung for ever in its own ``terminate``): none is left running, nothing is left behind."""
    import multiprocessing

    part = many_keys(tmp_path / "logdir")
    segment = sorted(part.glob("*.log"))[1]
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF  # the CRC of the segment's last batch fails in a worker
    segment.write_bytes(bytes(data))
    before = tree(part.parent)
    POOLED_TASKS.clear()
    with pytest.raises(KcompactError):
        clean_partition(part, config(), CleanOptions(now_ms=NOW, jobs=2))
    assert POOLED_TASKS  # the chunks before the bad one came from workers
    assert multiprocessing.active_children() == []
    assert tree(part.parent) == before
