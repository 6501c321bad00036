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
* ``kraft/`` - the KRaft metadata log: its records (``records``, ``record_types``; read with
  :mod:`kcompact.records.messages.reader`) and their replay into topics and configs
  (``metadata_state``).
* ``source_files`` and ``effective`` - where a partition's config sources are on disk, and the config it
  really has with each value's source; ``config_keys`` - Kafka's keys that kcompact models.

(``__consumer_offsets`` records are not configuration: they are decoded in
:mod:`kcompact.records.messages`.)

Layering: imports ``kcompact.records``, ``kcompact.segment`` and ``kcompact.errors`` only.
"""
