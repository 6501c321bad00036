"""Kafka's pure cleaning rules: values in, decisions out (no file access).

Batch and record retention (``policy``, Kafka's ``Cleaner.cleanInto`` filter), transaction bookkeeping
(``transactions``, ``CleanedTransactionMetadata``), producer state replay (``producer_state``,
``ProducerStateManager``), segment grouping (``grouping``, ``Cleaner.groupSegmentsBySize``) and the
cleanable range with its wording (``ranges``, ``LogCleanerManager.cleanableOffsets``), and the replica
fence (``fence``: tombstones and markers other replicas may lack outlive their delete horizon).
"""
