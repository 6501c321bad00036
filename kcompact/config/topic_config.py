"""The topic (and cleaner) configuration kcompact acts on, resolved the way a Kafka 4.1 broker does.

Why: the cleaner's decisions (what is dirty, which tombstones expire, how segments are grouped) depend
on a handful of topic configs whose effective value comes from up to six places. This module holds
the resulting :class:`TopicConfig` value and resolves it in Kafka's precedence order; Kafka's key
names, types, defaults, validators and broker synonyms are the table in
:mod:`kcompact.config.config_keys`:

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
import functools
from collections.abc import Iterable, Mapping

from kcompact.config.config_keys import (
    BROKER_ONLY_KEYS,
    BROKER_SYNONYMS,
    CLEANUP_POLICY_COMPACT,
    CLEANUP_POLICY_DELETE,
    CONFIG_KEYS,
    ConfigKey,
    ConfigScalar,
    ParsedValue,
    config_key,
    parse_scaled_synonym,
    parse_value,
)
from kcompact.errors import ConfigError
from kcompact.value import frozen

__all__ = [
    "ConfigValue",
    "TopicConfig",
    "defaults_with_overrides",
    "parse_config_pairs",
    "resolve_config",
]


@frozen
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
    transaction_max_timeout_ms: int

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
        changes = {
            config_key(name).field: parse_value(name, value) for name, value in values.items()
        }
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


@frozen
class ConfigValue:
    """The effective value of one config and where it came from.

    Attributes:
        key: the Kafka key of the config (topic name for topic configs).
        value: the typed value.
        source: "cli", "topic", "broker:<id>", "cluster-default", "server.properties" or "default".
        synonym: the key actually set when it differs from ``key`` (``log.retention.hours``).
        last_known_offset: for a value read from a KRaft metadata log whose history is incomplete, the
            offset of the last metadata record read: the value as of that offset, which a later record
            (missing from disk) may have changed. None: the value is current.
    """

    key: str
    value: ParsedValue
    source: str
    synonym: str | None = None
    last_known_offset: int | None = None


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
                value = parse_scaled_synonym(key.name, broker_key, raw, factor, source)
            shown = None if broker_key == key.name else broker_key
            return ConfigValue(key.name, value, source, shown)
    return None


def defaults_with_overrides(overrides: Mapping[str, ConfigScalar]) -> TopicConfig:
    """Kafka's defaults with these overrides only (no broker or topic source is read).

    Nothing is assumed: without ``cleanup.policy`` among the overrides the policy is Kafka's
    default ``delete``.
    """
    return TopicConfig.defaults().with_overrides(overrides)


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
    sources = (cli, topic_overrides, broker_dynamic, cluster_dynamic, server_properties)
    try:
        config, remembered = _resolve_memo(tuple(tuple(s.items()) for s in sources), broker_id)
    except TypeError:  # an unhashable value (not a ConfigScalar): resolve without the memo
        return _resolve_sources(sources, broker_id)
    return config, list(remembered)


_Items = tuple[tuple[str, ConfigScalar], ...]


@functools.lru_cache(maxsize=64)
def _resolve_memo(
    sources: tuple[_Items, ...], broker_id: int | None
) -> tuple[TopicConfig, tuple[ConfigValue, ...]]:
    """:func:`resolve_config` of the same sources, once: the partitions of a log dir mostly share
    their topic's and broker's configs, and ``inspect dirty-ratio`` resolves thousands of them."""
    config, resolved = _resolve_sources(tuple(dict(items) for items in sources), broker_id)
    return config, tuple(resolved)


def _resolve_sources(
    sources: tuple[Mapping[str, ConfigScalar], ...], broker_id: int | None
) -> tuple[TopicConfig, list[ConfigValue]]:
    cli, topic_overrides, broker_dynamic, cluster_dynamic, server_properties = sources
    for name in cli:
        config_key(name)
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
