"""The ``kcompact`` Spark data source: Kafka partition logs read as a DataFrame (Spark 4's Python API).

::

    spark.dataSource.register(KcompactDataSource)
    spark.read.format("kcompact").option("paths", '["/var/kafka/logs"]')
         .option("isolation", "read_committed").load()

Options: ``paths`` (a JSON list of partition directories and/or log dirs, local or fsspec URLs; or ``path``, one of
them, also given as ``load(path)``), ``isolation`` (``read_uncommitted``, the default, or
``read_committed``; see ``kcompact.inspect.export``) and ``split_bytes`` (segment bytes per input
partition, default ``SPLIT_BYTES``) and ``storage_options`` (a JSON object of fsspec options for URLs). The schema is
fixed (``kcompact.inspect.export.EXPORT_COLUMNS``); ``error_rows`` (``true``; default ``false``) adds an
:data:`ERROR_COLUMN`: a split whose data does not parse then ends with one row holding only the error's one-line
message, where by default its task fails (``spark export`` reads this way, so that no task fails and Spark prints no
task error). ``refs`` (a JSON list of ``[partition_dir, base_offset, size, identity]``: segments already listed, read
instead of listing ``paths`` again, each checked to be the file listed: ``SegmentRef``; the identity may be left out)
and ``views`` (a JSON list of ``CommittedView.as_dict``: read_committed views already found) are how ``spark
export`` hands its first job's findings to the read. The driver lists the segments (or takes ``refs``) and packs
them into input partitions; each is read on an executor by
``kcompact.inspect.export.iter_split_columns`` (a segment behind a URL by byte range, its own bytes only) and
handed to Spark as Arrow record batches.

This module imports pyspark and pyarrow at the top: import it only where Spark runs (the export job
imports it inside a function).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kcompact.errors import ConfigError, KcompactError
from kcompact.inspect.export import (
    ISOLATION_LEVELS,
    READ_UNCOMMITTED,
    SPLIT_BYTES,
    CommittedView,
    SegmentRef,
    arrow_schema,
    iter_split_columns,
    list_segments,
    split_segments,
)
from kcompact.spark.export_schema import ERROR_COLUMN, EXPORT_SCHEMA, FORMAT_NAME, error_payload

ARROW_SCHEMA = arrow_schema()
ARROW_SCHEMA_WITH_ERRORS = ARROW_SCHEMA.append(pa.field(ERROR_COLUMN, pa.string()))


class SegmentSplit(InputPartition):
    """Consecutive segments read by one task (picklable: plain strings and ints)."""

    def __init__(self, refs: tuple[SegmentRef, ...]) -> None:
        super().__init__(refs)
        self.refs = refs


class KcompactDataSource(DataSource):
    """``spark.read.format("kcompact")``: the records of Kafka partition logs."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return f"{EXPORT_SCHEMA}, {ERROR_COLUMN} string" if _error_rows(self.options) else EXPORT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KcompactReader(_paths(self.options), _isolation(self.options), _split_bytes(self.options),
                              _storage_options(self.options), error_rows=_error_rows(self.options),
                              refs=_refs(self.options), views=_views(self.options))


class KcompactReader(DataSourceReader):
    """Lists and packs segments on the driver; reads one split per task."""

    def __init__(self, paths: list[str], isolation: str, split_bytes: int = SPLIT_BYTES,
                 storage_options: dict[str, Any] | None = None, *, error_rows: bool = False,
                 refs: list[SegmentRef] | None = None, views: dict[str, CommittedView] | None = None) -> None:
        self.paths = paths
        self.isolation = isolation
        self.split_bytes = split_bytes
        self.storage_options = storage_options or {}
        self.error_rows = error_rows
        self.refs = refs
        self.views = views or {}

    def partitions(self) -> Sequence[InputPartition]:
        listed = list_segments(self.paths, self.storage_options) if self.refs is None else self.refs
        return [SegmentSplit(refs) for refs in split_segments(listed, self.split_bytes)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SegmentSplit):  # Spark hands back what partitions() made
            raise TypeError(f"expected a SegmentSplit, found {type(partition).__name__}")
        if not self.error_rows:
            for columns in self._columns(partition):
                yield pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)
            return
        try:
            for columns in self._columns(partition):
                yield pa.RecordBatch.from_pydict({**columns, ERROR_COLUMN: [None] * len(columns["offset"])},
                                                 schema=ARROW_SCHEMA_WITH_ERRORS)
        except KcompactError as err:  # the task ends well; the driver sees the row and fails the export
            row: dict[str, list[Any]] = {field.name: [None] for field in ARROW_SCHEMA}
            yield pa.RecordBatch.from_pydict({**row, ERROR_COLUMN: [error_payload(err)]},
                                             schema=ARROW_SCHEMA_WITH_ERRORS)


    def _columns(self, split: SegmentSplit) -> Iterator[dict[str, list[Any]]]:
        views = {ref.partition_dir: self.views[ref.partition_dir] for ref in split.refs
                 if ref.partition_dir in self.views}
        return iter_split_columns(split.refs, self.isolation, storage_options=self.storage_options, views=views)


def _refs(options: Any) -> list[SegmentRef] | None:
    """The ``refs`` option: segments listed already, as ``[partition_dir, base_offset, size, identity]`` (the
    identity optional; None: list ``paths`` here)."""
    raw = options.get("refs")
    if raw is None:
        return None
    try:
        return [SegmentRef(str(part), int(base), int(size), str(identity[0]) if identity else "")
                for part, base, size, *identity in json.loads(raw)]
    except (json.JSONDecodeError, TypeError, ValueError) as err:
        raise ConfigError(f"kcompact data source: option 'refs'; expected a JSON list of [partition_dir, "
                          f"base_offset, size, identity], found {raw[:80]!r}") from err


def _views(options: Any) -> dict[str, CommittedView]:
    """The ``views`` option: read_committed views found already (``CommittedView.as_dict``), by partition."""
    raw = options.get("views")
    if raw is None:
        return {}
    try:
        views = [CommittedView.from_dict(found) for found in json.loads(raw)]
    except (json.JSONDecodeError, TypeError, ValueError, KeyError) as err:
        raise ConfigError(f"kcompact data source: option 'views'; expected a JSON list of views, "
                          f"found {raw[:80]!r}") from err
    return {view.stop.partition_dir: view for view in views}


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


def _storage_options(options: Any) -> dict[str, Any]:
    raw = options.get("storage_options")
    if raw is None:
        return {}
    try:
        found = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"kcompact data source: option 'storage_options'; expected a JSON object, "
                          f"found {raw!r}") from err
    if not isinstance(found, dict):
        raise ConfigError(f"kcompact data source: option 'storage_options'; expected a JSON object, found {raw!r}")
    return found


def _error_rows(options: Any) -> bool:
    raw = str(options.get("error_rows", "false")).lower()
    if raw not in ("true", "false"):
        raise ConfigError(f"kcompact data source: option 'error_rows'; expected true or false, found {raw!r}")
    return raw == "true"


def _isolation(options: Any) -> str:
    isolation = str(options.get("isolation", READ_UNCOMMITTED)).lower()
    if isolation not in ISOLATION_LEVELS:
        raise ConfigError(f"kcompact data source: option 'isolation'; expected one of "
                          f"{', '.join(ISOLATION_LEVELS)}, found {isolation!r}")
    return isolation


def _split_bytes(options: Any) -> int:
    raw = str(options.get("split_bytes", SPLIT_BYTES))
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"kcompact data source: option 'split_bytes'; expected a positive number of "
                          f"bytes, found {raw!r}")
    return int(raw)
