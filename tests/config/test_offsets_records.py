"""__consumer_offsets key/value decoding: broker-written partitions, hand-built versions, corruption."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.errors import CorruptRecordError
from kcompact.records.batch import iter_batches
from kcompact.records.messages.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberSummary,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownOffsetsRecord,
    as_json_dict,
    decode_offsets_key,
    decode_offsets_value,
)
from kcompact.records.record import decode_records
from tests.conftest import real_fixture


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def b32(raw: bytes) -> bytes:
    return struct.pack(">i", len(raw)) + raw


def compact(raw: bytes | None) -> bytes:
    return b"\x00" if raw is None else bytes([len(raw) + 1]) + raw  # short test values only


def offset_key(version: int, group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", version) + s16(group) + s16(topic) + struct.pack(">i", partition)


GROUP_KEY = GroupMetadataKey(2, "g")
COMMIT_KEY = OffsetCommitKey(1, "g", "t", 0)


def test_keys() -> None:
    assert decode_offsets_key(offset_key(0, "grp", "orders", 7)) == OffsetCommitKey(
        0, "grp", "orders", 7)
    assert decode_offsets_key(struct.pack(">h", 2) + s16("grp")) == GroupMetadataKey(2, "grp")
    assert decode_offsets_key(struct.pack(">h", 5) + b"\x01\x02") == UnknownOffsetsRecord(
        5, b"\x01\x02")


@pytest.mark.parametrize(
    ("version", "body", "expected"),
    [
        (0, struct.pack(">q", 42) + s16("m") + struct.pack(">q", 1000),
         OffsetCommitValue(0, 42, -1, "m", 1000, None)),
        (1, struct.pack(">q", 42) + s16("") + struct.pack(">qq", 1000, 2000),
         OffsetCommitValue(1, 42, -1, "", 1000, 2000)),
        (3, struct.pack(">qi", 42, 5) + s16("x") + struct.pack(">q", 1000),
         OffsetCommitValue(3, 42, 5, "x", 1000, None)),
        (4, struct.pack(">qi", 42, 5) + compact(b"meta") + struct.pack(">q", 1000)
         + b"\x01\x00\x10" + bytes(16),
         OffsetCommitValue(4, 42, 5, "meta", 1000, None)),
    ],
)  # fmt: skip
def test_offset_commit_values(version: int, body: bytes, expected: OffsetCommitValue) -> None:
    assert decode_offsets_value(COMMIT_KEY, struct.pack(">h", version) + body) == expected


def test_group_metadata_v1_and_flexible_v4() -> None:
    v1 = (struct.pack(">h", 1) + s16("consumer") + struct.pack(">i", 3) + s16("range") + s16(None)
          + struct.pack(">i", 1) + s16("m1") + s16("c1") + s16("/h") + struct.pack(">ii", 30, 10)
          + b32(b"sub") + b32(b"assign"))  # fmt: skip
    assert decode_offsets_value(GROUP_KEY, v1) == GroupMetadataValue(
        1, "consumer", 3, "range", None, -1, (MemberSummary("m1", None, "c1", "/h", 30, 10, 3, 6),))
    member = (compact(b"m1") + compact(b"inst") + compact(b"c1") + compact(b"/h")
              + struct.pack(">ii", 30, 10) + compact(b"") + compact(None) + b"\x00")  # fmt: skip
    v4 = (struct.pack(">h", 4) + compact(b"consumer") + struct.pack(">i", 3) + compact(None)
          + compact(b"m1") + struct.pack(">q", 77) + b"\x02" + member + b"\x00")  # fmt: skip
    value = decode_offsets_value(GROUP_KEY, v4)
    assert value == GroupMetadataValue(
        4, "consumer", 3, None, "m1", 77, (MemberSummary("m1", "inst", "c1", "/h", 30, 10, 0, 0),))
    assert as_json_dict(value) == {"version": 4, "data": {
        "protocolType": "consumer", "generation": 3, "protocol": None, "leader": "m1",
        "currentStateTimestamp": 77, "members": [{
            "memberId": "m1", "groupInstanceId": "inst", "clientId": "c1", "clientHost": "/h",
            "rebalanceTimeout": 30, "sessionTimeout": 10, "subscriptionSizeInBytes": 0,
            "assignmentSizeInBytes": 0}]}}  # fmt: skip


def test_tombstones_and_unknown_value_versions() -> None:
    assert decode_offsets_value(COMMIT_KEY, None) is None and as_json_dict(None) is None
    assert decode_offsets_value(COMMIT_KEY, b"\x00\x09abc") == UnknownOffsetsRecord(9, b"abc")
    unknown_key = UnknownOffsetsRecord(3, b"")
    assert decode_offsets_value(unknown_key, b"\x00\x00zz") == UnknownOffsetsRecord(0, b"zz")


@given(group=st.text(max_size=30), topic=st.text(max_size=30),
       partition=st.integers(-(2**31), 2**31 - 1), version=st.sampled_from([0, 1]))  # fmt: skip
def test_offset_key_round_trip(group: str, topic: str, partition: int, version: int) -> None:
    key = decode_offsets_key(offset_key(version, group, topic, partition))
    assert key == OffsetCommitKey(version, group, topic, partition)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        (b"\x00", None, "offsets key too short; expected a 2-byte version, found 1 bytes"),
        (None, None, "found null"),
        (offset_key(1, "g", "t", 0)[:-1], None, "OffsetCommitKey.partition runs past the end"),
        (offset_key(1, "g", "t", 0) + b"!", None, "OffsetCommitKey has trailing bytes"),
        (struct.pack(">hh", 2, -1), None, "GroupMetadataKey.group is null"),
        (struct.pack(">hh", 2, 5) + b"ab", None, "GroupMetadataKey.group runs past the end"),
        (offset_key(1, "g", "t", 0), struct.pack(">hq", 1, 5), "OffsetCommitValue.metadata"),
        (offset_key(1, "g", "t", 0), struct.pack(">hqi", 4, 5, 0) + b"\x01" + bytes(8) + b"\x01",
         "varint runs past the end of the record"),
        (struct.pack(">h", 2) + s16("g"), struct.pack(">h", 0) + s16("c") + struct.pack(">i", 1)
         + s16(None) + s16(None) + struct.pack(">i", 1000), "declares 1000 elements"),
    ],
)  # fmt: skip
def test_corrupt_keys_and_values(key: bytes | None, value: bytes | None, fragment: str) -> None:
    with pytest.raises(CorruptRecordError) as info:
        decode_offsets_value(decode_offsets_key(key), value)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("folder", "partition"),
    [("kraft37-consumer-offsets", "__consumer_offsets-6"),
     ("kraft37-cleaned-logdir", "__consumer_offsets-31"),
     ("kraft37-cleaned-logdir", "__consumer_offsets-44"),
     ("bitnami2024-rolled-logdir", "*"),
     ("confluent512-lz4-logdir", "*")],
)  # fmt: skip
def test_broker_written_offsets_partitions_decode(folder: str, partition: str) -> None:
    root = real_fixture(folder)
    seen: set[str] = set()
    for log in sorted(root.glob(f"__consumer_offsets-{partition.removeprefix('__consumer_offsets-')}"
                                "/*.log")):  # fmt: skip
        for batch in iter_batches(log.read_bytes()):
            if batch.is_control:
                continue
            for record in decode_records(batch):  # type: ignore[arg-type]
                key = decode_offsets_key(record.key)
                value = decode_offsets_value(key, record.value)
                json.dumps([as_json_dict(key), as_json_dict(value)])
                assert not isinstance(key, UnknownOffsetsRecord)
                assert not isinstance(value, UnknownOffsetsRecord)
                seen.add(type(value).__name__)
    assert "OffsetCommitValue" in seen or "GroupMetadataValue" in seen
