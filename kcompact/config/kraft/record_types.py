"""The values of the KRaft metadata records kcompact decodes, and their Kafka JSON shape.

Why: :mod:`kcompact.config.kraft.metadata_state` replays these values to learn topic ids and dynamic
configs, and ``inspect dump`` prints them as kafka-dump-log's ``--cluster-metadata-decoder`` does
(``{"type": "TOPIC_RECORD", "version": 0, "data": {camelCase fields}}``). Field names are Kafka's
schema fields in snake_case, in schema order. Decoding the bytes into these values is
:mod:`kcompact.config.kraft.records`.
"""

from __future__ import annotations

from dataclasses import Field, fields, is_dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from kcompact.value import frozen

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

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


def json_type_name(api_key: int) -> str:
    """Kafka's JSON ``type`` of a record kind: ``TopicRecord`` -> ``TOPIC_RECORD``."""
    name = API_KEY_NAMES.get(api_key)
    if name is None:
        return f"UNKNOWN_RECORD_{api_key}"
    return "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name)).upper()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _json_fields(value: DataclassInstance) -> dict[str, Any]:
    return {_camel(f.name): _jsonable(getattr(value, f.name)) for f in fields(value)}


def _jsonable(value: object) -> object:
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    if is_dataclass(value) and not isinstance(value, type):
        return _json_fields(value)
    return value


class _JsonMixin:
    """``as_json_dict`` in the shape of Kafka's metadata JSON: type, version, camelCase data."""

    __slots__ = ()
    API_KEY: ClassVar[int]
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # every subclass is a dataclass

    def as_json_dict(self) -> dict[str, Any]:
        """Return ``{"type": ..., "version": ..., "data": {...}}`` ready for ``json.dumps``."""
        data = _json_fields(self)
        version = data.pop("version")
        return {"type": json_type_name(self.API_KEY), "version": version, "data": data}


@frozen
class TopicRecord(_JsonMixin):
    """A topic was created (api key 2): its name and id."""

    API_KEY: ClassVar[int] = 2
    version: int
    name: str
    topic_id: str


@frozen
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


@frozen
class RemoveTopicRecord(_JsonMixin):
    """A topic was deleted (api key 9), with all its partitions."""

    API_KEY: ClassVar[int] = 9
    version: int
    topic_id: str


@frozen
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


@frozen
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


@frozen
class BrokerEndpoint:
    """One listener of a registered broker."""

    name: str
    host: str
    port: int
    security_protocol: int


@frozen
class BrokerFeature:
    """A feature range a registered broker supports."""

    name: str
    min_supported_version: int
    max_supported_version: int


@frozen
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


@frozen
class FeatureLevelRecord(_JsonMixin):
    """A finalized feature level (api key 12), e.g. ``metadata.version``."""

    API_KEY: ClassVar[int] = 12
    version: int
    name: str
    feature_level: int


@frozen
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
