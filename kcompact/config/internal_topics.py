"""The topic configs a broker gives the internal topics it creates, for when they cannot be read.

Why: a broker creates ``__consumer_offsets`` and ``__transaction_state`` itself, with topic configs
of its own making (``GroupCoordinatorService.groupMetadataTopicConfigs``,
``TransactionStateManager.transactionTopicConfigs``): ``cleanup.policy=compact``, a
``compression.type``, and ``segment.bytes`` taken from the broker configs
``offsets.topic.segment.bytes`` / ``transaction.state.log.segment.bytes`` (100 MiB by default, not
the 1 GiB of ``log.segment.bytes``). Where those topic configs are unknown (a ZooKeeper-era log dir,
an incomplete metadata log) the cleaner must still group and roll segments as the broker does, so
these values stand in for them, each labelled with the broker key it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kcompact.config.config_keys import CLEANUP_POLICY_COMPACT, parse_value
from kcompact.errors import ConfigError
from kcompact.value import frozen

__all__ = ["InternalTopicConfigs", "internal_topic_configs"]

# Kafka's defaults: GroupCoordinatorConfig.OFFSETS_TOPIC_SEGMENT_BYTES_DEFAULT and
# TransactionLogConfig.TRANSACTIONS_TOPIC_SEGMENT_BYTES_DEFAULT, both 100 MiB.
_SEGMENT_BYTES_DEFAULT = 100 * 1024 * 1024

# topic -> (broker key of its segment.bytes, its compression.type)
_CREATED_WITH: dict[str, tuple[str, str]] = {
    "__consumer_offsets": ("offsets.topic.segment.bytes", "producer"),
    "__transaction_state": ("transaction.state.log.segment.bytes", "uncompressed"),
}


@frozen
class InternalTopicConfigs:
    """The topic configs a broker creates one internal topic with.

    Attributes:
        overrides: topic key -> value, as the broker passes them at creation.
        synonyms: topic key -> the broker key its value came from, where one did
            (``offsets.topic.segment.bytes in server.properties``), for the source label.
        note: one sentence saying what was assumed and why.
    """

    overrides: dict[str, str]
    synonyms: dict[str, str]
    note: str


def internal_topic_configs(topic: str, props: Mapping[str, str],
                           props_path: Path | None = None) -> InternalTopicConfigs | None:
    """The configs a broker creates ``topic`` with, None for a topic it does not create itself.

    Args:
        topic: the topic name.
        props: the broker's ``server.properties`` (empty when not given).
        props_path: that file, named in errors.

    Returns:
        The configs; ``segment.bytes`` is the broker key's value in ``server.properties`` when set,
        else Kafka's default (104857600).

    Raises:
        ConfigError: that broker key holds a value ``segment.bytes`` cannot take (the message names
            the file and the key).
    """
    created = _CREATED_WITH.get(topic)
    if created is None:
        return None
    broker_key, compression = created
    raw = props.get(broker_key)
    if raw is not None and raw.strip():
        segment_bytes, origin = raw.strip(), f"{broker_key} in server.properties"
        try:
            parse_value("segment.bytes", segment_bytes)
        except ConfigError as err:
            raise ConfigError(f"{props_path}: {broker_key}={segment_bytes}: {err.args[0].partition(': ')[2]} "
                              f"(the segment.bytes of {topic})") from None
    else:
        segment_bytes, origin = str(_SEGMENT_BYTES_DEFAULT), f"{broker_key}, Kafka's default"
    overrides = {"cleanup.policy": CLEANUP_POLICY_COMPACT, "compression.type": compression,
                 "segment.bytes": segment_bytes}  # fmt: skip
    note = (f"{topic} is an internal topic the broker creates with the topic configs "
            f"cleanup.policy=compact, compression.type={compression} and "
            f"segment.bytes=<{broker_key}>; its topic configuration is unknown here, so kcompact "
            f"assumes them, with segment.bytes={segment_bytes} ({origin})")  # fmt: skip
    return InternalTopicConfigs(overrides, {"segment.bytes": origin}, note)
