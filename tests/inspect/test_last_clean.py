"""``inspect last-clean``: offset gaps, delete horizons and empty batches as evidence of a clean, on
partitions cleaned by kcompact's cleaner and on the broker's own cleaned log dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.config.topic_config import defaults_with_overrides
from kcompact.inspect.last_clean import LastCleanReport, OffsetGap, last_clean_report
from kcompact.segment.checkpoint import write_offset_checkpoint
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.conftest import real_fixture

NOW = BASE_TS + 10_000_000
DAY = 86_400_000
COMPACT = {"cleanup.policy": "compact"}

FIELDS = [
    "topic", "partition", "partition_dir", "log_start_offset", "log_end_offset",
    "checkpoint_offset", "first_dirty_offset", "compacted", "gaps", "missing_offsets", "newest_gap",
    "cleaned_after_ms", "contiguous_since_offset", "records_since", "dirty_records",
    "delete_horizon_batches", "newest_delete_horizon_ms", "horizon_stamped_at_ms",
    "last_clean_after_ms", "empty_batches", "warnings", "corrupt_batches", "crc_error",
]
GAP_FIELDS = ["after_offset", "next_offset", "missing_offsets", "next_timestamp_ms",
              "before_first_dirty"]


def report(part: Path, **config: str) -> LastCleanReport:
    return last_clean_report(part, cli_overrides={**COMPACT, **config}, now_ms=NOW)


def clean(part: Path, now_ms: int = NOW, **config: str) -> None:
    topic_config = defaults_with_overrides({**COMPACT, **config})
    clean_partition(part, topic_config, CleanOptions(now_ms=now_ms))


def two_rounds() -> PartitionBuilder:
    """Keys rewritten in a second segment, so a clean leaves gaps in the first; then a dirty tail."""
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1")]).batch([(b"d", b"1")]).roll()
    b.batch([(b"a", b"2"), (b"b", b"2")]).batch([(b"e", b"1")]).roll()
    return b.batch([(b"b", b"3"), (b"f", b"1")])  # the active segment


def test_json_field_names_are_fixed(tmp_path: Path) -> None:
    part = two_rounds().write(tmp_path / "logdir")
    clean(part)
    got = report(part).as_dict()
    assert list(got) == FIELDS
    assert list(got["newest_gap"]) == GAP_FIELDS


def test_a_never_cleaned_log_is_one_contiguous_run(tmp_path: Path) -> None:
    got = report(two_rounds().write(tmp_path / "logdir"))
    assert (got.compacted, got.gaps, got.newest_gap, got.cleaned_after_ms) == (False, 0, None, None)
    assert (got.contiguous_since_offset, got.records_since, got.dirty_records) == (0, 9, 9)
    assert (got.checkpoint_offset, got.first_dirty_offset, got.last_clean_after_ms) == (None, 0, None)


def test_after_a_clean_the_newest_gap_and_the_run_since(tmp_path: Path) -> None:
    part = two_rounds().write(tmp_path / "logdir")
    clean(part)
    assert [offset for offset, _k, _v in read_all_records(part)] == [2, 3, 4, 5, 6, 7, 8]
    got = report(part)
    # a@0 and b@1 went: the gap is at the log start, up to c@2 (written at BASE_TS + 2)
    assert got.newest_gap == OffsetGap(None, 2, 2, BASE_TS + 2, True)
    assert (got.gaps, got.missing_offsets, got.cleaned_after_ms) == (1, 2, BASE_TS + 2)
    assert (got.contiguous_since_offset, got.records_since) == (2, 7)
    assert (got.checkpoint_offset, got.first_dirty_offset, got.dirty_records) == (7, 7, 2)
    assert got.compacted and got.warnings == []


def test_a_gap_between_records_names_the_record_before(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"b", b"2"), (b"d", b"1")]).roll()
    b.batch([(b"z", b"1")])
    part = b.write(tmp_path / "logdir")
    clean(part)
    got = report(part)
    assert got.newest_gap == OffsetGap(0, 2, 1, BASE_TS + 2, True)  # b@1 removed inside the batch
    assert (got.records_since, got.empty_batches, got.delete_horizon_batches) == (4, 0, 0)


def test_delete_horizon_dates_the_clean(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"1")]).batch([(b"a", None)]).roll().batch([(b"c", b"1")])
    part = b.write(tmp_path / "logdir")
    clean(part, now_ms=NOW, **{"delete.retention.ms": "3600000"})
    got = report(part, **{"delete.retention.ms": "3600000"})
    assert (got.delete_horizon_batches, got.newest_delete_horizon_ms) == (1, NOW + 3_600_000)
    assert got.horizon_stamped_at_ms == NOW
    assert got.last_clean_after_ms == NOW  # later than the gap's record (a@0 went: b@1 follows)
    assert got.cleaned_after_ms == BASE_TS + 1


def test_an_empty_batch_is_evidence_and_a_gap_at_the_log_end(tmp_path: Path) -> None:
    b = PartitionBuilder()
    b.batch([(b"a", b"1")]).batch([(None, b"keyless")]).roll()  # the active segment stays empty
    part = b.write(tmp_path / "logdir")
    clean(part)  # the keyless record goes; its batch ends the round, so it stays as an empty shell
    got = report(part)
    assert got.empty_batches == 1
    assert got.newest_gap == OffsetGap(0, 2, 1, None, True)
    assert (got.records_since, got.contiguous_since_offset, got.cleaned_after_ms) == (0, 2, None)


def test_a_gap_in_the_dirty_section_says_the_checkpoint_is_missing(tmp_path: Path) -> None:
    part = two_rounds().write(tmp_path / "logdir")
    clean(part)
    (part.parent / "cleaner-offset-checkpoint").unlink()  # a copied log dir often lacks it
    got = report(part)
    assert got.newest_gap is not None and not got.newest_gap.before_first_dirty
    assert got.first_dirty_offset == 0
    assert any("cleaner-offset-checkpoint is missing or behind" in w for w in got.warnings)


def test_records_below_the_log_start_offset_are_no_gap(tmp_path: Path) -> None:
    part = two_rounds().write(tmp_path / "logdir")
    write_offset_checkpoint(part.parent / "log-start-offset-checkpoint", {("orders", 0): 3})
    got = report(part)
    assert (got.log_start_offset, got.gaps, got.records_since) == (3, 0, 6)


@pytest.mark.parametrize(("partition", "gap", "records_since", "gaps"), [
    (31, OffsetGap(None, 2, 2, 1766053800028, True), 3, 1),
    (44, OffsetGap(6, 8, 1, 1765944615543, True), 3, 2),
])
def test_broker_cleaned_consumer_offsets(
    partition: int, gap: OffsetGap, records_since: int, gaps: int
) -> None:
    got = report(real_fixture("kraft37-cleaned-logdir", f"__consumer_offsets-{partition}"))
    assert got.newest_gap == gap and got.gaps == gaps
    assert (got.records_since, got.cleaned_after_ms, got.compacted) == (
        records_since, gap.next_timestamp_ms, True)
    assert got.checkpoint_offset == got.first_dirty_offset == {31: 3, 44: 9}[partition]
    assert got.warnings == []


def test_log_append_time_batch_gives_the_broker_time(tmp_path: Path) -> None:
    from kcompact.records.batch_encoding import encode_batch
    from kcompact.records.record import Record

    b = PartitionBuilder()
    b.batch([(b"a", b"1")])
    appended = BASE_TS + 5_000  # the broker's clock, not the producer's record timestamps
    records = [Record(1, BASE_TS + 1, b"a", b"2"), Record(2, BASE_TS + 2, b"b", b"1")]
    b.segments[-1].batches.append(
        encode_batch(records, base_offset=1, timestamp_type=1, max_timestamp=appended))
    b.next_offset = 3
    b.roll().batch([(b"c", b"1")])
    part = b.write(tmp_path / "logdir")
    clean(part)
    got = report(part)
    assert got.newest_gap == OffsetGap(None, 1, 1, appended, True)
