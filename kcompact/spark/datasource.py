"""The ``kcompact`` Spark data source: Kafka partition logs read as a DataFrame (Spark 4's Python API).

::

    spark.dataSource.register(KcompactDataSource)
    spark.read.format("kcompact").option("paths", '["/var/kafka/logs"]')
         .option("isolation", "read_committed").load()

Options: ``paths`` (a JSON list of partition directories and/or log dirs; or ``path``, one of them,
also given as ``load(path)``) and ``isolation`` (``read_uncommitted``, the default, or
``read_committed``; see ``kcompact.spark.export``). The schema is fixed
(``kcompact.spark.export.EXPORT_COLUMNS``). The driver lists the segments; each segment is one input
partition, read on an executor by ``kcompact.spark.export.iter_segment_columns`` and handed to Spark
as Arrow record batches.

This module imports pyspark and pyarrow at the top: import it only where Spark runs (the export job
imports it inside a function).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kcompact.errors import ConfigError
from kcompact.spark.export import (
    EXPORT_SCHEMA,
    FORMAT_NAME,
    ISOLATION_LEVELS,
    READ_UNCOMMITTED,
    SegmentRef,
    iter_segment_columns,
    list_segments,
)

ARROW_SCHEMA = pa.schema([  # EXPORT_COLUMNS, as Arrow types
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ("is_tombstone", pa.bool_()),
    ("is_control", pa.bool_()),
    ("is_transactional", pa.bool_()),
    ("producer_id", pa.int64()),
])


class SegmentPartition(InputPartition):
    """One segment of one partition directory (picklable: plain strings and ints)."""

    def __init__(self, ref: SegmentRef) -> None:
        super().__init__(ref)
        self.ref = ref


class KcompactDataSource(DataSource):
    """``spark.read.format("kcompact")``: the records of Kafka partition logs."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return EXPORT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KcompactReader(_paths(self.options), _isolation(self.options))


class KcompactReader(DataSourceReader):
    """Lists segments on the driver; reads one segment per task."""

    def __init__(self, paths: list[str], isolation: str) -> None:
        self.paths = paths
        self.isolation = isolation

    def partitions(self) -> Sequence[InputPartition]:
        return [SegmentPartition(ref) for ref in list_segments(self.paths)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SegmentPartition):  # Spark hands back what partitions() made
            raise TypeError(f"expected a SegmentPartition, found {type(partition).__name__}")
        for columns in iter_segment_columns(partition.ref, self.isolation):
            yield pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)


def _paths(options: Any) -> list[str]:
    raw = options.get("paths")
    if raw is None:
        single = options.get("path")
        if single is None:
            raise ConfigError("kcompact data source: which logs to read; expected option 'paths' "
                              "(a JSON list) or 'path', found neither")
        return [str(single)]
    try:
        paths = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"kcompact data source: option 'paths'; expected a JSON list of paths, "
                          f"found {raw!r}") from err
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ConfigError(f"kcompact data source: option 'paths'; expected a JSON list of paths, found {raw!r}")
    return paths


def _isolation(options: Any) -> str:
    isolation = str(options.get("isolation", READ_UNCOMMITTED)).lower()
    if isolation not in ISOLATION_LEVELS:
        raise ConfigError(f"kcompact data source: option 'isolation'; expected one of "
                          f"{', '.join(ISOLATION_LEVELS)}, found {isolation!r}")
    return isolation
