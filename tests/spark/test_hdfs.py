"""``hdfs://`` for real, against Hadoop's MiniDFSCluster on 127.0.0.1 (``tests/hdfs``): Spark writes
``--output hdfs://…`` with the HDFS client pyspark ships (no package to add), and inputs are read from the same
HDFS over WebHDFS (``webhdfs://``, fsspec's pure-Python client). An ``hdfs://`` *input* goes through pyarrow's
HadoopFileSystem, which needs libhdfs.so (Hadoop's native client, shipped only in Hadoop's binary
distribution): without it the command says so in one line before Spark starts."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner, Result

from kcompact.cli.main import cli
from kcompact.spark.export import spark_export
from tests.conftest import copy_tree_writable
from tests.spark.logdirs import NOW, build_log_dir
from tests.spark.test_export import parquet_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": "200"}, catch_exceptions=False, prog_name="kcompact")


def webhdfs(urls: dict[str, str]) -> Any:
    import fsspec

    fs, _ = fsspec.core.url_to_fs(urls["webhdfs"])
    return fs


def hdfs_parquet_rows(urls: dict[str, str], path: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = pq.read_table(path, filesystem=webhdfs(urls)).to_pylist()
    return rows


@pytest.fixture
def hdfs_log_dir(hdfs_urls: dict[str, str], tmp_path: Path) -> tuple[Path, str]:
    """A log dir built here and its copy uploaded to HDFS: the local path and the HDFS path."""
    log_dir = build_log_dir(tmp_path / "logs", 2)
    remote = f"/kcompact-{uuid.uuid4().hex[:12]}/logs"
    fs = webhdfs(hdfs_urls)
    for path in sorted(log_dir.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"{remote}/{path.relative_to(log_dir)}")
    return log_dir, remote


def test_spark_export_reads_hdfs_over_webhdfs_and_writes_hdfs(
    spark: SparkSession, hdfs_urls: dict[str, str], hdfs_log_dir: tuple[Path, str], tmp_path: Path
) -> None:
    log_dir, remote = hdfs_log_dir
    output = f"{hdfs_urls['hdfs']}{remote}-records"

    result = run("spark", "export", f"{hdfs_urls['webhdfs']}{remote}", "--output", output)

    assert result.exit_code == 0, result.output
    local = spark_export(spark, [log_dir], tmp_path / "local")
    assert f"{local.records} records of 2 partitions ({local.segments} segments) written to {output}" in result.stdout
    written = hdfs_parquet_rows(hdfs_urls, f"{remote}-records")
    assert sorted(written, key=lambda r: (r["topic"], r["partition"], r["offset"])) == parquet_rows(tmp_path / "local")


def test_spark_clean_writes_its_rows_to_hdfs(
    spark: SparkSession, hdfs_urls: dict[str, str], tmp_path: Path
) -> None:
    copy = copy_tree_writable(build_log_dir(tmp_path / "built", 2), tmp_path / "logs")
    remote = f"/kcompact-{uuid.uuid4().hex[:12]}/stats"

    result = run("spark", "clean", str(copy), "--config", "cleanup.policy=compact", "--now-ms", str(NOW),
                 "--output", f"{hdfs_urls['hdfs']}{remote}", "--json")

    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)["partitions"]
    written = hdfs_parquet_rows(hdfs_urls, remote)
    assert sorted((r["topic"], r["partition"], r["status"], r["bytes_written"]) for r in written) == sorted(
        (r["topic"], r["partition"], r["status"], r["bytes_written"]) for r in printed)
    assert {r["status"] for r in printed} == {"cleaned"}


def _libhdfs_loads(url: str) -> bool:
    import fsspec

    try:
        fsspec.core.url_to_fs(url)
    except OSError:
        return False
    return True


def test_an_hdfs_input_without_libhdfs_is_one_line_before_the_session(
    hdfs_urls: dict[str, str], hdfs_log_dir: tuple[Path, str], tmp_path: Path, session_starts: list[str | None]
) -> None:
    _, remote = hdfs_log_dir
    url = f"{hdfs_urls['hdfs']}{remote}"
    if _libhdfs_loads(url):
        pytest.skip("pyarrow loads libhdfs here: hdfs:// inputs are read directly")

    result = run("spark", "export", url, "--output", str(tmp_path / "out"))

    assert result.exit_code == 2
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(f"kcompact: error: {url}: cannot open its file system: OSError: ")
    assert re.search(r"OSError: [^;]*load lib(jvm|hdfs)", line)  # which comes first depends on JAVA_HOME
    assert line.endswith("expected pyarrow's HadoopFileSystem to load: libhdfs.so (Hadoop's native client, from a "
                         "Hadoop distribution: ARROW_LIBHDFS_DIR), JAVA_HOME and Hadoop's jars on CLASSPATH; or read "
                         "the same files over WebHDFS: webhdfs://NAMENODE:HTTP_PORT/…")
    assert session_starts == []
