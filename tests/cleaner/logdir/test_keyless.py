"""The keyless sample ``clean`` cites when it leaves a partition alone, and the exact count it cites when it
refuses to compact a mostly keyless one: what each reads and how it counts."""

from __future__ import annotations

from pathlib import Path

from kcompact.cleaner.logdir.keyless import KeylessSample, count_keyless, sample_keyless
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.segment.partition import open_partition
from tests.builders import PartitionBuilder


def partition(tmp_path: Path) -> Path:
    """Segment 0: 6 keyless records; segment 6: 4 keyed and a transaction marker; active: 1 keyed."""
    b = PartitionBuilder("events")
    b.batch([(None, b"x%d" % i) for i in range(3)]).batch([(None, b"y%d" % i) for i in range(3)]).roll()
    b.batch([(b"k%d" % i, b"v") for i in range(4)])
    b.batch([(b"t", b"v")], producer_id=7, transactional=True).marker(7, commit=True).roll()
    return b.batch([(b"k0", b"last")]).write(tmp_path)


def test_counts_keyless_data_records_and_not_markers(tmp_path: Path) -> None:
    sample = sample_keyless(open_partition(partition(tmp_path)))
    assert sample == KeylessSample(records=12, keyless=6)
    assert not sample.mostly_keyless and sample.describe() == "6 of 12 records sampled have no key"


def test_starts_at_the_cleaner_checkpoint_and_stops_at_the_budget(tmp_path: Path) -> None:
    part = partition(tmp_path)
    assert sample_keyless(open_partition(part), budget_bytes=1) == KeylessSample(3, 3)  # one whole batch
    write_offset_checkpoint(tmp_path / "cleaner-offset-checkpoint", {("events", 0): 6})
    sample = sample_keyless(open_partition(part))
    assert sample == KeylessSample(6, 0, start=6) and sample.describe() == "all 6 records sampled carry a key"


def test_the_exact_count_reads_every_record_past_the_checkpoint(tmp_path: Path) -> None:
    part = partition(tmp_path)
    count = count_keyless(open_partition(part))
    assert count == KeylessSample(12, 6, exhaustive=True)
    assert count.describe() == "6 of the 12 records of the partition have no key"
    write_offset_checkpoint(tmp_path / "cleaner-offset-checkpoint", {("events", 0): 6})
    count = count_keyless(open_partition(part))
    assert count.describe() == "0 of the 6 records past the cleaner checkpoint (offset 6) have no key"


def test_data_that_does_not_parse_ends_the_sample_without_an_error(tmp_path: Path) -> None:
    part = partition(tmp_path)
    second = sorted(part.glob("*.log"))[1]
    second.write_bytes(b"\xff" * 40)  # not a batch
    assert sample_keyless(open_partition(part)) == KeylessSample(6, 6)
    assert sample_keyless(open_partition(part)).mostly_keyless
    assert not KeylessSample(0, 0).mostly_keyless  # an empty partition is no evidence
