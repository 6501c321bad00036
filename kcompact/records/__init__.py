"""Bytes to values and back for Kafka partition logs: batches, records, codecs, checksums.

This layer knows Kafka's on-disk formats and nothing about files: every function takes ``bytes``,
``memoryview`` or ``mmap`` and a position, and errors carry positions relative to that buffer (the
``segment`` layer that opened the file adds the path with ``err.located``). It imports only the
standard library, ``kcompact.errors`` and codec libraries.

Modules: ``varint`` and ``crc`` (primitives), ``batch_header`` (the v2 header layout and
``RecordBatch``), ``batch`` (decoding and the framing walk), ``batch_encoding`` (encoders), ``record``
(v2 records), ``control`` (transaction markers), ``compression`` (codecs), ``lz4_framing`` (Kafka's LZ4
frame subset and XXH32), ``legacy`` (magic 0/1), ``filter`` (the cleaner's batch rebuild), ``scan/``
(the columnar hot path: its ``reference`` in pure Python, the C kernels ``_accel.c`` behind ``accel``)
and ``messages/`` (Kafka's generated message encoding: ``__consumer_offsets`` records).
"""
