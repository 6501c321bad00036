"""The replica fence of ``clean`` (``--safe-offset``, ``--replica-dirs``): tombstones and markers at or
above it outlive their delete horizon; superseded ones still go; below it Kafka's rules alone."""

from __future__ import annotations

import shutil
from pathlib import Path

from kcompact.cleaner.partition import CleanOptions, clean_partition
from kcompact.cleaner.rules.fence import age_removal_allowed, fence_offset
from kcompact.records.batch import iter_batches
from kcompact.segment.partition import open_partition
from tests.builders import BASE_TS, PartitionBuilder, read_all_records
from tests.cleaner.round.test_clean_partition import compact_config

NOW = BASE_TS + 10_000_000
DAY = 86_400_000


def _tombstones(tmp_path: Path) -> Path:
    """a and b get tombstones at 2 and 3; b's is superseded at 4 by a value; c is the active segment."""
    b = PartitionBuilder()
    b.batch([(b"a", b"1"), (b"b", b"1")]).batch([(b"a", None)]).batch([(b"b", None)])
    b.batch([(b"b", b"2")]).roll()
    b.batch([(b"c", b"1")])
    return b.write(tmp_path / "logdir")


def _clean_twice(part: Path, **fence: object) -> None:
    """Stamp the horizons, then re-clean from the start once they have passed."""
    config = compact_config()
    clean_partition(part, config, CleanOptions(now_ms=NOW, **fence))  # type: ignore[arg-type]
    clean_partition(part, config, CleanOptions(now_ms=NOW + 2 * DAY, from_start=True,
                                               **fence))  # type: ignore[arg-type]


def test_without_a_fence_the_expired_tombstone_goes(tmp_path: Path) -> None:
    part = _tombstones(tmp_path)
    _clean_twice(part)
    assert read_all_records(part) == [(4, b"b", b"2"), (5, b"c", b"1")]


def test_a_tombstone_at_the_safe_offset_outlives_its_horizon(tmp_path: Path) -> None:
    part = _tombstones(tmp_path)
    _clean_twice(part, safe_offset=2)
    # a's tombstone (2) stays for good; b's (3) is superseded by b=2 and goes as Kafka does
    assert read_all_records(part) == [(2, b"a", None), (4, b"b", b"2"), (5, b"c", b"1")]


def test_a_tombstone_below_the_safe_offset_goes(tmp_path: Path) -> None:
    part = _tombstones(tmp_path)
    _clean_twice(part, safe_offset=3)
    assert read_all_records(part) == [(4, b"b", b"2"), (5, b"c", b"1")]


def test_the_fence_is_the_lowest_log_end_of_the_replica_copies(tmp_path: Path) -> None:
    part = _tombstones(tmp_path)
    lagging = PartitionBuilder()
    lagging.batch([(b"a", b"1"), (b"b", b"1")])  # this follower fetched offsets 0-1 only
    lagging_dir = lagging.write(tmp_path / "broker2")
    caught_up = tmp_path / "broker3" / part.name
    shutil.copytree(part, caught_up)
    _clean_twice(part, replica_dirs=(str(tmp_path / "broker3"), str(lagging_dir)))
    assert read_all_records(part) == [(2, b"a", None), (4, b"b", b"2"), (5, b"c", b"1")]


def test_replica_dirs_without_a_copy_of_the_partition_fence_nothing(tmp_path: Path) -> None:
    part = _tombstones(tmp_path)
    PartitionBuilder("other").batch([(b"x", b"1")]).write(tmp_path / "broker2")
    config = compact_config()
    options = CleanOptions(now_ms=NOW, replica_dirs=(str(tmp_path / "broker2"),))
    result = clean_partition(part, config, options)
    assert result.warnings == ["--replica-dirs: no copy of this partition found; no fence"]


def _committed_then_superseded(tmp_path: Path) -> Path:
    """A transaction's only record is superseded, so its COMMIT marker (offset 1) becomes discardable;
    the producer's next transaction (3, its marker 4) stays."""
    b = PartitionBuilder()
    b.batch([(b"a", b"txn")], producer_id=7, transactional=True).marker(7, commit=True)
    b.batch([(b"a", b"2")])
    b.batch([(b"z", b"1")], producer_id=7, transactional=True).marker(7, commit=True).roll()
    b.batch([(b"y", b"1")])
    return b.write(tmp_path / "logdir")


def _control_offsets(part: Path) -> list[int]:
    seg0 = open_partition(part).segments[0]
    return [b.base_offset for b in iter_batches(seg0.log_path.read_bytes())
            if b.is_control and b.records_count]


def test_a_marker_at_the_safe_offset_outlives_its_horizon(tmp_path: Path) -> None:
    part = _committed_then_superseded(tmp_path)
    config = compact_config()
    for now in (NOW, NOW + 2 * DAY, NOW + 4 * DAY):
        clean_partition(part, config, CleanOptions(now_ms=now, from_start=True, safe_offset=1))
    assert _control_offsets(part) == [1, 4]


def test_a_marker_below_the_safe_offset_goes_after_its_horizon(tmp_path: Path) -> None:
    part = _committed_then_superseded(tmp_path)
    config = compact_config()
    for now in (NOW, NOW + 2 * DAY, NOW + 4 * DAY):
        clean_partition(part, config, CleanOptions(now_ms=now, from_start=True, safe_offset=2))
    assert _control_offsets(part) == [4]


def test_fence_offset_is_the_lowest_given() -> None:
    assert fence_offset(None, []) is None
    assert fence_offset(7, []) == 7
    assert fence_offset(None, [9, 4]) == 4
    assert fence_offset(3, [9, 4]) == 3
    assert age_removal_allowed(2, None) and age_removal_allowed(2, 3)
    assert not age_removal_allowed(3, 3)

