"""End-to-end cleaning of generated partitions, checked record by record against a plain model of the rules."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import defaults_with_overrides
from kcompact.records.batch import iter_batches
from kcompact.segment.checkpoint import read_offset_checkpoint
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS, PartitionBuilder, read_all_records

NOW = BASE_TS + 10_000_000
DAY = 86_400_000


def compact_config(**extra: str):  # type: ignore[no-untyped-def]
    config = defaults_with_overrides({"cleanup.policy": "compact", **extra})
    return config


def tree_digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir()) if p.is_file()
    }


def model_after_clean(records, first_dirty: int, end: int):  # type: ignore[no-untyped-def]
    """The latest record of every key in the cleaned range; keyless records go; later data untouched."""
    latest: dict[bytes, int] = {}
    for offset, key, _value in records:
        if key is not None and first_dirty <= offset < end:
            latest[key] = offset
    out = []
    for offset, key, value in records:
        if offset >= end:
            out.append((offset, key, value))
        elif key is None:
            continue
        elif offset >= latest.get(key, -1):
            out.append((offset, key, value))
    return out


def build_basic(tmp_path: Path) -> Path:
    b = PartitionBuilder()
    for seg in range(3):
        for i in range(20):
            b.batch([(f"k{(seg * 7 + i * 3 + j) % 25}".encode(), f"v{seg}-{i}-{j}".encode()) for j in range(5)])
        b.roll()
    b.batch([(b"k1", b"active"), (None, b"keyless-in-active")])
    return b.write(tmp_path / "logdir")


def test_clean_keeps_latest_record_per_key_and_leaves_active_segment(tmp_path: Path) -> None:
    part = build_basic(tmp_path)
    before = read_all_records(part)
    active = open_partition(part).segments[-1]
    active_bytes = active.log_path.read_bytes()

    result = clean_partition(part, compact_config(), CleanOptions(now_ms=NOW))

    assert result.range is not None and result.range.first_dirty_offset == 0
    assert result.end_offset == active.base_offset
    after = read_all_records(part)
    assert after == model_after_clean(before, 0, active.base_offset)
    assert active.log_path.read_bytes() == active_bytes
    checkpoint = read_offset_checkpoint(part.parent / "cleaner-offset-checkpoint")
    assert checkpoint == {("orders", 0): active.base_offset}
    # the three source segments were merged into one output segment named after the first
    assert [s.base_offset for s in open_partition(part).segments] == [0, active.base_offset]
    assert result.stats.superseded_removed == len(before) - len(after)


def test_second_clean_with_same_clock_changes_nothing(tmp_path: Path) -> None:
    part = build_basic(tmp_path)
    clean_partition(part, compact_config(), CleanOptions(now_ms=NOW))
    first = tree_digest(part)
    result = clean_partition(part, compact_config(), CleanOptions(now_ms=NOW, from_start=True))
    assert result.stats.batches_rebuilt == 0
    assert tree_digest(part) == first


def test_dry_run_writes_nothing_and_reports_the_same_numbers(tmp_path: Path) -> None:
    part = build_basic(tmp_path)
    before = tree_digest(part)
    logdir_before = tree_digest(part.parent)
    dry = clean_partition(part, compact_config(), CleanOptions(now_ms=NOW, dry_run=True))
    assert tree_digest(part) == before and tree_digest(part.parent) == logdir_before
    real = clean_partition(part, compact_config(), CleanOptions(now_ms=NOW))
    assert dry.stats.records_written == real.stats.records_written
    assert dry.stats.bytes_written == real.stats.bytes_written
    assert not dry.checkpoint_written and real.checkpoint_written


def test_cleaned_segments_read_back_with_kafka_python(tmp_path: Path) -> None:
    from kafka.record import MemoryRecords

    part = build_basic(tmp_path)
    clean_partition(part, compact_config(), CleanOptions(now_ms=NOW))
    ours = read_all_records(part)
    theirs: list[tuple[int, bytes | None, bytes | None]] = []
    for seg in open_partition(part).segments:
        records = MemoryRecords(seg.log_path.read_bytes())
        while True:
            batch = records.next_batch()
            if batch is None:
                break
            assert batch.validate_crc()
            theirs.extend((r.offset, r.key, r.value) for r in batch)
    assert theirs == ours


def test_tombstone_gets_horizon_then_goes_after_it(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"1")]).batch([(b"a", None)]).roll()
    b.batch([(b"c", b"1")])
    part = b.write(tmp_path / "logdir")
    config = compact_config()

    first = clean_partition(part, config, CleanOptions(now_ms=NOW))
    assert read_all_records(part) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    seg0 = open_partition(part).segments[0]
    horizons = [b.delete_horizon_ms for b in iter_batches(seg0.log_path.read_bytes())]
    assert horizons == [None, NOW + config.delete_retention_ms]
    assert first.stats.tombstones_removed == 0

    # before the horizon a re-clean keeps it; after, it goes
    clean_partition(part, config, CleanOptions(now_ms=NOW + DAY - 1, from_start=True))
    assert (2, b"a", None) in read_all_records(part)
    clean_partition(part, config, CleanOptions(now_ms=NOW + DAY, from_start=True))
    assert read_all_records(part) == [(1, b"b", b"1"), (3, b"c", b"1")]


def test_aborted_transaction_is_removed_and_marker_kept_first_pass(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"committed")], producer_id=7, transactional=True).marker(7, commit=True)
    b.batch([(b"a", b"aborted")], producer_id=7, transactional=True).marker(7, commit=False)
    b.batch([(b"z", b"1")]).roll()
    b.batch([(b"y", b"1")])
    part = b.write(tmp_path / "logdir")

    result = clean_partition(part, compact_config(), CleanOptions(now_ms=NOW))

    data = read_all_records(part)
    assert (2, b"a", b"aborted") not in data
    assert (0, b"a", b"committed") in data
    assert result.stats.aborted_records_removed == 1
    seg0 = open_partition(part).segments[0]
    assert seg0.txn_index_path is not None  # the kept ABORT marker keeps its index entry


def test_keyless_records_in_cleaned_range_are_removed(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(None, b"x"), (b"k", b"1")]).roll().batch([(b"q", b"1")])
    part = b.write(tmp_path / "logdir")
    result = clean_partition(part, compact_config(), CleanOptions(now_ms=NOW))
    assert read_all_records(part) == [(1, b"k", b"1"), (2, b"q", b"1")]
    assert result.stats.invalid_records == 1


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_are_rebuilt_in_their_codec(tmp_path: Path, codec: int) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], compression=codec).roll()
    b.batch([(b"c", b"1")])
    part = b.write(tmp_path / "logdir")
    clean_partition(part, compact_config(), CleanOptions(now_ms=NOW))
    assert read_all_records(part) == [(1, b"b", b"1"), (2, b"a", b"2"), (3, b"c", b"1")]
    batch = next(iter_batches(open_partition(part).segments[0].log_path.read_bytes()))
    assert int(batch.compression) == codec
    assert (batch.base_offset, batch.last_offset) == (0, 2)  # original offsets kept


def test_idempotent_producer_last_batch_kept_as_empty_shell(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1")], producer_id=1).batch([(b"a", b"2")])
    b.roll().batch([(b"q", b"1")])
    part = b.write(tmp_path / "logdir")
    clean_partition(part, compact_config(), CleanOptions(now_ms=NOW))
    batches = list(iter_batches(open_partition(part).segments[0].log_path.read_bytes()))
    assert [(x.base_offset, x.records_count, x.producer_id) for x in batches] == [(0, 0, 1), (1, 1, -1)]
