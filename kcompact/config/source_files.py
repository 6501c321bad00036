"""Where a partition's configuration sources are on disk, and what each says (before resolution).

A stopped broker keeps every layer of a topic's configuration in files: ``server.properties``, the
log dir's ``meta.properties`` (the node id whose dynamic config applies), and the KRaft metadata log
``__cluster_metadata-0`` (topic overrides, per-broker and cluster-wide dynamic configs). This module
finds those files for one partition directory and reads them; :mod:`kcompact.config.effective`
resolves the layers in Kafka's order. Every source that is missing or cannot be trusted adds a note
instead of a guess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from kcompact.config.server_properties import (
    metadata_log_dir,
    node_id,
    read_server_properties_cached,
)
from kcompact.errors import ConfigError
from kcompact.segment.metadata_files import read_partition_topic_id
from kcompact.segment.partition import META_PROPERTIES, METADATA_TOPIC
from kcompact.text import plural_noun
from kcompact.value import mutable

if TYPE_CHECKING:  # the metadata log's reader is imported where one is read (most runs have none)
    from kcompact.config.kraft.metadata_state import MetadataState

SERVER_PROPERTIES_ENV = "KCOMPACT_SERVER_PROPERTIES"
METADATA_PARTITION = "__cluster_metadata-0"


def _server_properties_path(argument: str | os.PathLike[str] | None) -> Path | None:
    if argument is not None:
        return Path(argument)
    from_env = os.environ.get(SERVER_PROPERTIES_ENV, "").strip()
    return Path(from_env) if from_env else None


def _node_id(log_dir: Path, props: Mapping[str, str], props_path: Path | None,
             notes: list[str]) -> int | None:
    """``node.id`` (or ``broker.id``) of the log dir's meta.properties, else of server.properties."""
    try:
        configured = node_id(props)
    except ConfigError as err:
        raise ConfigError(f"{props_path}: {err}") from None
    meta_path = log_dir / META_PROPERTIES
    if not meta_path.is_file():
        return configured
    try:
        found = node_id(read_server_properties_cached(meta_path))
    except ConfigError as err:
        raise ConfigError(f"{meta_path}: {err}") from None
    if found is None:
        return configured
    if configured is not None and configured != found:
        notes.append(f"{meta_path} says node {found} but {props_path} says {configured} (a broker "
                     f"would refuse to start); kcompact uses the log dir's node {found}")  # fmt: skip
    return found


def _configured_metadata_dir(props: Mapping[str, str]) -> Path | None:
    """``metadata.log.dir`` (else the first ``log.dirs``) when server.properties sets either."""
    if not any(key in props for key in ("metadata.log.dir", "log.dirs", "log.dir")):
        return None  # Kafka's /tmp/kafka-logs default would point at whatever is on this machine
    return Path(metadata_log_dir(props)) / METADATA_PARTITION


def _find_metadata_dir(log_dir: Path, props: Mapping[str, str],
                       argument: str | os.PathLike[str] | None, notes: list[str]) -> Path | None:
    """The ``__cluster_metadata-0`` directory to replay, None when there is none (noted)."""
    if argument is not None:
        given = Path(argument)
        chosen = given if given.name == METADATA_PARTITION else given / METADATA_PARTITION
        if not chosen.is_dir():
            raise ConfigError(f"{given}: no metadata log; expected metadata.log.dir (holding "
                              f"{METADATA_PARTITION}) or that directory itself")  # fmt: skip
        return chosen
    beside = log_dir / METADATA_PARTITION
    configured = _configured_metadata_dir(props)
    if configured is not None:
        if configured.is_dir():
            if beside.is_dir() and not os.path.samefile(beside, configured):
                notes.append(f"read the metadata log {configured} named by server.properties; "
                             f"the one beside the partition ({beside}) was not read")  # fmt: skip
            return configured
        notes.append(f"server.properties places the metadata log at {configured}, which does not "
                     f"exist here; looking beside the partition")  # fmt: skip
    if beside.is_dir():
        return beside
    notes.append(f"no KRaft metadata log ({beside} does not exist; give --metadata-dir): topic "
                 "overrides and dynamic broker configs are unknown (a ZooKeeper cluster keeps them "
                 "in ZooKeeper); give them with --config")  # fmt: skip
    return None


def _check_same_cluster(log_dir: Path, metadata_dir: Path) -> None:
    """Refuse a metadata log of another cluster (both log dirs' meta.properties name a cluster.id)."""
    ours, theirs = log_dir / META_PROPERTIES, metadata_dir.parent / META_PROPERTIES
    if not (ours.is_file() and theirs.is_file()):
        return
    mine = read_server_properties_cached(ours).get("cluster.id")
    other = read_server_properties_cached(theirs).get("cluster.id")
    if mine and other and mine != other:
        raise ConfigError(f"{metadata_dir}: metadata log of another cluster; expected cluster.id "
                          f"{mine} (from {ours}), found {other} (from {theirs})")  # fmt: skip


def _topic_overrides(partition_dir: Path, topic: str, state: MetadataState,
                     notes: list[str]) -> tuple[dict[str, str] | None, str | None, str | None]:
    """The topic's overrides (None when unknown, noted), its id, and why they may be incomplete (None
    when known: a complete history), matched as Kafka matches them.

    Kafka looks the directory's topic name up in the metadata image and compares the live id with
    the one in ``partition.metadata``; a different id makes the log a stray of another incarnation.
    """
    dir_id = read_partition_topic_id(partition_dir)
    live_id = state.topics_by_name.get(topic)
    if live_id is not None and dir_id in (None, live_id):
        # An incomplete history may lack a record that sets or removes an override: the overrides
        # found are used, but what no override sets (Kafka's default) is not known.
        unknown = None if state.complete else "the metadata log's history is incomplete"
        return state.topic_config_overrides(topic), live_id, unknown
    if live_id is None and dir_id is None:
        what = f"topic {topic} is not in the metadata log"
    elif live_id is None:
        what = f"topic id {dir_id} (partition.metadata) is not a live topic in the metadata log"
    else:
        what = (f"partition.metadata names topic id {dir_id} but the live topic {topic} has id "
                f"{live_id} (a deleted incarnation, or another cluster's files)")  # fmt: skip
    why = "" if state.complete else " (its history is incomplete)"
    notes.append(f"{what}{why}: its topic overrides are unknown and the broker-level sources "
                 "decide; give the topic's configs with --config")  # fmt: skip
    return None, dir_id, f"{what}{why}"


def _broker_levels(state: MetadataState, node: int | None,
                   notes: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """This broker's dynamic config and the cluster default, with notes on what is unknown."""
    if not state.complete:
        notes.append(f"the metadata log's history is incomplete: {state.unresolved_reason}")
    others = sorted(name for name in state.broker_configs if name != "")
    if node is None and others:
        brokers = f"{plural_noun(len(others), 'broker')} {', '.join(others)}"
        notes.append(f"dynamic configs exist for {brokers} but this log dir's "
                     "node id is unknown (no meta.properties, no node.id); they are not applied")
    return state.broker_config(node), state.cluster_default_config()


@mutable
class FoundSources:
    """What was found for one partition, before resolution (``topic_overrides`` None: unknown)."""

    server_properties: Path | None = None
    props: dict[str, str] = field(default_factory=dict)
    node: int | None = None
    metadata_dir: Path | None = None
    state: MetadataState | None = None
    topic_overrides: dict[str, str] | None = None
    topic_id: str | None = None
    topic_unknown: str | None = None  # why the topic's overrides are not all known (None: they are)
    broker: dict[str, str] = field(default_factory=dict)
    cluster: dict[str, str] = field(default_factory=dict)


def gather_sources(part: Path, topic: str, server_properties: str | os.PathLike[str] | None,
            metadata_dir: str | os.PathLike[str] | None, notes: list[str]) -> FoundSources:
    """Find and read every configuration source of one partition (see the module docstring).

    Args:
        part: the partition directory (absolute).
        topic: its topic.
        server_properties: ``--server-properties`` (None: ``$KCOMPACT_SERVER_PROPERTIES``, else none).
        metadata_dir: ``--metadata-dir`` (None: where server.properties puts it, else beside).
        notes: receives a sentence for each source that is missing or unknown.

    Returns:
        The :class:`FoundSources`.

    Raises:
        ConfigError: a given file is missing or bad, or the metadata log is another cluster's.
        CorruptDataError: the metadata log does not parse.
    """
    found = FoundSources(server_properties=_server_properties_path(server_properties))
    if found.server_properties is not None:
        found.props = read_server_properties_cached(found.server_properties)
    found.node = _node_id(part.parent, found.props, found.server_properties, notes)
    found.metadata_dir = _find_metadata_dir(part.parent, found.props, metadata_dir, notes)
    if found.metadata_dir is None:
        found.topic_id = read_partition_topic_id(part)
        found.topic_unknown = "no KRaft metadata log was found"
        return found
    _check_same_cluster(part.parent, found.metadata_dir)
    from kcompact.config.kraft.metadata_state import cached_metadata_state

    found.state = cached_metadata_state(found.metadata_dir)
    found.broker, found.cluster = _broker_levels(found.state, found.node, notes)
    if topic == METADATA_TOPIC:
        found.topic_overrides = {}  # KRaft's own log has no topic record and no overrides
    else:
        found.topic_overrides, found.topic_id, found.topic_unknown = _topic_overrides(
            part, topic, found.state, notes)
    return found
