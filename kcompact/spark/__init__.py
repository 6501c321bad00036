"""kcompact on Spark: distribution only — the serial library's entry points mapped over partitions.

Nothing here re-implements the format or the cleaner's rules; every task calls the same public
function the serial command calls (``clean_partition``, ``dirty_ratio_report``, the records layer).
pyspark is imported lazily (inside functions, or by ``datasource`` which only Spark-running code
imports), so a core install without the ``spark`` extra imports this package freely.

Modules:
    session      ``spark_session`` / ``command_session``: the one way a session is started.
    plan         which partitions ``spark clean`` cleans, with which configuration, in which order.
    clean_job    ``spark_clean``: one task per partition, rows -> DataFrame, checkpoint order settled.
    inspect_job  ``spark_dirty_ratio``: the serial report over slices of log dirs, ranks merged.
    export       ``spark_export``: records (or the latest value per key) as Parquet.
    datasource   the ``kcompact`` Python data source (``spark.read.format("kcompact")``).
    rows         row values and DDL schemas of the DataFrames.
    distributed_map, distributed_round   (S5) the distributed offset map for partitions too big for one task.
"""
