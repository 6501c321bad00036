"""Kafka's config keys that kcompact models: name, type, default, validator and broker synonyms.

Why: a config value reaches kcompact as a string from ``--config``, ``server.properties`` or a KRaft
ConfigRecord, and must be parsed and range-checked exactly as Kafka's ``ConfigDef`` does before the
cleaner trusts it. This module is that table (``CONFIG_KEYS``, from ``LogConfig``, ``CleanerConfig``
and ``ServerTopicConfigSynonyms``) and its parser; :mod:`kcompact.config.topic_config` assembles the
parsed values into a :class:`~kcompact.config.topic_config.TopicConfig` in Kafka's precedence order.

A topic config's broker synonyms are listed in the order Kafka tries them, each with the factor that
turns its unit into milliseconds (``log.roll.hours`` -> ``segment.ms``); the ``*.hours``/``*.minutes``
synonyms are ints with their own, stricter, broker-side minimum.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Literal

from kcompact.errors import ConfigError
from kcompact.records.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from kcompact.value import frozen

MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE

ConfigType = Literal["int", "long", "double", "boolean", "string", "list"]
ConfigScalar = str | int | float | bool | tuple[str, ...]
ParsedValue = int | float | bool | str | tuple[str, ...] | None

CLEANUP_POLICY_COMPACT = "compact"
CLEANUP_POLICY_DELETE = "delete"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@frozen
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
        _k("transaction.max.timeout.ms", "int", 15 * MS_PER_MINUTE, minimum=1),  # TransactionStateManagerConfig
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
        "transaction.max.timeout.ms",
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


def config_key(name: str) -> ConfigKey:
    """Look up a modelled config by its Kafka key.

    Args:
        name: the Kafka key (``segment.bytes``, ``log.cleaner.threads`` ...).

    Returns:
        Its :class:`ConfigKey`.

    Raises:
        ConfigError: kcompact does not model ``name``; the message lists the keys it does.
    """
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
    key = config_key(name)
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


_HOURS_OR_MINUTES = ConfigKey("", "", "int", None)


def parse_scaled_synonym(
    name: str, broker_key: str, raw: ConfigScalar, factor: int, source: str
) -> ParsedValue:
    """Convert a ``*.hours``/``*.minutes`` broker synonym (an int) to the topic config's ms.

    Args:
        name: the topic key the synonym stands for (``segment.ms``).
        broker_key: the synonym as set (``log.roll.hours``).
        raw: its value.
        factor: milliseconds per unit of ``broker_key`` (from :data:`BROKER_SYNONYMS`).
        source: where the value was set, prefixed to error messages.

    Returns:
        The topic config's value in milliseconds (-1 for any negative ``retention.ms``).

    Raises:
        ConfigError: not an int, below the synonym's broker-side minimum, or out of the topic
            config's range once converted.
    """
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
