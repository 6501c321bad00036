"""What a segment's state takes from its index files, each read once (``log_state._index_tails``): their
sizes, the time index's last timestamp, and whether either ends in zero slots (preallocated, never trimmed:
the segment is one Kafka's ``LogLoader.recoverLog`` rebuilds, so its indexes are derived from the log)."""

from __future__ import annotations

from pathlib import Path

from kcompact.config.topic_config import TopicConfig
from kcompact.log.state.log_state import SegmentState, load_log_state
from kcompact.segment.partition import open_partition
from kcompact.segment.time_index import read_time_index
from tests.partition_builder import PartitionBuilder


def segments(tmp_path: Path) -> tuple[Path, tuple[SegmentState, ...]]:
    b = PartitionBuilder("tails")
    for i in range(3):
        b.batch([(b"k%d" % i, b"v")], timestamp_step=1000).batch([(b"k", b"w")]).roll()
    part = b.write(tmp_path)
    return part, load_log_state(open_partition(part), TopicConfig.defaults()).segments


def test_sizes_and_the_largest_timestamp_come_from_the_files(tmp_path: Path) -> None:
    part, states = segments(tmp_path)
    for state in states[:-1]:
        files = state.files
        assert files.index_path is not None and files.time_index_path is not None
        assert state.offset_index_bytes == files.index_path.stat().st_size
        assert state.time_index_bytes == files.time_index_path.stat().st_size > 0
        last = read_time_index(files.time_index_path, files.base_offset)[-1]
        assert state.largest_timestamp_ms == last.timestamp and not state.needs_recovery


def test_an_index_ending_in_zero_slots_is_derived_from_the_log(tmp_path: Path) -> None:
    part, before = segments(tmp_path)
    time_index, offset_index = before[0].files.time_index_path, before[1].files.index_path
    assert time_index is not None and offset_index is not None
    time_index.write_bytes(time_index.read_bytes() + bytes(12) * 3)  # preallocated, never trimmed
    offset_index.write_bytes(offset_index.read_bytes() + bytes(8) * 3)
    after = load_log_state(open_partition(part), TopicConfig.defaults()).segments
    assert [s.needs_recovery for s in after] == [True, True, False, False]
    assert after[0].largest_timestamp_ms == before[0].largest_timestamp_ms  # from the log, not the zeros
    assert after[0].time_index_bytes == before[0].time_index_bytes  # what recovery would write
    assert after[2] == before[2]


def test_a_time_index_not_whole_slots_gives_no_timestamp(tmp_path: Path) -> None:
    part, before = segments(tmp_path)
    time_index = before[0].files.time_index_path
    assert time_index is not None
    time_index.write_bytes(time_index.read_bytes()[:-1])
    after = load_log_state(open_partition(part), TopicConfig.defaults()).segments[0]
    assert after.time_index_bytes == before[0].time_index_bytes - 1 and not after.needs_recovery
    assert after.largest_timestamp_ms == after.files.mtime_ms  # Kafka's fallback: the file's mtime
