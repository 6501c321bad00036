"""Replaying __cluster_metadata-0: broker-written logs, hand-built logs and snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcompact.config.kraft.metadata_state import load_metadata_state
from kcompact.config.source_files import FoundSources, gather_sources
from kcompact.config.topic_config import resolve_config
from kcompact.errors import ConfigError, CorruptRecordError
from kcompact.records.batch_encoding import encode_batch
from kcompact.records.control import ControlRecordKey, ControlRecordType
from kcompact.records.messages.reader import format_uuid
from kcompact.records.record import Record
from tests.config.test_kraft_records import (
    encode_config,
    encode_feature_level,
    encode_partition,
    encode_remove_topic,
    encode_topic,
    frame,
    uuid_bytes,
)
from tests.conftest import real_fixture

TOPIC, BROKER = 2, 4
BEGIN_TXN = frame(23, 0, b"\x00")
END_TXN = frame(24, 0, b"\x00")
ABORT_TXN = frame(25, 0, b"\x00")
OFFSETS_CONFIG = {"compression.type": "producer", "cleanup.policy": "compact",
                  "segment.bytes": "104857600"}  # fmt: skip


def batch(base_offset: int, values: list[bytes]) -> bytes:
    records = [Record(base_offset + i, 1000, None, v) for i, v in enumerate(values)]
    return encode_batch(records, base_offset=base_offset)


def control(base_offset: int, kind: ControlRecordType) -> bytes:
    key = ControlRecordKey(0, kind).encode()
    return encode_batch([Record(base_offset, 1000, key, b"\x00\x00")], base_offset=base_offset,
                        is_control=True)  # fmt: skip


def overrides_found(partition_dir: Path, metadata_dir: Path) -> FoundSources:
    """The topic overrides a clean of ``partition_dir`` would use, matched as Kafka matches them (by the
    directory's topic name, its ``partition.metadata`` id compared with the live one)."""
    topic = partition_dir.name.rsplit("-", 1)[0]
    return gather_sources(partition_dir, topic, None, metadata_dir, [])


def write_log(directory: Path, base_offset: int, groups: list[list[bytes]]) -> Path:
    directory.mkdir(exist_ok=True)
    data, offset = b"", base_offset
    for values in groups:
        data += batch(offset, values)
        offset += len(values)
    path = directory / f"{base_offset:020d}.log"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("folder", ["kraft37-consumer-offsets", "bitnami2024-rolled-logdir"])
def test_complete_broker_logs_give_consumer_offsets_overrides(folder: str) -> None:
    state = load_metadata_state(real_fixture(folder, "__cluster_metadata-0"))
    assert state.complete and state.unresolved_reason is None
    assert state.topic_config_overrides("__consumer_offsets") == OFFSETS_CONFIG
    assert state.partition_counts[state.topics_by_name["__consumer_offsets"]] == 50
    assert state.feature_levels["metadata.version"] in (19, 20)
    assert state.unknown_record_counts["NoOpRecord"] > 1000
    partition = real_fixture(folder, "__consumer_offsets-6" if "kraft" in folder else
                             "__consumer_offsets-0")  # fmt: skip
    found = overrides_found(partition, real_fixture(folder, "__cluster_metadata-0"))
    assert found.topic_overrides == OFFSETS_CONFIG and found.topic_unknown is None
    config, _ = resolve_config(cli={}, topic_overrides=found.topic_overrides,
                               broker_dynamic={}, cluster_dynamic={}, server_properties={})
    assert config.is_compacted and config.segment_bytes == 104857600


def test_metadata_log_without_its_start_is_incomplete() -> None:
    state = load_metadata_state(real_fixture("kraft37-cleaned-logdir", "__cluster_metadata-0"))
    assert not state.complete
    assert state.unresolved_reason is not None
    assert "no snapshot and the metadata log starts at offset 1725413, not 0" in (
        state.unresolved_reason)
    assert state.end_offset == 1737569 and state.topics_by_name == {}
    partition = real_fixture("kraft37-cleaned-logdir", "__consumer_offsets-31")
    found = overrides_found(partition, real_fixture("kraft37-cleaned-logdir", "__cluster_metadata-0"))
    assert found.topic_overrides is None
    assert found.topic_unknown is not None and found.topic_unknown.endswith("(its history is incomplete)")


def test_overrides_removal_and_recreation(tmp_path: Path) -> None:
    old, new = uuid_bytes(1), uuid_bytes(2)
    directory = tmp_path / "__cluster_metadata-0"
    write_log(directory, 0, [
        [encode_feature_level("metadata.version", 19), encode_topic("orders", old),
         encode_partition(old, 0), encode_partition(old, 1)],
        [encode_config(TOPIC, "orders", "cleanup.policy", "compact"),
         encode_config(TOPIC, "orders", "min.cleanable.dirty.ratio", "0.1"),
         encode_config(TOPIC, "orders", "min.cleanable.dirty.ratio", "0.2"),
         encode_config(TOPIC, "orders", "segment.ms", "100"),
         encode_config(TOPIC, "orders", "segment.ms", None)],
        [encode_config(BROKER, "1", "log.cleaner.threads", "2"),
         encode_config(BROKER, "", "log.roll.hours", "1"),
         encode_config(BROKER, "2", "log.cleaner.threads", "4")],
        [encode_remove_topic(old), encode_topic("orders", new), encode_partition(new, 0),
         encode_config(TOPIC, "orders", "delete.retention.ms", "5")],
    ])  # fmt: skip
    (tmp_path / "orders-0").mkdir()
    (tmp_path / "orders-0" / "partition.metadata").write_text(
        f"version: 0\ntopic_id: {format_uuid(new)}\n")
    state = load_metadata_state(directory)
    assert state.complete and state.end_offset == 16
    assert state.topics_by_name == {"orders": format_uuid(new)}
    assert state.topics_by_id == {format_uuid(new): "orders"}
    assert state.partition_counts == {format_uuid(new): 1}
    # the old incarnation's overrides went with it
    assert state.topic_config_overrides("orders") == {"delete.retention.ms": "5"}
    assert state.broker_config(1) == {"log.cleaner.threads": "2"}
    assert state.broker_config(3) == {} and state.broker_config(None) == {}
    assert state.cluster_default_config() == {"log.roll.hours": "1"}
    assert overrides_found(tmp_path / "orders-0", directory).topic_overrides == {"delete.retention.ms": "5"}
    (tmp_path / "orders-0" / "partition.metadata").write_text(
        f"version: 0\ntopic_id: {format_uuid(old)}\n")
    found = overrides_found(tmp_path / "orders-0", directory)
    assert found.topic_overrides is None
    assert found.topic_unknown is not None and "(a deleted incarnation" in found.topic_unknown


def test_updates_before_removal_are_kept_while_topic_lives(tmp_path: Path) -> None:
    tid = uuid_bytes(5)
    directory = tmp_path / "__cluster_metadata-0"
    write_log(directory, 0, [[encode_topic("a", tid), encode_config(TOPIC, "a", "segment.ms", "7")]])
    state = load_metadata_state(directory)
    assert state.topic_config_overrides("a") == {"segment.ms": "7"}
    (tmp_path / "a-0").mkdir()
    assert overrides_found(tmp_path / "a-0", directory).topic_overrides == {"segment.ms": "7"}  # by name


def test_metadata_transactions_commit_and_abort(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    write_log(directory, 0, [
        [BEGIN_TXN, encode_topic("kept", uuid_bytes(1)), END_TXN],
        [BEGIN_TXN, encode_topic("dropped", uuid_bytes(2))], [ABORT_TXN],
        [BEGIN_TXN, encode_topic("unfinished", uuid_bytes(3))],
    ])  # fmt: skip
    state = load_metadata_state(directory)
    assert set(state.topics_by_name) == {"kept"}


def test_snapshot_then_log_after_it(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    snapshot = (control(0, ControlRecordType.SNAPSHOT_HEADER)
                + batch(1, [encode_topic("from-snapshot", uuid_bytes(1)),
                            encode_config(TOPIC, "from-snapshot", "segment.ms", "1")])
                + control(3, ControlRecordType.SNAPSHOT_FOOTER))  # fmt: skip
    (directory / f"{10:020d}-{3:010d}.checkpoint").write_bytes(snapshot)
    (directory / f"{5:020d}-{2:010d}.checkpoint").write_bytes(b"older, never read")
    # the log still holds offsets before the snapshot; they must not be replayed twice
    write_log(directory, 8, [[encode_topic("before", uuid_bytes(9)),
                              encode_config(TOPIC, "from-snapshot", "segment.ms", "99")],
                             [encode_config(TOPIC, "from-snapshot", "segment.ms", "2")]])
    state = load_metadata_state(directory)
    assert state.complete and state.snapshot == directory / f"{10:020d}-{3:010d}.checkpoint"
    assert set(state.topics_by_name) == {"from-snapshot"}
    assert state.topic_config_overrides("from-snapshot") == {"segment.ms": "2"}
    assert state.end_offset == 11


def test_snapshot_without_footer_or_with_gap_is_incomplete(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    snap = control(0, ControlRecordType.SNAPSHOT_HEADER) + batch(1, [encode_topic("t", uuid_bytes(1))])
    (directory / f"{2:020d}-{1:010d}.checkpoint").write_bytes(snap)
    write_log(directory, 5, [[encode_topic("u", uuid_bytes(2))]])
    state = load_metadata_state(directory)
    assert not state.complete and state.unresolved_reason is not None
    assert "does not end with a SNAPSHOT_FOOTER" in state.unresolved_reason
    assert "jumps from offset 2 to 5" in state.unresolved_reason
    assert set(state.topics_by_name) == {"t", "u"} and state.later_records_missing


def test_empty_directory_is_incomplete_and_missing_one_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    state = load_metadata_state(tmp_path / "m")
    assert not state.complete and "nothing to replay" in (state.unresolved_reason or "")
    with pytest.raises(ConfigError, match="not a directory"):
        load_metadata_state(tmp_path / "absent")


def test_corrupt_metadata_record_names_file_and_offset(tmp_path: Path) -> None:
    directory = tmp_path / "__cluster_metadata-0"
    path = write_log(directory, 0, [[encode_topic("t", uuid_bytes(1)), b"\x01\x02\x00\x05ab"]])
    with pytest.raises(CorruptRecordError) as info:
        load_metadata_state(directory)
    assert info.value.path == str(path) and info.value.offset == 1 and info.value.position == 0
    assert "TopicRecord.name runs past the end of the record" in str(info.value)


def test_cached_state_is_replayed_again_only_after_a_change(tmp_path: Path) -> None:
    from kcompact.config.kraft.metadata_state import cached_metadata_state

    directory = tmp_path / "__cluster_metadata-0"
    write_log(directory, 0, [[encode_topic("a", uuid_bytes(1))]])
    first = cached_metadata_state(directory)
    assert cached_metadata_state(directory) is first
    write_log(directory, 1, [[encode_topic("b", uuid_bytes(2))]])
    assert set(cached_metadata_state(directory).topics_by_name) == {"a", "b"}
    with pytest.raises(ConfigError, match="not a directory; expected the __cluster_metadata-0"):
        cached_metadata_state(tmp_path / "absent")


def snapshot_only(tmp_path: Path, end_offset: int = 60500) -> Path:
    """A metadata partition whose newest snapshot ends at ``end_offset`` and whose .log segments are gone."""
    directory = tmp_path / "logs" / "__cluster_metadata-0"
    directory.mkdir(parents=True)
    snapshot = (control(0, ControlRecordType.SNAPSHOT_HEADER)
                + batch(1, [encode_topic("plain", uuid_bytes(1))])
                + control(2, ControlRecordType.SNAPSHOT_FOOTER))  # fmt: skip
    (directory / f"{end_offset:020d}-{3:010d}.checkpoint").write_bytes(snapshot)
    return directory


def test_a_snapshot_without_the_log_after_it_is_complete_only_when_nothing_shows_the_log_went_further(
    tmp_path: Path,
) -> None:
    directory = snapshot_only(tmp_path)
    (directory / f"{60500:020d}.snapshot").write_bytes(b"")  # the producer state at the snapshot's end
    (directory / "leader-epoch-checkpoint").write_text("0\n1\n3 60000\n")
    state = load_metadata_state(directory)
    assert state.complete and state.end_offset == 60500
    (directory / f"{66046:020d}.snapshot").write_bytes(b"")  # taken at a roll: the log reached 66046
    state = load_metadata_state(directory)
    assert not state.complete and state.unresolved_reason == (
        "00000000000000066046.snapshot shows the metadata log reached offset 66046, but the snapshot and "
        "the log segments present end at 60500: the records in between are unknown")
    assert set(state.topics_by_name) == {"plain"}  # what was read is still there


def test_an_index_without_its_log_past_the_last_segment_is_a_missing_tail(tmp_path: Path) -> None:
    directory = snapshot_only(tmp_path)
    (directory / f"{59000:020d}.index").write_bytes(b"")
    (directory / f"{59000:020d}.timeindex").write_bytes(b"")
    state = load_metadata_state(directory)
    assert not state.complete and state.unresolved_reason == (
        "00000000000000059000.index is here but its segment 00000000000000059000.log is not: the metadata "
        "records from offset 59000 on are unknown")


@pytest.mark.parametrize("where, content, says", [
    ("leader-epoch-checkpoint", "0\n2\n3 60000\n4 61000\n", "leader-epoch-checkpoint (epoch 4) shows"),
    ("../replication-offset-checkpoint", "0\n1\n__cluster_metadata 0 60900\n",
     "logs/replication-offset-checkpoint shows"),
    ("../recovery-point-offset-checkpoint", "0\n1\n__cluster_metadata 0 60900\n",
     "logs/recovery-point-offset-checkpoint shows"),
    ("leader-epoch-checkpoint", "0\n1\nnot a line\n", "leader-epoch-checkpoint"),
])
def test_checkpoints_past_the_replay_make_the_history_incomplete(
    tmp_path: Path, where: str, content: str, says: str
) -> None:
    directory = snapshot_only(tmp_path)
    (directory / where).write_text(content)
    state = load_metadata_state(directory)
    assert not state.complete and state.unresolved_reason is not None
    assert says in state.unresolved_reason


def test_records_missing_after_those_read_are_told_apart_from_a_missing_beginning(tmp_path: Path) -> None:
    """What a history missing only its beginning read is the latest word on it; records missing after
    what was read (a gap, a missing tail, a snapshot without its footer) make it only as of then."""
    start_only = tmp_path / "start" / "__cluster_metadata-0"
    start_only.parent.mkdir()
    write_log(start_only, 500, [[encode_topic("a", uuid_bytes(1))]])
    gap = tmp_path / "gap" / "__cluster_metadata-0"
    gap.parent.mkdir()
    write_log(gap, 500, [[encode_topic("a", uuid_bytes(1))]])
    write_log(gap, 700, [[encode_topic("b", uuid_bytes(2))]])
    tail = snapshot_only(tmp_path / "tail")
    (tail / f"{66046:020d}.snapshot").write_bytes(b"")

    found = {name: load_metadata_state(d) for name, d in (("start", start_only), ("gap", gap), ("tail", tail))}

    assert {name: (s.complete, s.later_records_missing) for name, s in found.items()} == {
        "start": (False, False), "gap": (False, True), "tail": (False, True)}
    assert not load_metadata_state(snapshot_only(tmp_path / "whole")).later_records_missing
