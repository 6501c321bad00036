"""``--output s3a://…`` for real: Spark's own writer through hadoop-aws, brought the way a Spark user brings it
(``--conf spark.jars.packages=org.apache.hadoop:hadoop-aws:<pyspark's Hadoop>``: resolved from Maven Central
into an Ivy cache outside the repository as the JVM starts), against the S3 server on 127.0.0.1.

Each command runs as a user runs it, in its own process: ``spark.jars.packages`` is read when a JVM starts,
and this test run's shared session started long before. The first run on a machine downloads hadoop-aws and
the AWS SDK bundle (~650 MB, tens of seconds); later runs find them in the cache (``$KCOMPACT_IVY_CACHE``,
else ``~/.cache/kcompact/ivy``). ``ivysettings.xml`` beside this file resolves from Maven Central alone:
Spark's default resolvers try ``~/.m2`` first, where an earlier ``mvn`` may have left a pom without its jar
(Ivy then stops at the missing jar), and a host this machine cannot reach last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kcompact.spark.export import spark_export
from kcompact.spark.hadoop_fs import bundled_hadoop_version
from tests.conftest import copy_tree_writable
from tests.spark.logdirs import NOW, build_log_dir
from tests.spark.test_export import parquet_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

IVY_CACHE_ENV = "KCOMPACT_IVY_CACHE"
IVY_SETTINGS = Path(__file__).with_name("ivysettings.xml")
RUN_TIMEOUT_S = 900  # the first run downloads the AWS SDK bundle


def ivy_cache() -> Path:
    """Where Spark's Ivy keeps the packages it resolved (outside the repository)."""
    return Path(os.environ.get(IVY_CACHE_ENV) or Path.home() / ".cache" / "kcompact" / "ivy")


def package_conf() -> list[str]:
    """The ``--conf`` pairs that bring hadoop-aws, as a user passes them."""
    return ["--conf", f"spark.jars.packages=org.apache.hadoop:hadoop-aws:{bundled_hadoop_version()}",
            "--conf", f"spark.jars.ivy={ivy_cache()}", "--conf", f"spark.jars.ivySettings={IVY_SETTINGS}"]


def s3a_conf(endpoint: str) -> list[str]:
    """S3A's settings for the S3 server on 127.0.0.1 (``spark.hadoop.*`` reaches Hadoop's configuration)."""
    settings = {"endpoint": endpoint, "endpoint.region": "us-east-1", "path.style.access": "true",
                "access.key": "testing", "secret.key": "testing"}
    return [arg for key, value in settings.items() for arg in ("--conf", f"spark.hadoop.fs.s3a.{key}={value}")]


def kcompact(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kcompact", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=RUN_TIMEOUT_S, check=False, env={**os.environ, "COLUMNS": "200"})


def s3_parquet_rows(endpoint: str, url: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
    rows: list[dict[str, Any]] = pq.read_table(url.removeprefix("s3a://"), filesystem=fs).to_pylist()
    return rows


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    import s3fs

    name = f"kcompact-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=s3_endpoint, key="testing", secret="testing").mkdir(name)
    return name


def test_spark_export_writes_s3a_with_hadoop_aws_from_spark_jars_packages(
    spark: SparkSession, s3_endpoint: str, bucket: str, tmp_path: Path
) -> None:
    log_dir = build_log_dir(tmp_path / "logs", 2)
    url = f"s3a://{bucket}/records"

    done = kcompact("spark", "export", str(log_dir), "--output", url, "--master", "local[1]", *package_conf(),
                    *s3a_conf(s3_endpoint), cwd=tmp_path)

    assert done.returncode == 0, done.stderr[-3000:]
    local = spark_export(spark, [log_dir], tmp_path / "local")
    assert f"{local.records} records of 2 partitions ({local.segments} segments) written to {url}" in done.stdout
    remote = sorted(s3_parquet_rows(s3_endpoint, url), key=lambda r: (r["topic"], r["partition"], r["offset"]))
    assert remote == parquet_rows(tmp_path / "local")


def test_spark_clean_writes_its_rows_to_s3a(s3_endpoint: str, bucket: str, tmp_path: Path) -> None:
    copy = copy_tree_writable(build_log_dir(tmp_path / "built", 2), tmp_path / "logs")
    url = f"s3a://{bucket}/stats"

    done = kcompact("spark", "clean", str(copy), "--config", "cleanup.policy=compact", "--now-ms", str(NOW),
                    "--output", url, "--json", "--master", "local[1]", *package_conf(), *s3a_conf(s3_endpoint),
                    cwd=tmp_path)

    assert done.returncode == 0, done.stderr[-3000:]
    printed = json.loads(done.stdout)["partitions"]
    written = s3_parquet_rows(s3_endpoint, url)
    assert sorted((r["topic"], r["partition"], r["status"], r["bytes_written"]) for r in written) == sorted(
        (r["topic"], r["partition"], r["status"], r["bytes_written"]) for r in printed)
    assert {r["status"] for r in printed} == {"cleaned"}
