"""The configuration one partition directory really has, found offline from the broker's own files.

Why: the cleaner's choices (what is dirty, which tombstones expire, how segments are grouped) depend
on the topic's effective configuration, and a stopped broker keeps every layer of it on disk. This
module finds those files for a partition directory and resolves them in Kafka's order (see
:func:`kcompact.config.topic_config.resolve_config`), highest first:

1. ``--config`` (kcompact only);
2. the topic's dynamic overrides: ConfigRecords of resource TOPIC in ``__cluster_metadata-0``;
3. this broker's dynamic config: resource BROKER named by the ``node.id`` of the log dir's
   ``meta.properties`` (``broker.id`` in older log dirs; else ``server.properties``);
4. the cluster-wide dynamic default: resource BROKER with the empty name;
5. ``server.properties``: the ``server_properties`` argument, else ``$KCOMPACT_SERVER_PROPERTIES``;
6. Kafka's default.

The metadata log is ``--metadata-dir`` (a ``metadata.log.dir`` or the ``__cluster_metadata-0``
directory itself), else ``metadata.log.dir`` (or the first ``log.dirs``) of ``server.properties``
when that directory is on disk, else ``<log-dir>/__cluster_metadata-0`` beside the partition.

Never guessed, always said: when the history is incomplete, the topic id is unknown or there is no
metadata log, a note says so and the lower sources decide. A value a history missing records *after*
those it read does give (a snapshot's with the log after it gone, the log's before a gap) is the value
as of the last record read, not the present: a record missing from disk may have changed it
(``MetadataState.later_records_missing``; a history missing only its beginning is the latest word on
what it read). Each such value carries
``ConfigValue.last_known_offset`` ("last known at metadata offset N" in reports) and a
``cleanup.policy`` of that kind is *unknown* for what ``clean`` may do (:attr:`EffectiveConfig.known_policy`
is None; ``--assume-compact`` stands in for it). ``cleanup.policy`` is shown as a broker
would use it: Kafka's default ``delete`` when no source sets it. Whether that default is *known*
(the topic's overrides were read from a complete metadata log) or only the fallback for overrides
kcompact could not read is kept in :attr:`EffectiveConfig.topic_config_unknown` and said in a note,
because ``clean`` compacts only a partition known to be compacted. Two rules add values no Kafka
source gave, each with its own source and a note:

* ``__consumer_offsets`` and ``__transaction_state`` are created by the broker with topic configs of
  its own (``cleanup.policy=compact``, a ``compression.type``, ``segment.bytes`` from
  ``offsets.topic.segment.bytes`` / ``transaction.state.log.segment.bytes``); when their topic
  overrides cannot be read, those are assumed (source ``"assumed"``; see
  :mod:`kcompact.config.internal_topics`).
* ``assume_compact=True`` (``--assume-compact``) makes ``compact`` the policy of a partition whose
  policy is *unknown*: no source sets one and the topic's overrides could not be read (no metadata
  log, an incomplete history, a topic id it does not know); source ``"assume-compact"``. It never
  applies where the policy is known, be it Kafka's default ``delete`` of a topic the metadata log
  shows without an override (a note says so); an explicit policy always wins, even one only last
  known: a last known policy without ``compact`` (a topic override ``delete`` in an incomplete history,
  as ksqlDB's command topic must have) is never replaced by an assumption, this one or an internal
  topic's (a note says so).

Files are cached by (path, size, mtime) and the metadata state by its directory's listing
(:func:`~kcompact.config.kraft.metadata_state.cached_metadata_state`): a log dir of thousands of partitions
replays its metadata log once, and a changed file is read again.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kcompact.config.config_keys import CLEANUP_POLICY_COMPACT, format_value
from kcompact.config.internal_topics import internal_topic_configs
from kcompact.config.source_files import FoundSources, gather_sources
from kcompact.config.topic_config import ConfigValue, TopicConfig, resolve_config
from kcompact.errors import ConfigError
from kcompact.segment.names import parse_partition_dir_name
from kcompact.segment.partition import METADATA_TOPIC
from kcompact.value import frozen

if TYPE_CHECKING:  # only annotations: the KRaft reader is imported where a log dir has metadata (source_files)
    from kcompact.config.kraft.metadata_state import MetadataState, PartitionAssignment

__all__ = [
    "ASSUMED_COMPACT",
    "ASSUMED_COMPACT_FOR_LAST_KNOWN",
    "ASSUME_COMPACT_NOT_APPLIED",
    "ASSUME_COMPACT_NOT_APPLIED_EXPLICIT",
    "SOURCE_ASSUMED",
    "SOURCE_ASSUME_COMPACT",
    "EffectiveConfig",
    "describe_source",
    "has_compact",
    "is_last_known",
    "partition_config",
]

SOURCE_ASSUMED = "assumed"
SOURCE_ASSUME_COMPACT = "assume-compact"
ASSUMED_COMPACT = (
    "cleanup.policy: no source sets it (--config, topic override, dynamic config, server.properties "
    "log.cleanup.policy); compact assumed by --assume-compact, where a broker would use Kafka's "
    "default 'delete'"
)
ASSUMED_COMPACT_FOR_LAST_KNOWN = (
    "cleanup.policy: only last known (the metadata history is incomplete); compact assumed by "
    "--assume-compact"
)
ASSUME_COMPACT_NOT_APPLIED_EXPLICIT = (
    "--assume-compact was not applied: it stands in for a cleanup.policy that is unknown, and this topic's "
    "last known one is explicit and has no compact (ksqlDB's command topic, for one, must not be compacted)"
)
ASSUME_COMPACT_NOT_APPLIED = (
    "--assume-compact was not applied: it stands in for a cleanup.policy that is unknown, and this "
    "topic's is known (its overrides were read from a complete metadata log)"
)
METADATA_LOG_SOURCES = ("topic", "cluster-default")  # and "broker:<id>": the sources a metadata log gives
SOURCE_LABELS = {
    "cli": "--config",
    "topic": "topic override",
    "cluster-default": "dynamic cluster default",
    "server.properties": "server.properties",
    "default": "Kafka's default",
    SOURCE_ASSUMED: "assumed by kcompact",
    SOURCE_ASSUME_COMPACT: "--assume-compact",
}


@frozen
class EffectiveConfig:
    """A partition's effective configuration, where each value came from, and what was assumed.

    Attributes:
        config: the configuration to act on.
        values: one :class:`ConfigValue` per modelled key (key, typed value, source label).
        notes: what is unknown or assumed, one sentence each; empty when every source was read.
        partition_dir: the partition directory.
        topic: the topic of the directory's name.
        topic_id: the id in ``partition.metadata`` (else the live id of the topic's name), if any.
        node_id: the broker whose dynamic config applies, if known.
        server_properties: the ``server.properties`` file read, if any.
        metadata_dir: the ``__cluster_metadata-0`` directory replayed, if any.
        metadata_complete: whether that replay reached back to the cluster's start.
        topic_config_unknown: why the topic's own overrides could not be read (no metadata log, an
            incomplete history, a topic missing from it), None when they were: a policy from
            Kafka's default is then known, not merely the fallback.
        known_policy: ``cleanup.policy`` as the broker's own files give it (no ``--config``, no
            ``--assume-compact``) when that is known: set by some source, or Kafka's default for a
            topic whose overrides were read; None when it is unknown (no source sets it and the
            topic's overrides could not be read, or it is only last known: an incomplete metadata
            history gave it).
        last_known_policy: ``cleanup.policy`` as the broker's own files give it when it is only last
            known (an incomplete metadata history gave it), else None: explicit all the same, so one
            without ``compact`` is never overridden by ``--assume-compact`` or a log dir's ``--config``.
        assignment: the partition's replicas, ISR and leader as the metadata log leaves them, when it
            holds the live topic of the directory and no record is missing after those read; else None.
    """

    config: TopicConfig
    values: list[ConfigValue]
    notes: list[str]
    partition_dir: Path = Path()
    topic: str = ""
    topic_id: str | None = None
    node_id: int | None = None
    server_properties: Path | None = None
    metadata_dir: Path | None = None
    metadata_complete: bool | None = None
    topic_config_unknown: str | None = None
    known_policy: ConfigValue | None = None
    last_known_policy: ConfigValue | None = None
    assignment: PartitionAssignment | None = None

    def value(self, key: str) -> ConfigValue:
        """The :class:`ConfigValue` of one Kafka key (KeyError for a key kcompact does not model)."""
        for item in self.values:
            if item.key == key:
                return item
        raise KeyError(key)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the files read, every value as Kafka prints it with its source, notes."""
        return {
            "partition_dir": str(self.partition_dir), "topic": self.topic,
            "topic_id": self.topic_id, "node_id": self.node_id,
            "server_properties": _str_or_none(self.server_properties),
            "metadata_dir": _str_or_none(self.metadata_dir),
            "metadata_complete": self.metadata_complete,
            "topic_config_unknown": self.topic_config_unknown,
            "values": [{"key": v.key, "value": None if v.value is None else format_value(v.value),
                        "source": v.source, "synonym": v.synonym,
                        "last_known_at_metadata_offset": v.last_known_offset} for v in self.values],
            "notes": list(self.notes),
        }  # fmt: skip


def _str_or_none(path: Path | None) -> str | None:
    return None if path is None else str(path)


def describe_source(value: ConfigValue) -> str:
    """A source label for people: ``topic override``, ``dynamic config of broker 1`` ...

    Args:
        value: a resolved value.

    Returns:
        The label, with the broker key actually set when it differs (``server.properties:
        log.retention.hours``).
    """
    if value.source.startswith("broker:"):
        label = f"dynamic config of broker {value.source.removeprefix('broker:')}"
    else:
        label = SOURCE_LABELS.get(value.source, value.source)
    label = label if value.synonym is None else f"{label}: {value.synonym}"
    if value.last_known_offset is not None:
        label += f", last known at metadata offset {value.last_known_offset}"
    return label


def is_last_known(value: ConfigValue) -> bool:
    """Whether ``value`` is only the last known one of an incomplete metadata history (not the present)."""
    return value.last_known_offset is not None


def has_compact(value: ConfigValue) -> bool:
    """Whether a ``cleanup.policy`` value lists ``compact`` (an empty or unknown value does not)."""
    return isinstance(value.value, tuple) and CLEANUP_POLICY_COMPACT in value.value


def _last_known(values: list[ConfigValue], state: MetadataState | None) -> list[ConfigValue]:
    """The values a metadata history missing records after those it read gave, marked as last known
    at its last record read (a history missing only its beginning gives the latest word on what it read)."""
    if state is None or not state.later_records_missing:
        return values
    return [dataclasses.replace(v, last_known_offset=state.end_offset - 1)
            if v.source in METADATA_LOG_SOURCES or v.source.startswith("broker:") else v for v in values]


# --- resolving --------------------------------------------------------------------------------------


def _internal_topic_overrides(topic: str, overrides: dict[str, str] | None, found: FoundSources,
                              notes: list[str]) -> tuple[dict[str, str], dict[str, str] | None]:
    """The overrides to resolve with, and for assumed ones (the configs the broker creates an
    internal topic with) the source label of each key, None when nothing was assumed."""
    if overrides is not None:
        return overrides, None
    created = internal_topic_configs(topic, found.props, found.server_properties)
    if created is None:
        return {}, None
    notes.append(created.note)
    return created.overrides, {key: created.synonyms.get(key, "") for key in created.overrides}


def _label_assumed(values: list[ConfigValue], assumed: Mapping[str, str]) -> list[ConfigValue]:
    """Relabel the values taken from assumed topic configs (source ``"assumed"``)."""
    return [ConfigValue(v.key, v.value, SOURCE_ASSUMED, assumed[v.key] or None)
            if v.source == "topic" and v.key in assumed else v for v in values]  # fmt: skip


def _replace(values: list[ConfigValue], new: ConfigValue) -> list[ConfigValue]:
    return [new if item.key == new.key else item for item in values]


def _product_rules(topic: str, config: TopicConfig, values: list[ConfigValue], found: FoundSources,
                   assume_compact: bool, notes: list[str]) -> tuple[TopicConfig, list[ConfigValue]]:
    """Say what a policy from Kafka's default means here (or assume ``compact`` when asked to);
    explain the segment size."""
    policy = next(v for v in values if v.key == "cleanup.policy")
    if topic == METADATA_TOPIC:
        notes.append("__cluster_metadata is KRaft's own log (metadata.log.* broker configs govern "
                     "it); no cleaner touches it")  # fmt: skip
    elif is_last_known(policy) and not has_compact(policy):
        notes.append(f"{_last_known_policy_note(policy)}; kcompact runs no retention on it, and compacts it "
                     "only with --config cleanup.policy=compact and the partition named alone: an explicit "
                     "policy without compact is never replaced by an assumption")
        if assume_compact:
            notes.append(ASSUME_COMPACT_NOT_APPLIED_EXPLICIT)
    elif is_last_known(policy) and internal_topic_configs(topic, found.props, found.server_properties):
        # as where its overrides are unknown: the policy the broker creates the topic with
        notes.append(f"{_last_known_policy_note(policy)}; {topic} is an internal topic the broker creates "
                     "with cleanup.policy=compact, so kcompact assumes that")
        assumed = (CLEANUP_POLICY_COMPACT,)
        config = config.with_overrides({"cleanup.policy": assumed})
        values = _replace(values, ConfigValue("cleanup.policy", assumed, SOURCE_ASSUMED))
    elif is_last_known(policy):
        notes.append(f"{_last_known_policy_note(policy)}; kcompact treats the policy as unknown (clean "
                     "compacts it only with --assume-compact or --config cleanup.policy=..., and runs no "
                     "retention on it)")
        if assume_compact:
            notes.append(ASSUMED_COMPACT_FOR_LAST_KNOWN)
            assumed = (CLEANUP_POLICY_COMPACT,)
            config = config.with_overrides({"cleanup.policy": assumed})
            values = _replace(values, ConfigValue("cleanup.policy", assumed, SOURCE_ASSUME_COMPACT))
    elif policy.source == "default" and assume_compact and found.topic_unknown is not None:
        notes.append(ASSUMED_COMPACT)
        assumed = (CLEANUP_POLICY_COMPACT,)
        config = config.with_overrides({"cleanup.policy": assumed})
        values = _replace(values, ConfigValue("cleanup.policy", assumed, SOURCE_ASSUME_COMPACT))
    elif policy.source == "default":
        notes.append(_default_policy_note(found))
        if assume_compact:
            notes.append(ASSUME_COMPACT_NOT_APPLIED)
    internal = next(v for v in values if v.key == "internal.segment.bytes")
    if internal.value is not None:
        notes.append(f"internal.segment.bytes={internal.value} ({describe_source(internal)}) sets "
                     "the segment size; segment.bytes is not used (Kafka's LogConfig.segmentSize)")
    return config, values


def _last_known_policy_note(policy: ConfigValue) -> str:
    """Why a ``cleanup.policy`` from an incomplete metadata history is treated as unknown."""
    return (f"cleanup.policy={format_value(policy.value)} ({describe_source(policy)}): records of the "
            "metadata log are missing from disk (or unread) after what was read, and one may have "
            "changed it")


def _default_policy_note(found: FoundSources) -> str:
    """What Kafka's default ``cleanup.policy`` means for this partition: known, or a fallback."""
    if found.topic_unknown is not None:
        return (f"cleanup.policy: Kafka's default 'delete' unless the topic overrides it, and its "
                f"overrides are unknown ({found.topic_unknown})")
    note = ("cleanup.policy: no topic override, dynamic config or --config sets it, so a broker "
            "uses Kafka's default 'delete'")
    if found.server_properties is None:
        note += ("; server.properties was not given (--server-properties), and a "
                 "log.cleanup.policy there would change this")
    return note


def partition_config(
    partition_dir: str | os.PathLike[str],
    *,
    cli_overrides: Mapping[str, str],
    server_properties: str | os.PathLike[str] | None = None,
    metadata_dir: str | os.PathLike[str] | None = None,
    assume_compact: bool = False,
) -> EffectiveConfig:
    """The effective configuration of one partition, from the files a stopped broker left.

    Args:
        partition_dir: a ``<topic>-<partition>`` directory inside a log dir.
        cli_overrides: ``--config`` pairs (Kafka key -> value); they beat every other source.
        server_properties: the broker's ``server.properties``; None reads
            ``$KCOMPACT_SERVER_PROPERTIES`` when set, else none is used.
        metadata_dir: ``metadata.log.dir`` or the ``__cluster_metadata-0`` directory; None looks
            where ``server.properties`` puts it, then beside the partition.
        assume_compact: make ``cleanup.policy=compact`` the value when no source sets one and the
            topic's overrides are unknown (``--assume-compact``; source ``"assume-compact"``).

    Returns:
        The :class:`EffectiveConfig`; its notes say what was unknown or assumed.

    Raises:
        ConfigError: the name is not a partition directory's, a given file or directory is
            missing or unreadable, a source holds a bad value (the message names the source), a
            ``partition.metadata`` is malformed, or the metadata log is another cluster's.
        CorruptDataError: (a subclass) the metadata log does not parse (the message names the file).
    """
    part = Path(os.path.abspath(partition_dir))  # "." names its directory too
    name = parse_partition_dir_name(part.name)
    if name is None:
        raise ConfigError(
            f"{part}: not a partition directory; expected a name like <topic>-<partition>")
    notes: list[str] = []
    found = gather_sources(part, name.topic, server_properties, metadata_dir, notes)
    overrides, assumed = _internal_topic_overrides(name.topic, found.topic_overrides, found, notes)
    config, values = _resolve(part, cli_overrides, overrides, found, assumed)
    values = _last_known(values, found.state)
    brokers_own = _last_known(_resolve(part, {k: v for k, v in cli_overrides.items() if k != "cleanup.policy"},
                                       overrides, found, assumed)[1], found.state)
    known_policy = next(v for v in brokers_own if v.key == "cleanup.policy")
    unknown = None if assumed is not None else found.topic_unknown
    config, values = _product_rules(name.topic, config, values, found, assume_compact, notes)
    return EffectiveConfig(
        config=config, values=values, notes=notes, partition_dir=part, topic=name.topic,
        topic_id=found.topic_id, node_id=found.node, server_properties=found.server_properties,
        metadata_dir=found.metadata_dir,
        metadata_complete=None if found.state is None else found.state.complete,
        topic_config_unknown=unknown,
        known_policy=None if (known_policy.source == "default" and unknown is not None)
        or is_last_known(known_policy) else known_policy,
        last_known_policy=known_policy if is_last_known(known_policy) else None,
        assignment=_assignment(found, name.partition))


def _assignment(found: FoundSources, partition: int) -> PartitionAssignment | None:
    """The partition's assignment from the metadata log: only for its live topic (its overrides were
    found) and a history with no record missing after those read (a later one may have moved it)."""
    state = found.state
    if state is None or found.topic_id is None or found.topic_overrides is None or state.later_records_missing:
        return None
    return state.assignments.get((found.topic_id, partition))


def _resolve(part: Path, cli: Mapping[str, str], overrides: Mapping[str, str], found: FoundSources,
             assumed: Mapping[str, str] | None) -> tuple[TopicConfig, list[ConfigValue]]:
    """Resolve the layers in Kafka's order (assumed internal topic configs labelled so)."""
    try:
        config, values = resolve_config(
            cli=cli, topic_overrides=overrides, broker_dynamic=found.broker,
            cluster_dynamic=found.cluster, server_properties=found.props, broker_id=found.node)
    except ConfigError as err:
        raise ConfigError(f"{part}: {err}") from None
    if assumed is not None:
        values = _label_assumed(values, assumed)
    return config, values
