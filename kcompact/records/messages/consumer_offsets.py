"""Decode ``__consumer_offsets`` keys and values, as ``kafka-dump-log --offsets-decoder`` shows them.

Why: ``__consumer_offsets`` is the compacted topic every cluster has; ``dump`` and ``inspect`` name
its keys (which group, topic and partition a record is about) so a user can see what compaction
keeps. Kafka's group coordinator writes them with its generated message classes:

Key (classic encoding: int16 version, then strings as int16 length + UTF-8)::

    version 0, 1   OffsetCommitKey     group string, topic string, partition int32
    version 2      GroupMetadataKey    group string
    version 3+     newer coordinator records (KIP-848 consumer groups, share groups) - kept raw

Value (int16 version, then the body; a null value is a tombstone)::

    OffsetCommitValue   offset int64, [v3+ leader_epoch int32], metadata string,
                        commit_timestamp int64, [v1 only: expire_timestamp int64];
                        v4+ is flexible (compact strings, trailing tagged fields)
    GroupMetadataValue  protocol_type string, generation int32, protocol string?, leader string?,
                        [v2+ current_state_timestamp int64], members []MemberMetadata;
                        v4+ is flexible
    MemberMetadata      member_id, [v3+ group_instance_id?], client_id, client_host,
                        [v1+ rebalance_timeout int32], session_timeout int32,
                        subscription bytes, assignment bytes

Members are summarised: the subscription and assignment bytes are reported by size only.
Unknown key or value versions become :class:`UnknownOffsetsRecord` with the bytes after the version.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

from kcompact.errors import CorruptRecordError
from kcompact.records.messages.reader import INT16, INT32, INT64, MessageReader
from kcompact.records.varint import Buffer
from kcompact.value import frozen

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
MAX_OFFSET_COMMIT_VALUE_VERSION = 4
MAX_GROUP_METADATA_VALUE_VERSION = 4
FIRST_FLEXIBLE_VALUE_VERSION = 4


@frozen
class OffsetCommitKey:
    """Key of a committed offset (key versions 0 and 1)."""

    version: int
    group: str
    topic: str
    partition: int


@frozen
class GroupMetadataKey:
    """Key of a group's metadata (key version 2)."""

    version: int
    group: str


@frozen
class UnknownOffsetsRecord:
    """A key or value of a version this module does not decode; ``data`` follows the version."""

    version: int
    data: bytes


@frozen
class OffsetCommitValue:
    """A committed offset; ``leader_epoch`` -1 and ``expire_timestamp`` None when not stored."""

    version: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None


@frozen
class MemberSummary:
    """One member of a classic group; subscription and assignment by size only."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription_size_in_bytes: int
    assignment_size_in_bytes: int


@frozen
class GroupMetadataValue:
    """A classic group's state: protocol, generation, leader and members."""

    version: int
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberSummary, ...]


OffsetsKey = OffsetCommitKey | GroupMetadataKey | UnknownOffsetsRecord
OffsetsValue = OffsetCommitValue | GroupMetadataValue | UnknownOffsetsRecord
_ItemT = TypeVar("_ItemT", OffsetsKey, OffsetsValue)


def as_json_dict(item: OffsetsKey | OffsetsValue | None) -> dict[str, Any] | None:
    """``{"version": n, "data": {...}}`` with camelCase names (None for a tombstone value)."""
    if item is None:
        return None
    if isinstance(item, UnknownOffsetsRecord):
        return {"version": item.version, "data": item.data.hex()}
    data = {_camel(name): getattr(item, name) for name in _field_names(item) if name != "version"}
    if isinstance(item, GroupMetadataValue):
        data["members"] = [
            {_camel(name): getattr(member, name) for name in _field_names(member)}
            for member in item.members
        ]
    return {"version": item.version, "data": data}


def _field_names(item: DataclassInstance) -> list[str]:
    return [f.name for f in fields(item)]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _version(buf: Buffer | None, what: str) -> tuple[int, MessageReader]:
    if buf is None or len(buf) < INT16.size:
        found = "null" if buf is None else f"{len(buf)} bytes"
        raise CorruptRecordError(f"{what} too short; expected a 2-byte version, found {found}",
                                 position=0)  # fmt: skip
    reader = MessageReader(buf, 0, len(buf), flexible=False)
    return reader.fixed(INT16, f"{what} version"), reader


def _finish(reader: MessageReader, item: _ItemT, what: str) -> _ItemT:
    if reader.flexible:
        reader.tagged_fields()
    if reader.position != reader.end:
        raise CorruptRecordError(
            f"{what} has trailing bytes; expected it to end, found "
            f"{reader.end - reader.position} more bytes", position=reader.position)
    return item


def decode_offsets_key(key: Buffer | None) -> OffsetsKey:
    """Decode the key of a ``__consumer_offsets`` record.

    Args:
        key: the record's key bytes.

    Returns:
        An :class:`OffsetCommitKey`, a :class:`GroupMetadataKey`, or an
        :class:`UnknownOffsetsRecord` for newer key versions.

    Raises:
        CorruptRecordError: a null or short key, or a known version that does not parse.
    """
    version, r = _version(key, "offsets key")
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        item: OffsetsKey = OffsetCommitKey(
            version, r.string("OffsetCommitKey.group"), r.string("OffsetCommitKey.topic"),
            r.fixed(INT32, "OffsetCommitKey.partition"))
    elif version == GROUP_METADATA_KEY_VERSION:
        item = GroupMetadataKey(version, r.string("GroupMetadataKey.group"))
    else:
        return UnknownOffsetsRecord(version, bytes(memoryview(r.buf)[r.position :]))
    return _finish(r, item, type(item).__name__)


def _offset_commit_value(r: MessageReader, version: int) -> OffsetCommitValue:
    what = "OffsetCommitValue"
    offset = r.fixed(INT64, f"{what}.offset")
    leader_epoch = r.fixed(INT32, f"{what}.leader_epoch") if version >= 3 else -1
    metadata = r.string(f"{what}.metadata")
    commit_timestamp = r.fixed(INT64, f"{what}.commit_timestamp")
    expire = r.fixed(INT64, f"{what}.expire_timestamp") if version == 1 else None
    return OffsetCommitValue(version, offset, leader_epoch, metadata, commit_timestamp, expire)


def _member(r: MessageReader, version: int) -> MemberSummary:
    what = "MemberMetadata"
    member_id = r.string(f"{what}.member_id")
    instance = r.nullable_string(f"{what}.group_instance_id") if version >= 3 else None
    client = (r.string(f"{what}.client_id"), r.string(f"{what}.client_host"))
    rebalance = r.fixed(INT32, f"{what}.rebalance_timeout") if version >= 1 else -1
    session = r.fixed(INT32, f"{what}.session_timeout")
    sizes = [len(r.nullable_bytes(f"{what}.{name}") or b"") for name in ("subscription",
                                                                          "assignment")]
    if r.flexible:
        r.tagged_fields()  # each member struct ends with its own tagged fields
    return MemberSummary(member_id, instance, *client, rebalance, session, *sizes)


def _group_metadata_value(r: MessageReader, version: int) -> GroupMetadataValue:
    what = "GroupMetadataValue"
    protocol_type = r.string(f"{what}.protocol_type")
    generation = r.fixed(INT32, f"{what}.generation")
    protocol, leader = r.nullable_string(f"{what}.protocol"), r.nullable_string(f"{what}.leader")
    timestamp = r.fixed(INT64, f"{what}.current_state_timestamp") if version >= 2 else -1
    members = r.array(lambda m: _member(m, version), f"{what}.members")
    return GroupMetadataValue(version, protocol_type, generation, protocol, leader, timestamp,
                              members)  # fmt: skip


def decode_offsets_value(key: OffsetsKey, value: Buffer | None) -> OffsetsValue | None:
    """Decode the value of a ``__consumer_offsets`` record, chosen by its decoded key.

    Args:
        key: the record's key, from :func:`decode_offsets_key`.
        value: the record's value bytes; None for a tombstone.

    Returns:
        None for a tombstone, an :class:`OffsetCommitValue` or :class:`GroupMetadataValue`, or an
        :class:`UnknownOffsetsRecord` for an unknown key kind or value version.

    Raises:
        CorruptRecordError: a short value, or a known version that does not parse.
    """
    if value is None:
        return None
    version, r = _version(value, "offsets value")
    r.flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    if isinstance(key, OffsetCommitKey) and 0 <= version <= MAX_OFFSET_COMMIT_VALUE_VERSION:
        item: OffsetsValue = _offset_commit_value(r, version)
    elif isinstance(key, GroupMetadataKey) and 0 <= version <= MAX_GROUP_METADATA_VALUE_VERSION:
        item = _group_metadata_value(r, version)
    else:
        return UnknownOffsetsRecord(version, bytes(memoryview(value)[r.position :]))
    return _finish(r, item, type(item).__name__)
