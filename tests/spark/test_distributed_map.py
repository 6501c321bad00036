"""The distributed offset map against the serial clean with an unbounded map: the same bytes, or nothing.

Each test builds one source, copies it, cleans one copy with ``clean_partition`` and the other with
``clean_partition_distributed`` on the session's ``local[2]``, and compares every file of both log dirs
(cleaner-offset-checkpoint included, kcompact's empty lock files aside) and the results.
"""

from __future__ import annotations

import shutil
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.cleaner.round.options import CleanOptions, CleanResult
from kcompact.cleaner.round.steps import write_group
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import TopicConfig, defaults_with_overrides
from kcompact.errors import ConfigError, CorruptRecordError, KcompactError
from kcompact.records.batch import iter_batches
from kcompact.records.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET
from kcompact.records.crc import crc32c
from kcompact.segment.checkpoint import read_offset_checkpoint
from kcompact.segment.partition import open_partition
from kcompact.spark import distributed_round
from kcompact.spark.distributed_map import (
    clean_partition_distributed,
    dirty_records_upper_bound,
    needs_distributed_map,
)
from kcompact.spark.distributed_round import Entries, surviving_offsets
from tests.builders import BASE_TS, PartitionBuilder
from tests.spark.logdirs import (
    build_legacy_partition,
    build_partition,
    flip_crc_of_a_kept_batch,
    tree_digest,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NOW = BASE_TS + 10_000_000
SMALL_SEGMENTS = {"internal.segment.bytes": "2500"}  # Kafka's test knob: groups of one or two segments


def compact(**extra: str) -> TopicConfig:
    config = defaults_with_overrides({"cleanup.policy": "compact", **extra})
    return config


def build_mixed(log_dir: Path) -> Path:
    """Eight closed segments and an active one: keys overwritten across segments, tombstones (latest
    and superseded), keyless records, an idempotent producer, a committed and an aborted transaction
    both spanning three segments, a second aborted one inside one segment."""
    b = PartitionBuilder()
    for s in range(8):
        for i in range(6):
            b.batch([(f"k{(s * 7 + i * 3 + j) % 30}".encode(), f"v{s}-{i}-{j}".encode() * 4)
                     for j in range(5)], compression=(0, 1, 4)[s % 3])
        if s == 1:
            b.batch([(b"tx-c", b"committed-1")], producer_id=11, transactional=True)
            b.batch([(b"k3", b"aborted-1")], producer_id=12, transactional=True)
        if s == 2:
            b.batch([(b"tx-c", b"committed-2"), (b"k4", None)], producer_id=11, transactional=True)
            b.batch([(b"k5", b"aborted-2")], producer_id=12, transactional=True)
            b.batch([(b"k6", None), (None, b"keyless"), (b"gone", None)])
        if s == 3:
            b.marker(11, commit=True).marker(12, commit=False)
            b.batch([(b"k7", b"idempotent")], producer_id=13)
        if s == 5:
            b.batch([(b"k8", b"aborted-3")], producer_id=14, transactional=True).marker(14, commit=False)
            b.batch([(b"k9", None)])
        b.roll()
    b.batch([(b"k1", b"active"), (None, b"keyless-active")])
    return b.write(log_dir, index_interval_bytes=300)


def twins(tmp_path: Path, build: Callable[[Path], Path]) -> tuple[Path, Path]:
    """The source built once, copied: (serial partition dir, distributed partition dir)."""
    part = build(tmp_path / "serial" / "logs")
    shutil.copytree(tmp_path / "serial", tmp_path / "spark")
    return part, tmp_path / "spark" / part.relative_to(tmp_path / "serial")


def same_result(serial: CleanResult, distributed: CleanResult) -> None:
    for name in ("range", "end_offset", "checkpoint_before", "checkpoint_written", "warnings",
                 "skipped_reason", "retention", "recovery_actions", "dry_run", "now_ms"):
        assert getattr(distributed, name) == getattr(serial, name), name
    mine, theirs = distributed.stats.as_dict(), serial.stats.as_dict()
    for volatile in ("elapsed_s", "map_memory_bytes"):
        mine.pop(volatile), theirs.pop(volatile)
    assert mine == theirs
    assert distributed.stats.map_memory_bytes == 24 * distributed.stats.map_entries


def clean_both(
    spark: SparkSession, serial: Path, spark_part: Path, config: TopicConfig, options: CleanOptions
) -> tuple[CleanResult, CleanResult]:
    return clean_partition(serial, config, options), clean_partition_distributed(
        spark, spark_part, config, options)


def test_several_segments_and_groups_with_tombstones_and_transactions(
    spark: SparkSession, tmp_path: Path
) -> None:
    serial, spark_part = twins(tmp_path, build_mixed)
    source = tree_digest(spark_part.parent)
    config = compact(**SMALL_SEGMENTS)

    expected, result = clean_both(spark, serial, spark_part, config, CleanOptions(now_ms=NOW))

    assert tree_digest(spark_part.parent) == tree_digest(serial.parent) != source
    same_result(expected, result)
    assert result.stats.groups >= 4 and result.stats.aborted_records_removed == 3
    assert result.stats.tombstones_removed > 0 and result.stats.invalid_records > 0
    assert read_offset_checkpoint(spark_part.parent / "cleaner-offset-checkpoint") == {
        ("orders", 0): result.end_offset}
    assert not list(spark_part.glob("*.cleaned"))


def test_snappy_lz4_and_an_open_transaction(spark: SparkSession, tmp_path: Path) -> None:
    """The codecs build_mixed lacks (it has none, gzip and zstd); an open transaction caps the round."""
    def build(log_dir: Path) -> Path:
        for codec in (2, 3):
            build_partition(log_dir, "codecs", codec, codec=codec, open_txn=codec == 3)
        return log_dir / "codecs-2"

    serial, spark_part = twins(tmp_path, build)
    for codec in (2, 3):
        name = f"codecs-{codec}"
        clean_both(spark, serial.parent / name, spark_part.parent / name, compact(),
                   CleanOptions(now_ms=NOW))
    assert tree_digest(spark_part.parent) == tree_digest(serial.parent)


def test_a_reclean_filters_the_clean_section_with_the_new_map(spark: SparkSession, tmp_path: Path) -> None:
    """Round 1 cleans both copies the serial way; round 2 rolls the active segment (new dirty data over
    a clean section of unique keys) and is run both ways."""
    serial, spark_part = twins(tmp_path, build_mixed)
    config = compact(**SMALL_SEGMENTS)
    for part in (serial, spark_part):
        clean_partition(part, config, CleanOptions(now_ms=NOW))
    assert tree_digest(spark_part.parent) == tree_digest(serial.parent)

    expected, result = clean_both(spark, serial, spark_part, config,
                                  CleanOptions(now_ms=NOW + 1000, roll=True))

    assert tree_digest(spark_part.parent) == tree_digest(serial.parent)
    same_result(expected, result)
    assert result.range is not None and result.range.first_dirty_offset > 0


def test_a_checkpoint_inside_a_segment_leaves_a_clean_section_with_duplicates(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A checkpoint set by hand in the middle of segment 2: the clean section holds repeated keys
    (every one of them survives unless the dirty range has the key) and one segment straddles it."""
    def build(log_dir: Path) -> Path:
        part = build_mixed(log_dir)
        middle = open_partition(part).segments[2].base_offset + 7
        (log_dir / "cleaner-offset-checkpoint").write_text(f"0\n1\norders 0 {middle}\n")
        return part

    serial, spark_part = twins(tmp_path, build)
    expected, result = clean_both(spark, serial, spark_part, compact(**SMALL_SEGMENTS),
                                  CleanOptions(now_ms=NOW))
    assert tree_digest(spark_part.parent) == tree_digest(serial.parent)
    same_result(expected, result)
    assert result.range is not None and result.checkpoint_before == result.range.first_dirty_offset
    assert result.checkpoint_before not in [s.base_offset for s in open_partition(serial).segments]


def test_legacy_segments(spark: SparkSession, tmp_path: Path) -> None:
    serial, spark_part = twins(tmp_path, build_legacy_partition)
    expected, result = clean_both(spark, serial, spark_part, compact(), CleanOptions(now_ms=NOW))
    assert tree_digest(spark_part.parent) == tree_digest(serial.parent)
    same_result(expected, result)


def test_dry_run_writes_nothing_and_reports_the_serial_numbers(spark: SparkSession, tmp_path: Path) -> None:
    serial, spark_part = twins(tmp_path, build_mixed)
    source = tree_digest(tmp_path / "spark")
    expected, result = clean_both(spark, serial, spark_part, compact(**SMALL_SEGMENTS),
                                  CleanOptions(now_ms=NOW, dry_run=True))
    assert tree_digest(tmp_path / "spark") == source
    same_result(expected, result)


def _fail_in_group_one(plan: Any, group_index: int, oracle: Any, **kwargs: Any) -> Any:
    """write_group, except that group 1 fails after the others may have written their files."""
    if group_index == 1:
        raise KcompactError("injected failure in group 1")
    return write_group(plan, group_index, oracle, **kwargs)


def _crash_in_group_one(plan: Any, group_index: int, oracle: Any, **kwargs: Any) -> Any:
    """write_group, except that group 1 dies of a bug after writing part of its segment."""
    if group_index == 1:
        (Path(plan.partition_dir) / f"{plan.groups[1][0]:020d}.log.cleaned").write_bytes(b"partial")
        raise RuntimeError("a bug in group 1")
    return write_group(plan, group_index, oracle, **kwargs)


@pytest.fixture
def ship_by_value() -> Any:
    """Let Spark ship this module's stand-ins to its workers by value (they cannot import tests)."""
    from pyspark import cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


@pytest.mark.parametrize(("stand_in", "error"), [(_fail_in_group_one, KcompactError),
                                                 (_crash_in_group_one, Exception)])
@pytest.mark.usefixtures("ship_by_value")
def test_a_failing_group_task_leaves_the_partition_as_it_was(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    stand_in: Callable[..., Any], error: type[Exception],
) -> None:
    part = build_mixed(tmp_path / "logs")
    before = tree_digest(tmp_path / "logs")
    monkeypatch.setattr(distributed_round, "write_group", stand_in)

    with pytest.raises(error, match="in group 1"):
        clean_partition_distributed(spark, part, compact(**SMALL_SEGMENTS), CleanOptions(now_ms=NOW))

    assert tree_digest(tmp_path / "logs") == before
    assert not list(part.glob("*.cleaned"))


def test_a_failed_self_check_leaves_the_partition_as_it_was(spark: SparkSession, tmp_path: Path) -> None:
    def build(log_dir: Path) -> Path:
        part = build_partition(log_dir, "orders", 0)
        flip_crc_of_a_kept_batch(part)
        return part

    serial, spark_part = twins(tmp_path, build)
    before = tree_digest(spark_part.parent)
    with pytest.raises(KcompactError) as serial_error:
        clean_partition(serial, compact(), CleanOptions(now_ms=NOW))
    with pytest.raises(type(serial_error.value), match="fails its CRC") as error:
        clean_partition_distributed(spark, spark_part, compact(), CleanOptions(now_ms=NOW))
    assert str(error.value).replace(str(tmp_path / "spark"), "") == str(serial_error.value).replace(
        str(tmp_path / "serial"), "")
    assert tree_digest(spark_part.parent) == before


def test_a_record_that_does_not_parse_fails_the_map_job_and_nothing_is_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Segment 1's first record gets length -1 (zig-zag 0x01), its batch's CRC made valid again: only
    a record walk sees it."""
    part = build_mixed(tmp_path / "logs")
    segment = open_partition(part).segments[1].log_path
    data = bytearray(segment.read_bytes())
    data[61] = 0x01  # the first record's length varint, right after the 61-byte batch header
    first = next(iter_batches(bytes(data)))
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(bytes(data[ATTRIBUTES_OFFSET : first.size_in_bytes])))
    segment.write_bytes(bytes(data))
    before = tree_digest(tmp_path / "logs")

    with pytest.raises(CorruptRecordError, match=segment.name):
        clean_partition_distributed(spark, part, compact(**SMALL_SEGMENTS), CleanOptions(now_ms=NOW))

    assert tree_digest(tmp_path / "logs") == before


def test_needs_distributed_map_bounds_the_keys_from_batch_headers(tmp_path: Path) -> None:
    part = build_mixed(tmp_path / "logs")
    config, options = compact(), CleanOptions(now_ms=NOW)
    records = dirty_records_upper_bound(open_partition(part), options)
    active = open_partition(part).segments[-1].base_offset

    assert records == active  # nothing cleaned yet: one record per offset below the active segment
    assert needs_distributed_map(part, config, options, 24 * records - 1)
    assert not needs_distributed_map(part, config, options, 24 * records)
    assert not needs_distributed_map(part, compact(**{"cleanup.policy": "delete"}), options, 1)
    assert dirty_records_upper_bound(open_partition(part), CleanOptions(roll=True)) == active + 2
    bounded = CleanOptions(now_ms=NOW, dedupe_buffer_size=24 * 100)  # 90 keys at load factor 0.9
    assert not needs_distributed_map(part, config, bounded, 24 * 90)
    assert needs_distributed_map(part, config, bounded, 24 * 90 - 1)


def test_needs_distributed_map_counts_from_the_checkpoint(tmp_path: Path) -> None:
    part = build_mixed(tmp_path / "logs")
    segments = open_partition(part).segments
    (part.parent / "cleaner-offset-checkpoint").write_text(
        f"0\n1\norders 0 {segments[6].base_offset}\n")
    dirty = segments[-1].base_offset - segments[6].base_offset

    assert dirty_records_upper_bound(open_partition(part)) == dirty
    assert not needs_distributed_map(part, compact(), CleanOptions(), 24 * dirty)
    assert needs_distributed_map(part, compact(), CleanOptions(from_start=True), 24 * dirty)


def test_a_bounded_map_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    part = build_mixed(tmp_path / "logs")
    before = tree_digest(tmp_path / "logs")
    with pytest.raises(ConfigError, match="--dedupe-buffer-size with the distributed offset map"):
        clean_partition_distributed(spark, part, compact(), CleanOptions(dedupe_buffer_size=1 << 20))
    assert tree_digest(tmp_path / "logs") == before


# digests drawn from a small space so that keys repeat and distinct keys share ``hi``
_digest = st.tuples(st.integers(0, 3), st.integers(0, 3))


@given(clean=st.lists(_digest, max_size=30), dirty=st.lists(_digest, max_size=60),
       slices=st.integers(1, 4))
def test_surviving_offsets_is_the_serial_rule(
    clean: list[tuple[int, int]], dirty: list[tuple[int, int]], slices: int
) -> None:
    """Dirty puts: the latest offset of each digest; clean records: kept when no dirty record has the
    digest (duplicates included); each with the group of its slice, slices shuffled."""
    records = [(False, d) for d in clean] + [(True, d) for d in dirty]  # offsets = positions
    latest = {d: offset for offset, (is_dirty, d) in enumerate(records) if is_dirty}
    group_of = [offset * slices // max(1, len(records)) for offset in range(len(records))]
    expected = sorted(
        (offset, group_of[offset]) for offset, (is_dirty, d) in enumerate(records)
        if (latest[d] == offset if is_dirty else d not in latest))
    entries = []
    for g in reversed(range(slices)):
        for is_dirty in (True, False):
            at = [o for o in range(len(records)) if group_of[o] == g and records[o][0] == is_dirty]
            entries.append(Entries(
                is_dirty, g, np.array([records[o][1][0] for o in at], dtype=np.uint64),
                np.array([records[o][1][1] for o in at], dtype=np.uint64), np.array(at, dtype=np.int64)))

    offsets, groups, dirty_keys = surviving_offsets(entries)

    assert sorted(zip(offsets.tolist(), groups.tolist(), strict=True)) == expected
    assert dirty_keys == len(latest)
