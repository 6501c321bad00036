"""The topic (and cleaner) configuration kcompact acts on, resolved the way a Kafka 4.1 broker does.

Why: the cleaner's decisions (what is dirty, which tombstones expire, how segments are grouped) depend
on a handful of topic configs whose effective value comes from up to six places. This module knows
Kafka's key names, types, defaults and validators for the configs kcompact uses, the broker synonyms of
each topic config, and Kafka's precedence:

    --config (cli) > topic override > dynamic per-broker > dynamic cluster default
        > server.properties > Kafka's default

Broker-level sources only use broker key names (``log.segment.bytes``, ``log.roll.hours`` ...). Like
Kafka, a broker key is first resolved across the three broker levels, and then the synonyms of a topic
config are tried in Kafka's order, so ``log.roll.ms`` anywhere beats ``log.roll.hours`` anywhere.
Hours and minutes are converted to milliseconds.

Kafka 4.1 facts (from ``LogConfig``, ``CleanerConfig``, ``ServerTopicConfigSynonyms``): since KIP-1030
(4.0) ``segment.bytes`` must be at least 1 MiB; tests that need smaller segments set Kafka's internal
``internal.segment.bytes`` instead, which then wins (``LogConfig.segmentSize()``), so
:attr:`TopicConfig.segment_bytes` is always the effective segment size.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from kcompact.errors import ConfigError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE

ConfigType = Literal["int", "long", "double", "boolean", "string", "list"]
ConfigScalar = str | int | float | bool | tuple[str, ...]
ParsedValue = int | float | bool | str | tuple[str, ...] | None

CLEANUP_POLICY_COMPACT = "compact"
CLEANUP_POLICY_DELETE = "delete"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One Kafka config kcompact models: its Kafka name, type, default and validator.

    Attributes:
        name: Kafka's key (``segment.bytes``).
        field: the :class:`TopicConfig` attribute it sets.
        type: Kafka's ``ConfigDef.Type`` in lower case.
        default: Kafka's default, already parsed.
        minimum: inclusive lower bound for numbers, if any.
        maximum: inclusive upper bound for numbers, if any.
        allowed: the valid strings (``string``) or list items (``list``), if restricted.
    """

    name: str
    field: str
    type: ConfigType
    default: ParsedValue
    minimum: float | None = None
    maximum: float | None = None
    allowed: tuple[str, ...] | None = None


def _k(
    name: str,
    type_: ConfigType,
    default: ParsedValue,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    allowed: tuple[str, ...] | None = None,
    field: str | None = None,
) -> ConfigKey:
    field = field or name.removeprefix("log.cleaner.").replace(".", "_")
    return ConfigKey(name, field, type_, default, minimum, maximum, allowed)


CONFIG_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        # --- topic configs (LogConfig) ---
        _k("cleanup.policy", "list", (CLEANUP_POLICY_DELETE,),
           allowed=(CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE)),
        _k("segment.bytes", "int", 1024 * 1024 * 1024, minimum=1024 * 1024),
        _k("internal.segment.bytes", "int", None),
        _k("segment.ms", "long", 7 * 24 * MS_PER_HOUR, minimum=1),
        _k("segment.jitter.ms", "long", 0, minimum=0),
        _k("segment.index.bytes", "int", 10 * 1024 * 1024, minimum=4),
        _k("index.interval.bytes", "int", 4096, minimum=0),
        _k("min.cleanable.dirty.ratio", "double", 0.5, minimum=0.0, maximum=1.0),
        _k("min.compaction.lag.ms", "long", 0, minimum=0),
        _k("max.compaction.lag.ms", "long", INT64_MAX, minimum=1),
        _k("delete.retention.ms", "long", 24 * MS_PER_HOUR, minimum=0),
        _k("retention.ms", "long", 7 * 24 * MS_PER_HOUR, minimum=-1),
        _k("retention.bytes", "long", -1),
        _k("max.message.bytes", "int", 1024 * 1024 + 12, minimum=0),
        _k("message.timestamp.type", "string", "CreateTime", allowed=TIMESTAMP_TYPES),
        _k("file.delete.delay.ms", "long", 60000, minimum=0),
        _k("preallocate", "boolean", False),
        _k("compression.type", "string", "producer", allowed=COMPRESSION_TYPES),
        _k("remote.storage.enable", "boolean", False),
        # --- broker-only configs (CleanerConfig, ServerConfigs, ProducerStateManagerConfig) ---
        _k("log.cleaner.dedupe.buffer.size", "long", 128 * 1024 * 1024),
        _k("log.cleaner.threads", "int", 1, minimum=0, field="cleaner_threads"),
        _k("log.cleaner.io.buffer.load.factor", "double", 0.9, field="dedupe_load_factor"),
        _k("log.cleaner.io.buffer.size", "int", 512 * 1024, minimum=0),
        _k("message.max.bytes", "int", 1024 * 1024 + 12, minimum=0),
        _k("producer.id.expiration.ms", "int", 24 * MS_PER_HOUR, minimum=1),
    )
}  # fmt: skip

# Configs that exist only at broker level: no topic override, no synonym, read under their own name.
BROKER_ONLY_KEYS = frozenset(
    {
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.threads",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "message.max.bytes",
        "producer.id.expiration.ms",
    }
)

# Topic key -> broker keys, in the order Kafka tries them, each with a factor to milliseconds.
BROKER_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", MS_PER_HOUR)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", MS_PER_HOUR)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", MS_PER_MINUTE),
        ("log.retention.hours", MS_PER_HOUR),
    ),
    "retention.bytes": (("log.retention.bytes", 1),),
    "max.message.bytes": (("message.max.bytes", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "preallocate": (("log.preallocate", 1),),
    "compression.type": (("compression.type", 1),),
}

# Broker synonyms have their own (stricter) broker-side validators in KafkaConfig.
_SYNONYM_MINIMUM = {"log.roll.hours": 1, "log.roll.jitter.hours": 0}


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """The effective configuration of one partition's topic, plus the cleaner's broker settings.

    Field names are Kafka's keys in snake_case; ``segment_bytes`` is the effective segment size
    (``internal.segment.bytes`` when that is set, as Kafka's ``LogConfig.segmentSize()``).
    """

    cleanup_policy: tuple[str, ...]
    segment_bytes: int
    internal_segment_bytes: int | None
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    message_timestamp_type: str
    file_delete_delay_ms: int
    preallocate: bool
    compression_type: str
    remote_storage_enable: bool
    dedupe_buffer_size: int
    cleaner_threads: int
    dedupe_load_factor: float
    io_buffer_size: int
    message_max_bytes: int
    producer_id_expiration_ms: int

    def __post_init__(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ConfigError(
                f"min.compaction.lag.ms={self.min_compaction_lag_ms}: must not exceed "
                f"max.compaction.lag.ms; expected at most {self.max_compaction_lag_ms}, "
                f"found {self.min_compaction_lag_ms}"
            )

    @classmethod
    def defaults(cls) -> TopicConfig:
        """Return Kafka 4.1's defaults for every modelled config."""
        return cls(**{k.field: k.default for k in CONFIG_KEYS.values()})  # type: ignore[arg-type]

    def with_overrides(self, values: Mapping[str, ConfigScalar]) -> TopicConfig:
        """Return a copy with some configs replaced.

        Args:
            values: Kafka key names (``segment.bytes``, ``log.cleaner.threads`` ...) to values, as
                strings in Kafka's syntax or as already-typed Python values.

        Returns:
            The new configuration.

        Raises:
            ConfigError: an unknown key, a value of the wrong type or out of range, or
                min.compaction.lag.ms above max.compaction.lag.ms.
        """
        changes = {_key(name).field: parse_value(name, value) for name, value in values.items()}
        merged = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        if merged.internal_segment_bytes is not None:  # LogConfig.segmentSize(): internal wins
            merged = dataclasses.replace(merged, segment_bytes=merged.internal_segment_bytes)
        return merged

    @property
    def is_compacted(self) -> bool:
        """Whether ``cleanup.policy`` contains ``compact`` (the cleaner works on this log)."""
        return CLEANUP_POLICY_COMPACT in self.cleanup_policy

    @property
    def has_delete(self) -> bool:
        """Whether ``cleanup.policy`` contains ``delete`` (time/size retention applies)."""
        return CLEANUP_POLICY_DELETE in self.cleanup_policy

    def as_kafka_dict(self) -> dict[str, str]:
        """Return every modelled config under its Kafka key, rendered as Kafka prints it."""
        out: dict[str, str] = {}
        for key in CONFIG_KEYS.values():
            value = getattr(self, key.field)
            if value is None or (key.name == "segment.bytes" and self.internal_segment_bytes):
                continue  # segment_bytes mirrors internal.segment.bytes then; emit that alone
            out[key.name] = format_value(value)
        return out


def _key(name: str) -> ConfigKey:
    try:
        return CONFIG_KEYS[name]
    except KeyError:
        raise ConfigError(
            f"{name}: unknown config key; expected one of {', '.join(sorted(CONFIG_KEYS))}"
        ) from None


def format_value(value: ParsedValue) -> str:
    """Render a parsed value in Kafka's string syntax (lists comma-joined, booleans lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return "" if value is None else str(value)


def _describe_range(key: ConfigKey) -> str:
    if key.minimum is not None and key.maximum is not None:
        return f"must be between {key.minimum} and {key.maximum}"
    return f"must be at least {key.minimum}"


# Java's Integer/Long.parseLong and Double.parseDouble syntax (ConfigDef trims first); Python's
# int()/float() would also take "1_000", "inf" or non-ASCII digits, which Kafka rejects.
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dDfF]?")


class _BadValueError(Exception):
    """A value that does not parse as its config's type (turned into ConfigError by the caller)."""


def _parse_number(key: ConfigKey, raw: ConfigScalar) -> int | float:
    if isinstance(raw, (bool, tuple)):
        raise _BadValueError
    if key.type == "double":
        if isinstance(raw, str):
            if not _JAVA_DOUBLE.fullmatch(raw.strip()):
                raise _BadValueError
            raw = raw.strip().rstrip("dDfF")
        ratio = float(raw)
        if not math.isfinite(ratio):
            raise _BadValueError
        return ratio
    if isinstance(raw, float):
        raise _BadValueError
    if isinstance(raw, str) and not _JAVA_INTEGER.fullmatch(raw.strip()):
        raise _BadValueError
    number = int(raw.strip(), 10) if isinstance(raw, str) else raw
    low, high = (INT32_MIN, INT32_MAX) if key.type == "int" else (INT64_MIN, INT64_MAX)
    if not low <= number <= high:
        raise _BadValueError
    return number


def _parse_typed(key: ConfigKey, raw: ConfigScalar) -> ParsedValue:
    if key.type == "boolean":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise _BadValueError
    if key.type in ("int", "long", "double"):
        return _parse_number(key, raw)
    if key.type == "list" and isinstance(raw, tuple):
        return tuple(item.strip() for item in raw if item.strip())
    if not isinstance(raw, str):
        raise _BadValueError
    if key.type == "list":
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    return raw.strip()


def parse_value(name: str, raw: ConfigScalar, *, minimum: int | None = None) -> ParsedValue:
    """Parse and validate one value the way Kafka's ``ConfigDef`` does.

    Args:
        name: the Kafka key.
        raw: the value, a string in Kafka's syntax or an already-typed Python value.
        minimum: a stricter lower bound (used for broker synonyms such as ``log.roll.hours``).

    Returns:
        The typed value (int, float, bool, str or tuple of str).

    Raises:
        ConfigError: an unknown key, a value that does not parse, or one outside its valid range,
            e.g. "min.cleanable.dirty.ratio=1.5: must be between 0.0 and 1.0".
    """
    key = _key(name)
    shown = f"{name}={format_value(raw)}"
    try:
        value = _parse_typed(key, raw)
    except (_BadValueError, ValueError):
        raise ConfigError(f"{shown}: not a valid {key.type}") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low = key.minimum if minimum is None else minimum
        if (low is not None and value < low) or (key.maximum is not None and value > key.maximum):
            bounded = dataclasses.replace(key, minimum=low)
            raise ConfigError(f"{shown}: {_describe_range(bounded)}")
    if key.allowed is not None:
        items = value if isinstance(value, tuple) else (value,)
        bad = [item for item in items if item not in key.allowed]
        if bad:
            raise ConfigError(f"{shown}: {bad[0]!r} is not one of {', '.join(key.allowed)}")
    return value


def parse_config_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """Validate ``--config KEY=VALUE`` arguments.

    Args:
        pairs: the raw arguments, each ``KEY=VALUE`` with a Kafka key kcompact models.

    Returns:
        Key to value (the value as given, stripped); a later pair for the same key wins.

    Raises:
        ConfigError: a pair without ``=``, an unknown key, or a bad value; the message names the
            key, the value and what is allowed.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"{pair!r}: not a KEY=VALUE pair; expected e.g. cleanup.policy=compact")
        parse_value(name, value)
        out[name] = value.strip()
    TopicConfig.defaults().with_overrides(out)  # cross-field checks (min vs max compaction lag)
    return out


@dataclass(frozen=True, slots=True)
class ConfigValue:
    """The effective value of one config and where it came from.

    Attributes:
        key: the Kafka key of the config (topic name for topic configs).
        value: the typed value.
        source: "cli", "topic", "broker:<id>", "cluster-default", "server.properties" or "default".
        synonym: the key actually set when it differs from ``key`` (``log.retention.hours``).
    """

    key: str
    value: ParsedValue
    source: str
    synonym: str | None = None


def _broker_value(
    key: ConfigKey, levels: list[tuple[str, Mapping[str, ConfigScalar]]]
) -> ConfigValue | None:
    """Resolve a config from the broker levels: each broker key across levels, then synonyms."""
    synonyms = BROKER_SYNONYMS.get(key.name, ())
    if key.name in BROKER_ONLY_KEYS:
        synonyms = ((key.name, 1),)
    for broker_key, factor in synonyms:
        for source, values in levels:
            if broker_key not in values:
                continue
            raw = values[broker_key]
            if factor == 1:
                try:
                    value = parse_value(key.name, raw)
                except ConfigError as err:
                    raise ConfigError(f"{source}: {broker_key}: {err}") from None
            else:
                value = _scaled(key.name, broker_key, raw, factor, source)
            shown = None if broker_key == key.name else broker_key
            return ConfigValue(key.name, value, source, shown)
    return None


_HOURS_OR_MINUTES = ConfigKey("", "", "int", None)


def _scaled(name: str, broker_key: str, raw: ConfigScalar, factor: int, source: str) -> ParsedValue:
    """Convert a ``*.hours``/``*.minutes`` broker synonym (an int) to the topic config's ms."""
    try:
        amount = int(_parse_number(_HOURS_OR_MINUTES, raw))
    except (_BadValueError, ValueError):
        raise ConfigError(f"{source}: {broker_key}={format_value(raw)}: not a valid int") from None
    low = _SYNONYM_MINIMUM.get(broker_key)
    if low is not None and amount < low:
        raise ConfigError(f"{source}: {broker_key}={amount}: must be at least {low}")
    millis = amount * factor
    if name == "retention.ms" and millis < 0:
        return -1  # KafkaConfig.logRetentionTimeMillis: any negative means "keep forever"
    try:
        return parse_value(name, millis)
    except ConfigError as err:
        raise ConfigError(f"{source}: {broker_key}={amount}: {err}") from None


def resolve_config(
    *,
    cli: Mapping[str, ConfigScalar],
    topic_overrides: Mapping[str, ConfigScalar],
    broker_dynamic: Mapping[str, ConfigScalar],
    cluster_dynamic: Mapping[str, ConfigScalar],
    server_properties: Mapping[str, ConfigScalar],
    broker_id: int | None = None,
) -> tuple[TopicConfig, list[ConfigValue]]:
    """Compute a topic's effective configuration in Kafka's precedence order.

    Keys a source holds that kcompact does not model (``min.insync.replicas``, ``node.id`` ...)
    are ignored, except on the command line where they are errors.

    Args:
        cli: ``--config`` values, by topic key or broker-only key.
        topic_overrides: the topic's dynamic config (ConfigRecords of resource type TOPIC).
        broker_dynamic: this broker's dynamic config (resource BROKER named by its node id).
        cluster_dynamic: the cluster-wide dynamic broker default (resource BROKER, empty name).
        server_properties: the broker's static ``server.properties``.
        broker_id: the node id, used in the source label ``broker:<id>``.

    Returns:
        The configuration and one :class:`ConfigValue` per modelled key, in ``CONFIG_KEYS`` order.

    Raises:
        ConfigError: a bad value in any source (the message names the source), an unknown cli key,
            or min.compaction.lag.ms above max.compaction.lag.ms.
    """
    for name in cli:
        _key(name)
    broker_source = "broker" if broker_id is None else f"broker:{broker_id}"
    levels = [
        (broker_source, broker_dynamic),
        ("cluster-default", cluster_dynamic),
        ("server.properties", server_properties),
    ]
    resolved: list[ConfigValue] = []
    for key in CONFIG_KEYS.values():
        resolved.append(_resolve_one(key, cli, topic_overrides, levels))
    values = {cv.key: cv.value for cv in resolved if cv.value is not None}
    config = TopicConfig.defaults().with_overrides(values)
    return config, resolved


def _resolve_one(
    key: ConfigKey,
    cli: Mapping[str, ConfigScalar],
    topic_overrides: Mapping[str, ConfigScalar],
    levels: list[tuple[str, Mapping[str, ConfigScalar]]],
) -> ConfigValue:
    if key.name in cli:
        return ConfigValue(key.name, parse_value(key.name, cli[key.name]), "cli")
    if key.name not in BROKER_ONLY_KEYS and key.name in topic_overrides:
        try:
            value = parse_value(key.name, topic_overrides[key.name])
        except ConfigError as err:
            raise ConfigError(f"topic override: {err}") from None
        return ConfigValue(key.name, value, "topic")
    from_broker = _broker_value(key, levels)
    return from_broker or ConfigValue(key.name, key.default, "default")
