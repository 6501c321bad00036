"""What configuration a partition is cleaned with, and where each value came from.

A Kafka 4.1 broker takes a topic's effective config from six places, highest first: the command line
(``--config``, kcompact only), the topic's dynamic overrides, this broker's dynamic config, the
cluster-wide dynamic default, ``server.properties``, Kafka's defaults. In KRaft mode the three dynamic
layers and the topic ids live in the metadata partition ``__cluster_metadata-0``.

Modules:

* ``topic_config`` - :class:`TopicConfig`, Kafka's keys/defaults/validators/broker synonyms,
  ``parse_config_pairs`` for ``--config`` and ``resolve_config`` for the precedence.
* ``server_properties`` - ``server.properties`` read as Java's ``Properties.load`` does, and the
  ``log.dirs`` / ``metadata.log.dir`` / ``node.id`` helpers.
* ``kraft_records`` - decoding of metadata log records (a shared reader for Kafka's generated
  message encoding lives here too).
* ``metadata_state`` - replay of a metadata partition (snapshot + log) into topics and configs.
* ``offsets_records`` - ``__consumer_offsets`` keys and values, for dump and inspect.

Layering: imports ``kcompact.records``, ``kcompact.segment`` and ``kcompact.errors`` only.
"""

from __future__ import annotations

from kcompact.config.kraft.metadata_state import MetadataState, load_metadata_state
from kcompact.config.server_properties import (
    log_dirs,
    metadata_log_dir,
    node_id,
    read_server_properties,
)
from kcompact.config.topic_config import (
    BROKER_SYNONYMS,
    ConfigValue,
    TopicConfig,
    parse_config_pairs,
    resolve_config,
)

__all__ = [
    "BROKER_SYNONYMS",
    "ConfigValue",
    "MetadataState",
    "TopicConfig",
    "load_metadata_state",
    "log_dirs",
    "metadata_log_dir",
    "node_id",
    "parse_config_pairs",
    "read_server_properties",
    "resolve_config",
]
