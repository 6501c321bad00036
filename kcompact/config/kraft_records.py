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

Flexible-version encoding of the body (every record here is flexible from version 0):
int8/16/32/64 are big-endian two's complement, uint16 big-endian, bool one byte, uuid 16 bytes;
strings and arrays are compact: uvarint ``length + 1`` then the bytes/elements, 0 meaning null;
the body ends with a tagged-fields section: uvarint count, then per field uvarint tag, uvarint size
and ``size`` bytes. Tags are ascending. Tagged fields this module does not know are skipped.

Uuids are kept in the form Kafka prints them: URL-safe base64 of the 16 bytes without padding.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from kcompact.errors import CorruptRecordError
from kcompact.records.varint import Buffer, decode_unsigned_varint

T = TypeVar("T")

METADATA_FRAME_VERSION = 1
INT8 = struct.Struct(">b")  # int8: resource type, recovery state, bool bytes
INT16 = struct.Struct(">h")  # int16: feature levels, security protocol
UINT16 = struct.Struct(">H")  # uint16: port
INT32 = struct.Struct(">i")  # int32: broker ids, partition ids, epochs
INT64 = struct.Struct(">q")  # int64: broker epoch
UUID_SIZE = 16

# ConfigRecord.resource_type values (Kafka's ConfigResource.Type ids)
RESOURCE_TYPE_TOPIC = 2
RESOURCE_TYPE_BROKER = 4

API_KEY_NAMES: dict[int, str] = {
    0: "RegisterBrokerRecord", 1: "UnregisterBrokerRecord", 2: "TopicRecord",
    3: "PartitionRecord", 4: "ConfigRecord", 5: "PartitionChangeRecord",
    7: "FenceBrokerRecord", 8: "UnfenceBrokerRecord", 9: "RemoveTopicRecord",
    10: "DelegationTokenRecord", 11: "UserScramCredentialRecord", 12: "FeatureLevelRecord",
    14: "ClientQuotaRecord", 15: "ProducerIdsRecord", 16: "RemoveFeatureLevelRecord",
    17: "BrokerRegistrationChangeRecord", 18: "AccessControlEntryRecord",
    19: "RemoveAccessControlEntryRecord", 20: "NoOpRecord", 21: "ZkMigrationStateRecord",
    22: "RemoveUserScramCredentialRecord", 23: "BeginTransactionRecord",
    24: "EndTransactionRecord", 25: "AbortTransactionRecord", 26: "RemoveDelegationTokenRecord",
    27: "RegisterControllerRecord", 28: "ClearElrRecord", 29: "UnregisterControllerRecord",
}  # fmt: skip


def format_uuid(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without ``=`` padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def parse_uuid(text: str) -> bytes:
    """Inverse of :func:`format_uuid`; raises ValueError for anything but 16 bytes."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != UUID_SIZE:
        raise ValueError(f"uuid must be 16 bytes, found {len(raw)}")
    return raw


class MessageReader:
    """Reads Kafka's generated message encoding from ``buf[position:end]``.

    ``flexible`` picks compact lengths (uvarint ``n + 1``) over the classic ones (int16 for
    strings, int32 for bytes and arrays, -1 = null); ``offsets_records`` uses the classic form.
    """

    def __init__(self, buf: Buffer, position: int, end: int, *, flexible: bool = True) -> None:
        self.buf = buf
        self.position = position
        self.end = end
        self.flexible = flexible

    def _take(self, size: int, what: str) -> memoryview:
        if size < 0 or self.position + size > self.end:
            raise CorruptRecordError(
                f"{what} runs past the end of the record; expected {size} bytes, "
                f"found {self.end - self.position}", position=self.position)
        view = memoryview(self.buf)[self.position : self.position + size]
        self.position += size
        return view

    def fixed(self, fmt: struct.Struct, what: str) -> int:
        value: int = fmt.unpack(self._take(fmt.size, what))[0]
        return value

    def boolean(self, what: str) -> bool:
        return self.fixed(INT8, what) != 0

    def uuid(self, what: str) -> str:
        return format_uuid(bytes(self._take(UUID_SIZE, what)))

    def uvarint(self) -> int:
        if self.position >= self.end:
            raise CorruptRecordError(
                "varint runs past the end of the record; expected a byte, found none",
                position=self.position)
        value, self.position = decode_unsigned_varint(self.buf, self.position)
        return value

    def _length(self, classic: struct.Struct, what: str) -> int:
        """A length or count: compact uvarint ``n + 1`` or classic ``classic``; -1 = null."""
        if self.flexible:
            return self.uvarint() - 1
        return max(self.fixed(classic, f"{what} length"), -1)

    def nullable_bytes(self, what: str) -> bytes | None:
        length = self._length(INT32, what)
        return None if length < 0 else bytes(self._take(length, what))

    def nullable_string(self, what: str) -> str | None:
        length = self._length(INT16, what)
        if length < 0:
            return None
        try:
            return bytes(self._take(length, what)).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(
                f"{what} is not UTF-8; expected a string, found undecodable bytes",
                position=self.position - length) from None

    def string(self, what: str) -> str:
        start = self.position
        value = self.nullable_string(what)
        if value is None:
            raise CorruptRecordError(
                f"{what} is null; expected a non-nullable string, found length 0", position=start)
        return value

    def nullable_array(self, read: Callable[[MessageReader], T], what: str) -> tuple[T, ...] | None:
        start = self.position
        count = self._length(INT32, what)
        if count < 0:
            return None
        if count > self.end - self.position:  # every element takes at least one byte
            raise CorruptRecordError(
                f"{what} declares {count} elements; expected at most "
                f"{self.end - self.position}, found {count}", position=start)
        return tuple(read(self) for _ in range(count))

    def array(self, read: Callable[[MessageReader], T], what: str) -> tuple[T, ...]:
        start = self.position
        value = self.nullable_array(read, what)
        if value is None:
            raise CorruptRecordError(
                f"{what} is null; expected a non-nullable array, found length 0", position=start)
        return value

    def tagged_fields(self) -> dict[int, MessageReader]:
        """Read the tagged-fields section; one sub-reader per tag, bounded to its size."""
        tags: dict[int, MessageReader] = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            start = self.position
            self._take(size, f"tagged field {tag}")
            if tags and tag <= max(tags):
                raise CorruptRecordError(
                    f"tagged field out of order; expected a tag above {max(tags)}, found {tag}",
                    position=start)
            tags[tag] = MessageReader(self.buf, start, start + size)
        return tags


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


def json_type_name(api_key: int) -> str:
    """Kafka's JSON ``type`` of a record kind: ``TopicRecord`` -> ``TOPIC_RECORD``."""
    name = API_KEY_NAMES.get(api_key)
    if name is None:
        return f"UNKNOWN_RECORD_{api_key}"
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).upper()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _json_fields(value: object) -> dict[str, Any]:
    return {_camel(f.name): _jsonable(getattr(value, f.name)) for f in fields(value)}  # type: ignore[arg-type]


def _jsonable(value: object) -> object:
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    if hasattr(value, "__dataclass_fields__"):
        return _json_fields(value)
    return value


class _JsonMixin:
    """``as_json_dict`` in the shape of Kafka's metadata JSON: type, version, camelCase data."""

    __slots__ = ()
    API_KEY: ClassVar[int]

    def as_json_dict(self) -> dict[str, Any]:
        """Return ``{"type": ..., "version": ..., "data": {...}}`` ready for ``json.dumps``."""
        data = _json_fields(self)
        version = data.pop("version")
        return {"type": json_type_name(self.API_KEY), "version": version, "data": data}


@dataclass(frozen=True, slots=True)
class TopicRecord(_JsonMixin):
    """A topic was created (api key 2): its name and id."""

    API_KEY: ClassVar[int] = 2
    version: int
    name: str
    topic_id: str


@dataclass(frozen=True, slots=True)
class ConfigRecord(_JsonMixin):
    """A dynamic config was set (api key 4); ``value`` None removes it.

    ``resource_type`` 2 = TOPIC (name = topic name), 4 = BROKER (name = node id, "" = cluster default).
    """

    API_KEY: ClassVar[int] = 4
    version: int
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord(_JsonMixin):
    """A topic was deleted (api key 9), with all its partitions."""

    API_KEY: ClassVar[int] = 9
    version: int
    topic_id: str


@dataclass(frozen=True, slots=True)
class PartitionRecord(_JsonMixin):
    """A partition's full state (api key 3); v1 adds directories, v2 the ELR fields."""

    API_KEY: ClassVar[int] = 3
    version: int
    partition_id: int
    topic_id: str
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] | None
    adding_replicas: tuple[int, ...] | None
    leader: int
    leader_recovery_state: int
    leader_epoch: int
    partition_epoch: int
    directories: tuple[str, ...]
    eligible_leader_replicas: tuple[int, ...] | None
    last_known_elr: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord(_JsonMixin):
    """A change to a partition (api key 5); None / -2 / -1 mean "unchanged" as in Kafka."""

    API_KEY: ClassVar[int] = 5
    version: int
    partition_id: int
    topic_id: str
    isr: tuple[int, ...] | None
    leader: int
    replicas: tuple[int, ...] | None
    removing_replicas: tuple[int, ...] | None
    adding_replicas: tuple[int, ...] | None
    leader_recovery_state: int
    eligible_leader_replicas: tuple[int, ...] | None
    last_known_elr: tuple[int, ...] | None
    directories: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One listener of a registered broker."""

    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class BrokerFeature:
    """A feature range a registered broker supports."""

    name: str
    min_supported_version: int
    max_supported_version: int


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(_JsonMixin):
    """A broker registered (api key 0)."""

    API_KEY: ClassVar[int] = 0
    version: int
    broker_id: int
    is_migrating_zk_broker: bool
    incarnation_id: str
    broker_epoch: int
    end_points: tuple[BrokerEndpoint, ...]
    features: tuple[BrokerFeature, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    log_dirs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FeatureLevelRecord(_JsonMixin):
    """A finalized feature level (api key 12), e.g. ``metadata.version``."""

    API_KEY: ClassVar[int] = 12
    version: int
    name: str
    feature_level: int


@dataclass(frozen=True, slots=True)
class UnknownMetadataRecord:
    """A record kind (or version) this module does not decode, kept as its body bytes."""

    api_key: int
    version: int
    name: str | None
    data: bytes

    def as_json_dict(self) -> dict[str, Any]:
        """Return ``{"type", "apiKey", "version", "data"}`` with the body as hex."""
        return {"type": json_type_name(self.api_key), "apiKey": self.api_key,
                "version": self.version, "data": self.data.hex()}  # fmt: skip


MetadataRecord = (
    TopicRecord | ConfigRecord | RemoveTopicRecord | PartitionRecord | PartitionChangeRecord
    | RegisterBrokerRecord | FeatureLevelRecord | UnknownMetadataRecord
)


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
    if value is None:
        raise CorruptRecordError("metadata record has a null value; expected a framed record, "
                                 "found null")  # fmt: skip
    reader = MessageReader(value, 0, len(value))
    frame = reader.uvarint()
    if frame != METADATA_FRAME_VERSION:
        raise CorruptRecordError(
            f"unknown metadata record frame version; expected {METADATA_FRAME_VERSION}, "
            f"found {frame}", position=0)
    api_key, version = reader.uvarint(), reader.uvarint()
    decoder = _DECODERS.get(api_key)
    if decoder is None or version > decoder[0]:
        body = bytes(memoryview(value)[reader.position :])
        return UnknownMetadataRecord(api_key, version, API_KEY_NAMES.get(api_key), body)
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
