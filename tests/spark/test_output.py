"""``--output`` reaches Spark as typed: URIs untouched, a plain path refused with a cluster master."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kcompact.errors import KcompactError, RefusedError
from kcompact.spark.export import spark_export
from kcompact.spark.output import output_target
from tests.spark.logdirs import build_log_dir
from tests.spark.test_spark_cli import parquet_rows, run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.mark.parametrize("uri", ["hdfs://namenode:9000/exports/orders", "s3a://bucket/exports/orders",
                                 "abfss://box@account.dfs.core.windows.net/exports", "file:///shared/exports"])
def test_a_uri_reaches_spark_untouched_whatever_the_master(uri: str) -> None:
    assert output_target(uri, "spark://127.0.0.1:7077") == uri
    assert output_target(uri, "local[2]") == uri


def test_a_plain_path_with_a_cluster_master_is_refused_asking_for_file_uri(tmp_path: Path) -> None:
    with pytest.raises(RefusedError) as caught:
        output_target("out.parquet", "spark://127.0.0.1:7077")
    message = str(caught.value)
    assert message.startswith("out.parquet: --output is a plain local path with master spark://127.0.0.1:7077")
    assert f"file://{Path('out.parquet').absolute()}" in message
    assert output_target(str(tmp_path / "out"), "local[*]") == str(tmp_path / "out")


def test_an_existing_file_uri_output_is_refused_naming_the_uri(tmp_path: Path) -> None:
    with pytest.raises(KcompactError, match=f"^file://{tmp_path}: the --output directory; expected a new"):
        output_target(f"file://{tmp_path}", "local[2]")


def test_spark_export_writes_to_a_file_uri_and_reports_it_as_given(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)
    uri = f"file://{tmp_path}/out"

    summary = spark_export(spark, [log_dir], uri)

    assert summary.output == uri
    assert len(parquet_rows(tmp_path / "out")) == summary.records > 0


def test_an_unwritable_uri_fails_with_one_line_naming_it_as_given(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 1)

    result = run("spark", "export", str(log_dir), "--output", "nosuchfs://host:9000/dir")

    assert result.exit_code == 2
    # checked before any job: no file system class for the scheme in Spark's JVM
    assert result.stderr.startswith("kcompact: error: nosuchfs://host:9000/dir: nosuchfs:// has no Hadoop file "
                                    "system in Spark's JVM; expected a package")
    assert result.stderr.rstrip().endswith('UnsupportedFileSystemException: No FileSystem for scheme "nosuchfs"')
    assert len(result.stderr.splitlines()) == 1
