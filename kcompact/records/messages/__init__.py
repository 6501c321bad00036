"""Kafka's generated message encoding, and the ``__consumer_offsets`` records written with it.

``reader`` reads the classic and flexible encodings of Kafka's JSON-schema message classes (also
used by :mod:`kcompact.config.kraft` for metadata records); ``consumer_offsets`` decodes the group
coordinator's keys and values as ``kafka-dump-log --offsets-decoder`` shows them.
"""
