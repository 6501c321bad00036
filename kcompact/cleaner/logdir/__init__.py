"""Cleaning a log dir: which partitions, in which order, and the report rows.

``run`` (the broker's ``LogCleanerManager.grabFilthiestCompactedLog`` order), the compaction gate and
its keyless sample, and the report row of each partition.
"""
