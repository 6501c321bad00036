"""The replica fence of ``clean`` (``--safe-offset``, ``--replica-dirs``): tombstones and markers at or
above it outlive their delete horizon; superseded ones still go; below it Kafka's rules alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kcompact.cleaner.round.options import CleanOptions
from kcompact.cleaner.workers.bound_clean import clean_partition
from kcompact.log.rules.fence import CopyFence, age_removal_allowed, replica_fence
from kcompact.records.batch import iter_batches
from kcompact.segment.partition import open_partition
from kcompact.segment.replica_copies import replica_log_ends
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


def _fence_offset(safe_offset: int | None, ends: list[int]) -> int | None:
    fence = replica_fence(safe_offset, [CopyFence(f"/c{i}", end, None) for i, end in enumerate(ends)])
    return None if fence is None else fence.offset


def test_fence_offset_is_the_lowest_given() -> None:
    assert _fence_offset(None, []) is None
    assert _fence_offset(7, []) == 7
    assert _fence_offset(None, [9, 4]) == 4
    assert _fence_offset(3, [9, 4]) == 3
    assert age_removal_allowed(2, None) and age_removal_allowed(2, 3)
    assert not age_removal_allowed(3, 3)



def _flip_byte_in_batch(part: Path, offset: int) -> None:
    """Flip one byte of the records of the batch holding ``offset`` (its CRC then fails)."""
    for seg in open_partition(part).segments:
        data = bytearray(seg.log_path.read_bytes())
        for batch in iter_batches(bytes(data)):
            if batch.base_offset <= offset <= batch.last_offset:
                data[batch.position + batch.size_in_bytes - 2] ^= 0x01
                seg.log_path.write_bytes(bytes(data))
                return
    raise AssertionError(f"no batch holds offset {offset}")


def _four_tombstones(rolls: tuple[int, ...] = (8,)) -> PartitionBuilder:
    """a..d = 1 at 0-3, their tombstones at 4-7 (one batch each), e = 1 at 8; a segment starts at each
    offset of ``rolls``."""
    builder = PartitionBuilder().batch([(b"a", b"1"), (b"b", b"1"), (b"c", b"1"), (b"d", b"1")])
    for offset, key in enumerate((b"a", b"b", b"c", b"d", b"e"), start=4):
        if offset in rolls:
            builder.roll()
        builder.batch([(key, None if key != b"e" else b"1")])
    return builder


@pytest.mark.parametrize("follower_rolls", [(), (8,), (6,)],
                         ids=["active-segment", "earlier-segment", "active-segment-wholly-invalid"])
def test_the_fence_stops_at_a_copy_s_crc_valid_prefix(tmp_path: Path, follower_rolls: tuple[int, ...]) -> None:
    """A follower whose batch at offset 6 fails its CRC restarts truncated to 6 (LogSegment.recover): its
    log end is 6, not the 9 its last header says, so the tombstones at 6 and 7 must outlive their horizon."""
    leader = _four_tombstones().write(tmp_path / "leader")
    copy = _four_tombstones(follower_rolls).write(tmp_path / "follower")
    _flip_byte_in_batch(copy, 6)

    [end] = replica_log_ends((str(copy.parent),), "orders", 0)
    assert end.log_end_offset == 6
    assert open_partition(copy).log_end_offset() == 9  # what the last header says
    _clean_twice(leader, replica_dirs=(str(copy.parent),))
    assert read_all_records(leader) == [(6, b"c", None), (7, b"d", None), (8, b"e", b"1")]


def test_a_sound_copy_fences_at_its_log_end(tmp_path: Path) -> None:
    leader = _four_tombstones().write(tmp_path / "leader")
    copy = tmp_path / "follower" / leader.name
    shutil.copytree(leader, copy)
    [end] = replica_log_ends((str(copy),), "orders", 0)
    assert (end.log_end_offset, end.stopped_at) == (9, None)
    _clean_twice(leader, replica_dirs=(str(copy),))
    assert read_all_records(leader) == [(8, b"e", b"1")]


def test_a_truncated_copy_is_named_in_the_round_s_warnings(tmp_path: Path) -> None:
    leader = _four_tombstones().write(tmp_path / "leader")
    copy = _four_tombstones().write(tmp_path / "follower")
    _flip_byte_in_batch(copy, 6)
    result = clean_partition(leader, compact_config(), CleanOptions(now_ms=NOW, replica_dirs=(str(copy),)))
    [warning] = result.warnings
    assert warning.startswith(f"--replica-dirs: {copy / '00000000000000000000.log'} at position ")
    assert warning.endswith("its log end is taken as 6")
    assert result.fence is not None
    assert (result.fence.offset, result.fence.set_by, result.fence.why) == (6, str(copy), "torn tail")
