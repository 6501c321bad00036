"""Decode the records of the KRaft metadata log (``__cluster_metadata-0``) and its snapshots.

Why: in KRaft mode a topic's config overrides, its id and the broker's dynamic configs live only in
the metadata log, so resolving the config the cleaner must honour means reading it. Only the record
kinds that matter for that (and a few cheap ones for ``dump``) are decoded; every other api key, or a
version of a known one that this module does not know, becomes an :class:`UnknownMetadataRecord`
carrying its bytes - never an error.

A metadata record's *value* (its key is null)::

    uvarint  frame_version   1 (Kafka's AbstractApiMessageSerde DEFAULT_FRAME_VERSION)
    uvarint  api_key         which record: 2 = TopicRecord, 4 = ConfigRecord, ...
    uvarint  version         the record's schema version
    ...      body            Kafka's generated "flexible version" message encoding

The body is read with :class:`~kcompact.records.messages.reader.MessageReader`, whose docstring
gives the layout; tagged fields this module does not know are skipped. The decoded values are the
dataclasses of :mod:`kcompact.config.kraft.record_types`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

from kcompact.config.kraft.record_types import (
    API_KEY_NAMES,
    BrokerEndpoint,
    BrokerFeature,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnknownMetadataRecord,
)
from kcompact.errors import CorruptRecordError
from kcompact.records.messages.reader import (
    INT8,
    INT16,
    INT32,
    INT64,
    UINT16,
    MessageReader,
)
from kcompact.records.varint import Buffer

__all__ = ["DECODED_VERSIONS", "METADATA_FRAME_VERSION", "decode_metadata_frame", "decode_metadata_record"]

T = TypeVar("T")

METADATA_FRAME_VERSION = 1


def _int32(r: MessageReader) -> int:
    return r.fixed(INT32, "int32 array element")


def _uuid(r: MessageReader) -> str:
    return r.uuid("uuid array element")


def _tag(tags: dict[int, MessageReader], tag: int, read: Callable[[MessageReader], T], default: T) -> T:
    """Decode one tagged field, which must fill exactly the size it declared."""
    reader = tags.get(tag)
    if reader is None:
        return default
    value = read(reader)
    if reader.position != reader.end:
        raise CorruptRecordError(
            f"tagged field {tag} has trailing bytes; expected it to end at {reader.end}, "
            f"found {reader.end - reader.position} bytes left", position=reader.position)
    return value


def _done(r: MessageReader, record: T) -> T:
    """Read the tagged-fields section of a record whose tags are all unknown to us."""
    r.tagged_fields()
    return record


def _topic(r: MessageReader, v: int) -> TopicRecord:
    return _done(r, TopicRecord(v, r.string("TopicRecord.name"), r.uuid("TopicRecord.topic_id")))


def _config(r: MessageReader, v: int) -> ConfigRecord:
    return _done(r, ConfigRecord(
        v, r.fixed(INT8, "ConfigRecord.resource_type"), r.string("ConfigRecord.resource_name"),
        r.string("ConfigRecord.name"), r.nullable_string("ConfigRecord.value")))


def _remove_topic(r: MessageReader, v: int) -> RemoveTopicRecord:
    return _done(r, RemoveTopicRecord(v, r.uuid("RemoveTopicRecord.topic_id")))


def _feature_level(r: MessageReader, v: int) -> FeatureLevelRecord:
    return _done(r, FeatureLevelRecord(
        v, r.string("FeatureLevelRecord.name"), r.fixed(INT16, "FeatureLevelRecord.feature_level")))


def _partition(r: MessageReader, v: int) -> PartitionRecord:
    what = "PartitionRecord"
    head = (r.fixed(INT32, f"{what}.partition_id"), r.uuid(f"{what}.topic_id"),
            r.array(_int32, f"{what}.replicas"), r.array(_int32, f"{what}.isr"),
            r.nullable_array(_int32, f"{what}.removing_replicas"),
            r.nullable_array(_int32, f"{what}.adding_replicas"), r.fixed(INT32, f"{what}.leader"))
    epochs = (r.fixed(INT32, f"{what}.leader_epoch"), r.fixed(INT32, f"{what}.partition_epoch"))
    directories = r.array(_uuid, f"{what}.directories") if v >= 1 else ()
    tags = r.tagged_fields()
    elr: tuple[int, ...] | None = None
    recovery = _tag(tags, 0, lambda t: t.fixed(INT8, "leader_recovery_state"), 0)
    if v >= 2:
        elr = _tag(tags, 1, lambda t: t.nullable_array(_int32, "eligible_leader_replicas"), elr)
    last = _tag(tags, 2, lambda t: t.nullable_array(_int32, "last_known_elr"), None) if v >= 2 else None
    return PartitionRecord(v, *head, recovery, *epochs, directories, elr, last)


def _partition_change(r: MessageReader, v: int) -> PartitionChangeRecord:
    partition_id = r.fixed(INT32, "PartitionChangeRecord.partition_id")
    topic_id = r.uuid("PartitionChangeRecord.topic_id")
    tags = r.tagged_fields()

    def ints(tag: int, name: str) -> tuple[int, ...] | None:
        return _tag(tags, tag, lambda t: t.nullable_array(_int32, name), None)

    return PartitionChangeRecord(
        v, partition_id, topic_id, ints(0, "isr"),
        _tag(tags, 1, lambda t: t.fixed(INT32, "leader"), -2),
        ints(2, "replicas"), ints(3, "removing_replicas"), ints(4, "adding_replicas"),
        _tag(tags, 5, lambda t: t.fixed(INT8, "leader_recovery_state"), -1),
        ints(6, "eligible_leader_replicas") if v >= 2 else None,
        ints(7, "last_known_elr") if v >= 2 else None,
        _tag(tags, 8, lambda t: t.nullable_array(_uuid, "directories"), None) if v >= 1 else None,
    )


def _endpoint(r: MessageReader) -> BrokerEndpoint:
    return _done(r, BrokerEndpoint(r.string("BrokerEndpoint.name"), r.string("BrokerEndpoint.host"),
                                   r.fixed(UINT16, "BrokerEndpoint.port"),
                                   r.fixed(INT16, "BrokerEndpoint.security_protocol")))


def _feature(r: MessageReader) -> BrokerFeature:
    return _done(r, BrokerFeature(r.string("BrokerFeature.name"),
                                  r.fixed(INT16, "min_supported_version"),
                                  r.fixed(INT16, "max_supported_version")))


def _register_broker(r: MessageReader, v: int) -> RegisterBrokerRecord:
    what = "RegisterBrokerRecord"
    broker_id = r.fixed(INT32, f"{what}.broker_id")
    migrating = r.boolean(f"{what}.is_migrating_zk_broker") if v >= 2 else False
    ident = (r.uuid(f"{what}.incarnation_id"), r.fixed(INT64, f"{what}.broker_epoch"))
    lists = (r.array(_endpoint, f"{what}.end_points"), r.array(_feature, f"{what}.features"))
    rack, fenced = r.nullable_string(f"{what}.rack"), r.boolean(f"{what}.fenced")
    shutdown = r.boolean(f"{what}.in_controlled_shutdown") if v >= 1 else False
    tags = r.tagged_fields()
    log_dirs: tuple[str, ...] = ()
    if v >= 3:
        log_dirs = _tag(tags, 0, lambda t: t.array(_uuid, "log_dirs"), log_dirs)
    return RegisterBrokerRecord(v, broker_id, migrating, *ident, *lists, rack, fenced, shutdown,
                                log_dirs)


# api key -> (highest version decoded, decoder of the body)
_DECODERS: dict[int, tuple[int, Callable[[MessageReader, int], MetadataRecord]]] = {
    0: (3, _register_broker), 2: (0, _topic), 3: (2, _partition), 4: (0, _config),
    5: (2, _partition_change), 9: (0, _remove_topic), 12: (0, _feature_level),
}  # fmt: skip


# api key -> the highest version decoded: a record of such a kind and version is typed, any other generic
DECODED_VERSIONS: dict[int, int] = {api_key: highest for api_key, (highest, _) in _DECODERS.items()}


def decode_metadata_frame(value: Buffer | None) -> tuple[int, int, int]:
    """Read the frame of a metadata record's value: which record it is, not its body.

    Args:
        value: the record's value bytes.

    Returns:
        ``(api_key, version, body position)``.

    Raises:
        CorruptRecordError: a null value, a frame version other than 1, or a frame that runs past the
            value; ``position`` is relative to the value.
    """
    return _frame(_framed(value))


def _framed(value: Buffer | None) -> Buffer:
    if value is None:
        raise CorruptRecordError("metadata record has a null value; expected a framed record, "
                                 "found null")  # fmt: skip
    return value


def _frame(value: Buffer) -> tuple[int, int, int]:
    reader = MessageReader(value, 0, len(value))
    frame = reader.uvarint()
    if frame != METADATA_FRAME_VERSION:
        raise CorruptRecordError(
            f"unknown metadata record frame version; expected {METADATA_FRAME_VERSION}, "
            f"found {frame}", position=0)
    api_key, version = reader.uvarint(), reader.uvarint()
    return api_key, version, reader.position


def decode_metadata_record(value: Buffer | None) -> MetadataRecord:
    """Decode the value of one record of the metadata log or of a KRaft snapshot.

    Args:
        value: the record's value bytes.

    Returns:
        A typed record for the kinds and versions this module knows, else an
        :class:`UnknownMetadataRecord` with the body bytes.

    Raises:
        CorruptRecordError: a null value, a frame version other than 1, a body that does not parse
            or leaves bytes over; ``position`` is relative to the value.
    """
    data = _framed(value)
    api_key, version, body = _frame(data)
    decoder = _DECODERS.get(api_key)
    if decoder is None or version > decoder[0]:
        return UnknownMetadataRecord(api_key, version, API_KEY_NAMES.get(api_key),
                                     bytes(memoryview(data)[body:]))
    reader = MessageReader(data, body, len(data))
    try:
        record = decoder[1](reader, version)
    except (struct.error, IndexError) as err:  # defensive: MessageReader checks bounds itself
        raise CorruptRecordError(f"{API_KEY_NAMES[api_key]} does not parse; expected Kafka's "
                                 f"encoding, found {err}", position=reader.position) from err
    if reader.position != reader.end:
        raise CorruptRecordError(
            f"{API_KEY_NAMES[api_key]} v{version} has trailing bytes; expected the record to end, "
            f"found {reader.end - reader.position} more bytes", position=reader.position)
    return record
