"""``spark inspect dirty-ratio``: the serial report's rows, field for field, whatever the slicing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kcompact.errors import KcompactError
from kcompact.inspect.dirty_ratio import DirtyRatioRow, dirty_ratio_report
from kcompact.segment.checkpoint import write_offset_checkpoint
from kcompact.spark.inspect_job import DIRTY_RATIO_COLUMNS, rank_rows, spark_dirty_ratio
from tests.conftest import real_fixture
from tests.spark.logdirs import COMPACT, NOW, build_log_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_rows_equal_the_serial_report_across_slices_and_log_dirs(spark: SparkSession, tmp_path: Path) -> None:
    first = build_log_dir(tmp_path / "a", 7)
    second = build_log_dir(tmp_path / "b", 3, topics=("t",))
    write_offset_checkpoint(first / "cleaner-offset-checkpoint", {("orders", 1): 19, ("users", 2): 6})
    (first / "orders-0" / "00000000000000000000.log").write_bytes(b"\x00" * 30)  # a row with an error
    paths = [first, second / "t-1"]

    report = spark_dirty_ratio(spark, paths, cli_overrides=COMPACT, now_ms=NOW)

    serial = dirty_ratio_report(paths, cli_overrides=COMPACT, now_ms=NOW)
    assert report.rows == serial
    assert [r.cleaner_rank for r in serial][:3] == [1, 2, 3]  # distinct ratios and ties both ranked
    assert any(r.error for r in serial)
    frame_rows = [row.asDict() for row in report.frame.collect()]
    assert frame_rows == [dataclasses.asdict(r) for r in serial]
    assert report.frame.columns == [f.name for f in dataclasses.fields(DirtyRatioRow)]


def test_rows_equal_the_serial_report_on_broker_written_log_dirs(spark: SparkSession) -> None:
    paths = [real_fixture("confluent512-lz4-logdir"), real_fixture("kraft37-cleaned-logdir")]
    report = spark_dirty_ratio(spark, paths, cli_overrides={}, now_ms=NOW)
    assert report.rows == dirty_ratio_report(paths, cli_overrides={}, now_ms=NOW)


def test_rank_rows_keeps_kafkas_order_across_slices() -> None:
    def row(name: str, ratio: float, rank: int | None) -> DirtyRatioRow:
        return DirtyRatioRow(topic=name, partition=0, partition_dir=name, cleanup_policy="compact",
                             dirty_ratio=ratio, eligible=rank is not None, cleaner_rank=rank)

    # Each slice ranked its own rows; ties keep the listing order (slice order, then the slice's rank).
    slices = [row("b", 0.6, 1), row("d", 0.6, 2), row("x", 0.9, None),
              row("a", 0.9, 1), row("c", 0.6, 2)]

    ranked = rank_rows(slices)

    assert [(r.topic, r.cleaner_rank) for r in ranked] == [
        ("a", 1), ("b", 2), ("d", 3), ("c", 4), ("x", None)]


def test_schema_follows_the_row_type() -> None:
    assert dict(DIRTY_RATIO_COLUMNS)["partition"] == "int"
    assert dict(DIRTY_RATIO_COLUMNS)["warnings"] == "array<string>"
    assert dict(DIRTY_RATIO_COLUMNS)["dirty_ratio"] == "double"


def test_a_path_that_is_not_a_log_dir_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(KcompactError, match="not a log dir or partition directory"):
        spark_dirty_ratio(spark, [tmp_path / "missing"], cli_overrides={})
