"""Log dirs behind fsspec URLs: ``spark export`` and ``spark inspect dirty-ratio`` read an ``s3://`` copy
from a real S3-protocol server on 127.0.0.1 (moto's) and give what they give for the local original;
``spark clean`` refuses a URL with one line."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kcompact.inspect.dirty_ratio import DirtyRatioRow, dirty_ratio_report
from kcompact.spark.export import spark_export
from kcompact.spark.inspect_job import spark_dirty_ratio
from tests.counting_s3 import upload_log_dir
from tests.spark.logdirs import COMPACT, NOW
from tests.spark.test_export import format_layer_rows, parquet_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.counting_s3 import CountingS3


@pytest.fixture
def s3_copy(s3_endpoint: str, log_dir: Path) -> tuple[str, dict[str, Any]]:
    """The export tests' log dir uploaded to a new bucket; its URL and the storage options to read it."""
    return upload_log_dir(s3_endpoint, log_dir)


@pytest.fixture
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kcompact.segment.checkpoint import write_offset_checkpoint
    from tests.spark.logdirs import build_legacy_partition, build_log_dir, build_partition
    from tests.spark.test_export import LOG_START

    root = build_log_dir(tmp_path_factory.mktemp("remote") / "logs", 3)
    build_partition(root, "pending", 0, open_txn=True)
    build_legacy_partition(root)
    write_offset_checkpoint(root / "log-start-offset-checkpoint", LOG_START)
    return root


@pytest.mark.parametrize("latest", [False, True], ids=["every-record", "latest"])
def test_spark_export_of_an_s3_copy_equals_the_export_of_the_local_log_dir(
    spark: SparkSession, log_dir: Path, s3_copy: tuple[str, dict[str, Any]], tmp_path: Path, latest: bool
) -> None:
    url, options = s3_copy

    remote = spark_export(spark, [url], tmp_path / "remote", latest=latest, storage_options=options)
    local = spark_export(spark, [log_dir], tmp_path / "local", latest=latest)

    assert parquet_rows(tmp_path / "remote") == parquet_rows(tmp_path / "local")
    assert (remote.records, remote.partitions, remote.segments) == (local.records, 5, local.segments)
    if not latest:
        assert parquet_rows(tmp_path / "remote") == format_layer_rows(log_dir)


def test_spark_dirty_ratio_of_an_s3_copy_equals_the_serial_report_of_the_local_log_dir(
    spark: SparkSession, log_dir: Path, s3_copy: tuple[str, dict[str, Any]]
) -> None:
    url, options = s3_copy

    remote = spark_dirty_ratio(spark, [url], cli_overrides=COMPACT, now_ms=NOW, storage_options=options).rows
    serial = dirty_ratio_report([log_dir], cli_overrides=COMPACT, now_ms=NOW)

    assert [row.partition_dir for row in remote] == [f"{url}/{Path(row.partition_dir).name}" for row in serial]
    assert [_located(row, url) for row in remote] == [_located(row, str(log_dir)) for row in serial]
    assert any(url in warning for row in remote for warning in row.warnings)


def _located(row: DirtyRatioRow, log_dir: str) -> DirtyRatioRow:
    """The row with its log dir's location taken out of its texts."""
    return dataclasses.replace(row, partition_dir="", warnings=[w.replace(log_dir, "LOGDIR") for w in row.warnings],
                               error=row.error and row.error.replace(log_dir, "LOGDIR"))


@pytest.mark.parametrize("latest", [False, True], ids=["every-record", "latest"])
def test_spark_export_of_a_url_reads_each_segment_once_per_job_by_range(
    spark: SparkSession, log_dir: Path, counting_s3: CountingS3, tmp_path: Path, latest: bool
) -> None:
    """Each task reads its split's segments, each in one ranged request; the driver lists the log dir
    once. With --latest each partition's view also reads its files once (in the checking job)."""
    import s3fs

    options: dict[str, Any] = {"endpoint_url": counting_s3.endpoint, "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)
    bucket = f"kcompact-{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    sizes = {f"{bucket}/logs/{p.relative_to(log_dir)}": p.stat().st_size for p in log_dir.rglob("*") if p.is_file()}
    for name in sizes:
        fs.put_file(str(log_dir / name.split("/logs/", 1)[1]), name)
    url = f"s3://{bucket}/logs"
    segments = {name: size for name, size in sizes.items() if name.endswith(".log") and size > 0}
    counting_s3.clear()

    remote = spark_export(spark, [url], tmp_path / "remote", latest=latest, split_bytes=600, storage_options=options)

    read = counting_s3.bytes_by_key()
    assert {name: read.get(name) for name in segments} == {n: (3 if latest else 2) * s for n, s in segments.items()}
    ranged = {r.range for r in counting_s3.reads() if r.key in segments}  # one request per segment and task
    assert ranged == {f"bytes=0-{size - 1}" for size in segments.values()} | ({None} if latest else set())
    others = {name: n for name, n in read.items() if name not in segments}
    if latest:  # a partition's files once; the log dir's checkpoint files once per partition
        assert all(n == sizes[name] for name, n in others.items() if name.count("/") == 3)
        assert all(n <= 5 * sizes[name] for name, n in others.items() if name.count("/") == 2)
    else:
        assert others == {}
        assert len(counting_s3.listings()) == 1
    local = spark_export(spark, [log_dir], tmp_path / "local", latest=latest)
    assert parquet_rows(tmp_path / "remote") == parquet_rows(tmp_path / "local") != []
    assert (remote.records, remote.segments, remote.stops) == (
        local.records, local.segments, tuple(dataclasses.replace(s, partition_dir=s.partition_dir.replace(
            str(log_dir), url)) for s in local.stops))
