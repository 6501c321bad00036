"""TopicConfig, --config parsing and Kafka's precedence of config sources."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kcompact.config.config_keys import BROKER_SYNONYMS, CONFIG_KEYS, format_value
from kcompact.config.topic_config import (
    ConfigValue,
    TopicConfig,
    parse_config_pairs,
    resolve_config,
)
from kcompact.errors import ConfigError

NO_SOURCES: dict[str, dict[str, str]] = {
    "cli": {},
    "topic_overrides": {},
    "broker_dynamic": {},
    "cluster_dynamic": {},
    "server_properties": {},
}


def as_kafka_dict(config: TopicConfig) -> dict[str, str]:
    """Every modelled config under its Kafka key, rendered as Kafka prints it (``internal.segment.bytes``
    alone where it is set: ``segment_bytes`` mirrors it then)."""
    out: dict[str, str] = {}
    for key in CONFIG_KEYS.values():
        value = getattr(config, key.field)
        if value is None or (key.name == "segment.bytes" and config.internal_segment_bytes):
            continue
        out[key.name] = format_value(value)
    return out


def resolve(**sources: dict[str, str]) -> tuple[TopicConfig, dict[str, ConfigValue]]:
    config, values = resolve_config(**{**NO_SOURCES, **sources}, broker_id=1)
    return config, {v.key: v for v in values}


def test_defaults_are_kafka_41_defaults() -> None:
    d = TopicConfig.defaults()
    assert d.cleanup_policy == ("delete",)
    assert (d.segment_bytes, d.segment_ms, d.segment_index_bytes) == (2**30, 604800000, 10485760)
    assert (d.min_cleanable_dirty_ratio, d.delete_retention_ms) == (0.5, 86400000)
    assert (d.min_compaction_lag_ms, d.max_compaction_lag_ms) == (0, 2**63 - 1)
    assert (d.max_message_bytes, d.message_max_bytes) == (1048588, 1048588)
    assert (d.dedupe_buffer_size, d.cleaner_threads, d.dedupe_load_factor) == (2**27, 1, 0.9)
    assert (d.io_buffer_size, d.producer_id_expiration_ms) == (524288, 86400000)
    assert d.compression_type == "producer" and d.message_timestamp_type == "CreateTime"
    assert not d.is_compacted and d.has_delete


def test_with_overrides_takes_kafka_names_and_typed_values() -> None:
    c = TopicConfig.defaults().with_overrides(
        {"cleanup.policy": "compact,delete", "segment.ms": 1000, "preallocate": True,
         "min.cleanable.dirty.ratio": "0.1", "log.cleaner.threads": "4"}
    )  # fmt: skip
    assert c.cleanup_policy == ("compact", "delete") and c.is_compacted and c.has_delete
    assert (c.segment_ms, c.preallocate, c.min_cleanable_dirty_ratio) == (1000, True, 0.1)
    assert c.cleaner_threads == 4


def test_internal_segment_bytes_wins_like_log_config_segment_size() -> None:
    c = TopicConfig.defaults().with_overrides({"internal.segment.bytes": "1024"})
    assert c.segment_bytes == 1024
    assert as_kafka_dict(c)["internal.segment.bytes"] == "1024"
    assert "segment.bytes" not in as_kafka_dict(c)
    assert TopicConfig.defaults().with_overrides(as_kafka_dict(c)) == c


def test_as_kafka_dict_round_trips() -> None:
    c = TopicConfig.defaults().with_overrides({"cleanup.policy": "compact", "preallocate": "TRUE"})
    rendered = as_kafka_dict(c)
    assert rendered["cleanup.policy"] == "compact" and rendered["preallocate"] == "true"
    assert rendered["max.compaction.lag.ms"] == "9223372036854775807"
    assert TopicConfig.defaults().with_overrides(rendered) == c


@given(
    ratio=st.floats(min_value=0.0, max_value=1.0),
    lag=st.integers(min_value=0, max_value=2**61),
    extra=st.integers(min_value=0, max_value=2**61),
    policy=st.sampled_from(["compact", "delete", "compact,delete", "delete,compact"]),
)
def test_kafka_dict_round_trip_property(ratio: float, lag: int, extra: int, policy: str) -> None:
    c = TopicConfig.defaults().with_overrides(
        {"min.cleanable.dirty.ratio": ratio, "min.compaction.lag.ms": lag,
         "max.compaction.lag.ms": lag + extra + 1, "cleanup.policy": policy}
    )  # fmt: skip
    assert TopicConfig.defaults().with_overrides(as_kafka_dict(c)) == c


def test_parse_config_pairs_accepts_good_pairs() -> None:
    got = parse_config_pairs(["cleanup.policy=compact", "segment.bytes = 2097152",
                              "delete.retention.ms=0", "cleanup.policy=compact,delete"])
    assert got == {"cleanup.policy": "compact,delete", "segment.bytes": "2097152",
                   "delete.retention.ms": "0"}  # fmt: skip


@pytest.mark.parametrize(
    ("pair", "fragment"),
    [
        ("min.cleanable.dirty.ratio=1.5", "min.cleanable.dirty.ratio=1.5: must be between 0.0 and 1.0"),
        ("min.cleanable.dirty.ratio=NaN", "min.cleanable.dirty.ratio=NaN: not a valid double"),
        ("no.such.key=1", "no.such.key: unknown config key; expected one of cleanup.policy"),
        ("segment.bytes", "'segment.bytes': not a KEY=VALUE pair"),
        ("=5", "'=5': not a KEY=VALUE pair"),
        ("segment.bytes=1_048_576", "segment.bytes=1_048_576: not a valid int"),
        ("segment.bytes=4294967296", "segment.bytes=4294967296: not a valid int"),
        ("segment.bytes=1000", "segment.bytes=1000: must be at least 1048576"),
        ("segment.index.bytes=3", "segment.index.bytes=3: must be at least 4"),
        ("max.compaction.lag.ms=0", "max.compaction.lag.ms=0: must be at least 1"),
        ("retention.ms=-2", "retention.ms=-2: must be at least -1"),
        ("cleanup.policy=compact,remove", "'remove' is not one of compact, delete"),
        ("compression.type=brotli", "'brotli' is not one of uncompressed, zstd"),
        ("message.timestamp.type=createtime", "is not one of CreateTime, LogAppendTime"),
        ("preallocate=yes", "preallocate=yes: not a valid boolean"),
    ],
)
def test_parse_config_pairs_rejects(pair: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config_pairs([pair])
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_min_lag_above_max_lag_is_rejected() -> None:
    with pytest.raises(ConfigError, match="must not exceed max.compaction.lag.ms"):
        parse_config_pairs(["min.compaction.lag.ms=10", "max.compaction.lag.ms=5"])


def test_every_synonym_target_is_a_modelled_topic_key() -> None:
    assert set(BROKER_SYNONYMS) <= set(CONFIG_KEYS)
    assert [name for name, _ in BROKER_SYNONYMS["retention.ms"]] == [
        "log.retention.ms", "log.retention.minutes", "log.retention.hours"]  # fmt: skip


def test_nothing_set_gives_defaults_from_source_default() -> None:
    config, values = resolve()
    assert config == TopicConfig.defaults()
    assert {v.source for v in values.values()} == {"default"}
    assert list(values) == list(CONFIG_KEYS)


def test_precedence_cli_topic_broker_cluster_static_default() -> None:
    layers = {
        "cli": {"delete.retention.ms": "1"},
        "topic_overrides": {"delete.retention.ms": "2", "segment.ms": "2"},
        "broker_dynamic": {"log.cleaner.delete.retention.ms": "3", "log.roll.ms": "3",
                           "log.cleaner.min.compaction.lag.ms": "3"},
        "cluster_dynamic": {"log.cleaner.delete.retention.ms": "4", "log.roll.ms": "4",
                            "log.cleaner.min.compaction.lag.ms": "4", "log.index.interval.bytes": "4"},
        "server_properties": {"log.cleaner.delete.retention.ms": "5", "log.roll.ms": "5",
                              "log.cleaner.min.compaction.lag.ms": "5",
                              "log.index.interval.bytes": "5", "log.segment.delete.delay.ms": "5"},
    }  # fmt: skip
    config, v = resolve(**layers)
    assert (config.delete_retention_ms, v["delete.retention.ms"].source) == (1, "cli")
    assert (config.segment_ms, v["segment.ms"].source) == (2, "topic")
    assert (config.min_compaction_lag_ms, v["min.compaction.lag.ms"].source) == (3, "broker:1")
    assert (config.index_interval_bytes, v["index.interval.bytes"].source) == (4, "cluster-default")
    assert (config.file_delete_delay_ms, v["file.delete.delay.ms"].source) == (5, "server.properties")
    assert v["file.delete.delay.ms"].synonym == "log.segment.delete.delay.ms"
    assert (config.retention_bytes, v["retention.bytes"].source) == (-1, "default")


def test_hours_and_minutes_become_ms_and_ms_synonym_wins_across_levels() -> None:
    config, v = resolve(
        broker_dynamic={"log.roll.hours": "2", "log.retention.hours": "3"},
        server_properties={"log.roll.ms": "1000", "log.retention.minutes": "7"},
    )
    assert (config.segment_ms, v["segment.ms"].synonym) == (1000, "log.roll.ms")
    assert (config.retention_ms, v["retention.ms"].source) == (7 * 60_000, "server.properties")
    config, v = resolve(server_properties={"log.retention.hours": "-1", "log.roll.hours": "1"})
    assert (config.retention_ms, config.segment_ms) == (-1, 3_600_000)


def test_broker_only_keys_ignore_topic_overrides() -> None:
    config, v = resolve(
        topic_overrides={"log.cleaner.threads": "8", "min.insync.replicas": "2"},
        server_properties={"log.cleaner.threads": "2", "message.max.bytes": "2000000",
                           "node.id": "1"},
    )  # fmt: skip
    assert (config.cleaner_threads, v["log.cleaner.threads"].source) == (2, "server.properties")
    # message.max.bytes is both the broker cap and the synonym of topic max.message.bytes
    assert config.message_max_bytes == config.max_message_bytes == 2000000


def test_topic_config_names_need_their_broker_name_at_broker_level() -> None:
    config, _ = resolve(server_properties={"segment.bytes": "2097152", "cleanup.policy": "compact"})
    assert config == TopicConfig.defaults()


def test_bad_value_in_a_source_names_the_source() -> None:
    with pytest.raises(ConfigError, match=r"cluster-default: log.roll.hours=0: must be at least 1"):
        resolve(cluster_dynamic={"log.roll.hours": "0"})
    with pytest.raises(ConfigError, match=r"topic override: cleanup.policy=zap"):
        resolve(topic_overrides={"cleanup.policy": "zap"})
    with pytest.raises(ConfigError, match=r"server.properties: log.segment.bytes: segment.bytes=12"):
        resolve(server_properties={"log.segment.bytes": "12"})
    with pytest.raises(ConfigError, match="unknown config key"):
        resolve(cli={"min.insync.replicas": "2"})
