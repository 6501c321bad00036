"""Kafka's log model, as its ``storage/internals/log`` keeps it: what every command that reads a partition
needs to know of it, cleaning or not.

* ``state/`` — a partition's loaded state (``log_state``: segments' next offsets and timestamps, producer
  state, aborted transactions, the high watermark and last stable offset, as ``LogLoader.load`` leaves
  them), what a ranking already loaded (``known_state``), and the places Kafka's cleaner throws
  (``cleaner_throws``);
* ``offset_map/`` — the cleaner's offset map (``SkimpyOffsetMap``) and the other keep-or-drop oracles;
* ``rules/`` — Kafka's pure rules over that state: the cleanable range and the cleaner's order
  (``LogCleanerManager``), grouping (``Cleaner.groupSegmentsBySize``), the batch and record decisions
  (``MemoryRecords.filterTo`` with the cleaner's ``RecordFilter``), transactions, producer state, the
  high watermark and the replica fence. They read no files.

It sits between ``config`` and ``cleaner`` (an import-linter contract holds it): ``inspect``, ``repair``
and ``report`` read a log through it without depending on the cleaner.
"""
