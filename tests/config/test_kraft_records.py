"""KRaft metadata record decoding: hand-built records, the broker's metadata logs, corruption.

The ``encode_*`` helpers here build record values by Kafka's flexible-version rules; the metadata
state tests import them too.
"""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.config.kraft.record_types import (
    ConfigRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnknownMetadataRecord,
)
from kcompact.config.kraft.records import decode_metadata_record
from kcompact.errors import CorruptRecordError
from kcompact.records.batch import iter_batches
from kcompact.records.messages.reader import format_uuid
from kcompact.records.record import decode_records
from tests.conftest import real_fixture
from tests.encoders import encode_unsigned_varint as uv


def cstr(text: str | None) -> bytes:
    """Compact (nullable) string."""
    if text is None:
        return b"\x00"
    raw = text.encode()
    return uv(len(raw) + 1) + raw


def carray(items: list[int] | None) -> bytes:
    """Compact (nullable) int32 array."""
    if items is None:
        return b"\x00"
    return uv(len(items) + 1) + b"".join(struct.pack(">i", i) for i in items)


def tags(fields: dict[int, bytes] | None = None) -> bytes:
    fields = fields or {}
    return uv(len(fields)) + b"".join(uv(t) + uv(len(v)) + v for t, v in sorted(fields.items()))


def frame(api_key: int, version: int, body: bytes) -> bytes:
    return uv(1) + uv(api_key) + uv(version) + body


def uuid_bytes(n: int) -> bytes:
    return n.to_bytes(16, "big")


def encode_topic(name: str, topic_id: bytes) -> bytes:
    return frame(2, 0, cstr(name) + topic_id + tags())


def encode_config(resource_type: int, resource: str, key: str, value: str | None) -> bytes:
    return frame(4, 0, struct.pack(">b", resource_type) + cstr(resource) + cstr(key) + cstr(value)
                 + tags())  # fmt: skip


def encode_remove_topic(topic_id: bytes) -> bytes:
    return frame(9, 0, topic_id + tags())


def encode_partition(topic_id: bytes, partition: int, replicas: tuple[int, ...] = (1,),
                     isr: tuple[int, ...] = (1,)) -> bytes:
    body = (struct.pack(">i", partition) + topic_id + carray(list(replicas)) + carray(list(isr)) + carray([])
            + carray([]) + struct.pack(">iii", replicas[0], 0, 0) + uv(len(replicas) + 1)
            + uuid_bytes(7) * len(replicas) + tags())  # fmt: skip
    return frame(3, 1, body)


def encode_partition_change(topic_id: bytes, partition: int, *, isr: tuple[int, ...] | None = None,
                            replicas: tuple[int, ...] | None = None, leader: int | None = None) -> bytes:
    """A PartitionChangeRecord v0 changing only the fields given (tags 0 isr, 1 leader, 2 replicas)."""
    fields: dict[int, bytes] = {}
    if isr is not None:
        fields[0] = carray(list(isr))
    if leader is not None:
        fields[1] = struct.pack(">i", leader)
    if replicas is not None:
        fields[2] = carray(list(replicas))
    return frame(5, 0, struct.pack(">i", partition) + topic_id + tags(fields))


def encode_feature_level(name: str, level: int) -> bytes:
    return frame(12, 0, cstr(name) + struct.pack(">h", level) + tags())


def test_uuid_is_printed_like_kafka() -> None:
    assert format_uuid(uuid_bytes(1)) == "AAAAAAAAAAAAAAAAAAAAAQ"  # the metadata topic's id
    assert format_uuid(bytes.fromhex("8129dfa446ed41f483a71336961127f4")) == "gSnfpEbtQfSDpxM2lhEn9A"


def test_decode_hand_built_records() -> None:
    tid = uuid_bytes(0xABC)
    assert decode_metadata_record(encode_topic("orders", tid)) == TopicRecord(
        0, "orders", format_uuid(tid))
    assert decode_metadata_record(encode_config(2, "orders", "cleanup.policy", None)) == (
        ConfigRecord(0, 2, "orders", "cleanup.policy", None))
    assert decode_metadata_record(encode_remove_topic(tid)) == RemoveTopicRecord(0, format_uuid(tid))
    assert decode_metadata_record(encode_feature_level("kraft.version", 1)) == (
        FeatureLevelRecord(0, "kraft.version", 1))
    part = decode_metadata_record(encode_partition(tid, 3))
    assert isinstance(part, PartitionRecord)
    assert (part.partition_id, part.replicas, part.leader, part.directories) == (
        3, (1,), 1, (format_uuid(uuid_bytes(7)),))


def test_partition_change_tagged_fields_and_unknown_tags() -> None:
    body = struct.pack(">i", 2) + uuid_bytes(9) + tags(
        {0: carray([1, 2]), 1: struct.pack(">i", 2), 5: b"\x01", 6: carray([3]), 40: b"xyz"})
    record = decode_metadata_record(frame(5, 2, body))
    assert isinstance(record, PartitionChangeRecord)
    assert (record.isr, record.leader, record.leader_recovery_state) == ((1, 2), 2, 1)
    assert (record.eligible_leader_replicas, record.replicas, record.directories) == ((3,), None, None)


def test_unknown_api_keys_and_versions_stay_generic() -> None:
    assert decode_metadata_record(frame(20, 0, b"\x00")) == UnknownMetadataRecord(
        20, 0, "NoOpRecord", b"\x00")
    future = decode_metadata_record(frame(2, 7, b"anything"))
    assert future == UnknownMetadataRecord(2, 7, "TopicRecord", b"anything")
    odd = decode_metadata_record(frame(300, 0, b""))
    assert odd.as_json_dict() == {"type": "UNKNOWN_RECORD_300", "apiKey": 300, "version": 0,
                                  "data": ""}  # fmt: skip


def test_as_json_dict_matches_kafka_shape() -> None:
    record = decode_metadata_record(encode_topic("t", uuid_bytes(1)))
    assert json.loads(json.dumps(record.as_json_dict())) == {
        "type": "TOPIC_RECORD", "version": 0,
        "data": {"name": "t", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"}}  # fmt: skip


@given(name=st.text(max_size=40), value=st.none() | st.text(max_size=40),
       resource_type=st.integers(-128, 127))  # fmt: skip
def test_config_record_round_trip(name: str, value: str | None, resource_type: int) -> None:
    decoded = decode_metadata_record(encode_config(resource_type, "r", name, value))
    assert decoded == ConfigRecord(0, resource_type, "r", name, value)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (None, "null value"),
        (frame(2, 0, b"")[:0], "varint runs past the end of the record"),
        (b"\x00\x02\x00" + cstr("t") + uuid_bytes(1) + b"\x00", "frame version; expected 1, found 0"),
        (encode_topic("t", uuid_bytes(1))[:-5], "TopicRecord.topic_id runs past the end"),
        (encode_topic("t", uuid_bytes(1)) + b"\x00", "TopicRecord v0 has trailing bytes"),
        (frame(2, 0, b"\x00" + uuid_bytes(1) + b"\x00"), "TopicRecord.name is null"),
        (frame(2, 0, b"\x03\xff\xfe" + uuid_bytes(1) + b"\x00"), "TopicRecord.name is not UTF-8"),
        (frame(3, 0, b"\x00\x00\x00\x01" + uuid_bytes(1) + b"\xff\xff\x0f"), "declares"),
        (frame(2, 0, cstr("t") + uuid_bytes(1) + b"\x01\x05\x09ab"), "tagged field 5 runs past"),
        (frame(2, 0, cstr("t") + uuid_bytes(1) + b"\x02\x05\x00\x01\x00"), "out of order"),
        (frame(5, 0, b"\x00" * 20 + tags({1: b"\x00\x00\x00\x01\x02"})), "tagged field 1 has trailing"),
        (frame(4, 0, b"\x02\x02t\x02k\xff\xff\xff\xff\xff\x00"), "does not terminate"),
    ],
)
def test_malformed_records_raise_corrupt_record_error(value: bytes | None, fragment: str) -> None:
    with pytest.raises(CorruptRecordError) as info:
        decode_metadata_record(value)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "folder", ["kraft37-consumer-offsets", "kraft37-cleaned-logdir", "bitnami2024-rolled-logdir"]
)
def test_broker_metadata_logs_decode_fully(folder: str) -> None:
    directory = real_fixture(folder, "__cluster_metadata-0")
    kinds: set[str] = set()
    for log in sorted(directory.glob("*.log")):
        for batch in iter_batches(log.read_bytes()):
            if batch.is_control:
                continue
            for record in decode_records(batch):  # type: ignore[arg-type]
                decoded = decode_metadata_record(record.value)
                json.dumps(decoded.as_json_dict())
                kinds.add(type(decoded).__name__)
                if isinstance(decoded, UnknownMetadataRecord):
                    assert decoded.name is not None, decoded  # every api key is one Kafka knows
                    assert decoded.api_key not in (0, 2, 3, 4, 5, 9, 12)
    assert "PartitionChangeRecord" in kinds
    if folder != "kraft37-cleaned-logdir":
        assert {"TopicRecord", "ConfigRecord", "PartitionRecord", "RegisterBrokerRecord",
                "FeatureLevelRecord"} <= kinds  # fmt: skip
